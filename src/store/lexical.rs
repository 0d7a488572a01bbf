//! The lexical index's upkeep and statistics: FTS5's settings, the chunk
//! count and the lexical generation written with every change to the
//! chunks, the stored frequencies of common terms (and whether they are
//! behind), and a term's chunk count as search reads it.

use anyhow::Result;
use rusqlite::{Connection, OptionalExtension};

use super::meta::{meta_parsed, set_meta, MetaKey};
use super::schema::COMMON_TERMS_SCHEMA;
use super::{count, Store};

impl Store {
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
        let chunks = counted_chunks(&tx)?;
        // In the schema since version 7; made again if it was dropped.
        tx.execute_batch(COMMON_TERMS_SCHEMA)?;
        tx.execute_batch("DELETE FROM common_terms;")?;
        tx.execute(
            "INSERT INTO common_terms (term, df) SELECT term, doc FROM chunks_vocab WHERE doc >= ?1",
            [(chunks / 100).max(100)],
        )?;
        set_meta(&tx, MetaKey::CommonTermsChunks, &chunks.to_string())?;
        set_meta(&tx, MetaKey::ChunkCount, &chunks.to_string())?;
        let generation = lexical_generation(&tx)?;
        set_meta(&tx, MetaKey::CommonTermsGeneration, &generation.to_string())?;
        tx.commit()?;
        Ok(chunks)
    }

    /// The chunk count when the common terms' frequencies were stored.
    pub fn common_terms_stored_at(&self) -> Result<Option<i64>> {
        self.meta_parsed(MetaKey::CommonTermsChunks)
    }

    /// Whether chunks were added or removed since the common terms'
    /// frequencies were stored (in this run or one that was interrupted):
    /// they are then recounted (see `index`) or reconciled by `ken health`.
    pub fn common_terms_stale(&self) -> Result<bool> {
        let Some(counted_at) = self.common_terms_stored_at()? else {
            return Ok(true);
        };
        let at_generation: i64 = self.meta_parsed(MetaKey::CommonTermsGeneration)?.unwrap_or(0);
        Ok(at_generation != lexical_generation(&self.conn)? || counted_at != counted_chunks(&self.conn)?)
    }

    /// Whether the stored frequencies are this snapshot's, from the metadata
    /// alone: stored at the current lexical generation and chunk count (a
    /// watcher's small runs leave them behind until the index drifts by 5%).
    pub fn common_terms_current(&self) -> Result<bool> {
        let at: Option<i64> = self.meta_parsed(MetaKey::CommonTermsGeneration)?;
        let chunks_at: Option<i64> = self.common_terms_stored_at()?;
        let chunks: Option<i64> = self.meta_parsed(MetaKey::ChunkCount)?;
        Ok(at == Some(lexical_generation(&self.conn)?) && chunks_at.is_some() && chunks_at == chunks)
    }

    /// The stored chunk count (`chunk_count`), if it disagrees with the
    /// chunks: (stored, counted).
    pub fn chunk_count_drift(&self) -> Result<Option<(Option<i64>, i64)>> {
        let stored: Option<i64> = self.meta_parsed(MetaKey::ChunkCount)?;
        let counted = counted_chunks(&self.conn)?;
        Ok((stored != Some(counted)).then_some((stored, counted)))
    }

    /// Writes the chunk count as it is (`chunk_count`).
    pub fn store_chunk_count(&self) -> Result<i64> {
        let counted = counted_chunks(&self.conn)?;
        self.set_meta(MetaKey::ChunkCount, &counted.to_string())?;
        Ok(counted)
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

    /// The chunks of the index, counted.
    pub fn counted_chunks(&self) -> Result<i64> {
        counted_chunks(&self.conn)
    }

    /// The ids of the first 10 chunks FTS5's own ranking gives for an FTS5
    /// query (the baseline of `ken bench`).
    pub fn fts_top_ten(&self, fts_query: &str) -> Result<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?1 ORDER BY rank LIMIT 10")?;
        let ids = stmt.query_map([fts_query], |r| r.get::<_, i64>(0))?;
        Ok(ids.collect::<rusqlite::Result<_>>()?)
    }
}

/// How many batches have changed the chunks (0 for an index written
/// before this was counted).
pub(super) fn lexical_generation(conn: &Connection) -> Result<i64> {
    Ok(meta_parsed(conn, MetaKey::LexicalGeneration)?.unwrap_or(0))
}

/// The chunks of the index, counted.
pub(super) fn counted_chunks(conn: &Connection) -> Result<i64> {
    Ok(count(conn, "SELECT count(*) FROM chunks", [])? as i64)
}
