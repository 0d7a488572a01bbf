//! The embedding pass: vectors for the chunks of a branch that have none yet.
//!
//! It runs after the lexical index is committed, so search works (lexically)
//! while it runs. Work is keyed by content hash and embedder id: content seen
//! before, on any branch or in any file, is never embedded again. Batches are
//! sorted by length (less padding) and each is committed as it finishes, so
//! an interrupted pass resumes where it stopped.

use std::time::Instant;

use anyhow::{Context, Result};
use rusqlite::params;
use serde::{Deserialize, Serialize};

use crate::embed::{Embedder, InputKind, LocalBert};
use crate::progress::Reporter;
use crate::provider::{HttpEmbedder, ProviderConfig};
use crate::store::{self, Store};
use crate::vectors::{self, Quantization, VectorIndex};

/// Characters of a chunk passed to the tokenizer (the model truncates to its
/// token budget; this only bounds tokenizer work on long chunks).
const MAX_CHARS: usize = 4000;

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
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
    #[serde(default)]
    pub from_shared_cache: u64,
    pub vectors_in_index: u64,
    pub seconds: f64,
}

/// The text a chunk contributes: its symbols' names as words when the model's
/// word pieces would split them badly (`setRespondedURI` becomes `set
/// responded uri`; `parse_config` is already words to the tokenizer, and
/// spelling it again weighed the name over the body: swe-public, Python, lost
/// ranks), its enclosing signatures, then its own text. Changing this changes
/// every vector: bump [`CHUNK_TEXT_VERSION`].
pub fn embedding_text(context: Option<&str>, symbol: Option<&str>, text: &str) -> String {
    let mut s = String::with_capacity(text.len().min(MAX_CHARS) + 64);
    if let Some(spelled) = symbol.and_then(spelled_names) {
        s.push_str(&spelled);
        s.push('\n');
    }
    if let Some(c) = context {
        s.push_str(c);
        s.push('\n');
    }
    let mut end = text.len().min(MAX_CHARS);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    s.push_str(&text[..end]);
    s
}

/// `text` with its identifiers spelled as lowercase words, when that changes
/// more than `_`/`-` into spaces: the names the model's word pieces would
/// split badly (camelCase, letter/digit changes).
fn spelled_names(text: &str) -> Option<String> {
    let spelled = crate::lexical::spaced_identifiers(text).to_lowercase();
    (spelled != text.replace(['_', '-'], " ").to_lowercase()).then_some(spelled)
}

/// The text a query is embedded as: as typed, then, when it names identifiers
/// the word pieces would split, the same spelled as words, as chunk names are
/// (`toRgba` → `toRgba\nto rgba`). ident-public semantic: chunk H@1 .465 → .540.
pub fn query_text(query: &str) -> std::borrow::Cow<'_, str> {
    match spelled_names(query) {
        Some(spelled) => format!("{query}\n{spelled}").into(),
        None => query.into(),
    }
}

/// The version of [`embedding_text`]'s recipe, part of every embedder id so
/// vectors of an older recipe are never compared with new ones (they are
/// re-embedded, as after a model change). 2: symbol names as words first;
/// 3: only names with case or letter/digit changes.
pub const CHUNK_TEXT_VERSION: u32 = 3;

/// Embeds the branch's chunk contents that lack a vector for `embedder`, then
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
    let started = Instant::now();
    let model = embedder.id().to_string();
    let contents = store::count(
        &store.conn,
        "SELECT count(DISTINCT c.content_hash) FROM chunks c JOIN catalog k ON k.file_id = c.file_id WHERE k.branch = ?1",
        [branch],
    )?;
    let mut todo: Vec<(i64, String)> = {
        let mut stmt = store.conn.prepare(
            "SELECT t.hash, min(c.context), t.text, min(c.symbol) FROM chunks c
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             JOIN contents t ON t.hash = c.content_hash
             WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.content_hash = t.hash AND e.model = ?2)
             GROUP BY t.hash",
        )?;
        let rows = stmt.query_map(params![branch, model], |r| {
            let context: Option<String> = r.get(1)?;
            let text: String = r.get(2)?;
            let symbol: Option<String> = r.get(3)?;
            Ok((
                r.get::<_, i64>(0)?,
                embedding_text(context.as_deref(), symbol.as_deref(), &text),
            ))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    todo.sort_by_key(|(_, text)| text.len());
    let mut progress = reporter.phase("embedding", "chunks", todo.len() as u64);
    let mut embedded = 0u64;
    let mut last_publish = Instant::now();
    let shared = SharedCache::open();
    let mut from_cache = 0u64;
    let mut finished = true;
    for batch in todo.chunks(embedder.preferred_batch().max(1)) {
        if reporter.is_cancelled() || pause() {
            finished = false;
            break;
        }
        let (vectors, cached) = embed_batch(embedder, shared.as_ref(), batch)?;
        from_cache += cached;
        let tx = store.conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO embeddings (content_hash, model, vector) VALUES (?1, ?2, ?3)
                 ON CONFLICT (content_hash, model) DO NOTHING",
            )?;
            for ((hash, _), vector) in batch.iter().zip(&vectors) {
                insert.execute(params![hash, model, vectors::encode(vector)])?;
            }
        }
        tx.commit()?;
        embedded += batch.len() as u64 - cached;
        progress.inc(batch.len() as u64);
        // Publish what is done now and then, so searches meanwhile use it.
        if last_publish.elapsed() >= PUBLISH_EVERY {
            publish(store, embedder)?;
            last_publish = Instant::now();
        }
    }
    drop(progress);
    let in_index = publish(store, embedder)?;
    reporter.check_cancelled("embedding")?;
    let report = EmbedReport {
        model,
        contents,
        embedded,
        from_shared_cache: from_cache,
        reused: contents.saturating_sub(embedded),
        vectors_in_index: in_index as u64,
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((report, finished))
}

/// Vectors for a batch: from the shared cache where it has them, the rest
/// computed (and added to the cache). Returns the vectors in batch order and
/// how many came from the cache.
fn embed_batch(
    embedder: &dyn Embedder,
    shared: Option<&SharedCache>,
    batch: &[(i64, String)],
) -> Result<(Vec<Vec<f32>>, u64)> {
    let keys: Vec<i64> = batch
        .iter()
        .map(|(_, t)| crate::store::content_hash(t.as_bytes()))
        .collect();
    let mut out: Vec<Option<Vec<f32>>> = match shared {
        Some(cache) => keys.iter().map(|k| cache.get(embedder.id(), *k)).collect(),
        None => vec![None; batch.len()],
    };
    let missing: Vec<usize> = (0..batch.len()).filter(|&i| out[i].is_none()).collect();
    let cached = (batch.len() - missing.len()) as u64;
    if !missing.is_empty() {
        let texts: Vec<&str> = missing.iter().map(|&i| batch[i].1.as_str()).collect();
        let computed = embedder.embed(&texts, InputKind::Document)?;
        for (&i, vector) in missing.iter().zip(computed) {
            if let Some(cache) = shared {
                cache.put(embedder.id(), keys[i], &vector);
            }
            out[i] = Some(vector);
        }
    }
    Ok((out.into_iter().map(Option::unwrap_or_default).collect(), cached))
}

/// A per-user SQLite cache of vectors keyed by embedder id and the hash of
/// the exact text embedded, shared by every index of the user (clones,
/// worktrees, vendored copies). Best effort: if it cannot be opened or
/// written, embedding goes on without it. `KEN_SHARED_CACHE=0` disables it.
pub struct SharedCache {
    conn: rusqlite::Connection,
}

impl SharedCache {
    pub fn open() -> Option<SharedCache> {
        if std::env::var("KEN_SHARED_CACHE").is_ok_and(|v| v == "0") {
            return None;
        }
        let path = crate::model::cache_root().join("vectors.db");
        std::fs::create_dir_all(path.parent()?).ok()?;
        let conn = rusqlite::Connection::open(&path).ok()?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).ok()?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, text_hash INTEGER NOT NULL,
                 vector BLOB NOT NULL, PRIMARY KEY (model, text_hash)) WITHOUT ROWID;",
        )
        .ok()?;
        Some(SharedCache { conn })
    }

    fn get(&self, model: &str, text_hash: i64) -> Option<Vec<f32>> {
        self.conn
            .prepare_cached("SELECT vector FROM vectors WHERE model = ?1 AND text_hash = ?2")
            .ok()?
            .query_row(params![cache_model(model), text_hash], |r| r.get::<_, Vec<u8>>(0))
            .ok()
            .map(|b| vectors::decode(&b))
    }

    fn put(&self, model: &str, text_hash: i64, vector: &[f32]) {
        if let Ok(mut stmt) = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO vectors (model, text_hash, vector) VALUES (?1, ?2, ?3)")
        {
            let _ = stmt.execute(params![cache_model(model), text_hash, vectors::encode(vector)]);
        }
    }
}

/// The shared cache's model key: the embedder id without the chunk-text
/// recipe's version (`/text3`). The cache is keyed by the exact text embedded,
/// so after a recipe change the chunks whose text did not change keep their vectors.
fn cache_model(id: &str) -> &str {
    match id.rsplit_once("/text") {
        Some((model, version)) if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) => model,
        _ => id,
    }
}

/// How often a long embedding pass makes its vectors searchable.
const PUBLISH_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Brings the vector index file up to date and records the embedder, making
/// the stored vectors searchable. Returns the number of vectors in the file.
fn publish(store: &Store, embedder: &dyn Embedder) -> Result<usize> {
    let model = embedder.id();
    let dimensions = match embedder.dimensions() {
        0 => store
            .meta("embedding_dimensions")?
            .and_then(|d| d.parse().ok())
            .unwrap_or(0),
        d => d,
    };
    if dimensions == 0 {
        return Ok(0);
    }
    let in_index = VectorIndex::sync(store, model, dimensions, Quantization::from_env()?)?;
    store.set_meta("embedding_model", model)?;
    store.set_meta("embedding_dimensions", &dimensions.to_string())?;
    Ok(in_index)
}

/// The embedder chosen by the environment: an HTTP provider when
/// `KEN_EMBED_PROVIDER` names one, else the built-in model (fetched if
/// needed). Returns it with the provider settings to store in the index.
pub fn configured_embedder() -> Result<(Box<dyn Embedder>, String)> {
    match ProviderConfig::from_env()? {
        Some(config) => {
            let stored = serde_json::to_string(&config)?;
            Ok((Box::new(HttpEmbedder::new(config)?), stored))
        }
        None => {
            crate::model::fetch(&crate::model::MINILM)?;
            let embedder = LocalBert::default_model(crate::embed::max_tokens_from_env())?;
            Ok((Box::new(embedder), LOCAL_PROVIDER.to_string()))
        }
    }
}

/// The embedder that made an index's vectors (`model` is its id,
/// `provider` the stored settings), to embed queries the same way.
pub fn embedder_for_index(model: &str, provider: Option<&str>) -> Result<Box<dyn Embedder>> {
    match provider {
        Some(json) if json != LOCAL_PROVIDER => {
            let config: ProviderConfig =
                serde_json::from_str(json).context("the index's embedding provider settings")?;
            Ok(Box::new(HttpEmbedder::new(config)?))
        }
        _ => {
            // `name/budget/textN`
            let max_tokens = model
                .split('/')
                .nth(1)
                .and_then(|t| t.parse().ok())
                .unwrap_or(crate::embed::DEFAULT_MAX_TOKENS);
            let embedder = LocalBert::default_model(max_tokens)?;
            if embedder.id() != model {
                anyhow::bail!(
                    "the index's vectors were made by {model}, not {}; run `ken index` to re-embed",
                    embedder.id()
                );
            }
            Ok(Box::new(embedder))
        }
    }
}

const LOCAL_PROVIDER: &str = "local";

/// `ken index`'s second phase for `root`: embeds what the current branch lacks.
pub fn embed_root(root: &std::path::Path, index_dir: &std::path::Path, reporter: &Reporter) -> Result<EmbedReport> {
    let mut store = Store::open_for_write(index_dir)?;
    // Locked before the model loads (seconds), so others see the pass at once.
    let _lock = store.lock_for_write(std::time::Duration::from_secs(120))?;
    let (embedder, provider) = configured_embedder()?;
    let branch = crate::git::head(root).catalog_key();
    if let Some(previous) = store.meta("embedding_model")? {
        if previous != embedder.id() {
            eprintln!(
                "ken: the embedding model changed ({previous} -> {}); embedding every chunk again",
                embedder.id()
            );
        }
    }
    store.set_meta("embedding_provider", &provider)?;
    embed_missing(&mut store, &branch, embedder.as_ref(), reporter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_with_split_names_are_also_embedded_spelled_out() {
        assert_eq!(query_text("toRgba"), "toRgba\nto rgba");
        assert_eq!(
            query_text("who calls parseHTTPConfig?"),
            "who calls parseHTTPConfig?\nwho calls parse http config?"
        );
        assert_eq!(
            query_text("where is parse_config called"),
            "where is parse_config called"
        );
        assert_eq!(query_text("JWT expiry check"), "JWT expiry check");
    }

    #[test]
    fn the_shared_cache_key_leaves_out_the_chunk_text_version() {
        assert_eq!(cache_model("all-MiniLM-L6-v2/256/text3"), "all-MiniLM-L6-v2/256");
        assert_eq!(
            cache_model("openai:text-embedding-3-small@256/text3"),
            "openai:text-embedding-3-small@256"
        );
        assert_eq!(cache_model("openai:my/textual"), "openai:my/textual");
        assert_eq!(cache_model("all-MiniLM-L6-v2/256"), "all-MiniLM-L6-v2/256");
    }

    #[test]
    fn chunk_text_starts_with_its_names_as_words() {
        assert_eq!(
            embedding_text(Some("impl Cookie {"), Some("Del, SetCookie"), "fn x() {}"),
            "del, set cookie\nimpl Cookie {\nfn x() {}"
        );
        // snake_case and one-word names are words already: no names line.
        assert_eq!(
            embedding_text(
                Some("class Session:"),
                Some("prepare_request"),
                "def prepare_request(self):"
            ),
            "class Session:\ndef prepare_request(self):"
        );
        assert_eq!(embedding_text(None, Some("Color"), "class Color {}"), "class Color {}");
        assert_eq!(
            embedding_text(None, Some("sha256_hex"), "fn f() {}"),
            "sha 256 hex\nfn f() {}"
        );
        assert_eq!(embedding_text(None, None, "# Title"), "# Title");
        // Cut on a character boundary, never inside one.
        let long = format!("a{}", "é".repeat(MAX_CHARS));
        assert_eq!(embedding_text(None, None, &long).len(), MAX_CHARS - 1);
    }
}
