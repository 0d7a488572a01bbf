//! The on-disk index: one SQLite database (WAL) under `<root>/.ken/`.
//!
//! Layout, chosen for what comes after lexical search:
//! - `files` holds file *versions* (path + content hash), so two branches that
//!   differ in one file share every other version and its chunks;
//! - `catalog` maps a branch to the version of each path it has;
//! - `chunks` belong to a file version; their text lives once per distinct
//!   content in `contents` (keyed by xxh3), where embeddings will also be keyed;
//! - `chunks_fts` is a contentless FTS5 table of pre-tokenized terms whose rowid
//!   is the chunk id;
//! - `skipped_files` lists, per branch, the files read and left out for their
//!   content (generated, binary...), so they are neither read again nor taken
//!   for changes while their size and mtime stay the same.
//!
//! Every change happens in a transaction that leaves these tables consistent.

pub mod bm25;
pub mod graph;
pub mod vectors;

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};

use crate::source::chunk::Chunk;
use crate::source::discover::SkipReason;
use crate::source::lexical;

/// Bumped whenever the schema or the meaning of stored data changes. An
/// index of an older version is upgraded in place by [`MIGRATIONS`] when a
/// chain of steps leads from its version to this one; any other is rebuilt.
pub const SCHEMA_VERSION: i64 = 6;

/// The steps that upgrade an index in place, oldest first: `(from, sql)`
/// turns an index of version `from` into one of version `from + 1`. Only
/// additive changes (new tables, new indexes) belong here, so that what an
/// index holds (its vectors above all) is kept. A change to the meaning of
/// stored data bumps [`SCHEMA_VERSION`] without a step: older indexes are
/// then rebuilt.
const MIGRATIONS: &[(i64, &str)] = &[(4, SKIPPED_FILES_SCHEMA), (5, graph::IMPORT_MODULES_INDEX)];

/// Added in version 5. `mtime_ns` is 0 when the file was too recent to trust
/// its mtime (as in `catalog`); `reason` is the [`SkipReason`]'s key
/// ([`skip_reason_key`]).
const SKIPPED_FILES_SCHEMA: &str = r#"
CREATE TABLE skipped_files (
    branch TEXT NOT NULL,
    path TEXT NOT NULL,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (branch, path)
) WITHOUT ROWID;
"#;

pub const INDEX_DIR_NAME: &str = ".ken";
const DB_FILE: &str = "index.db";
const LOCK_FILE: &str = "write.lock";

const SCHEMA: &str = r#"
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    content_hash INTEGER NOT NULL,
    size INTEGER NOT NULL,
    language TEXT NOT NULL,
    line_count INTEGER NOT NULL,
    UNIQUE (path, content_hash)
);
CREATE TABLE contents (hash INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files (id),
    content_hash INTEGER NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    start_byte INTEGER NOT NULL,
    end_byte INTEGER NOT NULL,
    kind TEXT NOT NULL,
    symbol TEXT,
    context TEXT
);
CREATE INDEX chunks_by_file ON chunks (file_id);
CREATE INDEX chunks_by_content ON chunks (content_hash);
-- The names a chunk defines (several when tiny definitions are packed), as
-- `lexical::joined_key`, for exact symbol matches.
CREATE TABLE chunk_symbols (
    key TEXT NOT NULL,
    chunk_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL
);
CREATE INDEX chunk_symbols_by_key ON chunk_symbols (key);
CREATE TABLE catalog (
    branch TEXT NOT NULL,
    path TEXT NOT NULL,
    file_id INTEGER NOT NULL REFERENCES files (id),
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    PRIMARY KEY (branch, path)
) WITHOUT ROWID;
CREATE INDEX catalog_by_file ON catalog (file_id);
CREATE VIRTUAL TABLE chunks_fts USING fts5 (
    symbol, path, body,
    content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 0'
);
CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab (chunks_fts, 'row');
CREATE TABLE embeddings (
    id INTEGER PRIMARY KEY,
    content_hash INTEGER NOT NULL,
    model TEXT NOT NULL,
    vector BLOB NOT NULL,
    UNIQUE (content_hash, model)
);
"#;

/// Where the index of `root` lives.
pub fn index_dir_for(root: &Path) -> PathBuf {
    root.join(INDEX_DIR_NAME)
}

/// Whether `dir` holds an index database (of any version).
pub fn has_index(dir: &Path) -> bool {
    dir.join(DB_FILE).exists()
}

pub struct Store {
    pub conn: Connection,
    pub dir: PathBuf,
}

/// A path's entry in a branch's catalog.
#[derive(Debug, Clone, Copy)]
pub struct CatalogEntry {
    pub file_id: i64,
    pub mtime_ns: i64,
    pub size: i64,
    pub content_hash: i64,
}

/// A file of a branch that was read and left out for its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedEntry {
    pub mtime_ns: i64,
    pub size: i64,
    pub reason: SkipReason,
}

impl SkippedEntry {
    /// Whether a file of this size and mtime is the one that was skipped,
    /// by size and a trusted (non-zero) mtime alone, so it is not read again.
    /// An unreadable file never is: it may have become readable with no
    /// change of mtime (a chmod), so it is tried again.
    pub fn matches(&self, size: u64, mtime_ns: i64) -> bool {
        self.reason != SkipReason::Unreadable
            && self.mtime_ns != 0
            && self.mtime_ns == mtime_ns
            && self.size == size as i64
    }
}

/// The stable text key of a skip reason in the index (its serde name, e.g.
/// `generated`, `invalid_utf8`).
pub fn skip_reason_key(reason: SkipReason) -> String {
    match serde_json::to_value(reason) {
        Ok(serde_json::Value::String(key)) => key,
        _ => unreachable!("a SkipReason serializes as a string"),
    }
}

/// The skip reason of a key written by [`skip_reason_key`]; `None` for a key
/// this ken does not know.
pub fn parse_skip_reason(key: &str) -> Option<SkipReason> {
    serde_json::from_value(serde_json::Value::String(key.to_string())).ok()
}

/// A parsed file ready to be stored.
pub struct NewFileVersion {
    pub path: String,
    pub content_hash: i64,
    pub size: i64,
    pub language: String,
    pub line_count: i64,
    pub chunks: Vec<PreparedChunk>,
    /// Lexical terms of the path, shared by the file's chunks.
    pub path_terms: String,
    /// Symbols and references for the code graph (languages with a `tags.scm`).
    pub graph: Option<crate::source::extract::FileGraph>,
}

/// A chunk with everything the writer stores already computed, so the
/// single writer thread only inserts (hashing and term extraction run on the
/// parallel workers).
pub struct PreparedChunk {
    pub chunk: Chunk,
    pub content_hash: i64,
    pub symbol_keys: Vec<String>,
    pub symbol_terms: String,
    pub body_terms: String,
}

impl PreparedChunk {
    pub fn new(chunk: Chunk) -> PreparedChunk {
        let mut symbol_terms = String::new();
        for symbol in &chunk.symbols {
            lexical::index_terms(&symbol.name, &mut symbol_terms);
        }
        let mut body_terms = String::new();
        if let Some(context) = &chunk.context {
            lexical::index_terms(context, &mut body_terms);
        }
        lexical::index_terms(&chunk.text, &mut body_terms);
        PreparedChunk {
            content_hash: content_hash(chunk.text.as_bytes()),
            symbol_keys: chunk.symbols.iter().map(|s| lexical::joined_key(&s.name)).collect(),
            symbol_terms,
            body_terms,
            chunk,
        }
    }
}

impl NewFileVersion {
    pub fn new(
        path: String,
        content_hash: i64,
        size: i64,
        language: String,
        line_count: i64,
        chunks: Vec<Chunk>,
    ) -> Self {
        let mut path_terms = String::new();
        lexical::index_terms(&path, &mut path_terms);
        NewFileVersion {
            path,
            content_hash,
            size,
            language,
            line_count,
            chunks: chunks.into_iter().map(PreparedChunk::new).collect(),
            path_terms,
            graph: None,
        }
    }

    pub fn with_graph(mut self, graph: Option<crate::source::extract::FileGraph>) -> Self {
        self.graph = graph;
        self
    }
}

impl Store {
    /// Opens the index for writing, creating it if needed. An index of a
    /// schema version no upgrade leads from, or one SQLite finds damaged (and
    /// a check confirms it), is rebuilt, keeping every vector that can be
    /// read, and said so on stderr. Anything else that stops the index from
    /// opening (no space left, a read-only folder, a lock held by another
    /// process, another I/O error) is an error saying what it is, and
    /// nothing is deleted.
    pub fn open_for_write(dir: &Path) -> Result<Store> {
        Self::open_for_write_locked(dir, false)
    }

    /// [`Store::open_for_write`]; creating or rebuilding the database happens
    /// under the writer lock (taken here unless `locked`: the caller holds it),
    /// so two processes starting on a new index never race to create it.
    fn open_for_write_locked(dir: &Path, locked: bool) -> Result<Store> {
        install_damage_hint();
        fs::create_dir_all(dir).map_err(|e| {
            explain(
                dir,
                anyhow::Error::new(e).context(format!("cannot create the index directory {}", dir.display())),
            )
        })?;
        // Keeps the index out of `git status` even where .git/info/exclude is not written.
        let ignore_file = dir.join(".gitignore");
        if !ignore_file.exists() {
            let _ = fs::write(&ignore_file, "*\n");
        }
        let db = dir.join(DB_FILE);
        if !locked {
            if let Existing::Ready(conn) = Self::open_existing_db(&db, false)? {
                return Ok(Store::at(conn, dir));
            }
        }
        let _lock = if locked {
            None
        } else {
            Some(lock_dir(dir, Duration::from_secs(120))?)
        };
        // Checked again under the lock: another process may have just created it.
        match Self::open_existing_db(&db, false)? {
            Existing::Ready(conn) => return Ok(Store::at(conn, dir)),
            Existing::Missing => {
                create_index(dir, None)?;
            }
            Existing::Incompatible(why) => {
                let kept = create_index(dir, Some(&db))?;
                eprintln!(
                    "ken: rebuilding the index at {}: {why}; {}",
                    dir.display(),
                    kept.describe()
                );
            }
            Existing::Damaged(e) => {
                // Only damage a check confirms is rebuilt: an error SQLite
                // reports for another reason leaves the index as it is.
                if !damage_confirmed(&db, &e) {
                    return Err(explain(dir, e));
                }
                let kept = create_index(dir, Some(&db))?;
                eprintln!(
                    "ken: rebuilding the index at {}: {} is damaged ({}); {}",
                    dir.display(),
                    db.display(),
                    first_line(&e),
                    kept.describe()
                );
            }
        }
        let conn = Connection::open(&db).with_context(|| format!("cannot open {}", db.display()))?;
        configure(&conn).map_err(|e| explain(dir, e))?;
        Ok(Store::at(conn, dir))
    }

    fn at(conn: Connection, dir: &Path) -> Store {
        Store {
            conn,
            dir: dir.to_path_buf(),
        }
    }

    /// Replaces the index with an empty one (a rebuild from scratch, asked
    /// for: its vectors go too). Callers hold the writer lock.
    pub fn recreate(self) -> Result<Store> {
        let dir = self.dir.clone();
        drop(self.conn);
        create_index(&dir, None)?;
        Store::open_for_write_locked(&dir, true)
    }

    /// Replaces the index with an empty one that keeps its vectors (keyed by
    /// content and model, they are the most expensive part to make again)
    /// and the settings that come with them: for a rebuild ken decides on
    /// (the chunking rules changed). Callers hold the writer lock.
    pub fn rebuild_keeping_vectors(self) -> Result<(Store, Salvaged)> {
        let dir = self.dir.clone();
        drop(self.conn);
        let kept = create_index(&dir, Some(&dir.join(DB_FILE)))?;
        Ok((Store::open_for_write_locked(&dir, true)?, kept))
    }

    /// Opens an existing index for reading; a clear error if there is none.
    /// An index of an older schema version that [`MIGRATIONS`] can upgrade is
    /// upgraded first (a short write); a clear error if it cannot be written.
    /// In a read-only folder the index is read as it is on disk.
    pub fn open_for_read(dir: &Path) -> Result<Store> {
        install_damage_hint();
        let db = dir.join(DB_FILE);
        let opened = Self::open_existing_db(&db, true)
            .with_context(|| format!("the index at {} cannot be used", dir.display()))?;
        match opened {
            Existing::Ready(conn) => Ok(Store::at(conn, dir)),
            Existing::Missing => bail!("no index at {}; run `ken index` in the repository first", dir.display()),
            Existing::Incompatible(why) => bail!(
                "the index at {} cannot be used: {why}; run `ken index` to rebuild it (its vectors are kept)",
                dir.display()
            ),
            Existing::Damaged(e) => Err(explain(dir, e)),
        }
    }

    /// Opens the database `db` if it exists and has this schema version,
    /// upgrading an older version in place when [`MIGRATIONS`] lead from it.
    /// `Err`: it could not be opened or upgraded for a reason that rebuilding
    /// would not cure (no space, read-only, locked, an I/O error), said as such.
    fn open_existing_db(db: &Path, read_only: bool) -> Result<Existing> {
        if !db.exists() {
            return Ok(Existing::Missing);
        }
        // What goes wrong here is said by the error itself.
        let _handled = DamageHandled::begin();
        let dir = db.parent().unwrap_or(Path::new("."));
        let (conn, version) = match connect(db, read_only) {
            Ok(opened) => opened,
            Err(e) => match fault_of(&e) {
                Some(Fault::Damaged | Fault::NotADatabase) => return Ok(Existing::Damaged(e)),
                // A reader of an index in a read-only folder reads the file as it is.
                _ if read_only && probe(dir, db) == Some(Fault::ReadOnlyFolder) && !has_pending_wal(db) => {
                    match connect_immutable(db) {
                        Ok(opened) => opened,
                        Err(_) => return Err(explain(dir, e)),
                    }
                }
                _ => return Err(explain(dir, e)),
            },
        };
        remember_db(db);
        match version {
            Some(SCHEMA_VERSION) => Ok(Existing::Ready(conn)),
            Some(v) if can_migrate(v) => {
                if read_only {
                    // Upgraded through a short read-write connection, then opened again.
                    drop(conn);
                    migrate_db(db).map_err(|e| explain(dir, e))?;
                    Self::open_existing_db(db, true)
                } else {
                    let mut conn = conn;
                    migrate(&mut conn).map_err(|e| {
                        explain(
                            dir,
                            e.context(format!(
                                "cannot upgrade the index at {} from schema version {v} to {SCHEMA_VERSION}",
                                db.display()
                            )),
                        )
                    })?;
                    Ok(Existing::Ready(conn))
                }
            }
            Some(v) => Ok(Existing::Incompatible(format!(
                "it has schema version {v}, this ken uses {SCHEMA_VERSION}"
            ))),
            None => Ok(Existing::Incompatible("it has no schema version".to_string())),
        }
    }

    /// Takes the index's writer lock, waiting up to `timeout` for another
    /// writer. The lock is an OS file lock, so a crashed writer never leaves it held.
    pub fn lock_for_write(&self, timeout: Duration) -> Result<WriteLock> {
        lock_dir(&self.dir, timeout)
    }

    /// Who is writing the index right now (another process holding the
    /// writer lock), if anyone: for messages such as "embedding in progress".
    pub fn active_writer(&self) -> Option<String> {
        writer_of(&self.dir)
    }

    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        meta(&self.conn, key)
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        set_meta(&self.conn, key, value)
    }

    pub fn catalog(&self, branch: &str) -> Result<HashMap<String, CatalogEntry>> {
        let mut stmt = self.conn.prepare(
            "SELECT c.path, c.file_id, c.mtime_ns, c.size, f.content_hash
             FROM catalog c JOIN files f ON f.id = c.file_id WHERE c.branch = ?1",
        )?;
        let rows = stmt.query_map([branch], |r| {
            Ok((
                r.get::<_, String>(0)?,
                CatalogEntry {
                    file_id: r.get(1)?,
                    mtime_ns: r.get(2)?,
                    size: r.get(3)?,
                    content_hash: r.get(4)?,
                },
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The files of `branch` read and left out for their content, by path
    /// (rows of a reason this ken does not know are left out: read again).
    pub fn skipped(&self, branch: &str) -> Result<HashMap<String, SkippedEntry>> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, mtime_ns, size, reason FROM skipped_files WHERE branch = ?1")?;
        let rows = stmt.query_map([branch], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        let mut skipped = HashMap::new();
        for row in rows {
            let (path, mtime_ns, size, reason) = row?;
            if let Some(reason) = parse_skip_reason(&reason) {
                skipped.insert(path, SkippedEntry { mtime_ns, size, reason });
            }
        }
        Ok(skipped)
    }

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

    /// FTS5's `automerge` setting: 0 stops incremental segment merging (for a
    /// bulk load followed by [`Store::optimize_lexical`]).
    pub fn set_lexical_automerge(&self, value: i64) -> Result<()> {
        self.conn.execute(
            "INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('automerge', ?1)",
            [value],
        )?;
        Ok(())
    }

    /// Merges the FTS index segments, which makes queries faster after many writes.
    pub fn optimize_lexical(&self) -> Result<()> {
        self.conn
            .execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('optimize')", [])?;
        Ok(())
    }

    /// Stores the document frequency of every term in at least 1% of the
    /// chunks (and 100), with the chunk count and the lexical generation
    /// they were counted at, in one transaction. FTS5 counts a term's chunks
    /// by walking its whole posting list, ~1 ms per 30k chunks, on every
    /// query that has it; search reads these instead (see
    /// [`Store::term_frequency`]). Returns the chunk count.
    pub fn store_common_term_frequencies(&self) -> Result<i64> {
        let tx = self.conn.unchecked_transaction()?;
        let chunks = count(&tx, "SELECT count(*) FROM chunks", [])? as i64;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS common_terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
             DELETE FROM common_terms;",
        )?;
        tx.execute(
            "INSERT INTO common_terms (term, df) SELECT term, doc FROM chunks_vocab WHERE doc >= ?1",
            [(chunks / 100).max(100)],
        )?;
        set_meta(&tx, COMMON_TERMS_CHUNKS, &chunks.to_string())?;
        set_meta(&tx, CHUNK_COUNT, &chunks.to_string())?;
        let generation = lexical_generation(&tx)?;
        set_meta(&tx, COMMON_TERMS_GENERATION, &generation.to_string())?;
        tx.commit()?;
        Ok(chunks)
    }

    /// The chunk count when the common terms' frequencies were stored.
    pub fn common_terms_stored_at(&self) -> Result<Option<i64>> {
        Ok(self.meta(COMMON_TERMS_CHUNKS)?.and_then(|v| v.parse().ok()))
    }

    /// Whether chunks were added or removed since the common terms'
    /// frequencies were stored (in this run or one that was interrupted):
    /// they are then recounted (see `index`) or reconciled by `ken health`.
    pub fn common_terms_stale(&self) -> Result<bool> {
        let Some(counted_at) = self.common_terms_stored_at()? else {
            return Ok(true);
        };
        let at_generation: i64 = self
            .meta(COMMON_TERMS_GENERATION)?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(at_generation != lexical_generation(&self.conn)?
            || counted_at != count(&self.conn, "SELECT count(*) FROM chunks", [])? as i64)
    }

    /// The stored chunk count (`chunk_count`), if it disagrees with the
    /// chunks: (stored, counted).
    pub fn chunk_count_drift(&self) -> Result<Option<(Option<i64>, i64)>> {
        let stored: Option<i64> = self.meta(CHUNK_COUNT)?.and_then(|v| v.parse().ok());
        let counted = count(&self.conn, "SELECT count(*) FROM chunks", [])? as i64;
        Ok((stored != Some(counted)).then_some((stored, counted)))
    }

    /// Writes the chunk count as it is (`chunk_count`).
    pub fn store_chunk_count(&self) -> Result<i64> {
        let counted = count(&self.conn, "SELECT count(*) FROM chunks", [])? as i64;
        self.set_meta(CHUNK_COUNT, &counted.to_string())?;
        Ok(counted)
    }

    /// The problems `PRAGMA quick_check` (or `integrity_check` when `full`)
    /// finds in this index; empty when there are none. The quick check reads
    /// the whole file: 0.09-0.17 s for 29k chunks without vectors (50 MB).
    pub fn integrity_problems(&self, full: bool) -> Result<Vec<String>> {
        integrity_problems(&self.conn, full)
    }

    /// How many chunks hold `term`: the stored count for a common term, else
    /// FTS5's (cheap for the others, their posting lists are short). 0: absent.
    pub fn term_frequency(&self, term: &str) -> Result<i64> {
        // An index written before these counts existed has no table: FTS5 counts.
        if let Ok(mut stored) = self.conn.prepare_cached("SELECT df FROM common_terms WHERE term = ?1") {
            if let Some(df) = stored.query_row([term], |r| r.get(0)).optional()? {
                return Ok(df);
            }
        }
        let mut counted = self
            .conn
            .prepare_cached("SELECT doc FROM chunks_vocab WHERE term = ?1")?;
        Ok(counted.query_row([term], |r| r.get(0)).optional()?.unwrap_or(0))
    }
}

/// What [`Store::open_existing_db`] found.
enum Existing {
    /// No database yet.
    Missing,
    /// Open, of this schema version.
    Ready(Connection),
    /// Of a schema version no upgrade leads from (why): a writer rebuilds it.
    Incompatible(String),
    /// SQLite found it damaged or not a database: a writer rebuilds it once
    /// a check confirms it ([`damage_confirmed`]).
    Damaged(anyhow::Error),
}

/// Opens `db` (configured for writing unless `read_only`) and reads its
/// schema version: the first read, where a damaged or unreadable file shows.
fn connect(db: &Path, read_only: bool) -> Result<(Connection, Option<i64>)> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(db, flags).with_context(|| format!("cannot open {}", db.display()))?;
    if read_only {
        conn.busy_timeout(Duration::from_secs(10))?;
    } else {
        configure(&conn)?;
    }
    let version = schema_version(&conn)?;
    Ok((conn, version))
}

/// Opens `db` read-only as an immutable file: no lock, no `-shm`, which a
/// read-only folder cannot hold. Only for a database with no pending WAL
/// ([`has_pending_wal`]): its file is then the whole index.
fn connect_immutable(db: &Path) -> Result<(Connection, Option<i64>)> {
    let mut uri = String::from("file:");
    for byte in db.as_os_str().as_encoded_bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => uri.push(*byte as char),
            _ => uri.push_str(&format!("%{byte:02X}")),
        }
    }
    uri.push_str("?immutable=1");
    let conn = Connection::open_with_flags(
        &uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
    )
    .with_context(|| format!("cannot open {}", db.display()))?;
    let version = schema_version(&conn)?;
    tracing::info!("{} is in a read-only folder: read as it is on disk", db.display());
    Ok((conn, version))
}

/// Whether `db` has a WAL with transactions not yet copied into it.
fn has_pending_wal(db: &Path) -> bool {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    fs::metadata(PathBuf::from(wal)).is_ok_and(|m| m.len() > 0)
}

/// The schema version recorded in an index, if any.
fn schema_version(conn: &Connection) -> Result<Option<i64>> {
    let version: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0))
        .optional()
        .context("reading the index's schema version")?;
    Ok(version.and_then(|v| v.parse::<i64>().ok()))
}

/// Whether [`MIGRATIONS`] lead from `version` to [`SCHEMA_VERSION`].
fn can_migrate(version: i64) -> bool {
    version < SCHEMA_VERSION && (version..SCHEMA_VERSION).all(|v| MIGRATIONS.iter().any(|(from, _)| *from == v))
}

/// Upgrades the index on `conn` to [`SCHEMA_VERSION`] in one transaction
/// (all steps or none). The version is read again inside it: another
/// process may have upgraded the index meanwhile.
fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut version = schema_version(&tx)?.context("the index has no schema version")?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    anyhow::ensure!(
        can_migrate(version),
        "no upgrade from schema version {version} to {SCHEMA_VERSION}"
    );
    while version < SCHEMA_VERSION {
        let (_, sql) = MIGRATIONS
            .iter()
            .find(|(from, _)| *from == version)
            .context("a missing upgrade step")?;
        tx.execute_batch(sql)
            .with_context(|| format!("upgrading from schema version {version}"))?;
        version += 1;
    }
    set_meta(&tx, "schema_version", &SCHEMA_VERSION.to_string())?;
    tx.commit().context("committing the upgrade")?;
    tracing::info!("upgraded the index to schema version {SCHEMA_VERSION}");
    Ok(())
}

/// [`migrate`] for a reader: through a short read-write connection to `db`;
/// a clear error if the index cannot be written.
fn migrate_db(db: &Path) -> Result<()> {
    let upgrade = || -> Result<()> {
        let mut conn =
            Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        migrate(&mut conn)
    };
    upgrade().with_context(|| {
        format!(
            "it must be upgraded to schema version {SCHEMA_VERSION}, which needs to write to {} \
             (run `ken index` as a user who can write the index)",
            db.display()
        )
    })
}

/// Who holds the writer lock of the index in `dir` ("process 123"), if anyone.
pub fn writer_of(dir: &Path) -> Option<String> {
    let path = dir.join(LOCK_FILE);
    let file = File::open(&path).ok()?;
    // A shared lock is refused only while a writer holds the exclusive one;
    // it is released at once (writers retry, so this never blocks them).
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
        return None;
    }
    let holder = fs::read_to_string(&path).unwrap_or_default();
    Some(match holder.split_whitespace().next() {
        Some(pid) => format!("process {pid}"),
        None => "another ken process".to_string(),
    })
}

/// Takes the writer lock of the index in `dir` (see [`Store::lock_for_write`]).
fn lock_dir(dir: &Path, timeout: Duration) -> Result<WriteLock> {
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            explain(
                dir,
                anyhow::Error::new(e).context(format!("cannot open the lock file {}", path.display())),
            )
        })?;
    let started = Instant::now();
    let mut told = false;
    loop {
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            // Who holds it, for the message of a process that has to wait.
            let holder = std::env::args().skip(1).take(2).collect::<Vec<_>>().join(" ");
            let _ = file.set_len(0);
            let _ = (&file).write_all(format!("{} ken {holder}\n", std::process::id()).as_bytes());
            return Ok(WriteLock { _file: file });
        }
        // The lock is released when its holder dies, so a held lock has a live holder.
        let holder = fs::read_to_string(&path).unwrap_or_default();
        let holder = match holder.trim() {
            "" => "another ken process".to_string(),
            h => format!("process {h}"),
        };
        if started.elapsed() >= timeout {
            bail!(
                "{holder} is writing the index at {} (waited {:?}); try again when it is done",
                dir.display(),
                timeout
            );
        }
        if !told && timeout >= Duration::from_secs(1) {
            eprintln!("ken: waiting (up to {timeout:?}) for {holder}, which is writing this index...");
            told = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Held while a process writes the index; released on drop or process exit.
pub struct WriteLock {
    _file: File,
}

fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -65536;",
    )
    .context("configuring the index database")?;
    Ok(())
}

fn remove_db_files(db: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        if p.exists() {
            fs::remove_file(&p).with_context(|| format!("cannot remove {}", p.display()))?;
        }
    }
    Ok(())
}

/// What stops the index database from being read or written, as far as
/// SQLite and the file system tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No space left on the file system (or the quota is used up).
    NoSpace,
    /// The index folder cannot be written (a read-only mount, an immutable
    /// folder, no permission).
    ReadOnlyFolder,
    /// The database file cannot be written.
    ReadOnlyFile,
    /// Another process holds a lock on the database.
    Locked,
    /// SQLite found the database damaged.
    Damaged,
    /// The file is not a SQLite database.
    NotADatabase,
    /// Another error of the file system.
    Io,
}

/// Damage found by a check of the index ([`check_integrity`]), as an error.
#[derive(Debug)]
pub struct Damage(pub String);

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for Damage {}

/// The fault behind `e`, if it is one of the database or of the file system
/// (read from SQLite's error code or the OS error number; [`Fault::Io`]
/// for an I/O error whose cause only [`probe`] can tell).
pub fn fault_of(e: &anyhow::Error) -> Option<Fault> {
    use rusqlite::ErrorCode;
    for cause in e.chain() {
        if cause.downcast_ref::<Damage>().is_some() {
            return Some(Fault::Damaged);
        }
        if let Some(code) = cause
            .downcast_ref::<rusqlite::Error>()
            .and_then(|e| e.sqlite_error_code())
        {
            return match code {
                ErrorCode::DiskFull => Some(Fault::NoSpace),
                ErrorCode::ReadOnly => Some(Fault::ReadOnlyFile),
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some(Fault::Locked),
                ErrorCode::DatabaseCorrupt => Some(Fault::Damaged),
                ErrorCode::NotADatabase => Some(Fault::NotADatabase),
                ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied
                | ErrorCode::FileLockingProtocolFailed => Some(Fault::Io),
                _ => None,
            };
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.raw_os_error() {
                Some(libc::ENOSPC | libc::EDQUOT) => Some(Fault::NoSpace),
                Some(libc::EROFS) => Some(Fault::ReadOnlyFolder),
                Some(libc::EIO) => Some(Fault::Io),
                _ => None,
            };
        }
    }
    None
}

/// Finds out why writing in `dir` (and to its database `db`) fails: a
/// read-only mount or folder, a read-only file, no space left. `None` when
/// a write works.
pub fn probe(dir: &Path, db: &Path) -> Option<Fault> {
    use std::os::unix::fs::FileExt;
    let errno = |e: &std::io::Error| e.raw_os_error().unwrap_or(0);
    let read_only = |e: &std::io::Error| matches!(errno(e), libc::EROFS | libc::EPERM | libc::EACCES);
    let no_space = |e: &std::io::Error| matches!(errno(e), libc::ENOSPC | libc::EDQUOT);
    let mut available = u64::MAX;
    if let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) {
        // SAFETY: statvfs fills the struct it is given, from a valid C string.
        let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut vfs) } == 0 {
            if vfs.f_flag & libc::ST_RDONLY != 0 {
                return Some(Fault::ReadOnlyFolder);
            }
            available = (vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64);
        }
    }
    // A new file written as SQLite writes its `-shm` (a byte at the end of each page).
    let test = dir.join(format!(".ken-write-test-{}", std::process::id()));
    match File::options().write(true).create_new(true).open(&test) {
        Err(e) if read_only(&e) => return Some(Fault::ReadOnlyFolder),
        Err(e) if no_space(&e) => return Some(Fault::NoSpace),
        Err(_) => {}
        Ok(file) => {
            let written = (0..8u64).try_for_each(|page| file.write_all_at(&[0], page * 4096 + 4095));
            let _ = fs::remove_file(&test);
            if let Err(e) = written {
                if no_space(&e) {
                    return Some(Fault::NoSpace);
                }
            }
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut path = db.as_os_str().to_owned();
        path.push(suffix);
        if let Err(e) = File::options().write(true).open(PathBuf::from(path)) {
            if read_only(&e) {
                return Some(Fault::ReadOnlyFile);
            }
        }
    }
    // What is left on a nearly full file system may not be enough for a write.
    (available < 1 << 20).then_some(Fault::NoSpace)
}

/// `e` with what it means for the index in `dir` said first: no space left
/// on `dir`, a read-only folder or file, a lock, damage and what repairs it.
/// Other errors are returned as they are.
pub fn explain(dir: &Path, e: anyhow::Error) -> anyhow::Error {
    let db = dir.join(DB_FILE);
    let fault = match fault_of(&e) {
        None => return e,
        Some(Fault::Io | Fault::ReadOnlyFile | Fault::ReadOnlyFolder) => probe(dir, &db).or(fault_of(&e)),
        fault => fault,
    };
    // Said once: an error explained twice (an inner call, then its caller) is not said again.
    if e.downcast_ref::<Explained>().is_some() {
        return e;
    }
    let said = match fault {
        Some(Fault::NoSpace) => format!(
            "no space left on {}: the index there was not changed; free some space and run the command again",
            dir.display()
        ),
        Some(Fault::ReadOnlyFolder) => format!(
            "the index folder {} is read-only: the index there was not changed; make the folder writable, \
             or keep the index elsewhere with --index-dir",
            dir.display()
        ),
        Some(Fault::ReadOnlyFile) => format!(
            "the index database {} is read-only: the index was not changed; make the file writable",
            db.display()
        ),
        Some(Fault::Locked) => format!(
            "the index database {} is locked by another process: the index was not changed; try again when it is done",
            db.display()
        ),
        Some(Fault::Damaged) => format!(
            "the index database {} is damaged: `ken health --repair` rebuilds it from the files, keeping every \
             vector it can read (or delete {} and run `ken index`)",
            db.display(),
            dir.display()
        ),
        Some(Fault::NotADatabase) => format!(
            "{} is not an index database, nothing in it can be read: `ken index` or `ken health --repair` \
             builds a new one (or delete {} and run `ken index`)",
            db.display(),
            dir.display()
        ),
        Some(Fault::Io) | None => format!(
            "cannot read or write the index database {}: the index was not changed",
            db.display()
        ),
    };
    e.context(Explained(said))
}

/// What [`explain`] says of an error (a type of its own, so it is said once).
#[derive(Debug)]
struct Explained(String);

impl std::fmt::Display for Explained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether the damage SQLite reported (`e`, on opening `db`) is confirmed:
/// the file is not a database at all, or its integrity check fails.
fn damage_confirmed(db: &Path, e: &anyhow::Error) -> bool {
    match fault_of(e) {
        Some(Fault::NotADatabase) => true,
        Some(Fault::Damaged) => match integrity_of(db, false) {
            Ok(problems) => !problems.is_empty(),
            Err(e) => matches!(fault_of(&e), Some(Fault::Damaged | Fault::NotADatabase)),
        },
        _ => false,
    }
}

/// The first line of an error's message chain.
fn first_line(e: &anyhow::Error) -> String {
    let text = format!("{:#}", e.root_cause());
    text.lines().next().unwrap_or_default().to_string()
}

/// What a rebuild kept of the database it replaced.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Salvaged {
    /// Whether the old database could be read at all.
    pub readable: bool,
    /// Vectors copied into the new database.
    pub vectors: u64,
    /// Damaged stretches of the vectors met, and vectors left out as invalid.
    pub lost: u64,
}

impl Salvaged {
    /// "kept its 120 vectors", for messages.
    pub fn describe(&self) -> String {
        match (self.readable, self.lost) {
            (false, _) => "nothing in it could be read (its vectors will be computed again)".to_string(),
            (true, 0) => format!("kept its {} vectors", self.vectors),
            (true, _) => format!(
                "kept {} vectors; parts of it could not be read (vectors lost there will be computed again)",
                self.vectors
            ),
        }
    }
}

/// The settings kept by a rebuild: the ones that come with the vectors (the
/// embedder, its settings, the query adapter) and the user's choices.
const KEPT_META: &[&str] = &[
    "embedding_model",
    "embedding_dimensions",
    "embedding_provider",
    "embedding_failure",
    "embeddings_off",
    "vectors_pruned_for",
    "watcher_pid",
    EMBEDDING_IDS_ISSUED,
];
/// Meta keys starting so are kept too (the query adapter's).
const KEPT_META_PREFIX: &str = "query_adapter";

/// Builds an empty index in `dir` (under another name, in one transaction,
/// then renamed into place: a process killed meanwhile leaves no half-made
/// index), with what can be read of the database `salvage_from`: its vectors,
/// their settings and the query adapter. Nothing of an old database is
/// deleted unless the new one is complete. Callers hold the writer lock.
fn create_index(dir: &Path, salvage_from: Option<&Path>) -> Result<Salvaged> {
    let _handled = DamageHandled::begin();
    let db = dir.join(DB_FILE);
    let draft = dir.join(format!("{DB_FILE}.creating"));
    remove_db_files(&draft)?;
    let built = (|| -> Result<Salvaged> {
        let mut conn = Connection::open(&draft).with_context(|| format!("cannot create {}", draft.display()))?;
        let tx = conn.transaction()?;
        tx.execute_batch(SCHEMA).context("creating the index schema")?;
        tx.execute_batch(SKIPPED_FILES_SCHEMA)
            .context("creating the index schema")?;
        tx.execute_batch(graph::SCHEMA).context("creating the graph schema")?;
        tx.execute_batch(graph::IMPORT_MODULES_INDEX)
            .context("creating the graph schema")?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?1), ('created_at', ?2)",
            params![SCHEMA_VERSION.to_string(), now_rfc3339()],
        )?;
        let salvaged = match salvage_from.filter(|old| old.exists()) {
            Some(old) => salvage(old, &tx)?,
            None => Salvaged {
                readable: true,
                ..Salvaged::default()
            },
        };
        tx.commit().context("writing the new index")?;
        Ok(salvaged)
    })();
    let salvaged = match built {
        Ok(salvaged) => salvaged,
        Err(e) => {
            let _ = remove_db_files(&draft);
            return Err(explain(dir, e));
        }
    };
    // A WAL left without its database must not be replayed into the new one;
    // the rename then replaces the old database in one step.
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        if p.exists() {
            fs::remove_file(&p).map_err(|e| {
                explain(
                    dir,
                    anyhow::Error::new(e).context(format!("cannot remove {}", p.display())),
                )
            })?;
        }
    }
    fs::rename(&draft, &db).map_err(|e| {
        explain(
            dir,
            anyhow::Error::new(e).context(format!("cannot create {}", db.display())),
        )
    })?;
    Ok(salvaged)
}

/// Copies what can be read of the database `old` into the new index `tx`:
/// the vectors (row by row, skipping damaged pages), the settings in
/// [`KEPT_META`] and the query adapter. Errors reading `old` only leave
/// things out; errors writing `tx` (no space left) are returned.
fn salvage(old: &Path, tx: &Transaction) -> Result<Salvaged> {
    let mut salvaged = Salvaged::default();
    let Ok(src) = Connection::open_with_flags(old, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
    else {
        return Ok(salvaged);
    };
    let _ = src.busy_timeout(Duration::from_secs(10));
    // The settings, each read on its own (a damaged page loses only its keys).
    let mut kept_meta = Vec::new();
    for key in KEPT_META {
        if let Ok(Some(value)) = meta(&src, key) {
            kept_meta.push((key.to_string(), value));
        }
    }
    if let Ok(mut stmt) = src.prepare("SELECT key, value FROM meta WHERE key >= ?1 AND key < ?2") {
        let end = format!("{KEPT_META_PREFIX}\u{10FFFF}");
        if let Ok(rows) = stmt.query_map([KEPT_META_PREFIX, end.as_str()], |r| Ok((r.get(0)?, r.get(1)?))) {
            kept_meta.extend(rows.map_while(|r| r.ok()));
        }
    }
    let schema_readable = src
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))
        .is_ok();
    let dimensions: Option<usize> = kept_meta
        .iter()
        .find(|(k, _)| k == "embedding_dimensions")
        .and_then(|(_, v)| v.parse().ok());
    let model = kept_meta
        .iter()
        .find(|(k, _)| k == "embedding_model")
        .map(|(_, v)| v.clone());
    // A vector of the index's model has its dimensions, a signature vector
    // of the same embedder one or more such vectors; any other a whole
    // number of f32s.
    let valid = |row_model: &str, blob: &[u8]| {
        let embedder = |m: &str| m.rsplit_once('/').map_or(m.to_string(), |(base, _)| format!("{base}/"));
        let length_ok = match (dimensions.filter(|d| *d > 0), &model) {
            (Some(d), Some(m)) if row_model == m => blob.len() == d * 4,
            (Some(d), Some(m)) if row_model.starts_with(&embedder(m)) => !blob.is_empty() && blob.len() % (d * 4) == 0,
            _ => !blob.is_empty() && blob.len() % 4 == 0,
        };
        length_ok
            && blob
                .chunks_exact(4)
                .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
    };
    let mut insert = tx.prepare(
        "INSERT INTO embeddings (id, content_hash, model, vector) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO NOTHING",
    )?;
    let mut max_id = 0i64;
    let mut after = 0i64;
    let mut damaged = !schema_readable;
    const PAGE: usize = 512;
    // The rows in id order, past damaged pages.
    if schema_readable {
        loop {
            let (rows, failed) = read_vectors(&src, after, PAGE);
            let complete = rows.len() < PAGE;
            let progressed = !rows.is_empty();
            for (id, hash, row_model, blob) in rows {
                after = id;
                if valid(&row_model, &blob) {
                    salvaged.vectors += insert.execute(params![id, hash, row_model, blob])? as u64;
                    max_id = max_id.max(id);
                } else {
                    salvaged.lost += 1;
                }
            }
            if failed {
                salvaged.lost += 1;
                damaged = true;
                match next_readable_vector(&src, after) {
                    // Read on from the next row that can be found...
                    Some(id) if progressed || id > after + 1 => after = id - 1,
                    // ...unless it is the row that just failed (its overflow
                    // pages are damaged): then past it.
                    Some(id) => after = id,
                    None => break,
                }
            } else if complete || after == i64::MAX {
                break;
            }
        }
    }
    // Past damage, the rows under a damaged interior page (or a damaged
    // schema) are still in their leaf pages: read from the file itself.
    if damaged {
        let mut found = 0u64;
        for (id, hash, row_model, blob) in raw_vectors(old) {
            let plausible = !row_model.is_empty()
                && row_model.chars().all(|c| !c.is_control())
                && blob
                    .chunks_exact(4)
                    .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).abs() <= 1.5);
            if plausible && valid(&row_model, &blob) {
                let added = insert.execute(params![id, hash, row_model, blob])? as u64;
                salvaged.vectors += added;
                found += added;
                max_id = max_id.max(id);
            }
        }
        if found > 0 {
            tracing::info!("{found} vectors read from the leaf pages of {}", old.display());
        }
        salvaged.readable = schema_readable || salvaged.vectors > 0;
        if !salvaged.readable {
            return Ok(salvaged);
        }
    } else {
        salvaged.readable = true;
    }
    drop(insert);
    for (key, value) in &kept_meta {
        set_meta(tx, key, value)?;
    }
    let issued: i64 = meta(tx, EMBEDDING_IDS_ISSUED)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    set_meta(tx, EMBEDDING_IDS_ISSUED, &issued.max(max_id).to_string())?;
    // The query adapter, with its table as the old index made it.
    let adapter_table: Option<String> = src
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'query_adapters'",
            [],
            |r| r.get(0),
        )
        .optional()
        .ok()
        .flatten();
    if let Some(sql) = adapter_table {
        let rows: Vec<(String, Vec<u8>)> = src
            .prepare("SELECT model, matrix FROM query_adapters")
            .and_then(|mut stmt| {
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map(|rows| rows.map_while(|r| r.ok()).collect())
            })
            .unwrap_or_default();
        if !rows.is_empty() {
            tx.execute_batch(&sql)?;
            for (model, matrix) in rows {
                tx.execute(
                    "INSERT OR IGNORE INTO query_adapters (model, matrix) VALUES (?1, ?2)",
                    params![model, matrix],
                )?;
            }
        }
    }
    Ok(salvaged)
}

/// The embedding rows in the table leaf pages of the database file `db` and
/// its WAL, read without SQLite: for a file whose b-tree cannot lead to them
/// (a damaged interior page or schema). A row is a leaf cell whose record
/// has the shape of `embeddings` (the id, an integer, a text, a blob); the
/// caller judges the values. Pages of deleted rows may show them again
/// (their vectors are of no chunk and go with the next repair).
fn raw_vectors(db: &Path) -> Vec<VectorRow> {
    let Ok(file) = fs::read(db) else {
        return Vec::new();
    };
    if file.len() < 100 {
        return Vec::new();
    }
    let page_size = match u16::from_be_bytes([file[16], file[17]]) {
        1 => 65536,
        n if n >= 512 && n.is_power_of_two() => n as usize,
        // A damaged header: the size this ken writes.
        _ => 4096,
    };
    let usable = page_size - file[20] as usize;
    let mut pages: Vec<&[u8]> = file.chunks_exact(page_size).skip(1).collect();
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let wal = fs::read(PathBuf::from(wal)).unwrap_or_default();
    if wal.len() > 32 {
        pages.extend(wal[32..].chunks_exact(24 + page_size).map(|frame| &frame[24..]));
    }
    let page_of = |number: u32| -> Option<&[u8]> {
        let start = (number as usize).checked_sub(1)?.checked_mul(page_size)?;
        file.get(start..start + page_size)
    };
    let mut rows = Vec::new();
    for page in pages {
        leaf_rows(page, usable, &page_of, &mut rows);
    }
    rows
}

/// The embedding rows of one table leaf page (see [`raw_vectors`]).
fn leaf_rows<'f>(page: &[u8], usable: usize, page_of: &dyn Fn(u32) -> Option<&'f [u8]>, rows: &mut Vec<VectorRow>) {
    if page.first() != Some(&0x0d) || page.len() < 8 {
        return;
    }
    let cells = u16::from_be_bytes([page[3], page[4]]) as usize;
    for cell in 0..cells {
        let Some(pointer) = page.get(8 + 2 * cell..10 + 2 * cell) else {
            return;
        };
        let offset = u16::from_be_bytes([pointer[0], pointer[1]]) as usize;
        let Some(row) = leaf_cell(page, offset, usable, page_of) else {
            continue;
        };
        rows.push(row);
    }
}

/// One cell of a table leaf page, if its record is an embedding row.
fn leaf_cell<'f>(
    page: &[u8],
    offset: usize,
    usable: usize,
    page_of: &dyn Fn(u32) -> Option<&'f [u8]>,
) -> Option<VectorRow> {
    let (payload_size, n) = varint(page.get(offset..)?)?;
    let (rowid, m) = varint(page.get(offset + n..)?)?;
    let payload_size = usize::try_from(payload_size).ok()?;
    let start = offset + n + m;
    // How much of the payload is on the page (SQLite's rule for table leaves).
    let max_local = usable - 35;
    let local = if payload_size <= max_local {
        payload_size
    } else {
        let min_local = (usable - 12) * 32 / 255 - 23;
        let k = min_local + (payload_size - min_local) % (usable - 4);
        if k <= max_local {
            k
        } else {
            min_local
        }
    };
    let mut payload = page.get(start..start + local)?.to_vec();
    if local < payload_size {
        let mut next = u32::from_be_bytes(page.get(start + local..start + local + 4)?.try_into().ok()?);
        let mut hops = 0;
        while payload.len() < payload_size {
            hops += 1;
            if next == 0 || hops > 1 << 16 {
                return None;
            }
            let overflow = page_of(next)?;
            next = u32::from_be_bytes(overflow.get(..4)?.try_into().ok()?);
            let take = (payload_size - payload.len()).min(usable - 4);
            payload.extend_from_slice(overflow.get(4..4 + take)?);
        }
    }
    // The record: (id: NULL, the rowid's alias), content_hash, model, vector.
    let (header_size, mut at) = varint(&payload)?;
    let header_size = usize::try_from(header_size).ok()?;
    let mut types = Vec::new();
    while at < header_size {
        let (serial, n) = varint(payload.get(at..header_size)?)?;
        types.push(serial);
        at += n;
    }
    let [0, hash_type, text_type, blob_type] = types[..] else {
        return None;
    };
    let hash_len = match hash_type {
        1..=4 => hash_type as usize,
        5 => 6,
        6 => 8,
        8 | 9 => 0,
        _ => return None,
    };
    if text_type < 13 || text_type % 2 == 0 || blob_type < 12 || blob_type % 2 == 1 {
        return None;
    }
    let (text_len, blob_len) = (((text_type - 13) / 2) as usize, ((blob_type - 12) / 2) as usize);
    let body = payload.get(header_size..)?;
    let hash_bytes = body.get(..hash_len)?;
    let hash = match hash_type {
        8 => 0,
        9 => 1,
        _ => {
            // Big-endian two's complement of 1 to 8 bytes.
            let negative = hash_bytes.first().is_some_and(|b| b & 0x80 != 0);
            hash_bytes
                .iter()
                .fold(if negative { -1i64 } else { 0 }, |v, b| (v << 8) | *b as i64)
        }
    };
    let model = std::str::from_utf8(body.get(hash_len..hash_len + text_len)?)
        .ok()?
        .to_string();
    let vector = body.get(hash_len + text_len..hash_len + text_len + blob_len)?.to_vec();
    Some((rowid, hash, model, vector))
}

/// A SQLite varint at the start of `bytes`: its value and length.
fn varint(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut value: u64 = 0;
    for (i, byte) in bytes.iter().take(9).enumerate() {
        if i == 8 {
            return Some(((value << 8 | *byte as u64) as i64, 9));
        }
        value = value << 7 | (*byte & 0x7f) as u64;
        if byte & 0x80 == 0 {
            return Some((value as i64, i + 1));
        }
    }
    None
}

/// An embedding row: id, content hash, model, vector.
type VectorRow = (i64, i64, String, Vec<u8>);

/// Up to `limit` embedding rows after id `after`, in id order, as stored
/// (any type: a damaged row is judged by the caller); `true` when a read
/// failed before the end.
fn read_vectors(src: &Connection, after: i64, limit: usize) -> (Vec<VectorRow>, bool) {
    use rusqlite::types::Value;
    let mut rows = Vec::new();
    let read = (|| -> rusqlite::Result<()> {
        let mut stmt = src.prepare_cached(
            "SELECT id, content_hash, model, vector FROM embeddings WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let mut cursor = stmt.query(params![after, limit as i64])?;
        while let Some(row) = cursor.next()? {
            let id: i64 = row.get(0)?;
            let hash = match row.get::<_, Value>(1)? {
                Value::Integer(h) => h,
                _ => 0,
            };
            let model = match row.get::<_, Value>(2)? {
                Value::Text(m) => m,
                _ => String::new(),
            };
            let blob = match row.get::<_, Value>(3)? {
                Value::Blob(b) => b,
                _ => Vec::new(),
            };
            rows.push((id, hash, model, blob));
        }
        Ok(())
    })();
    (rows, read.is_err())
}

/// The first embedding id after `after` that can be read again past a
/// damaged page: ids further and further on are tried until a read works,
/// then the first that works is searched between the last two tries.
/// `None`: no readable row follows.
fn next_readable_vector(src: &Connection, after: i64) -> Option<i64> {
    let first_from = |from: i64| -> Result<Option<i64>, ()> {
        src.query_row(
            "SELECT id FROM embeddings WHERE id >= ?1 ORDER BY id LIMIT 1",
            [from],
            |r| r.get(0),
        )
        .optional()
        .map_err(|_| ())
    };
    let (mut failed, mut gap) = (after, 1i64);
    loop {
        let from = after.checked_add(gap)?;
        match first_from(from) {
            Ok(None) => return None,
            Ok(Some(_)) => {
                // The first `from` in (failed, from] that reads.
                let mut works = from;
                while works - failed > 1 {
                    let mid = failed + (works - failed) / 2;
                    match first_from(mid) {
                        Ok(_) => works = mid,
                        Err(()) => failed = mid,
                    }
                }
                return first_from(works).ok().flatten();
            }
            Err(()) => {
                failed = from;
                gap = gap.checked_mul(2)?;
            }
        }
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
fn integrity_of(db: &Path, full: bool) -> Result<Vec<String>> {
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
fn integrity_problems(conn: &Connection, full: bool) -> Result<Vec<String>> {
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
    let _lock = lock_dir(dir, Duration::from_secs(120))?;
    create_index(dir, Some(&dir.join(DB_FILE)))
}

/// Processes that handle damage themselves (a check, a repair, a rebuild)
/// while one of these lives: SQLite's reports of damage then print no hint.
pub struct DamageHandled(());

static DAMAGE_HANDLED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl DamageHandled {
    pub fn begin() -> DamageHandled {
        DAMAGE_HANDLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        DamageHandled(())
    }
}

impl Drop for DamageHandled {
    fn drop(&mut self) {
        DAMAGE_HANDLED.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The index databases this process opened, for the hint of [`install_damage_hint`].
static OPENED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn remember_db(db: &Path) {
    if let Ok(mut opened) = OPENED.lock() {
        if !opened.iter().any(|p| p == db) {
            opened.push(db.to_path_buf());
        }
    }
}

/// Asks SQLite to report the damage it finds (its error log), so that a
/// command that meets a damaged page deep in a query (a search, a status)
/// says, once, which file it is and what repairs it, besides SQLite's
/// "database disk image is malformed". Done once, before SQLite starts
/// (later it cannot be, and nothing is said).
fn install_damage_hint() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn on_log(_: *mut std::ffi::c_void, code: std::ffi::c_int, _: *const std::ffi::c_char) {
            use std::sync::atomic::{AtomicBool, Ordering};
            static SAID: AtomicBool = AtomicBool::new(false);
            let primary = code & 0xff;
            if primary != rusqlite::ffi::SQLITE_CORRUPT && primary != rusqlite::ffi::SQLITE_NOTADB {
                return;
            }
            if DAMAGE_HANDLED.load(Ordering::SeqCst) > 0 || SAID.swap(true, Ordering::SeqCst) {
                return;
            }
            let which = OPENED
                .try_lock()
                .ok()
                .and_then(|o| (o.len() == 1).then(|| o[0].clone()));
            let _ = std::panic::catch_unwind(|| match which {
                Some(db) => eprintln!(
                    "ken: {} is damaged: `ken health --repair` rebuilds it from the files, keeping every vector \
                     it can read (or delete {} and run `ken index`)",
                    db.display(),
                    db.parent().unwrap_or(Path::new(".")).display()
                ),
                None => eprintln!(
                    "ken: an index database is damaged: `ken health --repair` rebuilds it from the files, \
                     keeping every vector it can read"
                ),
            });
        }
        // SAFETY: SQLITE_CONFIG_LOG takes a function pointer and its
        // argument; the callback calls no SQLite function. If SQLite has
        // already started, it refuses (SQLITE_MISUSE) and nothing changes.
        unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_LOG,
                on_log as extern "C" fn(_, _, _),
                std::ptr::null_mut::<std::ffi::c_void>(),
            );
        }
    });
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

/// The write operations of one indexing batch, inside one transaction.
/// The statistics derived from the chunks (their count, the lexical
/// generation that dates the common terms' frequencies) are written in the
/// same transaction, so no interruption leaves them behind what they count.
pub struct Batch<'c> {
    tx: Transaction<'c>,
    /// Whether chunks were added or removed.
    changed: std::cell::Cell<bool>,
}

impl<'c> Batch<'c> {
    pub fn begin(store: &'c mut Store) -> Result<Batch<'c>> {
        Ok(Batch {
            tx: store.conn.transaction()?,
            changed: std::cell::Cell::new(false),
        })
    }

    pub fn commit(self) -> Result<()> {
        if self.changed.get() {
            let chunks = count(&self.tx, "SELECT count(*) FROM chunks", [])?;
            set_meta(&self.tx, CHUNK_COUNT, &chunks.to_string())?;
            let generation = lexical_generation(&self.tx)?;
            set_meta(&self.tx, LEXICAL_GENERATION, &(generation + 1).to_string())?;
        }
        self.tx.commit().context("committing to the index")
    }

    /// The connection, for reads inside the transaction.
    pub fn conn(&self) -> &Connection {
        &self.tx
    }

    /// The id of an already stored version of `path` with this content.
    pub fn find_version(&self, path: &str, content_hash: i64) -> Result<Option<i64>> {
        Ok(self
            .tx
            .prepare_cached("SELECT id FROM files WHERE path = ?1 AND content_hash = ?2")?
            .query_row(params![path, content_hash], |r| r.get(0))
            .optional()?)
    }

    /// Stores a new file version with its chunks and their lexical terms.
    pub fn insert_version(&self, file: &NewFileVersion) -> Result<i64> {
        self.tx
            .prepare_cached(
                "INSERT INTO files (path, content_hash, size, language, line_count) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                file.path,
                file.content_hash,
                file.size,
                file.language,
                file.line_count
            ])?;
        let file_id = self.tx.last_insert_rowid();
        self.changed.set(true);
        let mut insert_content = self
            .tx
            .prepare_cached("INSERT INTO contents (hash, text) VALUES (?1, ?2) ON CONFLICT (hash) DO NOTHING")?;
        let mut insert_chunk = self.tx.prepare_cached(
            "INSERT INTO chunks (file_id, content_hash, start_line, end_line, start_byte, end_byte, kind, symbol, context)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        let mut insert_symbol = self.tx.prepare_cached(
            "INSERT INTO chunk_symbols (key, chunk_id, name, start_line, end_line) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut insert_fts = self
            .tx
            .prepare_cached("INSERT INTO chunks_fts (rowid, symbol, path, body) VALUES (?1, ?2, ?3, ?4)")?;
        for prepared in &file.chunks {
            let chunk = &prepared.chunk;
            let hash = prepared.content_hash;
            insert_content.execute(params![hash, chunk.text])?;
            insert_chunk.execute(params![
                file_id,
                hash,
                chunk.start_line,
                chunk.end_line,
                chunk.start_byte,
                chunk.end_byte,
                chunk.kind,
                chunk.symbol_label(),
                chunk.context
            ])?;
            let chunk_id = self.tx.last_insert_rowid();
            for (key, symbol) in prepared.symbol_keys.iter().zip(&chunk.symbols) {
                insert_symbol.execute(params![key, chunk_id, symbol.name, symbol.start_line, symbol.end_line])?;
            }
            insert_fts.execute(params![
                chunk_id,
                prepared.symbol_terms,
                file.path_terms,
                prepared.body_terms
            ])?;
        }
        if let Some(graph) = &file.graph {
            graph::insert(&self.tx, file_id, graph)?;
        }
        Ok(file_id)
    }

    /// Points `branch`'s entry for `path` at a file version; the version it
    /// replaces is deleted if no branch uses it any more.
    pub fn set_catalog(&self, branch: &str, path: &str, file_id: i64, mtime_ns: i64, size: i64) -> Result<()> {
        let previous: Option<i64> = self
            .tx
            .prepare_cached("SELECT file_id FROM catalog WHERE branch = ?1 AND path = ?2")?
            .query_row(params![branch, path], |r| r.get(0))
            .optional()?;
        self.tx
            .prepare_cached(
                "INSERT INTO catalog (branch, path, file_id, mtime_ns, size) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (branch, path) DO UPDATE SET file_id = excluded.file_id,
                     mtime_ns = excluded.mtime_ns, size = excluded.size",
            )?
            .execute(params![branch, path, file_id, mtime_ns, size])?;
        if let Some(prev) = previous.filter(|&p| p != file_id) {
            self.drop_version_if_unused(prev)?;
        }
        Ok(())
    }

    /// Gives `to` the catalog and the skipped files of `from` (a branch
    /// indexed for the first time starts from the branch indexed before it).
    pub fn copy_catalog(&self, from: &str, to: &str) -> Result<()> {
        self.tx.execute(
            "INSERT OR REPLACE INTO catalog (branch, path, file_id, mtime_ns, size)
             SELECT ?2, path, file_id, mtime_ns, size FROM catalog WHERE branch = ?1",
            params![from, to],
        )?;
        self.tx.execute("DELETE FROM skipped_files WHERE branch = ?1", [to])?;
        self.tx.execute(
            "INSERT INTO skipped_files (branch, path, mtime_ns, size, reason)
             SELECT ?2, path, mtime_ns, size, reason FROM skipped_files WHERE branch = ?1",
            params![from, to],
        )?;
        Ok(())
    }

    /// Records that `branch`'s file `path`, of this size and mtime (0: too
    /// recent to trust), was read and left out for `reason`.
    pub fn set_skipped(&self, branch: &str, path: &str, mtime_ns: i64, size: i64, reason: SkipReason) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO skipped_files (branch, path, mtime_ns, size, reason) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (branch, path) DO UPDATE SET mtime_ns = excluded.mtime_ns,
                     size = excluded.size, reason = excluded.reason",
            )?
            .execute(params![branch, path, mtime_ns, size, skip_reason_key(reason)])?;
        Ok(())
    }

    /// Forgets that `branch`'s file `path` was skipped (it is indexed now,
    /// gone, or left out by its name).
    pub fn remove_skipped(&self, branch: &str, path: &str) -> Result<()> {
        self.tx
            .prepare_cached("DELETE FROM skipped_files WHERE branch = ?1 AND path = ?2")?
            .execute(params![branch, path])?;
        Ok(())
    }

    /// Forgets every skipped file of `branch` (a branch whose catalog is dropped).
    pub fn remove_branch_skipped(&self, branch: &str) -> Result<()> {
        self.tx
            .prepare_cached("DELETE FROM skipped_files WHERE branch = ?1")?
            .execute([branch])?;
        Ok(())
    }

    /// Removes `path` from `branch`'s catalog (the file was deleted or is now skipped).
    pub fn remove_from_catalog(&self, branch: &str, path: &str) -> Result<()> {
        let previous: Option<i64> = self
            .tx
            .prepare_cached("DELETE FROM catalog WHERE branch = ?1 AND path = ?2 RETURNING file_id")?
            .query_row(params![branch, path], |r| r.get(0))
            .optional()?;
        if let Some(prev) = previous {
            self.drop_version_if_unused(prev)?;
        }
        Ok(())
    }

    fn drop_version_if_unused(&self, file_id: i64) -> Result<()> {
        let used: bool = self
            .tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM catalog WHERE file_id = ?1)")?
            .query_row([file_id], |r| r.get(0))?;
        if used {
            return Ok(());
        }
        self.changed.set(true);
        let chunk_ids: Vec<(i64, i64)> = self
            .tx
            .prepare_cached("SELECT id, content_hash FROM chunks WHERE file_id = ?1")?
            .query_map([file_id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut delete_fts = self.tx.prepare_cached("DELETE FROM chunks_fts WHERE rowid = ?1")?;
        let mut delete_symbols = self
            .tx
            .prepare_cached("DELETE FROM chunk_symbols WHERE chunk_id = ?1")?;
        let mut delete_content = self.tx.prepare_cached(
            "DELETE FROM contents WHERE hash = ?1 AND NOT EXISTS
                 (SELECT 1 FROM chunks WHERE content_hash = ?1 AND file_id != ?2)",
        )?;
        let mut delete_embeddings = self.tx.prepare_cached(
            "DELETE FROM embeddings WHERE content_hash = ?1 AND NOT EXISTS
                 (SELECT 1 FROM chunks WHERE content_hash = ?1 AND file_id != ?2)",
        )?;
        for (id, hash) in chunk_ids {
            delete_fts.execute([id])?;
            delete_symbols.execute([id])?;
            delete_content.execute([hash, file_id])?;
            delete_embeddings.execute([hash, file_id])?;
        }
        self.tx
            .prepare_cached("DELETE FROM chunks WHERE file_id = ?1")?
            .execute([file_id])?;
        graph::delete(&self.tx, file_id)?;
        self.tx
            .prepare_cached("DELETE FROM files WHERE id = ?1")?
            .execute([file_id])?;
        Ok(())
    }
}

/// Runs a `SELECT count(*)`-style query that yields one non-negative integer.
pub fn count(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<u64> {
    let n: i64 = conn.query_row(sql, params, |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// Rows of (name, count) from a `GROUP BY` query.
pub fn counts_by(
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

/// The meta key of the number of chunks, written with every change to them.
const CHUNK_COUNT: &str = "chunk_count";
/// The meta key of the chunk count the common terms were counted at.
const COMMON_TERMS_CHUNKS: &str = "common_terms_chunks";
/// The meta key counting the batches that changed chunks (see [`Batch`]).
const LEXICAL_GENERATION: &str = "lexical_generation";
/// The meta key of the lexical generation the common terms were counted at.
const COMMON_TERMS_GENERATION: &str = "common_terms_generation";

/// How many batches have changed the chunks (0 for an index written
/// before this was counted).
fn lexical_generation(conn: &Connection) -> Result<i64> {
    Ok(meta(conn, LEXICAL_GENERATION)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// The meta key of the highest embedding id ever handed out.
const EMBEDDING_IDS_ISSUED: &str = "embedding_ids_issued";

/// The id for the next embedding row. SQLite would hand out a deleted
/// row's id again when it was the highest, and an id is the vector's key in
/// the HNSW file, which would then keep the old vector under it; so ids only
/// grow. Call [`issued_embedding_ids`] with the last id used, in the same
/// transaction.
pub fn next_embedding_id(conn: &Connection) -> Result<i64> {
    let issued: i64 = meta(conn, EMBEDDING_IDS_ISSUED)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let max: i64 = conn.query_row("SELECT coalesce(max(id), 0) FROM embeddings", [], |r| r.get(0))?;
    Ok(issued.max(max) + 1)
}

/// Records `last` as the highest embedding id handed out.
pub fn issued_embedding_ids(conn: &Connection, last: i64) -> Result<()> {
    set_meta(conn, EMBEDDING_IDS_ISSUED, &last.to_string())
}

/// A value of the index's `meta` table, on any connection (or transaction).
fn meta(conn: &Connection, key: &str) -> Result<Option<String>> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()?)
}

fn set_meta(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    Ok(())
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

    #[test]
    fn skip_reasons_have_stable_keys() {
        assert_eq!(skip_reason_key(SkipReason::Generated), "generated");
        assert_eq!(skip_reason_key(SkipReason::InvalidUtf8), "invalid_utf8");
        for reason in [
            SkipReason::Symlink,
            SkipReason::TooLarge,
            SkipReason::NotSource,
            SkipReason::Binary,
            SkipReason::InvalidUtf8,
            SkipReason::Minified,
            SkipReason::Generated,
            SkipReason::Unreadable,
        ] {
            assert_eq!(parse_skip_reason(&skip_reason_key(reason)), Some(reason));
        }
        assert_eq!(parse_skip_reason("from_a_later_ken"), None);
    }

    /// The tables and indexes of a database, by name.
    fn schema_of(conn: &Connection) -> Vec<(String, Option<String>)> {
        let mut stmt = conn
            .prepare("SELECT name, sql FROM sqlite_master ORDER BY name")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn an_upgraded_index_has_the_schema_of_a_new_one() {
        assert!(can_migrate(4));
        assert!(!can_migrate(3), "no step from 3");
        assert!(!can_migrate(SCHEMA_VERSION));
        let dir = tempfile::tempdir().unwrap();
        let fresh = schema_of(&Store::open_for_write(dir.path()).unwrap().conn);
        // Version 4 had no skipped files, nor the import rows' index (6).
        Store::open_for_write(dir.path())
            .unwrap()
            .conn
            .execute_batch(
                "DROP TABLE skipped_files;
                 DROP INDEX refs_import_modules;
                 UPDATE meta SET value = '4' WHERE key = 'schema_version';
                 INSERT INTO meta (key, value) VALUES ('marker', 'kept');",
            )
            .unwrap();
        let reader = Store::open_for_read(dir.path()).unwrap();
        assert_eq!(reader.meta("schema_version").unwrap().as_deref(), Some("6"));
        assert_eq!(reader.meta("marker").unwrap().as_deref(), Some("kept"), "not rebuilt");
        let mut upgraded = schema_of(&reader.conn);
        let mut fresh = fresh;
        // SQLite keeps a table's text as written; compare it without layout.
        for (_, sql) in upgraded.iter_mut().chain(fresh.iter_mut()) {
            *sql = sql.as_ref().map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "));
        }
        assert_eq!(upgraded, fresh);
        // Opening it again (reader or writer) finds nothing to do.
        drop(reader);
        assert!(Store::open_for_write(dir.path()).is_ok());
        assert!(Store::open_for_read(dir.path()).is_ok());
    }

    #[test]
    fn a_reader_sees_who_is_writing() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Store::open_for_write(dir.path()).unwrap();
        let reader = Store::open_for_read(dir.path()).unwrap();
        assert_eq!(reader.active_writer(), None);
        let lock = writer.lock_for_write(Duration::from_secs(1)).unwrap();
        let holder = reader.active_writer().expect("the lock is held");
        assert!(holder.contains(&std::process::id().to_string()), "{holder}");
        drop(lock);
        assert_eq!(reader.active_writer(), None);
        // Asking never blocks a writer.
        drop(writer.lock_for_write(Duration::from_millis(10)).unwrap());
    }
}
