//! Context for an edit (`symbol_context`, `ken context --symbol NAME`): one
//! symbol with its body, signature and doc, its callers' call sites (same
//! folder first, tests last), its callees' signatures, the tests that call
//! it and the last commits that changed its lines, packed into a budget
//! that covers the whole answer as serialized. `locations_only` is the cheap
//! mode: where the name is defined, nothing else.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{bail, Result};
use serde::Serialize;

use super::pack::{self, Candidate, Pack};
use crate::graph::query::{Direction, Edge, Graph, Symbol};
use crate::graph::resolve::Confidence;
use crate::store::Store;

/// The symbol asked about.
#[derive(Debug, Clone, Serialize)]
pub struct SymbolInfo {
    pub id: i64,
    /// `Container.name`, or the name.
    pub name: String,
    pub kind: String,
    pub path: String,
    /// `start-end`, 1-based, inclusive.
    pub lines: String,
    pub signature: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
}

/// A commit that changed the symbol's lines.
#[derive(Debug, Clone, Serialize)]
pub struct Commit {
    /// Short commit id.
    pub id: String,
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    pub author: String,
    pub summary: String,
}

/// What an edit of one symbol needs, within a token budget.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SymbolContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol: Option<SymbolInfo>,
    /// Call sites outside tests, same folder first: `path:line caller`
    /// (with the edge kind when not a call, `ambiguous` when the name may mean another definition).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<String>,
    /// Tests that call it: `path:line test`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<String>,
    /// Body (first; a long one cut to its head), call sites with a few lines
    /// around, callees' signatures, tests; what did not fit is named in `left_out`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack: Option<Pack>,
    /// The last commits that changed its lines, newest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<Commit>,
    /// Locations only: every definition of the name, `path:line kind name`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<String>,
    /// Why something is missing or partial (no git history, a long caller list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Callers or tests listed by name at most (the pack holds their code).
const MAX_LISTED: usize = 25;
/// Call sites offered to the pack at most.
const MAX_SITES: usize = 120;
/// Lines shown on each side of a call site.
const SITE_CONTEXT: usize = 2;
/// Commits listed at most.
const MAX_COMMITS: usize = 3;
/// Share of the pack the head of the body may take before the others are offered.
const BODY_HEAD_SHARE: f64 = 0.55;

/// The context of `spec` in the index of `root`, in `budget` tokens (the
/// compact JSON of the answer never exceeds it).
pub fn symbol_context(root: &Path, index_dir: &Path, spec: &str, budget: Option<usize>) -> Result<SymbolContext> {
    let budget = pack::checked_budget(budget)?;
    let store = Store::open_for_read(index_dir)?;
    let mut graph = Graph::open(&store, root)?;
    let symbol = match graph.lookup_one(spec) {
        Ok(s) => s,
        Err(e) if e.downcast_ref::<crate::graph::query::Ambiguous>().is_some() => return Err(e),
        Err(_) => bail!("{}", unknown(&store, &graph, spec)?),
    };
    let mut files = Files::new(root, &store);
    let info = symbol_info(&symbol, &mut files)?;
    let callers = graph.call_graph(&symbol, Direction::Callers, 1)?;
    let callees = graph.call_graph(&symbol, Direction::Callees, 1)?;
    let callers_edges: Vec<&Edge> = callers.edges.iter().filter(|e| e.kind != "import").collect();
    let (tests, others): (Vec<&Edge>, Vec<&Edge>) = callers_edges.into_iter().partition(|e| is_test_caller(e));
    let others = ranked_callers(others, &symbol.path);
    let mut tests = ranked_callers(tests, &symbol.path);
    // Unit tests of the symbol first (stable: nearest first among equals).
    tests.sort_by_key(|e| super::test_affinity(&e.call_site.path, &e.from.name, &symbol.path, &symbol.name));
    // A test once, at its first call site: the others say nothing more.
    let mut seen_tests = HashSet::new();
    tests.retain(|e| seen_tests.insert((e.from.id, e.from.path.clone())));
    let (commits, mut note) = match last_commits(root, &symbol, &mut files) {
        Ok(c) => c,
        Err(e) => (Vec::new(), Some(format!("no commits: {e:#}"))),
    };
    if callers.truncated {
        note = join_notes(note, callers.note.clone());
    }

    let mut candidates = Vec::new();
    candidates.extend(body_candidate(&symbol, &info, &mut files)?);
    for (rank, e) in others.iter().take(MAX_SITES).enumerate() {
        candidates.extend(site_candidate(e, "caller", 60.0 - rank as f64 * 0.1, &mut files)?);
    }
    let mut seen_callees = HashSet::new();
    for (rank, e) in callees.edges.iter().filter(|e| e.kind != "import").enumerate() {
        if e.to.id != symbol.id && seen_callees.insert(e.to.id) {
            candidates.extend(signature_candidate(&e.to, 35.0 - rank as f64 * 0.1, &mut files)?);
        }
    }
    for (rank, e) in tests.iter().take(MAX_SITES).enumerate() {
        candidates.extend(site_candidate(e, "test", 25.0 - rank as f64 * 0.1, &mut files)?);
    }

    let mut out = SymbolContext {
        symbol: Some(info),
        callers: listed(&others),
        tests: listed(&tests),
        pack: None,
        commits,
        note,
        ..SymbolContext::default()
    };
    fit(&mut out, candidates, budget);
    Ok(out)
}

/// Fills `out.pack` so that the compact JSON of `out` fits `budget`: the
/// pack gets what the other fields leave, less a margin, and is packed again
/// smaller while the whole is over (token counts of parts do not add up exactly).
fn fit(out: &mut SymbolContext, candidates: Vec<Candidate>, budget: usize) {
    // The packer's `left_out` line is reserved here; the margin covers
    // tokens that merge where the parts meet.
    const LEFT_OUT_RESERVE: usize = 120;
    const MARGIN: usize = 8;
    /// Share of the budget the fields besides the pack may take before the lists are shortened.
    const FIXED_SHARE: f64 = 0.4;
    out.pack = Some(Pack {
        pieces: Vec::new(),
        tokens: 0,
        left_out: None,
    });
    while tokens_of(out) as f64 > budget as f64 * FIXED_SHARE && (out.callers.len() > 1 || out.tests.len() > 1) {
        // Long caller lists give way to code: halve the longer one.
        if out.callers.len() >= out.tests.len() {
            shorten(&mut out.callers);
        } else {
            shorten(&mut out.tests);
        }
    }
    let fixed = tokens_of(out);
    let mut room = budget.saturating_sub(fixed + LEFT_OUT_RESERVE + MARGIN);
    let mut best: Option<Pack> = None;
    let head_tokens = (room as f64 * BODY_HEAD_SHARE) as usize;
    // Shrink the room while the whole is over; grow it by what the reserve
    // left unused; keep the last pack that fit.
    let (mut fits_at, mut over_at) = (0, usize::MAX);
    for _ in 0..12 {
        let offered = split_body(candidates.clone(), head_tokens.min(room));
        let mut packed = pack::pack(offered, room.max(2));
        say_body_cut(&mut packed, &candidates);
        let used = packed.tokens;
        out.pack = Some(packed);
        let total = tokens_of(out);
        let next = if total <= budget {
            fits_at = room;
            best = out.pack.take();
            // More of the pack can cost at most what is left.
            used + (budget - total).saturating_sub(MARGIN)
        } else {
            over_at = room;
            room.saturating_sub(total - budget + MARGIN)
        };
        if next <= fits_at || next >= over_at || next < 2 {
            break;
        }
        room = next;
    }
    out.pack = Some(best.unwrap_or_else(|| Pack {
        pieces: Vec::new(),
        tokens: 0,
        left_out: Some("left out: everything; ask with a larger budget".to_string()),
    }));
}

/// Names the body's lines that did not fit first in the `left_out` line
/// (the packer names the first few it left out, and the body's rest is offered last).
fn say_body_cut(packed: &mut Pack, candidates: &[Candidate]) {
    let Some(body) = candidates.iter().find(|c| c.role == "body") else {
        return;
    };
    let shown = packed
        .pieces
        .iter()
        .filter(|p| p.role == "body" && p.path == body.path)
        .filter_map(|p| p.lines.split_once('-').and_then(|(_, end)| end.parse::<usize>().ok()))
        .max();
    match (shown, &packed.left_out) {
        (Some(end), Some(left)) if end < body.end_line => {
            let rest = left.strip_prefix("left out: ").unwrap_or(left);
            packed.left_out = Some(format!(
                "left out: the body's lines {}-{} ({}); {rest}",
                end + 1,
                body.end_line,
                body.path
            ));
        }
        _ => {}
    }
}

/// Halves a list of callers, counting what it leaves out in its last entry.
fn shorten(list: &mut Vec<String>) {
    let mut more: usize = match list.last().and_then(|l| l.strip_prefix("… ")) {
        Some(rest) => {
            let n = rest.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0);
            list.pop();
            n
        }
        None => 0,
    };
    let keep = list.len() / 2;
    more += list.len() - keep;
    list.truncate(keep);
    list.push(format!("… {more} more"));
}

/// The body as two touching pieces when it is long: its head (about
/// `head_tokens`), which comes first, and the rest, offered last; they merge into
/// one piece when both fit.
fn split_body(mut candidates: Vec<Candidate>, head_tokens: usize) -> Vec<Candidate> {
    let Some(at) = candidates.iter().position(|c| c.role == "body") else {
        return candidates;
    };
    let body = candidates.remove(at);
    let lines: Vec<&str> = body.text.split('\n').collect();
    let mut used = 0;
    let mut head = lines.len();
    for (i, l) in lines.iter().enumerate() {
        used += pack::count_tokens(l) + 1;
        if used > head_tokens {
            head = i.max(1);
            break;
        }
    }
    let piece = |from: usize, to: usize, priority: f64| Candidate {
        start_line: body.start_line + from,
        end_line: body.start_line + to - 1,
        text: lines[from..to].join("\n"),
        priority,
        ..body.clone()
    };
    candidates.push(piece(0, head, body.priority));
    if head < lines.len() {
        candidates.push(piece(head, lines.len(), 10.0));
    }
    candidates
}

/// The tokens of the answer as serialized (what its budget covers).
pub fn tokens_of(out: &SymbolContext) -> usize {
    pack::count_tokens(&serde_json::to_string(out).unwrap_or_default())
}

fn join_notes(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// Only where `spec` is defined: every definition it names, as `path:line kind name`.
pub fn locations(root: &Path, index_dir: &Path, spec: &str) -> Result<SymbolContext> {
    let store = Store::open_for_read(index_dir)?;
    let mut graph = Graph::open(&store, root)?;
    let found = graph.lookup(spec)?;
    if found.is_empty() {
        bail!("{}", unknown(&store, &graph, spec)?);
    }
    Ok(SymbolContext {
        locations: found
            .iter()
            .map(|s| format!("{}:{} {} {}", s.path, s.line, s.kind, s.qualified()))
            .collect(),
        ..SymbolContext::default()
    })
}

/// "no definition `X`" with the close names the branch has (same name in
/// another case, or names containing it).
fn unknown(store: &Store, graph: &Graph, spec: &str) -> Result<String> {
    let spec = spec.trim();
    let name = spec
        .rsplit(['.', ':', '#'])
        .next()
        .filter(|n| !n.is_empty() && !n.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or(spec);
    let mut message = format!("no definition `{spec}` on this branch");
    if name.is_empty() || name.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(message);
    }
    let escape = |s: &str| s.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    // Names containing it (any case), else names of its first two letters
    // within a few edits of it (a typo).
    let first_two: String = name.chars().take(2).collect();
    let mut close: Vec<(String, String, u32)> = Vec::new();
    for (pattern, limit) in [
        (format!("%{}%", escape(name)), 8),
        (format!("{}%", escape(&first_two)), 2000),
    ] {
        close = store.symbol_names_like(graph.branch(), &pattern, limit)?;
        if limit > 8 {
            let wanted = name.to_lowercase();
            let most = (wanted.chars().count() / 3).max(1);
            let mut typos: Vec<(usize, (String, String, u32))> = close
                .into_iter()
                .map(|c| (edit_distance(&c.0.to_lowercase(), &wanted), c))
                .filter(|(d, _)| *d <= most)
                .collect();
            typos.sort_by_key(|(d, _)| *d);
            close = typos.into_iter().take(8).map(|(_, c)| c).collect();
        }
        if !close.is_empty() {
            break;
        }
    }
    if close.is_empty() {
        message.push_str("; no close name either: find it with codebase_search (`ken search`)");
    } else {
        let names: Vec<String> = close.iter().map(|(n, p, l)| format!("{n} ({p}:{l})")).collect();
        message.push_str(&format!("; close names: {}", names.join(", ")));
    }
    Ok(message)
}

/// Levenshtein distance of two words (by characters).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Callers in the symbol's file first, then its folder, then the others,
/// each by path and line.
fn ranked_callers<'e>(mut edges: Vec<&'e Edge>, symbol_path: &str) -> Vec<&'e Edge> {
    let folder = parent_dir(symbol_path);
    let distance = |e: &Edge| {
        if e.call_site.path == symbol_path {
            0
        } else if parent_dir(&e.call_site.path) == folder {
            1
        } else {
            2
        }
    };
    edges.sort_by(|a, b| {
        distance(a)
            .cmp(&distance(b))
            .then_with(|| a.call_site.path.cmp(&b.call_site.path))
            .then(a.call_site.line.cmp(&b.call_site.line))
    });
    edges.dedup_by(|a, b| a.call_site == b.call_site && a.from.id == b.from.id);
    edges
}

fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// Test code: a test file, a test module, or a function named as a test.
fn is_test_caller(e: &Edge) -> bool {
    let from = &e.from;
    crate::source::paths::is_test_path(&e.call_site.path)
        || from.container.as_deref().is_some_and(|c| {
            let c = c.to_ascii_lowercase();
            c == "tests" || c == "test" || c.ends_with("_tests") || c.starts_with("test_")
        })
        || from.name.starts_with("test_")
        || (from.name.starts_with("test") && from.name[4..].starts_with(|c: char| c.is_ascii_uppercase()))
}

fn describe_caller(e: &Edge) -> String {
    let mut s = format!("{}:{} {}", e.call_site.path, e.call_site.line, e.from.qualified());
    if !matches!(e.kind.as_str(), "call" | "method_call") {
        s.push_str(&format!(" ({})", e.kind));
    }
    if e.confidence == Confidence::Ambiguous {
        s.push_str(" (ambiguous)");
    }
    s
}

fn listed(edges: &[&Edge]) -> Vec<String> {
    let mut out: Vec<String> = edges.iter().take(MAX_LISTED).map(|e| describe_caller(e)).collect();
    if edges.len() > MAX_LISTED {
        out.push(format!("… {} more", edges.len() - MAX_LISTED));
    }
    out
}

/// The lines of the branch's files: from disk when the file is the indexed
/// version, else rebuilt from the indexed chunks (so line numbers agree with the index).
struct Files<'s> {
    root: &'s Path,
    store: &'s Store,
    cache: HashMap<i64, Option<Vec<String>>>,
}

impl<'s> Files<'s> {
    fn new(root: &'s Path, store: &'s Store) -> Self {
        Files {
            root,
            store,
            cache: HashMap::new(),
        }
    }

    fn lines(&mut self, file_id: i64, path: &str) -> Result<Option<&Vec<String>>> {
        if !self.cache.contains_key(&file_id) {
            let lines = self.read(file_id, path)?;
            self.cache.insert(file_id, lines);
        }
        Ok(self.cache[&file_id].as_ref())
    }

    fn read(&self, file_id: i64, path: &str) -> Result<Option<Vec<String>>> {
        let hash: Option<i64> = self.store.file_content_hash(file_id)?;
        if let Ok(bytes) = std::fs::read(self.root.join(path)) {
            if Some(crate::store::content_hash(&bytes)) == hash {
                let text = String::from_utf8_lossy(&bytes);
                return Ok(Some(text.lines().map(str::to_string).collect()));
            }
        }
        // The file changed since it was indexed: the indexed text, per line
        // the longest a chunk has (a chunk may start inside its first line).
        let mut by_line: Vec<String> = Vec::new();
        for (start, text) in self.store.chunk_texts_of_file(file_id)? {
            for (i, line) in text.lines().enumerate() {
                let at = start + i - 1;
                if by_line.len() <= at {
                    by_line.resize(at + 1, String::new());
                }
                if line.len() > by_line[at].len() {
                    by_line[at] = line.to_string();
                }
            }
        }
        Ok((!by_line.is_empty()).then_some(by_line))
    }

    /// Lines `start..=end` (1-based), clamped to the file.
    fn span(&mut self, file_id: i64, path: &str, start: usize, end: usize) -> Result<Option<(usize, usize, String)>> {
        let Some(lines) = self.lines(file_id, path)? else {
            return Ok(None);
        };
        let end = end.min(lines.len());
        let start = start.max(1);
        if start > end {
            return Ok(None);
        }
        Ok(Some((start, end, lines[start - 1..end].join("\n"))))
    }
}

/// The definition's start line as stored (decorators and attributes included).
fn start_line(store: &Store, symbol: &Symbol) -> Result<u32> {
    Ok(store.symbol_start_line(symbol.id)?.unwrap_or(symbol.line))
}

fn symbol_info(symbol: &Symbol, files: &mut Files) -> Result<SymbolInfo> {
    let start = start_line(files.store, symbol)?;
    let doc_lines = files
        .store
        .definition_doc_lines(symbol.file_id, &symbol.name, symbol.line)?;
    let (signature, doc) = match files.lines(symbol.file_id, &symbol.path)? {
        Some(lines) => (
            signature(lines, symbol.line as usize, symbol.end_line as usize),
            doc_lines.and_then(|range| doc(lines, range)),
        ),
        None => (String::new(), None),
    };
    Ok(SymbolInfo {
        id: symbol.id,
        name: symbol.qualified(),
        kind: symbol.kind.clone(),
        path: symbol.path.clone(),
        lines: format!("{}-{}", start.min(symbol.line), symbol.end_line),
        signature,
        doc,
    })
}

/// The declaration: from the name's line to the line that opens the body
/// (`{`, a trailing `:`, `=>`, `=` or `;`), five lines at most, dedented.
fn signature(lines: &[String], line: usize, end: usize) -> String {
    let first = line.saturating_sub(1);
    let last = end.min(lines.len()).min(first + 5);
    let mut out: Vec<&str> = Vec::new();
    for l in lines.get(first..last).unwrap_or_default() {
        out.push(l.trim_end());
        let t = l.trim_end();
        if t.contains('{') || t.ends_with(':') || t.ends_with("=>") || t.ends_with('=') || t.ends_with(';') {
            break;
        }
    }
    let indent = out.first().map_or(0, |l| l.len() - l.trim_start().len());
    out.iter()
        .map(|l| {
            if l.len() >= indent && l[..indent].trim().is_empty() {
                &l[indent..]
            } else {
                l.trim_start()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Its doc, as the chunker found it (`@doc` captures): the comment lines
/// right above it or its docstring, trimmed; [`MAX_DOC_LINES`] at most.
fn doc(lines: &[String], (first, last): (u32, u32)) -> Option<String> {
    let first = (first as usize).max(1);
    let last = (last as usize).min(lines.len()).min(first + MAX_DOC_LINES - 1);
    let doc: Vec<&str> = lines.get(first - 1..last)?.iter().map(|l| l.trim()).collect();
    (!doc.is_empty()).then(|| doc.join("\n"))
}

/// Doc lines kept at most.
const MAX_DOC_LINES: usize = 12;

/// The whole body (decorators and attributes included), which comes first.
fn body_candidate(symbol: &Symbol, info: &SymbolInfo, files: &mut Files) -> Result<Option<Candidate>> {
    let start: usize = info.lines.split('-').next().and_then(|s| s.parse().ok()).unwrap_or(1);
    Ok(files
        .span(symbol.file_id, &symbol.path, start, symbol.end_line as usize)?
        .map(|(start_line, end_line, text)| Candidate {
            path: symbol.path.clone(),
            start_line,
            end_line,
            text,
            role: "body",
            label: format!("{} {}", symbol.kind, symbol.qualified()),
            priority: 100.0,
            cuttable: true,
        }))
}

/// A call site with a few lines around it, within the caller's definition.
fn site_candidate(e: &Edge, role: &'static str, priority: f64, files: &mut Files) -> Result<Option<Candidate>> {
    let line = e.call_site.line as usize;
    let (mut lo, mut hi) = (line.saturating_sub(SITE_CONTEXT), line + SITE_CONTEXT);
    if e.from.id != 0 {
        lo = lo.max(e.from.line as usize);
        hi = hi.min(e.from.end_line as usize);
    }
    Ok(files
        .span(e.from.file_id, &e.call_site.path, lo, hi.max(line))?
        .map(|(start_line, end_line, text)| Candidate {
            path: e.call_site.path.clone(),
            start_line,
            end_line,
            text,
            role,
            label: e.from.qualified(),
            priority,
            cuttable: false,
        }))
}

/// A callee's declaration lines.
fn signature_candidate(to: &Symbol, priority: f64, files: &mut Files) -> Result<Option<Candidate>> {
    let Some(lines) = files.lines(to.file_id, &to.path)? else {
        return Ok(None);
    };
    let sig = signature(lines, to.line as usize, to.end_line as usize);
    let n = sig.split('\n').count();
    let start = to.line as usize;
    Ok(files
        .span(to.file_id, &to.path, start, start + n - 1)?
        .map(|(start_line, end_line, text)| Candidate {
            path: to.path.clone(),
            start_line,
            end_line,
            text,
            role: "callee",
            label: format!("{} {}", to.kind, to.qualified()),
            priority,
            cuttable: false,
        }))
}

/// The last commits that changed the symbol's lines (blame of its span in
/// the working file), newest first; a note when there is no history.
fn last_commits(root: &Path, symbol: &Symbol, files: &mut Files) -> Result<(Vec<Commit>, Option<String>)> {
    let repo = match git2::Repository::discover(root) {
        Ok(r) => r,
        Err(_) => return Ok((Vec::new(), Some("not a git repository: no commits".to_string()))),
    };
    let Some(workdir) = repo.workdir() else {
        return Ok((Vec::new(), Some("a bare repository: no commits".to_string())));
    };
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let workdir = workdir.canonicalize().unwrap_or_else(|_| workdir.to_path_buf());
    let full = root.join(&symbol.path);
    let Ok(rel) = full.strip_prefix(&workdir) else {
        return Ok((Vec::new(), None));
    };
    let start = start_line(files.store, symbol)?.min(symbol.line) as usize;
    let end = symbol.end_line as usize;
    let mut opts = git2::BlameOptions::new();
    opts.min_line(start).max_line(end);
    let blame = match repo.blame_file(rel, Some(&mut opts)) {
        Ok(b) => b,
        Err(e) if e.code() == git2::ErrorCode::NotFound => {
            return Ok((
                Vec::new(),
                Some("the file is not committed yet: no commits".to_string()),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    // The working file may differ from HEAD: blame its text, whose line numbers are the index's.
    let working = files
        .lines(symbol.file_id, &symbol.path)?
        .map(|l| l.join("\n") + "\n")
        .and_then(|text| blame.blame_buffer(text.as_bytes()).ok());
    let blame = working.as_ref().unwrap_or(&blame);
    let mut seen = HashSet::new();
    let mut commits = Vec::new();
    for hunk in blame.iter() {
        let (from, n) = (hunk.final_start_line(), hunk.lines_in_hunk());
        if from + n <= start || from > end {
            continue;
        }
        let id = hunk.final_commit_id();
        if id.is_zero() || !seen.insert(id) {
            continue;
        }
        if let Ok(c) = repo.find_commit(id) {
            commits.push((c.time().seconds(), c));
        }
    }
    // Newest first; commits of the same second in history order.
    commits.sort_by(|(ta, a), (tb, b)| {
        tb.cmp(ta).then_with(|| {
            if repo.graph_descendant_of(a.id(), b.id()).unwrap_or(false) {
                std::cmp::Ordering::Less
            } else if repo.graph_descendant_of(b.id(), a.id()).unwrap_or(false) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
    });
    let uncommitted = blame.iter().any(|h| {
        let (from, n) = (h.final_start_line(), h.lines_in_hunk());
        h.final_commit_id().is_zero() && from + n > start && from <= end
    });
    let list = commits
        .into_iter()
        .take(MAX_COMMITS)
        .map(|(secs, c)| Commit {
            id: c.id().to_string()[..10].to_string(),
            date: crate::store::format_rfc3339(secs)[..10].to_string(),
            author: String::from_utf8_lossy(c.author().name_bytes()).to_string(),
            summary: String::from_utf8_lossy(c.summary_bytes().unwrap_or_default()).to_string(),
        })
        .collect();
    Ok((
        list,
        uncommitted.then(|| "some of its lines are not committed yet".to_string()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_doc_is_its_lines_trimmed_and_a_signature_runs_to_the_body() {
        let py =
            lines("# a comment\n@decorator\ndef f(a,\n      b):\n    \"\"\"Does f.\n\n    More.\"\"\"\n    return a\n");
        assert_eq!(doc(&py, (5, 7)).unwrap(), "\"\"\"Does f.\n\nMore.\"\"\"");
        assert_eq!(signature(&py, 3, 8), "def f(a,\n      b):");
        let rs = lines("/// Parses.\n/// Twice.\n#[inline]\npub fn parse(\n    x: u8,\n) -> u8 {\n    x\n}\n");
        assert_eq!(doc(&rs, (1, 2)).unwrap(), "/// Parses.\n/// Twice.");
        assert_eq!(signature(&rs, 4, 8), "pub fn parse(\n    x: u8,\n) -> u8 {");
        let long = lines(&"// x\n".repeat(20));
        assert_eq!(doc(&long, (1, 20)).unwrap().lines().count(), MAX_DOC_LINES);
    }

    #[test]
    fn shortened_lists_count_what_they_leave_out() {
        let mut list: Vec<String> = (0..10).map(|i| format!("a.py:{i} f")).collect();
        list.push("… 15 more".to_string());
        shorten(&mut list);
        assert_eq!(list.len(), 6);
        assert_eq!(list.last().unwrap(), "… 20 more");
    }

    #[test]
    fn typos_are_a_few_edits_away() {
        assert_eq!(edit_distance("memroy", "memory"), 2);
        assert_eq!(edit_distance("appconfg", "appconfig"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
