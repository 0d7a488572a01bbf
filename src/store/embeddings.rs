//! The `embeddings` table: the chunk vectors, one row per distinct content
//! and embedder id, under ids that only grow (the keys of the HNSW file,
//! [`super::vectors`]); what a branch still lacks, and the counts `ken
//! status` and `ken health` report.

use anyhow::Result;
use rusqlite::{params, Connection};

use super::catalog::BranchOutside;
use super::meta::{meta_parsed, set_meta, MetaKey};
use super::vectors::encode;
use super::{count, Store};

/// A chunk content of a branch that has no vector of a model yet, with what
/// its embedding text is made of.
pub struct ContentToEmbed {
    pub hash: i64,
    pub context: Option<String>,
    pub symbol: Option<String>,
    pub kind: String,
    pub text: String,
    /// The doc comment lines of its definitions (`Chunk::doc_label`).
    pub doc: Option<String>,
}

impl Store {
    /// Stores the vectors of `model` for these content hashes, in one
    /// transaction, under new ids (a content that has one already keeps it).
    pub fn insert_vectors(&mut self, model: &str, vectors: &[(i64, &[f32])]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut next_id = next_embedding_id(&tx)?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO embeddings (id, content_hash, model, vector) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (content_hash, model) DO NOTHING",
            )?;
            for (hash, vector) in vectors {
                next_id += insert.execute(params![next_id, hash, model, encode(vector)])? as i64;
            }
            issued_embedding_ids(&tx, next_id - 1)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Calls `each` with every distinct content of `branch` that has no
    /// vector of `model` (with `named_only`, of chunks that define a name).
    pub fn for_each_content_without_vectors(
        &self,
        branch: &str,
        model: &str,
        named_only: bool,
        mut each: impl FnMut(ContentToEmbed) -> Result<()>,
    ) -> Result<()> {
        let mut stmt = self.conn.prepare(
            "SELECT t.hash, min(c.context), t.text, min(c.symbol), min(c.kind), min(c.doc) FROM chunks c
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             JOIN contents t ON t.hash = c.content_hash
             WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.content_hash = t.hash AND e.model = ?2)
               AND (NOT ?3 OR c.symbol IS NOT NULL)
             GROUP BY t.hash",
        )?;
        let mut rows = stmt.query(params![branch, model, named_only])?;
        while let Some(r) = rows.next()? {
            each(ContentToEmbed {
                hash: r.get(0)?,
                context: r.get(1)?,
                text: r.get(2)?,
                symbol: r.get(3)?,
                kind: r.get(4)?,
                doc: r.get(5)?,
            })?;
        }
        Ok(())
    }

    /// The vectors of `model`.
    pub fn vector_count(&self, model: &str) -> Result<u64> {
        count(&self.conn, "SELECT count(*) FROM embeddings WHERE model = ?1", [model])
    }

    /// The vectors of every model.
    pub fn all_vector_count(&self) -> Result<u64> {
        count(&self.conn, "SELECT count(*) FROM embeddings", [])
    }

    /// The vectors of `model` for contents of `branch`: as for
    /// [`Store::branch_distinct_contents`], the whole index's less those of
    /// contents only outside the branch, when few versions are outside. A
    /// vector's content is always some chunk's (deleted with the last one;
    /// `ken health` checks it).
    pub fn branch_vector_count(&self, branch: &str, model: &str) -> Result<u64> {
        self.branch_vector_count_in(&self.outside_of(branch)?, model)
    }

    /// [`Self::branch_vector_count`] of the branch `outside` was read for.
    pub fn branch_vector_count_in(&self, outside: &BranchOutside, model: &str) -> Result<u64> {
        let branch = outside.branch();
        if let Some(outside) = self.contents_outside(outside)? {
            let mut has_vector = self
                .conn
                .prepare_cached("SELECT 1 FROM embeddings WHERE content_hash = ?1 AND model = ?2")?;
            let mut with_vector = 0;
            for hash in outside {
                with_vector += u64::from(has_vector.exists(params![hash, model])?);
            }
            return Ok(self.vector_count(model)?.saturating_sub(with_vector));
        }
        count(
            &self.conn,
            "SELECT count(*) FROM embeddings e WHERE e.model = ?2 AND e.content_hash IN
                 (SELECT c.content_hash FROM chunks c JOIN catalog k ON k.file_id = c.file_id WHERE k.branch = ?1)",
            params![branch, model],
        )
    }

    /// The distinct contents of `branch` that have no vector of `model`.
    pub fn branch_contents_without_vectors(&self, branch: &str, model: &str) -> Result<u64> {
        count(
            &self.conn,
            "SELECT count(DISTINCT c.content_hash) FROM chunks c JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.content_hash = c.content_hash AND e.model = ?2)",
            params![branch, model],
        )
    }

    /// The vectors of `model` that are not `dimensions` long.
    pub fn vectors_of_wrong_size(&self, model: &str, dimensions: usize) -> Result<u64> {
        count(
            &self.conn,
            "SELECT count(*) FROM embeddings WHERE model = ?1 AND length(vector) != ?2",
            params![model, (dimensions * 4) as i64],
        )
    }

    /// Deletes the vectors of `model` that are not `dimensions` long.
    pub fn delete_vectors_of_wrong_size(&self, model: &str, dimensions: usize) -> Result<()> {
        self.conn.execute(
            "DELETE FROM embeddings WHERE model = ?1 AND length(vector) != ?2",
            params![model, (dimensions * 4) as i64],
        )?;
        Ok(())
    }

    /// Deletes the vectors of every model but these two; how many went.
    pub fn delete_vectors_except(&self, model: &str, signature_model: &str) -> Result<usize> {
        Ok(self.conn.execute(
            "DELETE FROM embeddings WHERE model NOT IN (?1, ?2)",
            params![model, signature_model],
        )?)
    }
}

/// The id for the next embedding row. SQLite would hand out a deleted
/// row's id again when it was the highest, and an id is the vector's key in
/// the HNSW file, which would then keep the old vector under it; so ids only
/// grow. Call [`issued_embedding_ids`] with the last id used, in the same
/// transaction.
fn next_embedding_id(conn: &Connection) -> Result<i64> {
    let issued: i64 = meta_parsed(conn, MetaKey::EmbeddingIdsIssued)?.unwrap_or(0);
    let max: i64 = conn.query_row("SELECT coalesce(max(id), 0) FROM embeddings", [], |r| r.get(0))?;
    Ok(issued.max(max) + 1)
}

/// Records `last` as the highest embedding id handed out.
fn issued_embedding_ids(conn: &Connection, last: i64) -> Result<()> {
    set_meta(conn, MetaKey::EmbeddingIdsIssued, &last.to_string())
}
