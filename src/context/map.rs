//! Where to start: a map of the repository's most important files and
//! their definitions within a token budget, ranked by PageRank over the
//! reference graph (a file that refers to a name gives rank to the files
//! that define it), personalised to a focus (a path, or a question's best
//! files) when one is given.
//!
//! The graph is the unresolved one: a reference counts for every file that
//! defines its name, split among them, as Aider's map does. Resolving every
//! reference (`Graph::all_edges`) costs seconds on a large repository; the
//! map needs only which files matter, and a name defined in many files (a
//! `new`, a `get`) then weighs little anywhere.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::pack::{self, Candidate, Pack};
use crate::graph::query::{Graph, Symbol};
use crate::search::{SearchMode, SearchRequest, Searcher};
use crate::store::Store;

/// The budget a map gets unless asked otherwise: an overview, not the code.
pub const DEFAULT_MAP_BUDGET: usize = 2_000;
/// PageRank's damping and its stopping rule.
const DAMPING: f64 = 0.85;
const ITERATIONS: usize = 50;
const CONVERGED: f64 = 1e-9;
/// A name defined in more files than this says nothing about which matters.
const MAX_DEFINERS: usize = 20;
/// The weight of a reference by a short one-word name (`new`, `push`,
/// `get`) or a private one (`_helper`): such a name is as often another
/// library's method as the repository's own definition (Aider's rule).
const VAGUE_NAME_WEIGHT: f64 = 0.1;
/// Definitions listed for one of the first files at most, and for the others:
/// the budget then reaches more files.
const DEFINITIONS_PER_TOP_FILE: usize = 8;
const DEFINITIONS_PER_FILE: usize = 4;
const TOP_FILES: usize = 5;
/// A signature line longer than this is cut.
const MAX_SIGNATURE_CHARS: usize = 120;
/// A question's focus: the files of its best hits.
const FOCUS_HITS: usize = 20;

/// A repository map.
#[derive(Debug, Serialize)]
pub struct RepoMap {
    /// Files with definitions on the branch.
    pub files: usize,
    /// What the rank was personalised to, if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
    /// One piece a file, most important first: `line: signature` of its
    /// most referenced definitions.
    pub map: Pack,
}

/// What the map is personalised to.
pub enum Focus {
    None,
    /// Files under a root-relative path (a file or a folder).
    Path(String),
    /// The files of a question's best lexical hits.
    Query(String),
}

impl Focus {
    /// A path inside `root` that exists is a path focus; anything else a question.
    pub fn parse(root: &Path, focus: Option<&str>) -> Focus {
        let Some(focus) = focus.map(str::trim).filter(|f| !f.is_empty()) else {
            return Focus::None;
        };
        let relative = focus.trim_start_matches("./").trim_end_matches('/');
        let inside = root.join(relative).canonicalize().ok().zip(root.canonicalize().ok());
        match inside {
            Some((path, root)) if path.starts_with(&root) && !relative.contains("..") => {
                let rel = path.strip_prefix(&root).unwrap_or(&path);
                Focus::Path(rel.to_string_lossy().replace('\\', "/"))
            }
            _ => Focus::Query(focus.to_string()),
        }
    }
}

/// The map of the repository at `root` (index in `index_dir`).
pub fn repo_map(root: &Path, index_dir: &Path, focus: Focus, budget: usize) -> Result<RepoMap> {
    let personal = match &focus {
        Focus::None => HashMap::new(),
        Focus::Path(prefix) => HashMap::from([(prefix.clone(), 1.0)]),
        Focus::Query(query) => {
            let searcher = Searcher::open(root, index_dir)?;
            let mut request = SearchRequest::new(query.clone());
            request.mode = SearchMode::Lexical;
            request.limit = FOCUS_HITS;
            let mut weights: HashMap<String, f64> = HashMap::new();
            for (rank, hit) in searcher.search(&request)?.into_iter().enumerate() {
                *weights.entry(hit.path).or_default() += 1.0 / (rank + 1) as f64;
            }
            weights
        }
    };
    let store = Store::open_for_read(index_dir)?;
    let graph = Graph::open(&store, root)?;
    let symbols = graph.all_symbols()?;
    let references = graph.reference_counts()?;
    let ranked = rank(&symbols, &references, |path| match &focus {
        Focus::Path(prefix) => {
            let under = path == prefix || path.starts_with(&format!("{prefix}/")) || prefix.is_empty();
            if under {
                1.0
            } else {
                0.0
            }
        }
        _ => personal.get(path).copied().unwrap_or(0.0),
    });
    let files = ranked.len();
    // Only the files that can fit are read for their signature lines: a
    // piece takes at least ~20 tokens; the others are named by their
    // definitions' kinds and names (they are left out, and said so).
    let readable = budget / 15;
    let candidates = ranked
        .into_iter()
        .enumerate()
        .filter_map(|(order, file)| listing(root, file, order, order < readable))
        .collect();
    let mut map = RepoMap {
        files,
        focus: match focus {
            Focus::None => None,
            Focus::Path(p) => Some(format!("path {p}")),
            Focus::Query(q) => Some(format!("question {q}")),
        },
        map: Pack::default(),
    };
    // The budget covers the whole answer: the map's own fields first.
    let own = pack::count_tokens(&serde_json::to_string(&map)?);
    map.map = pack::pack(candidates, budget.saturating_sub(own));
    Ok(map)
}

/// A file of the map: its rank and its definitions with theirs, best first.
struct RankedFile<'s> {
    path: &'s str,
    rank: f64,
    definitions: Vec<(&'s Symbol, f64)>,
}

/// Files by PageRank over the reference graph (personalised by `focus`:
/// a weight per path, none = uniform), each with its definitions ranked by
/// the rank their references bring.
fn rank<'s>(
    symbols: &'s [Symbol],
    references: &[(String, String, u32)],
    focus: impl Fn(&str) -> f64,
) -> Vec<RankedFile<'s>> {
    let mut file_index: HashMap<&str, usize> = HashMap::new();
    let mut paths: Vec<&str> = Vec::new();
    let mut definers: HashMap<&str, Vec<usize>> = HashMap::new();
    for s in symbols {
        let next = paths.len();
        let file = *file_index.entry(s.path.as_str()).or_insert_with(|| {
            paths.push(s.path.as_str());
            next
        });
        let files = definers.entry(s.name.as_str()).or_default();
        if files.last() != Some(&file) {
            files.push(file);
        }
    }
    let n = paths.len();
    if n == 0 {
        return Vec::new();
    }
    // Weighted edges file -> defining file, by name.
    let mut edges: HashMap<(usize, usize), f64> = HashMap::new();
    let mut name_edges: Vec<(usize, usize, &str, f64)> = Vec::new();
    for (path, name, count) in references {
        let (Some(&from), Some(files)) = (file_index.get(path.as_str()), definers.get(name.as_str())) else {
            continue;
        };
        if files.len() > MAX_DEFINERS {
            continue;
        }
        // Many uses of one name in a file count less than many names.
        let weight = (*count as f64).sqrt() * specificity(name) / files.len() as f64;
        for &to in files.iter().filter(|&&to| to != from) {
            *edges.entry((from, to)).or_default() += weight;
            let name = definers.get_key_value(name.as_str()).map_or("", |(k, _)| *k);
            name_edges.push((from, to, name, weight));
        }
    }
    let mut out_weight = vec![0.0; n];
    for (&(from, _), w) in &edges {
        out_weight[from] += w;
    }
    let mut personal: Vec<f64> = paths.iter().map(|p| focus(p)).collect();
    let total: f64 = personal.iter().sum();
    if total > 0.0 {
        personal.iter_mut().for_each(|p| *p /= total);
    } else {
        personal = vec![1.0 / n as f64; n];
    }
    let mut rank = personal.clone();
    for _ in 0..ITERATIONS {
        let dangling: f64 = (0..n).filter(|&i| out_weight[i] == 0.0).map(|i| rank[i]).sum();
        let mut next: Vec<f64> = personal
            .iter()
            .map(|p| (1.0 - DAMPING + DAMPING * dangling) * p)
            .collect();
        for (&(from, to), w) in &edges {
            next[to] += DAMPING * rank[from] * w / out_weight[from];
        }
        let delta: f64 = next.iter().zip(&rank).map(|(a, b)| (a - b).abs()).sum();
        rank = next;
        if delta < CONVERGED {
            break;
        }
    }
    // A definition's share: the rank its name's references bring to its file.
    let mut name_rank: HashMap<(usize, &str), f64> = HashMap::new();
    for (from, to, name, w) in name_edges {
        *name_rank.entry((to, name)).or_default() += rank[from] * w / out_weight[from];
    }
    let mut files: Vec<RankedFile> = paths
        .iter()
        .map(|p| RankedFile {
            path: p,
            rank: rank[file_index[p]],
            definitions: Vec::new(),
        })
        .collect();
    for s in symbols {
        let file = file_index[s.path.as_str()];
        let score = name_rank.get(&(file, s.name.as_str())).copied().unwrap_or(0.0);
        files[file].definitions.push((s, score));
    }
    for f in &mut files {
        // A type is as important as its members together: it is what a
        // reader needs first to place them (flask's `class Flask`, not only
        // its most used methods).
        let index: HashMap<i64, usize> = f.definitions.iter().enumerate().map(|(i, (s, _))| (s.id, i)).collect();
        let parent: Vec<Option<usize>> = f
            .definitions
            .iter()
            .map(|(s, _)| s.parent.and_then(|id| index.get(&id).copied()))
            .collect();
        let own: Vec<f64> = f.definitions.iter().map(|(_, score)| *score).collect();
        // Bounded: a damaged index's parent loop must not hang the map.
        for (i, score) in own.iter().enumerate() {
            for p in std::iter::successors(parent[i], |&p| parent[p]).take(own.len()) {
                f.definitions[p].1 += score;
            }
        }
        // Referenced definitions first; then the outermost (types before their methods), in file order.
        f.definitions.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then(a.0.parent.is_some().cmp(&b.0.parent.is_some()))
                .then(a.0.line.cmp(&b.0.line))
        });
    }
    files.sort_by(|a, b| b.rank.total_cmp(&a.rank).then(a.path.cmp(b.path)));
    for (order, f) in files.iter_mut().enumerate() {
        f.definitions.truncate(if order < TOP_FILES {
            DEFINITIONS_PER_TOP_FILE
        } else {
            DEFINITIONS_PER_FILE
        });
        f.definitions.sort_by_key(|(s, _)| s.line);
    }
    files
}

/// How much a reference by `name` says that it means the repository's own
/// definition: 1 for a compound or long name, [`VAGUE_NAME_WEIGHT`] for a
/// short single word or a private name.
fn specificity(name: &str) -> f64 {
    let compound = crate::source::lexical::split_identifier(name).len() >= 2 || name.chars().count() >= 8;
    if compound && !name.starts_with('_') {
        1.0
    } else {
        VAGUE_NAME_WEIGHT
    }
}

/// The map's piece for one file: `line: signature` of its definitions.
fn listing(root: &Path, file: RankedFile, order: usize, read: bool) -> Option<Candidate> {
    let source = read
        .then(|| std::fs::read_to_string(root.join(file.path)).ok())
        .flatten();
    let lines: Vec<&str> = source.as_deref().map(|s| s.lines().collect()).unwrap_or_default();
    let text = file
        .definitions
        .iter()
        .map(|(s, _)| {
            let signature = lines
                .get((s.line as usize).saturating_sub(1))
                .map(|l| l.trim())
                .filter(|l| !l.is_empty())
                .map_or_else(
                    || format!("{} {}", s.kind, s.qualified()),
                    |l| truncate(l, MAX_SIGNATURE_CHARS),
                );
            format!("{}: {signature}", s.line)
        })
        .collect::<Vec<_>>()
        .join("\n");
    let first = file.definitions.first()?.0.line as usize;
    let last = file.definitions.iter().map(|(s, _)| s.line as usize).max()?;
    Some(Candidate {
        path: file.path.to_string(),
        start_line: first,
        end_line: last,
        text,
        role: "map",
        label: String::new(),
        // Rank order, kept exactly (ranks are tiny and close).
        priority: -(order as f64),
        cuttable: false,
    })
}

fn truncate(line: &str, max: usize) -> String {
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(path: &str, name: &str, line: u32) -> Symbol {
        Symbol {
            id: line as i64,
            name: name.to_string(),
            kind: "function".to_string(),
            container: None,
            path: path.to_string(),
            line,
            end_line: line + 3,
            language: "python".to_string(),
            file_id: 0,
            parent: None,
        }
    }

    #[test]
    fn the_most_referenced_file_ranks_first_and_a_focus_moves_the_rank() {
        let symbols = vec![
            symbol("core.py", "parse_config", 1),
            symbol("core.py", "unused", 9),
            symbol("a.py", "run_a", 1),
            symbol("b.py", "run_b", 1),
            symbol("c.py", "run_c", 1),
        ];
        let refs: Vec<(String, String, u32)> = [
            ("a.py", "parse_config"),
            ("b.py", "parse_config"),
            ("c.py", "parse_config"),
            ("c.py", "run_a"),
        ]
        .iter()
        .map(|(p, n)| (p.to_string(), n.to_string(), 1))
        .collect();
        let ranked = rank(&symbols, &refs, |_| 0.0);
        assert_eq!(ranked[0].path, "core.py");
        // The referenced definition has the rank; the other comes with its file.
        assert!(ranked[0]
            .definitions
            .iter()
            .any(|(s, r)| s.name == "parse_config" && *r > 0.0));
        assert!(ranked[0]
            .definitions
            .iter()
            .any(|(s, r)| s.name == "unused" && *r == 0.0));
        assert_eq!(ranked[1].path, "a.py", "referenced once");
        let focused = rank(&symbols, &refs, |p| if p == "b.py" { 1.0 } else { 0.0 });
        let b = focused.iter().position(|f| f.path == "b.py").unwrap();
        let c = focused.iter().position(|f| f.path == "c.py").unwrap();
        assert!(b < c, "the focus ranks above an equal file");
    }

    #[test]
    fn a_class_is_kept_before_its_members_though_only_they_are_referenced() {
        let class = Symbol {
            kind: "class".to_string(),
            ..symbol("app.py", "App", 1)
        };
        let mut symbols = vec![class];
        let names: Vec<String> = (0..DEFINITIONS_PER_TOP_FILE + 4)
            .map(|i| format!("method_{i}"))
            .collect();
        for (i, name) in names.iter().enumerate() {
            symbols.push(Symbol {
                kind: "method".to_string(),
                parent: Some(1),
                ..symbol("app.py", name, 10 + 10 * i as u32)
            });
        }
        symbols.push(symbol("helpers.py", "helper", 1));
        let refs: Vec<(String, String, u32)> = names
            .iter()
            .map(|n| ("main.py".to_string(), n.clone(), 1))
            .chain([("main.py".to_string(), "helper".to_string(), 1)])
            .collect();
        let ranked = rank(&symbols, &refs, |_| 0.0);
        let app = ranked.iter().find(|f| f.path == "app.py").unwrap();
        assert_eq!(app.definitions.len(), DEFINITIONS_PER_TOP_FILE);
        assert_eq!(app.definitions[0].0.name, "App", "{:?}", app.definitions);
    }
}
