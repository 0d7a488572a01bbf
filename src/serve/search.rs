//! codebase_search, codebase_peek, codebase_context and find_similar: the
//! project and its knowledge bases searched with pooled searchers.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rmcp::model::CallToolResult;
use rmcp::ErrorData;

use super::tools::{blocking, data_result, json_result, tool_error};
use super::wire::{self, Hit, QuestionArgs, SearchArgs, SearchOutput, SimilarArgs};
use super::KenServer;
use crate::app::{Bases, MemberSearchers};
use crate::context::question::{QuestionContext, QuestionRequest};
use crate::index::freshness::Freshness;
use crate::search::kb::{BaseHit, KnowledgeBase, PROJECT};
use crate::search::SearchRequest;
use crate::source::workspace::{Member, Workspace};

/// How long a search waits for the watcher's first lexical commit.
const FIRST_INDEX_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What a search of every base found.
struct BasesFound {
    hits: Vec<BaseHit>,
    bases: Vec<KnowledgeBase>,
    notices: Vec<String>,
    confidence: crate::search::confidence::Confidence,
    /// What the project's index reflects.
    index: Freshness,
}

impl KenServer {
    pub(super) async fn search_tool(&self, args: SearchArgs, with_code: bool) -> Result<CallToolResult, ErrorData> {
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
        let members = args.member.clone();
        let req = SearchRequest {
            query: args.query,
            limit,
            path_glob: args.path,
            language: args.language,
            kind: args.kind,
            max_per_file: args.max_per_file,
            mode: args.mode.unwrap_or_default().into(),
            explain: args.explain.unwrap_or(false),
        };
        let server = self.clone();
        let started = Instant::now();
        if let Some(workspace) = self.members.clone() {
            let outcome = blocking(move || server.search_members(&workspace, &req, members.as_deref())).await?;
            return match outcome {
                Ok(found) => {
                    self.metrics.query(started.elapsed(), false);
                    json_result(&found.output(&self.root, with_code, token_budget))
                }
                Err(e) => Ok(tool_error(format!("{e:#}"))),
            };
        }
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
            confidence: Some(confidence.into()),
            results: to_hits(hits, &bases, with_code, token_budget),
            notice: (!notices.is_empty()).then(|| notices.join("; ")),
            index: Some(index.into()),
        })
    }

    pub(super) async fn question_tool(&self, args: QuestionArgs) -> Result<CallToolResult, ErrorData> {
        if args.query.trim().is_empty() {
            return Ok(tool_error("`query` is empty: say what to look for"));
        }
        if let Err(e) = crate::context::pack::checked_budget(args.budget) {
            return Ok(tool_error(format!("`budget`: {e}")));
        }
        if let Some(indexing) = self.wait_for_first_index().await {
            return Ok(tool_error(indexing));
        }
        let req = QuestionRequest {
            query: args.query,
            budget: args.budget,
            mode: args.mode.unwrap_or_default().into(),
            path_glob: args.path,
        };
        let server = self.clone();
        let started = Instant::now();
        let outcome = blocking(move || server.answer_question(&req)).await?;
        if let Ok(answer) = &outcome {
            let lexical_fallback = answer.notice.as_deref().is_some_and(|n| n.contains("lexical"));
            self.metrics.query(started.elapsed(), lexical_fallback);
        }
        data_result(outcome.map(wire::QuestionContext::from))
    }

    /// codebase_context with pooled searchers of the project and the knowledge bases.
    fn answer_question(&self, req: &QuestionRequest) -> anyhow::Result<QuestionContext> {
        let bases = self.open_bases(&self.knowledge_bases())?;
        let answer = bases.answer(&self.root, req);
        self.pool_again(bases);
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
        let mut bases = self.knowledge_bases();
        if let Some(name) = only {
            anyhow::ensure!(
                name == PROJECT || bases.iter().any(|b| b.name == name),
                "no base named `{name}`: use `project` or one of list_knowledge_bases"
            );
        }
        bases.retain(|b| only.is_none_or(|o| o == b.name));
        let opened = self.open_bases(&bases)?;
        let mut notices: Vec<String> = opened
            .unopened
            .iter()
            .map(|(base, e)| format!("knowledge base `{}` is not searchable: {e:#}", base.name))
            .collect();
        let outcome = opened.search(req, only.is_none_or(|o| o == PROJECT));
        let freshness = self.freshness(&opened);
        self.pool_again(opened);
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

    /// Searches the workspace's members (those of `only`, else all) with pooled searchers.
    fn search_members(
        &self,
        workspace: &Workspace,
        req: &SearchRequest,
        only: Option<&[String]>,
    ) -> anyhow::Result<MembersFound> {
        let members = workspace.select(only.unwrap_or_default())?;
        let key = |m: &Member| format!("member:{}", m.name);
        let searchers = MemberSearchers::open(&members, |m, index_dir| self.pool.take(&key(m), &m.root, index_dir));
        let mut notices: Vec<String> = searchers
            .unopened
            .iter()
            .map(|(m, e)| format!("member `{}` is not searchable: {e:#}", m.name))
            .collect();
        let outcome = searchers.search(req);
        for (member, searcher) in searchers.into_searchers() {
            self.pool.give(&key(&member), searcher);
        }
        let found = outcome?;
        notices.extend(found.notices);
        Ok(MembersFound {
            members,
            hits: found.hits,
            notices,
            confidence: found.confidence,
        })
    }

    /// The project's searcher and those of `bases`, from the pool.
    fn open_bases(&self, bases: &[KnowledgeBase]) -> anyhow::Result<Bases> {
        let project = self.pool.take(PROJECT, &self.root, &self.index_dir)?;
        Ok(Bases::open(project, &self.index_dir, bases, |name, root, index_dir| {
            self.pool.take(name, root, index_dir)
        }))
    }

    /// Puts the searchers back in the pool.
    fn pool_again(&self, bases: Bases) {
        for (name, searcher) in bases.into_searchers() {
            self.pool.give(&name, searcher);
        }
    }

    /// What the project's index reflects, with the watcher's pending changes.
    fn freshness(&self, bases: &Bases) -> anyhow::Result<Freshness> {
        let mut index = bases.freshness(&self.root, false)?;
        index.pending_changes = self.watch.as_ref().map(|w| w.pending.load(Ordering::SeqCst));
        Ok(index)
    }

    pub(super) async fn similar_tool(&self, args: SimilarArgs) -> Result<CallToolResult, ErrorData> {
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
}

/// What a search of a workspace's members found.
struct MembersFound {
    members: Vec<Member>,
    hits: Vec<BaseHit>,
    notices: Vec<String>,
    confidence: crate::search::confidence::Confidence,
}

impl MembersFound {
    /// The tool's answer: each hit names its member; those of members other
    /// than the server's root carry their absolute path.
    fn output(self, root: &Path, with_code: bool, budget: Option<usize>) -> SearchOutput {
        let names: Vec<String> = self.hits.iter().map(|(member, _)| member.clone()).collect();
        let hits = self.hits.into_iter().map(|(_, h)| (PROJECT.to_string(), h)).collect();
        let mut results = to_hits(hits, &[], with_code, budget);
        for (hit, name) in results.iter_mut().zip(names) {
            let member = self.members.iter().find(|m| m.name == name);
            hit.absolute_path = member
                .filter(|m| m.root != root)
                .map(|m| m.root.join(&hit.path).display().to_string());
            hit.member = Some(name);
        }
        SearchOutput {
            confidence: Some(self.confidence.into()),
            results,
            notice: (!self.notices.is_empty()).then(|| self.notices.join("; ")),
            index: None,
        }
    }
}

/// A tool's `limit`: 10 by default, 1 to 100 (0 is an error, not one result).
fn result_limit(limit: Option<usize>) -> Result<usize, String> {
    match limit.unwrap_or(crate::search::DEFAULT_LIMIT) {
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
            member: None,
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
            explain: h.explain.map(wire::Explain::from),
            copies: h.copies.into_iter().map(wire::Location::from).collect(),
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
