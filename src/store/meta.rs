//! The index's `meta` table: one row per setting or record, named by a
//! [`MetaKey`] (every key the index holds is listed here, in one place), read
//! and written on the store or on any connection or transaction of it.

use std::borrow::Cow;

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::Store;

/// A key of the index's `meta` table. The text each stands for is stored on
/// disk: it never changes for a variant (see [`MetaKey::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKey<'a> {
    /// The schema version the index was written with (`store::SCHEMA_VERSION`).
    SchemaVersion,
    /// When the index was created (RFC 3339).
    CreatedAt,
    /// The fingerprint of the chunking rules the index was built with.
    Chunking,
    /// The folder the index was last built from.
    Root,
    /// The catalog key of the branch last indexed.
    IndexedBranch,
    /// The commit checked out when the index was last written.
    HeadCommit,
    /// When the index was last written (RFC 3339).
    LastIndexedAt,
    /// The last whole run's report (JSON).
    LastIndexReport,
    /// The number of chunks, written with every change to them.
    ChunkCount,
    /// How many batches have changed the chunks (see `store::Batch`).
    LexicalGeneration,
    /// The chunk count the common terms' frequencies were counted at.
    CommonTermsChunks,
    /// The lexical generation the common terms' frequencies were counted at.
    CommonTermsGeneration,
    /// The embedder whose vectors are searchable (its id).
    EmbeddingModel,
    /// The dimensions of the embedder's vectors.
    EmbeddingDimensions,
    /// The embedding provider configured when vectors were last made.
    EmbeddingProvider,
    /// Why the last embedding pass failed (empty: it did not).
    EmbeddingFailure,
    /// "1" when the user turned embedding off for this index (`ken index
    /// --no-embed`); `ken index` or `ken embed` turns it on again.
    EmbeddingsOff,
    /// The model whose complete vectors other models' vectors were last pruned for.
    VectorsPrunedFor,
    /// The highest embedding id ever handed out (ids only grow).
    EmbeddingIdsIssued,
    /// The process id of the watcher of this index.
    WatcherPid,
    /// The query adapter's fit record (model, method, contents, pairs); a
    /// new way of fitting takes a new key, so an index fitted the old way is
    /// fitted again.
    QueryAdapter,
    /// The records of the older ways of fitting the query adapter (1 to 3).
    OldQueryAdapter(u8),
    /// How the saved query adapter's fit was chosen.
    QueryAdapterFit,
    /// The saved query adapter's lead words, space-separated.
    QueryAdapterLeads,
    /// The highest embedding id in an embedder's vector file.
    VectorsMaxId(&'a str),
    /// How many vectors were removed from an embedder's vector file since it was built.
    VectorsRemoved(&'a str),
}

/// The keys with no part of their own (for lookups by name).
const FIXED: &[MetaKey<'static>] = &[
    MetaKey::SchemaVersion,
    MetaKey::CreatedAt,
    MetaKey::Chunking,
    MetaKey::Root,
    MetaKey::IndexedBranch,
    MetaKey::HeadCommit,
    MetaKey::LastIndexedAt,
    MetaKey::LastIndexReport,
    MetaKey::ChunkCount,
    MetaKey::LexicalGeneration,
    MetaKey::CommonTermsChunks,
    MetaKey::CommonTermsGeneration,
    MetaKey::EmbeddingModel,
    MetaKey::EmbeddingDimensions,
    MetaKey::EmbeddingProvider,
    MetaKey::EmbeddingFailure,
    MetaKey::EmbeddingsOff,
    MetaKey::VectorsPrunedFor,
    MetaKey::EmbeddingIdsIssued,
    MetaKey::WatcherPid,
    MetaKey::QueryAdapter,
    MetaKey::OldQueryAdapter(1),
    MetaKey::OldQueryAdapter(2),
    MetaKey::OldQueryAdapter(3),
    MetaKey::QueryAdapterFit,
    MetaKey::QueryAdapterLeads,
];

/// What the names of the query adapter's keys start with.
pub(super) const QUERY_ADAPTER_PREFIX: &str = "query_adapter";

impl MetaKey<'_> {
    /// The key as stored.
    pub fn name(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            MetaKey::SchemaVersion => "schema_version",
            MetaKey::CreatedAt => "created_at",
            MetaKey::Chunking => "chunking",
            MetaKey::Root => "root",
            MetaKey::IndexedBranch => "indexed_branch",
            MetaKey::HeadCommit => "head_commit",
            MetaKey::LastIndexedAt => "last_indexed_at",
            MetaKey::LastIndexReport => "last_index_report",
            MetaKey::ChunkCount => "chunk_count",
            MetaKey::LexicalGeneration => "lexical_generation",
            MetaKey::CommonTermsChunks => "common_terms_chunks",
            MetaKey::CommonTermsGeneration => "common_terms_generation",
            MetaKey::EmbeddingModel => "embedding_model",
            MetaKey::EmbeddingDimensions => "embedding_dimensions",
            MetaKey::EmbeddingProvider => "embedding_provider",
            MetaKey::EmbeddingFailure => "embedding_failure",
            MetaKey::EmbeddingsOff => "embeddings_off",
            MetaKey::VectorsPrunedFor => "vectors_pruned_for",
            MetaKey::EmbeddingIdsIssued => "embedding_ids_issued",
            MetaKey::WatcherPid => "watcher_pid",
            MetaKey::QueryAdapter => "query_adapter_v4",
            MetaKey::OldQueryAdapter(1) => "query_adapter",
            MetaKey::OldQueryAdapter(version) => return Cow::Owned(format!("query_adapter_v{version}")),
            MetaKey::QueryAdapterFit => "query_adapter_fit",
            MetaKey::QueryAdapterLeads => "query_adapter_leads",
            MetaKey::VectorsMaxId(embedder) => return Cow::Owned(format!("vectors_max_id:{embedder}")),
            MetaKey::VectorsRemoved(embedder) => return Cow::Owned(format!("vectors_removed:{embedder}")),
        })
    }

    /// Whether a rebuild keeps it ([`super::rebuild`]): the settings that
    /// come with the vectors (the embedder, its settings) and the user's
    /// choices. Every key of the query adapter is kept too
    /// ([`QUERY_ADAPTER_PREFIX`]).
    pub(super) fn kept_by_rebuild(&self) -> bool {
        matches!(
            self,
            MetaKey::EmbeddingModel
                | MetaKey::EmbeddingDimensions
                | MetaKey::EmbeddingProvider
                | MetaKey::EmbeddingFailure
                | MetaKey::EmbeddingsOff
                | MetaKey::VectorsPrunedFor
                | MetaKey::WatcherPid
                | MetaKey::EmbeddingIdsIssued
        )
    }

    /// The keys a rebuild keeps (see [`MetaKey::kept_by_rebuild`]).
    pub(super) fn kept_by_rebuild_keys() -> impl Iterator<Item = MetaKey<'static>> {
        FIXED.iter().copied().filter(MetaKey::kept_by_rebuild)
    }

    /// The key stored as `name`, if it is one with no part of its own.
    pub fn from_name(name: &str) -> Option<MetaKey<'static>> {
        FIXED.iter().find(|key| key.name() == name).copied()
    }
}

impl Store {
    /// The value of `key`, if the index has one.
    pub fn meta(&self, key: MetaKey) -> Result<Option<String>> {
        meta(&self.conn, &key.name())
    }

    /// The value of `key` parsed, if the index has one that parses.
    pub fn meta_parsed<T: std::str::FromStr>(&self, key: MetaKey) -> Result<Option<T>> {
        Ok(self.meta(key)?.and_then(|v| v.parse().ok()))
    }

    pub fn set_meta(&self, key: MetaKey, value: &str) -> Result<()> {
        set_meta(&self.conn, key, value)
    }

    /// Removes `key`'s row.
    pub fn delete_meta(&self, key: MetaKey) -> Result<()> {
        delete_meta(&self.conn, key)
    }

    /// Every key the index holds, in order (for tests).
    #[cfg(test)]
    pub(crate) fn meta_keys(&self) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare("SELECT key FROM meta ORDER BY key")?;
        let keys = stmt.query_map([], |r| r.get(0))?;
        Ok(keys.collect::<rusqlite::Result<_>>()?)
    }

    /// Removes every row of the `meta` table (for tests).
    #[cfg(test)]
    pub(crate) fn clear_meta(&self) -> Result<()> {
        self.conn.execute("DELETE FROM meta", [])?;
        Ok(())
    }
}

/// The value of `key` on any connection (or transaction) of an index.
pub(super) fn meta(conn: &Connection, key: &str) -> Result<Option<String>> {
    // Cached: a search reads several keys (the chunk count, the generations).
    Ok(conn
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

/// [`meta`], parsed; `None` when missing or unparsable.
pub(super) fn meta_parsed<T: std::str::FromStr>(conn: &Connection, key: MetaKey) -> Result<Option<T>> {
    Ok(meta(conn, &key.name())?.and_then(|v| v.parse().ok()))
}

pub(super) fn set_meta(conn: &Connection, key: MetaKey, value: &str) -> Result<()> {
    set_meta_named(conn, &key.name(), value)
}

/// [`set_meta`] of a key read from another index (a rebuild's salvage).
pub(super) fn set_meta_named(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    Ok(())
}

pub(super) fn delete_meta(conn: &Connection, key: MetaKey) -> Result<()> {
    conn.execute("DELETE FROM meta WHERE key = ?1", [key.name()])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_a_name_of_its_own() {
        let mut names: Vec<_> = FIXED.iter().map(MetaKey::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FIXED.len());
        for key in FIXED {
            assert_eq!(MetaKey::from_name(&key.name()), Some(*key));
        }
        assert_eq!(MetaKey::OldQueryAdapter(2).name(), "query_adapter_v2");
        assert_eq!(MetaKey::VectorsMaxId("m/text3").name(), "vectors_max_id:m/text3");
        assert_eq!(MetaKey::kept_by_rebuild_keys().count(), 8);
    }
}
