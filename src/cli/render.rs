//! Text for people: ANSI styling and how each command's answer reads in a
//! terminal (JSON output is the answers' own serialization).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};

use crate::bench::QueryBench;
use crate::context::impact::Impact;
use crate::context::pack::Pack;
use crate::context::question::QuestionContext;
use crate::context::symbol::SymbolContext;
use crate::graph::query::{CallGraph, CallPath, Direction, Edge, Symbol};
use crate::index::status::Status;
use crate::index::IndexReport;
use crate::search::kb::{self, BaseHit};

/// ANSI styling, only when writing to a terminal and NO_COLOR is unset.
#[derive(Clone, Copy)]
pub(super) struct Style {
    enabled: bool,
}

impl Style {
    pub(super) fn stdout() -> Style {
        Style {
            enabled: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub(super) fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub(super) fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub(super) fn path(self, text: &str) -> String {
        self.paint("35", text)
    }

    pub(super) fn accent(self, text: &str) -> String {
        self.paint("32", text)
    }
}

pub(super) fn print_index_report(r: &IndexReport) {
    let s = Style::stdout();
    let mut out = std::io::stdout().lock();
    let branch = if r.branch.is_empty() {
        "no git branch"
    } else {
        &r.branch
    };
    let _ = writeln!(out, "{} {} ({branch}) in {:.2} s", s.bold("Indexed"), r.root, r.seconds);
    let _ = writeln!(
        out,
        "  files:     {} ({} parsed, {} re-used, {} unchanged, {} removed)",
        r.files, r.parsed, r.reused, r.unchanged, r.removed
    );
    let _ = writeln!(out, "  chunks:    {}", r.chunks);
    let _ = writeln!(
        out,
        "  parsed:    {} lines, {:.1} MB",
        r.parsed_lines,
        r.parsed_bytes as f64 / 1e6
    );
    let mut langs: Vec<(&String, &u64)> = r.languages.iter().collect();
    langs.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let langs: Vec<String> = langs.iter().map(|(l, n)| format!("{l} {n}")).collect();
    let _ = writeln!(
        out,
        "  languages: {}",
        if langs.is_empty() {
            "-".to_string()
        } else {
            langs.join(", ")
        }
    );
    if !r.skipped.is_empty() {
        let skipped: Vec<String> = r.skipped.iter().map(|(k, n)| format!("{n} {}", k.label())).collect();
        let _ = writeln!(out, "  skipped:   {}", skipped.join(", "));
    }
    for w in r.warnings.iter().take(5) {
        let _ = writeln!(out, "  {} {w}", s.dim("warning:"));
    }
}

pub(super) fn print_hits(hits: &[BaseHit], query: &str) {
    let s = Style::stdout();
    let mut out = std::io::stdout().lock();
    if hits.is_empty() {
        let _ = writeln!(out, "no results for {query:?}");
        return;
    }
    for (base, hit) in hits {
        let symbol = hit.symbol.as_deref().unwrap_or("");
        let base = if base == kb::PROJECT {
            String::new()
        } else {
            format!("[{base}] ")
        };
        let _ = writeln!(
            out,
            "{base}{}:{}-{}  {} {}  {}",
            s.path(&hit.path),
            hit.start_line,
            hit.end_line,
            s.dim(&hit.kind),
            s.bold(symbol),
            s.dim(&format!("[{}] {:.3}", hit.language, hit.score)),
        );
        if !hit.copies.is_empty() {
            let places: Vec<String> = hit
                .copies
                .iter()
                .map(|c| format!("{}:{}-{}", c.path, c.start_line, c.end_line))
                .collect();
            let _ = writeln!(out, "    {}", s.dim(&format!("the same code at {}", places.join(", "))));
        }
        if let Some(explain) = &hit.explain {
            let _ = writeln!(out, "    {}", s.dim(&describe_explain(explain)));
        }
        for line in hit.snippet.lines() {
            let _ = writeln!(out, "    {} {}", s.accent("│"), line.trim_end());
        }
        let _ = writeln!(out);
    }
}

/// One line: `bm25 12.41 (lexical 0.87) · chunk 0.71 (0.80) · signature 0.64 (0.55) → 0.741 × 1.1 the question says its name`.
fn describe_explain(e: &crate::search::Explain) -> String {
    let mut parts = vec![format!("bm25 {:.2} (lexical {:.2})", e.bm25, e.lexical)];
    let side = |name: &str, cosine: Option<f32>, scaled: Option<f64>| {
        scaled.map(|scaled| match cosine {
            Some(c) => format!("{name} {c:.2} ({scaled:.2})"),
            None => format!("{name} none ({scaled:.2})"),
        })
    };
    parts.extend(side("chunk", e.cosine, e.semantic));
    parts.extend(side("signature", e.signature_cosine, e.signature));
    let mut line = format!("{} → {:.3}", parts.join(" · "), e.fused);
    for f in &e.factors {
        line.push_str(&format!(" × {} {}", f.factor, f.reason));
    }
    line
}

/// A pack for people: each piece under its `path:lines`, then what was left out.
pub(super) fn print_pack(pack: &Pack) {
    let s = Style::stdout();
    for piece in &pack.pieces {
        let label = if piece.label.is_empty() {
            String::new()
        } else {
            format!("  {}", s.dim(&piece.label))
        };
        println!("{}{label}", s.path(&format!("{}:{}", piece.path, piece.lines)));
        for line in piece.text.lines() {
            println!("  {line}");
        }
    }
    if let Some(left_out) = &pack.left_out {
        println!("{}", s.dim(left_out));
    }
}

/// `ken def` for people: one definition a line, with its id.
pub(super) fn print_definitions(found: &[Symbol], name: &str) {
    let s = Style::stdout();
    let mut out = std::io::stdout().lock();
    if found.is_empty() {
        let _ = writeln!(out, "no definition of {name:?}");
    }
    for d in found {
        let _ = writeln!(out, "{}  {}", symbol_line(d, s), s.dim(&format!("[id {}]", d.id)));
    }
}

/// A workspace's call graph as [`call_tree`] draws it: each symbol's path
/// starts with its member, and ids (per index) are made distinct per member.
pub(super) fn named_members(g: crate::graph::workspace::CallGraphAcross, names: &[String]) -> CallGraph {
    let named = |mut sym: Symbol, at: usize| {
        sym.path = format!("[{}] {}", names.get(at).map_or("?", String::as_str), sym.path);
        sym.id |= (at as i64) << 40;
        sym
    };
    CallGraph {
        symbol: named(g.symbol, g.member),
        direction: g.direction,
        depth: g.depth,
        edges: g
            .edges
            .into_iter()
            .map(|e| Edge {
                from: named(e.edge.from.clone(), e.from_member),
                to: named(e.edge.to.clone(), e.to_member),
                ..e.edge
            })
            .collect(),
        truncated: g.truncated,
        note: g.note,
    }
}

fn symbol_line(sym: &Symbol, s: Style) -> String {
    format!(
        "{} {}  {}",
        s.bold(&sym.qualified()),
        s.dim(&sym.kind),
        s.path(&format!("{}:{}", sym.path, sym.line))
    )
}

fn edge_note(e: &Edge, s: Style) -> String {
    let alternatives = if e.candidate_count > 1 {
        format!(", {} candidates", e.candidate_count)
    } else {
        String::new()
    };
    s.dim(&format!(
        "{} at {}:{} ({}{alternatives})",
        e.kind,
        e.call_site.path,
        e.call_site.line,
        e.confidence.as_str()
    ))
}

/// The call graph as an indented tree rooted at the queried symbol.
pub(super) fn call_tree(graph: &CallGraph, s: Style) -> String {
    let mut out = String::new();
    let verb = match graph.direction {
        Direction::Callers => "callers of",
        Direction::Callees => "callees of",
    };
    out.push_str(&format!("{verb} {}\n", symbol_line(&graph.symbol, s)));
    if graph.edges.is_empty() {
        out.push_str("  (none found)\n");
    }
    let mut expanded = HashSet::from([graph.symbol.id]);
    tree_level(graph, graph.symbol.id, 1, "", &mut expanded, s, &mut out);
    if graph.truncated {
        let why = graph.note.as_deref().unwrap_or("the answer is partial");
        out.push_str(&format!("  ... truncated: {why} ({} edges shown)\n", graph.edges.len()));
    }
    out
}

fn tree_level(
    graph: &CallGraph,
    node: i64,
    depth: usize,
    prefix: &str,
    expanded: &mut HashSet<i64>,
    s: Style,
    out: &mut String,
) {
    type End = fn(&Edge) -> &Symbol;
    let (near, far): (End, End) = match graph.direction {
        Direction::Callers => (|e| &e.to, |e| &e.from),
        Direction::Callees => (|e| &e.from, |e| &e.to),
    };
    let children: Vec<&Edge> = graph
        .edges
        .iter()
        .filter(|e| e.depth == depth && near(e).id == node)
        .collect();
    for (i, e) in children.iter().enumerate() {
        let last = i + 1 == children.len();
        let other = far(e);
        out.push_str(&format!(
            "{prefix}{} {}  {}\n",
            if last { "└─" } else { "├─" },
            symbol_line(other, s),
            edge_note(e, s)
        ));
        if other.id != 0 && expanded.insert(other.id) {
            let deeper = format!("{prefix}{}", if last { "   " } else { "│  " });
            tree_level(graph, other.id, depth + 1, &deeper, expanded, s, out);
        }
    }
}

/// A call path, one call per line.
pub(super) fn call_path(path: &CallPath, s: Style) -> String {
    let mut out = String::new();
    let note = match (&path.note, path.truncated) {
        (Some(n), true) => format!("  ... truncated: {n}\n"),
        _ => String::new(),
    };
    if path.edges.is_empty() {
        out.push_str(&format!(
            "no call path from {} to {} (within {} calls)\n",
            path.from.qualified(),
            path.to.qualified(),
            crate::graph::query::MAX_PATH_DEPTH
        ));
        out.push_str(&note);
        return out;
    }
    out.push_str(&format!("{}\n", symbol_line(&path.from, s)));
    for e in &path.edges {
        out.push_str(&format!("  → {}  {}\n", symbol_line(&e.to, s), edge_note(e, s)));
    }
    out.push_str(&note);
    out
}

/// `ken status`'s line on the query adapter.
fn adapter_line(status: &Status) -> String {
    use crate::index::fit::AdapterState;
    let fitted = match status.query_adapter_pairs {
        Some(pairs) if pairs >= crate::embed::adapter::MIN_PAIRS => Some(match &status.query_adapter_fit {
            Some(how) => format!("fitted on {pairs} documented definitions ({how})"),
            None => format!("fitted on {pairs} documented definitions"),
        }),
        Some(pairs) => Some(format!(
            "none ({pairs} documented definitions, {} needed)",
            crate::embed::adapter::MIN_PAIRS
        )),
        None => None,
    };
    let fitting = match status.query_adapter_fitter {
        Some(pid) => format!("being fitted in the background (pid {pid}, low priority)"),
        None => "being fitted in the background".to_string(),
    };
    match (status.query_adapter_state, fitted) {
        (AdapterState::Off, _) => "off (KEN_QUERY_ADAPTER=0)".to_string(),
        (AdapterState::Fitting, None) => format!("not fitted yet, {fitting}; searches run without it meanwhile"),
        (AdapterState::Fitting, Some(old)) => format!("{old}; a new fit is {fitting}"),
        (AdapterState::Pending, None) => "not fitted yet (the next `ken index`, `ken embed`, `ken watch` or \
                                          `ken serve` fits it in the background); searches run without it"
            .to_string(),
        (AdapterState::Pending, Some(old)) => format!("{old}; the branch changed since, a new fit is pending"),
        (_, Some(fitted)) => fitted,
        (_, None) => "not fitted yet".to_string(),
    }
}

/// `ken status` for people.
pub(super) fn status(status: &Status, s: Style) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} {}", s.bold("root:"), status.root);
    let _ = writeln!(
        out,
        "  index:        {} ({:.1} MB)",
        status.index_dir,
        status.index_bytes as f64 / 1e6
    );
    let _ = writeln!(out, "  head:         {}", status.head);
    let _ = writeln!(out, "  reflects:     {}", status.freshness.describe());
    let _ = writeln!(out, "  files:        {}", status.files);
    let _ = writeln!(out, "  chunks:       {}", status.chunks);
    let mut langs: Vec<(&String, &u64)> = status.languages.iter().collect();
    langs.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let langs: Vec<String> = langs.iter().map(|(l, n)| format!("{l} {n}")).collect();
    let _ = writeln!(out, "  languages:    {}", langs.join(", "));
    let when = status.last_indexed_at.as_deref().unwrap_or("never");
    match status.last_index_seconds {
        Some(secs) => {
            let _ = writeln!(out, "  last indexed: {when} (took {secs:.2} s)");
        }
        None => {
            let _ = writeln!(out, "  last indexed: {when}");
        }
    }
    match &status.embedding_model {
        Some(model) => {
            let _ = writeln!(
                out,
                "  embeddings:   {:.1}% of {} contents ({model}), {} signatures",
                status.embedding_coverage * 100.0,
                status.distinct_contents,
                status.signature_vectors
            );
            let _ = writeln!(out, "  query adapter: {}", adapter_line(status));
        }
        None => {
            let _ = writeln!(out, "  embeddings:   none (lexical search only)");
        }
    }
    if !status.skipped.is_empty() {
        let skipped: Vec<String> = status
            .skipped
            .iter()
            .map(|(k, n)| format!("{n} {}", k.label()))
            .collect();
        let _ = writeln!(out, "  skipped:      {}", skipped.join(", "));
    }
    if status.branches.len() > 1 {
        let branches: Vec<String> = status
            .branches
            .iter()
            .map(|(b, n)| format!("{b} ({n} files)"))
            .collect();
        let _ = writeln!(out, "  branches:     {}", branches.join(", "));
    }
    out
}

/// The context as text for people.
pub(super) fn symbol_context(out: &SymbolContext) -> String {
    let mut s = String::new();
    for l in &out.locations {
        s.push_str(&format!("{l}\n"));
    }
    if let Some(sym) = &out.symbol {
        s.push_str(&format!(
            "{} {}  {}:{}  [id {}]\n",
            sym.kind, sym.name, sym.path, sym.lines, sym.id
        ));
        if let Some(doc) = &sym.doc {
            s.push_str(&format!("{doc}\n"));
        }
        s.push_str(&format!("{}\n", sym.signature));
    }
    for (title, list) in [("callers", &out.callers), ("tests", &out.tests)] {
        if !list.is_empty() {
            s.push_str(&format!("\n{title}:\n"));
            for l in list {
                s.push_str(&format!("  {l}\n"));
            }
        }
    }
    if !out.commits.is_empty() {
        s.push_str("\ncommits:\n");
        for c in &out.commits {
            s.push_str(&format!("  {} {} {}: {}\n", c.id, c.date, c.author, c.summary));
        }
    }
    if let Some(p) = &out.pack {
        for piece in &p.pieces {
            s.push_str(&format!(
                "\n── {} {}:{}  {}\n{}\n",
                piece.role, piece.path, piece.lines, piece.label, piece.text
            ));
        }
        if let Some(left) = &p.left_out {
            s.push_str(&format!("\n{left}\n"));
        }
    }
    if let Some(note) = &out.note {
        s.push_str(&format!("\nnote: {note}\n"));
    }
    s
}

/// Readable text of an impact, for the CLI.
pub(super) fn impact(impact: &Impact) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "change between {}", impact.compared);
    let _ = writeln!(out, "\nfiles ({}):", impact.files.len());
    for f in &impact.files {
        match &f.old_path {
            Some(old) => {
                let _ = writeln!(out, "  {:<9} {} (from {old})", f.status, f.path);
            }
            None => {
                let _ = writeln!(out, "  {:<9} {}", f.status, f.path);
            }
        }
    }
    let _ = writeln!(out, "\nsymbols ({}):", impact.symbols.len());
    for s in &impact.symbols {
        let mut notes = vec![format!("{} caller(s)", s.callers)];
        if s.public {
            notes.push("public".into());
        }
        if !s.tested {
            notes.push("untested".into());
        }
        if let Some(old) = &s.old_name {
            notes.push(format!("was {old}"));
        }
        let _ = writeln!(
            out,
            "  {:<9} {} {} {}:{}  ({})",
            s.change,
            s.kind,
            s.name,
            s.path,
            s.line,
            notes.join(", ")
        );
    }
    let _ = writeln!(out, "\ncallers ({}):", impact.caller_count);
    for c in &impact.callers {
        let _ = writeln!(
            out,
            "  {}{} -> {}  {}  {}",
            "  ".repeat(c.depth.saturating_sub(1)),
            c.symbol,
            c.calls,
            c.site,
            c.text
        );
    }
    let _ = writeln!(out, "\ntests ({}):", impact.tests.len());
    for t in &impact.tests {
        let _ = writeln!(
            out,
            "  {}:{} {}  (depth {}, reaches {})",
            t.path, t.line, t.name, t.depth, t.reaches
        );
    }
    let _ = writeln!(out, "\nrisk: {}", impact.risk.level);
    for r in &impact.risk.reasons {
        let _ = writeln!(out, "  - {r}");
    }
    if let Some(cmd) = &impact.command {
        let _ = writeln!(out, "\nrun: {cmd}");
    }
    if impact.truncated {
        let _ = writeln!(out, "\n(partial: a graph limit cut the answer short)");
    }
    out
}

/// `ken context QUERY` for people: each piece under its place and role,
/// then the tokens used and what was left out.
pub(super) fn question(answer: &QuestionContext) -> String {
    let mut out = String::new();
    for p in &answer.pack.pieces {
        let label = if p.label.is_empty() {
            String::new()
        } else {
            format!("  {}", p.label)
        };
        let _ = writeln!(out, "── {}:{}  [{}]{label}", p.path, p.lines, p.role);
        let _ = writeln!(out, "{}", p.text);
    }
    let _ = writeln!(
        out,
        "── {} of {} tokens{}",
        answer.tokens,
        answer.budget,
        answer
            .pack
            .left_out
            .as_deref()
            .map(|l| format!("; {l}"))
            .unwrap_or_default()
    );
    out
}

/// `ken bench query` for people: each mode's latency against lexical search
/// of the same queries in the same run.
pub(super) fn query_bench(report: &QueryBench, iterations: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} chunks, {} vectors, {} queries x {iterations}",
        report.chunks, report.vectors, report.queries
    );
    // The baseline of each row: lexical search of the same queries, same run.
    for (mode, p50, p95) in &report.modes {
        let kind = mode.split(' ').nth(1).unwrap_or_default();
        let lexical = report.modes.iter().find(|m| m.0 == format!("lexical {kind}"));
        let _ = writeln!(
            out,
            "{mode:>29}: p50 {p50:7.2} ms  p95 {p95:7.2} ms  ({:.1}x lexical p50)",
            p50 / lexical.map_or(1.0, |m| m.1).max(1e-9)
        );
    }
    for (kind, phases) in &report.hybrid_phases {
        let phases: Vec<String> = phases
            .iter()
            .map(|(phase, p50)| format!("{phase} {p50:.2} ms"))
            .collect();
        let _ = writeln!(out, "hybrid {kind} by phase (p50): {}", phases.join(", "));
    }
    if report.vectors > 0 {
        let _ = writeln!(
            out,
            "query embedding alone: p50 {:.2} ms ({:.2}x candle's batch pass, {:.2} ms)",
            report.query_embedding_p50_ms,
            report.query_embedding_p50_ms / report.query_embedding_batch_pass_p50_ms.max(1e-9),
            report.query_embedding_batch_pass_p50_ms
        );
        if let Some(p50) = report.question_embedding_p50_ms {
            let _ = writeln!(out, "question embedding alone: p50 {p50:.2} ms");
        }
    } else {
        let _ = writeln!(out, "no vectors in this index: semantic and hybrid rows skipped");
    }
    out
}
