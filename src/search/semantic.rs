//! The semantic side: the query embedder of the index's vectors, the vector
//! index file and the index's query adapter, loaded on the first query that
//! needs them; and the query vectors it makes.

use std::collections::VecDeque;
use std::sync::Mutex;

use anyhow::Result;

use crate::embed::adapter::QueryAdapter;
use crate::embed::{Embedder, InputKind};
use crate::store::vectors::VectorIndex;
use crate::store::MetaKey;
use crate::store::Store;

use super::fusion::AdapterUse;
use super::query::Query;
use super::Searcher;

/// What semantic search needs: the embedder of the index's vectors and the
/// vector index file.
pub(super) struct SemanticSide {
    pub embedder: Box<dyn Embedder>,
    pub vectors: VectorIndex,
    dimensions: usize,
    /// Identity of the vector file opened (a republished file is a new inode).
    stamp: Option<(u64, std::time::SystemTime)>,
    /// Carries query vectors toward the code they describe.
    adapter: QueryMap,
    /// The vectors of the latest queries: agents often repeat a query with
    /// other filters, and the model is the slowest part of a search.
    recent_queries: Mutex<VecDeque<(String, QueryVector)>>,
}

/// How many query vectors a searcher remembers.
const RECENT_QUERY_VECTORS: usize = 64;

/// A query's vector, as the vector side searches with it.
#[derive(Debug, Clone)]
pub(super) struct QueryVector {
    pub vector: Vec<f32>,
    pub adapter: AdapterUse,
}

impl SemanticSide {
    /// The embedder, vectors and adapter of the index in `store`. `Err`:
    /// why semantic search is not available (no vectors yet, no model).
    fn load(store: &Store) -> Result<SemanticSide, String> {
        let model = store
            .meta(MetaKey::EmbeddingModel)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| match store.active_writer() {
                Some(writer) => format!(
                    "no embeddings yet: {writer} is indexing the project or computing its embeddings \
                     (`ken status` shows the coverage)"
                ),
                None => crate::index::semantic::why_no_vectors(store),
            })?;
        let provider = store.meta(MetaKey::EmbeddingProvider).map_err(|e| e.to_string())?;
        let embedder = crate::embed::embedder_for_index(&model, provider.as_deref()).map_err(|e| format!("{e:#}"))?;
        let dimensions: usize = store
            .meta(MetaKey::EmbeddingDimensions)
            .map_err(|e| e.to_string())?
            .and_then(|d| d.parse().ok())
            .unwrap_or(embedder.dimensions());
        let stamp = vector_file_stamp(store, &model);
        let vectors = VectorIndex::open(store, &model, dimensions)
            .map_err(|e| format!("{e:#}"))?
            .ok_or("the vector index file is missing; run `ken index` to rebuild it")?;
        Ok(SemanticSide {
            embedder,
            vectors,
            dimensions,
            stamp,
            adapter: QueryMap::load(store, &model),
            recent_queries: Default::default(),
        })
    }

    /// Follows the index: a refitted adapter is reloaded (and the query
    /// vectors it made are forgotten), a republished vector file reopened.
    /// `false` when that file cannot be opened.
    pub fn refresh(&mut self, store: &Store) -> bool {
        let model = self.embedder.id().to_string();
        if self.adapter.refresh(store, &model) {
            self.recent_queries.get_mut().unwrap_or_else(|e| e.into_inner()).clear();
        }
        let stamp = vector_file_stamp(store, &model);
        if stamp != self.stamp {
            match VectorIndex::open(store, &model, self.dimensions) {
                Ok(Some(vectors)) => {
                    self.vectors = vectors;
                    self.stamp = stamp;
                }
                _ => return false,
            }
        }
        true
    }

    pub fn embed_query(&self, query: &Query) -> Result<QueryVector> {
        let recent = || self.recent_queries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, found)) = recent().iter().find(|(q, _)| *q == query.text) {
            return Ok(found.clone());
        }
        // Bounded: a remote provider answers within its query budget or the
        // search goes on lexically, saying why.
        let vector = self.embedder.embed_now(&query.embed_text, InputKind::Query)?;
        let found = self.adapter.adapt(&query.text, vector);
        let mut recent = recent();
        if recent.len() >= RECENT_QUERY_VECTORS {
            recent.pop_front();
        }
        recent.push_back((query.text.clone(), found.clone()));
        Ok(found)
    }

    /// Forgets the remembered query vectors.
    pub fn forget_queries(&self) {
        self.recent_queries.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// The index's query adapter ([`crate::embed::adapter`]), with the fit it
/// comes from: all that search does with the adapter is here.
struct QueryMap {
    adapter: Option<QueryAdapter>,
    fit: Option<String>,
}

impl QueryMap {
    fn load(store: &Store, model: &str) -> QueryMap {
        QueryMap {
            adapter: crate::embed::adapter::load(store, model),
            fit: crate::embed::adapter::fingerprint(store),
        }
    }

    /// Reloads the adapter if the index's was fitted again: whether it was.
    fn refresh(&mut self, store: &Store, model: &str) -> bool {
        let fit = crate::embed::adapter::fingerprint(store);
        if fit == self.fit {
            return false;
        }
        self.adapter = crate::embed::adapter::load(store, model);
        self.fit = fit;
        true
    }

    /// The vector of the query `text`: carried by the map when it carries
    /// the query, else as the model made it.
    fn adapt(&self, text: &str, vector: Vec<f32>) -> QueryVector {
        match &self.adapter {
            Some(adapter) if adapter.carries(text) => QueryVector {
                vector: adapter.apply(&vector),
                adapter: AdapterUse::Carried,
            },
            Some(_) => QueryVector {
                vector,
                adapter: AdapterUse::PassedBy,
            },
            None => QueryVector {
                vector,
                adapter: AdapterUse::NoAdapter,
            },
        }
    }
}

fn vector_file_stamp(store: &Store, model: &str) -> Option<(u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(crate::store::vectors::vectors_path(&store.dir, model)).ok()?;
    Some((meta.ino(), meta.modified().ok()?))
}

impl Searcher {
    /// [`Self::semantic_side`], or an empty error without loading anything when `skip`.
    pub(super) fn semantic_side_unless(&self, skip: bool) -> Result<&SemanticSide, String> {
        if skip {
            return Err(String::new());
        }
        self.semantic_side()
    }

    pub(super) fn semantic_side(&self) -> Result<&SemanticSide, String> {
        if let Some(side) = self.semantic.get() {
            return Ok(side);
        }
        let side = SemanticSide::load(&self.store)?;
        Ok(self.semantic.get_or_init(|| side))
    }

    /// Whether a hybrid search answers lexically because the model is
    /// loading elsewhere ([`Searcher::defer_model_while`]).
    pub(super) fn model_deferred(&self) -> bool {
        self.semantic.get().is_none()
            && self
                .model_loading_elsewhere
                .as_ref()
                .is_some_and(|l| l.load(std::sync::atomic::Ordering::SeqCst))
    }
}
