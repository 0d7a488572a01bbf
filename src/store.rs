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

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};

use crate::chunk::Chunk;
use crate::discover::SkipReason;
use crate::lexical;

/// Bumped whenever the schema or the meaning of stored data changes. An
/// index of an older version is upgraded in place by [`MIGRATIONS`] when a
/// chain of steps leads from its version to this one; any other is rebuilt.
pub const SCHEMA_VERSION: i64 = 5;

/// The steps that upgrade an index in place, oldest first: `(from, sql)`
/// turns an index of version `from` into one of version `from + 1`. Only
/// additive changes (new tables, new indexes) belong here, so that what an
/// index holds (its vectors above all) is kept. A change to the meaning of
/// stored data bumps [`SCHEMA_VERSION`] without a step: older indexes are
/// then rebuilt.
const MIGRATIONS: &[(i64, &str)] = &[(4, SKIPPED_FILES_SCHEMA)];

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
    pub graph: Option<crate::graph::FileGraph>,
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

    pub fn with_graph(mut self, graph: Option<crate::graph::FileGraph>) -> Self {
        self.graph = graph;
        self
    }
}

impl Store {
    /// Opens the index for writing, creating it if needed. An index of another
    /// schema version, or one that SQLite cannot read, is rebuilt from scratch.
    pub fn open_for_write(dir: &Path) -> Result<Store> {
        Self::open_for_write_locked(dir, false)
    }

    /// [`Store::open_for_write`]; creating or rebuilding the database happens
    /// under the writer lock (taken here unless `locked`: the caller holds it),
    /// so two processes starting on a new index never race to create it.
    fn open_for_write_locked(dir: &Path, locked: bool) -> Result<Store> {
        fs::create_dir_all(dir).with_context(|| format!("cannot create the index directory {}", dir.display()))?;
        // Keeps the index out of `git status` even where .git/info/exclude is not written.
        let ignore_file = dir.join(".gitignore");
        if !ignore_file.exists() {
            let _ = fs::write(&ignore_file, "*\n");
        }
        let db = dir.join(DB_FILE);
        if !locked {
            if let Existing::Ready(conn) = Self::open_existing_db(&db, false)? {
                return Ok(Store {
                    conn,
                    dir: dir.to_path_buf(),
                });
            }
        }
        let _lock = if locked {
            None
        } else {
            Some(lock_dir(dir, Duration::from_secs(120))?)
        };
        // Checked again under the lock: another process may have just created it.
        match Self::open_existing_db(&db, false)? {
            Existing::Ready(conn) => {
                return Ok(Store {
                    conn,
                    dir: dir.to_path_buf(),
                })
            }
            Existing::Missing => {}
            Existing::Unusable(e) => {
                eprintln!("ken: rebuilding the index at {}: {e:#}", dir.display());
                remove_db_files(&db)?;
            }
        }
        // Built under another name in one transaction and renamed into place:
        // a process killed meanwhile leaves no half-made index for readers.
        let draft = dir.join(format!("{DB_FILE}.creating"));
        remove_db_files(&draft)?;
        {
            let mut conn = Connection::open(&draft).with_context(|| format!("cannot create {}", draft.display()))?;
            let tx = conn.transaction()?;
            tx.execute_batch(SCHEMA).context("creating the index schema")?;
            tx.execute_batch(SKIPPED_FILES_SCHEMA)
                .context("creating the index schema")?;
            tx.execute_batch(crate::graph::SCHEMA)
                .context("creating the graph schema")?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?1), ('created_at', ?2)",
                params![SCHEMA_VERSION.to_string(), now_rfc3339()],
            )?;
            tx.commit()?;
        }
        // A WAL left without its database must not be replayed into the new one.
        remove_db_files(&db)?;
        fs::rename(&draft, &db).with_context(|| format!("cannot create {}", db.display()))?;
        let conn = Connection::open(&db).with_context(|| format!("cannot open {}", db.display()))?;
        configure(&conn)?;
        Ok(Store {
            conn,
            dir: dir.to_path_buf(),
        })
    }

    /// Deletes the index and creates an empty one in its place.
    pub fn recreate(self) -> Result<Store> {
        let dir = self.dir.clone();
        drop(self.conn);
        remove_db_files(&dir.join(DB_FILE))?;
        // Callers hold the writer lock while they recreate.
        Store::open_for_write_locked(&dir, true)
    }

    /// Opens an existing index for reading; a clear error if there is none.
    /// An index of an older schema version that [`MIGRATIONS`] can upgrade is
    /// upgraded first (a short write); a clear error if it cannot be written.
    pub fn open_for_read(dir: &Path) -> Result<Store> {
        let db = dir.join(DB_FILE);
        let opened = Self::open_existing_db(&db, true)
            .with_context(|| format!("the index at {} cannot be used", dir.display()))?;
        match opened {
            Existing::Ready(conn) => Ok(Store {
                conn,
                dir: dir.to_path_buf(),
            }),
            Existing::Missing => bail!("no index at {}; run `ken index` in the repository first", dir.display()),
            Existing::Unusable(e) => Err(e.context(format!(
                "the index at {} cannot be used; run `ken index` to rebuild it",
                dir.display()
            ))),
        }
    }

    /// Opens the database `db` if it exists and has this schema version,
    /// upgrading an older version in place when [`MIGRATIONS`] lead from it.
    /// `Err`: it could not be opened or upgraded for a reason that rebuilding
    /// would not cure (e.g. the upgrade cannot write a read-only index).
    fn open_existing_db(db: &Path, read_only: bool) -> Result<Existing> {
        if !db.exists() {
            return Ok(Existing::Missing);
        }
        let flags = if read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = match Connection::open_with_flags(db, flags) {
            Ok(conn) => conn,
            Err(e) => {
                return Ok(Existing::Unusable(
                    anyhow::Error::new(e).context(format!("cannot open {}", db.display())),
                ))
            }
        };
        if !read_only {
            if let Err(e) = configure(&conn) {
                return Ok(Existing::Unusable(e));
            }
        } else {
            conn.busy_timeout(Duration::from_secs(10))?;
        }
        let version = match schema_version(&conn) {
            Ok(version) => version,
            Err(e) => return Ok(Existing::Unusable(e)),
        };
        match version {
            Some(SCHEMA_VERSION) => Ok(Existing::Ready(conn)),
            Some(v) if can_migrate(v) => {
                if read_only {
                    // Upgraded through a short read-write connection, then opened again.
                    drop(conn);
                    migrate_db(db)?;
                    Self::open_existing_db(db, true)
                } else {
                    let mut conn = conn;
                    migrate(&mut conn).with_context(|| {
                        format!(
                            "cannot upgrade the index at {} from schema version {v} to {SCHEMA_VERSION}",
                            db.display()
                        )
                    })?;
                    Ok(Existing::Ready(conn))
                }
            }
            Some(v) => Ok(Existing::Unusable(anyhow::anyhow!(
                "it has schema version {v}, this ken uses {SCHEMA_VERSION}"
            ))),
            None => Ok(Existing::Unusable(anyhow::anyhow!("it has no schema version"))),
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
    /// `chunks` chunks (and 100). FTS5 counts a term's chunks by walking its
    /// whole posting list, ~1 ms per 30k chunks, on every query that has it;
    /// search reads these instead (see [`Store::term_frequency`]).
    pub fn store_common_term_frequencies(&self, chunks: i64) -> Result<()> {
        let tx = self.conn.unchecked_transaction()?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS common_terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
             DELETE FROM common_terms;",
        )?;
        tx.execute(
            "INSERT INTO common_terms (term, df) SELECT term, doc FROM chunks_vocab WHERE doc >= ?1",
            [(chunks / 100).max(100)],
        )?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('common_terms_chunks', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [chunks.to_string()],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The chunk count when the common terms' frequencies were stored.
    pub fn common_terms_stored_at(&self) -> Result<Option<i64>> {
        Ok(self.meta("common_terms_chunks")?.and_then(|v| v.parse().ok()))
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
    /// Present but unusable (corrupt, or a schema version no step leads
    /// from): a writer rebuilds it.
    Unusable(anyhow::Error),
}

/// The schema version recorded in an index, if any.
fn schema_version(conn: &Connection) -> Result<Option<i64>> {
    let version: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0))
        .optional()
        .context("the index database is damaged")?;
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
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
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
pub struct Batch<'c> {
    tx: Transaction<'c>,
}

impl<'c> Batch<'c> {
    pub fn begin(store: &'c mut Store) -> Result<Batch<'c>> {
        Ok(Batch {
            tx: store.conn.transaction()?,
        })
    }

    pub fn commit(self) -> Result<()> {
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
            crate::graph::insert(&self.tx, file_id, graph)?;
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
        crate::graph::delete(&self.tx, file_id)?;
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
        // Version 4 had no skipped files.
        Store::open_for_write(dir.path())
            .unwrap()
            .conn
            .execute_batch(
                "DROP TABLE skipped_files;
                 UPDATE meta SET value = '4' WHERE key = 'schema_version';
                 INSERT INTO meta (key, value) VALUES ('marker', 'kept');",
            )
            .unwrap();
        let reader = Store::open_for_read(dir.path()).unwrap();
        assert_eq!(reader.meta("schema_version").unwrap().as_deref(), Some("5"));
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
