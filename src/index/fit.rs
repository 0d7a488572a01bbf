//! The query adapter's fit ([`crate::embed::adapter`]), apart from the
//! embedding pass, where nobody waits for it.
//!
//! Search is complete without the adapter (it sharpens doc-style and
//! agent-style questions), and its fit costs minutes of both cores (600
//! question/code pairs embedded, then a contrastive fit). So `ken index`
//! returns once the chunk and signature vectors are in, and whoever finishes
//! an embedding pass (`ken index`, `ken embed`, the server's background
//! pass, a watcher) starts the fit in a process of its own
//! ([`start_in_background`]): niced to the lowest priority, so a search or
//! an edit never competes with it at equal priority (a thread of the server
//! could not be: priority is per thread, and the model's matrix threads are
//! shared with the query embedding), bounded in time ([`BACKGROUND_BUDGET`]:
//! it fits on the pairs embedded by then, or gives up), and stopped at any
//! moment without harm: the fit is saved in one transaction at the end, or
//! not at all. One fit per index at a time (`adapter.lock`); searches pick
//! the new fit up as they go, and run without one until then.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::embed::adapter;
use crate::embed::text::embedding_text;
use crate::embed::{Embedder, InputKind};
use crate::index::progress::Reporter;
use crate::index::semantic::{embed_batch, take_process_lock};
use crate::source::git;
use crate::store::cache::SharedCache;
use crate::store::{MetaKey, Store, WRITE_LOCK_TIMEOUT};

/// How long a background fit may spend embedding its pairs; past it, it
/// fits on the pairs embedded so far (a prefix of a spread sample), or gives
/// up when they are fewer than [`adapter::MIN_PAIRS`]. The 600 pairs took
/// 112 s on a shared 2-core machine (BENCHMARKS.md, "First run").
pub const BACKGROUND_BUDGET: Duration = Duration::from_secs(600);

/// Held while a process fits an index's adapter; the OS releases it with its
/// process, and the process id written in it is cleared when it is dropped.
pub struct FitLock {
    file: std::fs::File,
}

impl FitLock {
    fn path(index_dir: &Path) -> std::path::PathBuf {
        index_dir.join("adapter.lock")
    }

    /// The lock, if no other process holds it.
    pub fn try_take(index_dir: &Path) -> Option<FitLock> {
        Some(FitLock {
            file: take_process_lock(&Self::path(index_dir))?,
        })
    }

    /// The process fitting the adapter of the index in `index_dir` now, if any.
    pub fn holder(index_dir: &Path) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(Self::path(index_dir))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        alive.then_some(pid)
    }
}

impl Drop for FitLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

/// Where the query adapter of an index stands (`ken status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterState {
    /// `KEN_QUERY_ADAPTER=0`: searches use none, and none is fitted.
    Off,
    /// No vectors yet: it is fitted after them.
    NoEmbeddings,
    /// Not fitted for the branch as it is (never, or the branch changed by
    /// more than a quarter since), and no process is fitting it: the next
    /// embedding pass that finishes starts its fit.
    Pending,
    /// A process is fitting it now (in the background, at low priority).
    Fitting,
    /// Fitted, and searches use it.
    Fitted,
    /// The branch has too few documented definitions for one.
    TooFewPairs,
}

/// Where the adapter of the index in `store` stands for `branch`.
pub fn state(store: &Store, branch: &str) -> Result<AdapterState> {
    if !crate::config::settings().query_adapter {
        return Ok(AdapterState::Off);
    }
    let Some(model) = store.meta(MetaKey::EmbeddingModel)? else {
        return Ok(AdapterState::NoEmbeddings);
    };
    if FitLock::holder(&store.dir).is_some() {
        return Ok(AdapterState::Fitting);
    }
    let contents = store.branch_distinct_contents(branch)?;
    if !adapter::is_current(store, &model, adapter::Method::from_env()?, contents)? {
        return Ok(AdapterState::Pending);
    }
    Ok(match adapter::fitted_pairs(store, &model) {
        Some(pairs) if pairs >= adapter::MIN_PAIRS => AdapterState::Fitted,
        _ => AdapterState::TooFewPairs,
    })
}

/// What a fit did.
#[derive(Debug, Clone, PartialEq)]
pub enum FitOutcome {
    /// Fitted on this many pairs (how it was chosen: [`adapter::Fit::summary`]).
    Fitted { pairs: usize, summary: String },
    /// Too few documented definitions: recorded, no adapter.
    TooFewPairs(usize),
    /// The last fit still stands for the branch.
    Current,
    /// Another process is fitting it.
    Busy,
    /// `KEN_QUERY_ADAPTER=0`.
    Off,
    /// The index has no vectors yet.
    NoEmbeddings,
    /// The time budget ran out with this many pairs embedded, too few to fit on.
    OutOfTime { embedded: usize },
    /// Cancelled; nothing was saved.
    Stopped,
}

impl FitOutcome {
    pub fn describe(&self) -> String {
        match self {
            FitOutcome::Fitted { pairs, summary } => format!("fitted on {pairs} documented definitions ({summary})"),
            FitOutcome::TooFewPairs(n) => format!("none ({n} documented definitions, {} needed)", adapter::MIN_PAIRS),
            FitOutcome::Current => "up to date".to_string(),
            FitOutcome::Busy => "another process is fitting it".to_string(),
            FitOutcome::Off => "not fitted (KEN_QUERY_ADAPTER=0)".to_string(),
            FitOutcome::NoEmbeddings => "not fitted: the index has no embeddings yet".to_string(),
            FitOutcome::OutOfTime { embedded } => format!(
                "not fitted: the time budget ran out with {embedded} pairs embedded ({} needed)",
                adapter::MIN_PAIRS
            ),
            FitOutcome::Stopped => "stopped before the end; nothing saved".to_string(),
        }
    }
}

/// Fits the query adapter of the index in `index_dir` for the current
/// branch of `root`, with the embedder that made its vectors, unless its
/// last fit still stands. `budget` bounds the time spent embedding pairs
/// (none: every pair is embedded, as an evaluation needs).
pub fn fit_root(root: &Path, index_dir: &Path, reporter: &Reporter, budget: Option<Duration>) -> Result<FitOutcome> {
    if !crate::config::settings().query_adapter {
        return Ok(FitOutcome::Off);
    }
    let Some(_lock) = FitLock::try_take(index_dir) else {
        return Ok(FitOutcome::Busy);
    };
    let store = Store::open_for_write(index_dir)?;
    let Some(model) = store.meta(MetaKey::EmbeddingModel)? else {
        return Ok(FitOutcome::NoEmbeddings);
    };
    let provider = store.meta(MetaKey::EmbeddingProvider)?;
    let embedder = crate::embed::embedder_for_index(&model, provider.as_deref())?;
    let branch = git::head(root).catalog_key();
    let deadline = budget.map(|b| Instant::now() + b);
    fit_query_adapter(&store, &branch, embedder.as_ref(), reporter, deadline)
}

/// Fits the query adapter of `embedder`'s vectors on `branch` unless the last
/// fit still stands for the branch's distinct contents. Pairs are embedded
/// until `deadline`; cancelled, nothing is saved.
fn fit_query_adapter(
    store: &Store,
    branch: &str,
    embedder: &dyn Embedder,
    reporter: &Reporter,
    deadline: Option<Instant>,
) -> Result<FitOutcome> {
    let model = embedder.id().to_string();
    let method = adapter::Method::from_env()?;
    let contents = store.branch_distinct_contents(branch)?;
    if adapter::is_current(store, &model, method, contents)? {
        return Ok(FitOutcome::Current);
    }
    let mut pairs = adapter::training_pairs(store, branch, method, embedding_text)?;
    if pairs.len() < adapter::MIN_PAIRS {
        let _writer = store.lock_for_write(WRITE_LOCK_TIMEOUT)?;
        adapter::save(store, &model, method, contents, pairs.len(), None)?;
        return Ok(FitOutcome::TooFewPairs(pairs.len()));
    }
    let started = Instant::now();
    let shared = SharedCache::open(&crate::embed::model::cache_root().join("vectors.db"));
    let mut progress = reporter.phase("fitting the query adapter", "pairs", pairs.len() as u64);
    let (mut questions, mut targets) = (Vec::new(), Vec::new());
    for batch in pairs.chunks(embedder.preferred_batch().max(1)) {
        if reporter.is_cancelled() {
            return Ok(FitOutcome::Stopped);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let asked: Vec<&str> = batch.iter().map(|(_, question, _)| question.as_str()).collect();
        questions.extend(embedder.embed(&asked, InputKind::Query)?);
        // Code vectors go through the shared cache: a clone fits again cheaply.
        let code: Vec<(i64, Vec<String>)> = batch.iter().map(|(_, _, code)| (0, vec![code.clone()])).collect();
        targets.extend(embed_batch(embedder, &model, shared.as_ref(), &code)?.0);
        progress.inc(batch.len() as u64);
    }
    drop(progress);
    let embedded = started.elapsed();
    if questions.len() < pairs.len() {
        // Out of time: the pairs are a spread sample, and so is a prefix of them.
        if questions.len() < adapter::MIN_PAIRS {
            return Ok(FitOutcome::OutOfTime {
                embedded: questions.len(),
            });
        }
        pairs.truncate(questions.len());
    }
    // A pair the embedder gave a degenerate vector for is left out.
    let kept = |i: &usize| !questions[*i].is_empty() && !targets[*i].is_empty();
    if (0..pairs.len()).any(|i| !kept(&i)) {
        let keep: Vec<usize> = (0..pairs.len()).filter(kept).collect();
        let pick = |of: &[Vec<f32>]| -> Vec<Vec<f32>> { keep.iter().map(|&i| of[i].clone()).collect() };
        (questions, targets) = (pick(&questions), pick(&targets));
        pairs = keep.iter().map(|&i| pairs[i].clone()).collect();
    }
    let hashes: Vec<i64> = pairs.iter().map(|(hash, _, _)| *hash).collect();
    let negatives = adapter::negatives(store, branch, &model, &hashes, adapter::NEGATIVES)?;
    let mut fit = adapter::fit(&questions, &targets, &negatives, method);
    let leads = adapter::lead_words(pairs.iter().map(|(_, question, _)| question.as_str()));
    fit.adapter = fit.adapter.map(|a| a.led_by(leads));
    if reporter.is_cancelled() {
        return Ok(FitOutcome::Stopped);
    }
    let _writer = store.lock_for_write(WRITE_LOCK_TIMEOUT)?;
    adapter::save(store, &model, method, contents, pairs.len(), Some(&fit))?;
    tracing::info!(
        "query adapter fitted on {} pairs against {} stored chunks ({}) in {:.2} s ({:.2} s embedding them)",
        pairs.len(),
        negatives.vectors.len(),
        fit.summary,
        started.elapsed().as_secs_f64(),
        embedded.as_secs_f64()
    );
    Ok(FitOutcome::Fitted {
        pairs: pairs.len(),
        summary: fit.summary,
    })
}

/// Starts the fit of the adapter of the index in `index_dir` (for `root`'s
/// current branch) in a detached `ken embed --adapter-only` at the lowest
/// CPU priority, bounded by [`BACKGROUND_BUDGET`], logging to
/// `embed.log` there, when it is pending ([`AdapterState::Pending`]): its
/// process id, or `None` when there is nothing to fit or a fit runs. Only
/// the ken executable calls this (it starts itself again).
pub fn start_in_background(root: &Path, index_dir: &Path) -> Result<Option<u32>> {
    use std::os::unix::process::CommandExt;
    {
        let store = Store::open_for_read(index_dir)?;
        if state(&store, &git::head(root).catalog_key())? != AdapterState::Pending {
            return Ok(None);
        }
    }
    let mut command = background_ken(root, index_dir)?;
    command
        .args(["embed", "--adapter-only", "--budget-secs"])
        .arg(BACKGROUND_BUDGET.as_secs().to_string());
    // SAFETY: setpriority is async-signal-safe; it sets the child's own
    // priority before it runs, and every thread it starts inherits it.
    unsafe {
        command.pre_exec(|| {
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
            Ok(())
        });
    }
    let mut child = command.spawn().context("cannot start the query adapter's fit")?;
    let pid = child.id();
    // Reaped when it ends, so a long-lived server keeps no zombie; a
    // command that exits first leaves it to init.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(Some(pid))
}

/// This ken executable on the index of `root` in `index_dir`, as a process
/// that outlives the caller (its own process group, no terminal), its
/// output appended to `embed.log` there; the caller adds the command.
pub fn background_ken(root: &Path, index_dir: &Path) -> Result<std::process::Command> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the ken executable")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(index_dir.join("embed.log"))
        .context("cannot open the embedding log")?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--root")
        .arg(root)
        .arg("--index-dir")
        .arg(index_dir)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    Ok(command)
}
