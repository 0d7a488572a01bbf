//! The server's long-running work: index runs (index_codebase,
//! add_knowledge_base) with progress and cancellation, the background
//! embedding pass, the model loaded at start, and the watcher.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use super::tools::{blocking, data_result, tool_error};
use super::wire::{
    AddKnowledgeBaseArgs, BaseIndexed, BaseStatus, IndexArgs, IndexOutcome, KnowledgeBaseAdded, ServerStatus,
    ServiceStatus,
};
use super::KenServer;
use crate::app;
use crate::index::progress::Reporter;
use crate::index::watch::{WatchHandle, WatchOptions};
use crate::index::{IndexOptions, IndexReport};
use crate::search::kb::{self, PROJECT};
use crate::search::Searcher;

struct BackgroundEmbedding {
    cancel: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// The server's long-running work: at most one index run, at most one
/// background embedding pass.
#[derive(Default)]
pub(super) struct Jobs {
    index_run_since: Mutex<Option<Instant>>,
    embedding: Mutex<Option<BackgroundEmbedding>>,
}

impl Jobs {
    pub(super) fn index_running(&self) -> bool {
        self.index_run_since.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    pub(super) fn embedding_running(&self) -> bool {
        self.embedding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|b| !b.thread.is_finished())
    }

    /// Stops the background embedding (it keeps what it committed) and waits for it.
    pub(super) fn stop_embedding(&self) {
        let running = self.embedding.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(job) = running {
            job.cancel.store(true, Ordering::Relaxed);
            let _ = job.thread.join();
        }
    }
}

/// Marks an index run as under way until dropped.
pub(super) struct IndexRunGuard(Arc<Jobs>);

impl IndexRunGuard {
    pub(super) fn acquire(jobs: &Arc<Jobs>) -> Result<IndexRunGuard, String> {
        let mut since = jobs.index_run_since.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(started) = *since {
            return Err(format!(
                "an index run is already under way (for {:.0} s); searches work meanwhile and index_status shows \
                 its state",
                started.elapsed().as_secs_f64()
            ));
        }
        *since = Some(Instant::now());
        Ok(IndexRunGuard(jobs.clone()))
    }
}

impl Drop for IndexRunGuard {
    fn drop(&mut self) {
        *self.0.index_run_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl KenServer {
    /// Loads the project's query model and vector index on another thread
    /// and puts the searcher in the pool: the first hybrid search does not
    /// wait for the model (it answers lexically until it is loaded); then
    /// the tokenizer of the context tools.
    pub(super) fn load_model_in_background(&self) {
        let (pool, root, index_dir) = (self.pool.clone(), self.root.clone(), self.index_dir.clone());
        pool.model_loading.store(true, Ordering::SeqCst);
        std::thread::spawn(move || {
            let started = Instant::now();
            // The maps of other connections: the warm-up maps in its own only.
            let before = crate::store::index_maps(&index_dir);
            match Searcher::open(&root, &index_dir) {
                Ok(searcher) => match searcher.load_model() {
                    Ok(()) => {
                        tracing::info!("model loaded in {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
                        let warming = Instant::now();
                        match searcher.warm_up(&before) {
                            Ok(bytes) => tracing::info!(
                                "searcher warmed up in {:.0} ms ({} MB of the index mapped in)",
                                warming.elapsed().as_secs_f64() * 1e3,
                                bytes >> 20
                            ),
                            Err(e) => tracing::info!("searcher not warmed up: {e:#}"),
                        }
                        pool.give(PROJECT, searcher);
                    }
                    Err(why) => tracing::info!("no model loaded: {why}"),
                },
                Err(e) => tracing::info!("no model loaded: {e:#}"),
            }
            pool.model_loading.store(false, Ordering::SeqCst);
            // The context tools count tokens: their first call should not load the tokenizer either.
            crate::context::pack::warm_up();
        });
    }

    /// A notice for results while the index is being built or embedded.
    pub(super) fn jobs_notice(&self) -> Option<String> {
        if self.jobs.index_running() {
            Some("an index run is under way: results may be partial".to_string())
        } else if self.jobs.embedding_running() {
            Some("embeddings are being computed: semantic results cover part of the code for now".to_string())
        } else {
            None
        }
    }

    /// Computes the missing embeddings of the project and the knowledge bases
    /// on a thread of its own; searches meanwhile are lexical for new code.
    pub(super) fn start_background_embedding(&self) {
        self.jobs.stop_embedding();
        let mut targets = Vec::new();
        // A watcher embeds the project itself, between its updates; an index
        // built with --no-embed stays so.
        let project_off = crate::store::Store::open_for_read(&self.index_dir)
            .is_ok_and(|store| crate::index::watch::embeddings_off(&store));
        if self.watch.is_none() && !project_off {
            targets.push((PROJECT.to_string(), self.root.clone(), self.index_dir.clone()));
        }
        for base in self.knowledge_bases() {
            let dir = base.index_dir(&self.index_dir);
            targets.push((base.name, PathBuf::from(base.path), dir));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        let reporter = Reporter::default().with_cancel(cancel.clone());
        let (metrics, pool) = (self.metrics.clone(), self.pool.clone());
        let thread = std::thread::spawn(move || {
            for (name, root, dir) in targets {
                if reporter.is_cancelled() {
                    break;
                }
                let Some(_embedder) = crate::index::semantic::EmbedderLock::try_take(&dir) else {
                    tracing::info!("embedding {name}: another process is embedding it");
                    continue;
                };
                match crate::index::semantic::embed_root(&root, &dir, &reporter) {
                    Ok(r) => {
                        metrics.embedded(r.embedded, r.reused, r.from_shared_cache);
                        tracing::info!(
                            "embedding {name}: {} new, {} re-used in {:.1} s",
                            r.embedded,
                            r.reused,
                            r.seconds
                        );
                        // The query adapter in a process of its own, at low priority.
                        let fit = app::fit_adapter(&root, &dir, app::FitWhen::Background, &reporter);
                        if let Some(said) = fit.describe() {
                            tracing::info!("query adapter of {name}: {said}");
                        }
                    }
                    Err(e) => tracing::warn!("embedding {name}: {e:#}"),
                }
                pool.clear();
            }
        });
        *self.jobs.embedding.lock().unwrap_or_else(|e| e.into_inner()) = Some(BackgroundEmbedding { cancel, thread });
    }

    pub(super) fn status(&self) -> anyhow::Result<ServerStatus> {
        Ok(ServerStatus {
            status: crate::index::status::status(&self.root, &self.index_dir)?,
            index_run_in_progress: self.jobs.index_running(),
            embedding_in_background: self.jobs.embedding_running(),
            knowledge_bases: self.base_statuses(),
            service: self.service.as_ref().map(|s| ServiceStatus {
                pid: s.pid,
                sessions: s.sessions.load(Ordering::SeqCst) as u64,
            }),
        })
    }

    pub(super) fn base_statuses(&self) -> Vec<BaseStatus> {
        self.knowledge_bases()
            .into_iter()
            .map(|base| {
                let status = crate::index::status::status(base.root(), &base.index_dir(&self.index_dir));
                match status {
                    Ok(s) => BaseStatus {
                        base,
                        files: s.files,
                        chunks: s.chunks,
                        embedding_coverage: s.embedding_coverage,
                        error: None,
                    },
                    Err(e) => BaseStatus {
                        base,
                        files: 0,
                        chunks: 0,
                        embedding_coverage: 0.0,
                        error: Some(format!("{e:#}")),
                    },
                }
            })
            .collect()
    }

    pub(super) async fn index_tool(
        &self,
        args: IndexArgs,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if args.estimate_only.unwrap_or(false) {
            let root = self.root.clone();
            return blocking(move || {
                let found =
                    crate::source::discover::discover(&root, &crate::source::discover::DiscoverOptions::default());
                Ok(IndexOutcome {
                    estimate_only: true,
                    report: IndexReport {
                        root: root.display().to_string(),
                        files: found.files.len() as u64,
                        skipped: found.skipped,
                        ..IndexReport::default()
                    },
                    bytes: Some(found.files.iter().map(|f| f.size).sum()),
                    embedding: None,
                    embedding_status: "not computed (estimate only)".to_string(),
                    knowledge_bases: Vec::new(),
                })
            })
            .await
            .and_then(data_result);
        }
        let guard = match IndexRunGuard::acquire(&self.jobs) {
            Ok(g) => g,
            Err(why) => return Ok(tool_error(why)),
        };
        let (reporter, watcher) = call_reporter(&ctx);
        let server = self.clone();
        let force = args.force.unwrap_or(false);
        let wait = args.wait_for_embeddings.unwrap_or(false);
        let started = Instant::now();
        let outcome = blocking(move || {
            let _guard = guard;
            // The background pass holds the writer lock; it resumes afterwards.
            server.jobs.stop_embedding();
            let outcome = server.index_all(force, wait, &reporter);
            if !wait {
                server.start_background_embedding();
            }
            outcome
        })
        .await?;
        watcher.abort();
        self.metrics.index_run(
            started.elapsed(),
            match &outcome {
                Ok(o) => Ok(format!("{} files, {} parsed", o.report.files, o.report.parsed)),
                Err(e) => Err(format!("{e:#}")),
            },
        );
        data_result(outcome)
    }

    /// Indexes the project then each knowledge base (a base's failure is
    /// reported, not fatal), then embeds if asked to wait for it.
    pub(super) fn index_all(&self, force: bool, wait: bool, reporter: &Reporter) -> anyhow::Result<IndexOutcome> {
        crate::index::watch::check_root(&self.root, false)?;
        if force {
            // Under the writer lock, and the WAL with the database: never a half-deleted index.
            let store = crate::store::Store::open_for_write(&self.index_dir)?;
            let lock = store.lock_for_write(crate::store::WRITE_LOCK_TIMEOUT)?;
            drop(store.recreate()?);
            drop(lock);
        }
        let opts = IndexOptions {
            reporter: reporter.clone(),
            ..IndexOptions::default()
        };
        let mut knowledge_bases = Vec::new();
        let embed = wait.then_some(app::FitWhen::Background);
        let app::Indexed { report, embedding, .. } =
            app::index_then_embed(&self.root, &self.index_dir, &opts, embed, |_| {
                self.pool.clear();
                for base in self.knowledge_bases() {
                    reporter.check_cancelled("indexing")?;
                    let indexed = crate::index::index(base.root(), &base.index_dir(&self.index_dir), &opts);
                    knowledge_bases.push(BaseIndexed {
                        name: base.name.clone(),
                        path: base.path.clone(),
                        error: indexed.as_ref().err().map(|e| format!("{e:#}")),
                        report: indexed.ok(),
                    });
                }
                self.pool.clear();
                Ok(())
            })?;
        let (embedding, embedding_status) = match embedding {
            Some(Ok(e)) => {
                self.metrics.embedded(e.embedded, e.reused, e.from_shared_cache);
                self.pool.clear();
                (Some(e), "up to date".to_string())
            }
            Some(Err(e)) => (
                None,
                format!("semantic search unavailable, lexical search works: {e:#}"),
            ),
            None => (
                None,
                "embeddings of new code are computed in the background; index_status shows the coverage".to_string(),
            ),
        };
        Ok(IndexOutcome {
            estimate_only: false,
            report,
            bytes: None,
            embedding,
            embedding_status,
            knowledge_bases,
        })
    }

    pub(super) async fn add_kb_tool(
        &self,
        args: AddKnowledgeBaseArgs,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let guard = match IndexRunGuard::acquire(&self.jobs) {
            Ok(g) => g,
            Err(why) => return Ok(tool_error(why)),
        };
        let folder = self.root.join(&args.path);
        let mut permitted = client_roots(&ctx).await;
        permitted.extend(self.allowed_kb_folders.iter().cloned());
        let settings = crate::config::path();
        if let Err(why) = kb::check_client_may_add(&folder, &permitted, settings.as_deref()) {
            return Ok(tool_error(format!("{why:#}")));
        }
        let (reporter, watcher) = call_reporter(&ctx);
        let started = Instant::now();
        let server = self.clone();
        let outcome = blocking(move || -> anyhow::Result<KnowledgeBaseAdded> {
            let _guard = guard;
            let added = server.add_and_index(args, &folder, reporter);
            if added.is_ok() {
                server.start_background_embedding();
            }
            added
        })
        .await?;
        watcher.abort();
        self.metrics.index_run(
            started.elapsed(),
            match &outcome {
                Ok(a) => Ok(format!("knowledge base {}: {} files", a.added.name, a.index.files)),
                Err(e) => Err(format!("{e:#}")),
            },
        );
        data_result(outcome)
    }

    pub(super) fn add_and_index(
        &self,
        args: AddKnowledgeBaseArgs,
        folder: &Path,
        reporter: Reporter,
    ) -> anyhow::Result<KnowledgeBaseAdded> {
        let opts = IndexOptions {
            reporter,
            ..IndexOptions::default()
        };
        // A base that fails to index is not registered: the call can simply be repeated.
        let (base, indexed) = app::add_knowledge_base(
            &self.root,
            &self.index_dir,
            folder,
            args.name.as_deref(),
            &opts,
            None,
            |_, _| Ok(()),
        )?;
        Ok(KnowledgeBaseAdded {
            added: base,
            index: indexed.report,
            embedding_status: "embeddings are computed in the background; list_knowledge_bases shows the coverage"
                .to_string(),
        })
    }
}

/// Starts the watcher that keeps the index of `root` fresh while the server
/// runs; it logs to stderr and the log file only, and stops when dropped.
pub(super) fn start_watcher(root: &Path, index_dir: &Path, watch: WatchOptions) -> Option<WatchHandle> {
    crate::index::watch::spawn(root.to_path_buf(), index_dir.to_path_buf(), watch)
        .map_err(|e| tracing::warn!("not watching {}: {e:#}", root.display()))
        .ok()
}

/// The folders the client declares as its roots (MCP `roots/list`), canonical;
/// none when it declares no roots capability or does not answer in time.
// Roots are deprecated by a draft (SEP-2577) but are what today's clients
// (the Python SDK, Claude Code, VS Code) declare their workspace with.
#[allow(deprecated)]
async fn client_roots(ctx: &RequestContext<RoleServer>) -> Vec<PathBuf> {
    let declares = ctx
        .peer
        .peer_info()
        .is_some_and(|info| info.capabilities.roots.is_some());
    if !declares {
        return Vec::new();
    }
    match tokio::time::timeout(std::time::Duration::from_secs(5), ctx.peer.list_roots()).await {
        Ok(Ok(listed)) => listed
            .roots
            .iter()
            .filter_map(|root| url::Url::parse(&root.uri).ok()?.to_file_path().ok())
            .filter_map(|path| path.canonicalize().ok())
            .collect(),
        Ok(Err(e)) => {
            tracing::warn!("the client's roots/list failed: {e}");
            Vec::new()
        }
        Err(_) => {
            tracing::warn!("the client did not answer roots/list within 5 s");
            Vec::new()
        }
    }
}

/// A reporter for a tool call: its cancellation follows the client's
/// `notifications/cancelled`, and its progress becomes
/// `notifications/progress` when the client sent a progress token.
fn call_reporter(ctx: &RequestContext<RoleServer>) -> (Reporter, tokio::task::JoinHandle<()>) {
    let cancel = Arc::new(AtomicBool::new(false));
    let mut reporter = Reporter::default().with_cancel(cancel.clone());
    let ct = ctx.ct.clone();
    let watcher = tokio::spawn(async move {
        ct.cancelled().await;
        tracing::info!("the client cancelled the call; stopping after the current batch");
        cancel.store(true, Ordering::Relaxed);
    });
    if let Some(token) = ctx.meta.get_progress_token() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<crate::index::progress::Update>();
        reporter = reporter.with_sink(move |u| {
            let _ = tx.send(u.clone());
        });
        let peer = ctx.peer.clone();
        tokio::spawn(async move {
            // Phases follow one another (indexing, then embedding, then the next
            // base); progress keeps increasing across them.
            let (mut base, mut last) = (0u64, None::<crate::index::progress::Update>);
            let mut sent = None::<u64>;
            while let Some(u) = rx.recv().await {
                if let Some(prev) = &last {
                    if prev.phase != u.phase || u.done < prev.done {
                        base += prev.total;
                    }
                }
                let progress = base + u.done;
                if sent.is_none_or(|s| progress > s) {
                    sent = Some(progress);
                    let param = ProgressNotificationParam::new(token.clone(), progress as f64)
                        .with_total((base + u.total) as f64)
                        .with_message(format!("{} {}/{}", u.phase, u.done, u.total));
                    let _ = peer.notify_progress(param).await;
                }
                last = Some(u);
            }
        });
    }
    (reporter, watcher)
}
