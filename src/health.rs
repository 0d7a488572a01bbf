//! `ken health` / `index_health_check`: consistency checks of an index, with
//! repairs for what can be repaired. Errors are inconsistencies (the index
//! could give wrong answers); warnings are staleness (files changed since the
//! last index, vectors still missing).

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::discover::DiscoverOptions;
use crate::freshness::{pending_changes, Pending};
use crate::git;
use crate::store::{self, Store};
use crate::vectors::{self, VectorIndex};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Finding {
    pub check: String,
    pub severity: Severity,
    pub count: u64,
    pub message: String,
    /// Whether `repair` fixed it.
    pub repaired: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HealthReport {
    pub healthy: bool,
    pub schema_version: i64,
    pub findings: Vec<Finding>,
}

/// (check, severity, counting SQL, repairing SQL, message)
const TABLE_CHECKS: &[(&str, Severity, &str, &str, &str)] = &[
    (
        "chunks_without_files",
        Severity::Error,
        "SELECT count(*) FROM chunks WHERE file_id NOT IN (SELECT id FROM files)",
        "DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE file_id NOT IN (SELECT id FROM files));
         DELETE FROM chunk_symbols WHERE chunk_id IN (SELECT id FROM chunks WHERE file_id NOT IN (SELECT id FROM files));
         DELETE FROM chunks WHERE file_id NOT IN (SELECT id FROM files);",
        "chunks whose file version is gone",
    ),
    (
        "symbols_without_chunks",
        Severity::Warning,
        "SELECT count(*) FROM chunk_symbols WHERE chunk_id NOT IN (SELECT id FROM chunks)",
        "DELETE FROM chunk_symbols WHERE chunk_id NOT IN (SELECT id FROM chunks);",
        "symbol names of chunks that are gone",
    ),
    (
        "chunks_without_text",
        Severity::Error,
        "SELECT count(*) FROM chunks WHERE content_hash NOT IN (SELECT hash FROM contents)",
        "",
        "chunks whose text is missing (run `ken index` with a fresh index: delete .ken/)",
    ),
    (
        "catalog_without_files",
        Severity::Error,
        "SELECT count(*) FROM catalog WHERE file_id NOT IN (SELECT id FROM files)",
        "DELETE FROM catalog WHERE file_id NOT IN (SELECT id FROM files);",
        "catalog entries pointing at missing file versions",
    ),
    (
        "unreferenced_file_versions",
        Severity::Warning,
        "SELECT count(*) FROM files WHERE id NOT IN (SELECT file_id FROM catalog)",
        "",
        "file versions no branch uses (kept until the next index of their path)",
    ),
    (
        "vectors_without_chunks",
        Severity::Warning,
        "SELECT count(*) FROM embeddings WHERE content_hash NOT IN (SELECT content_hash FROM chunks)",
        "DELETE FROM embeddings WHERE content_hash NOT IN (SELECT content_hash FROM chunks);",
        "vectors of text no chunk has any more",
    ),
];

pub fn check(root: &Path, index_dir: &Path, repair: bool) -> Result<HealthReport> {
    let mut store = if repair {
        Store::open_for_write(index_dir)?
    } else {
        Store::open_for_read(index_dir)?
    };
    let _lock = if repair {
        Some(store.lock_for_write(std::time::Duration::from_secs(120))?)
    } else {
        None
    };
    let conn = &store.conn;
    let mut findings = Vec::new();
    for (name, severity, count_sql, repair_sql, message) in TABLE_CHECKS {
        let count = store::count(conn, count_sql, [])?;
        if count == 0 {
            continue;
        }
        let repaired = repair && !repair_sql.is_empty() && conn.execute_batch(repair_sql).is_ok();
        findings.push(Finding {
            check: name.to_string(),
            severity: *severity,
            count,
            message: message.to_string(),
            repaired,
        });
    }
    let fts_rows = store::count(conn, "SELECT count(*) FROM chunks_fts", [])?;
    let chunk_rows = store::count(conn, "SELECT count(*) FROM chunks", [])?;
    if fts_rows != chunk_rows {
        findings.push(Finding {
            check: "lexical_rows".into(),
            severity: Severity::Error,
            count: fts_rows.abs_diff(chunk_rows),
            message: format!("{fts_rows} lexical rows for {chunk_rows} chunks (delete .ken/ and run `ken index`)"),
            repaired: false,
        });
    }

    let branch = git::head(root).catalog_key();
    if let Some(model) = store.meta("embedding_model")? {
        let dims: usize = store
            .meta("embedding_dimensions")?
            .and_then(|d| d.parse().ok())
            .unwrap_or(0);
        let wrong_size = store::count(
            conn,
            "SELECT count(*) FROM embeddings WHERE model = ?1 AND length(vector) != ?2",
            rusqlite::params![model, (dims * 4) as i64],
        )?;
        if wrong_size > 0 {
            let repaired = repair
                && conn
                    .execute(
                        "DELETE FROM embeddings WHERE model = ?1 AND length(vector) != ?2",
                        rusqlite::params![model, (dims * 4) as i64],
                    )
                    .is_ok();
            findings.push(Finding {
                check: "dimension_mismatch".into(),
                severity: Severity::Error,
                count: wrong_size,
                message: format!("vectors whose length is not the model's {dims} dimensions"),
                repaired,
            });
        }
        let missing = store::count(
            conn,
            "SELECT count(DISTINCT c.content_hash) FROM chunks c JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.content_hash = c.content_hash AND e.model = ?2)",
            rusqlite::params![branch, model],
        )?;
        if missing > 0 {
            findings.push(Finding {
                check: "chunks_without_vectors".into(),
                severity: Severity::Warning,
                count: missing,
                message: "chunk contents not embedded yet (`ken embed` or `ken index`)".into(),
                repaired: false,
            });
        }
        let rows = store::count(conn, "SELECT count(*) FROM embeddings WHERE model = ?1", [&model])?;
        let in_file = VectorIndex::open(&store, &model, dims)
            .ok()
            .flatten()
            .map_or(0, |v| v.len() as u64);
        if in_file != rows {
            let repaired = repair
                && VectorIndex::sync(&store, &model, dims, vectors::Quantization::from_env()?)
                    .is_ok_and(|n| n as u64 == rows);
            findings.push(Finding {
                check: "vector_file".into(),
                severity: Severity::Error,
                count: rows.abs_diff(in_file),
                message: format!("the vector file holds {in_file} vectors, the index {rows}"),
                repaired,
            });
        }
    }

    // Files changed on disk since the last index (what a re-index would do).
    let Pending { changed, deleted } = pending_changes(&store, root, &branch, &DiscoverOptions::default())?;
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
    let dead = crate::watch::dead_branches(&store, root)?;
    if !dead.is_empty() {
        let repaired = repair && crate::watch::drop_branches(&mut store, &dead).is_ok();
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
