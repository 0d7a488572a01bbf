//! The code graph's rows: definitions (`symbols`) and references (`refs`)
//! of every file version, written inside the indexing transaction and
//! deleted with the version, and read through a branch's catalog, so that a
//! branch never sees the rows of another branch's files. Resolving them to
//! edges is the graph's (`crate::graph`).

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::{count, Store};
use crate::source::extract::{FileGraph, SymbolRow};

/// A definition on the branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Symbol id (0: the top-level code of the file).
    pub id: i64,
    pub name: String,
    pub kind: String,
    pub container: Option<String>,
    pub path: String,
    pub line: u32,
    pub end_line: u32,
    pub language: String,
    pub file_id: i64,
    pub parent: Option<i64>,
}

/// A reference as stored, with its file.
#[derive(Debug, Clone)]
pub struct Ref {
    pub file_id: i64,
    pub path: String,
    pub language: String,
    pub name: String,
    pub kind: String,
    pub receiver: Option<String>,
    pub module: Option<String>,
    pub alias: Option<String>,
    pub line: u32,
    pub caller: Option<i64>,
}

const SYMBOL_COLUMNS: &str =
    "s.id, s.name, s.kind, s.container, f.path, s.line, s.end_line, f.language, s.file_id, s.parent";
const REF_COLUMNS: &str =
    "r.file_id, f.path, f.language, r.name, r.kind, r.receiver, r.module, r.alias, r.line, r.caller";

fn symbol_row(r: &rusqlite::Row) -> rusqlite::Result<Symbol> {
    Ok(Symbol {
        id: r.get(0)?,
        name: r.get(1)?,
        kind: r.get(2)?,
        container: r.get(3)?,
        path: r.get(4)?,
        line: r.get(5)?,
        end_line: r.get(6)?,
        language: r.get(7)?,
        file_id: r.get(8)?,
        parent: r.get(9)?,
    })
}

fn ref_row(r: &rusqlite::Row) -> rusqlite::Result<Ref> {
    Ok(Ref {
        file_id: r.get(0)?,
        path: r.get(1)?,
        language: r.get(2)?,
        name: r.get(3)?,
        kind: r.get(4)?,
        receiver: r.get(5)?,
        module: r.get(6)?,
        alias: r.get(7)?,
        line: r.get(8)?,
        caller: r.get(9)?,
    })
}

/// Stores the graph of a new file version (inside the indexing transaction).
pub(super) fn insert(conn: &Connection, file_id: i64, graph: &FileGraph) -> Result<()> {
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
pub(super) fn delete(conn: &Connection, file_id: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM symbols WHERE file_id = ?1")?
        .execute([file_id])?;
    conn.prepare_cached("DELETE FROM refs WHERE file_id = ?1")?
        .execute([file_id])?;
    Ok(())
}

/// SQL reading definitions of a branch (`?1`) with their files: `{where}` completes it.
fn symbols_sql(rest: &str) -> String {
    format!(
        "SELECT {SYMBOL_COLUMNS} FROM symbols s JOIN catalog c ON c.file_id = s.file_id AND c.branch = ?1
             JOIN files f ON f.id = s.file_id {rest}"
    )
}

impl Store {
    /// Whether `branch` has files in the index.
    pub fn branch_has_files(&self, branch: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM catalog WHERE branch = ?1)",
            [branch],
            |r| r.get(0),
        )?)
    }

    /// Whether `branch` has definitions in the graph.
    pub fn branch_has_symbols(&self, branch: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM symbols s JOIN catalog c ON c.file_id = s.file_id WHERE c.branch = ?1)",
            [branch],
            |r| r.get(0),
        )?)
    }

    /// The definitions of the version of `path` whose content hash is `hash`,
    /// in source order, if the index holds that version (of any branch).
    pub fn symbols_of_version(&self, path: &str, hash: i64) -> Result<Option<Vec<SymbolRow>>> {
        let file: Option<i64> = self
            .conn
            .prepare_cached("SELECT id FROM files WHERE path = ?1 AND content_hash = ?2")?
            .query_row(params![path, hash], |r| r.get(0))
            .optional()?;
        let Some(file) = file else { return Ok(None) };
        let rows = self
            .conn
            .prepare_cached(
                "SELECT name, kind, container, line, start_line, end_line FROM symbols WHERE file_id = ?1 ORDER BY id",
            )?
            .query_map([file], |r| {
                Ok(SymbolRow {
                    name: r.get(0)?,
                    kind: r.get(1)?,
                    container: r.get(2)?,
                    line: r.get(3)?,
                    start_line: r.get(4)?,
                    end_line: r.get(5)?,
                    start_byte: 0,
                    end_byte: 0,
                    parent: None,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(Some(rows))
    }

    /// Definitions named `name` on `branch`, in path and line order.
    pub fn symbols_named(&self, branch: &str, name: &str) -> Result<Vec<Symbol>> {
        let sql = symbols_sql("WHERE s.name = ?2 ORDER BY f.path, s.line");
        let rows = self
            .conn
            .prepare_cached(&sql)?
            .query_map(params![branch, name], symbol_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The definition with this id, if its file is on `branch`.
    pub fn symbol_by_id(&self, branch: &str, id: i64) -> Result<Option<Symbol>> {
        let sql = symbols_sql("WHERE s.id = ?2");
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![branch, id], symbol_row)
            .optional()?)
    }

    /// The innermost definition of `branch`'s file `path` around `line`.
    pub fn symbol_at(&self, branch: &str, path: &str, line: u32) -> Result<Option<Symbol>> {
        let sql = symbols_sql(
            "WHERE c.path = ?2 AND s.start_line <= ?3 AND s.end_line >= ?3
                     ORDER BY s.start_line DESC, s.end_line ASC LIMIT 1",
        );
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![branch, path, line], symbol_row)
            .optional()?)
    }

    /// Every definition of `branch`, in path and line order.
    pub fn all_symbols(&self, branch: &str) -> Result<Vec<Symbol>> {
        let sql = symbols_sql("ORDER BY f.path, s.line");
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_map(params![branch], symbol_row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The ids of up to 3 definitions (`impl` blocks aside) within lines
    /// `start..=end` of `branch`'s file `path`, in line order.
    pub fn symbol_ids_within(&self, branch: &str, path: &str, start: u32, end: u32) -> Result<Vec<i64>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT s.id FROM symbols s JOIN catalog c ON c.file_id = s.file_id AND c.branch = ?1
                 WHERE c.path = ?2 AND s.start_line >= ?3 AND s.end_line <= ?4 AND s.kind != 'impl'
                 ORDER BY s.start_line LIMIT 3",
            )?
            .query_map(params![branch, path, start, end], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// (name, path, line) of up to `limit` definitions of `branch` (`impl`
    /// blocks aside) whose name is `LIKE` the pattern (escaped with `\`),
    /// shortest names first.
    pub fn symbol_names_like(&self, branch: &str, pattern: &str, limit: usize) -> Result<Vec<(String, String, u32)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT s.name, f.path, s.line FROM symbols s JOIN catalog c ON c.file_id = s.file_id AND c.branch = ?1
                 JOIN files f ON f.id = s.file_id
                 WHERE s.name LIKE ?2 ESCAPE '\\' AND s.kind != 'impl'
                 ORDER BY length(s.name), s.name, f.path LIMIT ?3",
            )?
            .query_map(params![branch, pattern, limit as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The start line of the definition `id` as stored (decorators and
    /// attributes included).
    pub fn symbol_start_line(&self, id: i64) -> Result<Option<u32>> {
        Ok(self
            .conn
            .prepare_cached("SELECT start_line FROM symbols WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?)
    }

    /// The doc comment lines (file lines) the chunker found for the
    /// definition `name` of file version `file_id` whose name is on `line`:
    /// of the chunk holding that line, the doc of the definition of that
    /// name, else of its only definition.
    pub fn definition_doc_lines(&self, file_id: i64, name: &str, line: u32) -> Result<Option<(u32, u32)>> {
        let rows: Vec<(u32, Option<String>, Option<String>)> = self
            .conn
            .prepare_cached(
                "SELECT start_line, symbol, doc FROM chunks
                 WHERE file_id = ?1 AND start_line <= ?2 AND end_line >= ?2 AND doc IS NOT NULL",
            )?
            .query_map(params![file_id, line], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (start, symbol, doc) in rows {
            let docs = crate::source::chunk::parse_doc_lines(doc.as_deref(), start);
            let names: Vec<&str> = symbol.as_deref().map(|s| s.split(", ").collect()).unwrap_or_default();
            let named = names.iter().position(|n| *n == name);
            let only = (docs.len() == 1).then_some(0);
            if let Some(found) = named.or(only).and_then(|i| docs.get(i).copied().flatten()) {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The imports of a file version.
    pub fn imports_of_file(&self, file_id: i64) -> Result<Vec<Ref>> {
        let sql = format!(
            "SELECT {REF_COLUMNS} FROM refs r JOIN files f ON f.id = r.file_id WHERE r.file_id = ?1 AND r.kind = 'import'"
        );
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_map([file_id], ref_row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Every path of `branch`.
    pub fn branch_paths(&self, branch: &str) -> Result<Vec<String>> {
        Ok(self
            .conn
            .prepare("SELECT path FROM catalog WHERE branch = ?1")?
            .query_map([branch], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The paths of `branch` that contain `part`, in order.
    pub fn branch_paths_containing(&self, branch: &str, part: &str) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT path FROM catalog WHERE branch = ?1 AND path LIKE '%' || ?2 || '%' ORDER BY path",
        )?;
        let paths = stmt.query_map(params![branch, part], |r| r.get(0))?;
        Ok(paths.collect::<rusqlite::Result<_>>()?)
    }

    /// References of `branch` by `name` (`imports`: imports too), up to `limit`.
    pub fn refs_named(&self, branch: &str, name: &str, imports: bool, limit: usize) -> Result<Vec<Ref>> {
        let condition = if imports {
            "r.name = ?2"
        } else {
            "r.name = ?2 AND r.kind != 'import'"
        };
        refs_where(&self.conn, condition, limit, params![branch, name])
    }

    /// The local names other than `name` that files of `branch` import it under.
    pub fn import_aliases(&self, branch: &str, name: &str) -> Result<Vec<String>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT DISTINCT r.alias FROM refs r JOIN catalog c ON c.file_id = r.file_id AND c.branch = ?1
                 WHERE r.name = ?2 AND r.kind = 'import' AND r.alias IS NOT NULL AND r.alias != r.name",
            )?
            .query_map(params![branch, name], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The references the definition `caller` (of the file version
    /// `file_id`) makes on `branch`, up to `limit`.
    pub fn refs_of_caller(&self, branch: &str, file_id: i64, caller: i64, limit: usize) -> Result<Vec<Ref>> {
        refs_where(
            &self.conn,
            "r.file_id = ?2 AND r.caller = ?3",
            limit,
            params![branch, file_id, caller],
        )
    }

    /// Every reference of `branch`, in path and line order.
    pub fn all_refs(&self, branch: &str) -> Result<Vec<Ref>> {
        refs_where(&self.conn, "1 = 1", usize::MAX, params![branch])
    }

    /// How often each file of `branch` refers to each name (imports aside):
    /// (path, name, count). Counted here rather than by a `GROUP BY`, whose
    /// sort costs 4x the scan.
    pub fn reference_counts(&self, branch: &str) -> Result<Vec<(String, String, u32)>> {
        let mut counts: std::collections::HashMap<(String, String), u32> = std::collections::HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT c.path, r.name FROM refs r JOIN catalog c ON c.file_id = r.file_id AND c.branch = ?1
             WHERE r.kind != 'import'",
        )?;
        let mut rows = stmt.query(params![branch])?;
        while let Some(row) = rows.next()? {
            *counts.entry((row.get(0)?, row.get(1)?)).or_default() += 1;
        }
        Ok(counts.into_iter().map(|((path, name), n)| (path, name, n)).collect())
    }

    /// (path, module, name) of the import rows of `branch` whose module
    /// contains `stem` or whose name is `stem`, in path order.
    pub fn imports_mentioning(&self, branch: &str, stem: &str) -> Result<Vec<(String, Option<String>, String)>> {
        let mut stmt = self.conn.prepare_cached(
            // CROSS JOIN keeps the import rows (an index of their own) the outer loop;
            // the planner would otherwise read every reference of the branch.
            "SELECT DISTINCT c.path, r.module, r.name FROM refs r CROSS JOIN catalog c ON c.file_id = r.file_id AND c.branch = ?1
             WHERE r.kind = 'import' AND (r.module LIKE '%' || ?2 || '%' OR r.name = ?2) ORDER BY c.path",
        )?;
        let rows = stmt.query_map(params![branch, stem], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The rows of the graph: (definitions, references), all branches.
    pub fn graph_row_counts(&self) -> Result<(u64, u64)> {
        Ok((
            count(&self.conn, "SELECT count(*) FROM symbols", [])?,
            count(&self.conn, "SELECT count(*) FROM refs", [])?,
        ))
    }

    /// Ids of up to `samples` functions and methods whose names are
    /// referenced, spread over the repository (the same ones on every run).
    pub fn sampled_symbols(&self, samples: usize) -> Result<Vec<i64>> {
        Ok(self
            .conn
            .prepare(
                "SELECT s.id FROM symbols s WHERE s.kind IN ('function', 'method')
                 AND EXISTS (SELECT 1 FROM refs r WHERE r.name = s.name AND r.kind != 'import')
                 ORDER BY (s.id * 2654435761) % 1000003 LIMIT ?1",
            )?
            .query_map([samples as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The id of one function or method named `name` (the same on every run).
    pub fn sampled_symbol_named(&self, name: &str) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM symbols WHERE name = ?1 AND kind IN ('function', 'method')
                 ORDER BY (id * 2654435761) % 1000003 LIMIT 1",
                [name],
                |r| r.get(0),
            )
            .optional()?)
    }
}

/// References of a branch (`?1`) matching `condition`, `limit` at most.
fn refs_where(conn: &Connection, condition: &str, limit: usize, p: impl rusqlite::Params) -> Result<Vec<Ref>> {
    let limit = limit.min(i64::MAX as usize);
    let sql = format!(
        "SELECT {REF_COLUMNS} FROM refs r JOIN catalog c ON c.file_id = r.file_id AND c.branch = ?1
         JOIN files f ON f.id = r.file_id WHERE {condition} ORDER BY f.path, r.line LIMIT {limit}"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_map(p, ref_row)?
        .collect::<rusqlite::Result<_>>()?)
}
