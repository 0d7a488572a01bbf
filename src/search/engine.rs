//! Searching the shared engine (docs/scale.md) across every repository
//! pushed to it, ranked as a local search is: lexical candidates from the
//! engine's full-text index over ken's own terms (`ts_rank` per term times
//! its IDF, where the local index has BM25), vector candidates from its HNSW
//! index, every candidate scored on both sides, then ken's [`fusion`] and
//! [`rerank`] and the per-file spread. Each hit names its repository.

use std::collections::HashMap;

use anyhow::Result;

use crate::embed::{Embedder, InputKind};
use crate::source::lexical;
use crate::store::engine::{Engine, EngineRow, QueryEmbedding};

use super::candidates::{Candidate, OVERFETCH};
use super::definitions::Defines;
use super::diversity::diversify;
use super::hit::{finish_hit, SearchHit};
use super::query::{Query, Wording};
use super::{fusion, rerank, Fusion, SearchMode, SearchRequest};

/// Terms in more than this share of chunks are left out of the lexical
/// match when rarer terms remain (as in the local search).
const MATCHED_TERM_MAX_SHARE: f64 = 0.25;
/// The vector side goes this many times deeper than the lexical side (as in the local search).
const VECTOR_DEPTH_FACTOR: usize = 2;

/// A hit of the engine: the repository and the hit in it.
#[derive(Debug, Clone)]
pub struct EngineHit {
    pub repo: String,
    pub hit: SearchHit,
}

/// Searches of one engine connection, with the query embedder of the
/// vectors most of its repositories pushed.
pub struct EngineSearcher {
    engine: Engine,
    embedder: Option<Box<dyn Embedder>>,
    /// Why the vector side is off, when it is.
    notice: Option<String>,
    fusion: Fusion,
    fusion_weights_set: bool,
}

impl EngineSearcher {
    pub fn open(mut engine: Engine) -> Result<EngineSearcher> {
        let settings = crate::config::try_settings()?;
        engine.ensure_schema()?;
        let (embedder, notice) = match engine.main_embedder()? {
            None => (None, Some("no vectors in the engine: lexical search only".to_string())),
            Some((id, _)) => match crate::embed::embedder_for_index(&id, None) {
                Ok(embedder) => (Some(embedder), None),
                Err(e) => (None, Some(format!("lexical search only: {e:#}"))),
            },
        };
        Ok(EngineSearcher {
            engine,
            embedder,
            notice,
            fusion: Fusion::of(settings),
            fusion_weights_set: settings.fusion_weights.is_some(),
        })
    }

    /// Why the results are lexical only, when they are.
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// The engine, for measurements.
    pub fn engine(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The query's vector, when the vector side takes part.
    pub fn query_vector(&self, text: &str) -> Result<Option<(String, Vec<f32>)>> {
        match &self.embedder {
            Some(embedder) => {
                let query = Query::parse(text);
                let vector = embedder.embed_now(&query.embed_text, InputKind::Query)?;
                Ok(Some((embedder.id().to_string(), vector)))
            }
            None => Ok(None),
        }
    }

    pub fn search(&mut self, req: &SearchRequest) -> Result<Vec<EngineHit>> {
        let query = Query::parse(&req.query);
        if req.limit == 0 || query.wording == Wording::Blank {
            return Ok(Vec::new());
        }
        let fetch = (req.limit * OVERFETCH).max(50);
        let mut candidates: HashMap<i64, Candidate> = HashMap::new();
        if req.mode != SearchMode::Semantic {
            for (id, score) in self.lexical_side(&query, fetch)? {
                candidates.entry(id).or_default().bm25 = score;
            }
        }
        let vector = match req.mode {
            SearchMode::Lexical => None,
            _ => self.query_vector(&req.query)?,
        };
        if let Some((embedder, vector)) = &vector {
            let q = QueryEmbedding { embedder, vector };
            let neighbours = self.engine.nearest(&q, fetch * VECTOR_DEPTH_FACTOR)?;
            for (rank, (id, similarity)) in neighbours.into_iter().enumerate() {
                let c = candidates.entry(id).or_insert_with(|| Candidate {
                    deep: rank >= fetch,
                    ..Default::default()
                });
                c.similarity = Some(similarity);
            }
        }
        let ids: Vec<i64> = candidates.keys().copied().collect();
        let q = vector.as_ref().map(|(embedder, vector)| QueryEmbedding { embedder, vector });
        let rows = self.engine.rows(&ids, q.as_ref())?;
        let (mut hits, repos) = self.hits_of(rows, &mut candidates, &query, req)?;
        let fusion = match &self.embedder {
            Some(e) if vector.is_some() => self
                .fusion
                .leaned((!self.fusion_weights_set).then(|| e.lexical_weight()), false),
            _ => self.fusion,
        };
        let fused = fusion::fuse(&candidates, req.mode, vector.is_some(), fusion);
        rerank::rerank(&mut hits, &candidates, &fused, &query, req.mode, None);
        Ok(finish(hits, &repos, &query, req))
    }

    /// The lexical candidates: each term's IDF over every pushed chunk, the
    /// very common terms left out while rarer ones remain.
    fn lexical_side(&mut self, query: &Query, depth: usize) -> Result<Vec<(i64, f64)>> {
        let terms = &query.lexical.terms;
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let (total, counts) = self.engine.term_frequencies(terms)?;
        let n = total.max(1) as f64;
        let mut weighted: Vec<(String, f64, f64)> = terms
            .iter()
            .zip(counts)
            .filter(|(_, df)| *df > 0)
            .map(|(t, df)| {
                let df = df as f64;
                (t.clone(), (1.0 + (n - df + 0.5) / (df + 0.5)).ln(), df / n)
            })
            .collect();
        if weighted.iter().any(|(_, _, share)| *share <= MATCHED_TERM_MAX_SHARE) {
            weighted.retain(|(_, _, share)| *share <= MATCHED_TERM_MAX_SHARE);
        }
        let terms: Vec<(String, f64)> = weighted.into_iter().map(|(t, idf, _)| (t, idf)).collect();
        self.engine.lexical(&terms, depth)
    }

    /// The rows as hits, the request's filters applied, each candidate told
    /// its similarity and whether it defines an identifier of the query.
    fn hits_of(
        &self,
        rows: Vec<EngineRow>,
        candidates: &mut HashMap<i64, Candidate>,
        query: &Query,
        req: &SearchRequest,
    ) -> Result<(Vec<SearchHit>, HashMap<i64, String>)> {
        let glob = req
            .path_glob
            .as_deref()
            .map(crate::source::paths::compile_path_glob)
            .transpose()?;
        let mut hits = Vec::with_capacity(rows.len());
        let mut repos = HashMap::with_capacity(rows.len());
        for row in rows {
            let wanted = glob.as_ref().is_none_or(|g| g.is_match(&row.path))
                && req.language.as_deref().is_none_or(|l| l == row.language)
                && req.kind.as_deref().is_none_or(|k| k == row.kind);
            if !wanted {
                candidates.remove(&row.id);
                continue;
            }
            if let Some(c) = candidates.get_mut(&row.id) {
                c.similarity = row.similarity.or(c.similarity);
                if defines_identifier(row.symbol.as_deref(), &query.lexical.identifiers) {
                    c.defines = Defines::Asked;
                }
            }
            repos.insert(row.id, row.repo);
            hits.push(SearchHit {
                path: row.path,
                start_line: row.start_line,
                end_line: row.end_line,
                kind: row.kind,
                symbol: row.symbol,
                language: row.language,
                context: row.context,
                content: row.text,
                chunk_id: row.id,
                ..Default::default()
            });
        }
        Ok((hits, repos))
    }
}

/// Whether a chunk's symbol label names one of the query's identifiers (joined keys).
fn defines_identifier(symbol: Option<&str>, identifiers: &[String]) -> bool {
    symbol.is_some_and(|label| {
        label
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .any(|name| !name.is_empty() && identifiers.contains(&lexical::joined_key(name)))
    })
}

/// Best first, spread over files (a file is its repository and path), each
/// with its snippet.
fn finish(mut hits: Vec<SearchHit>, repos: &HashMap<i64, String>, query: &Query, req: &SearchRequest) -> Vec<EngineHit> {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.path.cmp(&b.path))
            .then(a.start_line.cmp(&b.start_line))
    });
    // The spread tells files apart by path: the repository goes in front
    // while it runs.
    for hit in &mut hits {
        hit.path = format!("{}\u{0}{}", repos[&hit.chunk_id], hit.path);
    }
    diversify(hits, req.limit, req.max_per_file)
        .into_iter()
        .map(|mut hit| {
            let (repo, path) = hit.path.split_once('\u{0}').unwrap_or_default();
            let (repo, path) = (repo.to_string(), path.to_string());
            hit.path = path;
            finish_hit(&mut hit, None, &query.lexical);
            EngineHit { repo, hit }
        })
        .collect()
}
