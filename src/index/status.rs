//! `ken status`: what the index holds and what it reflects.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use crate::index::{BranchTotals, IndexReport};
use crate::source::discover::SkipCounts;
use crate::source::git;
use crate::store::{MetaKey, Store, SCHEMA_VERSION};

#[derive(Debug, Clone)]
pub struct Status {
    pub root: String,
    pub index_dir: String,
    pub schema_version: i64,
    /// The catalog searched now (the current branch; empty outside git).
    pub branch: String,
    pub head: String,
    pub files: u64,
    pub chunks: u64,
    pub languages: BTreeMap<String, u64>,
    pub last_indexed_at: Option<String>,
    pub last_index_seconds: Option<f64>,
    pub index_bytes: u64,
    pub skipped: SkipCounts,
    /// Every branch with files in the index, with its file count.
    pub branches: BTreeMap<String, u64>,
    /// The embedder whose vectors the index holds, if any.
    pub embedding_model: Option<String>,
    /// Share of this branch's distinct chunk contents that have a vector (0..=1).
    pub embedding_coverage: f64,
    pub embedded_contents: u64,
    pub distinct_contents: u64,
    /// This branch's contents with a signature vector (named definitions only).
    pub signature_vectors: u64,
    /// The documented definitions the query adapter was fitted on (see
    /// `adapter`); below 100 there is no adapter. None: not fitted yet.
    pub query_adapter_pairs: Option<usize>,
    /// How the query adapter was chosen: its method and how it ranked
    /// held-out documented definitions against the query as typed.
    pub query_adapter_fit: Option<String>,
    /// Where the query adapter stands: fitted, being fitted in the
    /// background (searches run without it meanwhile), pending, ...
    pub query_adapter_state: crate::index::fit::AdapterState,
    /// The process fitting the query adapter now, if any.
    pub query_adapter_fitter: Option<u32>,
    /// What the index reflects (branch, commit, indexed-at, pending changes, watcher).
    pub freshness: crate::index::freshness::Freshness,
}

pub fn status(root: &Path, index_dir: &Path) -> Result<Status> {
    let store = Store::open_for_read(index_dir)?;
    let head = git::head(root);
    let branch = head.catalog_key();
    // Each total below is the index's less what lies outside the branch: read that once.
    let outside = store.outside_of(&branch)?;
    let totals = BranchTotals::read_in(&store, &outside)?;
    let branches = store.files_per_branch()?;
    let embedding_model = store.meta(MetaKey::EmbeddingModel)?;
    let distinct_contents = store.branch_distinct_contents_in(&outside)?;
    let vectors_of = |model: &str| store.branch_vector_count_in(&outside, model);
    let (embedded_contents, signature_vectors) = match &embedding_model {
        Some(model) => (
            vectors_of(model)?,
            vectors_of(&crate::embed::text::signature_model(model))?,
        ),
        None => (0, 0),
    };
    let last: Option<IndexReport> = store
        .meta(MetaKey::LastIndexReport)?
        .and_then(|json| serde_json::from_str(&json).ok());
    let freshness = crate::index::freshness::Freshness::read(&store, root, true)?;
    let query_adapter_state = crate::index::fit::state(&store, &branch)?;
    Ok(Status {
        freshness,
        root: root.display().to_string(),
        index_dir: index_dir.display().to_string(),
        schema_version: SCHEMA_VERSION,
        branch,
        head: head.describe(),
        files: totals.files,
        chunks: totals.chunks,
        languages: totals.languages,
        last_indexed_at: store.meta(MetaKey::LastIndexedAt)?,
        last_index_seconds: last.as_ref().map(|r| r.seconds),
        index_bytes: store.disk_size(),
        skipped: last.map(|r| r.skipped).unwrap_or_default(),
        branches,
        embedding_coverage: if distinct_contents == 0 {
            0.0
        } else {
            embedded_contents as f64 / distinct_contents as f64
        },
        embedded_contents,
        distinct_contents,
        signature_vectors,
        embedding_model: embedding_model.clone(),
        query_adapter_pairs: embedding_model
            .as_deref()
            .and_then(|model| crate::embed::adapter::fitted_pairs(&store, model)),
        query_adapter_fit: crate::embed::adapter::summary(&store),
        query_adapter_state,
        query_adapter_fitter: crate::index::fit::FitLock::holder(index_dir),
    })
}
