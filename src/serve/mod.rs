//! `ken serve`: the MCP server over stdio (rmcp).
//!
//! Tools run their blocking work (SQLite, the model) on tokio's blocking pool,
//! so concurrent calls are served concurrently. Searchers (each with its own
//! read-only SQLite connection and lazily loaded query embedder) are pooled.
//! stdout carries only JSON-RPC; logs go to stderr.
//!
//! [`wire`] holds the tools' arguments and results, [`tools`] the tools
//! themselves, [`search`] the searching ones' work, [`jobs`] the long-running
//! work (index runs, background embedding, the watcher), [`pool`] the idle
//! searchers, [`prompts`] the slash commands.

mod jobs;
pub mod logs;
pub mod metrics;
mod pool;
mod prompts;
pub mod proxy;
pub mod rendezvous;
mod search;
pub mod service;
mod stdio;
pub mod surface;
mod tools;
pub mod wire;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{prompt_handler, ErrorData, RoleServer, ServerHandler, ServiceExt};

use crate::search::kb::{self, KnowledgeBase};
use crate::serve::metrics::Metrics;
use jobs::Jobs;
use pool::SearcherPool;
use tools::tool_error;

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
    /// The workspace whose members the search tool searches together, if any.
    members: Option<Arc<crate::source::workspace::Workspace>>,
    /// The shared service this server is a session of, if it is one.
    service: Option<Arc<service::ServiceInfo>>,
}

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
    /// A workspace whose members codebase_search searches together.
    pub workspace: Option<crate::source::workspace::Workspace>,
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

/// The tools a session exposes: those `spec` selects, with the member
/// filter only in a workspace.
fn session_tools(spec: &[String], in_workspace: bool) -> anyhow::Result<ToolRouter<KenServer>> {
    let mut tools = selected_tools(spec)?;
    if !in_workspace {
        without_workspace_arguments(&mut tools);
    }
    Ok(tools)
}

/// Outside a workspace the member filter is left out of the schemas: no
/// tokens spent on it, and an agent passing it is told it is unknown.
fn without_workspace_arguments(router: &mut ToolRouter<KenServer>) {
    for route in router.map.values_mut() {
        let mut schema = route.attr.input_schema.as_ref().clone();
        if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
            if properties.remove("member").is_some() {
                route.attr.input_schema = Arc::new(schema);
            }
        }
    }
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

impl KenServer {
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
            members: None,
            service: None,
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
}

/// The runtime a server (or the shared service) answers on. Its blocking
/// threads, where tool calls run, stay parked between calls however long an
/// agent pauses: tokio's default ends them after 10 s idle, and a new
/// thread can start late on a busy machine (docs/experiments.md, "A
/// search's side jobs on parked workers").
pub(super) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(std::time::Duration::from_secs(24 * 3600))
        .build()
}

/// The server's log file, beside the index.
pub fn log_path(index_dir: &Path) -> PathBuf {
    index_dir.join("ken.log")
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
    let tools = session_tools(&opts.tools, opts.workspace.is_some())?;
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
    let watcher = opts
        .watch
        .and_then(|watch| jobs::start_watcher(&root, &index_dir, watch));
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
    server.members = opts.workspace.map(Arc::new);
    server.load_model_in_background();
    let runtime = runtime()?;
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
