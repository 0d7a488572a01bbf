//! `ken watch` and the watcher inside `ken serve`: keeps an index fresh.
//!
//! notify (inotify; polling where that is impossible) watches the folders
//! the indexing walk enters, one watch per folder, so ignored trees
//! (`target/`, `node_modules/`, `.ken/`, .gitignored folders) are never
//! watched; the git directory is watched for HEAD and refs. notify's
//! debouncer (full) groups events per path; this loop then waits until the
//! events settle, so a save, a `git checkout` or a formatter run over many
//! files become one update. A small set of changed paths is re-indexed by
//! walking only their folders ([`index::index_scoped`]); a large one, an
//! ignore file change, an event overflow or a branch switch re-runs the
//! whole incremental index (a stat per file against the catalog).
//!
//! Embedding follows in slices between lexical updates: it stops between
//! batches as soon as new events arrive, so it never delays freshness by more
//! than one batch. Branches deleted from git are garbage-collected on a schedule.
//! Every write goes through the index's writer lock, so a `ken index` at the
//! same time waits for the current update (and the watcher for it).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, PollWatcher, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{new_debouncer_opt, DebounceEventResult, Debouncer, NoCache};
use serde_json::json;

use crate::embed::Embedder;
use crate::index::semantic;
use crate::index::{self, IndexOptions, IndexReport};
use crate::source::discover::{self, Start};
use crate::source::git;
use crate::store::vectors::{self, VectorIndex};
use crate::store::{MetaKey, Store};

#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// How long a path must be quiet before its events are handled.
    pub debounce: Duration,
    pub index: IndexOptions,
    /// Compute embeddings for new chunks (in slices between updates).
    pub embed: bool,
    /// Event sets touching more paths than this walk the whole root.
    pub max_scoped_paths: usize,
    /// How often branches deleted from git are garbage-collected.
    pub gc_every: Duration,
    /// Poll instead of using inotify (also chosen automatically when inotify fails).
    pub poll: bool,
    pub poll_interval: Duration,
    /// One JSON line per event on stderr (for tools and tests) instead of log lines.
    pub json_events: bool,
    /// How long after the start embedding may begin: a server that a client
    /// starts only to check it (and closes within a second) loads no model.
    pub embed_after: Duration,
    /// After an embedding pass that finished, start the query adapter's fit
    /// in a background process when it is pending ([`crate::index::fit`]);
    /// only the ken executable can (it starts itself again).
    pub fit_adapter: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: Duration::from_millis(100),
            // Short tries, silently retried: a long `ken index` must not make the watcher wait or chatter.
            index: IndexOptions {
                lock_timeout: Duration::from_millis(900),
                ..IndexOptions::default()
            },
            embed: true,
            max_scoped_paths: 256,
            gc_every: Duration::from_secs(600),
            poll: crate::config::settings().watch_poll,
            poll_interval: Duration::from_secs(2),
            json_events: false,
            embed_after: Duration::ZERO,
            fit_adapter: false,
        }
    }
}

impl WatchOptions {
    /// The watcher of `ken serve`: embeds only once the server has lived a while.
    pub fn for_server() -> WatchOptions {
        WatchOptions {
            embed_after: SERVER_EMBED_AFTER,
            fit_adapter: true,
            ..WatchOptions::default()
        }
    }
}

/// Clients start a server to list its tools and close it within a second or
/// two (`claude mcp list`, `opencode mcp list`); a session lives far longer.
const SERVER_EMBED_AFTER: Duration = Duration::from_secs(5);

/// How often a watcher that is not the index's embedder checks whether the
/// one that is has gone.
const EMBEDDER_RETRY: Duration = Duration::from_secs(5);

/// Whether the user built this index without embeddings and wants it so.
pub fn embeddings_off(store: &Store) -> bool {
    store
        .meta(MetaKey::EmbeddingsOff)
        .ok()
        .flatten()
        .is_some_and(|v| v == "1")
}

/// Live counters of a running watcher.
#[derive(Debug, Default)]
pub struct WatchState {
    /// Index updates done since the start (the first, full one included).
    pub updates: AtomicU64,
    /// Paths noticed and not indexed yet.
    pub pending: AtomicU64,
    /// Files done and to do in the index update under way (for "indexing
    /// in progress" answers while the first one runs).
    pub indexing_done: AtomicU64,
    pub indexing_total: AtomicU64,
}

/// A watcher running on its own thread; stopped (and joined) on drop.
pub struct WatchHandle {
    stop: Arc<AtomicBool>,
    state: Arc<WatchState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WatchHandle {
    pub fn state(&self) -> Arc<WatchState> {
        self.state.clone()
    }
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts watching `root` on a background thread (for `ken serve`). Errors
/// after the start are logged, never printed to stdout.
pub fn spawn(root: PathBuf, index_dir: PathBuf, mut opts: WatchOptions) -> Result<WatchHandle> {
    check_root(&root, false)?;
    let stop = Arc::new(AtomicBool::new(false));
    let state = Arc::new(WatchState::default());
    let progress = state.clone();
    opts.index.reporter = opts.index.reporter.clone().with_sink(move |u| {
        if u.phase == "indexing" {
            progress.indexing_total.store(u.total, Ordering::SeqCst);
            progress.indexing_done.store(u.done, Ordering::SeqCst);
        }
    });
    let (stop_c, state_c) = (stop.clone(), state.clone());
    let thread = std::thread::Builder::new().name("ken-watch".into()).spawn(move || {
        if let Err(e) = run(&root, &index_dir, &opts, &stop_c, &state_c) {
            tracing::error!("the watcher stopped: {e:#}");
        }
    })?;
    Ok(WatchHandle {
        stop,
        state,
        thread: Some(thread),
    })
}

/// Refuses `/` and the home folder unless `allow` (`--allow-broad-root`).
pub fn check_root(root: &Path, allow: bool) -> Result<()> {
    if allow {
        return Ok(());
    }
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let home = dirs::home_dir().and_then(|h| h.canonicalize().ok());
    let what = if root.parent().is_none() {
        "the file system root"
    } else if home.as_deref() == Some(root.as_path()) {
        "your home folder"
    } else {
        return Ok(());
    };
    bail!(
        "refusing to index {} ({what}): that is rarely one codebase and would index everything below it; \
         run ken in a project folder, or pass --allow-broad-root to index it anyway",
        root.display()
    )
}

/// The file system watcher: inotify, or polling where inotify cannot work.
enum Backend {
    Native(Debouncer<RecommendedWatcher, NoCache>),
    Poll(Debouncer<PollWatcher, NoCache>),
}

impl Backend {
    fn watch(&mut self, path: &Path, recursive: bool) -> notify::Result<()> {
        let mode = if recursive {
            RecursiveMode::Recursive
        } else {
            RecursiveMode::NonRecursive
        };
        match self {
            Backend::Native(d) => d.watch(path, mode),
            Backend::Poll(d) => d.watch(path, mode),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Native(_) => "native",
            Backend::Poll(_) => "poll",
        }
    }
}

/// Events from the debouncer, with a count of batches not yet received (so
/// the embedding can yield without consuming them).
struct Events {
    rx: mpsc::Receiver<DebounceEventResult>,
    waiting: Arc<AtomicU64>,
}

impl Events {
    fn recv_timeout(&self, timeout: Duration) -> Result<DebounceEventResult, mpsc::RecvTimeoutError> {
        let r = self.rx.recv_timeout(timeout);
        if r.is_ok() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        r
    }
}

fn new_backend(opts: &WatchOptions, poll: bool) -> Result<(Backend, Events)> {
    let (tx, rx) = mpsc::channel();
    let waiting = Arc::new(AtomicU64::new(0));
    let w = waiting.clone();
    let handler = move |res: DebounceEventResult| {
        w.fetch_add(1, Ordering::SeqCst);
        let _ = tx.send(res);
    };
    let backend = if poll {
        let config = notify::Config::default().with_poll_interval(opts.poll_interval);
        Backend::Poll(new_debouncer_opt(opts.debounce, None, handler, NoCache, config)?)
    } else {
        Backend::Native(new_debouncer_opt(
            opts.debounce,
            None,
            handler,
            NoCache,
            notify::Config::default(),
        )?)
    };
    Ok((backend, Events { rx, waiting }))
}

/// inotify cannot take more watches (EMFILE/ENOSPC, or notify's own limit error).
fn is_watch_limit(e: &notify::Error) -> bool {
    match &e.kind {
        notify::ErrorKind::MaxFilesWatch => true,
        notify::ErrorKind::Io(io) => matches!(io.raw_os_error(), Some(libc::EMFILE | libc::ENOSPC | libc::ENFILE)),
        _ => false,
    }
}

/// File systems where inotify misses changes made by other machines.
fn is_network_fs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the zeroed struct for a valid C string path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    const NETWORK: &[i64] = &[0x6969, 0x517B, 0xFF53_4D42, 0xFE53_4D42, 0x0102_1997, 0x5346_414F];
    #[allow(clippy::unnecessary_cast)]
    NETWORK.contains(&(st.f_type as i64))
}

/// What the events since the last update ask for.
#[derive(Default)]
struct Dirty {
    starts: HashSet<Start>,
    /// Folders created since (to watch after the update).
    new_dirs: HashSet<PathBuf>,
    paths: HashSet<PathBuf>,
    full: bool,
    head: bool,
}

impl Dirty {
    fn is_empty(&self) -> bool {
        self.starts.is_empty() && !self.full && !self.head
    }
}

struct Watcher<'a> {
    root: &'a Path,
    index_dir: &'a Path,
    opts: &'a WatchOptions,
    state: &'a WatchState,
    git_dirs: Vec<PathBuf>,
    branch: String,
    commit: Option<String>,
    embedder: Option<Box<dyn Embedder>>,
    embed_pending: bool,
    /// Held while this process embeds the index (see [`semantic::EmbedderLock`]).
    embedder_lock: Option<semantic::EmbedderLock>,
    /// Not before this instant may embedding start (or the lock be tried again).
    embed_not_before: Instant,
    /// Warnings said, with when, so a repeating one is said once a minute at most.
    warned: std::collections::HashMap<String, Instant>,
}

/// Watches `root` until `stop` is set, keeping the index at `index_dir` fresh.
pub fn run(root: &Path, index_dir: &Path, opts: &WatchOptions, stop: &AtomicBool, state: &WatchState) -> Result<()> {
    let root = root
        .canonicalize()
        .with_context(|| format!("cannot watch {}: no such directory", root.display()))?;
    let head = git::head(&root);
    let git_dirs: Vec<PathBuf> = head
        .git_dir
        .as_deref()
        .map(|g| git::head_watch_dirs(g).into_iter().map(|(d, _)| d).collect())
        .unwrap_or_default();
    let mut w = Watcher {
        root: &root,
        index_dir,
        opts,
        state,
        git_dirs,
        branch: head.catalog_key(),
        commit: head.commit.clone(),
        embedder: None,
        embed_pending: opts.embed,
        embedder_lock: None,
        embed_not_before: Instant::now() + opts.embed_after,
        warned: Default::default(),
    };
    // Watch first, then catch up with whatever changed while nobody watched
    // (retried below if another process is writing the index now): an edit
    // made during that run, seconds on a large tree, is then seen by the run
    // or by its event, never lost.
    let (mut backend, events, folders) = w.start_watching(head.git_dir.as_deref())?;
    let mut dirty = Dirty {
        full: true,
        ..Dirty::default()
    };
    match w.update(&mut dirty) {
        Ok(()) => dirty = Dirty::default(),
        Err(e) => w.warn(&format!("index update postponed: {e:#}")),
    }
    {
        let store = Store::open_for_write(index_dir)?;
        store.set_meta(MetaKey::WatcherPid, &std::process::id().to_string())?;
    }
    w.event(
        json!({"event": "ready", "backend": backend.name(), "folders": folders}),
        || format!("watching {} ({folders} folders)", root.display()),
    );

    let mut last_gc = Instant::now() - opts.gc_every;
    let mut retry_at: Option<Instant> = None;
    let settle = opts.debounce / 2;
    while !stop.load(Ordering::SeqCst) {
        let wait = if !dirty.is_empty() || w.embed_pending {
            Duration::from_millis(200)
        } else {
            Duration::from_millis(500)
        };
        match events.recv_timeout(wait) {
            Ok(first) => {
                // Let the burst settle: a checkout or a formatter arrives in several batches.
                let deadline = Instant::now() + Duration::from_secs(3);
                w.classify(first, &mut dirty);
                while Instant::now() < deadline {
                    match events.recv_timeout(settle) {
                        Ok(more) => w.classify(more, &mut dirty),
                        Err(_) => break,
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        state.pending.store(dirty.paths.len() as u64, Ordering::SeqCst);
        // A git command in progress (a long checkout) holds index.lock: index
        // what it did once it is done, never a half-switched tree.
        if !dirty.is_empty() && w.git_busy() {
            retry_at = Some(Instant::now() + Duration::from_millis(50));
            continue;
        }
        if !dirty.is_empty() && retry_at.is_none_or(|t| Instant::now() >= t) {
            // New folders are watched before they are walked: a file created
            // meanwhile is either seen by the walk or by its event.
            let new_dirs: Vec<PathBuf> = dirty.new_dirs.drain().collect();
            if !new_dirs.is_empty() {
                let trees: Vec<Start> = new_dirs.into_iter().map(Start::Tree).collect();
                let found = discover::discover_from(&root, &trees, &opts.index.discover);
                if let Err(e) = w.add_watches(&mut backend, &found.dirs, None) {
                    w.warn(&format!("cannot watch new folders: {e}"));
                }
            }
            match w.update(&mut dirty) {
                Ok(()) => {
                    dirty = Dirty::default();
                    retry_at = None;
                    state.pending.store(0, Ordering::SeqCst);
                }
                Err(e) => {
                    // Another writer (a `ken index`) holds the lock, or the update failed: try again soon.
                    w.warn(&format!("index update postponed: {e:#}"));
                    retry_at = Some(Instant::now() + Duration::from_secs(1));
                }
            }
            continue;
        }
        if w.embed_pending && events.waiting.load(Ordering::SeqCst) == 0 && w.may_embed() {
            let waiting = events.waiting.clone();
            let pause = move || waiting.load(Ordering::SeqCst) > 0 || stop.load(Ordering::SeqCst);
            if let Err(e) = w.embed_slice(&pause) {
                w.warn(&format!("embedding postponed: {e:#}"));
            }
            // Leave a gap for a `ken index` waiting for the lock.
            std::thread::sleep(Duration::from_millis(150));
            continue;
        }
        if last_gc.elapsed() >= opts.gc_every {
            last_gc = Instant::now();
            match w.gc() {
                Ok(dead) if !dead.is_empty() => w.event(json!({"event": "gc", "branches": dead}), || {
                    format!("dropped the index of deleted branches {dead:?}")
                }),
                Ok(_) => {}
                Err(e) => w.warn(&format!("branch garbage collection postponed: {e:#}")),
            }
        }
    }
    if let Ok(store) = Store::open_for_write(index_dir) {
        if store.meta(MetaKey::WatcherPid).ok().flatten() == Some(std::process::id().to_string()) {
            let _ = store.delete_meta(MetaKey::WatcherPid);
        }
    }
    w.event(json!({"event": "stopped"}), || "stopped watching".to_string());
    Ok(())
}

impl Watcher<'_> {
    /// Watches every folder the indexing walk enters and the git
    /// directory, by notifications or, on a network file system or past the
    /// inotify limit, by polling; says it is ready.
    /// Watches every folder of the root (and git's HEAD files); returns how many folders.
    fn start_watching(&mut self, git_dir: Option<&Path>) -> Result<(Backend, Events, usize)> {
        let poll = self.opts.poll || is_network_fs(self.root);
        if poll && !self.opts.poll {
            self.warn("network file system: watching by polling every few seconds");
        }
        let (mut backend, mut events) = new_backend(self.opts, poll)?;
        let dirs = discover::discover(self.root, &self.opts.index.discover).dirs;
        if let Err(e) = self.add_watches(&mut backend, &dirs, git_dir) {
            if !is_watch_limit(&e) {
                return Err(e).context("watching the root");
            }
            self.warn(&format!(
                "cannot watch {} folders with inotify ({e}); polling instead (raise fs.inotify.max_user_watches to avoid this)",
                dirs.len()
            ));
            (backend, events) = new_backend(self.opts, true)?;
            self.add_watches(&mut backend, &dirs, git_dir)?;
        }
        Ok((backend, events, dirs.len()))
    }

    fn git_busy(&self) -> bool {
        self.git_dirs.first().is_some_and(|g| g.join("index.lock").exists())
    }

    fn add_watches(&self, backend: &mut Backend, dirs: &[PathBuf], git_dir: Option<&Path>) -> notify::Result<()> {
        for dir in dirs {
            match backend.watch(dir, false) {
                Ok(()) => {}
                Err(e) if is_watch_limit(&e) => return Err(e),
                // A folder removed meanwhile: its removal is an event of its parent.
                Err(e) => tracing::debug!("not watching {}: {e}", dir.display()),
            }
        }
        if let Some(g) = git_dir {
            for (dir, recursive) in git::head_watch_dirs(g) {
                if dir.is_dir() {
                    backend.watch(&dir, recursive)?;
                }
            }
        }
        Ok(())
    }

    /// Adds what a batch of events asks for to `dirty`.
    fn classify(&mut self, batch: DebounceEventResult, dirty: &mut Dirty) {
        let events = match batch {
            Ok(events) => events,
            Err(errors) => {
                for e in errors {
                    self.warn(&format!("file watcher: {e}; re-checking every file"));
                }
                dirty.full = true;
                return;
            }
        };
        let default_excludes = self.opts.index.discover.default_excludes;
        for event in events {
            // Reads (ours included: indexing opens every changed file) are no change.
            if let EventKind::Access(kind) = event.kind {
                if kind != AccessKind::Close(AccessMode::Write) {
                    continue;
                }
            }
            if event.need_rescan() {
                tracing::debug!("rescan asked by {event:?}");
                dirty.full = true;
            }
            for path in &event.paths {
                if self.git_dirs.iter().any(|g| path.starts_with(g)) {
                    if let Ok(rel) = path.strip_prefix(self.git_dirs.iter().find(|g| path.starts_with(g)).unwrap()) {
                        dirty.head |= git::is_head_file(rel);
                    }
                    continue;
                }
                let Some(rel) = discover::relative_path(self.root, path) else {
                    continue;
                };
                if rel.is_empty() {
                    continue;
                }
                // Hidden and excluded folders are never walked (nor watched, but
                // events of a folder's own name come from its parent).
                let mut parts = rel.split('/');
                let last = parts.next_back().unwrap_or_default();
                if parts.any(|p| p.starts_with('.') || discover::is_excluded_dir(p, default_excludes)) {
                    continue;
                }
                if matches!(last, ".gitignore" | ".ignore" | ".kenignore") {
                    tracing::debug!("ignore file changed: {rel}");
                    dirty.full = true;
                    continue;
                }
                dirty.paths.insert(path.clone());
                let parent = path.parent().unwrap_or(self.root).to_path_buf();
                if path.is_dir() {
                    if last.starts_with('.') || discover::is_excluded_dir(last, default_excludes) {
                        continue;
                    }
                    dirty.starts.insert(Start::Tree(path.clone()));
                    dirty.new_dirs.insert(path.clone());
                } else if !path.exists() {
                    // A file or a folder went away: drop what the catalog has of either.
                    dirty.starts.insert(Start::Files(parent));
                    dirty.starts.insert(Start::Tree(path.clone()));
                } else {
                    dirty.starts.insert(Start::Files(parent));
                }
            }
        }
        if dirty.paths.len() > self.opts.max_scoped_paths {
            dirty.full = true;
        }
    }

    /// One index update for what `dirty` names.
    fn update(&mut self, dirty: &mut Dirty) -> Result<()> {
        let started = Instant::now();
        let head = git::head(self.root);
        let branch = head.catalog_key();
        let switched = branch != self.branch;
        if dirty.starts.is_empty() && !dirty.full && !switched {
            // HEAD moved within the branch (a commit) and no file changed: only the record of it.
            if head.commit != self.commit {
                let store = Store::open_for_write(self.index_dir)?;
                let _lock = store.lock_for_write(self.opts.index.lock_timeout)?;
                store.set_meta(MetaKey::HeadCommit, head.commit.as_deref().unwrap_or(""))?;
                self.commit = head.commit;
            }
            return Ok(());
        }
        let full = dirty.full || switched;
        let starts: Vec<Start> = dirty.starts.iter().cloned().collect();
        let scope = (!full).then_some(starts.as_slice());
        let report = index::index_scoped(self.root, self.index_dir, &self.opts.index, scope)?;
        self.branch = branch;
        self.commit = head.commit;
        self.embed_pending |= self.opts.embed && (report.parsed > 0 || switched || full);
        let changed = report.parsed + report.reused + report.removed > 0 || switched;
        if !changed && self.state.updates.load(Ordering::SeqCst) > 0 {
            // Events whose files turned out unchanged (a touch, a late event of a checkout).
            tracing::debug!("checked {} paths: nothing changed", dirty.paths.len());
            return Ok(());
        }
        let n = self.state.updates.fetch_add(1, Ordering::SeqCst) + 1;
        let scope_name = if full { "full" } else { "paths" };
        self.report_update(&report, scope_name, dirty.paths.len(), n, started);
        Ok(())
    }

    fn report_update(&self, r: &IndexReport, scope: &str, paths: usize, n: u64, started: Instant) {
        let seconds = started.elapsed().as_secs_f64();
        self.event(
            json!({"event": "update", "update": n, "scope": scope, "paths": paths, "branch": r.branch,
                   "files": r.files, "parsed": r.parsed, "reused": r.reused, "removed": r.removed,
                   "seconds": seconds}),
            || {
                format!(
                    "index updated ({scope}, {paths} paths): {} parsed, {} re-used, {} removed in {:.0} ms",
                    r.parsed,
                    r.reused,
                    r.removed,
                    seconds * 1000.0
                )
            },
        );
    }

    /// Whether this watcher may embed now: the server has lived long enough,
    /// the user did not turn embeddings off, and no other process embeds
    /// this index.
    fn may_embed(&mut self) -> bool {
        if Instant::now() < self.embed_not_before {
            return false;
        }
        if self.embedder_lock.is_some() {
            return true;
        }
        if let Ok(store) = Store::open_for_read(self.index_dir) {
            if embeddings_off(&store) {
                self.embed_pending = false;
                self.event(json!({"event": "embeddings_off"}), || {
                    "not embedding: this index was built with --no-embed (`ken embed` computes the embeddings)"
                        .to_string()
                });
                return false;
            }
        }
        self.embedder_lock = semantic::EmbedderLock::try_take(self.index_dir);
        if self.embedder_lock.is_none() {
            self.embed_not_before = Instant::now() + EMBEDDER_RETRY;
            tracing::debug!("another process embeds this index; checking again in {EMBEDDER_RETRY:?}");
        }
        self.embedder_lock.is_some()
    }

    /// Embeds until done or `pause`; the vectors are published at the end.
    fn embed_slice(&mut self, pause: &dyn Fn() -> bool) -> Result<()> {
        if self.embedder.is_none() {
            match crate::embed::configured_embedder() {
                Ok((embedder, provider)) => {
                    let store = Store::open_for_write(self.index_dir)?;
                    store.set_meta(MetaKey::EmbeddingProvider, &provider)?;
                    self.embedder = Some(embedder);
                }
                Err(e) => {
                    self.embed_pending = false;
                    self.warn(&format!(
                        "semantic search is unavailable, lexical search stays fresh: {e:#}"
                    ));
                    return Ok(());
                }
            }
        }
        let embedder = self.embedder.as_deref().context("no embedder")?;
        // The writer lock is taken per committed batch inside: lexical
        // updates (this watcher's or a `ken index`) never wait for a pass.
        let mut store = Store::open_for_write(self.index_dir)?;
        let (report, finished) = semantic::embed_missing_until(
            &mut store,
            &self.branch,
            embedder,
            &crate::index::progress::Reporter::default(),
            pause,
        )?;
        if finished {
            self.embed_pending = false;
            // Done: another process may embed what comes next.
            self.embedder_lock = None;
            if self.opts.fit_adapter {
                match crate::index::fit::start_in_background(self.root, self.index_dir) {
                    Ok(Some(pid)) => self.event(json!({"event": "fitting_adapter", "pid": pid}), || {
                        format!("fitting the query adapter in the background (pid {pid})")
                    }),
                    Ok(None) => {}
                    Err(e) => self.warn(&format!("query adapter not fitted: {e:#}")),
                }
            }
        }
        if report.embedded > 0 || finished {
            self.event(
                json!({"event": "embedded", "embedded": report.embedded, "finished": finished,
                       "seconds": report.seconds}),
                || format!("embedded {} chunks in {:.1} s", report.embedded, report.seconds),
            );
        }
        Ok(())
    }

    fn gc(&self) -> Result<Vec<String>> {
        let mut store = Store::open_for_write(self.index_dir)?;
        let dead = dead_branches(&store, self.root)?;
        if dead.is_empty() {
            return Ok(dead);
        }
        let _lock = store.lock_for_write(self.opts.index.lock_timeout)?;
        drop_branches(&mut store, &dead)?;
        Ok(dead)
    }

    fn event(&self, value: serde_json::Value, text: impl FnOnce() -> String) {
        if self.opts.json_events {
            eprintln!("{value}");
        } else {
            tracing::info!("{}", text());
        }
    }

    /// A warning, said at most once a minute for the same text.
    fn warn(&mut self, message: &str) {
        let now = Instant::now();
        if self
            .warned
            .get(message)
            .is_some_and(|t| now.duration_since(*t) < Duration::from_secs(60))
        {
            return;
        }
        self.warned.insert(message.to_string(), now);
        if self.opts.json_events {
            eprintln!("{}", json!({"event": "warning", "message": message}));
        } else {
            tracing::warn!("{message}");
        }
    }
}

/// Catalog keys of branches git no longer has (never the current one; none
/// outside git or when git's branches cannot be listed).
pub fn dead_branches(store: &Store, root: &Path) -> Result<Vec<String>> {
    let Some(live) = git::local_branches(root) else {
        return Ok(Vec::new());
    };
    let head = git::head(root);
    let current = head.catalog_key();
    let keys = store.branches()?;
    Ok(keys
        .into_iter()
        .filter(|k| *k != current && !live.contains(k))
        .collect())
}

/// Removes these branches' catalogs and skipped files, with the file
/// versions, chunks and vectors no other branch uses (one transaction), then
/// re-syncs the vector file.
pub fn drop_branches(store: &mut Store, branches: &[String]) -> Result<()> {
    let batch = crate::store::Batch::begin(store)?;
    for branch in branches {
        for path in batch.catalog_paths(branch)? {
            batch.remove_from_catalog(branch, &path)?;
        }
        batch.remove_branch_skipped(branch)?;
    }
    batch.commit()?;
    if let Some(model) = store.meta(MetaKey::EmbeddingModel)? {
        let dims: usize = store.meta_parsed(MetaKey::EmbeddingDimensions)?.unwrap_or(0);
        if dims > 0 {
            VectorIndex::sync(store, &model, dims, vectors::configured_quantization())?;
        }
    }
    Ok(())
}
