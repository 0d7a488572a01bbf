//! `ken map`, `ken context` and `ken impact`: what an agent reads before
//! working, as text for people or JSON.

use std::path::Path;

use anyhow::Result;

use super::args::{ContextArgs, ImpactArgs, MapArgs};
use super::graph::ambiguous;
use super::search::open_bases;
use super::{render, Place};
use crate::context::question::QuestionRequest;
use crate::context::{impact, map, pack, symbol};
use crate::serve::wire;

/// `ken map`: the repository's most important files within a budget.
pub(super) fn map(at: &Place, args: &MapArgs) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let budget = args.budget.unwrap_or(map::DEFAULT_MAP_BUDGET);
    let budget = pack::checked_budget(Some(budget))?;
    let focus = map::Focus::parse(&root, args.focus.as_deref());
    let map = map::repo_map(&root, &index_dir, focus, budget)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&wire::RepoMap::from(map))?);
    } else {
        render::print_pack(&map.map);
    }
    Ok(0)
}

/// `ken context QUERY` or `ken context --symbol NAME`.
pub(super) fn context(at: &Place, args: &ContextArgs) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    match (&args.symbol, &args.query) {
        (Some(symbol), _) => symbol_context(&root, &index_dir, symbol, args),
        (None, Some(query)) => {
            let req = QuestionRequest {
                query: query.clone(),
                budget: args.budget,
                mode: args.mode.into(),
                path_glob: args.path.clone(),
            };
            question_context(&root, &index_dir, &req, args.json)
        }
        (None, None) => anyhow::bail!("ken context: give a QUERY or --symbol NAME"),
    }
}

/// `ken context --symbol NAME`: the context as text, or compact JSON with
/// `--json`. An ambiguous name lists its candidates (exit 2).
fn symbol_context(root: &Path, index_dir: &Path, spec: &str, args: &ContextArgs) -> Result<i32> {
    let outcome = if args.locations {
        symbol::locations(root, index_dir, spec)
    } else {
        symbol::symbol_context(root, index_dir, spec, args.budget)
    };
    let out = match outcome {
        Ok(out) => out,
        Err(e) => return ambiguous(e, args.json),
    };
    if args.json {
        println!("{}", serde_json::to_string(&wire::SymbolContext::from(out))?);
    } else {
        print!("{}", render::symbol_context(&out));
    }
    Ok(0)
}

/// `ken context QUERY`: opens the project and its knowledge bases, prints
/// the answer as compact JSON or as text.
fn question_context(root: &Path, index_dir: &Path, req: &QuestionRequest, json: bool) -> Result<i32> {
    let answer = open_bases(root, index_dir, false)?.answer(root, req)?;
    if json {
        println!("{}", serde_json::to_string(&wire::QuestionContext::from(answer))?);
        return Ok(0);
    }
    if let Some(n) = &answer.notice {
        eprintln!("ken: {n}");
    }
    print!("{}", render::question(&answer));
    Ok(0)
}

/// `ken impact`: what a change affects; exit code 0, or an error (exit 1)
/// for an empty diff, an unknown revision or a folder outside git.
pub(super) fn impact(at: &Place, args: &ImpactArgs) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let impact = impact::change_impact(&root, &index_dir, &args.target(), args.depth)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&wire::Impact::from(impact))?);
    } else {
        print!("{}", render::impact(&impact));
    }
    Ok(0)
}
