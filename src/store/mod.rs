//! The on-disk index: one SQLite database (WAL) under `<root>/.ken/`, and
//! the only place that knows its tables. Every other module reads and
//! writes it through the methods of [`Store`] and [`Batch`].
//!
//! Layout, chosen for what comes after lexical search:
//! - `files` holds file *versions* (path + content hash), so two branches that
//!   differ in one file share every other version and its chunks;
//! - `catalog` maps a branch to the version of each path it has;
//! - `chunks` belong to a file version; their text lives once per distinct
//!   content in `contents` (keyed by xxh3), where embeddings are also keyed;
//! - `chunks_fts` is a contentless FTS5 table of pre-tokenized terms whose rowid
//!   is the chunk id;
//! - `skipped_files` lists, per branch, the files read and left out for their
//!   content (generated, binary...), so they are neither read again nor taken
//!   for changes while their size and mtime stay the same;
//! - `symbols` and `refs` are the code graph's rows of a file version.
//!
//! Every change happens in a transaction that leaves these tables consistent.
//!
//! What each file owns:
//! - [`schema`](self::schema): every table, the schema version, the in-place upgrades;
//! - `open`: opening for reading or writing, creating, replacing;
//! - `rebuild`: building an index anew, with what can be read of the old one;
//! - `lock`: the writer lock ([`WRITE_LOCK_TIMEOUT`]);
//! - `faults`: what stops the index from being read or written, said plainly;
//! - `integrity`: SQLite's checks, orphaned rows, the rebuild of a damaged index;
//! - [`meta`]: the `meta` table and its keys ([`MetaKey`]);
//! - [`write`]: the indexing transaction ([`Batch`]);
//! - [`catalog`]: reads of catalogs, file versions and chunks;
//! - [`lexical`]: the lexical index's upkeep and statistics;
//! - [`lookup`]: the reads a search makes per query (matches, filters, chunk rows);
//! - [`bm25`]: the ranking function search registers;
//! - [`graph`]: the code graph's rows and their reads;
//! - [`embeddings`]: the vectors' rows;
//! - [`vectors`]: the HNSW file derived from them;
//! - [`adapter`]: the query adapter's rows;
//! - [`cache`]: the per-user vector cache (a database of its own);
//! - [`snapshot`]: the shared index file (`ken index --export` / `--import`).
//! - [`engine`]: the shared search engine (PostgreSQL + pgvector), its SQL
//!   and connection; [`pushed`]: the reads a push to it makes.

pub mod adapter;
pub mod bm25;
pub mod cache;
pub mod catalog;
pub mod embeddings;
pub mod engine;
mod faults;
pub mod graph;
mod integrity;
pub mod lexical;
mod lock;
pub mod lookup;
pub mod meta;
mod open;
pub use open::{index_maps, populate_maps};
pub mod pushed;
mod rebuild;
mod schema;
pub mod snapshot;
pub mod vectors;
pub mod write;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Result;
use rusqlite::Connection;

pub use catalog::{parse_skip_reason, skip_reason_key, BranchOutside, CatalogEntry, SkippedEntry};
pub use faults::{explain, fault_of, probe, Damage, DamageHandled, Fault};
pub use integrity::{check_integrity, rebuild_damaged, Orphans};
pub use lock::{writer_of, WriteLock, WRITE_LOCK_TIMEOUT};
pub use meta::MetaKey;
pub use rebuild::Salvaged;
pub use schema::SCHEMA_VERSION;
pub use write::{Batch, NewFileVersion, PreparedChunk};

pub const INDEX_DIR_NAME: &str = ".ken";
const DB_FILE: &str = "index.db";
const LOCK_FILE: &str = "write.lock";

/// Where the index of `root` lives.
pub fn index_dir_for(root: &Path) -> PathBuf {
    root.join(INDEX_DIR_NAME)
}

/// Whether `dir` holds an index database (of any version).
pub fn has_index(dir: &Path) -> bool {
    dir.join(DB_FILE).exists()
}

/// An open index.
pub struct Store {
    /// The database; only `src/store/` reads it.
    conn: Connection,
    pub dir: PathBuf,
    /// What `ken_bm25` reads and records on this connection.
    bm25: std::sync::Arc<bm25::Bm25Slot>,
    /// What `ken_path_matches` lets through on this connection.
    path_filter: lookup::PathFilterSlot,
}

impl Store {
    /// Size of the index files on disk, in bytes.
    pub fn disk_size(&self) -> u64 {
        fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Folds the WAL back into the database after a bulk load.
    pub fn checkpoint(&self) -> Result<()> {
        self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
        Ok(())
    }
}

pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    format_rfc3339(secs)
}

/// UTC timestamp of `secs` since the epoch, e.g. `2026-11-22T03:45:00Z`.
pub fn format_rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}
/// Runs a `SELECT count(*)`-style query that yields one non-negative integer.
fn count(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<u64> {
    let n: i64 = conn.query_row(sql, params, |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// Rows of (name, count) from a `GROUP BY` query.
fn counts_by(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<std::collections::BTreeMap<String, u64>> {
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map(params, |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// xxh3 of `bytes`, as stored in the index.
pub fn content_hash(bytes: &[u8]) -> i64 {
    xxhash_rust::xxh3::xxh3_64(bytes) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    /// The files under `dir` (recursively) that reach a store's connection.
    fn reaching_the_connection(dir: &Path, found: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                reaching_the_connection(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path).unwrap();
                let reaches = text.match_indices(".conn").any(|(at, _)| {
                    let next = text[at + 5..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if reaches {
                    found.push(path.display().to_string());
                }
            }
        }
    }

    /// A connection of each kind to one new index in `dir`.
    fn writer_and_reader(dir: &Path) -> [Store; 2] {
        drop(Store::open_for_write(dir).unwrap());
        [Store::open_for_write(dir).unwrap(), Store::open_for_read(dir).unwrap()]
    }

    #[test]
    fn a_cached_statement_is_compiled_once() {
        let dir = tempfile::tempdir().unwrap();
        for store in writer_and_reader(dir.path()) {
            // The shape of the search's row reads: a join on a bound text and a bound id.
            let sql = "SELECT k.path FROM chunks c JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
                       WHERE c.id = ?2";
            for id in 0..20 {
                let mut stmt = store.conn.prepare_cached(sql).unwrap();
                stmt.query_map(rusqlite::params!["main", id], |r| r.get::<_, String>(0))
                    .unwrap()
                    .for_each(drop);
            }
            let stmt = store.conn.prepare_cached(sql).unwrap();
            assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
        }
    }

    #[test]
    fn a_search_sets_its_path_filter_without_recompiling_the_statements() {
        let dir = tempfile::tempdir().unwrap();
        for store in writer_and_reader(dir.path()) {
            let passes = |path: &str| -> bool {
                let mut stmt = store.conn.prepare_cached("SELECT ken_path_matches(?1)").unwrap();
                stmt.query_row([path], |r| r.get(0)).unwrap()
            };
            let read_a_row = || {
                let sql = "SELECT k.path FROM chunks c JOIN catalog k ON k.file_id = c.file_id WHERE c.id = ?1";
                let mut stmt = store.conn.prepare_cached(sql).unwrap();
                stmt.query_map([1], |r| r.get::<_, String>(0)).unwrap().for_each(drop);
                stmt.get_status(rusqlite::StatementStatus::RePrepare)
            };
            assert!(passes("src/a.rs"), "no filter lets every path through");
            read_a_row();
            for round in 0..3 {
                store.set_path_filter(Some(Box::new(|path: &str| path.ends_with(".go"))));
                assert!(!passes("src/a.rs") && passes("cmd/b.go"), "round {round}");
                store.set_path_filter(None);
                assert!(passes("src/a.rs"), "round {round}");
            }
            // Registering the function per search expired every statement:
            // each search compiled its statements again.
            assert_eq!(read_a_row(), 0, "statements are compiled once");
        }
    }

    #[test]
    fn readers_and_writers_map_the_file() {
        let dir = tempfile::tempdir().unwrap();
        for store in writer_and_reader(dir.path()) {
            let pragma = |name: &str| -> i64 {
                store
                    .conn
                    .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
                    .unwrap()
            };
            // Pages come from the memory map, not a read call each.
            assert!(pragma("mmap_size") >= 1 << 30, "mmap_size {}", pragma("mmap_size"));
        }
    }

    /// Minor page faults this thread has taken.
    #[cfg(target_os = "linux")]
    fn thread_faults() -> i64 {
        // SAFETY: getrusage writes the struct it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_populated_map_takes_no_fault_on_a_first_read() {
        let dir = tempfile::tempdir().unwrap();
        {
            let writer = Store::open_for_write(dir.path()).unwrap();
            writer
                .conn
                .execute_batch(
                    "CREATE TABLE filler (b BLOB);
                     WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8000)
                     INSERT INTO filler SELECT randomblob(3000) FROM n;",
                )
                .unwrap();
            writer.checkpoint().unwrap();
        }
        let file = std::fs::metadata(dir.path().join(DB_FILE)).unwrap().len();
        // SQLite maps the file on a connection's first read.
        let mapped = || {
            let store = Store::open_for_read(dir.path()).unwrap();
            store
                .conn
                .query_row("SELECT count(*) FROM meta", [], |_| Ok(()))
                .unwrap();
            store
        };
        let faults_of_a_scan = |store: &Store| -> i64 {
            let before = thread_faults();
            let sql = "SELECT count(*) FROM filler WHERE substr(b, 3000, 1) IS NOT NULL";
            let rows: i64 = store.conn.query_row(sql, [], |r| r.get(0)).unwrap();
            assert_eq!(rows, 8000);
            thread_faults() - before
        };
        let other = mapped();
        let before = index_maps(dir.path());
        assert_eq!(before.len(), 1, "{before:?}");
        let own = mapped();
        let new: Vec<_> = index_maps(dir.path())
            .into_iter()
            .filter(|m| !before.contains(m))
            .collect();
        assert_eq!(new.len(), 1, "one map a connection");
        assert!(populate_maps(&new) as u64 >= file, "the whole file is mapped in");
        let populated = faults_of_a_scan(&own);
        let cold = faults_of_a_scan(&other);
        assert!(cold >= 50, "a first scan of a fresh map faults: {cold}");
        assert!(populated * 4 < cold, "{populated} faults populated against {cold}");
    }

    #[test]
    fn only_search_reaches_the_connection() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        reaching_the_connection(&src, &mut found);
        let outside: Vec<&String> = found
            .iter()
            .filter(|p| !p.contains("/src/store/") && !p.contains("/src/search/"))
            .collect();
        assert!(outside.is_empty(), "the store's connection is used in {outside:?}");
    }
}
