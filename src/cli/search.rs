//! `ken search` and `ken similar`: ranked results as text or JSON.

use std::path::Path;

use anyhow::Result;

use super::args::SearchArgs;
use super::render::{self, Style};
use super::Place;
use crate::app::Bases;
use crate::search::kb::{self, BaseHit};
use crate::search::{SearchRequest, Searcher};
use crate::serve::wire;

/// `ken search`: the project and its knowledge bases.
pub(super) fn search(at: &Place, args: SearchArgs) -> Result<i32> {
    if !args.member.is_empty() {
        anyhow::bail!(
            "--member needs a workspace: a {} with a [workspace] here or above, or --workspace FILE",
            crate::source::workspace::FILE_NAME
        );
    }
    let (root, index_dir) = at.read()?;
    let req = request(&args);
    let bases = open_bases(&root, &index_dir, true)?;
    let kb::Found {
        hits,
        notices,
        confidence,
    } = bases.search(&req, true)?;
    for notice in notices {
        eprintln!("ken: {notice}");
    }
    let freshness = if args.freshness {
        Some(bases.freshness(&root, true)?)
    } else {
        None
    };
    if let (Some(f), false) = (&freshness, args.json) {
        eprintln!("ken: the index reflects {}", f.describe());
    }
    if args.json && (freshness.is_some() || args.confidence) {
        let mut value = serde_json::json!({"results": json_hits(&hits)?});
        if let Some(f) = &freshness {
            value["index"] = serde_json::to_value(wire::Freshness::from(f.clone()))?;
        }
        if args.confidence {
            value["confidence"] = serde_json::to_value(wire::Confidence::from(confidence))?;
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&json_hits(&hits)?)?);
    } else {
        if let (Some(line), false) = (&confidence.note, hits.is_empty()) {
            println!("{}", Style::stdout().dim(line));
        }
        render::print_hits(&hits, &req.query);
    }
    Ok(0)
}

/// The search `ken search`'s arguments ask for.
pub(super) fn request(args: &SearchArgs) -> SearchRequest {
    SearchRequest {
        query: args.query.join(" "),
        limit: args.k,
        path_glob: args.path.clone(),
        language: args.lang.clone(),
        kind: args.kind.clone(),
        max_per_file: args.max_per_file,
        mode: args.mode.into(),
        explain: args.explain,
    }
}

/// `ken similar`: code like a snippet or the chunk at `path:line`.
pub(super) fn similar(at: &Place, target: &str, k: usize, include_source_file: bool, json: bool) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let searcher = Searcher::open(&root, &index_dir)?;
    let hits: Vec<BaseHit> = searcher
        .similar(target, k, include_source_file)?
        .into_iter()
        .map(|h| (kb::PROJECT.to_string(), h))
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&json_hits(&hits)?)?);
    } else {
        render::print_hits(&hits, target);
    }
    Ok(0)
}

/// The project and its knowledge bases, each opened afresh; a knowledge base
/// that does not open is said on stderr and not searched, and so are the
/// knowledge bases when they cannot be listed, if `say_unlisted`.
pub(super) fn open_bases(root: &Path, index_dir: &Path, say_unlisted: bool) -> Result<Bases> {
    let project = Searcher::open(root, index_dir)?;
    let listed = kb::list(index_dir).unwrap_or_else(|e| {
        if say_unlisted {
            eprintln!("ken: knowledge bases are not searched: {e:#}");
        }
        Vec::new()
    });
    let bases = Bases::open(project, index_dir, &listed, |_, root, index_dir| {
        Searcher::open(root, index_dir)
    });
    for (base, e) in &bases.unopened {
        eprintln!("ken: knowledge base `{}` is not searched: {e:#}", base.name);
    }
    Ok(bases)
}

/// Results as a JSON array: each hit's fields plus the base it comes from.
pub(super) fn json_hits(hits: &[BaseHit]) -> Result<serde_json::Value> {
    let rows: Vec<JsonHit> = hits.iter().map(JsonHit::from).collect();
    Ok(serde_json::to_value(rows)?)
}

/// A workspace's results as a JSON array: each hit under the member (the
/// name `hits` carry) it comes from.
pub(super) fn json_member_hits(hits: &[BaseHit]) -> Result<serde_json::Value> {
    let rows: Vec<JsonHit> = hits
        .iter()
        .map(|hit| JsonHit {
            base: kb::PROJECT,
            member: Some(&hit.0),
            ..JsonHit::from(hit)
        })
        .collect();
    Ok(serde_json::to_value(rows)?)
}

/// A result as `ken search --json` prints it (README: a stable format).
#[derive(serde::Serialize)]
struct JsonHit<'a> {
    base: &'a str,
    /// In a workspace: the member the hit is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    member: Option<&'a str>,
    path: &'a str,
    start_line: u32,
    end_line: u32,
    score: f64,
    kind: &'a str,
    symbol: Option<&'a str>,
    language: &'a str,
    snippet: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    explain: Option<wire::Explain>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    copies: Vec<wire::Location>,
}

impl<'a> From<&'a BaseHit> for JsonHit<'a> {
    fn from((base, hit): &'a BaseHit) -> JsonHit<'a> {
        JsonHit {
            base,
            member: None,
            path: &hit.path,
            start_line: hit.start_line,
            end_line: hit.end_line,
            score: hit.score,
            kind: &hit.kind,
            symbol: hit.symbol.as_deref(),
            language: &hit.language,
            snippet: &hit.snippet,
            context: hit.context.as_deref(),
            explain: hit.explain.clone().map(wire::Explain::from),
            copies: hit.copies.iter().cloned().map(wire::Location::from).collect(),
        }
    }
}
