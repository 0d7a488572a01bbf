//! `ken callgraph`, `ken path` and `ken def`: the code graph as a tree for
//! people or JSON for programs.

use anyhow::Result;

use super::args::{CallgraphArgs, DefArgs, PathArgs};
use super::render::{self, Style};
use super::Place;
use crate::graph::query::{Ambiguous, Direction};
use crate::serve::wire;

/// Prints the candidates of an ambiguous symbol argument; exit code 2.
pub(super) fn ambiguous(e: anyhow::Error, json: bool) -> Result<i32> {
    let Some(amb) = e.downcast_ref::<Ambiguous>() else {
        return Err(e);
    };
    if json {
        let value = serde_json::json!({"error": "ambiguous", "symbol": amb.spec, "candidates": wire::symbols(amb.candidates.clone())});
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        eprint!("ken: {amb}");
    }
    Ok(2)
}

/// `ken callgraph`: callers (or callees) of a symbol to a depth.
pub(super) fn callgraph(at: &Place, args: &CallgraphArgs) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let direction = if args.callees {
        Direction::Callees
    } else {
        Direction::Callers
    };
    let graph = match crate::graph::call_graph(&root, &index_dir, &args.symbol, direction, args.depth) {
        Ok(g) => g,
        Err(e) => return ambiguous(e, args.json),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&wire::CallGraph::from(graph))?);
    } else {
        print!("{}", render::call_tree(&graph, Style::stdout()));
    }
    Ok(0)
}

/// `ken path`: the shortest call path; exit code 1 when there is none.
pub(super) fn path(at: &Place, args: &PathArgs) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let path = match crate::graph::call_path(&root, &index_dir, &args.from, &args.to) {
        Ok(p) => p,
        Err(e) => return ambiguous(e, args.json),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&wire::CallPath::from(path.clone()))?);
    } else {
        print!("{}", render::call_path(&path, Style::stdout()));
    }
    Ok(if path.edges.is_empty() { 1 } else { 0 })
}

/// `ken def`: where a name is defined; exit code 1 when nowhere.
pub(super) fn def(at: &Place, args: &DefArgs) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let found = crate::graph::definitions(
        &root,
        &index_dir,
        &args.name,
        args.kind.as_deref(),
        args.path.as_deref(),
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&wire::symbols(found.clone()))?);
    } else {
        render::print_definitions(&found, &args.name);
    }
    Ok(if found.is_empty() { 1 } else { 0 })
}
