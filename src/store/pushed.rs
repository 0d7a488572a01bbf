//! Reads of a branch's chunks as they are pushed to the shared engine
//! ([`super::engine`]): each file version's chunks with their text and
//! their vector of one embedder.

use rusqlite::params;

use super::lookup::side_by_side_sql;
use super::Store;
use anyhow::Result;

/// A chunk's lines and text, as the engine stores them.
pub struct ChunkText {
    pub start_line: u32,
    pub end_line: u32,
    pub kind: String,
    pub symbol: Option<String>,
    pub context: Option<String>,
    pub text: String,
    /// How many definitions it holds side by side ([`super::lookup::ChunkRow::side_by_side`]).
    pub side_by_side: u32,
}

/// A chunk of a file version, as pushed.
pub struct PushedChunk {
    pub chunk: ChunkText,
    /// The names of the definitions in the chunk.
    pub names: Vec<String>,
    /// Its vector of the embedder asked for, encoded.
    pub vector: Option<Vec<u8>>,
    /// Its signature vectors of the embedder asked for (one per name, end
    /// to end, encoded), when it has them.
    pub signatures: Option<Vec<u8>>,
}

impl Store {
    /// The language of file version `file_id`.
    pub fn file_language(&self, file_id: i64) -> Result<String> {
        Ok(self
            .conn
            .prepare_cached("SELECT language FROM files WHERE id = ?1")?
            .query_row([file_id], |r| r.get(0))?)
    }

    /// The chunks of file version `file_id` in line order, with their vector
    /// of `model` and their signature vectors of `signature_model`.
    pub fn pushed_chunks(
        &self,
        file_id: i64,
        model: Option<&str>,
        signature_model: Option<&str>,
    ) -> Result<Vec<PushedChunk>> {
        let mut stmt = self.conn.prepare_cached(concat!(
            "SELECT c.start_line, c.end_line, c.kind, c.symbol, c.context, t.text,
                    (SELECT group_concat(s.name, char(10)) FROM chunk_symbols s WHERE s.chunk_id = c.id),
                    CASE WHEN ?2 IS NOT NULL THEN
                        (SELECT vector FROM embeddings WHERE content_hash = c.content_hash AND model = ?2) END,
                    CASE WHEN ?3 IS NOT NULL THEN
                        (SELECT vector FROM embeddings WHERE content_hash = c.content_hash AND model = ?3) END,
                    ",
            side_by_side_sql!(),
            "
             FROM chunks c JOIN contents t ON t.hash = c.content_hash
             WHERE c.file_id = ?1 ORDER BY c.start_line, c.id"
        ))?;
        let rows = stmt.query_map(params![file_id, model, signature_model], |r| {
            let names: Option<String> = r.get(6)?;
            Ok(PushedChunk {
                chunk: ChunkText {
                    start_line: r.get(0)?,
                    end_line: r.get(1)?,
                    kind: r.get(2)?,
                    symbol: r.get(3)?,
                    context: r.get(4)?,
                    text: r.get(5)?,
                    side_by_side: r.get(9)?,
                },
                names: names
                    .map(|n| n.lines().map(str::to_string).collect())
                    .unwrap_or_default(),
                vector: r.get(7)?,
                signatures: r.get(8)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
