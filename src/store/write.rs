//! Writing the index: a file version ready to be stored
//! ([`NewFileVersion`], its chunks' terms computed on the parallel workers)
//! and the transaction of one indexing batch ([`Batch`]): file versions,
//! chunks and their lexical rows, the graph's rows, the catalogs and the
//! skipped files, and the statistics derived from the chunks.

use anyhow::{Context, Result};
use rusqlite::{params, OptionalExtension, Transaction};

use super::catalog::skip_reason_key;
use super::lexical::{counted_chunks, lexical_generation};
use super::meta::{set_meta, MetaKey};
use super::{content_hash, graph, Store};
use crate::source::chunk::Chunk;
use crate::source::discover::SkipReason;
use crate::source::lexical;

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
            let chunks = counted_chunks(&self.tx)?;
            set_meta(&self.tx, MetaKey::ChunkCount, &chunks.to_string())?;
            let generation = lexical_generation(&self.tx)?;
            set_meta(&self.tx, MetaKey::LexicalGeneration, &(generation + 1).to_string())?;
        }
        self.tx.commit().context("committing to the index")
    }

    /// The paths of `branch`'s catalog, as this transaction sees them.
    pub fn catalog_paths(&self, branch: &str) -> Result<Vec<String>> {
        let mut stmt = self.tx.prepare("SELECT path FROM catalog WHERE branch = ?1")?;
        let paths = stmt.query_map([branch], |r| r.get(0))?;
        Ok(paths.collect::<rusqlite::Result<_>>()?)
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
            "INSERT INTO chunks (file_id, content_hash, start_line, end_line, start_byte, end_byte, kind, symbol, context, doc, comments)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
                chunk.context,
                chunk.doc_label(),
                chunk.comments_label()
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
