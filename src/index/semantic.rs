//! The embedding pass: vectors for the chunks of a branch that have none yet.
//!
//! It runs after the lexical index is committed, so search works (lexically)
//! while it runs. Work is keyed by content hash and embedder id: content seen
//! before, on any branch or in any file, is never embedded again. Batches are
//! sorted by length (less padding) and each is committed as it finishes, so
//! an interrupted pass resumes where it stopped.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::embed::text::{cache_model, embedding_text, signature_model, signature_texts};
use crate::embed::{configured_embedder, Embedder, InputKind};
use crate::index::progress::Reporter;
use crate::store::cache::SharedCache;
use crate::store::vectors::{self, VectorIndex};
use crate::store::{MetaKey, Store, WRITE_LOCK_TIMEOUT};

#[derive(Debug, Clone, Default)]
pub struct EmbedReport {
    pub model: String,
    /// Distinct chunk contents of the branch.
    pub contents: u64,
    /// Embedded by this run.
    pub embedded: u64,
    /// Already had a vector (from an earlier run, another file or branch,
    /// or another repository through the shared cache).
    pub reused: u64,
    /// Taken from the per-user cache of vectors (see [`SharedCache`]).
    pub from_shared_cache: u64,
    pub vectors_in_index: u64,
    /// Signature vectors embedded by this run (see [`signature_texts`]).
    pub signatures_embedded: u64,
    pub seconds: f64,
}

impl EmbedReport {
    /// One line for the terminal: what was embedded and what was re-used.
    pub fn summary(&self) -> String {
        format!(
            "{} new, {} re-used ({}), {} signatures, in {:.1} s",
            self.embedded, self.reused, self.model, self.signatures_embedded, self.seconds
        )
    }
}

/// Embeds the branch's chunk contents that lack a vector for `embedder`, then
/// the signatures of its named chunks that lack one ([`signature_texts`]), and
/// brings the vector index file up to date.
pub fn embed_missing(
    store: &mut Store,
    branch: &str,
    embedder: &dyn Embedder,
    reporter: &Reporter,
) -> Result<EmbedReport> {
    Ok(embed_missing_until(store, branch, embedder, reporter, &|| false)?.0)
}

/// [`embed_missing`] that stops between batches once `pause` says so (the
/// watcher has lexical work); `true` with the report when nothing is left.
pub fn embed_missing_until(
    store: &mut Store,
    branch: &str,
    embedder: &dyn Embedder,
    reporter: &Reporter,
    pause: &dyn Fn() -> bool,
) -> Result<(EmbedReport, bool)> {
    let result = embed_pass(store, branch, embedder, reporter, pause);
    match &result {
        Ok((_, true)) => record_embedding_failure(store, None),
        Err(e) if !reporter.is_cancelled() => record_embedding_failure(store, Some(e)),
        _ => {}
    }
    result
}

/// How long `ken index` or `ken embed` waits for another process that is
/// embedding the same index before it leaves the work to it.
const EMBEDDER_WAIT: Duration = Duration::from_secs(120);

/// One embedding pass per index at a time: the process holding this lock
/// embeds, others leave the work to it (a server) or wait (`ken index`). It
/// is held apart from the writer lock, which a pass takes only to commit each
/// batch, so lexical updates never wait for embeddings; the OS releases it
/// with its process, so a crashed embedder hands the work on.
pub struct EmbedderLock {
    _file: std::fs::File,
}

impl EmbedderLock {
    fn path(index_dir: &std::path::Path) -> std::path::PathBuf {
        index_dir.join("embedder.lock")
    }

    /// The lock, if no other process holds it.
    pub fn try_take(index_dir: &std::path::Path) -> Option<EmbedderLock> {
        Some(EmbedderLock {
            _file: take_process_lock(&Self::path(index_dir))?,
        })
    }

    /// The lock, waiting up to `timeout` for the process that holds it.
    pub fn wait(index_dir: &std::path::Path, timeout: Duration) -> Result<EmbedderLock> {
        let started = Instant::now();
        let mut told = false;
        loop {
            if let Some(lock) = Self::try_take(index_dir) {
                return Ok(lock);
            }
            let holder = std::fs::read_to_string(Self::path(index_dir)).unwrap_or_default();
            let holder = match holder.trim() {
                "" => "another ken process".to_string(),
                pid => format!("process {pid}"),
            };
            anyhow::ensure!(
                started.elapsed() < timeout,
                "{holder} is computing this index's embeddings (waited {timeout:?}); `ken status` shows the coverage"
            );
            if !told {
                eprintln!("ken: waiting for {holder}, which is computing this index's embeddings...");
                told = true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// An exclusive OS lock on the file at `path`, if no other process holds
/// it, with this process's id written in it (for messages and `ken status`).
pub(super) fn take_process_lock(path: &std::path::Path) -> Option<std::fs::File> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return None;
    }
    let _ = file.set_len(0);
    let _ = (&file).write_all(format!("{}\n", std::process::id()).as_bytes());
    Some(file)
}

/// Remembers why an embedding pass failed (a provider that did not answer),
/// or that one finished, so a search without vectors says what happened.
/// Best effort: the pass's own outcome is what the caller reports.
fn record_embedding_failure(store: &Store, failure: Option<&anyhow::Error>) {
    match failure {
        Some(e) => {
            let text: String = format!("{e:#}").chars().take(400).collect();
            let _ = store.set_meta(MetaKey::EmbeddingFailure, &text);
        }
        None => {
            if store
                .meta(MetaKey::EmbeddingFailure)
                .ok()
                .flatten()
                .is_some_and(|f| !f.is_empty())
            {
                let _ = store.set_meta(MetaKey::EmbeddingFailure, "");
            }
        }
    }
}

/// Why an index has no vectors to search, for a search's notice: built
/// without them, its last embedding pass failed (and how), or not there yet.
pub fn why_no_vectors(store: &Store) -> String {
    if crate::index::watch::embeddings_off(store) {
        return "the index was built with --no-embed (`ken embed` computes the embeddings)".to_string();
    }
    match store
        .meta(MetaKey::EmbeddingFailure)
        .ok()
        .flatten()
        .filter(|f| !f.is_empty())
    {
        Some(failure) => format!("the index has no embeddings: its last embedding pass failed: {failure}"),
        None => "the index has no embeddings yet (`ken index` or `ken embed` computes them)".to_string(),
    }
}

fn embed_pass(
    store: &mut Store,
    branch: &str,
    embedder: &dyn Embedder,
    reporter: &Reporter,
    pause: &dyn Fn() -> bool,
) -> Result<(EmbedReport, bool)> {
    let started = Instant::now();
    let model = embedder.id().to_string();
    let contents = store.branch_distinct_contents(branch)?;
    // Vectors of this model are about to be added beside another model's:
    // the prune once it is complete must run again.
    if store
        .meta(MetaKey::VectorsPrunedFor)?
        .is_some_and(|pruned| pruned != model)
    {
        store.set_meta(MetaKey::VectorsPrunedFor, "")?;
    }
    let chunks = missing(store, branch, &model, false, |context, symbol, _, text, _| {
        vec![embedding_text(context, symbol, text)]
    })?;
    let shared = SharedCache::open(&crate::embed::model::cache_root().join("vectors.db"));
    let mut pass = EmbedPass {
        store,
        embedder,
        model: &model,
        shared: shared.as_ref(),
        reporter,
        pause,
    };
    let chunk_side = pass.run("embedding", &chunks, true)?;
    if chunk_side.finished && chunk_side.embedded > 0 {
        // Every chunk searchable now: the signatures that follow only
        // sharpen the ranking (the query adapter is fitted apart, see
        // [`crate::index::fit`]).
        let _writer = pass.store.lock_for_write(WRITE_LOCK_TIMEOUT)?;
        publish(pass.store, embedder)?;
    }
    // Signatures after the chunks: the chunk vectors make semantic search,
    // the signature vectors only sharpen its ranking, and they are short.
    let signature_model = signature_model(&model);
    let signature_side = if chunk_side.finished {
        pass.model = &signature_model;
        let signatures = missing(pass.store, branch, &signature_model, true, signature_texts)
            .and_then(|todo| pass.run("embedding signatures", &todo, false));
        // The chunk vectors are committed and make semantic search; a
        // provider failing now costs the signature side only. The pass counts
        // as done (a watcher does not retry at once); the next run embeds
        // what is missing.
        signatures.unwrap_or_else(|e| {
            tracing::warn!("signature vectors not computed: {e:#}");
            PassCount {
                finished: true,
                ..PassCount::default()
            }
        })
    } else {
        PassCount::default()
    };
    let _writer = store.lock_for_write(WRITE_LOCK_TIMEOUT)?;
    let in_index = publish(store, embedder)?;
    if chunk_side.finished && signature_side.finished {
        // Housekeeping: the vectors are complete and published whether or not it works.
        if let Err(e) = prune_other_vectors(store, &model, &signature_model) {
            tracing::warn!("vectors of other models not dropped: {e:#}");
        }
    }
    reporter.check_cancelled("embedding")?;
    let report = EmbedReport {
        model,
        contents,
        embedded: chunk_side.embedded,
        from_shared_cache: chunk_side.from_cache,
        reused: contents.saturating_sub(chunk_side.embedded),
        vectors_in_index: in_index as u64,
        signatures_embedded: signature_side.embedded,
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((report, chunk_side.finished && signature_side.finished))
}

/// What to embed for `model`: for each distinct content of the branch that
/// has no vector of `model` yet (of a named chunk, with `named_only`), the
/// texts `text_of(context, symbol, kind, text)` gives (none: skipped), whose
/// vectors are stored end to end in one row. Named definitions first (what
/// searches answer with, so a search during a first run finds them by
/// meaning early), each group shortest first (less padding per batch).
fn missing(
    store: &Store,
    branch: &str,
    model: &str,
    named_only: bool,
    text_of: impl Fn(Option<&str>, Option<&str>, &str, &str, &[Option<(u32, u32)>]) -> Vec<String>,
) -> Result<Vec<(i64, Vec<String>)>> {
    // Unnamed chunks never get a signature: not reading their text keeps a
    // run with nothing to do cheap.
    let mut todo = Vec::new();
    store.for_each_content_without_vectors(branch, model, named_only, |c| {
        let doc = crate::source::chunk::parse_doc_lines(c.doc.as_deref(), 1);
        let texts = text_of(c.context.as_deref(), c.symbol.as_deref(), &c.kind, &c.text, &doc);
        if !texts.is_empty() {
            todo.push((c.symbol.is_none(), c.hash, texts));
        }
        Ok(())
    })?;
    todo.sort_by_key(|(unnamed, _, texts)| (*unnamed, texts.iter().map(String::len).max()));
    Ok(todo.into_iter().map(|(_, hash, texts)| (hash, texts)).collect())
}

/// One embedding pass over texts keyed by content hash, for one model id.
struct EmbedPass<'a> {
    store: &'a mut Store,
    embedder: &'a dyn Embedder,
    /// The id the vectors are stored under (the chunk or the signature id).
    model: &'a str,
    shared: Option<&'a SharedCache>,
    reporter: &'a Reporter,
    pause: &'a dyn Fn() -> bool,
}

#[derive(Default)]
struct PassCount {
    embedded: u64,
    from_cache: u64,
    finished: bool,
}

impl EmbedPass<'_> {
    /// Embeds `todo` batch by batch, each committed as it finishes; with
    /// `publish_now_and_then`, the vector file is brought up to date as the
    /// [`PublishSchedule`] says, so searches meanwhile use what is done.
    fn run(
        &mut self,
        phase: &'static str,
        todo: &[(i64, Vec<String>)],
        publish_now_and_then: bool,
    ) -> Result<PassCount> {
        let mut progress = self.reporter.phase(phase, "chunks", todo.len() as u64);
        let mut count = PassCount {
            finished: true,
            ..PassCount::default()
        };
        let mut schedule = PublishSchedule::new();
        for batch in todo.chunks(self.embedder.preferred_batch().max(1)) {
            if self.reporter.is_cancelled() || (self.pause)() {
                count.finished = false;
                break;
            }
            let (vectors, cached) = embed_batch(self.embedder, self.model, self.shared, batch)?;
            count.from_cache += cached;
            let mut rejected = 0;
            let _writer = self.store.lock_for_write(WRITE_LOCK_TIMEOUT)?;
            let mut rows = Vec::with_capacity(batch.len());
            for ((hash, _), vector) in batch.iter().zip(&vectors) {
                // A degenerate vector (the provider warned) is not stored.
                if vector.is_empty() {
                    rejected += 1;
                    continue;
                }
                rows.push((*hash, vector.as_slice()));
            }
            self.store.insert_vectors(self.model, &rows)?;
            count.embedded += (batch.len() as u64 - cached).saturating_sub(rejected);
            progress.inc(batch.len() as u64);
            if publish_now_and_then && schedule.due() {
                let started = Instant::now();
                publish(self.store, self.embedder)?;
                schedule.published(started.elapsed());
            }
            drop(_writer);
        }
        Ok(count)
    }
}

/// Vectors for a batch, each item's texts' vectors end to end: from the
/// shared cache where it has them, the rest computed (and added to the
/// cache). Returns the vectors in batch order (empty for an item the
/// embedder gave a degenerate vector for) and how many items came whole
/// from the cache.
pub(super) fn embed_batch(
    embedder: &dyn Embedder,
    model: &str,
    shared: Option<&SharedCache>,
    batch: &[(i64, Vec<String>)],
) -> Result<(Vec<Vec<f32>>, u64)> {
    let texts: Vec<&str> = batch.iter().flat_map(|(_, t)| t.iter().map(String::as_str)).collect();
    let keys: Vec<i64> = texts.iter().map(|t| crate::store::content_hash(t.as_bytes())).collect();
    let mut vectors: Vec<Option<Vec<f32>>> = match shared {
        Some(cache) => keys.iter().map(|k| cache.get(cache_model(model), *k)).collect(),
        None => vec![None; texts.len()],
    };
    let from_cache: Vec<bool> = vectors.iter().map(Option::is_some).collect();
    let missing: Vec<usize> = (0..texts.len()).filter(|&i| !from_cache[i]).collect();
    if !missing.is_empty() {
        let to_embed: Vec<&str> = missing.iter().map(|&i| texts[i]).collect();
        let computed = embedder.embed(&to_embed, InputKind::Document)?;
        for (&i, vector) in missing.iter().zip(computed) {
            if let (Some(cache), false) = (shared, vector.is_empty()) {
                cache.put(cache_model(model), keys[i], &vector);
            }
            vectors[i] = Some(vector);
        }
    }
    let mut vectors = vectors.into_iter().map(Option::unwrap_or_default);
    let mut from_cache = from_cache.into_iter();
    let mut cached = 0;
    let mut out = Vec::with_capacity(batch.len());
    for (_, item_texts) in batch {
        let n = item_texts.len();
        // Counted, not `all`: every flag of the item must be consumed.
        cached += u64::from(from_cache.by_ref().take(n).filter(|&hit| hit).count() == n);
        let parts: Vec<Vec<f32>> = vectors.by_ref().take(n).collect();
        // One degenerate part leaves the item without a vector (an empty one).
        if parts.iter().any(Vec::is_empty) {
            out.push(Vec::new());
        } else {
            out.push(parts.into_iter().flatten().collect());
        }
    }
    Ok((out, cached))
}

/// When a long embedding pass makes its vectors searchable: first after
/// [`FIRST_PUBLISH`] (a first run answers by meaning within seconds, for
/// what is embedded by then), then every [`PUBLISH_EVERY`], or less often
/// when a publish costs more than a twentieth of that (the vector file is
/// read and written whole: large indexes).
struct PublishSchedule {
    last: Instant,
    interval: Duration,
}

const FIRST_PUBLISH: Duration = Duration::from_secs(5);
const PUBLISH_EVERY: Duration = Duration::from_secs(30);

impl PublishSchedule {
    fn new() -> PublishSchedule {
        PublishSchedule {
            last: Instant::now(),
            interval: FIRST_PUBLISH,
        }
    }

    fn due(&self) -> bool {
        self.last.elapsed() >= self.interval
    }

    /// A publish that took `cost` just ended.
    fn published(&mut self, cost: Duration) {
        self.last = Instant::now();
        self.interval = PUBLISH_EVERY.max(cost * 20);
    }
}

/// Brings the vector index file up to date and records the embedder, making
/// the stored vectors searchable. Returns the number of vectors in the file.
fn publish(store: &Store, embedder: &dyn Embedder) -> Result<usize> {
    let model = embedder.id();
    let dimensions = match embedder.dimensions() {
        0 => store.meta_parsed(MetaKey::EmbeddingDimensions)?.unwrap_or(0),
        d => d,
    };
    if dimensions == 0 {
        return Ok(0);
    }
    let in_index = VectorIndex::sync(store, model, dimensions, vectors::configured_quantization())?;
    store.set_meta(MetaKey::EmbeddingModel, model)?;
    store.set_meta(MetaKey::EmbeddingDimensions, &dimensions.to_string())?;
    Ok(in_index)
}

/// Once the vectors of `model` (and its signatures) are complete, drops the
/// ones another model or recipe made (a changed token budget, provider or
/// recipe version) and their HNSW files: nothing searches them again, and a
/// switch back re-embeds through the per-user cache. Done once per model
/// (the scan reads the whole table).
fn prune_other_vectors(store: &Store, model: &str, signature_model: &str) -> Result<()> {
    if store.meta(MetaKey::VectorsPrunedFor)?.as_deref() == Some(model) {
        return Ok(());
    }
    let removed = store.delete_vectors_except(model, signature_model)?;
    let current = vectors::vectors_path(&store.dir, model);
    let mut files = 0;
    for entry in std::fs::read_dir(&store.dir)?.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("vectors-") && name.ends_with(".usearch") && path != current {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            files += 1;
        }
    }
    if removed > 0 || files > 0 {
        tracing::info!("dropped {removed} vectors and {files} vector files of other models than {model}");
    }
    store.set_meta(MetaKey::VectorsPrunedFor, model)?;
    Ok(())
}

/// `ken index`'s second phase for `root`: embeds what the current branch lacks.
pub fn embed_root(root: &std::path::Path, index_dir: &std::path::Path, reporter: &Reporter) -> Result<EmbedReport> {
    let mut store = Store::open_for_write(index_dir)?;
    // One embedder per index; taken before the model loads (seconds), so
    // others see the pass at once. The writer lock is taken per batch.
    let _embedder = EmbedderLock::wait(index_dir, EMBEDDER_WAIT)?;
    let (embedder, provider) = configured_embedder().inspect_err(|e| record_embedding_failure(&store, Some(e)))?;
    let branch = crate::source::git::head(root).catalog_key();
    if let Some(previous) = store.meta(MetaKey::EmbeddingModel)? {
        if previous != embedder.id() {
            eprintln!(
                "ken: the embedding model changed ({previous} -> {}); embedding every chunk again",
                embedder.id()
            );
        }
    }
    store.set_meta(MetaKey::EmbeddingProvider, &provider)?;
    embed_missing(&mut store, &branch, embedder.as_ref(), reporter)
}
