//! What a change affects: the files and symbols a diff touches (deleted and
//! renamed ones too), their callers to a depth with call sites, the tests that
//! reach them, a risk level with its reasons, and a command that runs those
//! tests.
//!
//! Both sides of each changed file are parsed with the chunker's extraction
//! (`chunk::chunk_and_graph`), so the lines of a diff map to definitions
//! exactly on either side, whatever the index holds of the other side (it
//! never needs re-indexing). Callers and tests come from the current branch's
//! catalog in the index: a symbol deleted by the change keeps its callers
//! there, found by name.

mod runner;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use crate::graph::query::{Direction, Graph, Symbol};
use crate::source::extract::SymbolRow;
use crate::source::paths::is_test_path;

/// Which change to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The working tree's uncommitted changes (staged or not, new files too) against HEAD.
    WorkTree,
    /// The staged changes (the index) against HEAD.
    Staged,
    /// `A..B` (or `A...B`: from their merge base), or one revision or branch:
    /// from its merge base with HEAD to the working tree.
    Rev(String),
}

/// Call levels followed when looking for tests.
pub const TEST_DEPTH: usize = 4;
/// Callers listed at most (the count says how many there are).
const MAX_CALLERS: usize = 200;

#[derive(Debug, Clone)]
pub struct Impact {
    /// What was compared, e.g. `HEAD..working tree`.
    pub compared: String,
    pub files: Vec<ChangedFile>,
    /// Definitions whose lines changed.
    pub symbols: Vec<ChangedSymbol>,
    /// Transitive callers of the changed symbols to `depth`, nearest first.
    pub callers: Vec<Caller>,
    /// How many callers there are (more than listed when above 200).
    pub caller_count: usize,
    /// Tests that reach a changed symbol, nearest first.
    pub tests: Vec<AffectedTest>,
    pub risk: Risk,
    /// The runner that runs `tests` (pytest, cargo, go, jest, vitest, maven, gradle), if known.
    pub runner: Option<String>,
    /// A command that runs just those tests; the test files when the runner is unknown.
    pub command: Option<String>,
    /// Set when a graph limit cut the answer short.
    pub truncated: bool,
}

#[derive(Debug, Clone)]
pub struct ChangedFile {
    pub path: String,
    /// added, modified, deleted or renamed.
    pub status: String,
    pub old_path: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ChangedSymbol {
    /// `Container.name` or the name.
    pub name: String,
    pub kind: String,
    pub path: String,
    /// Its line on the new side (the old side for a deleted symbol).
    pub line: u32,
    /// added, modified, deleted or renamed.
    pub change: String,
    /// The old name of a renamed symbol.
    pub old_name: Option<String>,
    /// Direct callers in the index.
    pub callers: usize,
    /// Exported / `pub` / public.
    pub public: bool,
    /// Whether a test reaches it.
    pub tested: bool,
}

#[derive(Debug, Clone)]
pub struct Caller {
    /// `path:Container.name` of the calling definition (`<module>` for top-level code).
    pub symbol: String,
    /// The changed symbol or caller it calls.
    pub calls: String,
    /// 1: calls a changed symbol directly.
    pub depth: usize,
    /// `path:line` of the call.
    pub site: String,
    /// The call's line, trimmed.
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct AffectedTest {
    /// `Container.name` of the test function, or the file for a test file.
    pub name: String,
    pub path: String,
    pub line: u32,
    /// Calls between it and a changed symbol (0: it imports a changed module or is
    /// named after one or its package; a file using a name re-exported from one: 1).
    pub depth: usize,
    /// The changed symbol it reaches (or the module it imports).
    pub reaches: String,
}

#[derive(Debug, Clone)]
pub struct Risk {
    /// low, medium or high.
    pub level: String,
    pub reasons: Vec<String>,
}

/// One file of the diff: paths, status and the changed line ranges per side.
struct FileDiff {
    old_path: Option<String>,
    new_path: Option<String>,
    status: git2::Delta,
    /// 1-based inclusive ranges.
    old_lines: Vec<(u32, u32)>,
    new_lines: Vec<(u32, u32)>,
}

/// What `root`'s change `target` affects, callers followed `depth` levels.
pub fn change_impact(root: &Path, index_dir: &Path, target: &Target, depth: usize) -> Result<Impact> {
    let repo = git2::Repository::discover(root).map_err(|_| {
        anyhow!(
            "not a git repository: {} (change impact compares git revisions)",
            root.display()
        )
    })?;
    let top = repo
        .workdir()
        .ok_or_else(|| anyhow!("the git repository at {} has no working tree", root.display()))?
        .to_path_buf();
    let (diffs, compared, new_side, old_tree) = diff(&repo, target)?;
    if diffs.is_empty() {
        bail!("no changes between {compared}");
    }
    let store = crate::store::Store::open_for_read(index_dir)?;
    let mut graph = Graph::open(&store, root)?;
    // Paths in the index are relative to root; git's to the top of the work tree.
    let prefix = root
        .canonicalize()
        .ok()
        .and_then(|r| r.strip_prefix(top.canonicalize().ok()?).ok().map(Path::to_path_buf))
        .unwrap_or_default();
    let rel = |p: &str| -> Option<String> {
        Path::new(p)
            .strip_prefix(&prefix)
            .ok()
            .map(|p| p.to_string_lossy().replace('\\', "/"))
    };
    let sides = Sides {
        new: new_side,
        old_tree,
    };
    analyze(&mut graph, &repo, root, &diffs, &sides, &rel, compared, depth.max(1))
}

/// The two sides of a diff: the old side's tree, the new side's contents.
struct Sides {
    new: NewSide,
    old_tree: Option<git2::Oid>,
}

/// Where the new side's file contents come from.
enum NewSide {
    WorkTree,
    Index,
    Tree(git2::Oid),
}

type Diffed = (Vec<FileDiff>, String, NewSide, Option<git2::Oid>);

fn diff(repo: &git2::Repository, target: &Target) -> Result<Diffed> {
    let head_tree = || -> Result<Option<git2::Tree<'_>>> {
        match repo.head() {
            Ok(h) => Ok(Some(h.peel_to_tree()?)),
            Err(e) if e.code() == git2::ErrorCode::UnbornBranch => Ok(None),
            Err(e) => Err(e.into()),
        }
    };
    let resolve = |spec: &str| -> Result<git2::Commit<'_>> {
        repo.revparse_single(spec)
            .and_then(|o| o.peel_to_commit())
            .map_err(|_| anyhow!("unknown revision `{spec}`: no commit, branch or tag by that name"))
    };
    let mut opts = git2::DiffOptions::new();
    opts.context_lines(0);
    let (diff, compared, side, old) = match target {
        Target::WorkTree => {
            opts.include_untracked(true)
                .recurse_untracked_dirs(true)
                .show_untracked_content(true);
            let tree = head_tree()?;
            let d = repo.diff_tree_to_workdir_with_index(tree.as_ref(), Some(&mut opts))?;
            (
                d,
                "HEAD and the working tree".to_string(),
                NewSide::WorkTree,
                tree.map(|t| t.id()),
            )
        }
        Target::Staged => {
            let tree = head_tree()?;
            let d = repo.diff_tree_to_index(tree.as_ref(), None, Some(&mut opts))?;
            (
                d,
                "HEAD and the staged changes".to_string(),
                NewSide::Index,
                tree.map(|t| t.id()),
            )
        }
        Target::Rev(spec) => {
            let spec = spec.trim();
            if let Some((a, b)) = spec.split_once("...").or_else(|| spec.split_once("..")) {
                let three = spec.contains("...");
                let (a, b) = (
                    if a.is_empty() { "HEAD" } else { a },
                    if b.is_empty() { "HEAD" } else { b },
                );
                let (ca, cb) = (resolve(a)?, resolve(b)?);
                let base = if three {
                    repo.find_commit(repo.merge_base(ca.id(), cb.id())?)?
                } else {
                    ca
                };
                let d = repo.diff_tree_to_tree(Some(&base.tree()?), Some(&cb.tree()?), Some(&mut opts))?;
                (
                    d,
                    format!("{a} and {b}"),
                    NewSide::Tree(cb.tree()?.id()),
                    Some(base.tree()?.id()),
                )
            } else {
                let other = resolve(spec)?;
                let head = repo.head()?.peel_to_commit()?;
                let base = repo.find_commit(repo.merge_base(other.id(), head.id())?)?;
                opts.include_untracked(true)
                    .recurse_untracked_dirs(true)
                    .show_untracked_content(true);
                let d = repo.diff_tree_to_workdir_with_index(Some(&base.tree()?), Some(&mut opts))?;
                (
                    d,
                    format!("{spec} (merge base) and the working tree"),
                    NewSide::WorkTree,
                    Some(base.tree()?.id()),
                )
            }
        }
    };
    let mut diff = diff;
    diff.find_similar(Some(git2::DiffFindOptions::new().renames(true)))?;
    let files: std::cell::RefCell<Vec<FileDiff>> = std::cell::RefCell::new(Vec::new());
    diff.foreach(
        &mut |delta, _| {
            let path = |f: git2::DiffFile| f.path().map(|p| p.to_string_lossy().replace('\\', "/"));
            let status = delta.status();
            files.borrow_mut().push(FileDiff {
                old_path: (status != git2::Delta::Added && status != git2::Delta::Untracked)
                    .then(|| path(delta.old_file()))
                    .flatten(),
                new_path: (status != git2::Delta::Deleted)
                    .then(|| path(delta.new_file()))
                    .flatten(),
                status,
                old_lines: Vec::new(),
                new_lines: Vec::new(),
            });
            true
        },
        None,
        Some(&mut |_, hunk| {
            if let Some(f) = files.borrow_mut().last_mut() {
                if hunk.old_lines() > 0 {
                    f.old_lines
                        .push((hunk.old_start(), hunk.old_start() + hunk.old_lines() - 1));
                }
                if hunk.new_lines() > 0 {
                    f.new_lines
                        .push((hunk.new_start(), hunk.new_start() + hunk.new_lines() - 1));
                }
            }
            true
        }),
        None,
    )?;
    let mut files = files.into_inner();
    files.retain(|f| {
        !matches!(f.status, git2::Delta::Unmodified | git2::Delta::Ignored)
            && (f.status != git2::Delta::Renamed || f.old_path != f.new_path)
    });
    Ok((files, compared, side, old))
}

/// A definition of one side of a file, as the chunker's extraction found it.
struct Def<'s> {
    row: SymbolRow,
    /// The definition's first line, for the public check.
    head: &'s str,
    /// Its text.
    text: &'s str,
}

impl Def<'_> {
    /// Its text with its name blanked, for rename detection.
    fn body(&self) -> String {
        self.text.replace(&self.row.name, "\u{0}")
    }
}

/// Definitions of `source` (the file at `path`, relative to the root): from
/// the index when it holds this version of the file, else parsed as indexing
/// would (one side of a diff is usually indexed; a large file's parse is most
/// of the time this tool takes).
fn definitions<'s>(graph: &Graph, path: &str, source: &'s str) -> Result<Vec<Def<'s>>> {
    let hash = crate::store::content_hash(source.as_bytes());
    let rows = match graph.symbols_of_version(path, hash)? {
        Some(rows) => rows,
        None => {
            let Some(lang) = crate::source::lang::for_source(Path::new(path), source) else {
                return Ok(Vec::new());
            };
            crate::source::chunk::graph_symbols(lang, source).unwrap_or_default()
        }
    };
    let lines: Vec<&str> = source.lines().collect();
    // Line starts, so that a definition's text is its whole lines whichever way it was found.
    let mut starts: Vec<usize> = vec![0];
    starts.extend(source.match_indices('\n').map(|(i, _)| i + 1));
    let at = |line: u32| {
        starts
            .get(line as usize)
            .copied()
            .unwrap_or(source.len())
            .min(source.len())
    };
    Ok(rows
        .into_iter()
        .map(|row| Def {
            head: lines.get(row.line.saturating_sub(1) as usize).copied().unwrap_or(""),
            text: source
                .get(at(row.start_line.saturating_sub(1))..at(row.end_line))
                .unwrap_or(""),
            row,
        })
        .collect())
}

/// Indexes of the innermost definitions holding a line of `ranges`.
fn touched(defs: &[Def], ranges: &[(u32, u32)]) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for &(a, b) in ranges {
        for line in a..=b {
            let inner = defs
                .iter()
                .enumerate()
                .filter(|(_, d)| d.row.start_line <= line && line <= d.row.end_line)
                .min_by_key(|(_, d)| d.row.end_line - d.row.start_line);
            if let Some((i, _)) = inner {
                out.insert(i);
            }
        }
    }
    out
}

fn qualified(row: &SymbolRow) -> String {
    match &row.container {
        Some(c) if c != &row.name => format!("{c}.{}", row.name),
        _ => row.name.clone(),
    }
}

fn blob_text(repo: &git2::Repository, tree: Option<&git2::Tree>, path: &str) -> Option<String> {
    let entry = tree?.get_path(Path::new(path)).ok()?;
    let blob = repo.find_blob(entry.id()).ok()?;
    String::from_utf8(blob.content().to_vec()).ok()
}

/// A changed symbol before the graph is asked about it.
struct Change {
    row: SymbolRow,
    path: String,
    change: &'static str,
    old_name: Option<String>,
    public: bool,
}

impl Change {
    fn of(d: &Def, path: &str, change: &'static str) -> Change {
        Change {
            public: is_public(&d.row, d.head, path),
            row: d.row.clone(),
            path: path.to_string(),
            change,
            old_name: None,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn analyze(
    graph: &mut Graph,
    repo: &git2::Repository,
    root: &Path,
    diffs: &[FileDiff],
    sides: &Sides,
    rel: &dyn Fn(&str) -> Option<String>,
    compared: String,
    depth: usize,
) -> Result<Impact> {
    let new_side = &sides.new;
    let old_tree = sides.old_tree.map(|id| repo.find_tree(id)).transpose()?;
    let new_tree = match new_side {
        NewSide::Tree(id) => Some(repo.find_tree(*id)?),
        _ => None,
    };
    let index = match new_side {
        NewSide::Index => Some(repo.index()?),
        _ => None,
    };
    let top = repo.workdir().context("no working tree")?.to_path_buf();
    let mut files = Vec::new();
    let mut changes: Vec<Change> = Vec::new();
    for f in diffs {
        let shown = f.new_path.as_deref().or(f.old_path.as_deref()).unwrap_or_default();
        let Some(path) = rel(shown) else { continue };
        let status = match f.status {
            git2::Delta::Added | git2::Delta::Untracked => "added",
            git2::Delta::Deleted => "deleted",
            git2::Delta::Renamed => "renamed",
            _ => "modified",
        };
        files.push(ChangedFile {
            path: path.clone(),
            status: status.to_string(),
            old_path: (status == "renamed")
                .then(|| f.old_path.as_deref().and_then(rel))
                .flatten(),
        });
        let old_text = f
            .old_path
            .as_deref()
            .and_then(|p| blob_text(repo, old_tree.as_ref(), p));
        let new_text = f.new_path.as_deref().and_then(|p| match new_side {
            NewSide::WorkTree => std::fs::read_to_string(top.join(p)).ok(),
            NewSide::Tree(_) => blob_text(repo, new_tree.as_ref(), p),
            NewSide::Index => {
                let entry = index.as_ref()?.get_path(Path::new(p), 0)?;
                String::from_utf8(repo.find_blob(entry.id).ok()?.content().to_vec()).ok()
            }
        });
        let old_defs = old_text
            .as_deref()
            .map(|t| definitions(graph, &path, t))
            .transpose()?
            .unwrap_or_default();
        let new_defs = new_text
            .as_deref()
            .map(|t| definitions(graph, &path, t))
            .transpose()?
            .unwrap_or_default();
        let new_names: HashSet<String> = new_defs.iter().map(|d| qualified(&d.row)).collect();
        let old_names: HashSet<String> = old_defs.iter().map(|d| qualified(&d.row)).collect();
        let mut seen = HashSet::new();
        let mut added = Vec::new();
        // A side alone (a file added or deleted) changed every line.
        let changed_lines =
            |alone: bool, lines: &Vec<(u32, u32)>| if alone { vec![(1, u32::MAX / 2)] } else { lines.clone() };
        let new_ranges = changed_lines(new_text.is_some() && old_text.is_none(), &f.new_lines);
        for i in touched(&new_defs, &new_ranges) {
            let d = &new_defs[i];
            let q = qualified(&d.row);
            if !seen.insert(q.clone()) {
                continue;
            }
            let change = if old_names.contains(&q) { "modified" } else { "added" };
            if change == "added" {
                added.push(changes.len());
            }
            changes.push(Change::of(d, &path, change));
        }
        let old_ranges = changed_lines(old_text.is_some() && new_text.is_none(), &f.old_lines);
        for i in touched(&old_defs, &old_ranges) {
            let d = &old_defs[i];
            let q = qualified(&d.row);
            if !seen.insert(q.clone()) {
                continue;
            }
            if new_names.contains(&q) {
                // Lines deleted inside a definition that stays.
                if let Some(n) = new_defs.iter().find(|n| qualified(&n.row) == q) {
                    changes.push(Change::of(n, &path, "modified"));
                }
                continue;
            }
            // A deleted definition whose text reappears under another name was renamed.
            let renamed = added.iter().copied().find(|&a| {
                let c = &changes[a];
                c.row.kind == d.row.kind
                    && new_defs
                        .iter()
                        .any(|n| n.row.name == c.row.name && n.row.line == c.row.line && n.body() == d.body())
            });
            if let Some(a) = renamed {
                changes[a].change = "renamed";
                changes[a].old_name = Some(q);
                // Callers of the old name remain in the index until they are changed too.
            }
            changes.push(Change::of(d, &path, "deleted"));
        }
    }
    changes.sort_by(|a, b| (&a.path, a.row.line).cmp(&(&b.path, b.row.line)));

    let mut report = Report::new(root);
    for c in &changes {
        report.add_change(graph, c, depth)?;
    }
    report.finish(graph, root, compared, files)
}

/// Whether a definition is public API: Go capitalised names, Python names
/// without a leading underscore, `pub`/`export`/`public` elsewhere.
fn is_public(row: &SymbolRow, head: &str, path: &str) -> bool {
    let lang = crate::source::lang::for_path(Path::new(path))
        .map(|l| l.name)
        .unwrap_or("");
    let words: Vec<&str> = head.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
    match lang {
        "go" => row.name.chars().next().is_some_and(char::is_uppercase),
        "python" => !row.name.starts_with('_') || (row.name.starts_with("__") && row.name.ends_with("__")),
        "rust" => head.trim_start().starts_with("pub ") || head.trim_start().starts_with("pub("),
        "javascript" | "typescript" | "tsx" => {
            words.contains(&"export") || (row.container.is_some() && !words.contains(&"private"))
        }
        "java" | "csharp" | "kotlin" | "scala" | "swift" | "php" => {
            words.contains(&"public") || (lang == "kotlin" && !words.contains(&"private"))
        }
        _ => !row.name.starts_with('_'),
    }
}

/// Whether a caller is a test: a test function (`test_*`, Go `Test*`, a
/// function of a Rust `mod tests`, a method of a Java test class) or the
/// top-level code of a JS/TS test file (its `it(...)` callbacks).
fn is_test_symbol(s: &Symbol) -> bool {
    let in_test_file = is_test_path(&s.path);
    let lang = s.language.as_str();
    if s.id == 0 {
        return in_test_file && matches!(lang, "javascript" | "typescript" | "tsx");
    }
    if !matches!(s.kind.as_str(), "function" | "method") {
        return false;
    }
    match lang {
        "python" => s.name.starts_with("test") && !s.path.ends_with("conftest.py"),
        "go" => s.path.ends_with("_test.go") && s.name.starts_with("Test"),
        "rust" => in_test_file || s.container.as_deref() == Some("tests") || s.name.starts_with("test_"),
        "java" | "kotlin" | "csharp" | "scala" => in_test_file,
        "javascript" | "typescript" | "tsx" => in_test_file,
        _ => in_test_file && s.name.to_ascii_lowercase().starts_with("test"),
    }
}

/// Accumulates callers and tests over the changed symbols.
struct Report {
    root: std::path::PathBuf,
    symbols: Vec<ChangedSymbol>,
    /// (depth, caller key) -> caller, for ordering and de-duplication.
    callers: BTreeMap<(usize, String, String), Caller>,
    /// test key -> test (the nearest reach kept).
    tests: HashMap<String, (AffectedTest, String, String)>,
    lines: HashMap<String, Vec<String>>,
    /// Test files named after a changed module (0) or its package (1).
    named: HashMap<String, usize>,
    truncated: bool,
}

impl Report {
    fn new(root: &Path) -> Report {
        Report {
            root: root.to_path_buf(),
            symbols: Vec::new(),
            callers: BTreeMap::new(),
            tests: HashMap::new(),
            lines: HashMap::new(),
            named: HashMap::new(),
            truncated: false,
        }
    }

    /// The trimmed text of `path`'s line `line` (1-based) on disk.
    fn line_text(&mut self, path: &str, line: u32) -> String {
        let root = &self.root;
        let lines = self.lines.entry(path.to_string()).or_insert_with(|| {
            std::fs::read_to_string(root.join(path))
                .map(|t| t.lines().map(str::to_string).collect())
                .unwrap_or_default()
        });
        let text = lines
            .get(line.saturating_sub(1) as usize)
            .map(|l| l.trim())
            .unwrap_or("");
        text.chars().take(160).collect()
    }

    fn add_test(&mut self, s: &Symbol, depth: usize, reaches: &str, changed: &str) {
        let test = if s.id == 0 {
            AffectedTest {
                name: s.path.clone(),
                path: s.path.clone(),
                line: 1,
                depth,
                reaches: reaches.to_string(),
            }
        } else {
            AffectedTest {
                name: s.qualified(),
                path: s.path.clone(),
                line: s.line,
                depth,
                reaches: reaches.to_string(),
            }
        };
        let key = format!("{}:{}:{}", test.path, test.name, test.line);
        let container = s.container.clone().unwrap_or_default();
        match self.tests.get(&key) {
            Some((t, _, _)) if t.depth <= depth => {}
            _ => {
                self.tests.insert(key, (test, container, changed.to_string()));
            }
        }
    }

    fn add_change(&mut self, graph: &mut Graph, c: &Change, depth: usize) -> Result<()> {
        let name = qualified(&c.row);
        let mut direct: HashSet<String> = HashSet::new();
        let mut tested = false;
        if c.change == "deleted" {
            // Gone from the new side: its callers are the references by its name that remain.
            for r in graph.refs_named(&c.row.name, crate::graph::query::MAX_REFS_PER_LEVEL)? {
                if r.kind == "import" || r.path == c.path && c.row.start_line <= r.line && r.line <= c.row.end_line {
                    continue;
                }
                let from = match r.caller {
                    Some(id) => graph.symbol(id)?,
                    None => None,
                };
                let from = from.unwrap_or_else(|| module_symbol(&r.path, &r.language));
                let key = format!("{}:{}", from.path, from.qualified());
                direct.insert(key.clone());
                if is_test_symbol(&from) {
                    tested = true;
                    self.add_test(&from, 1, &name, &name);
                }
                let text = self.line_text(&r.path, r.line);
                self.callers
                    .entry((1, key.clone(), format!("{}:{}", r.path, r.line)))
                    .or_insert(Caller {
                        symbol: key,
                        calls: name.clone(),
                        depth: 1,
                        site: format!("{}:{}", r.path, r.line),
                        text,
                    });
            }
        } else if let Some(symbol) = self.indexed(graph, c)? {
            let cg = graph.call_graph(&symbol, Direction::Callers, depth.max(TEST_DEPTH))?;
            self.truncated |= cg.truncated;
            for e in &cg.edges {
                if e.confidence == crate::graph::resolve::Confidence::Ambiguous {
                    continue;
                }
                let key = format!("{}:{}", e.from.path, e.from.qualified());
                if e.depth == 1 {
                    direct.insert(key.clone());
                }
                if is_test_symbol(&e.from) {
                    tested = true;
                    self.add_test(&e.from, e.depth, &e.to.qualified(), &name);
                }
                if e.depth <= depth {
                    let site = format!("{}:{}", e.call_site.path, e.call_site.line);
                    let text = self.line_text(&e.call_site.path, e.call_site.line);
                    self.callers
                        .entry((e.depth, key.clone(), site.clone()))
                        .or_insert(Caller {
                            symbol: key,
                            calls: e.to.qualified(),
                            depth: e.depth,
                            site,
                            text,
                        });
                }
            }
        }
        self.symbols.push(ChangedSymbol {
            name,
            kind: c.row.kind.clone(),
            path: c.path.clone(),
            line: c.row.line,
            change: c.change.to_string(),
            old_name: c.old_name.clone(),
            callers: direct.len(),
            public: c.public,
            tested,
        });
        Ok(())
    }

    /// The index's symbol for a changed definition of the new side.
    fn indexed(&mut self, graph: &mut Graph, c: &Change) -> Result<Option<Symbol>> {
        let named = graph.symbols_named(&c.row.name)?;
        Ok(named
            .iter()
            .filter(|s| s.path == c.path && s.container == c.row.container && s.kind == c.row.kind)
            .min_by_key(|s| s.line.abs_diff(c.row.line))
            .map(|s| Symbol::clone(s)))
    }

    fn finish(mut self, graph: &mut Graph, root: &Path, compared: String, files: Vec<ChangedFile>) -> Result<Impact> {
        for f in &files {
            if is_test_path(&f.path) || crate::source::lang::for_path(Path::new(&f.path)).is_none() {
                continue;
            }
            let stem = module_stem(&f.path);
            if stem.is_empty() {
                continue;
            }
            // File-level evidence: the test file imports the changed module, uses a
            // changed name a package re-exports from it, or is named after it.
            let mut found: Vec<(String, usize, String, bool)> = importers(graph, root, &f.path)?
                .into_iter()
                .map(|p| (p, 0, stem.clone(), true))
                .collect();
            for (p, name) in reexport_users(graph, root, &f.path, &self.symbols)? {
                found.push((p, 1, name, true));
            }
            // Named after the module, or (less telling) after its package: listed,
            // but a name alone does not show that a test reaches the change.
            let names = [Some(stem.clone()), package_name(&f.path)];
            for (tier, name) in names.into_iter().enumerate() {
                let Some(name) = name else { continue };
                for p in named_after_in_index(graph, &name)? {
                    let best = self.named.entry(p.clone()).or_insert(tier);
                    *best = (*best).min(tier);
                    found.push((p, 0, name.clone(), false));
                }
            }
            for (path, depth, reaches, reached) in found {
                if is_test_path(&path) && !self.tests.values().any(|(t, _, _)| t.path == path) {
                    let lang = crate::source::lang::for_path(Path::new(&path))
                        .map(|l| l.name)
                        .unwrap_or("");
                    self.add_test(&module_symbol(&path, lang), depth, &reaches, &stem);
                    if reached {
                        for s in self.symbols.iter_mut().filter(|s| s.path == f.path) {
                            s.tested = true;
                        }
                    }
                }
            }
        }
        let caller_count = self.callers.len();
        let callers: Vec<Caller> = self.callers.into_values().take(MAX_CALLERS).collect();
        let mut tests: Vec<(AffectedTest, String, String)> = self.tests.into_values().collect();
        let rank = rank_test_files(&tests, &self.named);
        tests.sort_by(|a, b| (rank[&a.0.path], a.0.depth, a.0.line).cmp(&(rank[&b.0.path], b.0.depth, b.0.line)));
        let risk = risk(&self.symbols);
        let (runner, command) = runner::runner_command(root, &tests);
        Ok(Impact {
            compared,
            files,
            symbols: self.symbols,
            callers,
            caller_count,
            tests: tests.into_iter().map(|t| t.0).collect(),
            risk,
            runner,
            command,
            truncated: self.truncated,
        })
    }
}

/// Each test file's place, best first: named after a changed module, then
/// after its package; then the closest evidence (a test calling a changed
/// symbol, importing its module, using a re-export of it, calling it through
/// more calls); then how many of its tests reach the change.
fn rank_test_files(tests: &[(AffectedTest, String, String)], named: &HashMap<String, usize>) -> HashMap<String, usize> {
    let mut files: HashMap<&str, (usize, usize)> = HashMap::new();
    for (t, _, _) in tests {
        let file_level = t.line == 1 && t.name == t.path;
        let closeness = match (file_level, t.depth) {
            (false, 1) => 0,
            (true, 0) => 1,
            (true, _) => 2,
            (false, d) => d + 1,
        };
        let e = files.entry(t.path.as_str()).or_insert((usize::MAX, 0));
        e.0 = e.0.min(closeness);
        e.1 += usize::from(!file_level);
    }
    let mut order: Vec<(&str, (usize, usize))> = files.into_iter().collect();
    order.sort_by_key(|&(path, (closeness, count))| {
        let tier = named.get(path).copied().unwrap_or(usize::MAX);
        (tier, closeness, std::cmp::Reverse(count), path)
    });
    order
        .into_iter()
        .enumerate()
        .map(|(i, (path, _))| (path.to_string(), i))
        .collect()
}

fn module_symbol(path: &str, language: &str) -> Symbol {
    Symbol {
        id: 0,
        name: "<module>".to_string(),
        kind: "module".to_string(),
        container: None,
        path: path.to_string(),
        line: 1,
        end_line: 1,
        language: language.to_string(),
        file_id: 0,
        parent: None,
    }
}

/// The name a file's module goes by: its stem, or its folder's name for a
/// package's `__init__.py` / `mod.rs` / `index.js`.
fn module_stem(path: &str) -> String {
    let p = Path::new(path);
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    if matches!(stem.as_str(), "__init__" | "mod" | "index") {
        if let Some(dir) = p.parent().and_then(|d| d.file_name()) {
            return dir.to_string_lossy().to_string();
        }
    }
    stem
}

/// The folder name of the package holding the module at `path`.
fn package_name(path: &str) -> Option<String> {
    let mut dirs: Vec<&str> = path.split('/').collect();
    let file = dirs.pop()?;
    if matches!(file.split('.').next(), Some("__init__" | "mod" | "index")) {
        dirs.pop();
    }
    dirs.last().map(|d| d.to_string())
}

/// Files of the branch that import the module at `path` (by its last part,
/// and for Python by its dotted path; `from pkg import module` too).
fn importers(graph: &Graph, root: &Path, path: &str) -> Result<Vec<String>> {
    let stem = module_stem(path);
    let python = crate::source::lang::for_path(Path::new(path)).is_some_and(|l| l.name == "python");
    let (store, branch) = graph.store();
    let rows = store.imports_mentioning(branch, &stem)?;
    let mut out: Vec<String> = rows
        .into_iter()
        .filter(|(_, m, name)| {
            let Some(m) = m.as_deref() else { return false };
            let m = m.trim_matches(|c| c == '"' || c == '\'');
            if python {
                // `from a import b` may import the module a.b.
                let from_import = format!("{m}.{name}");
                return python_import_names(root, path, m) || python_import_names(root, path, &from_import);
            }
            let last = crate::source::extract::last_component(m);
            let last = last.rsplit('/').next().unwrap_or(last);
            last.split('.').next() == Some(stem.as_str()) || last == stem
        })
        .map(|(p, _, _)| p)
        .collect();
    out.dedup();
    Ok(out)
}

/// Whether the Python import of `module` (dotted, maybe relative) names the
/// module at `path`: its last parts, where an absolute import starts at a
/// package root (a folder without `__init__.py`), so the standard library's
/// `import unittest` is not `src/_pytest/unittest.py`.
fn python_import_names(root: &Path, path: &str, module: &str) -> bool {
    let relative = module.starts_with('.');
    let wanted: Vec<&str> = module.split('.').filter(|c| !c.is_empty()).collect();
    let mut parts: Vec<&str> = path
        .trim_end_matches(".pyi")
        .trim_end_matches(".py")
        .split('/')
        .collect();
    if parts.last() == Some(&"__init__") {
        parts.pop();
    }
    if wanted.is_empty() || !parts.ends_with(&wanted) {
        return false;
    }
    let top = parts[..parts.len() - wanted.len()].join("/");
    relative || !root.join(top).join("__init__.py").exists()
}

/// Test files using a changed name (a changed definition or its class) that a
/// package's `__init__.py` re-exports from the module at `path`, as
/// (test file, name): `flask.Blueprint` reaches `flask/blueprints.py`.
fn reexport_users(graph: &Graph, root: &Path, path: &str, symbols: &[ChangedSymbol]) -> Result<Vec<(String, String)>> {
    if crate::source::lang::for_path(Path::new(path)).is_none_or(|l| l.name != "python") {
        return Ok(Vec::new());
    }
    let names: BTreeSet<&str> = symbols
        .iter()
        .filter(|s| s.path == path && s.public)
        .filter_map(|s| s.name.split('.').next())
        .collect();
    let mut out = Vec::new();
    for name in names {
        let refs = graph.refs_named(name, crate::graph::query::MAX_REFS_PER_LEVEL)?;
        let reexported = refs.iter().any(|r| {
            r.kind == "import"
                && r.path.ends_with("__init__.py")
                && r.module.as_deref().is_some_and(|m| python_import_names(root, path, m))
        });
        if reexported {
            out.extend(
                refs.iter()
                    .filter(|r| is_test_path(&r.path))
                    .map(|r| (r.path.clone(), name.to_string())),
            );
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Test files of the branch named after a module `stem` by a test naming
/// convention (`test_x.py`, `x_test.go`, `XTest.java`, `x.test.ts`, ...).
fn named_after_in_index(graph: &Graph, stem: &str) -> Result<Vec<String>> {
    let (store, branch) = graph.store();
    let paths = store.branch_paths_containing(branch, stem)?;
    Ok(paths
        .into_iter()
        .filter(|p| is_test_path(p) && super::test_named_after(p, stem))
        .collect())
}

/// Risk from fan-in, public API and tests.
fn risk(symbols: &[ChangedSymbol]) -> Risk {
    let mut reasons = Vec::new();
    let mut score = 0;
    let fan_in: usize = symbols.iter().map(|s| s.callers).max().unwrap_or(0);
    if let Some(s) = symbols.iter().max_by_key(|s| s.callers).filter(|s| s.callers > 0) {
        reasons.push(format!("fan-in: {} has {} direct caller(s)", s.name, s.callers));
        score += if fan_in >= 10 { 2 } else { usize::from(fan_in >= 3) };
    }
    let public: Vec<&str> = symbols
        .iter()
        .filter(|s| s.public && s.change != "added")
        .map(|s| s.name.as_str())
        .collect();
    if !public.is_empty() {
        reasons.push(format!("public API changed: {}", list(&public)));
        score += 1;
    }
    let untested: Vec<&str> = symbols
        .iter()
        .filter(|s| !s.tested && !is_test_path(&s.path))
        .map(|s| s.name.as_str())
        .collect();
    if !untested.is_empty() {
        reasons.push(format!("no test reaches {}", list(&untested)));
        score += 1;
    }
    let deleted: Vec<&str> = symbols
        .iter()
        .filter(|s| s.change == "deleted" && s.callers > 0)
        .map(|s| s.name.as_str())
        .collect();
    if !deleted.is_empty() {
        reasons.push(format!("deleted but still called: {}", list(&deleted)));
        score += 2;
    }
    let level = match score {
        0 => "low",
        1 | 2 => "medium",
        _ => "high",
    };
    Risk {
        level: level.to_string(),
        reasons,
    }
}

fn list(names: &[&str]) -> String {
    let mut v: Vec<&str> = names.to_vec();
    v.dedup();
    if v.len() > 5 {
        format!("{} and {} more", v[..5].join(", "), v.len() - 5)
    } else {
        v.join(", ")
    }
}
