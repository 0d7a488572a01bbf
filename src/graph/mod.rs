//! The code graph: definitions (`symbols`) and references (`refs`: calls,
//! method calls, constructors, inheritance, imports) of every file version,
//! extracted while indexing from the tree chunking parsed (`source::extract`), and
//! resolved to edges at query time ([`resolve`]), so that each branch sees
//! the graph of its own files through its catalog. [`query`] answers callers,
//! callees, paths and definitions; the CLI prints them (`cli::graph`).

pub mod query;
pub mod resolve;

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
