//! The per-user vector cache: a SQLite database of its own (not the
//! index's), shared by every index of the user.

use std::path::Path;

use rusqlite::params;

use super::vectors;

/// A per-user SQLite cache of vectors keyed by the embedder (its id without
/// the recipe's version) and the hash of the exact text embedded, shared by
/// every index of the user (clones, worktrees, vendored copies). Best
/// effort: if it cannot be opened or written, embedding goes on without it.
/// `KEN_SHARED_CACHE=0` disables it.
pub struct SharedCache {
    conn: rusqlite::Connection,
}

impl SharedCache {
    /// Opens (creating it if needed) the cache database at `path`.
    pub fn open(path: &Path) -> Option<SharedCache> {
        if !crate::config::settings().shared_cache {
            return None;
        }
        std::fs::create_dir_all(path.parent()?).ok()?;
        let conn = rusqlite::Connection::open(path).ok()?;
        super::open::plan_once(&conn).ok()?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).ok()?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, text_hash INTEGER NOT NULL,
                 vector BLOB NOT NULL, PRIMARY KEY (model, text_hash)) WITHOUT ROWID;",
        )
        .ok()?;
        Some(SharedCache { conn })
    }

    /// The vector of the text hashed `text_hash` by the embedder `model` (its cache key).
    pub fn get(&self, model: &str, text_hash: i64) -> Option<Vec<f32>> {
        self.conn
            .prepare_cached("SELECT vector FROM vectors WHERE model = ?1 AND text_hash = ?2")
            .ok()?
            .query_row(params![model, text_hash], |r| r.get::<_, Vec<u8>>(0))
            .ok()
            .map(|b| vectors::decode(&b))
    }

    pub fn put(&self, model: &str, text_hash: i64, vector: &[f32]) {
        if let Ok(mut stmt) = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO vectors (model, text_hash, vector) VALUES (?1, ?2, ?3)")
        {
            let _ = stmt.execute(params![model, text_hash, vectors::encode(vector)]);
        }
    }
}
