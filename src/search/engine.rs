//! Searching the shared engine (docs/scale.md) across every repository
//! pushed to it, ranked as a local search is: lexical candidates from the
//! engine's postings of ken's own terms, ranked by BM25 computed in SQL
//! (PostgreSQL's `ts_rank` has no IDF), vector candidates from its HNSW
//! index, every candidate scored on every side (BM25, its vector, its
//! signature vectors), then ken's [`fusion`], the
//! [`feedback`] on the vector side, [`rerank`] and the per-file spread. Each
//! hit names its repository.

use std::collections::HashMap;

use anyhow::Result;

use crate::embed::{Embedder, InputKind};
use crate::source::lexical;
use crate::store::bm25::{frequency_for_idf_share, idf_of};
use crate::store::engine::{Bm25, Engine, EngineRow, QueryEmbedding};

use super::candidates::{
    candidate_pool, Candidate, COMMON_TERM_SHARE, MATCHED_TERM_MAX_SHARE, SYNONYM_IDF_SHARE, VECTOR_DEPTH_FACTOR,
};
use super::definitions::{judge_definitions, SymbolRow};
use super::diversity::{diversify, same_file_share};
use super::hit::{code_words, contains_whole, finish_hit, SearchHit};
use super::query::{Query, Wording};
use super::{feedback, fusion, rerank, Fusion, SearchMode, SearchRequest};

/// BM25's parameters (the local index's `ken_bm25`).
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

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
    /// The id of the engine's main embedder; the model loads on the first
    /// query that needs it (a lone identifier does not).
    embedder_id: Option<String>,
    embedder: std::sync::OnceLock<Box<dyn Embedder>>,
    /// Why the vector side is off, when it is.
    notice: Option<String>,
    fusion: Fusion,
    fusion_weights_set: bool,
}

impl EngineSearcher {
    pub fn open(mut engine: Engine) -> Result<EngineSearcher> {
        let settings = crate::config::try_settings()?;
        engine.ensure_schema()?;
        let embedder_id = engine.main_embedder()?.map(|(id, _)| id);
        let unseen = engine.repos_without_postings()?;
        let notice = if !unseen.is_empty() {
            Some(format!(
                "pushed by an earlier ken, not searched by their words until pushed again: {}",
                unseen.join(", ")
            ))
        } else {
            embedder_id
                .is_none()
                .then(|| "no vectors in the engine: lexical search only".to_string())
        };
        Ok(EngineSearcher {
            engine,
            embedder_id,
            embedder: std::sync::OnceLock::new(),
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

    /// The query embedder, loaded on first use; `None` (and a notice) when
    /// the engine has no vectors or the model cannot be loaded here.
    fn embedder(&mut self) -> Option<&dyn Embedder> {
        let id = self.embedder_id.as_deref()?;
        if self.embedder.get().is_none() {
            match crate::embed::embedder_for_index(id, None) {
                Ok(embedder) => {
                    let _ = self.embedder.set(embedder);
                }
                Err(e) => {
                    self.notice = Some(format!("lexical search only: {e:#}"));
                    self.embedder_id = None;
                    return None;
                }
            }
        }
        self.embedder.get().map(|e| e.as_ref())
    }

    /// The query's vector, when the vector side takes part.
    pub fn query_vector(&mut self, text: &str) -> Result<Option<(String, Vec<f32>)>> {
        match self.embedder() {
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
        let fetch = candidate_pool(req.limit);
        let mut candidates: HashMap<i64, Candidate> = HashMap::new();
        if req.mode != SearchMode::Semantic {
            // As in a local search, a question's words as code says them
            // are matched beside the vector side only.
            let synonyms = req.mode == SearchMode::Hybrid && self.embedder_id.is_some();
            for (position, (id, score)) in self.lexical_side(&query, fetch, synonyms)?.into_iter().enumerate() {
                let c = candidates.entry(id).or_default();
                c.bm25 = score;
                c.ranked_lexically(position);
            }
        }
        // As in a local search: a lone identifier that names a definition
        // is answered by it, and the model would cost more than the search.
        let vector = match req.mode {
            SearchMode::Lexical => None,
            SearchMode::Hybrid if self.names_a_definition(&candidates, &query)? => None,
            _ => self.query_vector(&req.query)?,
        };
        if let Some((embedder, vector)) = &vector {
            let q = QueryEmbedding { embedder, vector };
            let neighbours = self.engine.nearest(&q, fetch * VECTOR_DEPTH_FACTOR)?;
            for (rank, (id, similarity)) in neighbours.into_iter().enumerate() {
                let c = candidates.entry(id).or_insert_with(Candidate::found_by_vectors);
                c.ranked_by_vectors(rank, VECTOR_DEPTH_FACTOR);
                c.similarity = Some(similarity);
            }
        }
        let ids: Vec<i64> = candidates.keys().copied().collect();
        let q = vector
            .as_ref()
            .map(|(embedder, vector)| QueryEmbedding { embedder, vector });
        let rows = self.engine.rows(&ids, q.as_ref())?;
        let (mut hits, repos) = self.hits_of(rows, &mut candidates, &query, req)?;
        let fusion = match self.embedder.get() {
            Some(e) if vector.is_some() => self.fusion.leaned(
                (!self.fusion_weights_set).then(|| e.lexical_weight()),
                &fusion::QueryVectorKind {
                    adapter: fusion::AdapterUse::NoAdapter,
                    terms: query.lexical.terms.len(),
                },
            ),
            _ => self.fusion,
        };
        let mut fused = fusion::fuse(&candidates, req.mode, vector.is_some(), fusion);
        let factors = rerank::RerankFactors::of(&hits, &candidates, &query, req.mode);
        if let Some((embedder, vector)) = vector.as_ref().filter(|_| req.mode == SearchMode::Hybrid) {
            // As in a local search; the engine sends the first results'
            // vectors and computes the candidates' similarities itself.
            let mut source = EngineVectors {
                engine: &mut self.engine,
                embedder,
            };
            fused = feedback::fuse_again(&mut hits, &mut candidates, fused, &factors, fusion, vector, &mut source)?;
        }
        rerank::rerank(&mut hits, &factors, &fused, None);
        Ok(finish(hits, &repos, &query, req))
    }

    /// Whether the query is one identifier that one of the best lexical
    /// candidates defines.
    fn names_a_definition(&mut self, candidates: &HashMap<i64, Candidate>, query: &Query) -> Result<bool> {
        if query.wording != Wording::Identifier {
            return Ok(false);
        }
        let mut best: Vec<(i64, f64)> = candidates.iter().map(|(&id, c)| (id, c.bm25)).collect();
        best.sort_by(|a, b| b.1.total_cmp(&a.1));
        let ids: Vec<i64> = best.iter().take(10).map(|(id, _)| *id).collect();
        let rows = self.engine.rows(&ids, None)?;
        Ok(rows
            .iter()
            .any(|row| defines_identifier(row.symbol.as_deref(), &query.lexical.identifiers)))
    }

    /// The lexical candidates: BM25 with each term's IDF over every pushed
    /// chunk; as in a local search, the common terms are scored but match
    /// nothing alone while rarer ones remain, and with `synonyms` the words
    /// code says the question's with weigh [`SYNONYM_IDF_SHARE`] of their IDF.
    fn lexical_side(&mut self, query: &Query, depth: usize, synonyms: bool) -> Result<Vec<(i64, f64)>> {
        let q = &query.lexical;
        if q.terms.is_empty() {
            return Ok(Vec::new());
        }
        let extra: &[String] = if synonyms { &q.synonyms } else { &[] };
        let asked: Vec<String> = q.terms.iter().chain(extra).cloned().collect();
        let stats = self.engine.term_frequencies(&asked)?;
        let n = stats.chunks.max(1) as f64;
        // Each present term with the frequency its weight is read from: a
        // synonym's is the one that gives its share of the IDF.
        let present: Vec<(&String, f64)> = asked
            .iter()
            .zip(&stats.counts)
            .enumerate()
            .filter(|(_, (_, df))| **df > 0)
            .map(|(i, (t, df))| {
                let df = *df as f64;
                if i < q.terms.len() {
                    (t, df)
                } else {
                    (t, frequency_for_idf_share(n, df, SYNONYM_IDF_SHARE))
                }
            })
            .collect();
        let scored: Vec<(String, f64)> = present.iter().map(|(t, df)| ((*t).clone(), idf_of(n, *df))).collect();
        let selective = |share: f64| present.iter().filter(move |(_, df)| df / n <= share);
        let matched: Vec<String> = if selective(COMMON_TERM_SHARE).next().is_some() {
            selective(COMMON_TERM_SHARE).map(|(t, _)| (*t).clone()).collect()
        } else if selective(MATCHED_TERM_MAX_SHARE).next().is_some() {
            selective(MATCHED_TERM_MAX_SHARE).map(|(t, _)| (*t).clone()).collect()
        } else {
            present.iter().map(|(t, _)| (*t).clone()).collect()
        };
        let bm25 = Bm25 {
            k1: BM25_K1,
            b: BM25_B,
            mean_length: stats.mean_length,
        };
        self.engine.lexical(&matched, &scored, bm25, depth)
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
                c.signature_similarity = row.signature_similarity;
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
                packed: row.side_by_side >= 2,
                ..Default::default()
            });
        }
        mark_definitions(&hits, &repos, candidates, query)?;
        Ok((hits, repos))
    }
}

/// Tells the candidates that define an identifier of the query whether they
/// define it as asked, as a local search does ([`judge_definitions`]: the
/// spelling typed, the type before an impl of it, the part of a split
/// definition that declares it). The engine keeps no table of names: the
/// definitions are those of the candidates' symbol labels, at their chunks' lines.
fn mark_definitions(
    hits: &[SearchHit],
    repos: &HashMap<i64, String>,
    candidates: &mut HashMap<i64, Candidate>,
    query: &Query,
) -> Result<()> {
    if query.lexical.identifiers.is_empty() {
        return Ok(());
    }
    let mut files: HashMap<(&str, &str), i64> = HashMap::new();
    let mut rows_of_keys: HashMap<String, Vec<SymbolRow>> = HashMap::new();
    for hit in hits {
        let file_count = files.len() as i64;
        let file_id = *files
            .entry((repos[&hit.chunk_id].as_str(), hit.path.as_str()))
            .or_insert(file_count);
        for name in symbol_names(hit.symbol.as_deref()) {
            let key = lexical::joined_key(name);
            if query.lexical.identifiers.contains(&key) {
                rows_of_keys.entry(key).or_default().push(SymbolRow {
                    chunk_id: hit.chunk_id,
                    file_id,
                    kind: hit.kind.clone(),
                    language: hit.language.clone(),
                    member: (name.to_string(), hit.start_line, hit.end_line),
                });
            }
        }
    }
    let text_of: HashMap<i64, &SearchHit> = hits.iter().map(|hit| (hit.chunk_id, hit)).collect();
    let judged = judge_definitions(
        query,
        |key, _| Ok(rows_of_keys.remove(key).unwrap_or_default()),
        |row| {
            let hit = text_of[&row.chunk_id];
            contains_whole(
                &code_words(&hit.content, hit.start_line, &[], &[]).join(" "),
                &row.member.0,
            )
        },
    )?;
    for (id, (defines, _)) in judged {
        if let Some(c) = candidates.get_mut(&id) {
            c.defines = defines;
        }
    }
    Ok(())
}

/// The engine's chunk vectors of one embedder, for the feedback.
struct EngineVectors<'e> {
    engine: &'e mut Engine,
    embedder: &'e str,
}

impl feedback::ChunkVectorSource for EngineVectors<'_> {
    fn vectors_of(&mut self, ids: &[i64]) -> Result<HashMap<i64, Vec<f32>>> {
        self.engine.vectors_of(ids, self.embedder)
    }

    fn similarities_to(&mut self, target: &[f32], ids: &[i64]) -> Result<Vec<(i64, f32)>> {
        let q = QueryEmbedding {
            embedder: self.embedder,
            vector: target,
        };
        self.engine.similarities(ids, &q)
    }
}

/// The names of a chunk's symbol label (`a, b` for definitions packed side by side).
fn symbol_names(symbol: Option<&str>) -> impl Iterator<Item = &str> {
    symbol
        .unwrap_or_default()
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|name| !name.is_empty())
}

/// Whether a chunk's symbol label names one of the query's identifiers (joined keys).
fn defines_identifier(symbol: Option<&str>, identifiers: &[String]) -> bool {
    symbol_names(symbol).any(|name| identifiers.contains(&lexical::joined_key(name)))
}

/// Best first, spread over files (a file is its repository and path), each
/// with its snippet.
fn finish(
    mut hits: Vec<SearchHit>,
    repos: &HashMap<i64, String>,
    query: &Query,
    req: &SearchRequest,
) -> Vec<EngineHit> {
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
    diversify(
        hits,
        req.limit,
        req.max_per_file,
        same_file_share(query.intent.interrogative),
    )
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
