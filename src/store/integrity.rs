//! Checks of the index: SQLite's own ([`check_integrity`], with the lexical
//! index's and the stored texts' hashes when full), the rows one table has
//! that another no longer backs ([`Orphans`]), and the rebuild of a damaged
//! index ([`rebuild_damaged`]).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use rusqlite::{Connection, OpenFlags};

use super::faults::{explain, fault_of, first_line, install_damage_hint, probe, DamageHandled, Fault};
use super::lock::{lock_dir, WRITE_LOCK_TIMEOUT};
use super::open::{connect, connect_immutable, has_pending_wal};
use super::rebuild::{create_index, Salvaged};
use super::{content_hash, count, Store, DB_FILE};

impl Store {
    /// The problems `PRAGMA quick_check` (or `integrity_check` when `full`)
    /// finds in this index; empty when there are none. The quick check reads
    /// the whole file: 0.09-0.17 s for 29k chunks without vectors (50 MB).
    pub fn integrity_problems(&self, full: bool) -> Result<Vec<String>> {
        integrity_problems(&self.conn, full)
    }
}

/// The problems SQLite's check of the index in `dir` finds (`PRAGMA
/// quick_check`, or the slower `integrity_check` when `full`); empty when
/// there are none. With `full`, also the lexical index's own check and
/// whether each stored text still has the hash it is stored under. An
/// error when the index cannot be read for another reason than damage.
pub fn check_integrity(dir: &Path, full: bool) -> Result<Vec<String>> {
    install_damage_hint();
    let db = dir.join(DB_FILE);
    if !db.exists() {
        bail!("no index at {}; run `ken index` in the repository first", dir.display());
    }
    match integrity_of(&db, full) {
        Ok(problems) => Ok(problems),
        Err(e) if matches!(fault_of(&e), Some(Fault::Damaged | Fault::NotADatabase)) => Ok(vec![first_line(&e)]),
        Err(e) => Err(explain(dir, e)),
    }
}

/// [`check_integrity`] of the database `db`: an error when it cannot be
/// opened or checked at all.
pub(super) fn integrity_of(db: &Path, full: bool) -> Result<Vec<String>> {
    let _handled = DamageHandled::begin();
    let dir = db.parent().unwrap_or(Path::new("."));
    let conn = match connect(db, true) {
        Ok((conn, _)) => conn,
        Err(e) if probe(dir, db) == Some(Fault::ReadOnlyFolder) && !has_pending_wal(db) => {
            connect_immutable(db).map_err(|_| e)?.0
        }
        Err(e) => return Err(e),
    };
    let mut problems = integrity_problems(&conn, full)?;
    if full && problems.is_empty() {
        // FTS5's own check is an INSERT: run on a writable connection, then rolled back.
        if let Ok(rw) =
            Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        {
            let _ = rw.busy_timeout(Duration::from_secs(10));
            let checked = rw.execute_batch(
                "SAVEPOINT fts_check;
                 INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 0);",
            );
            let _ = rw.execute_batch("ROLLBACK TO fts_check; RELEASE fts_check;");
            if let Err(e) = checked {
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseCorrupt) {
                    problems.push(format!("the lexical index does not match itself: {e}"));
                }
            }
        }
        let mut stmt = conn.prepare("SELECT hash, text FROM contents")?;
        let mut rows = stmt.query([])?;
        let mut mismatched = 0u64;
        while let Some(row) = rows.next()? {
            let (hash, text): (i64, String) = (row.get(0)?, row.get(1)?);
            if content_hash(text.as_bytes()) != hash {
                mismatched += 1;
            }
        }
        if mismatched > 0 {
            problems.push(format!(
                "{mismatched} chunk texts no longer have the hash they are stored under"
            ));
        }
    }
    Ok(problems)
}

/// The rows of `PRAGMA quick_check` (or `integrity_check` when `full`) on
/// `conn` other than "ok".
pub(super) fn integrity_problems(conn: &Connection, full: bool) -> Result<Vec<String>> {
    let _handled = DamageHandled::begin();
    let pragma = if full {
        "PRAGMA integrity_check"
    } else {
        "PRAGMA quick_check"
    };
    let mut stmt = conn.prepare(pragma)?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut problems = Vec::new();
    for row in rows {
        let row = row?;
        if row != "ok" {
            problems.push(row);
        }
    }
    Ok(problems)
}

/// Rebuilds the damaged index in `dir` (under the writer lock), keeping
/// every vector that can be read ([`Salvaged`]); the files are indexed
/// again by the caller.
pub fn rebuild_damaged(dir: &Path) -> Result<Salvaged> {
    let _lock = lock_dir(dir, WRITE_LOCK_TIMEOUT)?;
    create_index(dir, Some(&dir.join(DB_FILE)))
}

/// Rows of one table that another no longer backs (what an interrupted
/// write of an older ken, or a change made by hand, may leave).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Orphans {
    /// Chunks whose file version is gone.
    ChunksWithoutFiles,
    /// Symbol names of chunks that are gone.
    SymbolsWithoutChunks,
    /// Chunks whose text is missing.
    ChunksWithoutText,
    /// Catalog entries pointing at missing file versions.
    CatalogWithoutFiles,
    /// File versions no branch uses (kept until the next index of their path).
    UnreferencedFileVersions,
    /// Vectors of text no chunk has any more.
    VectorsWithoutChunks,
}

impl Orphans {
    /// `(count, repair)`: the query counting them and the statements
    /// deleting them (empty: they cannot be repaired by deleting them).
    fn sql(self) -> (&'static str, &'static str) {
        match self {
            Orphans::ChunksWithoutFiles => (
                "SELECT count(*) FROM chunks WHERE file_id NOT IN (SELECT id FROM files)",
                "DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE file_id NOT IN (SELECT id FROM files));
                 DELETE FROM chunk_symbols WHERE chunk_id IN (SELECT id FROM chunks WHERE file_id NOT IN (SELECT id FROM files));
                 DELETE FROM chunks WHERE file_id NOT IN (SELECT id FROM files);",
            ),
            Orphans::SymbolsWithoutChunks => (
                "SELECT count(*) FROM chunk_symbols WHERE chunk_id NOT IN (SELECT id FROM chunks)",
                "DELETE FROM chunk_symbols WHERE chunk_id NOT IN (SELECT id FROM chunks);",
            ),
            Orphans::ChunksWithoutText => (
                "SELECT count(*) FROM chunks WHERE content_hash NOT IN (SELECT hash FROM contents)",
                "",
            ),
            Orphans::CatalogWithoutFiles => (
                "SELECT count(*) FROM catalog WHERE file_id NOT IN (SELECT id FROM files)",
                "DELETE FROM catalog WHERE file_id NOT IN (SELECT id FROM files);",
            ),
            Orphans::UnreferencedFileVersions => (
                "SELECT count(*) FROM files WHERE id NOT IN (SELECT file_id FROM catalog)",
                "",
            ),
            Orphans::VectorsWithoutChunks => (
                "SELECT count(*) FROM embeddings WHERE content_hash NOT IN (SELECT content_hash FROM chunks)",
                "DELETE FROM embeddings WHERE content_hash NOT IN (SELECT content_hash FROM chunks);",
            ),
        }
    }

    /// Whether deleting them repairs the index.
    pub fn repairable(self) -> bool {
        !self.sql().1.is_empty()
    }
}

impl Store {
    /// How many such rows the index has.
    pub fn count_orphans(&self, orphans: Orphans) -> Result<u64> {
        count(&self.conn, orphans.sql().0, [])
    }

    /// Deletes such rows (nothing for those that are not [`Orphans::repairable`]).
    pub fn delete_orphans(&self, orphans: Orphans) -> Result<()> {
        let repair = orphans.sql().1;
        if !repair.is_empty() {
            self.conn.execute_batch(repair)?;
        }
        Ok(())
    }

    /// Rows of the lexical index (one per chunk when it matches them).
    pub fn lexical_rows(&self) -> Result<u64> {
        count(&self.conn, "SELECT count(*) FROM chunks_fts", [])
    }
}
