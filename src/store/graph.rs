//! The code graph's tables: rows belong to a file version like chunks, are
//! written inside the indexing transaction and deleted with the version.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::source::extract::FileGraph;

/// Graph tables; rows belong to a file version like chunks, and are deleted with it.
pub(crate) const SCHEMA: &str = r#"
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
pub(crate) const IMPORT_MODULES_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS refs_import_modules ON refs (module, name) WHERE kind = 'import';";

/// Stores the graph of a new file version (inside the indexing transaction).
pub(crate) fn insert(conn: &Connection, file_id: i64, graph: &FileGraph) -> Result<()> {
    let mut insert_symbol = conn.prepare_cached(
        "INSERT INTO symbols (file_id, name, kind, container, parent, line, start_line, end_line)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut ids = Vec::with_capacity(graph.symbols.len());
    for s in &graph.symbols {
        let parent = s.parent.map(|p| ids[p]);
        insert_symbol.execute(params![
            file_id,
            s.name,
            s.kind,
            s.container,
            parent,
            s.line,
            s.start_line,
            s.end_line
        ])?;
        ids.push(conn.last_insert_rowid());
    }
    let mut insert_ref = conn.prepare_cached(
        "INSERT INTO refs (file_id, seq, name, kind, receiver, module, alias, line, caller)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    for (seq, r) in graph.refs.iter().enumerate() {
        insert_ref.execute(params![
            file_id,
            seq as i64,
            r.name,
            r.kind,
            r.receiver,
            r.module,
            r.alias,
            r.line,
            r.caller.map(|c| ids[c])
        ])?;
    }
    Ok(())
}

/// Deletes the graph rows of a file version that is being dropped.
pub(crate) fn delete(conn: &Connection, file_id: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM symbols WHERE file_id = ?1")?
        .execute([file_id])?;
    conn.prepare_cached("DELETE FROM refs WHERE file_id = ?1")?
        .execute([file_id])?;
    Ok(())
}
