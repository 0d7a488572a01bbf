//! The tools: each one's description, annotations and schemas, and a thin
//! body that hands the work to the blocking pool and records the call.

use std::time::Instant;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, ErrorData, RoleServer};
use serde::Serialize;

use super::wire::*;
use super::{log_path, KenServer};
use crate::search::kb;
use crate::serve::metrics::MetricsReport;

#[tool_router(vis = "pub(super)")]
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
        output_schema = schema_for_output::<QuestionContext>()
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
            crate::index::health::check(&root, &dir, repair, full).map(HealthReport::from)
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
        output_schema = schema_for_output::<CallGraph>()
    )]
    async fn call_graph(
        &self,
        Parameters(Args(args)): Parameters<Args<CallGraphArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let result = if args.symbol.trim().is_empty() {
            Ok(tool_error("`symbol` is empty: give a name, path:line or symbol id"))
        } else {
            let direction = args.direction.unwrap_or(Direction::Callers).into();
            let depth = args.depth.unwrap_or(1).clamp(1, 10);
            let (root, dir) = (self.root.clone(), self.index_dir.clone());
            match self.members.clone() {
                // In a workspace: within and across members, each symbol naming its member.
                Some(ws) => blocking(move || {
                    let (graph, names, left_out) =
                        crate::app::call_graph_across(&ws, &args.symbol, args.member.as_deref(), direction, depth)?;
                    let mut graph = CallGraph::across(graph, &names);
                    if !left_out.is_empty() {
                        let said = graph.note.take().into_iter().chain(left_out);
                        graph.note = Some(said.collect::<Vec<_>>().join("; "));
                    }
                    Ok(graph)
                })
                .await
                .and_then(data_result),
                None => blocking(move || {
                    crate::graph::call_graph(&root, &dir, &args.symbol, direction, depth).map(CallGraph::from)
                })
                .await
                .and_then(data_result),
            }
        };
        self.finish("call_graph", started, result)
    }

    #[tool(
        description = "Where to start in an unfamiliar repository: its most referenced files with their key \
definitions' signatures, optionally around a path or a question. Instead of listing folders and opening files.",
        annotations(read_only_hint = true),
        output_schema = schema_for_output::<RepoMap>()
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
                    crate::context::map::repo_map(&root, &dir, focus, budget).map(RepoMap::from)
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
        output_schema = schema_for_output::<CallPath>()
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
            blocking(move || crate::graph::call_path(&root, &dir, &args.from, &args.to).map(CallPath::from))
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
        output_schema = schema_for_output::<SymbolContext>()
    )]
    async fn symbol_context(
        &self,
        Parameters(Args(args)): Parameters<Args<SymbolContextArgs>>,
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
                .map(SymbolContext::from)
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
        output_schema = schema_for_output::<Impact>()
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
        let result =
            blocking(move || crate::context::impact::change_impact(&root, &dir, &target, depth).map(Impact::from))
                .await
                .and_then(data_result);
        self.finish("change_impact", started, result)
    }
}

pub(super) fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// Runs blocking work on tokio's blocking pool.
pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ErrorData> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ErrorData::internal_error(format!("the tool's task failed: {e}"), None))
}

/// A tool's data result, or its error as a tool error (never a dead server).
pub(super) fn data_result<T: Serialize>(outcome: anyhow::Result<T>) -> Result<CallToolResult, ErrorData> {
    match outcome {
        Ok(value) => json_result(&value),
        Err(e) => Ok(tool_error(format!("{e:#}"))),
    }
}

/// A structured result with a JSON text copy for clients that read text only.
pub(super) fn json_result<T: Serialize>(value: &T) -> Result<CallToolResult, ErrorData> {
    let json = serde_json::to_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let mut result = CallToolResult::structured(json);
    if result.content.is_empty() {
        result.content = vec![ContentBlock::text(serde_json::to_string(value).unwrap_or_default())];
    }
    Ok(result)
}
