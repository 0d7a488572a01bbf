//! The index's reports as a client reads them: what a run did, what the
//! index holds and reflects, its health, and the knowledge bases.
//!
//! The server's own results (`ServerStatus`, `IndexOutcome`...) hold the
//! core values they are built from and are written through the wire types
//! here (`serialize_with` and `schemars(with)`), so the code building them
//! stays in core terms while the client's format is fixed here.

use std::collections::BTreeMap;

use rmcp::schemars;
use serde::{Serialize, Serializer};

use crate::index::{fit, freshness, health, semantic, share, status};
use crate::search::kb;
use crate::source::discover;

/// Writes a core value as its wire type `W`.
fn as_wire<W, C, S>(value: &C, serializer: S) -> Result<S::Ok, S::Error>
where
    C: Clone,
    W: From<C> + Serialize,
    S: Serializer,
{
    W::from(value.clone()).serialize(serializer)
}

/// Writes an optional core value as its wire type `W`.
fn as_wire_option<W, C, S>(value: &Option<C>, serializer: S) -> Result<S::Ok, S::Error>
where
    C: Clone,
    W: From<C> + Serialize,
    S: Serializer,
{
    value.clone().map(W::from).serialize(serializer)
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct IndexOutcome {
    /// True when only counted: `files` is what would be indexed, nothing was written.
    pub estimate_only: bool,
    #[serde(flatten, serialize_with = "as_wire::<IndexReport, _, _>")]
    #[schemars(with = "IndexReport")]
    pub report: crate::index::IndexReport,
    /// Bytes of the files found (estimate_only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The embedding pass, when waited for.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "as_wire_option::<EmbedReport, _, _>"
    )]
    #[schemars(with = "Option<EmbedReport>")]
    pub embedding: Option<semantic::EmbedReport>,
    /// Where semantic search stands after this call.
    pub embedding_status: String,
    /// The knowledge bases refreshed with the project.
    pub knowledge_bases: Vec<BaseIndexed>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BaseIndexed {
    pub name: String,
    pub path: String,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "as_wire_option::<IndexReport, _, _>"
    )]
    #[schemars(with = "Option<IndexReport>")]
    pub report: Option<crate::index::IndexReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ServerStatus {
    #[serde(flatten, serialize_with = "as_wire::<Status, _, _>")]
    #[schemars(with = "Status")]
    pub status: status::Status,
    /// An index run of this server is under way: results may be partial.
    pub index_run_in_progress: bool,
    /// Embeddings are being computed in the background (coverage is growing).
    pub embedding_in_background: bool,
    pub knowledge_bases: Vec<BaseStatus>,
    /// The shared service answering every session of this repository (absent
    /// when this server runs alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceStatus>,
}

/// One process per repository owns the watcher and the embedder.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ServiceStatus {
    pub pid: u32,
    /// Sessions (clients) it serves now.
    pub sessions: u64,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BaseStatus {
    #[serde(flatten, serialize_with = "as_wire::<KnowledgeBase, _, _>")]
    #[schemars(with = "KnowledgeBase")]
    pub base: kb::KnowledgeBase,
    pub files: u64,
    pub chunks: u64,
    pub embedding_coverage: f64,
    /// Why the numbers are missing (not indexed yet...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KnowledgeBasesOutput {
    pub knowledge_bases: Vec<BaseStatus>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KnowledgeBaseAdded {
    #[serde(serialize_with = "as_wire::<KnowledgeBase, _, _>")]
    #[schemars(with = "KnowledgeBase")]
    pub added: kb::KnowledgeBase,
    #[serde(serialize_with = "as_wire::<IndexReport, _, _>")]
    #[schemars(with = "IndexReport")]
    pub index: crate::index::IndexReport,
    /// Where semantic search of the new base stands.
    pub embedding_status: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KnowledgeBaseRemoved {
    #[serde(serialize_with = "as_wire::<KnowledgeBase, _, _>")]
    #[schemars(with = "KnowledgeBase")]
    pub removed: kb::KnowledgeBase,
}

/// The knowledge bases as `ken kb list --json` prints them.
pub fn knowledge_bases(bases: Vec<kb::KnowledgeBase>) -> Vec<KnowledgeBase> {
    bases.into_iter().map(KnowledgeBase::from).collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct KnowledgeBase {
    pub name: String,
    /// Absolute, canonical folder.
    pub path: String,
    pub added_at: String,
}

impl From<kb::KnowledgeBase> for KnowledgeBase {
    fn from(b: kb::KnowledgeBase) -> KnowledgeBase {
        KnowledgeBase {
            name: b.name,
            path: b.path,
            added_at: b.added_at,
        }
    }
}

/// Why a file was left out of the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    Symlink,
    TooLarge,
    NotSource,
    Binary,
    InvalidUtf8,
    Minified,
    Generated,
    Unreadable,
    // Not documented: a documented variant would change the wire schema of
    // every skip count from named properties to a map.
    Secret,
}

impl From<discover::SkipReason> for SkipReason {
    fn from(reason: discover::SkipReason) -> SkipReason {
        use discover::SkipReason as Core;
        match reason {
            Core::Symlink => SkipReason::Symlink,
            Core::TooLarge => SkipReason::TooLarge,
            Core::NotSource => SkipReason::NotSource,
            Core::Binary => SkipReason::Binary,
            Core::InvalidUtf8 => SkipReason::InvalidUtf8,
            Core::Minified => SkipReason::Minified,
            Core::Generated => SkipReason::Generated,
            Core::Unreadable => SkipReason::Unreadable,
            Core::Secret => SkipReason::Secret,
        }
    }
}

/// Files left out, by why.
pub type SkipCounts = BTreeMap<SkipReason, u64>;

fn skip_counts(counts: discover::SkipCounts) -> SkipCounts {
    counts.into_iter().map(|(reason, n)| (reason.into(), n)).collect()
}

/// What one `ken index` run did.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct IndexReport {
    pub root: String,
    pub branch: String,
    /// Files in the index for this branch after the run.
    pub files: u64,
    pub chunks: u64,
    /// Files whose new content was parsed and chunked.
    pub parsed: u64,
    /// Files whose new content was already stored (e.g. from another branch).
    pub reused: u64,
    pub unchanged: u64,
    pub removed: u64,
    /// Lines and bytes of the parsed files.
    pub parsed_lines: u64,
    pub parsed_bytes: u64,
    /// Indexed files per language.
    pub languages: BTreeMap<String, u64>,
    pub skipped: SkipCounts,
    /// Problems that did not stop the run (unreadable directories, parse failures).
    pub warnings: Vec<String>,
    pub seconds: f64,
}

impl From<crate::index::IndexReport> for IndexReport {
    fn from(r: crate::index::IndexReport) -> IndexReport {
        IndexReport {
            root: r.root,
            branch: r.branch,
            files: r.files,
            chunks: r.chunks,
            parsed: r.parsed,
            reused: r.reused,
            unchanged: r.unchanged,
            removed: r.removed,
            parsed_lines: r.parsed_lines,
            parsed_bytes: r.parsed_bytes,
            languages: r.languages,
            skipped: skip_counts(r.skipped),
            warnings: r.warnings,
            seconds: r.seconds,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
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
    /// Signature vectors embedded by this run (see [`signature_texts`]).
    #[serde(default)]
    pub signatures_embedded: u64,
    pub seconds: f64,
}

impl From<semantic::EmbedReport> for EmbedReport {
    fn from(r: semantic::EmbedReport) -> EmbedReport {
        EmbedReport {
            model: r.model,
            contents: r.contents,
            embedded: r.embedded,
            reused: r.reused,
            from_shared_cache: r.from_shared_cache,
            vectors_in_index: r.vectors_in_index,
            signatures_embedded: r.signatures_embedded,
            seconds: r.seconds,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Freshness {
    /// The catalog searched: HEAD's branch, `@detached`, or empty outside git.
    pub branch: String,
    /// HEAD's commit now (full id), when in git.
    pub head_commit: Option<String>,
    /// The branch and commit of the last index update, and when it finished.
    pub indexed_branch: Option<String>,
    pub indexed_commit: Option<String>,
    pub indexed_at: Option<String>,
    /// Files new, changed or deleted on disk since the last update (by size
    /// and mtime against the catalog); absent when not counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_changes: Option<u64>,
    /// The process (`ken watch` or `ken serve`) keeping the index fresh, if any.
    pub watcher_pid: Option<u32>,
}

impl From<freshness::Freshness> for Freshness {
    fn from(f: freshness::Freshness) -> Freshness {
        Freshness {
            branch: f.branch,
            head_commit: f.head_commit,
            indexed_branch: f.indexed_branch,
            indexed_commit: f.indexed_commit,
            indexed_at: f.indexed_at,
            pending_changes: f.pending_changes,
            watcher_pid: f.watcher_pid,
        }
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
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
    pub query_adapter_state: AdapterState,
    /// The process fitting the query adapter now, if any.
    pub query_adapter_fitter: Option<u32>,
    /// What the index reflects (branch, commit, indexed-at, pending changes, watcher).
    pub freshness: Freshness,
}

/// Where the query adapter of an index stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdapterState {
    /// `KEN_QUERY_ADAPTER=0`: searches use none, and none is fitted.
    Off,
    /// No vectors yet: it is fitted after them.
    NoEmbeddings,
    /// Not fitted for the branch as it is (never, or the branch changed by
    /// more than a quarter since), and no process is fitting it: the next
    /// embedding pass that finishes starts its fit.
    Pending,
    /// A process is fitting it now (in the background, at low priority).
    Fitting,
    /// Fitted, and searches use it.
    Fitted,
    /// The branch has too few documented definitions for one.
    TooFewPairs,
}

impl From<fit::AdapterState> for AdapterState {
    fn from(state: fit::AdapterState) -> AdapterState {
        match state {
            fit::AdapterState::Off => AdapterState::Off,
            fit::AdapterState::NoEmbeddings => AdapterState::NoEmbeddings,
            fit::AdapterState::Pending => AdapterState::Pending,
            fit::AdapterState::Fitting => AdapterState::Fitting,
            fit::AdapterState::Fitted => AdapterState::Fitted,
            fit::AdapterState::TooFewPairs => AdapterState::TooFewPairs,
        }
    }
}

impl From<status::Status> for Status {
    fn from(s: status::Status) -> Status {
        Status {
            root: s.root,
            index_dir: s.index_dir,
            schema_version: s.schema_version,
            branch: s.branch,
            head: s.head,
            files: s.files,
            chunks: s.chunks,
            languages: s.languages,
            last_indexed_at: s.last_indexed_at,
            last_index_seconds: s.last_index_seconds,
            index_bytes: s.index_bytes,
            skipped: skip_counts(s.skipped),
            branches: s.branches,
            embedding_model: s.embedding_model,
            embedding_coverage: s.embedding_coverage,
            embedded_contents: s.embedded_contents,
            distinct_contents: s.distinct_contents,
            signature_vectors: s.signature_vectors,
            query_adapter_pairs: s.query_adapter_pairs,
            query_adapter_fit: s.query_adapter_fit,
            query_adapter_state: s.query_adapter_state.into(),
            query_adapter_fitter: s.query_adapter_fitter,
            freshness: s.freshness.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl From<health::Severity> for Severity {
    fn from(s: health::Severity) -> Severity {
        match s {
            health::Severity::Info => Severity::Info,
            health::Severity::Warning => Severity::Warning,
            health::Severity::Error => Severity::Error,
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Finding {
    pub check: String,
    pub severity: Severity,
    pub count: u64,
    pub message: String,
    /// Whether `repair` fixed it.
    pub repaired: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HealthReport {
    pub healthy: bool,
    pub schema_version: i64,
    pub findings: Vec<Finding>,
}

impl From<health::HealthReport> for HealthReport {
    fn from(r: health::HealthReport) -> HealthReport {
        HealthReport {
            healthy: r.healthy,
            schema_version: r.schema_version,
            findings: r
                .findings
                .into_iter()
                .map(|f| Finding {
                    check: f.check,
                    severity: f.severity.into(),
                    count: f.count,
                    message: f.message,
                    repaired: f.repaired,
                })
                .collect(),
        }
    }
}

/// A shared index file written or read (`ken index --export` / `--import`).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SharedIndexFile {
    pub file: String,
    /// The branch whose catalog it holds, and HEAD's commit when exported.
    pub branch: String,
    pub commit: Option<String>,
    /// The working tree had uncommitted changes, which it holds.
    pub dirty: bool,
    /// The embedder of its vectors.
    pub embedder: Option<String>,
    pub files: u64,
    pub chunks: u64,
    pub vectors: u64,
    /// The file's size.
    pub bytes: u64,
    pub seconds: f64,
}

impl From<share::SharedFile> for SharedIndexFile {
    fn from(shared: share::SharedFile) -> Self {
        let h = shared.header;
        SharedIndexFile {
            file: shared.file.display().to_string(),
            branch: h.branch,
            commit: h.commit,
            dirty: h.dirty,
            embedder: h.embedder,
            files: h.files,
            chunks: h.chunks,
            vectors: h.vectors,
            bytes: shared.bytes,
            seconds: shared.seconds,
        }
    }
}
