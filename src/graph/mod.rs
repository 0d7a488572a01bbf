//! The code graph: definitions (`symbols`) and references (`refs`: calls,
//! method calls, constructors, inheritance, imports) of every file version,
//! extracted while indexing from the tree chunking parsed (`source::extract`), and
//! resolved to edges at query time ([`resolve`]), so that each branch sees
//! the graph of its own files through its catalog. [`query`] answers callers,
//! callees, paths and definitions; the CLI prints them (`cli::graph`).

pub mod query;
pub mod resolve;
pub mod workspace;

use anyhow::Result;

/// Callers or callees of the symbol `spec` (name, `path:line` or id) in the
/// index of `root`, as the CLI and the MCP server answer them.
pub fn call_graph(
    root: &std::path::Path,
    index_dir: &std::path::Path,
    spec: &str,
    direction: query::Direction,
    depth: usize,
) -> Result<query::CallGraph> {
    let store = crate::store::Store::open_for_read(index_dir)?;
    let mut graph = query::Graph::open(&store, root)?;
    let symbol = graph.lookup_one(spec)?;
    graph.call_graph(&symbol, direction, depth)
}

/// The shortest call path between two symbols.
pub fn call_path(root: &std::path::Path, index_dir: &std::path::Path, from: &str, to: &str) -> Result<query::CallPath> {
    let store = crate::store::Store::open_for_read(index_dir)?;
    let mut graph = query::Graph::open(&store, root)?;
    let from = graph.lookup_one(from)?;
    let to = graph.lookup_one(to)?;
    graph.path(&from, &to)
}

/// Definitions named `name` (or `Container.name`), filtered by kind and path glob.
pub fn definitions(
    root: &std::path::Path,
    index_dir: &std::path::Path,
    name: &str,
    kind: Option<&str>,
    path_glob: Option<&str>,
) -> Result<Vec<query::Symbol>> {
    let store = crate::store::Store::open_for_read(index_dir)?;
    let mut graph = query::Graph::open(&store, root)?;
    graph.definitions(name, kind, path_glob)
}

/// A workspace member's index, as the graph reads it.
pub struct MemberIndex {
    pub name: String,
    pub root: std::path::PathBuf,
    pub index_dir: std::path::PathBuf,
}

/// Callers or callees of `spec` across the members (`only`: the symbol is
/// looked up in that member); a member without a code graph is left out and
/// said in the returned notices.
pub fn call_graph_across(
    members: &[MemberIndex],
    spec: &str,
    only: Option<&str>,
    direction: query::Direction,
    depth: usize,
) -> Result<(workspace::CallGraphAcross, Vec<String>, Vec<String>)> {
    let mut notices = Vec::new();
    let mut stores = Vec::new();
    for m in members {
        match crate::store::Store::open_for_read(&m.index_dir) {
            Ok(store) => stores.push((m, store)),
            Err(e) => notices.push(format!("member `{}` has no usable index: {e:#}", m.name)),
        }
    }
    let mut graphs = Vec::new();
    for (m, store) in &stores {
        match query::Graph::open(store, &m.root) {
            Ok(graph) => graphs.push(workspace::MemberGraph {
                name: m.name.clone(),
                graph,
                packages: crate::source::manifest::packages(&m.root),
            }),
            Err(e) => notices.push(format!("member `{}` is left out: {e:#}", m.name)),
        }
    }
    let names: Vec<String> = graphs.iter().map(|g| g.name.clone()).collect();
    let only = match only {
        Some(name) => match names.iter().position(|n| n == name) {
            Some(at) => Some(at),
            None => anyhow::bail!("member `{name}` has no code graph to look `{spec}` up in"),
        },
        None => None,
    };
    let mut across = workspace::Members { members: graphs };
    let (at, symbol) = across.lookup_one(spec, only)?;
    let graph = across.call_graph(at, &symbol, direction, depth)?;
    Ok((graph, names, notices))
}
