//! `ken serve`: the MCP server over stdio (rmcp).
//!
//! Tools run their blocking work (SQLite, the model) on tokio's blocking pool,
//! so concurrent calls are served concurrently. Searchers (each with its own
//! read-only SQLite connection and lazily loaded query embedder) are pooled.
//! stdout carries only JSON-RPC; logs go to stderr.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, PromptMessage, Role};
use rmcp::{
    prompt, prompt_handler, prompt_router, schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler,
    ServiceExt,
};
use serde::{Deserialize, Serialize};

use crate::search::{SearchHit, SearchMode, SearchRequest, Searcher};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SearchArgs {
    /// What to look for: a question, keywords, or an identifier.
    pub query: String,
    /// Maximum number of results (default 10).
    #[serde(default)]
    pub limit: Option<usize>,
    /// hybrid (default), semantic or lexical.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Only paths matching this glob (e.g. `src/**/*.rs`) or under this folder.
    #[serde(default)]
    pub path: Option<String>,
    /// Only this language (e.g. rust, python, typescript).
    #[serde(default)]
    pub language: Option<String>,
    /// Only this chunk kind (function, method, class, struct, module, section...).
    #[serde(default)]
    pub kind: Option<String>,
    /// Pack the best results into about this many tokens of code instead of a fixed count.
    #[serde(default)]
    pub token_budget: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SimilarArgs {
    /// A code snippet, or `path:line` of a chunk in the index.
    pub target: String,
    /// Maximum number of results (default 10).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Keep results from the file the chunk comes from.
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
    pub direction: Option<String>,
    /// How many call levels to follow (default 1).
    #[serde(default)]
    pub depth: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct HealthArgs {
    /// Fix what can be fixed.
    #[serde(default)]
    pub repair: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct IndexArgs {
    /// Rebuild the index from scratch.
    #[serde(default)]
    pub force: Option<bool>,
    /// Only count the files that would be indexed.
    #[serde(default)]
    pub estimate_only: Option<bool>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Hit {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub kind: String,
    pub symbol: Option<String>,
    pub language: String,
    pub score: f64,
    /// The chunk's code (omitted by codebase_peek).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Enclosing definitions' signatures (e.g. the class of a method).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SearchOutput {
    pub results: Vec<Hit>,
    /// Set when the search could not do everything asked (e.g. lexical only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// What the index reflects: branch, commit, when indexed, pending changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<crate::freshness::Freshness>,
}

#[derive(Clone)]
pub struct KenServer {
    root: PathBuf,
    index_dir: PathBuf,
    searchers: Arc<Mutex<Vec<Searcher>>>,
    /// The watcher of this server, if it runs one.
    watch: Option<Arc<crate::watch::WatchState>>,
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

impl KenServer {
    pub fn new(root: PathBuf, index_dir: PathBuf) -> KenServer {
        KenServer {
            root,
            index_dir,
            searchers: Arc::new(Mutex::new(Vec::new())),
            watch: None,
        }
    }

    /// Runs `f` with a pooled searcher on the blocking pool.
    async fn with_searcher<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Searcher) -> anyhow::Result<T> + Send + 'static,
    ) -> Result<anyhow::Result<T>, ErrorData> {
        let server = self.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = server.searchers.lock().unwrap_or_else(|e| e.into_inner()).pop();
            // A searcher of another branch (HEAD moved) is not reused.
            let searcher = match pooled {
                Some(mut s) => match s.refresh(&server.root) {
                    true => s,
                    false => Searcher::open(&server.root, &server.index_dir)?,
                },
                None => Searcher::open(&server.root, &server.index_dir)?,
            };
            let result = f(&searcher);
            server
                .searchers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(searcher);
            result
        })
        .await
        .map_err(|e| ErrorData::internal_error(format!("the search task failed: {e}"), None))
    }
}

fn to_hits(hits: Vec<SearchHit>, with_code: bool, token_budget: Option<usize>) -> Vec<Hit> {
    let mut used = 0usize;
    let mut out = Vec::new();
    for h in hits {
        // About four characters per token.
        let cost = h.content.len() / 4 + 20;
        if let Some(budget) = token_budget {
            if !out.is_empty() && used + cost > budget {
                break;
            }
        }
        used += cost;
        out.push(Hit {
            path: h.path,
            start_line: h.start_line,
            end_line: h.end_line,
            kind: h.kind,
            symbol: h.symbol,
            language: h.language,
            score: h.score,
            code: with_code.then_some(h.content),
            context: h.context,
        });
    }
    out
}

#[tool_router]
impl KenServer {
    #[tool(
        description = "Search the indexed codebase by meaning, keywords or identifier. Prefer this over grep to find \
where something is implemented, how a feature works, or a symbol's definition. Returns ranked code chunks \
(path, lines, kind, symbol, code).",
        annotations(read_only_hint = true)
    )]
    async fn codebase_search(&self, Parameters(args): Parameters<SearchArgs>) -> Result<CallToolResult, ErrorData> {
        self.search_tool(args, true).await
    }

    #[tool(
        description = "Like codebase_search but returns only locations and symbols (no code): cheap orientation \
before reading files.",
        annotations(read_only_hint = true)
    )]
    async fn codebase_peek(&self, Parameters(args): Parameters<SearchArgs>) -> Result<CallToolResult, ErrorData> {
        self.search_tool(args, false).await
    }

    #[tool(
        description = "Find code similar in meaning to a snippet, or to the chunk at `path:line` (its own file is \
left out unless include_source_file). Useful to find duplicates or other implementations of a pattern.",
        annotations(read_only_hint = true)
    )]
    async fn find_similar(&self, Parameters(args): Parameters<SimilarArgs>) -> Result<CallToolResult, ErrorData> {
        let limit = args.limit.unwrap_or(10).clamp(1, 100);
        let include = args.include_source_file.unwrap_or(false);
        let target = args.target;
        match self.with_searcher(move |s| s.similar(&target, limit, include)).await? {
            Ok(hits) => json_result(&SearchOutput {
                results: to_hits(hits, true, None),
                notice: None,
                index: None,
            }),
            Err(e) => Ok(tool_error(format!("{e:#}"))),
        }
    }

    #[tool(
        description = "What the index holds and reflects: files, chunks, languages, embedding coverage and model, \
branch, last indexed time, index size.",
        annotations(read_only_hint = true)
    )]
    async fn index_status(&self, Parameters(_): Parameters<NoArgs>) -> Result<CallToolResult, ErrorData> {
        let (root, dir) = (self.root.clone(), self.index_dir.clone());
        let status = tokio::task::spawn_blocking(move || crate::status::status(&root, &dir))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match status {
            Ok(s) => json_result(&s),
            Err(e) => Ok(tool_error(format!("{e:#}"))),
        }
    }

    #[tool(
        description = "Index or refresh the index of the codebase (only changed files are re-parsed; embeddings \
are computed for new content). estimate_only counts the files without indexing. Searches keep working meanwhile."
    )]
    async fn index_codebase(&self, Parameters(args): Parameters<IndexArgs>) -> Result<CallToolResult, ErrorData> {
        let (root, dir) = (self.root.clone(), self.index_dir.clone());
        let searchers = self.searchers.clone();
        let outcome = tokio::task::spawn_blocking(move || -> anyhow::Result<serde_json::Value> {
            if args.estimate_only.unwrap_or(false) {
                let found = crate::discover::discover(&root, &crate::discover::DiscoverOptions::default());
                let bytes: u64 = found.files.iter().map(|f| f.size).sum();
                return Ok(serde_json::json!({"files": found.files.len(), "bytes": bytes, "skipped": found.skipped}));
            }
            crate::watch::check_root(&root, false)?;
            if args.force.unwrap_or(false) {
                // Under the writer lock, and the WAL with the database: never a half-deleted index.
                let store = crate::store::Store::open_for_write(&dir)?;
                let lock = store.lock_for_write(std::time::Duration::from_secs(120))?;
                drop(store.recreate()?);
                drop(lock);
            }
            let report = crate::index::index(&root, &dir, &crate::index::IndexOptions::default())?;
            let embedding = crate::semantic::embed_root(&root, &dir, false).map_err(|e| format!("{e:#}"));
            // Pooled searchers hold the old vector file open; start afresh.
            searchers.lock().unwrap_or_else(|e| e.into_inner()).clear();
            let mut value = serde_json::to_value(&report)?;
            match embedding {
                Ok(e) => value["embedding"] = serde_json::to_value(e)?,
                Err(why) => value["embedding_error"] = serde_json::Value::String(why),
            }
            Ok(value)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match outcome {
            Ok(v) => json_result(&v),
            Err(e) => Ok(tool_error(format!("{e:#}"))),
        }
    }

    #[tool(
        description = "Consistency checks of the index (orphaned chunks or vectors, dimension mismatch, vector \
file out of step, files changed since indexing, missing vectors) with severities; repair fixes what it can."
    )]
    async fn index_health_check(&self, Parameters(args): Parameters<HealthArgs>) -> Result<CallToolResult, ErrorData> {
        let (root, dir) = (self.root.clone(), self.index_dir.clone());
        let repair = args.repair.unwrap_or(false);
        let report = tokio::task::spawn_blocking(move || crate::health::check(&root, &dir, repair))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match report {
            Ok(r) => json_result(&r),
            Err(e) => Ok(tool_error(format!("{e:#}"))),
        }
    }

    #[tool(
        description = "Callers and callees of a symbol. The call graph is not built by this version of ken; the \
tool says so rather than guessing. Use codebase_search with the symbol name meanwhile.",
        annotations(read_only_hint = true)
    )]
    async fn call_graph(&self, Parameters(_): Parameters<CallGraphArgs>) -> Result<CallToolResult, ErrorData> {
        Ok(tool_error(
            "the call graph is not built yet in this version of ken: use codebase_search with the symbol's name \
to find its definition and mentions",
        ))
    }
}

impl KenServer {
    async fn search_tool(&self, args: SearchArgs, with_code: bool) -> Result<CallToolResult, ErrorData> {
        if args.query.trim().is_empty() {
            return Ok(tool_error("`query` is empty: say what to look for"));
        }
        let token_budget = args.token_budget;
        let req = SearchRequest {
            query: args.query,
            limit: args.limit.unwrap_or(10).clamp(1, 100),
            path_glob: args.path,
            language: args.language,
            kind: args.kind,
            max_per_file: 3,
            mode: args.mode.unwrap_or_default(),
        };
        let (root, watch) = (self.root.clone(), self.watch.clone());
        let outcome = self
            .with_searcher(move |s| {
                let hits = s.search(&req)?;
                let mut index = crate::freshness::Freshness::read(s.store(), &root, false)?;
                index.pending_changes = watch.map(|w| w.pending.load(std::sync::atomic::Ordering::SeqCst));
                Ok((hits, s.notice(), index))
            })
            .await?;
        match outcome {
            Ok((hits, notice, index)) => json_result(&SearchOutput {
                results: to_hits(hits, with_code, token_budget),
                notice,
                index: Some(index),
            }),
            Err(e) => Ok(tool_error(format!("{e:#}"))),
        }
    }
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
        Parameters(args): Parameters<QueryPromptArgs>,
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
        Parameters(args): Parameters<SymbolPromptArgs>,
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
        Parameters(args): Parameters<SymbolPromptArgs>,
    ) -> Result<Vec<PromptMessage>, ErrorData> {
        user_prompt(format!(
            "Use the call_graph tool of the ken MCP server for `{}` (callers, then callees). If the graph is not \
             built, say so and use codebase_search for its definition and mentions instead.",
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

/// The `instructions` sent at initialisation tell the agent what ken is for.
#[prompt_handler(router = Self::prompt_router())]
#[tool_handler(
    router = Self::tool_router(),
    name = "ken",
    instructions = "ken indexes this codebase (tree-sitter chunks, BM25 and embeddings) and answers \
code questions in milliseconds. Use codebase_search instead of grep when you look for where something is \
implemented or how it works, or for a symbol's definition: it understands identifiers (parse_config finds \
the definition first) and plain-language questions (\"where is the JWT expiry checked?\"). Use codebase_peek \
for cheap orientation (locations only), find_similar for code like a snippet or a path:line, index_status to \
see what the index reflects."
)]
impl ServerHandler for KenServer {}

/// Serves MCP on stdin/stdout until the client closes stdin; with `watch`,
/// a watcher keeps the index fresh meanwhile (it logs to stderr only).
pub fn serve(root: PathBuf, index_dir: PathBuf, watch: Option<crate::watch::WatchOptions>) -> anyhow::Result<()> {
    let watcher = watch.and_then(|opts| {
        crate::watch::spawn(root.clone(), index_dir.clone(), opts)
            .map_err(|e| tracing::warn!("not watching {}: {e:#}", root.display()))
            .ok()
    });
    let mut server = KenServer::new(root, index_dir);
    server.watch = watcher.as_ref().map(|w| w.state());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let service = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| anyhow::anyhow!("starting the MCP server: {e}"))?;
        service
            .waiting()
            .await
            .map_err(|e| anyhow::anyhow!("MCP server: {e}"))?;
        Ok(())
    })
}
