//! The index's schema: every table and index of the database, its one
//! version ([`SCHEMA_VERSION`]), the tables of a new index
//! ([`create_tables`]) and the in-place upgrades of an older one
//! ([`MIGRATIONS`]).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::meta::{set_meta, MetaKey};

/// Bumped whenever the schema or the meaning of stored data changes. An
/// index of an older version is upgraded in place by [`MIGRATIONS`] when a
/// chain of steps leads from its version to this one; any other is rebuilt.
pub const SCHEMA_VERSION: i64 = 9;

/// The steps that upgrade an index in place, oldest first: `(from, sql)`
/// turns an index of version `from` into one of version `from + 1`. Only
/// additive changes (new tables, indexes, columns) belong here, so that what an
/// index holds (its vectors above all) is kept; each is idempotent (an index
/// of an older ken may already have a table that was made on first use), but
/// for a new column, which no older ken made. A
/// change to the meaning of stored data bumps [`SCHEMA_VERSION`] without a
/// step: older indexes are then rebuilt.
const MIGRATIONS: &[(i64, &[&str])] = &[
    (4, &[SKIPPED_FILES_SCHEMA]),
    (5, &[IMPORT_MODULES_INDEX]),
    // The tables made on first use before version 7.
    (6, &[COMMON_TERMS_SCHEMA, QUERY_ADAPTERS_SCHEMA]),
    // Rows written before are NULL until their file is chunked again (the
    // chunking fingerprint changed with the `@doc` captures).
    (7, &[CHUNK_DOC_COLUMN, CHUNK_COMMENTS_COLUMN]),
    (8, &[CHUNK_SYMBOLS_BY_CHUNK_INDEX]),
];

/// Added in version 9: a file's old version drops its chunks' symbol rows
/// by chunk id; without this index each of those deletes scanned the table
/// (a one-file edit cost ~0.5 s at 800k chunks).
const CHUNK_SYMBOLS_BY_CHUNK_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS chunk_symbols_by_chunk ON chunk_symbols (chunk_id);";

/// Added in version 8: the doc comment lines of a chunk's definitions
/// (`Chunk::doc_label`).
const CHUNK_DOC_COLUMN: &str = "ALTER TABLE chunks ADD COLUMN doc TEXT;";
/// Added in version 8: the lines of every comment and docstring of a chunk
/// (`Chunk::comments_label`).
const CHUNK_COMMENTS_COLUMN: &str = "ALTER TABLE chunks ADD COLUMN comments TEXT;";

/// Added in version 5. `mtime_ns` is 0 when the file was too recent to trust
/// its mtime (as in `catalog`); `reason` is the skip reason's key
/// (`store::skip_reason_key`).
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
-- `doc`: the lines of the doc comment of each name in `symbol`, in its order:
-- `a-b` (lines of the chunk, 1-based) or empty, joined by `,`; NULL when none.
-- `comments`: the lines of every comment and docstring in the chunk (`@doc`
-- captures, whoever's doc they are), `a-b` joined by `,`; NULL when none.
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
    context TEXT,
    doc TEXT,
    comments TEXT);
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

/// Graph tables; rows belong to a file version like chunks, and are deleted with it.
const GRAPH_SCHEMA: &str = r#"
CREATE TABLE symbols (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files (id),
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    container TEXT,
    parent INTEGER,
    line INTEGER NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL
);
CREATE INDEX symbols_by_name ON symbols (name);
CREATE INDEX symbols_by_file ON symbols (file_id);
CREATE TABLE refs (
    file_id INTEGER NOT NULL REFERENCES files (id),
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    receiver TEXT,
    module TEXT,
    alias TEXT,
    line INTEGER NOT NULL,
    caller INTEGER,
    PRIMARY KEY (file_id, seq)
) WITHOUT ROWID;
CREATE INDEX refs_by_name ON refs (name);
"#;

/// Added in schema version 6: the import rows alone, so that finding the files
/// importing a module reads them and not every reference.
const IMPORT_MODULES_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS refs_import_modules ON refs (module, name) WHERE kind = 'import';";

/// The document frequency of the terms in at least 1% of the chunks
/// (`Store::store_common_term_frequencies`). Made on first use before
/// version 7: created again by its writer if it is missing.
pub(super) const COMMON_TERMS_SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS common_terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;";

/// The query adapter of the index's embedder (`store::adapter`). Made on
/// first use before version 7: created again by its writer if it is missing.
pub(super) const QUERY_ADAPTERS_SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS query_adapters (model TEXT PRIMARY KEY, matrix BLOB NOT NULL) WITHOUT ROWID;";

/// Creates every table of a new index (of [`SCHEMA_VERSION`]) in `tx`, with
/// its version and creation time.
pub(super) fn create_tables(tx: &Connection) -> Result<()> {
    tx.execute_batch(SCHEMA).context("creating the index schema")?;
    tx.execute_batch(SKIPPED_FILES_SCHEMA)
        .context("creating the index schema")?;
    tx.execute_batch(GRAPH_SCHEMA).context("creating the graph schema")?;
    tx.execute_batch(IMPORT_MODULES_INDEX)
        .context("creating the graph schema")?;
    tx.execute_batch(CHUNK_SYMBOLS_BY_CHUNK_INDEX)
        .context("creating the index schema")?;
    tx.execute_batch(COMMON_TERMS_SCHEMA)
        .context("creating the index schema")?;
    tx.execute_batch(QUERY_ADAPTERS_SCHEMA)
        .context("creating the index schema")?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2), (?3, ?4)",
        params![
            MetaKey::SchemaVersion.name(),
            SCHEMA_VERSION.to_string(),
            MetaKey::CreatedAt.name(),
            super::now_rfc3339()
        ],
    )?;
    Ok(())
}

/// The schema version recorded in an index, if any.
pub(super) fn schema_version(conn: &Connection) -> Result<Option<i64>> {
    let version: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            [MetaKey::SchemaVersion.name()],
            |r| r.get(0),
        )
        .optional()
        .context("reading the index's schema version")?;
    Ok(version.and_then(|v| v.parse::<i64>().ok()))
}

/// Whether [`MIGRATIONS`] lead from `version` to [`SCHEMA_VERSION`].
pub(super) fn can_migrate(version: i64) -> bool {
    version < SCHEMA_VERSION && (version..SCHEMA_VERSION).all(|v| MIGRATIONS.iter().any(|(from, _)| *from == v))
}

/// Upgrades the index on `conn` to [`SCHEMA_VERSION`] in one transaction
/// (all steps or none). The version is read again inside it: another
/// process may have upgraded the index meanwhile.
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
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
        let (_, steps) = MIGRATIONS
            .iter()
            .find(|(from, _)| *from == version)
            .context("a missing upgrade step")?;
        for sql in *steps {
            tx.execute_batch(sql)
                .with_context(|| format!("upgrading from schema version {version}"))?;
        }
        version += 1;
    }
    set_meta(&tx, MetaKey::SchemaVersion, &SCHEMA_VERSION.to_string())?;
    tx.commit().context("committing the upgrade")?;
    tracing::info!("upgraded the index to schema version {SCHEMA_VERSION}");
    Ok(())
}

/// [`migrate`] for a reader: through a short read-write connection to `db`;
/// a clear error if the index cannot be written.
pub(super) fn migrate_db(db: &Path) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

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
        assert!(can_migrate(6));
        assert!(!can_migrate(3), "no step from 3");
        assert!(!can_migrate(SCHEMA_VERSION));
        let dir = tempfile::tempdir().unwrap();
        let fresh = schema_of(&Store::open_for_write(dir.path()).unwrap().conn);
        // Version 4 had no skipped files, nor the import rows' index (6),
        // nor the tables made on first use (7), nor the chunks' doc lines (8).
        Store::open_for_write(dir.path())
            .unwrap()
            .conn
            .execute_batch(
                "DROP TABLE skipped_files;
                 DROP INDEX refs_import_modules;
                 DROP TABLE common_terms;
                 DROP TABLE query_adapters;
                 ALTER TABLE chunks DROP COLUMN doc;
                 ALTER TABLE chunks DROP COLUMN comments;
                 UPDATE meta SET value = '4' WHERE key = 'schema_version';
                 INSERT INTO meta (key, value) VALUES ('marker', 'kept');",
            )
            .unwrap();
        let reader = Store::open_for_read(dir.path()).unwrap();
        assert_eq!(
            reader.meta(MetaKey::SchemaVersion).unwrap(),
            Some(SCHEMA_VERSION.to_string())
        );
        assert_eq!(
            super::super::meta::meta(&reader.conn, "marker").unwrap().as_deref(),
            Some("kept"),
            "not rebuilt"
        );
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
    fn an_index_of_version_6_with_its_tables_made_on_first_use_is_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_for_write(dir.path()).unwrap();
        store
            .conn
            .execute_batch(
                "INSERT INTO common_terms (term, df) VALUES ('parse', 3);
                 ALTER TABLE chunks DROP COLUMN doc;
                 ALTER TABLE chunks DROP COLUMN comments;
                 UPDATE meta SET value = '6' WHERE key = 'schema_version';",
            )
            .unwrap();
        drop(store);
        let reader = Store::open_for_read(dir.path()).unwrap();
        assert_eq!(
            reader.meta_parsed::<i64>(MetaKey::SchemaVersion).unwrap(),
            Some(SCHEMA_VERSION)
        );
        assert_eq!(reader.term_frequency("parse").unwrap(), 3, "its rows are kept");
    }
}
