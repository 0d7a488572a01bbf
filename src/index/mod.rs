//! `ken index`: bring the index of a root up to date with its files.
//!
//! Pipeline: discover (parallel walk) → compare with the branch's catalog by
//! size and mtime → read, check and hash what changed (parallel) → parse and
//! chunk new contents (parallel) → one writer thread that commits batches.
//! Each batch is one transaction, so an interrupted run leaves a consistent
//! index and the next run continues where it stopped.
//!
//! Files read and left out for their content (generated, binary...) are
//! recorded with their size and mtime, so later runs count them as skipped
//! without reading them again while those stay the same.

pub mod fit;
pub mod freshness;
pub mod health;
pub mod progress;
pub mod push;
pub mod semantic;
pub mod share;
pub mod status;
pub mod watch;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::index::progress::{Phase, Reporter};
use crate::source::chunk::{self, chunk_and_graph, ChunkLimits};
use crate::source::discover::{self, Candidate, DiscoverOptions, SkipCounts, SkipReason};
use crate::source::git;
use crate::source::lang;
use crate::store::{
    self, content_hash, now_rfc3339, Batch, CatalogEntry, MetaKey, NewFileVersion, SkippedEntry, Store,
};

/// Runs that change at least this many files load the lexical index in bulk.
const BULK_FILES: usize = 1000;
/// FTS5's default `automerge` setting, restored after a bulk load.
const DEFAULT_AUTOMERGE: i64 = 4;

#[derive(Debug, Clone)]
pub struct IndexOptions {
    pub discover: DiscoverOptions,
    pub limits: ChunkLimits,
    pub lock_timeout: Duration,
    /// Progress bar, progress callback and cancellation.
    pub reporter: Reporter,
    /// Commit after this many changed files (bounds the work an interruption loses).
    pub batch_files: usize,
    /// Extract the code graph (symbols and references) while chunking.
    pub graph: bool,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            discover: DiscoverOptions::default(),
            limits: ChunkLimits::default(),
            lock_timeout: store::WRITE_LOCK_TIMEOUT,
            reporter: Reporter::default(),
            batch_files: 500,
            graph: true,
        }
    }
}

/// What one `ken index` run did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IndexReport {
    pub root: String,
    pub branch: String,
    /// Files in the index for this branch after the run.
    pub files: u64,
    pub chunks: u64,
    /// Files whose new content was parsed and chunked.
    pub parsed: u64,
    /// Files whose new content was already stored (e.g. from another branch).
    pub reused: u64,
    pub unchanged: u64,
    pub removed: u64,
    /// Lines and bytes of the parsed files.
    pub parsed_lines: u64,
    pub parsed_bytes: u64,
    /// Indexed files per language.
    pub languages: BTreeMap<String, u64>,
    pub skipped: SkipCounts,
    /// Problems that did not stop the run (unreadable directories, parse failures).
    pub warnings: Vec<String>,
    pub seconds: f64,
}

/// The result of reading one changed file.
enum Outcome {
    Parsed {
        candidate: Candidate,
        version: NewFileVersion,
    },
    /// Content already stored under this path (same hash as before, or another branch's).
    Known {
        candidate: Candidate,
        content_hash: i64,
    },
    Skipped {
        candidate: Candidate,
        reason: SkipReason,
    },
    Failed {
        candidate: Candidate,
        error: String,
    },
}

/// Indexes `root` into the index at `index_dir`.
pub fn index(root: &Path, index_dir: &Path, opts: &IndexOptions) -> Result<IndexReport> {
    index_scoped(root, index_dir, opts, None)
}

/// Like [`index`], but when `scope` is given only the files under those
/// starts are compared with the catalog (the watcher names what changed).
/// A branch with no catalog yet is always indexed whole.
///
/// A branch indexed for the first time starts from the catalog of the
/// branch indexed last (files with the same size and mtime are not read
/// again), and a run on another branch than the last one commits as one
/// transaction: a search never sees a half-switched branch.
///
/// An index found damaged (by SQLite during the run, or by the check after a
/// whole run that changed files) is rebuilt from the files once a check
/// confirms it, keeping every vector that can be read, and said so on
/// stderr. Other failures of the index's storage (no space left, a
/// read-only folder...) are errors that say what they are.
pub fn index_scoped(
    root: &Path,
    index_dir: &Path,
    opts: &IndexOptions,
    scope: Option<&[discover::Start]>,
) -> Result<IndexReport> {
    // This run repairs what it finds damaged: SQLite's reports need no hint.
    let _handled = store::DamageHandled::begin();
    let first = index_once(root, index_dir, opts, scope);
    let damage = match first {
        Err(e) if store::fault_of(&e) == Some(store::Fault::Damaged) => e,
        other => return other.map_err(|e| store::explain(index_dir, e)),
    };
    // Confirmed by a check before anything is replaced (the full one: the
    // lexical index's own damage escapes the quick one).
    let problems = store::check_integrity(index_dir, true)?;
    if problems.is_empty() {
        return Err(store::explain(index_dir, damage));
    }
    let kept = store::rebuild_damaged(index_dir)?;
    eprintln!(
        "ken: the index database {} is damaged ({}); rebuilding it from the files: {}",
        index_dir.join("index.db").display(),
        problems[0],
        kept.describe()
    );
    index_once(root, index_dir, opts, scope).map_err(|e| store::explain(index_dir, e))
}

fn index_once(
    root: &Path,
    index_dir: &Path,
    opts: &IndexOptions,
    scope: Option<&[discover::Start]>,
) -> Result<IndexReport> {
    let started = Instant::now();
    let root = root
        .canonicalize()
        .with_context(|| format!("cannot index {}: no such directory", root.display()))?;
    anyhow::ensure!(root.is_dir(), "cannot index {}: not a directory", root.display());
    let head = git::head(&root);
    // Keep an index inside the work tree out of `git status` (knowledge bases' indexes live elsewhere).
    if let (Some(git_dir), true) = (&head.git_dir, index_dir.starts_with(&root) || index_dir.is_relative()) {
        git::exclude_index_dir(git_dir);
    }
    let branch = head.catalog_key();
    let mut store = Store::open_for_write(index_dir)?;
    let _lock = store.lock_for_write(opts.lock_timeout)?;
    let chunking = chunk::chunking_fingerprint(&opts.limits);
    let has_files = store.has_files()?;
    if has_files && store.meta(MetaKey::Chunking)?.as_deref() != Some(chunking.as_str()) {
        let kept;
        (store, kept) = store.rebuild_keeping_vectors()?;
        eprintln!(
            "ken: the chunking rules changed since this index was built; re-indexing every file ({})",
            kept.describe()
        );
    }
    store.set_meta(MetaKey::Chunking, &chunking)?;

    // A scoped run (the watcher's) on a branch already indexed reads only
    // the catalog under its folders: one edit must not cost the whole catalog.
    let scoped_load = match scope {
        Some(starts) if store.branch_file_count(&branch)? > 0 => Some(catalog_within(&store, &branch, &root, starts)?),
        _ => None,
    };
    let loaded_in_scope = scoped_load.is_some();
    let (mut catalog, mut skipped) = match scoped_load {
        Some(loaded) => loaded,
        None => (store.catalog(&branch)?, store.skipped(&branch)?),
    };
    let last_branch = store.meta(MetaKey::IndexedBranch)?;
    let switched = last_branch.as_deref().is_some_and(|b| b != branch);
    let mut seed_from = None;
    if catalog.is_empty() && !loaded_in_scope {
        if let Some(previous) = last_branch.filter(|b| *b != branch) {
            catalog = store.catalog(&previous)?;
            seed_from = Some(previous).filter(|_| !catalog.is_empty());
            if let Some(previous) = &seed_from {
                skipped = store.skipped(previous)?;
            }
        }
    }
    let scope = scope.filter(|_| loaded_in_scope || (seed_from.is_none() && !catalog.is_empty()));
    let found = match scope {
        Some(starts) => discover::discover_from(&root, starts, &opts.discover),
        None => discover::discover(&root, &opts.discover),
    };
    tracing::info!(
        "indexing: {} files found in {:.2} s",
        found.files.len(),
        started.elapsed().as_secs_f64()
    );
    let mut report = IndexReport {
        root: root.display().to_string(),
        branch: branch.clone(),
        skipped: found.skipped.clone(),
        warnings: found.errors.iter().take(20).cloned().collect(),
        ..IndexReport::default()
    };

    let run_start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let in_scope = |path: &str| scope.is_none_or(|starts| starts.iter().any(|s| s.covers(&root, path)));
    let (mut changed, unseen) = compare_with_catalog(&found.files, &catalog, &skipped, &in_scope, &mut report);
    let known_versions = known_versions(&store, (changed.len() < BULK_FILES).then_some(&changed))?;
    // Largest first, so the slowest parses start early and the tail is short.
    changed.sort_unstable_by_key(|c| std::cmp::Reverse(c.size));
    // A bulk load merges FTS segments once at the end instead of as it goes.
    // Set every run: a killed bulk run must not leave merging off.
    let bulk = changed.len() >= BULK_FILES;
    store.set_lexical_automerge(if bulk { 0 } else { DEFAULT_AUTOMERGE })?;

    let mut progress = opts.reporter.phase("indexing", "files", changed.len() as u64);
    let (tx, rx) = mpsc::sync_channel::<Outcome>(256);
    let limits = opts.limits;
    let graph = opts.graph;
    let plan = WritePlan {
        branch: &branch,
        catalog: &catalog,
        skipped: &skipped,
        batch_files: if switched || seed_from.is_some() {
            usize::MAX
        } else {
            opts.batch_files
        },
        run_start_ns,
        seed_from: seed_from.as_deref(),
        unseen,
        reporter: &opts.reporter,
    };
    let writer_result = std::thread::scope(|scope| {
        let writer = scope.spawn(|| write_outcomes(&mut store, &plan, rx, &mut progress));
        changed.into_par_iter().for_each_with(tx, |tx, cand| {
            if opts.reporter.is_cancelled() {
                return;
            }
            let outcome = read_and_chunk(cand, &catalog, &known_versions, &limits, graph);
            let _ = tx.send(outcome);
        });
        writer.join().expect("index writer thread panicked")
    });
    let written = writer_result?;
    drop(progress);
    opts.reporter.check_cancelled("indexing")?;
    report.parsed = written.parsed;
    report.reused = written.reused;
    report.unchanged += written.unchanged;
    report.parsed_lines = written.parsed_lines;
    report.parsed_bytes = written.parsed_bytes;
    for (reason, n) in written.skipped {
        *report.skipped.entry(reason).or_default() += n;
    }
    report.warnings.extend(written.warnings);
    report.removed = written.removed;

    finish_run(&store, &branch, &head, scope.is_some(), bulk, started, &mut report)?;
    Ok(report)
}

/// (path, content hash) of the stored file versions, any branch: of `only`
/// these paths (a few changed files), or of all.
fn known_versions(store: &Store, only: Option<&Vec<Candidate>>) -> Result<HashMap<String, Vec<i64>>> {
    let Some(candidates) = only else {
        return store.all_versions();
    };
    let mut map: HashMap<String, Vec<i64>> = HashMap::new();
    for c in candidates {
        let hashes = store.versions_of(&c.rel_path)?;
        if !hashes.is_empty() {
            map.insert(c.rel_path.clone(), hashes);
        }
    }
    Ok(map)
}

fn read_and_chunk(
    candidate: Candidate,
    catalog: &HashMap<String, CatalogEntry>,
    known: &HashMap<String, Vec<i64>>,
    limits: &ChunkLimits,
    graph: bool,
) -> Outcome {
    let bytes = match std::fs::read(&candidate.abs_path) {
        Ok(b) => b,
        Err(_) => {
            return Outcome::Skipped {
                candidate,
                reason: SkipReason::Unreadable,
            }
        }
    };
    let text = match discover::check_content(&bytes) {
        Ok(t) => t,
        Err(reason) => return Outcome::Skipped { candidate, reason },
    };
    let hash = content_hash(&bytes);
    let same_as_catalog = catalog.get(&candidate.rel_path).is_some_and(|e| e.content_hash == hash);
    let stored = known.get(&candidate.rel_path).is_some_and(|h| h.contains(&hash));
    if same_as_catalog || stored {
        return Outcome::Known {
            candidate,
            content_hash: hash,
        };
    }
    let language = lang::for_source(Path::new(&candidate.rel_path), text);
    // A grammar that fails (a broken query) must not lose the file: fall back to line windows.
    let chunked = chunk_and_graph(language, text, limits, graph).or_else(|e| {
        tracing::warn!("{}: {e:#}; indexing it as plain text", candidate.rel_path);
        chunk_and_graph(None, text, limits, false)
    });
    match chunked {
        Ok((chunks, file_graph)) => {
            let version = NewFileVersion::new(
                candidate.rel_path.clone(),
                hash,
                bytes.len() as i64,
                language.map_or(lang::PLAIN_TEXT, |l| l.name).to_string(),
                text.lines().count() as i64,
                chunks,
            )
            .with_graph(file_graph);
            Outcome::Parsed { candidate, version }
        }
        Err(e) => Outcome::Failed {
            candidate,
            error: format!("{e:#}"),
        },
    }
}

/// `branch`'s catalog and skipped files within `starts`.
fn catalog_within(
    store: &Store,
    branch: &str,
    root: &Path,
    starts: &[discover::Start],
) -> Result<(HashMap<String, CatalogEntry>, HashMap<String, SkippedEntry>)> {
    let (mut catalog, mut skipped) = (HashMap::new(), HashMap::new());
    for start in starts {
        let Some(dir) = discover::relative_path(root, start.path()) else {
            continue;
        };
        let covered = |path: &String| start.covers(root, path);
        catalog.extend(
            store
                .catalog_under(branch, &dir)?
                .into_iter()
                .filter(|(p, _)| covered(p)),
        );
        skipped.extend(
            store
                .skipped_under(branch, &dir)?
                .into_iter()
                .filter(|(p, _)| covered(p)),
        );
    }
    Ok((catalog, skipped))
}

/// The files to read (new, or changed in size or mtime since the catalog
/// saw them) and the paths gone (from disk, or now left out by name, within
/// the run's scope). Files that match their catalog entry count as
/// unchanged unread; those that match their skipped entry as skipped again.
fn compare_with_catalog(
    files: &[discover::Candidate],
    catalog: &HashMap<String, CatalogEntry>,
    skipped: &HashMap<String, SkippedEntry>,
    in_scope: &dyn Fn(&str) -> bool,
    report: &mut IndexReport,
) -> (Vec<discover::Candidate>, Vec<String>) {
    let mut seen: HashSet<&str> = HashSet::with_capacity(files.len());
    let mut changed = Vec::new();
    for cand in files {
        seen.insert(cand.rel_path.as_str());
        match catalog.get(&cand.rel_path) {
            Some(e) if e.mtime_ns == cand.mtime_ns && e.size == cand.size as i64 && e.mtime_ns != 0 => {
                report.unchanged += 1;
            }
            Some(_) => changed.push(cand.clone()),
            None => match skipped.get(&cand.rel_path) {
                Some(s) if s.matches(cand.size, cand.mtime_ns) => {
                    *report.skipped.entry(s.reason).or_default() += 1;
                }
                _ => changed.push(cand.clone()),
            },
        }
    }
    let unseen = catalog
        .keys()
        .chain(skipped.keys().filter(|p| !catalog.contains_key(*p)))
        .filter(|p| !seen.contains(p.as_str()) && in_scope(p))
        .cloned()
        .collect();
    (changed, unseen)
}

/// After the files are written: merges the lexical index, counts the totals
/// and the common terms, checks a whole run's writing and records the run.
fn finish_run(
    store: &Store,
    branch: &str,
    head: &git::Head,
    scoped: bool,
    bulk: bool,
    started: Instant,
    report: &mut IndexReport,
) -> Result<()> {
    tracing::info!("indexing: files written after {:.2} s", started.elapsed().as_secs_f64());
    let changes = report.parsed + report.removed;
    if bulk {
        store.set_lexical_automerge(DEFAULT_AUTOMERGE)?;
    }
    // Only a bulk load (automerge off) merges the whole lexical index: a
    // smaller run leaves merging to FTS5's automerge, as the watcher's do
    // (merging all of 800k chunks after one changed file took ~11 s).
    if changes > 0 && bulk {
        store.optimize_lexical()?;
        tracing::info!(
            "indexing: lexical index merged after {:.2} s",
            started.elapsed().as_secs_f64()
        );
    }
    if changes > 0 && !scoped {
        store.checkpoint()?;
    }
    if !scoped {
        fill_totals(store, branch, report)?;
    } else {
        // The per-language and chunk totals cost a join over the branch: the watcher needs neither.
        report.files = store.branch_file_count(branch)?;
    }
    // The chunk count is written with every batch that changes the chunks;
    // an index of an older ken, or one repaired by SQL, may still lack it.
    let all_chunks = match store.chunk_count_drift()? {
        Some(_) => store.store_chunk_count()?,
        None => store.counted_chunks()?,
    };
    // Whole runs recount the common terms when chunks changed since they
    // were counted (in this run or in one killed before it recounted); the
    // watcher's small runs do once the index has grown or shrunk by 5%.
    let counted_at = store.common_terms_stored_at()?;
    let drifted = counted_at.is_none_or(|n| (all_chunks - n).abs() * 20 > n);
    if counted_at.is_none() || (store.common_terms_stale()? && (!scoped || drifted)) {
        store.store_common_term_frequencies()?;
    }
    // A whole run that wrote checks the index it wrote into: damage found
    // here is repaired by the caller (`index_scoped`) instead of being left
    // behind (the quick check reads the whole file, vectors too).
    if changes > 0 && !scoped {
        let problems = store.integrity_problems(false)?;
        if !problems.is_empty() {
            return Err(anyhow::Error::new(store::Damage(problems.join("; "))));
        }
        tracing::info!("indexing: checked after {:.2} s", started.elapsed().as_secs_f64());
    }
    report.seconds = started.elapsed().as_secs_f64();
    store.set_meta(MetaKey::LastIndexedAt, &now_rfc3339())?;
    store.set_meta(MetaKey::Root, &report.root)?;
    store.set_meta(MetaKey::IndexedBranch, branch)?;
    if !scoped {
        // A scoped run's skip counts cover its folders only: `ken status` keeps the last whole run's.
        store.set_meta(MetaKey::LastIndexReport, &serde_json::to_string(&*report)?)?;
    }
    store.set_meta(MetaKey::HeadCommit, head.commit.as_deref().unwrap_or(""))?;
    Ok(())
}

/// What the writer thread is to do besides storing outcomes.
struct WritePlan<'a> {
    branch: &'a str,
    /// The catalog compared against (the branch's own, or the one it is seeded from).
    catalog: &'a HashMap<String, CatalogEntry>,
    /// The skipped files compared against (the same branch's as `catalog`).
    skipped: &'a HashMap<String, SkippedEntry>,
    batch_files: usize,
    run_start_ns: i64,
    /// Copy this branch's catalog first (a branch indexed for the first time).
    seed_from: Option<&'a str>,
    /// Catalog and skipped paths not found on disk.
    unseen: Vec<String>,
    reporter: &'a Reporter,
}

#[derive(Default)]
struct Written {
    removed: u64,
    parsed: u64,
    reused: u64,
    unchanged: u64,
    parsed_lines: u64,
    parsed_bytes: u64,
    skipped: SkipCounts,
    skipped_paths: Vec<String>,
    warnings: Vec<String>,
}

/// The single writer: stores outcomes in transactions of `batch_files` files;
/// the last one also removes what left the catalog.
fn write_outcomes(
    store: &mut Store,
    plan: &WritePlan,
    rx: mpsc::Receiver<Outcome>,
    progress: &mut Phase,
) -> Result<Written> {
    let (branch, catalog, run_start_ns) = (plan.branch, plan.catalog, plan.run_start_ns);
    let mut written = Written::default();
    let mut batch = Batch::begin(store)?;
    if let Some(from) = plan.seed_from {
        batch.copy_catalog(from, branch)?;
    }
    let mut in_batch = 0usize;
    // A file modified within the last two seconds may change again within the
    // same mtime tick; storing mtime 0 makes the next run re-read it.
    let trusted_mtime = |c: &Candidate| {
        if run_start_ns - c.mtime_ns < 2_000_000_000 {
            0
        } else {
            c.mtime_ns
        }
    };
    for outcome in rx {
        progress.inc(1);
        let stored = match outcome {
            Outcome::Parsed { candidate, version } => {
                written.parsed += 1;
                written.parsed_lines += version.line_count as u64;
                written.parsed_bytes += version.size as u64;
                Some((candidate, batch.insert_version(&version)?))
            }
            Outcome::Known {
                candidate,
                content_hash,
            } => {
                let unchanged = catalog
                    .get(&candidate.rel_path)
                    .is_some_and(|e| e.content_hash == content_hash);
                if unchanged {
                    written.unchanged += 1;
                } else {
                    written.reused += 1;
                }
                let file_id = batch
                    .find_version(&candidate.rel_path, content_hash)?
                    .context("a stored file version disappeared during indexing")?;
                Some((candidate, file_id))
            }
            Outcome::Skipped { candidate, reason } => {
                *written.skipped.entry(reason).or_default() += 1;
                // Recorded, so the next run neither reads it again nor takes it for a change.
                let mtime = trusted_mtime(&candidate);
                batch.set_skipped(branch, &candidate.rel_path, mtime, candidate.size as i64, reason)?;
                written.skipped_paths.push(candidate.rel_path);
                None
            }
            Outcome::Failed { candidate, error } => {
                written.warnings.push(format!("{}: {error}", candidate.rel_path));
                if plan.skipped.contains_key(&candidate.rel_path) {
                    batch.remove_skipped(branch, &candidate.rel_path)?;
                }
                written.skipped_paths.push(candidate.rel_path);
                None
            }
        };
        if let Some((candidate, file_id)) = stored {
            let mtime = trusted_mtime(&candidate);
            batch.set_catalog(branch, &candidate.rel_path, file_id, mtime, candidate.size as i64)?;
            if plan.skipped.contains_key(&candidate.rel_path) {
                batch.remove_skipped(branch, &candidate.rel_path)?;
            }
        }
        in_batch += 1;
        if in_batch >= plan.batch_files {
            batch.commit()?;
            batch = Batch::begin(store)?;
            in_batch = 0;
        }
    }
    // A branch switch is one transaction: cancelled, it leaves the catalog as it was.
    if plan.batch_files == usize::MAX && plan.reporter.is_cancelled() {
        return Ok(written);
    }
    // Paths gone from disk, or now skipped, leave the catalog; paths gone
    // from disk (or now left out by name) leave the skipped files.
    for path in plan.unseen.iter().chain(&written.skipped_paths) {
        if catalog.contains_key(path) {
            batch.remove_from_catalog(branch, path)?;
            written.removed += 1;
        }
    }
    for path in &plan.unseen {
        if plan.skipped.contains_key(path) {
            batch.remove_skipped(branch, path)?;
        }
    }
    batch.commit()?;
    Ok(written)
}

fn fill_totals(store: &Store, branch: &str, report: &mut IndexReport) -> Result<()> {
    let totals = BranchTotals::read(store, branch)?;
    report.files = totals.files;
    report.chunks = totals.chunks;
    report.languages = totals.languages;
    Ok(())
}

/// File, chunk and per-language counts of one branch's catalog.
pub struct BranchTotals {
    pub files: u64,
    pub chunks: u64,
    pub languages: BTreeMap<String, u64>,
}

impl BranchTotals {
    pub fn read(store: &Store, branch: &str) -> Result<BranchTotals> {
        Self::read_in(store, &store.outside_of(branch)?)
    }

    /// The totals of the branch `outside` was read for.
    pub fn read_in(store: &Store, outside: &crate::store::BranchOutside) -> Result<BranchTotals> {
        Ok(BranchTotals {
            files: store.branch_file_count(outside.branch())?,
            chunks: store.branch_chunk_count_in(outside)?,
            languages: store.branch_languages_in(outside)?,
        })
    }
}
