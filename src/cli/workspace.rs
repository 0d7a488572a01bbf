//! `ken workspace add/list/remove`, and `ken index`, `ken search` and `ken
//! callgraph` over a workspace's members.

use anyhow::{bail, Result};

use super::args::{CallgraphArgs, IndexArgs, SearchArgs, WorkspaceCommand};
use super::render::{self, Style};
use super::Place;
use crate::app::{self, MemberSearchers};
use crate::graph::query::Direction;
use crate::search::kb;
use crate::search::Searcher;
use crate::serve::wire;
use crate::source::workspace::{Workspace, FILE_NAME};
use crate::store;

/// `ken workspace add|list|remove`.
pub(super) fn workspace(at: &Place, what: WorkspaceCommand) -> Result<i32> {
    let found = at.workspace_file()?;
    match what {
        WorkspaceCommand::Add { path, name } => {
            let mut ws = match &found {
                Some(file) if file.exists() => Workspace::load(file)?,
                Some(file) => Workspace::new(file)?,
                None => Workspace::new(&std::env::current_dir()?.join(FILE_NAME))?,
            };
            let member = ws.add(&path, name.as_deref())?.clone();
            ws.save()?;
            let index_dir = store::index_dir_for(&member.root);
            let hint = match store::has_index(&index_dir) {
                true => String::new(),
                false => " (not indexed yet: `ken index` in the workspace folder indexes every member)".to_string(),
            };
            println!(
                "added `{}` ({}) to {}{hint}",
                member.name,
                member.root.display(),
                ws.file.display()
            );
            Ok(0)
        }
        WorkspaceCommand::List { json } => list(&require(found)?, json),
        WorkspaceCommand::Remove { member } => {
            let mut ws = require(found)?;
            let removed = ws.remove(&member)?;
            ws.save()?;
            println!(
                "removed `{}` ({}) from {}; its folder and index are kept",
                removed.name,
                removed.path,
                ws.file.display()
            );
            Ok(0)
        }
    }
}

fn require(file: Option<std::path::PathBuf>) -> Result<Workspace> {
    match file {
        Some(file) => Workspace::load(&file),
        None => bail!(
            "no workspace: no {FILE_NAME} with a [workspace] here or above (`ken workspace add PATH` creates one)"
        ),
    }
}

/// `ken workspace list`: each member, whether it is indexed and its chunks.
fn list(ws: &Workspace, json: bool) -> Result<i32> {
    let mut rows = Vec::new();
    for m in &ws.members {
        let index_dir = store::index_dir_for(&m.root);
        let (state, chunks) = match (m.exists(), app::indexed_chunks(&m.root, &index_dir)) {
            (false, _) => ("missing".to_string(), None),
            (true, Ok(Some(chunks))) => ("indexed".to_string(), Some(chunks)),
            (true, Ok(None)) => ("not indexed".to_string(), None),
            (true, Err(e)) => (format!("unreadable index: {e:#}"), None),
        };
        rows.push(serde_json::json!({
            "name": m.name, "path": m.root.display().to_string(), "state": state, "chunks": chunks,
        }));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    println!("{}", ws.file.display());
    if rows.is_empty() {
        println!("  (no members)");
    }
    for r in &rows {
        let chunks = r["chunks"].as_u64().map_or(String::new(), |c| format!("  {c} chunks"));
        println!(
            "  {:<16} {}  {}{chunks}",
            r["name"].as_str().unwrap_or(""),
            r["path"].as_str().unwrap_or(""),
            r["state"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}

/// `ken index` in a workspace: every member in turn; exit 1 if one failed.
pub(super) fn index(ws: &Workspace, args: &IndexArgs) -> Result<i32> {
    if ws.members.is_empty() {
        bail!(
            "{} has no members: `ken workspace add PATH` adds one",
            ws.file.display()
        );
    }
    let mut failed = Vec::new();
    for m in &ws.members {
        if !args.quiet && !args.json {
            eprintln!("ken: member `{}` ({})", m.name, m.root.display());
        }
        let at = Place {
            root: Some(&m.root),
            index_dir: None,
            workspace: None,
        };
        match super::index::index(&at, args) {
            Ok(0) => {}
            Ok(code) => return Ok(code),
            Err(e) => {
                eprintln!("ken: error: member `{}`: {e:#}", m.name);
                failed.push(m.name.clone());
            }
        }
    }
    if !failed.is_empty() {
        eprintln!("ken: not indexed: {}", failed.join(", "));
        return Ok(1);
    }
    Ok(0)
}

/// `ken search` in a workspace: the members (or those of `--member`) as one
/// ranked list, each hit naming its member.
pub(super) fn search(ws: &Workspace, args: SearchArgs) -> Result<i32> {
    if args.freshness {
        bail!("--freshness is about one repository: add --root MEMBER_FOLDER");
    }
    let members = ws.select(&args.member)?;
    let req = super::search::request(&args);
    let searchers = MemberSearchers::open(&members, |m, index_dir| Searcher::open(&m.root, index_dir));
    for (m, e) in &searchers.unopened {
        eprintln!(
            "ken: member `{}` is not searched: {e:#} (`ken index` in the workspace folder indexes every member)",
            m.name
        );
    }
    let kb::Found {
        hits,
        notices,
        confidence,
    } = searchers.search(&req)?;
    for notice in notices {
        eprintln!("ken: {notice}");
    }
    if args.json {
        let results = super::search::json_member_hits(&hits)?;
        let value = match args.confidence {
            true => serde_json::json!({
                "confidence": wire::Confidence::from(confidence),
                "results": results,
            }),
            false => results,
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        if let (Some(line), false) = (&confidence.note, hits.is_empty()) {
            println!("{}", Style::stdout().dim(line));
        }
        render::print_hits(&hits, &req.query);
    }
    Ok(0)
}

/// `ken callgraph` in a workspace: callers or callees within and across members.
pub(super) fn callgraph(ws: &Workspace, args: &CallgraphArgs) -> Result<i32> {
    let direction = match args.callees {
        true => Direction::Callees,
        false => Direction::Callers,
    };
    let (graph, names, notices) =
        app::call_graph_across(ws, &args.symbol, args.member.as_deref(), direction, args.depth)?;
    for notice in notices {
        eprintln!("ken: {notice}");
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&wire::CallGraph::across(graph, &names))?
        );
    } else {
        print!(
            "{}",
            render::call_tree(&render::named_members(graph, &names), Style::stdout())
        );
    }
    Ok(0)
}
