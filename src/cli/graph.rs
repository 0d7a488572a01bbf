//! `ken callgraph`, `ken path` and `ken def`: arguments and output (a tree
//! for people, JSON for programs).

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use anyhow::Result;
use clap::Args;

use crate::cli::Style;
use crate::graph::query::{Ambiguous, CallGraph, CallPath, Direction, Edge, Symbol};

#[derive(Args, Debug)]
pub struct CallgraphArgs {
    /// A symbol: name (`parse`, `Parser.parse`), `path:line`, or symbol id.
    pub symbol: String,
    /// Who calls it (the default).
    #[arg(long, conflicts_with = "callees")]
    pub callers: bool,
    /// What it calls.
    #[arg(long)]
    pub callees: bool,
    /// How many call levels to follow.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct PathArgs {
    /// Where the calls start: name, `path:line` or symbol id.
    pub from: String,
    /// Where they end.
    pub to: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DefArgs {
    /// A name (`parse`) or qualified name (`Parser.parse`, `Parser::parse`).
    pub name: String,
    /// Only this kind (function, method, class, struct, interface...).
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
    /// Only paths matching this glob or under this folder.
    #[arg(long, value_name = "GLOB")]
    pub path: Option<String>,
    #[arg(long)]
    pub json: bool,
}

/// Prints the candidates of an ambiguous symbol argument; exit code 2.
pub fn ambiguous(e: anyhow::Error, json: bool) -> Result<i32> {
    let Some(amb) = e.downcast_ref::<Ambiguous>() else {
        return Err(e);
    };
    if json {
        let value = serde_json::json!({"error": "ambiguous", "symbol": amb.spec, "candidates": amb.candidates});
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        eprint!("ken: {amb}");
    }
    Ok(2)
}

pub fn run_callgraph(root: &Path, index_dir: &Path, args: &CallgraphArgs) -> Result<i32> {
    let direction = if args.callees {
        Direction::Callees
    } else {
        Direction::Callers
    };
    let graph = match crate::graph::call_graph(root, index_dir, &args.symbol, direction, args.depth) {
        Ok(g) => g,
        Err(e) => return ambiguous(e, args.json),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&graph)?);
    } else {
        print!("{}", render_tree(&graph, Style::stdout()));
    }
    Ok(0)
}

pub fn run_path(root: &Path, index_dir: &Path, args: &PathArgs) -> Result<i32> {
    let path = match crate::graph::call_path(root, index_dir, &args.from, &args.to) {
        Ok(p) => p,
        Err(e) => return ambiguous(e, args.json),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&path)?);
    } else {
        print!("{}", render_path(&path, Style::stdout()));
    }
    Ok(if path.edges.is_empty() { 1 } else { 0 })
}

pub fn run_def(root: &Path, index_dir: &Path, args: &DefArgs) -> Result<i32> {
    let found = crate::graph::definitions(root, index_dir, &args.name, args.kind.as_deref(), args.path.as_deref())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        let s = Style::stdout();
        let mut out = std::io::stdout().lock();
        if found.is_empty() {
            let _ = writeln!(out, "no definition of {:?}", args.name);
        }
        for d in &found {
            let _ = writeln!(out, "{}  {}", symbol_line(d, s), s.dim(&format!("[id {}]", d.id)));
        }
    }
    Ok(if found.is_empty() { 1 } else { 0 })
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
pub fn render_tree(graph: &CallGraph, s: Style) -> String {
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
pub fn render_path(path: &CallPath, s: Style) -> String {
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
