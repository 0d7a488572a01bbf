//! Context for a question (`codebase_context`, `ken context QUERY`): the
//! best chunks for it and what makes them understandable, packed into a
//! token budget. For the top definitions among the results: the call-site
//! lines of their closest callers (same package first, tests last), the
//! signatures of what they call, and the tests that call them; matching
//! knowledge-base docs. Priorities follow the search's rank; [`pack`] does
//! the deduplication, the spread over files and the cutting.
//!
//! The budget covers the whole answer as serialized (compact JSON): the
//! fields around the pieces are counted and reserved.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::pack::{self, Candidate, Pack};
use crate::graph::query::{Direction, Edge, Graph, Symbol};
use crate::graph::resolve::Confidence;
use crate::search::confidence::Confidence as MatchConfidence;
use crate::search::kb::{self, KnowledgeBase, PROJECT};
use crate::search::{SearchHit, SearchMode, SearchRequest, Searcher};
use crate::source::paths::is_test_path;

/// Definitions among the top results whose callers, callees and tests are offered.
const TOP_DEFINITIONS: usize = 4;
/// Call sites offered per definition.
const CALLERS_PER_DEFINITION: usize = 4;
/// Callee signatures offered per definition.
const CALLEES_PER_DEFINITION: usize = 6;
/// Tests offered per definition.
const TESTS_PER_DEFINITION: usize = 2;
/// References examined for a definition's callers at most (a name used
/// everywhere must not take the answer's time).
const MAX_CALLER_REFS: usize = 300;
/// Lines shown either side of a call site.
const SITE_CONTEXT_LINES: usize = 1;
/// Results of the top ranks whose bodies may be cut to their head.
const CUTTABLE_MATCHES: usize = 3;
/// Knowledge-base docs offered at most.
const DOCS: usize = 3;

/// What `codebase_context` and `ken context QUERY` are asked.
#[derive(Debug, Clone)]
pub struct QuestionRequest {
    pub query: String,
    /// Tokens of the whole answer (default [`pack::DEFAULT_BUDGET`]).
    pub budget: Option<usize>,
    pub mode: SearchMode,
    /// Only paths matching this glob or under this folder.
    pub path_glob: Option<String>,
}

/// The answer: evidence for the question, packed within `budget` tokens.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionContext {
    pub query: String,
    /// How likely the matches are to answer the question; a low one says so
    /// in a note (no strong match: the pieces are the closest there are).
    pub confidence: MatchConfidence,
    /// Tokens the whole answer may take (o200k_base, compact JSON).
    pub budget: usize,
    /// Tokens the whole answer takes, this field included.
    pub tokens: usize,
    /// The pieces, best first: `match` (a search result), `caller` (call-site
    /// lines), `callee` (a signature), `test`, `doc` (from a knowledge base).
    pub pack: Pack,
    /// Set when the search could not do everything asked (e.g. lexical only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

/// The context for `req` from the project's searcher (and the knowledge
/// bases'), reading call sites and signatures from the files under `root`.
pub fn context_for_question(
    project: &Searcher,
    bases: &[(KnowledgeBase, &Searcher)],
    root: &Path,
    req: &QuestionRequest,
) -> Result<QuestionContext> {
    let budget = pack::checked_budget(req.budget)?;
    anyhow::ensure!(!req.query.trim().is_empty(), "the query is empty: say what to look for");
    let search = SearchRequest {
        query: req.query.clone(),
        // Enough results to fill the budget (a result is ~150-300 tokens).
        limit: (budget / 150).clamp(10, 60),
        path_glob: req.path_glob.clone(),
        language: None,
        kind: None,
        max_per_file: None,
        mode: req.mode,
        explain: false,
    };
    let kb::Found {
        hits,
        notices,
        confidence,
    } = kb::search_all(project, bases, &search, true)?;
    let mut files = Files::default();
    let mut candidates = Vec::new();
    let mut project_rank = 0usize;
    let mut doc_rank = 0usize;
    let mut definitions: Vec<(usize, SearchHit)> = Vec::new();
    for (base, hit) in hits {
        if base != PROJECT {
            if doc_rank < DOCS {
                let base_root = bases.iter().find(|(b, _)| b.name == base).map(|(b, _)| b.root());
                candidates.push(doc_candidate(&base, base_root, &hit, doc_rank));
                doc_rank += 1;
            }
            continue;
        }
        let rank = project_rank;
        project_rank += 1;
        candidates.push(Candidate {
            path: hit.path.clone(),
            start_line: hit.start_line as usize,
            end_line: hit.end_line as usize,
            text: hit.content.clone(),
            role: "match",
            label: match &hit.symbol {
                Some(s) => format!("{} {s}", hit.kind),
                None => hit.kind.clone(),
            },
            priority: match_priority(rank),
            cuttable: rank < CUTTABLE_MATCHES,
        });
        if hit.symbol.is_some() && definitions.len() < TOP_DEFINITIONS && !is_test_path(&hit.path) {
            definitions.push((rank, hit));
        }
    }
    let mut graph = Graph::for_branch(project.store(), project.branch());
    let mut offered: HashSet<i64> = HashSet::new();
    for (rank, hit) in &definitions {
        for symbol in symbols_in(&mut graph, project.store(), project.branch(), hit)? {
            if offered.insert(symbol.id) {
                candidates.extend(neighbourhood(&mut graph, &mut files, root, &symbol, *rank)?);
            }
        }
    }
    let notice = (!notices.is_empty()).then(|| notices.join("; "));
    Ok(fit(&req.query, budget, candidates, confidence, notice))
}

/// A search result's priority: rank order, well above the context of lower results.
fn match_priority(rank: usize) -> f64 {
    100.0 - 2.0 * rank as f64
}

/// Packs `candidates` so that the whole answer, serialized, fits in `budget`:
/// its own fields are reserved, and the pack is redone smaller if needed.
fn fit(
    query: &str,
    budget: usize,
    candidates: Vec<Candidate>,
    confidence: MatchConfidence,
    notice: Option<String>,
) -> QuestionContext {
    let mut answer = QuestionContext {
        query: query.to_string(),
        confidence,
        budget,
        tokens: 0,
        pack: Pack {
            pieces: Vec::new(),
            tokens: 0,
            left_out: None,
        },
        notice,
    };
    // The fields around the pieces, with a left-out line of the longest kind.
    let frame = count(&answer) + 200;
    let mut room = budget.saturating_sub(frame);
    for _ in 0..8 {
        answer.pack = pack::pack(candidates.clone(), room);
        let total = settle_tokens(&mut answer);
        if total <= budget {
            return answer;
        }
        room = room.saturating_sub(total - budget + 8);
    }
    answer.pack = pack::pack(Vec::new(), room);
    answer.pack.left_out = Some(format!(
        "left out: every piece (the budget of {budget} tokens is too small for this answer); ask with a larger budget"
    ));
    settle_tokens(&mut answer);
    answer
}

/// Sets `tokens` to the serialized answer's count (which includes itself).
fn settle_tokens(answer: &mut QuestionContext) -> usize {
    for _ in 0..4 {
        let total = count(answer);
        if total == answer.tokens {
            break;
        }
        answer.tokens = total;
    }
    answer.tokens
}

fn count(answer: &QuestionContext) -> usize {
    pack::count_tokens(&serde_json::to_string(answer).unwrap_or_default())
}

fn doc_candidate(base: &str, base_root: Option<&Path>, hit: &SearchHit, rank: usize) -> Candidate {
    let path = match base_root {
        Some(r) => r.join(&hit.path).display().to_string(),
        None => format!("{base}:{}", hit.path),
    };
    Candidate {
        path,
        start_line: hit.start_line as usize,
        end_line: hit.end_line as usize,
        text: hit.content.clone(),
        role: "doc",
        label: format!("knowledge base {base}"),
        // After the best results and their neighbourhood, before the rest.
        priority: 79.0 - rank as f64,
        cuttable: rank == 0,
    }
}

/// The definitions of the graph that a result's chunk holds: those inside
/// its lines, else the innermost one around its first line.
fn symbols_in(graph: &mut Graph, store: &crate::store::Store, branch: &str, hit: &SearchHit) -> Result<Vec<Symbol>> {
    let inside = store.symbol_ids_within(branch, &hit.path, hit.start_line, hit.end_line)?;
    let mut found = Vec::new();
    for id in inside {
        found.extend(graph.lookup(&id.to_string())?);
    }
    if found.is_empty() {
        found = graph.lookup(&format!("{}:{}", hit.path, hit.start_line))?;
    }
    // A nested definition (a method inside a class in the chunk) is reached through its container.
    let ids: HashSet<i64> = found.iter().map(|s| s.id).collect();
    found.retain(|s| s.parent.is_none_or(|p| !ids.contains(&p)));
    Ok(found)
}

/// Call sites, callee signatures and tests of `symbol`, the result at `rank`.
fn neighbourhood(
    graph: &mut Graph,
    files: &mut Files,
    root: &Path,
    symbol: &Symbol,
    rank: usize,
) -> Result<Vec<Candidate>> {
    let base = match_priority(rank);
    let mut out = Vec::new();
    // Callers: same package first, then resolved by scope or import, tests last.
    let (callers, _) = graph.callers_bounded(symbol, MAX_CALLER_REFS)?;
    let mut edges: Vec<&Edge> = callers
        .iter()
        .filter(|e| e.kind != "import" && e.confidence != Confidence::Ambiguous && e.from.id != symbol.id)
        .collect();
    let dir = parent_dir(&symbol.path);
    edges.sort_by_key(|e| {
        let in_test = is_test_path(&e.call_site.path);
        (
            in_test,
            // Among tests, the symbol's unit tests first.
            if in_test {
                super::test_affinity(&e.call_site.path, &e.from.name, &symbol.path, &symbol.name)
            } else {
                0
            },
            parent_dir(&e.call_site.path) != dir,
            e.confidence as u8,
            e.call_site.path.clone(),
            e.call_site.line,
        )
    });
    let mut tests = 0;
    let mut sites = 0;
    let mut seen_callers = HashSet::new();
    for e in edges {
        if !seen_callers.insert((e.from.id, e.from.path.clone())) {
            continue;
        }
        let in_test = is_test_path(&e.call_site.path);
        if in_test && tests < TESTS_PER_DEFINITION && e.from.id != 0 {
            if let Some(c) = files.span(root, &e.from.path, e.from.line as usize, e.from.end_line as usize) {
                let label = format!("{} {} calls {}", e.from.kind, e.from.qualified(), symbol.name);
                out.push(dressed(c, "test", label, base - 6.5 - 0.1 * tests as f64, true));
                tests += 1;
            }
            continue;
        }
        if in_test || sites >= CALLERS_PER_DEFINITION {
            continue;
        }
        let line = e.call_site.line as usize;
        let start = line.saturating_sub(SITE_CONTEXT_LINES).max(1);
        if let Some(c) = files.span(root, &e.call_site.path, start, line + SITE_CONTEXT_LINES) {
            let label = format!("{} calls {}", e.from.qualified(), symbol.name);
            out.push(dressed(c, "caller", label, base - 2.5 - 0.1 * sites as f64, false));
            sites += 1;
        }
    }
    // Callees: the signature of each definition called.
    let callees = graph.call_graph(symbol, Direction::Callees, 1)?;
    let mut seen = HashSet::new();
    let mut n = 0;
    for e in &callees.edges {
        if n >= CALLEES_PER_DEFINITION {
            break;
        }
        if e.kind == "import" || e.confidence == Confidence::Ambiguous || !seen.insert(e.to.id) || e.to.id == symbol.id
        {
            continue;
        }
        if let Some(c) = files.signature(root, &e.to.path, e.to.line as usize) {
            let label = format!("{} {}, called by {}", e.to.kind, e.to.qualified(), symbol.name);
            out.push(dressed(c, "callee", label, base - 0.5 - 0.05 * n as f64, false));
            n += 1;
        }
    }
    // Pieces of the definition's own file wait for the results: the pack
    // takes a few pieces a file first, and those should be the file's results.
    for c in out.iter_mut().filter(|c| c.path == symbol.path) {
        c.priority = SAME_FILE_PRIORITY + (c.priority - base) - 0.5 * rank as f64;
    }
    Ok(out)
}

/// Where call sites and signatures in the definition's own file rank: after the first 40 results.
const SAME_FILE_PRIORITY: f64 = 20.0;

/// A span of lines as the piece it is offered as.
fn dressed(c: Candidate, role: &'static str, label: String, priority: f64, cuttable: bool) -> Candidate {
    Candidate {
        role,
        label,
        priority,
        cuttable,
        ..c
    }
}

fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// Lines of the project's files, read once per answer.
#[derive(Default)]
struct Files {
    lines: HashMap<PathBuf, Option<Vec<String>>>,
}

impl Files {
    fn lines_of(&mut self, root: &Path, path: &str) -> Option<&Vec<String>> {
        let full = root.join(path);
        self.lines
            .entry(full.clone())
            .or_insert_with(|| {
                std::fs::read_to_string(&full)
                    .ok()
                    .map(|t| t.lines().map(str::to_string).collect())
            })
            .as_ref()
    }

    /// Lines `start..=end` of `path` (1-based) as a candidate to fill in.
    fn span(&mut self, root: &Path, path: &str, start: usize, end: usize) -> Option<Candidate> {
        let lines = self.lines_of(root, path)?;
        let end = end.min(lines.len());
        if start == 0 || start > end {
            return None;
        }
        Some(Candidate {
            path: path.to_string(),
            start_line: start,
            end_line: end,
            text: lines[start - 1..end].join("\n"),
            role: "",
            label: String::new(),
            priority: 0.0,
            cuttable: false,
        })
    }

    /// The signature of the definition at `line`: its first line, and the
    /// next ones while the parameter list is open (at most 4 lines).
    fn signature(&mut self, root: &Path, path: &str, line: usize) -> Option<Candidate> {
        let lines = self.lines_of(root, path)?;
        let mut end = line;
        let mut depth = 0i32;
        while end <= lines.len() && end < line + 4 {
            let l = &lines[end - 1];
            depth += l.matches(['(', '[']).count() as i32 - l.matches([')', ']']).count() as i32;
            if depth <= 0 {
                break;
            }
            end += 1;
        }
        self.span(root, path, line, end)
    }
}
