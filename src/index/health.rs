//! `ken health` / `index_health_check`: consistency checks of an index, with
//! repairs for what can be repaired. Errors are inconsistencies (the index
//! could give wrong answers); warnings are staleness (files changed since the
//! last index, vectors still missing).

use std::path::Path;

use anyhow::Result;

use crate::index::freshness::{pending_changes, Pending};
use crate::index::IndexOptions;
use crate::source::discover::DiscoverOptions;
use crate::source::git;
use crate::store::vectors::{self, VectorIndex};
use crate::store::{self, MetaKey, Orphans, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Warning,
    Error,
}

#[derive(Debug, Clone)]
pub struct Finding {
    pub check: String,
    pub severity: Severity,
    pub count: u64,
    pub message: String,
    /// Whether `repair` fixed it.
    pub repaired: bool,
}

#[derive(Debug, Clone)]
pub struct HealthReport {
    pub healthy: bool,
    pub schema_version: i64,
    pub findings: Vec<Finding>,
}

/// (check, severity, counting SQL, repairing SQL, message)
const TABLE_CHECKS: &[(&str, Orphans, Severity, &str)] = &[
    (
        "chunks_without_files",
        Orphans::ChunksWithoutFiles,
        Severity::Error,
        "chunks whose file version is gone",
    ),
    (
        "symbols_without_chunks",
        Orphans::SymbolsWithoutChunks,
        Severity::Warning,
        "symbol names of chunks that are gone",
    ),
    (
        "chunks_without_text",
        Orphans::ChunksWithoutText,
        Severity::Error,
        "chunks whose text is missing (run `ken index` with a fresh index: delete .ken/)",
    ),
    (
        "catalog_without_files",
        Orphans::CatalogWithoutFiles,
        Severity::Error,
        "catalog entries pointing at missing file versions",
    ),
    (
        "unreferenced_file_versions",
        Orphans::UnreferencedFileVersions,
        Severity::Warning,
        "file versions no branch uses (kept until the next index of their path)",
    ),
    (
        "vectors_without_chunks",
        Orphans::VectorsWithoutChunks,
        Severity::Warning,
        "vectors of text no chunk has any more",
    ),
];

/// Checks the index in `index_dir` (of the folder `root`).
///
/// The database is checked first (`PRAGMA quick_check`, or the slower
/// `integrity_check` and the lexical index's own check when `full`). A
/// damaged database is reported as such; `repair` rebuilds it from the
/// files, keeping every vector that can be read (the same for a lexical
/// index that does not match the chunks). Then the tables are checked
/// against each other, the vectors against the model and the vector file,
/// the files against the disk.
///
/// What is derived and only behind (the vector file after an interrupted
/// embedding pass, the chunk count and the common terms' frequencies after
/// an interrupted run) is brought up to date whenever the index can be
/// written and no other process is writing it, with or without `repair`.
pub fn check(root: &Path, index_dir: &Path, repair: bool, full: bool) -> Result<HealthReport> {
    // Damage met here is this check's to report: SQLite's reports need no hint.
    let _handled = store::DamageHandled::begin();
    let db = index_dir.join("index.db");
    let mut findings = Vec::new();
    // A repair checks as fully as it can: the lexical index's damage escapes the quick check.
    let problems = store::check_integrity(index_dir, full || repair)?;
    let mut rebuilt = false;
    if !problems.is_empty() {
        let shown: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
        let what = format!("{} is damaged: {}", db.display(), shown.join("; "));
        if !repair {
            findings.push(Finding {
                check: "integrity".into(),
                severity: Severity::Error,
                count: problems.len() as u64,
                message: format!(
                    "{what}; `ken health --repair` rebuilds it from the files, keeping every vector it can read"
                ),
                repaired: false,
            });
            return Ok(HealthReport {
                healthy: false,
                schema_version: store::SCHEMA_VERSION,
                findings,
            });
        }
        let (kept, files) = rebuild(root, index_dir)?;
        rebuilt = true;
        findings.push(Finding {
            check: "integrity".into(),
            severity: Severity::Error,
            count: problems.len() as u64,
            message: format!("{what}; rebuilt from the files ({files} files): {}", kept.describe()),
            repaired: true,
        });
    }

    let mut reader = Store::open_for_read(index_dir)?;
    // Repairs write through this; without `repair`, it is opened when
    // something derived is to be brought up to date and no one else writes.
    let mut writer = if repair {
        let store = Store::open_for_write(index_dir)?;
        let lock = store.lock_for_write(store::WRITE_LOCK_TIMEOUT)?;
        Some((store, lock))
    } else {
        None
    };

    // A lexical index that does not match the chunks is rebuilt like a damaged database.
    let fts_rows = reader.lexical_rows()?;
    let chunk_rows = reader.counted_chunks()? as u64;
    if fts_rows != chunk_rows {
        let message = format!("{fts_rows} lexical rows for {chunk_rows} chunks");
        let repaired = repair && !rebuilt && {
            drop(writer.take());
            let (kept, files) = rebuild(root, index_dir)?;
            reader = Store::open_for_read(index_dir)?;
            let store = Store::open_for_write(index_dir)?;
            let lock = store.lock_for_write(store::WRITE_LOCK_TIMEOUT)?;
            writer = Some((store, lock));
            findings.push(Finding {
                check: "lexical_rows".into(),
                severity: Severity::Error,
                count: fts_rows.abs_diff(chunk_rows),
                message: format!("{message}; rebuilt from the files ({files} files): {}", kept.describe()),
                repaired: true,
            });
            true
        };
        if !repaired {
            findings.push(Finding {
                check: "lexical_rows".into(),
                severity: Severity::Error,
                count: fts_rows.abs_diff(chunk_rows),
                message: format!(
                    "{message}; `ken health --repair` rebuilds the index from the files, keeping its vectors"
                ),
                repaired: false,
            });
        }
    }

    check_tables(&reader, &writer, repair, &mut findings)?;

    check_statistics(&reader, index_dir, &mut writer, &mut findings)?;
    let branch = git::head(root).catalog_key();
    check_vectors(&reader, index_dir, &mut writer, repair, &branch, &mut findings)?;

    // Files changed on disk since the last index (what a re-index would do).
    let Pending { changed, deleted } = pending_changes(&reader, root, &branch, &DiscoverOptions::default())?;
    if changed + deleted > 0 {
        findings.push(Finding {
            check: "files_changed_since_indexing".into(),
            severity: Severity::Warning,
            count: changed + deleted,
            message: format!("{changed} files new or changed and {deleted} deleted since the last index (`ken index`)"),
            repaired: false,
        });
    }
    // Branches deleted from git: their catalogs (and what only they use) can go.
    let dead = crate::index::watch::dead_branches(&reader, root)?;
    if !dead.is_empty() {
        let repaired = match &mut writer {
            Some((w, _)) if repair => crate::index::watch::drop_branches(w, &dead).is_ok(),
            _ => false,
        };
        findings.push(Finding {
            check: "deleted_branches".into(),
            severity: Severity::Warning,
            count: dead.len() as u64,
            message: format!("catalogs of branches git no longer has: {}", dead.join(", ")),
            repaired,
        });
    }
    let healthy = findings.iter().all(|f| f.severity < Severity::Error || f.repaired);
    Ok(HealthReport {
        healthy,
        schema_version: store::SCHEMA_VERSION,
        findings,
    })
}

/// Rebuilds the index from the files, keeping the vectors that can be read:
/// what was kept, and how many files the branch has now.
fn rebuild(root: &Path, index_dir: &Path) -> Result<(store::Salvaged, u64)> {
    let cannot = |e: anyhow::Error| {
        e.context(format!(
            "cannot rebuild the index at {}; delete that folder and run `ken index`",
            index_dir.display()
        ))
    };
    let kept = store::rebuild_damaged(index_dir).map_err(cannot)?;
    let report = crate::index::index(root, index_dir, &IndexOptions::default()).map_err(cannot)?;
    Ok((kept, report.files))
}

/// How [`writer_elsewhere`]'s reason starts.
const WRITING: &str = "an embedding pass or an index run is writing";

/// Rows that lost what they belong to (orphans), deleted by a repair where
/// that is safe.
fn check_tables(
    reader: &Store,
    writer: &Option<(Store, store::WriteLock)>,
    repair: bool,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    for (name, orphans, severity, message) in TABLE_CHECKS {
        let count = reader.count_orphans(*orphans)?;
        if count == 0 {
            continue;
        }
        let repaired = match writer {
            Some((w, _)) if repair && orphans.repairable() => w.delete_orphans(*orphans).is_ok(),
            _ => false,
        };
        findings.push(Finding {
            check: name.to_string(),
            severity: *severity,
            count,
            message: message.to_string(),
            repaired,
        });
    }
    Ok(())
}

/// The chunk count and the common terms' frequencies, behind the chunks
/// after an interrupted run: counted again.
fn check_statistics(
    reader: &Store,
    index_dir: &Path,
    writer: &mut Option<(Store, store::WriteLock)>,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    // Statistics derived from the chunks, behind after an interrupted run.
    let drift = reader.chunk_count_drift()?;
    if drift.is_some() || reader.common_terms_stale()? {
        let count = drift.map_or(1, |(stored, counted)| stored.unwrap_or(0).abs_diff(counted));
        let done = bring_up_to_date(index_dir, writer, |w| w.store_common_term_frequencies().map(drop));
        findings.push(match done {
            Ok(()) => Finding {
                check: "statistics".into(),
                severity: Severity::Info,
                count,
                message: "the chunk count and the common terms' frequencies were behind the chunks (an \
                          interrupted or a watcher's run): counted again"
                    .into(),
                repaired: true,
            },
            Err(why) => Finding {
                check: "statistics".into(),
                severity: Severity::Warning,
                count,
                message: format!(
                    "the chunk count or the common terms' frequencies are behind the chunks ({why}); the next \
                     `ken index` or `ken health` counts them again"
                ),
                repaired: false,
            },
        });
    }

    Ok(())
}

/// The vectors: their length, the chunks still without one, and the HNSW
/// file derived from them (brought up to date when it is behind).
fn check_vectors(
    reader: &Store,
    index_dir: &Path,
    writer: &mut Option<(Store, store::WriteLock)>,
    repair: bool,
    branch: &str,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    if let Some(model) = reader.meta(MetaKey::EmbeddingModel)? {
        let dims: usize = reader.meta_parsed(MetaKey::EmbeddingDimensions)?.unwrap_or(0);
        let wrong_size = reader.vectors_of_wrong_size(&model, dims)?;
        if wrong_size > 0 {
            let repaired = match &*writer {
                Some((w, _)) if repair => w.delete_vectors_of_wrong_size(&model, dims).is_ok(),
                _ => false,
            };
            findings.push(Finding {
                check: "dimension_mismatch".into(),
                severity: Severity::Error,
                count: wrong_size,
                message: format!("vectors whose length is not the model's {dims} dimensions"),
                repaired,
            });
        }
        let missing = reader.branch_contents_without_vectors(branch, &model)?;
        if missing > 0 {
            findings.push(Finding {
                check: "chunks_without_vectors".into(),
                severity: Severity::Warning,
                count: missing,
                message: "chunk contents not embedded yet (`ken embed` or `ken index`)".into(),
                repaired: false,
            });
        }
        let rows = reader.vector_count(&model)?;
        let in_file = VectorIndex::open(reader, &model, dims)
            .ok()
            .flatten()
            .map_or(0, |v| v.len() as u64);
        if in_file != rows {
            // The file is derived from the rows: an embedding pass publishes
            // it as it goes, and one killed before it did leaves it behind.
            let done = match writer_elsewhere(index_dir, writer) {
                Some(holder) => Err(holder),
                None => bring_up_to_date(index_dir, writer, |w| {
                    let n = VectorIndex::sync(w, &model, dims, vectors::configured_quantization())?;
                    anyhow::ensure!(n as u64 == rows, "{n} vectors of {rows} could be added");
                    Ok(())
                }),
            };
            let message = format!("the vector file held {in_file} vectors, the index {rows}");
            findings.push(match done {
                Ok(()) => Finding {
                    check: "vector_file".into(),
                    severity: Severity::Warning,
                    count: rows.abs_diff(in_file),
                    message: format!(
                        "{message} (it follows the stored vectors at each embedding pass, and an interrupted \
                         pass leaves it behind): brought up to date"
                    ),
                    repaired: true,
                },
                Err(why) if why.starts_with(WRITING) => Finding {
                    check: "vector_file".into(),
                    severity: Severity::Warning,
                    count: rows.abs_diff(in_file),
                    message: format!("{message}; {why}: it publishes them as it goes"),
                    repaired: false,
                },
                Err(why) => Finding {
                    check: "vector_file".into(),
                    severity: Severity::Error,
                    count: rows.abs_diff(in_file),
                    message: format!("{message}; it cannot be brought up to date: {why}"),
                    repaired: false,
                },
            });
        }
    }

    Ok(())
}

/// Who else is writing the index (unless this check holds the lock itself).
fn writer_elsewhere(index_dir: &Path, writer: &Option<(Store, store::WriteLock)>) -> Option<String> {
    if writer.is_some() {
        return None;
    }
    store::writer_of(index_dir).map(|holder| format!("{WRITING} it ({holder})"))
}

/// Runs `work` on the index opened for writing under the writer lock: the
/// check's own (`repair`), else one taken now if no other process holds
/// it. `Err` says why it could not run or what failed.
fn bring_up_to_date(
    index_dir: &Path,
    writer: &mut Option<(Store, store::WriteLock)>,
    work: impl FnOnce(&mut Store) -> Result<()>,
) -> std::result::Result<(), String> {
    if writer.is_none() {
        if let Some(holder) = writer_elsewhere(index_dir, writer) {
            return Err(holder);
        }
        let opened = Store::open_for_write(index_dir)
            .and_then(|store| Ok((store.lock_for_write(std::time::Duration::ZERO)?, store)));
        match opened {
            Ok((lock, store)) => *writer = Some((store, lock)),
            Err(e) => return Err(format!("{e:#}")),
        }
    }
    let (store, _) = writer.as_mut().expect("opened above");
    work(store).map_err(|e| format!("{e:#}"))
}
