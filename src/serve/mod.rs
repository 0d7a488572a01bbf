//! `ken serve`: the MCP server over stdio (rmcp).
//!
//! Tools run their blocking work (SQLite, the model) on tokio's blocking pool,
//! so concurrent calls are served concurrently. Searchers (each with its own
//! read-only SQLite connection and lazily loaded query embedder) are pooled.
//! stdout carries only JSON-RPC; logs go to stderr.

pub mod logs;
pub mod metrics;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{schema_for_output, ToolCallContext};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, PromptMessage, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    prompt, prompt_handler, prompt_router, schemars, tool, tool_router, ErrorData, RoleServer, ServerHandler,
    ServiceExt,
};
use serde::{Deserialize, Serialize};

use crate::index::health::HealthReport;
use crate::index::progress::Reporter;
use crate::index::semantic::EmbedReport;
use crate::index::status::Status;
use crate::index::{IndexOptions, IndexReport};
use crate::search::kb::{self, BaseHit, KnowledgeBase, PROJECT};
use crate::search::{SearchMode, SearchRequest, Searcher};
use crate::serve::metrics::{Metrics, MetricsReport};

mod stdio;
pub mod surface;

/// Tool arguments whose errors name the argument at fault
/// (`argument \`limit\`: invalid type: string "ten", expected usize`).
#[derive(Debug)]
pub struct Args<T>(pub T);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Args<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        serde_path_to_error::deserialize(value).map(Args).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." {
                D::Error::custom(inner)
            } else {
                D::Error::custom(format!("argument `{path}`: {inner}"))
            }
        })
    }
}

impl<T: schemars::JsonSchema> schemars::JsonSchema for Args<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }

    fn inline_schema() -> bool {
        T::inline_schema()
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SearchArgs {
    /// What to look for: a question, keywords, or an identifier.
    pub query: String,
    /// How many results (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// hybrid (default), semantic or lexical.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Only paths matching this glob (`src/**/*.rs`) or under this folder.
    #[serde(default)]
    pub path: Option<String>,
    /// Only this language (rust, python, typescript...).
    #[serde(default)]
    pub language: Option<String>,
    /// Only this chunk kind (function, method, class, struct, section...).
    #[serde(default)]
    pub kind: Option<String>,
    /// At most this many results per file (1 lists files).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_per_file: Option<usize>,
    /// Fill about this many tokens of code instead of a fixed count.
    #[serde(default)]
    pub token_budget: Option<usize>,
    /// Only `project` or one knowledge base (default: all).
    #[serde(default)]
    pub base: Option<String>,
    /// Say why each result ranks where it does.
    #[serde(default)]
    pub explain: Option<bool>,
}

/// codebase_peek takes the filters of a search; what shapes code it does not return is left out.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PeekArgs {
    /// What to look for: a question, keywords, or an identifier.
    pub query: String,
    /// How many results (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// hybrid (default), semantic or lexical.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Only paths matching this glob (`src/**/*.rs`) or under this folder.
    #[serde(default)]
    pub path: Option<String>,
    /// Only this language (rust, python, typescript...).
    #[serde(default)]
    pub language: Option<String>,
    /// At most this many results per file (1 lists files).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_per_file: Option<usize>,
}

impl From<PeekArgs> for SearchArgs {
    fn from(p: PeekArgs) -> SearchArgs {
        SearchArgs {
            query: p.query,
            limit: p.limit,
            mode: p.mode,
            path: p.path,
            language: p.language,
            kind: None,
            max_per_file: p.max_per_file,
            token_budget: None,
            base: None,
            explain: None,
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct QuestionArgs {
    /// The question or task, in words or identifiers.
    pub query: String,
    /// Tokens the whole answer may take (default 3000).
    #[serde(default)]
    #[schemars(range(min = 500, max = 16000))]
    pub budget: Option<usize>,
    /// hybrid (default), semantic or lexical.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Only paths matching this glob (`src/**/*.rs`) or under this folder.
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SimilarArgs {
    /// A code snippet, or `path:line` of an indexed chunk.
    pub target: String,
    /// How many results (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// Keep results from the target's own file.
    #[serde(default)]
    pub include_source_file: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct NoArgs {}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CallGraphArgs {
    /// A symbol name, `path:line`, or symbol id.
    pub symbol: String,
    /// callers (default) or callees.
    #[serde(default)]
    pub direction: Option<crate::graph::query::Direction>,
    /// How many call levels to follow (default 1).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10))]
    pub depth: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RepoMapArgs {
    /// Tokens the map may take (default 2000).
    #[serde(default)]
    #[schemars(range(min = 500, max = 16000))]
    pub budget: Option<usize>,
    /// Rank around this: a path (file or folder) or a question.
    #[serde(default)]
    pub focus: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ChangeImpactArgs {
    /// Which change: `A..B`, `A...B`, or a revision or branch (from its merge base with HEAD to the working
    /// tree). Default: the uncommitted changes.
    #[serde(default)]
    pub rev: Option<String>,
    /// Only the staged changes.
    #[serde(default)]
    pub staged: Option<bool>,
    /// Caller levels to list (default 2).
    #[serde(default)]
    #[schemars(range(min = 1, max = 6))]
    pub depth: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CallPathArgs {
    /// Where the calls start: a symbol name, `path:line`, or symbol id.
    pub from: String,
    /// Where they end: a symbol name, `path:line`, or symbol id.
    pub to: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct HealthArgs {
    /// Fix what can be fixed (a damaged index is rebuilt from the files, keeping its vectors).
    #[serde(default)]
    pub repair: Option<bool>,
    /// Check the whole database page by page instead of the quick check (slower).
    #[serde(default)]
    pub full: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct IndexArgs {
    /// Rebuild the index from scratch.
    #[serde(default)]
    pub force: Option<bool>,
    /// Only count the files that would be indexed.
    #[serde(default)]
    pub estimate_only: Option<bool>,
    /// Also wait for the embeddings (default: computed in the background).
    #[serde(default)]
    pub wait_for_embeddings: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct LogsArgs {
    /// How many of the newest records (default 50, at most 2000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Minimum level: error, warn, info (default) or debug.
    #[serde(default)]
    pub level: Option<LogLevel>,
    /// Only this part of ken: index, semantic, search, mcp, watch, kb...
    #[serde(default)]
    pub category: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AddKnowledgeBaseArgs {
    /// The folder to add (absolute, or relative to the project root).
    pub path: String,
    /// A short name for results and removal (default: the folder's name).
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RemoveKnowledgeBaseArgs {
    /// The knowledge base's name, as list_knowledge_bases shows it.
    pub name: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Hit {
    /// `project`, or the knowledge base the result comes from.
    pub base: String,
    /// Relative to the base's root.
    pub path: String,
    /// The file's absolute path, for results from a knowledge base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absolute_path: Option<String>,
    pub start_line: u32,
    pub end_line: u32,
    pub kind: String,
    pub symbol: Option<String>,
    pub language: String,
    /// Ranks the list (higher first). Its scale depends on the mode: BM25 evidence in lexical,
    /// cosine similarity in semantic and find_similar, both fused in hybrid; compare scores
    /// within one list only.
    pub score: f64,
    /// The chunk's code (omitted by codebase_peek).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Enclosing definitions' signatures (e.g. the class of a method).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Why the result ranks where it does (with `explain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<crate::search::Explain>,
    /// The same code elsewhere: identical chunks, listed here instead of
    /// ranked again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<crate::search::Location>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SearchOutput {
    /// How likely the results are to answer the query; when low, `note`
    /// says so and why (stop searching, or ask otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<crate::search::confidence::Confidence>,
    pub results: Vec<Hit>,
    /// Set when the search could not do everything asked (e.g. lexical only,
    /// an index run in progress).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// What the index reflects: branch, commit, when indexed, pending changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<crate::index::freshness::Freshness>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct IndexOutcome {
    /// True when only counted: `files` is what would be indexed, nothing was written.
    pub estimate_only: bool,
    #[serde(flatten)]
    pub report: IndexReport,
    /// Bytes of the files found (estimate_only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The embedding pass, when waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding: Option<EmbedReport>,
    /// Where semantic search stands after this call.
    pub embedding_status: String,
    /// The knowledge bases refreshed with the project.
    pub knowledge_bases: Vec<BaseIndexed>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BaseIndexed {
    pub name: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<IndexReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ServerStatus {
    #[serde(flatten)]
    pub status: Status,
    /// An index run of this server is under way: results may be partial.
    pub index_run_in_progress: bool,
    /// Embeddings are being computed in the background (coverage is growing).
    pub embedding_in_background: bool,
    pub knowledge_bases: Vec<BaseStatus>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BaseStatus {
    #[serde(flatten)]
    pub base: KnowledgeBase,
    pub files: u64,
    pub chunks: u64,
    pub embedding_coverage: f64,
    /// Why the numbers are missing (not indexed yet...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct LogsOutput {
    /// Oldest first.
    pub records: Vec<crate::serve::logs::LogRecord>,
    /// Where the full log is written.
    pub log_file: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KnowledgeBasesOutput {
    pub knowledge_bases: Vec<BaseStatus>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KnowledgeBaseAdded {
    pub added: KnowledgeBase,
    pub index: IndexReport,
    /// Where semantic search of the new base stands.
    pub embedding_status: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KnowledgeBaseRemoved {
    pub removed: KnowledgeBase,
}

/// What a search of every base found.
struct BasesFound {
    hits: Vec<BaseHit>,
    bases: Vec<KnowledgeBase>,
    notices: Vec<String>,
    confidence: crate::search::confidence::Confidence,
    /// What the project's index reflects.
    index: crate::index::freshness::Freshness,
}

/// Idle searchers per base (`project` or a knowledge base's name).
#[derive(Default)]
struct SearcherPool {
    idle: Mutex<HashMap<String, Vec<Searcher>>>,
    /// The project's model is being loaded in the background
    /// ([`KenServer::load_model_in_background`]): new project searchers answer
    /// hybrid searches lexically meanwhile.
    model_loading: Arc<AtomicBool>,
}

impl SearcherPool {
    fn take(&self, base: &str, root: &Path, index_dir: &Path) -> anyhow::Result<Searcher> {
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(base)
            .and_then(Vec::pop);
        let open = || -> anyhow::Result<Searcher> {
            let mut searcher = Searcher::open(root, index_dir)?;
            if base == PROJECT {
                searcher.defer_model_while(self.model_loading.clone());
            }
            Ok(searcher)
        };
        match pooled {
            // A searcher of another branch (HEAD moved) is not reused.
            Some(mut s) => match s.refresh(root) {
                true => Ok(s),
                false => open(),
            },
            None => open(),
        }
    }

    fn give(&self, base: &str, searcher: Searcher) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(base.to_string())
            .or_default()
            .push(searcher);
    }

    /// Pooled searchers hold the old vector file and branch; start afresh.
    fn clear(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

struct BackgroundEmbedding {
    cancel: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// The server's long-running work: at most one index run, at most one
/// background embedding pass.
#[derive(Default)]
struct Jobs {
    index_run_since: Mutex<Option<Instant>>,
    embedding: Mutex<Option<BackgroundEmbedding>>,
}

impl Jobs {
    fn index_running(&self) -> bool {
        self.index_run_since.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    fn embedding_running(&self) -> bool {
        self.embedding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|b| !b.thread.is_finished())
    }

    /// Stops the background embedding (it keeps what it committed) and waits for it.
    fn stop_embedding(&self) {
        let running = self.embedding.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(job) = running {
            job.cancel.store(true, Ordering::Relaxed);
            let _ = job.thread.join();
        }
    }
}

/// Marks an index run as under way until dropped.
struct IndexRunGuard(Arc<Jobs>);

impl IndexRunGuard {
    fn acquire(jobs: &Arc<Jobs>) -> Result<IndexRunGuard, String> {
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

#[derive(Clone)]
pub struct KenServer {
    root: PathBuf,
    index_dir: PathBuf,
    pool: Arc<SearcherPool>,
    metrics: Arc<Metrics>,
    jobs: Arc<Jobs>,
    /// The watcher of this server, if it runs one.
    watch: Option<Arc<crate::index::watch::WatchState>>,
    /// The tools this server exposes (`--tools`), with lean schemas.
    tools: Arc<ToolRouter<KenServer>>,
    /// Folders the user allowed clients to add as knowledge bases, canonical.
    allowed_kb_folders: Arc<Vec<PathBuf>>,
    /// There was no index when the server started: its watcher builds the first.
    first_index: bool,
}

/// How long a search waits for the watcher's first lexical commit.
const FIRST_INDEX_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How `ken serve` runs; the CLI reads every setting once into this.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Tool presets and names (see [`surface::select`]); empty is the default set.
    pub tools: Vec<String>,
    /// Folders (with what is under them) that clients may add as knowledge
    /// bases besides the roots they declare.
    pub allowed_kb_folders: Vec<PathBuf>,
    /// Keep the index fresh with a watcher meanwhile.
    pub watch: Option<crate::index::watch::WatchOptions>,
}

/// Every tool ken has, with its schemas made standard and lean.
fn all_tools() -> ToolRouter<KenServer> {
    let mut router = KenServer::tool_router();
    for route in router.map.values_mut() {
        route.attr.input_schema = Arc::new(surface::lean_input(&route.attr.input_schema));
        if let Some(output) = &route.attr.output_schema {
            route.attr.output_schema = Some(Arc::new(surface::lean_output(output)));
        }
    }
    router
}

/// The tools `spec` selects (see [`surface::select`]).
pub fn selected_tools(spec: &[String]) -> anyhow::Result<ToolRouter<KenServer>> {
    let mut router = all_tools();
    let names: Vec<String> = router.map.keys().map(|k| k.to_string()).collect();
    let chosen = surface::select(spec, &names)?;
    for name in names.iter().filter(|n| !chosen.contains(*n)) {
        router.remove_route(name);
    }
    Ok(router)
}

/// Arguments a tool does not take, as the error an agent can correct itself by.
fn unknown_arguments(
    tool: &rmcp::model::Tool,
    arguments: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Option<String> {
    let known = tool.input_schema.get("properties").and_then(|p| p.as_object());
    let unknown: Vec<&String> = arguments?
        .keys()
        .filter(|k| !known.is_some_and(|p| p.contains_key(k.as_str())))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    let takes: Vec<&String> = known.map(|p| p.keys().collect()).unwrap_or_default();
    let names: Vec<String> = unknown.iter().map(|k| format!("`{k}`")).collect();
    Some(format!(
        "{} takes no argument {}; it takes: {}",
        tool.name,
        names.join(", "),
        if takes.is_empty() {
            "none".to_string()
        } else {
            takes.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
        }
    ))
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// Runs blocking work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ErrorData> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ErrorData::internal_error(format!("the tool's task failed: {e}"), None))
}

/// A tool's data result, or its error as a tool error (never a dead server).
fn data_result<T: Serialize>(outcome: anyhow::Result<T>) -> Result<CallToolResult, ErrorData> {
    match outcome {
        Ok(value) => json_result(&value),
        Err(e) => Ok(tool_error(format!("{e:#}"))),
    }
}

impl KenServer {
    /// Loads the project's query model and vector index on another thread
    /// and puts the searcher in the pool: the first hybrid search does not
    /// wait for the model (it answers lexically until it is loaded); then
    /// the tokenizer of the context tools.
    fn load_model_in_background(&self) {
        let (pool, root, index_dir) = (self.pool.clone(), self.root.clone(), self.index_dir.clone());
        pool.model_loading.store(true, Ordering::SeqCst);
        std::thread::spawn(move || {
            let started = Instant::now();
            match Searcher::open(&root, &index_dir) {
                Ok(searcher) => match searcher.load_model() {
                    Ok(()) => {
                        tracing::info!("model loaded in {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
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
    pub fn new(
        root: PathBuf,
        index_dir: PathBuf,
        tools: ToolRouter<KenServer>,
        allowed_kb_folders: Vec<PathBuf>,
    ) -> KenServer {
        KenServer {
            root,
            pool: Arc::default(),
            metrics: Arc::default(),
            jobs: Arc::default(),
            watch: None,
            tools: Arc::new(tools),
            allowed_kb_folders: Arc::new(allowed_kb_folders),
            first_index: !crate::store::has_index(&index_dir),
            index_dir,
        }
    }

    /// What the agent reads at initialisation: what ken is for and when to
    /// use each exposed tool instead of grep or reading files.
    fn instructions(&self) -> String {
        let mut text = String::from(
            "ken indexes this repository (tree-sitter chunks, BM25, embeddings, a call graph) and keeps the index \
fresh as files change. Tools are named here as ken names them; your client may show them with a prefix (e.g. \
ken_codebase_search or mcp__ken__codebase_search). Use codebase_search instead of grep or reading many files to \
find where something is implemented, how it works, or a symbol's definition: it takes identifiers (parse_config \
finds its definition first) and questions (\"where is the JWT expiry checked?\") and returns the ranked \
functions with their code.",
        );
        let uses = [
            (
                "codebase_peek",
                "codebase_peek gives locations only, for cheap orientation",
            ),
            ("find_similar", "find_similar finds code like a snippet or a path:line"),
            ("call_graph", "call_graph gives callers and callees"),
            (
                "symbol_context",
                "symbol_context gives what an edit of one symbol needs (body, callers, callees, tests, commits)",
            ),
            (
                "call_graph_path",
                "call_graph_path shows how one symbol reaches another",
            ),
            (
                "change_impact",
                "change_impact says what a diff affects and which tests to run, before committing or reviewing",
            ),
            ("index_status", "index_status says what the index reflects"),
            ("index_codebase", "index_codebase refreshes it after large changes"),
            (
                "add_knowledge_base",
                "add_knowledge_base makes documentation or another repository searchable",
            ),
        ];
        let exposed: Vec<&str> = uses
            .iter()
            .filter(|(tool, _)| self.tools.has_route(tool))
            .map(|(_, use_)| *use_)
            .collect();
        if !exposed.is_empty() {
            text.push(' ');
            text.push_str(&exposed.join("; "));
            text.push('.');
        }
        text
    }

    /// Records a finished tool call in the metrics and the log.
    fn finish(
        &self,
        tool: &str,
        started: Instant,
        result: Result<CallToolResult, ErrorData>,
    ) -> Result<CallToolResult, ErrorData> {
        let ok = result.as_ref().is_ok_and(|r| r.is_error != Some(true));
        let elapsed = started.elapsed();
        self.metrics.tool_call(tool, elapsed, ok);
        if ok {
            tracing::info!("{tool}: answered in {:.1} ms", elapsed.as_secs_f64() * 1000.0);
        } else {
            let why = match &result {
                Ok(r) => r
                    .content
                    .first()
                    .and_then(|c| c.as_text())
                    .map(|t| t.text.clone())
                    .unwrap_or_default(),
                Err(e) => e.message.to_string(),
            };
            tracing::warn!("{tool}: failed in {:.1} ms: {why}", elapsed.as_secs_f64() * 1000.0);
        }
        result
    }

    fn knowledge_bases(&self) -> Vec<KnowledgeBase> {
        kb::list(&self.index_dir).unwrap_or_else(|e| {
            tracing::warn!("knowledge bases: {e:#}");
            Vec::new()
        })
    }

    /// A notice for results while the index is being built or embedded.
    fn jobs_notice(&self) -> Option<String> {
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
    fn start_background_embedding(&self) {
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
                    }
                    Err(e) => tracing::warn!("embedding {name}: {e:#}"),
                }
                pool.clear();
            }
        });
        *self.jobs.embedding.lock().unwrap_or_else(|e| e.into_inner()) = Some(BackgroundEmbedding { cancel, thread });
    }
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

/// A tool's `limit`: 10 by default, 1 to 100 (0 is an error, not one result).
fn result_limit(limit: Option<usize>) -> Result<usize, String> {
    match limit.unwrap_or(10) {
        n @ 1..=100 => Ok(n),
        n => Err(format!("`limit` is {n}: ask for 1 to 100 results")),
    }
}

fn to_hits(hits: Vec<BaseHit>, bases: &[KnowledgeBase], with_code: bool, budget: Option<usize>) -> Vec<Hit> {
    let mut used = 0usize;
    let mut out = Vec::new();
    for (base, h) in hits {
        // About four characters per token; a listed copy is a path and two numbers.
        let cost = h.content.len() / 4 + 20 + h.copies.iter().map(|c| c.path.len() / 4 + 8).sum::<usize>();
        if let Some(budget) = budget {
            if !out.is_empty() && used + cost > budget {
                break;
            }
        }
        used += cost;
        let absolute_path = bases
            .iter()
            .find(|b| b.name == base)
            .map(|b| b.root().join(&h.path).display().to_string());
        out.push(Hit {
            base,
            path: h.path,
            absolute_path,
            start_line: h.start_line,
            end_line: h.end_line,
            kind: h.kind,
            symbol: h.symbol,
            language: h.language,
            score: h.score,
            code: with_code.then_some(h.content),
            context: h.context,
            explain: h.explain,
            copies: h.copies,
        });
    }
    out
}

/// `path:line` targets must name a file inside the project: no absolute
/// paths elsewhere, no `..`.
fn confine_target(root: &Path, target: &str) -> Result<String, String> {
    let Some((path, line)) = target.trim().rsplit_once(':') else {
        return Ok(target.to_string());
    };
    if path.contains(char::is_whitespace) || line.trim().parse::<u32>().is_err() {
        return Ok(target.to_string());
    }
    let relative = match Path::new(path).strip_prefix(root) {
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) if Path::new(path).is_absolute() => {
            return Err(format!(
                "{path}: paths must stay inside the indexed project ({})",
                root.display()
            ))
        }
        Err(_) => path.to_string(),
    };
    if Path::new(&relative)
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!("{path}: paths must stay inside the indexed project (no `..`)"));
    }
    Ok(format!("{relative}:{}", line.trim()))
}

#[tool_router]
impl KenServer {
    #[tool(
        description = "Search the codebase (and knowledge bases) by meaning, keywords or identifier. Use it \
instead of grep or reading files to find where something is implemented, how a feature works, or a symbol's \
definition: one call returns the ranked functions with their code.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<SearchOutput>()
    )]
    async fn codebase_search(
        &self,
        Parameters(Args(args)): Parameters<Args<SearchArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = self.search_tool(args, true).await;
        self.finish("codebase_search", started, result)
    }

    #[tool(
        description = "What you need to answer a question about the code, in one call within a token budget: \
the best code for it plus its callers' call sites, its callees' signatures, its tests and matching docs. Use it \
instead of codebase_search and reading files when you want to understand something, not list where it is.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<crate::context::question::QuestionContext>()
    )]
    async fn codebase_context(
        &self,
        Parameters(Args(args)): Parameters<Args<QuestionArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = self.question_tool(args).await;
        self.finish("codebase_context", started, result)
    }

    #[tool(
        description = "codebase_search without the code: locations and symbols only, for cheap orientation \
(which files handle a feature?).",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<SearchOutput>()
    )]
    async fn codebase_peek(
        &self,
        Parameters(Args(args)): Parameters<Args<PeekArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = self.search_tool(args.into(), false).await;
        self.finish("codebase_peek", started, result)
    }

    #[tool(
        description = "Project code similar in meaning to a snippet or to the chunk at `path:line`: duplicates \
and other implementations of a pattern, which grep cannot find.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<SearchOutput>()
    )]
    async fn find_similar(
        &self,
        Parameters(Args(args)): Parameters<Args<SimilarArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = self.similar_tool(args).await;
        self.finish("find_similar", started, result)
    }

    #[tool(
        description = "What the index holds and reflects (files, languages, embedding coverage, branch, HEAD, \
when indexed, runs under way). Check it when results look stale or incomplete.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<ServerStatus>()
    )]
    async fn index_status(&self, Parameters(Args(_)): Parameters<Args<NoArgs>>) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let server = self.clone();
        let result = blocking(move || server.status()).await.and_then(data_result);
        self.finish("index_status", started, result)
    }

    #[tool(
        description = "Refresh the index (only changed files are re-parsed; a watcher usually does this itself). \
Reports progress, stops when cancelled keeping what it committed; searches work meanwhile.",
        output_schema = schema_for_output::<IndexOutcome>()
    )]
    async fn index_codebase(
        &self,
        Parameters(Args(args)): Parameters<Args<IndexArgs>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = self.index_tool(args, ctx).await;
        self.finish("index_codebase", started, result)
    }

    #[tool(
        description = "Consistency checks of the index (orphaned chunks or vectors, dimension mismatch, vector \
file out of step, files changed since indexing, missing vectors) with severities; repair fixes what it can.",
        output_schema = schema_for_output::<HealthReport>()
    )]
    async fn index_health_check(
        &self,
        Parameters(Args(args)): Parameters<Args<HealthArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let (root, dir) = (self.root.clone(), self.index_dir.clone());
        let repair = args.repair.unwrap_or(false);
        let full = args.full.unwrap_or(false);
        let jobs = self.jobs.clone();
        let result = blocking(move || {
            if repair {
                jobs.stop_embedding();
            }
            crate::index::health::check(&root, &dir, repair, full)
        })
        .await
        .and_then(data_result);
        self.finish("index_health_check", started, result)
    }

    #[tool(
        description = "This server's counters and latency histograms: searches (p50/p95), tool calls and errors, \
embeddings computed vs re-used from the content-hash cache, index runs and their durations.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<MetricsReport>()
    )]
    async fn index_metrics(&self, Parameters(Args(_)): Parameters<Args<NoArgs>>) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = json_result(&self.metrics.report());
        self.finish("index_metrics", started, result)
    }

    #[tool(
        description = "Recent log records of this server (indexing, embedding, searches, errors), newest last; \
filter by level and category. Use it to find out why results are missing or an index run failed.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<LogsOutput>()
    )]
    async fn index_logs(
        &self,
        Parameters(Args(args)): Parameters<Args<LogsArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let level = match args.level.unwrap_or(LogLevel::Info) {
            LogLevel::Error => tracing::Level::ERROR,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Debug => tracing::Level::DEBUG,
        };
        let limit = args.limit.unwrap_or(50).clamp(1, 2000);
        let result = json_result(&LogsOutput {
            records: crate::serve::logs::recent(limit, level, args.category.as_deref()),
            log_file: log_path(&self.index_dir).display().to_string(),
        });
        self.finish("index_logs", started, result)
    }

    #[tool(
        description = "Add a folder (documentation, another repository) as a knowledge base, indexed now and \
searched with the project. Only folders inside the client's roots or allowed by the user are accepted.",
        output_schema = schema_for_output::<KnowledgeBaseAdded>()
    )]
    async fn add_knowledge_base(
        &self,
        Parameters(Args(args)): Parameters<Args<AddKnowledgeBaseArgs>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = self.add_kb_tool(args, ctx).await;
        self.finish("add_knowledge_base", started, result)
    }

    #[tool(
        description = "The knowledge bases searched with the project: name, folder, files, chunks, embedding \
coverage.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<KnowledgeBasesOutput>()
    )]
    async fn list_knowledge_bases(
        &self,
        Parameters(Args(_)): Parameters<Args<NoArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let server = self.clone();
        let result = blocking(move || {
            Ok(KnowledgeBasesOutput {
                knowledge_bases: server.base_statuses(),
            })
        })
        .await
        .and_then(data_result);
        self.finish("list_knowledge_bases", started, result)
    }

    #[tool(
        description = "Remove a knowledge base by name: it is no longer searched and its index is deleted (the \
folder itself is never touched).",
        output_schema = schema_for_output::<KnowledgeBaseRemoved>()
    )]
    async fn remove_knowledge_base(
        &self,
        Parameters(Args(args)): Parameters<Args<RemoveKnowledgeBaseArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        // The background pass may be embedding this base.
        let server = self.clone();
        let result = blocking(move || {
            let was_embedding = server.jobs.embedding_running();
            server.jobs.stop_embedding();
            server.pool.clear();
            let removed = kb::remove(&server.index_dir, &args.name).map(|removed| KnowledgeBaseRemoved { removed });
            if was_embedding {
                server.start_background_embedding();
            }
            removed
        })
        .await
        .and_then(data_result);
        self.finish("remove_knowledge_base", started, result)
    }

    #[tool(
        description = "Who calls a symbol, or what it calls, from ken's code graph (calls resolved by scope, \
imports and receiver). Use it instead of grep for \"who calls X?\" or before changing a signature: it skips \
comments, strings and same-named functions elsewhere. Edges give the call site and a confidence; an ambiguous \
name returns candidates.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<crate::graph::query::CallGraph>()
    )]
    async fn call_graph(
        &self,
        Parameters(Args(args)): Parameters<Args<CallGraphArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = if args.symbol.trim().is_empty() {
            Ok(tool_error("`symbol` is empty: give a name, path:line or symbol id"))
        } else {
            let direction = args.direction.unwrap_or(crate::graph::query::Direction::Callers);
            let depth = args.depth.unwrap_or(1).clamp(1, 10);
            let (root, dir) = (self.root.clone(), self.index_dir.clone());
            blocking(move || crate::graph::call_graph(&root, &dir, &args.symbol, direction, depth))
                .await
                .and_then(data_result)
        };
        self.finish("call_graph", started, result)
    }

    #[tool(
        description = "Where to start in an unfamiliar repository: its most referenced files with their key \
definitions' signatures, optionally around a path or a question. Instead of listing folders and opening files.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<crate::context::map::RepoMap>()
    )]
    async fn repo_map(
        &self,
        Parameters(Args(args)): Parameters<Args<RepoMapArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let budget =
            crate::context::pack::checked_budget(Some(args.budget.unwrap_or(crate::context::map::DEFAULT_MAP_BUDGET)));
        let result = match budget {
            Err(e) => Ok(tool_error(format!("{e:#}"))),
            Ok(budget) => {
                let (root, dir) = (self.root.clone(), self.index_dir.clone());
                blocking(move || {
                    let focus = crate::context::map::Focus::parse(&root, args.focus.as_deref());
                    crate::context::map::repo_map(&root, &dir, focus, budget)
                })
                .await
                .and_then(data_result)
            }
        };
        self.finish("repo_map", started, result)
    }

    #[tool(
        description = "The shortest chain of calls from one symbol to another (how does A reach B?), with call \
sites; no edges when none within 12 calls.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<crate::graph::query::CallPath>()
    )]
    async fn call_graph_path(
        &self,
        Parameters(Args(args)): Parameters<Args<CallPathArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = if args.from.trim().is_empty() || args.to.trim().is_empty() {
            Ok(tool_error("`from` and `to` must both name a symbol"))
        } else {
            let (root, dir) = (self.root.clone(), self.index_dir.clone());
            blocking(move || crate::graph::call_path(&root, &dir, &args.from, &args.to))
                .await
                .and_then(data_result)
        };
        self.finish("call_graph_path", started, result)
    }

    #[tool(
        description = "Everything an edit of one symbol needs, within a token budget: its body, signature and doc, \
callers' call sites, callees' signatures, its tests, last commits. Use it instead of search and reading files \
when you know the symbol; locations_only answers \"where is X defined?\".",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<crate::context::symbol::SymbolContext>()
    )]
    async fn symbol_context(
        &self,
        Parameters(Args(args)): Parameters<Args<crate::context::symbol::SymbolContextArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = if args.symbol.trim().is_empty() {
            Ok(tool_error(
                "`symbol` is empty: give a name, Type.name, path:line or symbol id",
            ))
        } else {
            let (root, dir) = (self.root.clone(), self.index_dir.clone());
            blocking(move || {
                if args.locations_only.unwrap_or(false) {
                    crate::context::symbol::locations(&root, &dir, &args.symbol)
                } else {
                    crate::context::symbol::symbol_context(&root, &dir, &args.symbol, args.budget)
                }
            })
            .await
            .and_then(data_result)
        };
        self.finish("symbol_context", started, result)
    }

    #[tool(
        description = "What a change affects: changed symbols (deleted, renamed too), their callers, the tests that \
reach them, a risk level, and a command running just those tests. Use it after editing or to review a branch \
(default: uncommitted changes).",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<crate::context::impact::Impact>()
    )]
    async fn change_impact(
        &self,
        Parameters(Args(args)): Parameters<Args<ChangeImpactArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        use crate::context::impact::Target;
        let target = match (args.staged.unwrap_or(false), args.rev.as_deref().map(str::trim)) {
            (true, _) => Target::Staged,
            (false, Some(rev)) if !rev.is_empty() => Target::Rev(rev.to_string()),
            _ => Target::WorkTree,
        };
        let depth = args.depth.unwrap_or(2).clamp(1, 6);
        let (root, dir) = (self.root.clone(), self.index_dir.clone());
        let result = blocking(move || crate::context::impact::change_impact(&root, &dir, &target, depth))
            .await
            .and_then(data_result);
        self.finish("change_impact", started, result)
    }
}

impl KenServer {
    async fn search_tool(&self, args: SearchArgs, with_code: bool) -> Result<CallToolResult, ErrorData> {
        if args.query.trim().is_empty() {
            return Ok(tool_error("`query` is empty: say what to look for"));
        }
        if args.max_per_file == Some(0) {
            return Ok(tool_error(format!(
                "`max_per_file` {}",
                crate::search::MAX_PER_FILE_AT_LEAST_ONE
            )));
        }
        let limit = match result_limit(args.limit) {
            Ok(limit) => limit,
            Err(why) => return Ok(tool_error(why)),
        };
        if let Some(indexing) = self.wait_for_first_index().await {
            return json_result(&SearchOutput {
                confidence: None,
                results: Vec::new(),
                notice: Some(indexing),
                index: None,
            });
        }
        let token_budget = args.token_budget;
        let only = args.base.clone();
        let req = SearchRequest {
            query: args.query,
            limit,
            path_glob: args.path,
            language: args.language,
            kind: args.kind,
            max_per_file: args.max_per_file,
            mode: args.mode.unwrap_or_default(),
            explain: args.explain.unwrap_or(false),
        };
        let server = self.clone();
        let started = Instant::now();
        let outcome = blocking(move || server.search_bases(&req, only.as_deref())).await?;
        let BasesFound {
            hits,
            bases,
            mut notices,
            confidence,
            index,
        } = match outcome {
            Ok(found) => found,
            Err(e) => return Ok(tool_error(format!("{e:#}"))),
        };
        let lexical_fallback = notices.iter().any(|n| n.contains("lexical"));
        self.metrics.query(started.elapsed(), lexical_fallback);
        notices.extend(self.jobs_notice());
        json_result(&SearchOutput {
            confidence: Some(confidence),
            results: to_hits(hits, &bases, with_code, token_budget),
            notice: (!notices.is_empty()).then(|| notices.join("; ")),
            index: Some(index),
        })
    }

    async fn question_tool(&self, args: QuestionArgs) -> Result<CallToolResult, ErrorData> {
        if args.query.trim().is_empty() {
            return Ok(tool_error("`query` is empty: say what to look for"));
        }
        if let Err(e) = crate::context::pack::checked_budget(args.budget) {
            return Ok(tool_error(format!("`budget`: {e}")));
        }
        if let Some(indexing) = self.wait_for_first_index().await {
            return Ok(tool_error(indexing));
        }
        let req = crate::context::question::QuestionRequest {
            query: args.query,
            budget: args.budget,
            mode: args.mode.unwrap_or_default(),
            path_glob: args.path,
        };
        let server = self.clone();
        let started = Instant::now();
        let outcome = blocking(move || server.answer_question(&req)).await?;
        if let Ok(answer) = &outcome {
            let lexical_fallback = answer.notice.as_deref().is_some_and(|n| n.contains("lexical"));
            self.metrics.query(started.elapsed(), lexical_fallback);
        }
        data_result(outcome)
    }

    /// codebase_context with pooled searchers of the project and the knowledge bases.
    fn answer_question(
        &self,
        req: &crate::context::question::QuestionRequest,
    ) -> anyhow::Result<crate::context::question::QuestionContext> {
        let project = self.pool.take(PROJECT, &self.root, &self.index_dir)?;
        let mut opened = Vec::new();
        for base in self.knowledge_bases() {
            if let Ok(s) = self
                .pool
                .take(&base.name, base.root(), &base.index_dir(&self.index_dir))
            {
                opened.push((base, s));
            }
        }
        let refs: Vec<(KnowledgeBase, &Searcher)> = opened.iter().map(|(b, s)| (b.clone(), s)).collect();
        let answer = crate::context::question::context_for_question(&project, &refs, &self.root, req);
        self.pool.give(PROJECT, project);
        for (base, searcher) in opened {
            self.pool.give(&base.name, searcher);
        }
        answer
    }

    /// While this server's watcher builds a repository's first index, a search
    /// waits for its lexical commit (a few seconds at most); past that, the
    /// answer is that indexing is under way, with counts, not an error.
    async fn wait_for_first_index(&self) -> Option<String> {
        let watch = self.watch.as_ref().filter(|_| self.first_index)?;
        let deadline = Instant::now() + FIRST_INDEX_WAIT;
        while watch.updates.load(Ordering::SeqCst) == 0 {
            if Instant::now() >= deadline {
                let done = watch.indexing_done.load(Ordering::SeqCst);
                let total = watch.indexing_total.load(Ordering::SeqCst);
                let counts = match total {
                    0 => "finding the files".to_string(),
                    total => format!("{done} of {total} files so far"),
                };
                return Some(format!(
                    "ken is building this repository's first index ({counts}); no results yet: search again in a \
                     few seconds"
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        None
    }

    /// Searches the project and the knowledge bases with pooled searchers.
    fn search_bases(&self, req: &SearchRequest, only: Option<&str>) -> anyhow::Result<BasesFound> {
        let bases = self.knowledge_bases();
        if let Some(name) = only {
            anyhow::ensure!(
                name == PROJECT || bases.iter().any(|b| b.name == name),
                "no base named `{name}`: use `project` or one of list_knowledge_bases"
            );
        }
        let project = self.pool.take(PROJECT, &self.root, &self.index_dir)?;
        let mut opened = Vec::new();
        let mut notices = Vec::new();
        for base in bases.iter().filter(|b| only.is_none_or(|o| o == b.name)) {
            match self
                .pool
                .take(&base.name, base.root(), &base.index_dir(&self.index_dir))
            {
                Ok(s) => opened.push((base.clone(), s)),
                Err(e) => notices.push(format!("knowledge base `{}` is not searchable: {e:#}", base.name)),
            }
        }
        let refs: Vec<(KnowledgeBase, &Searcher)> = opened.iter().map(|(b, s)| (b.clone(), s)).collect();
        let outcome = kb::search_all(&project, &refs, req, only.is_none_or(|o| o == PROJECT));
        let freshness = self.freshness(&project);
        self.pool.give(PROJECT, project);
        for (base, searcher) in opened {
            self.pool.give(&base.name, searcher);
        }
        let found = outcome?;
        notices.extend(found.notices);
        Ok(BasesFound {
            hits: found.hits,
            bases,
            notices,
            confidence: found.confidence,
            index: freshness?,
        })
    }

    /// What the project's index reflects, with the watcher's pending changes.
    fn freshness(&self, project: &Searcher) -> anyhow::Result<crate::index::freshness::Freshness> {
        let mut index = crate::index::freshness::Freshness::read(project.store(), &self.root, false)?;
        index.pending_changes = self.watch.as_ref().map(|w| w.pending.load(Ordering::SeqCst));
        Ok(index)
    }

    async fn similar_tool(&self, args: SimilarArgs) -> Result<CallToolResult, ErrorData> {
        let limit = match result_limit(args.limit) {
            Ok(limit) => limit,
            Err(why) => return Ok(tool_error(why)),
        };
        let include = args.include_source_file.unwrap_or(false);
        let target = match confine_target(&self.root, &args.target) {
            Ok(t) => t,
            Err(why) => return Ok(tool_error(why)),
        };
        let server = self.clone();
        let started = Instant::now();
        let outcome = blocking(move || {
            let searcher = server.pool.take(PROJECT, &server.root, &server.index_dir)?;
            let hits = searcher.similar(&target, limit, include);
            server.pool.give(PROJECT, searcher);
            hits
        })
        .await?;
        self.metrics.query(started.elapsed(), false);
        match outcome {
            Ok(hits) => json_result(&SearchOutput {
                confidence: None,
                results: to_hits(
                    hits.into_iter().map(|h| (PROJECT.to_string(), h)).collect(),
                    &[],
                    true,
                    None,
                ),
                notice: self.jobs_notice(),
                index: None,
            }),
            Err(e) => Ok(tool_error(format!("{e:#}"))),
        }
    }

    fn status(&self) -> anyhow::Result<ServerStatus> {
        Ok(ServerStatus {
            status: crate::index::status::status(&self.root, &self.index_dir)?,
            index_run_in_progress: self.jobs.index_running(),
            embedding_in_background: self.jobs.embedding_running(),
            knowledge_bases: self.base_statuses(),
        })
    }

    fn base_statuses(&self) -> Vec<BaseStatus> {
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

    async fn index_tool(&self, args: IndexArgs, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
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
    fn index_all(&self, force: bool, wait: bool, reporter: &Reporter) -> anyhow::Result<IndexOutcome> {
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
        let report = crate::index::index(&self.root, &self.index_dir, &opts)?;
        self.pool.clear();
        let mut knowledge_bases = Vec::new();
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
        let (embedding, embedding_status) = if wait {
            match crate::index::semantic::embed_root(&self.root, &self.index_dir, reporter) {
                Ok(e) => {
                    self.metrics.embedded(e.embedded, e.reused, e.from_shared_cache);
                    self.pool.clear();
                    (Some(e), "up to date".to_string())
                }
                Err(e) => (
                    None,
                    format!("semantic search unavailable, lexical search works: {e:#}"),
                ),
            }
        } else {
            (
                None,
                "embeddings of new code are computed in the background; index_status shows the coverage".to_string(),
            )
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

    async fn add_kb_tool(
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

    fn add_and_index(
        &self,
        args: AddKnowledgeBaseArgs,
        folder: &Path,
        reporter: Reporter,
    ) -> anyhow::Result<KnowledgeBaseAdded> {
        let dir = &self.index_dir;
        let base = kb::add(&self.root, dir, folder, args.name.as_deref())?;
        let opts = IndexOptions {
            reporter,
            ..IndexOptions::default()
        };
        match crate::index::index(base.root(), &base.index_dir(dir), &opts) {
            Ok(index) => Ok(KnowledgeBaseAdded {
                added: base,
                index,
                embedding_status: "embeddings are computed in the background; list_knowledge_bases shows the \
                                   coverage"
                    .to_string(),
            }),
            Err(e) => {
                // Not indexed, not registered: the call can simply be repeated.
                let _ = kb::remove(dir, &base.name);
                Err(e)
            }
        }
    }
}

/// The server's log file, beside the index.
pub fn log_path(index_dir: &Path) -> PathBuf {
    index_dir.join("ken.log")
}

/// A structured result with a JSON text copy for clients that read text only.
fn json_result<T: Serialize>(value: &T) -> Result<CallToolResult, ErrorData> {
    let json = serde_json::to_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let mut result = CallToolResult::structured(json);
    if result.content.is_empty() {
        result.content = vec![ContentBlock::text(serde_json::to_string(value).unwrap_or_default())];
    }
    Ok(result)
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct QueryPromptArgs {
    /// What to look for.
    pub query: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SymbolPromptArgs {
    /// A function, method or type name.
    pub symbol: String,
}

fn user_prompt(text: String) -> Result<Vec<PromptMessage>, ErrorData> {
    Ok(vec![PromptMessage::new_text(Role::User, text)])
}

/// Slash commands for clients that show MCP prompts (e.g. Claude Code).
#[prompt_router]
impl KenServer {
    #[prompt(name = "search", description = "Search the codebase with ken")]
    async fn search_prompt(
        &self,
        Parameters(Args(args)): Parameters<Args<QueryPromptArgs>>,
    ) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(format!(
            "Use the codebase_search tool of the ken MCP server to find: {}\nList the best results as \
             `path:start-end symbol` with why each matches, then answer using the returned code.",
            args.query
        ))
    }

    #[prompt(name = "find", description = "Find the definition of a symbol with ken")]
    async fn find_prompt(
        &self,
        Parameters(Args(args)): Parameters<Args<SymbolPromptArgs>>,
    ) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(format!(
            "Use the codebase_search tool of the ken MCP server with the query `{}` to find its definition; \
             show where it is defined and summarise what it does.",
            args.symbol
        ))
    }

    #[prompt(name = "call-graph", description = "Who calls a symbol, and what it calls")]
    async fn call_graph_prompt(
        &self,
        Parameters(Args(args)): Parameters<Args<SymbolPromptArgs>>,
    ) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(format!(
            "Use the call_graph tool of the ken MCP server for `{}` (callers, then callees). If the index has no \
             graph, say so and use codebase_search for its definition and mentions instead.",
            args.symbol
        ))
    }

    #[prompt(name = "index", description = "Index or refresh the codebase index")]
    async fn index_prompt(&self) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(
            "Call the index_codebase tool of the ken MCP server, then report files, chunks, languages and \
             embedding coverage."
                .to_string(),
        )
    }

    #[prompt(name = "status", description = "What ken's index holds")]
    async fn status_prompt(&self) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(
            "Call the index_status tool of the ken MCP server and summarise files, chunks, languages, \
             embedding coverage, branch and when it was last indexed."
                .to_string(),
        )
    }
}

/// Tools come from the server's own router (the exposed set, lean schemas);
/// every capability served is declared, so clients ask for the prompts.
#[prompt_handler(router = Self::prompt_router())]
impl ServerHandler for KenServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_prompts().build())
            .with_server_info(rmcp::model::Implementation::new("ken", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult {
            tools: self.tools.list_all(),
            ..ListToolsResult::default()
        })
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tools.get(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = self.tools.get(&request.name) else {
            let names: Vec<String> = self.tools.list_all().into_iter().map(|t| t.name.to_string()).collect();
            return Err(ErrorData::invalid_params(
                format!("no tool named `{}`; this server has {}", request.name, names.join(", ")),
                None,
            ));
        };
        // Unknown arguments are input errors the agent reads and corrects
        // (MCP 2025-11-25: input validation errors are tool errors).
        if let Some(why) = unknown_arguments(tool, request.arguments.as_ref()) {
            return Ok(tool_error(why).into());
        }
        self.tools.call(ToolCallContext::new(self, request, context)).await
    }
}

/// Serves MCP on stdin/stdout until the client closes stdin; with a
/// watcher, the index stays fresh meanwhile.
pub fn serve(root: PathBuf, index_dir: PathBuf, opts: ServeOptions) -> anyhow::Result<()> {
    let tools = selected_tools(&opts.tools)?;
    let log = log_path(&index_dir);
    if let Err(e) = crate::serve::logs::write_to_file(&log) {
        tracing::warn!("cannot write the log file {}: {e}", log.display());
    }
    tracing::info!(
        "serving {} over MCP stdio (index {}, {} tools)",
        root.display(),
        index_dir.display(),
        tools.map.len()
    );
    // The watcher logs to stderr and the log file only; it stops when dropped.
    let watcher = opts.watch.and_then(|watch| {
        crate::index::watch::spawn(root.clone(), index_dir.clone(), watch)
            .map_err(|e| tracing::warn!("not watching {}: {e:#}", root.display()))
            .ok()
    });
    let allowed = opts
        .allowed_kb_folders
        .iter()
        .filter_map(|f| match f.canonicalize() {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("the allowed knowledge-base folder {} is ignored: {e}", f.display());
                None
            }
        })
        .collect();
    let mut server = KenServer::new(root, index_dir, tools, allowed);
    server.watch = watcher.as_ref().map(|w| w.state());
    server.load_model_in_background();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let served = runtime.block_on(async move {
        let front = stdio::checked_stdio();
        let service = server
            .serve((front.reader, front.writer))
            .await
            .map_err(|e| anyhow::anyhow!("starting the MCP server: {e}"))?;
        let waited = service.waiting().await.map_err(|e| anyhow::anyhow!("MCP server: {e}"));
        // Every answer written reaches stdout before the process ends.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), front.stdout_done).await;
        waited.map(|_| ())
    });
    tracing::info!("the client closed the connection; stopping");
    // Work still running (an index run, embeddings) commits in batches: stopping it loses nothing.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    drop(watcher);
    served
}

/// Every tool's definition as served with `--tools all` (name, description,
/// lean schemas, annotations), by name.
pub fn tool_definitions() -> Vec<rmcp::model::Tool> {
    all_tools().list_all()
}

/// The JSON Schema files of the tools' inputs and outputs: (file name, text).
/// `schemas/` holds them; tests/schemas.rs fails when it is out of date.
pub fn schema_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for tool in tool_definitions() {
        let pretty = |schema: &serde_json::Map<String, serde_json::Value>| {
            serde_json::to_string_pretty(schema).unwrap_or_default() + "\n"
        };
        files.push((format!("{}.input.json", tool.name), pretty(&tool.input_schema)));
        if let Some(output) = &tool.output_schema {
            files.push((format!("{}.output.json", tool.name), pretty(output)));
        }
    }
    files
}
