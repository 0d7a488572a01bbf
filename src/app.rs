//! What both front ends do, written once: index a root and then embed it,
//! add a knowledge base, and open the project with its knowledge bases to
//! search them, answer a question about them and say what the index
//! reflects. The CLI ([`crate::cli`]) and the MCP server ([`crate::serve`])
//! differ only in where their searchers come from (opened afresh, or from
//! the server's pool) and in how they report the outcome.

use std::path::Path;

use anyhow::Result;

use crate::context::question::{self, QuestionContext, QuestionRequest};
use crate::index::freshness::Freshness;
use crate::index::semantic::{self, EmbedReport};
use crate::index::{self, IndexOptions, IndexReport};
use crate::search::kb::{self, KnowledgeBase, PROJECT};
use crate::search::{SearchRequest, Searcher};

/// An index run and, when asked for, the embedding pass after it.
pub struct Indexed {
    pub report: IndexReport,
    /// None when not asked for; an error leaves lexical search working.
    pub embedding: Option<Result<EmbedReport>>,
}

/// Indexes `root` into `index_dir`: phase one, the lexical index, committed
/// and searchable when it returns; then `between` acts on its report (prints
/// it, indexes more); then, when `embed`, phase two: the missing embeddings,
/// with the same reporter. Only phase one (and `between`) can fail the call.
pub fn index_then_embed(
    root: &Path,
    index_dir: &Path,
    opts: &IndexOptions,
    embed: bool,
    between: impl FnOnce(&IndexReport) -> Result<()>,
) -> Result<Indexed> {
    let report = index::index(root, index_dir, opts)?;
    between(&report)?;
    let embedding = embed.then(|| semantic::embed_root(root, index_dir, &opts.reporter));
    Ok(Indexed { report, embedding })
}

/// Registers `folder` as a knowledge base of the project at `root` and
/// indexes it (then embeds it, when `embed`), as [`index_then_embed`] does.
/// A base that fails to index is unregistered again: the call can simply be
/// repeated.
pub fn add_knowledge_base(
    root: &Path,
    index_dir: &Path,
    folder: &Path,
    name: Option<&str>,
    opts: &IndexOptions,
    embed: bool,
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
