//! What both front ends do, written once: index a root and then embed it,
//! add a knowledge base, and open the project with its knowledge bases to
//! search them, answer a question about them and say what the index
//! reflects. The CLI ([`crate::cli`]) and the MCP server ([`crate::serve`])
//! differ only in where their searchers come from (opened afresh, or from
//! the server's pool) and in how they report the outcome.

use std::path::Path;

use anyhow::Result;

use crate::context::question::{self, QuestionContext, QuestionRequest};
use crate::index::fit::{self, FitOutcome};
use crate::index::freshness::Freshness;
use crate::index::progress::Reporter;
use crate::index::semantic::{self, EmbedReport};
use crate::index::{self, IndexOptions, IndexReport};
use crate::search::kb::{self, KnowledgeBase, PROJECT};
use crate::search::{SearchRequest, Searcher};
use crate::source::workspace::Member;

/// An index run and, when asked for, the embedding pass after it.
pub struct Indexed {
    pub report: IndexReport,
    /// None when not asked for; an error leaves lexical search working.
    pub embedding: Option<Result<EmbedReport>>,
    /// What became of the query adapter's fit after the embeddings (None:
    /// no embedding pass, or it failed).
    pub adapter: Option<Adapter>,
}

/// When the query adapter is fitted after an embedding pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitWhen {
    /// In a low-priority process of its own ([`fit::start_in_background`]):
    /// the call returns with the vectors.
    Background,
    /// Before the call returns (evaluations that must search with it).
    Now,
}

/// The query adapter after an index run.
#[derive(Debug)]
pub enum Adapter {
    /// Its fit runs in this background process.
    Fitting(u32),
    /// Nothing to fit (current, off, or another process fits it).
    Unchanged,
    /// Fitted here ([`FitWhen::Now`]).
    Fitted(FitOutcome),
    /// The fit could not be started or failed; search works without it.
    Failed(anyhow::Error),
}

impl Adapter {
    /// One line for people.
    pub fn describe(&self) -> Option<String> {
        match self {
            Adapter::Fitting(pid) => Some(format!(
                "fitted in the background at low priority (pid {pid}); searches use it once it is done \
                 (`ken status`)"
            )),
            Adapter::Unchanged => None,
            Adapter::Fitted(outcome) => Some(outcome.describe()),
            Adapter::Failed(e) => Some(format!("not fitted ({e:#}); searches work without it")),
        }
    }
}

/// Starts or runs the query adapter's fit of the index in `index_dir`
/// after an embedding pass (see [`crate::index::fit`]).
pub fn fit_adapter(root: &Path, index_dir: &Path, when: FitWhen, reporter: &Reporter) -> Adapter {
    match when {
        FitWhen::Background => match fit::start_in_background(root, index_dir) {
            Ok(Some(pid)) => Adapter::Fitting(pid),
            Ok(None) => Adapter::Unchanged,
            Err(e) => Adapter::Failed(e),
        },
        FitWhen::Now => match fit::fit_root(root, index_dir, reporter, None) {
            Ok(outcome) => Adapter::Fitted(outcome),
            Err(e) => Adapter::Failed(e),
        },
    }
}

/// Indexes `root` into `index_dir`: phase one, the lexical index, committed
/// and searchable when it returns; then `between` acts on its report (prints
/// it, indexes more); then, when `embed`, phase two: the missing embeddings,
/// with the same reporter, and the query adapter's fit (`fit`). Only phase
/// one (and `between`) can fail the call.
pub fn index_then_embed(
    root: &Path,
    index_dir: &Path,
    opts: &IndexOptions,
    embed: Option<FitWhen>,
    between: impl FnOnce(&IndexReport) -> Result<()>,
) -> Result<Indexed> {
    let report = index::index(root, index_dir, opts)?;
    between(&report)?;
    let Some(fit) = embed else {
        return Ok(Indexed {
            report,
            embedding: None,
            adapter: None,
        });
    };
    let embedding = semantic::embed_root(root, index_dir, &opts.reporter);
    let adapter =
        (embedding.is_ok() && !opts.reporter.is_cancelled()).then(|| fit_adapter(root, index_dir, fit, &opts.reporter));
    Ok(Indexed {
        report,
        embedding: Some(embedding),
        adapter,
    })
}

/// Registers `folder` as a knowledge base of the project at `root` and
/// indexes it (then embeds it, when `embed` says when to fit its adapter),
/// as [`index_then_embed`] does.
/// A base that fails to index is unregistered again: the call can simply be
/// repeated.
pub fn add_knowledge_base(
    root: &Path,
    index_dir: &Path,
    folder: &Path,
    name: Option<&str>,
    opts: &IndexOptions,
    embed: Option<FitWhen>,
    between: impl FnOnce(&KnowledgeBase, &IndexReport) -> Result<()>,
) -> Result<(KnowledgeBase, Indexed)> {
    let base = kb::add(root, index_dir, folder, name)?;
    let indexed = index_then_embed(base.root(), &base.index_dir(index_dir), opts, embed, |report| {
        between(&base, report)
    });
    match indexed {
        Ok(indexed) => Ok((base, indexed)),
        Err(e) => {
            let _ = kb::remove(index_dir, &base.name);
            Err(e)
        }
    }
}

/// The searchers of the project and of its knowledge bases, open for one
/// search or question.
pub struct Bases {
    project: Searcher,
    opened: Vec<(KnowledgeBase, Searcher)>,
    /// The knowledge bases that did not open, with why (they are not searched).
    pub unopened: Vec<(KnowledgeBase, anyhow::Error)>,
}

impl Bases {
    /// The project's searcher with those of the knowledge bases `bases` of
    /// the project whose index is in `index_dir`: `open` gives a base's
    /// searcher from its name, root and index folder.
    pub fn open(
        project: Searcher,
        index_dir: &Path,
        bases: &[KnowledgeBase],
        mut open: impl FnMut(&str, &Path, &Path) -> Result<Searcher>,
    ) -> Bases {
        let (mut opened, mut unopened) = (Vec::new(), Vec::new());
        for base in bases {
            match open(&base.name, base.root(), &base.index_dir(index_dir)) {
                Ok(searcher) => opened.push((base.clone(), searcher)),
                Err(e) => unopened.push((base.clone(), e)),
            }
        }
        Bases {
            project,
            opened,
            unopened,
        }
    }

    fn knowledge_bases(&self) -> Vec<(KnowledgeBase, &Searcher)> {
        self.opened.iter().map(|(b, s)| (b.clone(), s)).collect()
    }

    /// Searches the open knowledge bases, and the project if `with_project`.
    pub fn search(&self, req: &SearchRequest, with_project: bool) -> Result<kb::Found> {
        kb::search_all(&self.project, &self.knowledge_bases(), req, with_project)
    }

    /// The context for a question, from the project and the open knowledge bases.
    pub fn answer(&self, root: &Path, req: &QuestionRequest) -> Result<QuestionContext> {
        question::context_for_question(&self.project, &self.knowledge_bases(), root, req)
    }

    /// What the project's index reflects; `count_pending` walks the root for
    /// the changes not indexed yet.
    pub fn freshness(&self, root: &Path, count_pending: bool) -> Result<Freshness> {
        Freshness::read(self.project.store(), root, count_pending)
    }

    /// The searchers, by base name (`project` first), to pool again.
    pub fn into_searchers(self) -> impl Iterator<Item = (String, Searcher)> {
        let project = (PROJECT.to_string(), self.project);
        std::iter::once(project).chain(self.opened.into_iter().map(|(base, s)| (base.name, s)))
    }
}

/// The chunks indexed for the current branch of `root`, None when `index_dir`
/// holds no index.
pub fn indexed_chunks(root: &Path, index_dir: &Path) -> Result<Option<u64>> {
    if !crate::store::has_index(index_dir) {
        return Ok(None);
    }
    let store = crate::store::Store::open_for_read(index_dir)?;
    let branch = crate::source::git::head(root).catalog_key();
    Ok(Some(index::BranchTotals::read(&store, &branch)?.chunks))
}

/// Callers or callees of `spec` within and across the workspace's members
/// (`member`: look `spec` up in that one): the graph, the members' names by
/// position, and what was left out.
pub fn call_graph_across(
    ws: &crate::source::workspace::Workspace,
    spec: &str,
    member: Option<&str>,
    direction: crate::graph::query::Direction,
    depth: usize,
) -> Result<(crate::graph::workspace::CallGraphAcross, Vec<String>, Vec<String>)> {
    if let Some(name) = member {
        ws.select(&[name.to_string()])?;
    }
    let members: Vec<crate::graph::MemberIndex> = ws
        .members
        .iter()
        .filter(|m| m.exists())
        .map(|m| crate::graph::MemberIndex {
            name: m.name.clone(),
            root: m.root.clone(),
            index_dir: crate::store::index_dir_for(&m.root),
        })
        .collect();
    crate::graph::call_graph_across(&members, spec, member, direction, depth)
}

/// The searchers of a workspace's members, open for one search.
pub struct MemberSearchers {
    opened: Vec<(Member, Searcher)>,
    /// The members that did not open, with why (they are not searched).
    pub unopened: Vec<(Member, anyhow::Error)>,
}

impl MemberSearchers {
    /// Opens `members` with `open` (from a member and its index folder).
    pub fn open(members: &[Member], mut open: impl FnMut(&Member, &Path) -> Result<Searcher>) -> MemberSearchers {
        let (mut opened, mut unopened) = (Vec::new(), Vec::new());
        for member in members {
            let index_dir = crate::store::index_dir_for(&member.root);
            let searcher = match member.exists() {
                true => open(member, &index_dir),
                false => Err(anyhow::anyhow!("{}: no such folder", member.root.display())),
            };
            match searcher {
                Ok(searcher) => opened.push((member.clone(), searcher)),
                Err(e) => unopened.push((member.clone(), e)),
            }
        }
        MemberSearchers { opened, unopened }
    }

    /// One ranked list from every open member ([`kb::search_members`]).
    pub fn search(&self, req: &SearchRequest) -> Result<kb::Found> {
        if self.opened.is_empty() {
            let why: Vec<String> = self
                .unopened
                .iter()
                .map(|(m, e)| format!("`{}`: {e:#}", m.name))
                .collect();
            anyhow::bail!(
                "no member of the workspace can be searched ({}); `ken index` in the workspace folder indexes them all",
                if why.is_empty() {
                    "it has no members".to_string()
                } else {
                    why.join("; ")
                }
            );
        }
        let named: Vec<(&str, &Searcher)> = self.opened.iter().map(|(m, s)| (m.name.as_str(), s)).collect();
        kb::search_members(&named, req)
    }

    /// The searchers, by member, to pool again.
    pub fn into_searchers(self) -> impl Iterator<Item = (Member, Searcher)> {
        self.opened.into_iter()
    }
}
