//! `ken engine push|search|bench`: the shared search engine (docs/scale.md).

use std::path::Path;

use anyhow::{Context, Result};

use super::args::EngineCommand;
use super::render;
use super::Place;
use crate::search::engine::EngineSearcher;
use crate::search::kb::BaseHit;
use crate::search::{SearchRequest, Searcher};
use crate::store::engine::Engine;

pub(super) fn engine(at: &Place, what: EngineCommand) -> Result<i32> {
    match what {
        EngineCommand::Push { repo, json } => push(at, repo, json),
        EngineCommand::Search {
            query,
            k,
            path,
            lang,
            mode,
            repo,
            json,
        } => {
            let req = SearchRequest {
                limit: k,
                path_glob: path,
                language: lang,
                mode: mode.into(),
                ..SearchRequest::new(query.join(" "))
            };
            search(at, &req, repo.as_deref(), json)
        }
        EngineCommand::Bench { queries, k } => {
            let text =
                std::fs::read_to_string(&queries).with_context(|| format!("cannot read {}", queries.display()))?;
            let queries: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            let mut searcher = EngineSearcher::open(connect()?)?;
            let report = crate::bench::engine::engine_bench(&mut searcher, &queries, k)?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(0)
        }
    }
}

/// The engine of the settings (`KEN_ENGINE_URL`, `KEN_ENGINE_PASSWORD`).
fn connect() -> Result<Engine> {
    let settings = &crate::config::try_settings()?.engine;
    let url = settings
        .url
        .as_deref()
        .context("no search engine is configured: set KEN_ENGINE_URL (docs/scale.md)")?;
    Engine::connect(url, settings.password.as_deref())
}

/// The repository's name in the engine: `--repo`, `KEN_ENGINE_REPO`, else the root folder's name.
fn repo_name(root: &Path, given: Option<String>) -> Result<String> {
    let configured = crate::config::try_settings()?.engine.repo.clone();
    given
        .or(configured)
        .or_else(|| root.file_name().map(|n| n.to_string_lossy().into_owned()))
        .context("name the repository with --repo")
}

fn push(at: &Place, repo: Option<String>, json: bool) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let repo = repo_name(&root, repo)?;
    let mut engine = connect()?;
    let started = std::time::Instant::now();
    let report = crate::index::push::push(&root, &index_dir, &mut engine, &repo)?;
    let seconds = started.elapsed().as_secs_f64();
    if json {
        let value = serde_json::json!({
            "repo": report.repo,
            "branch": report.branch,
            "files_written": report.files_written,
            "chunks_written": report.chunks_written,
            "files_removed": report.files_removed,
            "files_unchanged": report.files_unchanged,
            "embedder": report.embedder,
            "replaced_all": report.replaced_all,
            "seconds": (seconds * 1000.0).round() / 1000.0,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!(
            "Pushed {} ({}): {} files written ({} chunks), {} removed, {} unchanged in {seconds:.2} s",
            report.repo,
            if report.embedder.is_some() {
                "with vectors"
            } else {
                "lexical only"
            },
            report.files_written,
            report.chunks_written,
            report.files_removed,
            report.files_unchanged,
        );
    }
    Ok(0)
}

/// Searches the engine; when it cannot be reached, the local index answers
/// (saying so), and without one the error is the engine's.
fn search(at: &Place, req: &SearchRequest, repo: Option<&str>, json: bool) -> Result<i32> {
    if crate::config::try_settings()?.engine.url.is_none() {
        connect()?;
    }
    let hits: Vec<BaseHit> = match connect().and_then(EngineSearcher::open) {
        Ok(mut searcher) => {
            let found = searcher.search(req)?;
            if let Some(notice) = searcher.notice() {
                eprintln!("ken: {notice}");
            }
            found
                .into_iter()
                .filter(|h| repo.is_none_or(|r| r == h.repo))
                .map(|h| (h.repo, h.hit))
                .collect()
        }
        Err(e) => {
            let local = at.read().ok().filter(|(_, dir)| crate::store::has_index(dir));
            let Some((root, index_dir)) = local else {
                return Err(e);
            };
            eprintln!("ken: {e:#}; answering from the local index of {}", root.display());
            let name = repo_name(&root, None)?;
            Searcher::open(&root, &index_dir)?
                .search(req)?
                .into_iter()
                .map(|hit| (name.clone(), hit))
                .collect()
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&super::search::json_hits(&hits)?)?);
    } else {
        render::print_hits(&hits, &req.query);
    }
    Ok(0)
}
