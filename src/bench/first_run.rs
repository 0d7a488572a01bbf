//! `ken bench first-run SOURCE`: what a first `ken index` costs its user.
//!
//! On a copy of SOURCE (the files `ken index` would read), with a fresh
//! index folder and the per-user vector cache off (`KEN_SHARED_CACHE=0`, so
//! every vector is computed), it starts `ken index` and searches the index
//! every 200 ms meanwhile (hybrid, one searcher kept as a server keeps it):
//! the time to the first answer (lexical), to the first hybrid answer that
//! used vectors (with the share of contents embedded then), to `ken index`
//! returning, and to the query adapter fitted. With `--baseline-exe`, the
//! same with another ken executable (an older build) first, in the same
//! run: the machines are shared and noisy, so the ratios are what compare.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::index::fit::{AdapterState, FitLock};
use crate::search::{SearchMode, SearchRequest, Searcher};
use crate::source::discover::{self, DiscoverOptions};

pub struct FirstRunOptions {
    pub source: PathBuf,
    /// Another ken executable to measure the same way, first.
    pub baseline: Option<PathBuf>,
    pub query: String,
    /// How long to wait for the adapter's fit after `ken index` returned.
    pub adapter_timeout: Duration,
}

#[derive(Debug, Serialize)]
pub struct FirstRunBench {
    pub source: String,
    pub files: usize,
    pub chunks: u64,
    pub distinct_contents: u64,
    pub query: String,
    /// The baseline executable's run, when one was given.
    pub baseline: Option<FirstRun>,
    pub this: FirstRun,
    /// This run's times over the baseline's (below 1: sooner).
    pub ratios: Option<Ratios>,
}

/// Seconds from the start of `ken index`.
#[derive(Debug, Serialize)]
pub struct FirstRun {
    pub exe: String,
    pub first_answer_seconds: Option<f64>,
    pub first_hybrid_answer_seconds: Option<f64>,
    /// Share of the distinct contents with a vector at the first hybrid answer.
    pub coverage_at_first_hybrid_answer: Option<f64>,
    pub index_returned_seconds: f64,
    pub index_exit_code: Option<i32>,
    /// When the adapter was fitted (or found too few pairs); none: not within the wait.
    pub adapter_done_seconds: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Ratios {
    pub first_hybrid_answer: Option<f64>,
    pub index_returned: f64,
    pub adapter_done: Option<f64>,
}

pub fn run(opts: &FirstRunOptions) -> Result<FirstRunBench> {
    let exe = std::env::current_exe().context("the ken executable")?;
    let files = discover::discover(&opts.source, &DiscoverOptions::default()).files;
    anyhow::ensure!(!files.is_empty(), "{} has no files to index", opts.source.display());
    let baseline = match &opts.baseline {
        Some(other) => Some(run_one(other, opts, &files, "baseline")?.0),
        None => None,
    };
    let (this, chunks, distinct_contents) = run_one(&exe, opts, &files, "this")?;
    let ratio = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
    let ratios = baseline.as_ref().map(|b| Ratios {
        first_hybrid_answer: ratio(this.first_hybrid_answer_seconds, b.first_hybrid_answer_seconds),
        index_returned: this.index_returned_seconds / b.index_returned_seconds,
        adapter_done: ratio(this.adapter_done_seconds, b.adapter_done_seconds),
    });
    Ok(FirstRunBench {
        source: opts.source.display().to_string(),
        files: files.len(),
        chunks,
        distinct_contents,
        query: opts.query.clone(),
        baseline,
        this,
        ratios,
    })
}

/// Copies `files` into a fresh folder and measures a first `ken index` of
/// it by `exe`: the run, with the chunks and distinct contents indexed.
fn run_one(
    exe: &Path,
    opts: &FirstRunOptions,
    files: &[discover::Candidate],
    name: &str,
) -> Result<(FirstRun, u64, u64)> {
    let tmp = std::env::temp_dir().join(format!("ken-bench-first-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let (root, index_dir) = (tmp.join("repo"), tmp.join("index"));
    for file in files {
        let to = root.join(&file.rel_path);
        std::fs::create_dir_all(to.parent().context("a file has a folder")?)?;
        std::fs::copy(&file.abs_path, &to).with_context(|| format!("copying {}", file.abs_path.display()))?;
    }
    let measured = measure(exe, opts, &root, &index_dir, &tmp);
    // A fit still running past the wait is ended: the folder goes.
    if let Some(pid) = FitLock::holder(&index_dir) {
        // SAFETY: signalling the fit this run started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = std::fs::remove_dir_all(&tmp);
    measured
}

fn measure(
    exe: &Path,
    opts: &FirstRunOptions,
    root: &Path,
    index_dir: &Path,
    tmp: &Path,
) -> Result<(FirstRun, u64, u64)> {
    eprintln!("ken bench first-run: {} index of {}", exe.display(), root.display());
    let log = std::fs::File::create(tmp.join("index.log"))?;
    let started = Instant::now();
    let mut child = Command::new(exe)
        .arg("--root")
        .arg(root)
        .arg("--index-dir")
        .arg(index_dir)
        .args(["index", "-q"])
        .env("KEN_SHARED_CACHE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting ken index")?;
    let seconds = || started.elapsed().as_secs_f64();
    let mut run = FirstRun {
        exe: exe.display().to_string(),
        first_answer_seconds: None,
        first_hybrid_answer_seconds: None,
        coverage_at_first_hybrid_answer: None,
        index_returned_seconds: 0.0,
        index_exit_code: None,
        adapter_done_seconds: None,
    };
    let mut returned: Option<Instant> = None;
    let mut searcher: Option<Searcher> = None;
    let mut req = SearchRequest::new(&opts.query);
    (req.mode, req.limit, req.explain) = (SearchMode::Hybrid, 10, true);
    loop {
        if run.first_hybrid_answer_seconds.is_none() {
            if let Some(s) = searcher.as_mut() {
                s.refresh(root);
            } else {
                searcher = Searcher::open(root, index_dir).ok();
            }
            if let Some(hits) = searcher.as_ref().and_then(|s| s.search(&req).ok()) {
                let at = seconds();
                if !hits.is_empty() {
                    run.first_answer_seconds.get_or_insert(at);
                }
                if hits
                    .iter()
                    .any(|h| h.explain.as_ref().is_some_and(|e| e.weights.is_some()))
                {
                    run.first_hybrid_answer_seconds = Some(at);
                    run.coverage_at_first_hybrid_answer = searcher.as_ref().and_then(|s| coverage(s).ok());
                    eprintln!("ken bench first-run: first hybrid answer at {at:.1} s");
                }
            }
        }
        if returned.is_none() {
            if let Some(status) = child.try_wait()? {
                returned = Some(Instant::now());
                run.index_returned_seconds = seconds();
                run.index_exit_code = status.code();
                eprintln!(
                    "ken bench first-run: ken index returned at {:.1} s",
                    run.index_returned_seconds
                );
            }
        }
        if let Some(at) = returned {
            if adapter_done(root, index_dir)? {
                run.adapter_done_seconds = Some(seconds());
                break;
            }
            if at.elapsed() > opts.adapter_timeout {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let store = crate::store::Store::open_for_read(index_dir)?;
    let branch = crate::source::git::head(root).catalog_key();
    let totals = crate::index::BranchTotals::read(&store, &branch)?;
    Ok((run, totals.chunks, store.branch_distinct_contents(&branch)?))
}

/// Share of the searcher's branch's distinct contents with a vector.
fn coverage(searcher: &Searcher) -> Result<f64> {
    let store = searcher.store();
    let Some(model) = store.meta(crate::store::MetaKey::EmbeddingModel)? else {
        return Ok(0.0);
    };
    let contents = store.branch_distinct_contents(searcher.branch())?.max(1);
    Ok(store.branch_vector_count(searcher.branch(), &model)? as f64 / contents as f64)
}

/// Whether the index's query adapter is fitted (or found too few pairs).
fn adapter_done(root: &Path, index_dir: &Path) -> Result<bool> {
    let store = crate::store::Store::open_for_read(index_dir)?;
    let branch = crate::source::git::head(root).catalog_key();
    Ok(matches!(
        crate::index::fit::state(&store, &branch)?,
        AdapterState::Fitted | AdapterState::TooFewPairs | AdapterState::Off
    ))
}
