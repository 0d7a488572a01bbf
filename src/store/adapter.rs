//! The query adapter's rows: its matrix per model (`query_adapters`), the
//! record of the last fit, its summary and lead words (`meta`), and the
//! rows a fit is made from (documented chunks, the stored vectors it ranks
//! against). What they mean is `crate::embed::adapter`'s.

use anyhow::{Context, Result};
use rusqlite::{params, Connection};

use super::meta::{delete_meta, meta, set_meta, MetaKey};
use super::schema::QUERY_ADAPTERS_SCHEMA;
use super::Store;

/// A saved fit, as [`Store::save_query_adapter`] writes it.
pub struct SavedFit<'a> {
    /// The record of the fit (model, method, contents, pairs).
    pub record: &'a str,
    /// How the fit was chosen (empty: no adapter).
    pub summary: &'a str,
    /// The adapter's matrix and its lead words (space-separated), if there is one.
    pub adapter: Option<(&'a [u8], Option<&'a str>)>,
}

/// A chunk that documents a single definition, as a fit's pairs are made of.
pub struct DocumentedChunk {
    pub context: Option<String>,
    pub symbol: Option<String>,
    pub text: String,
    pub hash: i64,
    /// The doc comment lines of its definition (`Chunk::doc_label`).
    pub doc: Option<String>,
}

impl Store {
    /// The record of the last fit, if one was made.
    pub fn query_adapter_record(&self) -> Result<Option<String>> {
        self.meta(MetaKey::QueryAdapter)
    }

    /// How the saved fit was chosen, if one was made.
    pub fn query_adapter_summary(&self) -> Option<String> {
        meta(&self.conn, &MetaKey::QueryAdapterFit.name()).ok().flatten()
    }

    /// The saved adapter of `model`: its matrix and lead words.
    pub fn query_adapter(&self, model: &str) -> Option<(Vec<u8>, Option<String>)> {
        saved_adapter(&self.conn, model)
    }

    /// Records a fit, replacing any other (and the records of the older ways of fitting).
    pub fn save_query_adapter(&self, model: &str, fit: &SavedFit) -> Result<()> {
        let tx = self.conn.unchecked_transaction()?;
        // In the schema since version 7; made again if it was dropped.
        tx.execute_batch(QUERY_ADAPTERS_SCHEMA)?;
        tx.execute_batch("DELETE FROM query_adapters;")?;
        delete_meta(&tx, MetaKey::QueryAdapterLeads)?;
        if let Some((matrix, leads)) = fit.adapter {
            tx.execute(
                "INSERT INTO query_adapters (model, matrix) VALUES (?1, ?2)",
                params![model, matrix],
            )?;
            if let Some(leads) = leads {
                set_meta(&tx, MetaKey::QueryAdapterLeads, leads)?;
            }
        }
        for version in 1..=3 {
            delete_meta(&tx, MetaKey::OldQueryAdapter(version))?;
        }
        set_meta(&tx, MetaKey::QueryAdapterFit, fit.summary)?;
        set_meta(&tx, MetaKey::QueryAdapter, fit.record)?;
        tx.commit().context("saving the query adapter")
    }

    /// Calls `each` with the chunks of `branch` that document a single
    /// definition (one per content, in content-hash order) until it says stop.
    pub fn for_each_documented_chunk(
        &self,
        branch: &str,
        mut each: impl FnMut(DocumentedChunk) -> Result<bool>,
    ) -> Result<()> {
        let mut stmt = self.conn.prepare(
            "SELECT min(c.context), min(c.symbol), t.text, t.hash, min(c.doc) FROM chunks c
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             JOIN contents t ON t.hash = c.content_hash
             WHERE c.symbol IS NOT NULL AND instr(c.symbol, ', ') = 0 AND c.doc IS NOT NULL
               AND c.kind NOT IN ('text', 'section', 'module', 'namespace')
             GROUP BY t.hash ORDER BY t.hash",
        )?;
        let mut rows = stmt.query([branch])?;
        while let Some(row) = rows.next()? {
            let chunk = DocumentedChunk {
                context: row.get(0)?,
                symbol: row.get(1)?,
                text: row.get(2)?,
                hash: row.get(3)?,
                doc: row.get(4)?,
            };
            if !each(chunk)? {
                break;
            }
        }
        Ok(())
    }

    /// Calls `each` with (content hash, vector) of `model` for the chunks of
    /// the files of `branch` that hold one of the `pairs` contents, in hash
    /// order, until it says stop.
    pub fn for_each_vector_beside(
        &self,
        branch: &str,
        model: &str,
        pairs: &[i64],
        each: impl FnMut(i64, Vec<u8>) -> Result<bool>,
    ) -> Result<()> {
        let pair_list = serde_json::to_string(pairs)?;
        let mut stmt = self.conn.prepare(
            "SELECT DISTINCT e.content_hash, e.vector FROM chunks p
             JOIN catalog k ON k.file_id = p.file_id AND k.branch = ?1
             JOIN chunks c ON c.file_id = p.file_id
             JOIN embeddings e ON e.content_hash = c.content_hash AND e.model = ?2
             WHERE p.content_hash IN (SELECT value FROM json_each(?3))
             ORDER BY e.content_hash",
        )?;
        let rows = stmt.query(params![branch, model, pair_list])?;
        each_vector(rows, each)
    }

    /// Calls `each` with (content hash, vector) of `model` for the contents
    /// of `branch`, in hash order, until it says stop.
    pub fn for_each_branch_vector(
        &self,
        branch: &str,
        model: &str,
        each: impl FnMut(i64, Vec<u8>) -> Result<bool>,
    ) -> Result<()> {
        let mut stmt = self.conn.prepare(
            "SELECT e.content_hash, e.vector FROM embeddings e
             WHERE e.model = ?2 AND EXISTS (SELECT 1 FROM chunks c JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
                                            WHERE c.content_hash = e.content_hash)
             ORDER BY e.content_hash",
        )?;
        let rows = stmt.query(params![branch, model])?;
        each_vector(rows, each)
    }
}

/// Calls `each` with the (hash, vector) rows until it says stop.
fn each_vector(mut rows: rusqlite::Rows, mut each: impl FnMut(i64, Vec<u8>) -> Result<bool>) -> Result<()> {
    while let Some(row) = rows.next()? {
        if !each(row.get(0)?, row.get(1)?)? {
            break;
        }
    }
    Ok(())
}

/// [`Store::query_adapter`] on a connection of the index.
fn saved_adapter(conn: &Connection, model: &str) -> Option<(Vec<u8>, Option<String>)> {
    let matrix: Vec<u8> = conn
        .query_row("SELECT matrix FROM query_adapters WHERE model = ?1", [model], |r| {
            r.get(0)
        })
        .ok()?;
    let leads = meta(conn, &MetaKey::QueryAdapterLeads.name()).ok().flatten();
    Some((matrix, leads))
}
