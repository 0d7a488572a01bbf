//! Gathering a query's candidates: BM25 over the selective terms with the
//! definitions the query names (the lexical side), the nearest vectors (the
//! vector side, its query embedded on another core meanwhile), each
//! candidate then scored on the other side too, and read with its chunk.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use globset::GlobMatcher;

use crate::source::lexical::QueryTerms;
use crate::store::bm25::{self, MatchScore, MatchScores};
use crate::store::lookup::{Bm25Ranking, ChunkFilter, LexicalRanking, PathPredicate};
use crate::store::{MetaKey, Store};

use super::definitions::{Defines, Member};
use super::hit::SearchHit;
use super::query::{Query, Wording};
use super::semantic::{QueryVector, SemanticSide};
use super::{workers, PhaseClock, SearchMode, SearchPhases, SearchRequest, Searcher, DEFAULT_LIMIT};

/// BM25 column weights: symbol name, path, body.
const BM25_WEIGHTS: (f64, f64, f64) = (6.0, 2.0, 1.0);
/// The share of its IDF a word weighs that the question says otherwise
/// ([`QueryTerms::synonyms`]): "delete" finds `remove` after `delete`.
pub(super) const SYNONYM_IDF_SHARE: f64 = 0.5;
/// Lexical candidates fetched per requested result, before the rerank.
const OVERFETCH: usize = 8;
/// In hybrid mode the vector side goes this many times deeper than the
/// lexical side: HNSW neighbours are cheap, and each is scored on both sides.
pub(super) const VECTOR_DEPTH_FACTOR: usize = 2;
/// How deep the lexical ranking goes when filters reject most of the top.
const MAX_LEXICAL_DEPTH: usize = 20_000;
/// Fewer rows to read than this are not worth a second thread.
const MIN_ROWS_TO_SHARE: usize = 16;
/// Terms in more than this share of chunks are left out of the lexical
/// match when rarer terms remain (they cost the most and rank the least).
pub(super) const COMMON_TERM_SHARE: f64 = 0.05;
/// Commoner terms join the match while the rows it visits stay under this,
const MATCH_ROW_BUDGET: f64 = 10_000.0;
/// unless they are in more than this share of chunks (words like `return`:
/// they would match everything and rank nothing).
pub(super) const MATCHED_TERM_MAX_SHARE: f64 = 0.25;

/// A chunk found by either side, with what each side says of it.
#[derive(Default)]
pub(super) struct Candidate {
    /// BM25 score (0 when only the vector side found the chunk).
    pub(super) bm25: f64,
    /// Cosine similarity to the query, when the vector side found the chunk.
    pub(super) similarity: Option<f32>,
    /// Cosine similarity to the query moved toward the first results
    /// ([`super::feedback`]): what the fusion ranks by when set; the
    /// confidence keeps the query's own.
    pub(super) feedback_similarity: Option<f32>,
    /// Cosine similarity of the chunk's signature vector to the query
    /// (the nearest of `semantic::signature_texts`), when it has one.
    pub(super) signature_similarity: Option<f32>,
    /// Whether the chunk defines one of the query's identifiers, and how well.
    pub(super) defines: Defines,
    /// Below both sides' first [`candidate_pool`] of the default list:
    /// scored, but left out of the vector scales and the confidence.
    pub(super) deep: bool,
    /// Outside the pool the default list would have gathered (a longer list
    /// searches deeper): left out of every statistic taken over the
    /// candidates, so a result scores the same whatever the limit.
    pub(super) beyond_default_pool: bool,
    /// The definitions a query's identifiers name, when they are among
    /// several packed in the chunk: the result is narrowed to their lines,
    /// from the first to the last (overloads of one name stay together).
    pub(super) exact_member: Option<Member>,
}

impl Candidate {
    /// The similarity the fusion ranks by: after the feedback, if any.
    pub(super) fn ranking_similarity(&self) -> Option<f32> {
        self.feedback_similarity.or(self.similarity)
    }

    /// A candidate the vector side finds first: outside the default list's
    /// pool until [`Candidate::ranked_by_vectors`] places it.
    pub(super) fn found_by_vectors() -> Candidate {
        Candidate {
            deep: true,
            beyond_default_pool: true,
            ..Candidate::default()
        }
    }

    /// The lexical side ranked it `position`th.
    pub(super) fn ranked_lexically(&mut self, position: usize) {
        self.beyond_default_pool = position >= candidate_pool(DEFAULT_LIMIT);
        self.deep = self.beyond_default_pool;
    }

    /// The vector side ranked it `rank`th, going `depth_factor` times as
    /// deep as the lexical side. Depths count against the default list's
    /// pool, not this search's: the scales must not move with the limit.
    pub(super) fn ranked_by_vectors(&mut self, rank: usize, depth_factor: usize) {
        let pool = candidate_pool(DEFAULT_LIMIT);
        self.deep &= rank >= pool;
        self.beyond_default_pool &= rank >= pool * depth_factor;
    }
}

/// A candidate's chunk as read from the index, with its stored vectors (raw)
/// until the query vector is there to compare them with.
pub(super) struct CandidateRow {
    hit: SearchHit,
    vector: Option<Vec<u8>>,
    signature: Option<Vec<u8>>,
}

/// Candidates' rows, and BM25 scores.
type ReaderShare = (HashMap<i64, CandidateRow>, Vec<(i64, f64)>);

/// Chunk ids with their cosine similarity to the query, best first.
type Neighbours = Vec<(i64, f32)>;

/// Candidates' chunk vectors by chunk id.
pub(super) type ChunkVectors = HashMap<i64, Vec<f32>>;

/// Query terms with their document frequencies.
type Terms<'q> = Vec<(&'q String, f64)>;

/// The query's very common terms (with document frequency), left out of the
/// lexical match, and the chunk total their IDF is computed against.
struct CommonTerms<'q> {
    terms: Terms<'q>,
    total: f64,
}

/// How many candidates each side fetches for `limit` results: never fewer
/// than for the default list. Fusion scales each side by its pool, so a pool
/// that shrank with the limit reordered what a short list shares with the
/// default one (`-k 5` was not always the first five of `-k 10`).
pub(super) fn candidate_pool(limit: usize) -> usize {
    limit.max(DEFAULT_LIMIT) * OVERFETCH
}

/// What the lexical side found.
struct LexicalSide<'q> {
    candidates: HashMap<i64, Candidate>,
    /// The terms the candidates were matched on ...
    terms: Terms<'q>,
    /// ... and the common ones left out of the match.
    common: CommonTerms<'q>,
    /// Every row the match ranked, with its BM25, when the ranking kept them.
    scores: Option<MatchScores>,
}

/// The candidates of one query, read with their chunks: what fusion ranks.
pub(super) struct Gathered<'s> {
    pub candidates: HashMap<i64, Candidate>,
    pub hits: Vec<SearchHit>,
    /// The vector side, when it took part (not in lexical mode, nor for a
    /// lone identifier that names a definition, nor without vectors or model).
    pub vectors: Option<VectorSearch<'s>>,
    /// Whether the hits were read with their text.
    pub with_content: bool,
    /// The candidates' chunk vectors, in hybrid mode (for the feedback).
    pub chunk_vectors: ChunkVectors,
}

/// The vector side of one search: the semantic side and the query's vector.
pub(super) struct VectorSearch<'s> {
    pub side: &'s SemanticSide,
    pub query: QueryVector,
}

impl Searcher {
    /// The query's candidates from both sides, each scored on every side it
    /// can be, and read with their chunks.
    pub(super) fn gather(&self, query: &Query, req: &SearchRequest, clock: &mut PhaseClock) -> Result<Gathered<'_>> {
        let fetch = candidate_pool(req.limit);
        // Semantic mode waits for the model; hybrid answers lexically meanwhile.
        let deferred = req.mode == SearchMode::Hybrid && self.model_deferred();
        let (lexical, prefetched, mut preloaded) =
            self.lexical_while_embedding(query, req, fetch, deferred, &mut clock.phases);
        let LexicalSide {
            mut candidates,
            terms: matched_terms,
            common,
            scores: match_scores,
        } = lexical?;
        clock.phases.lexical = clock.lap();
        *self.notice.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // A lone identifier that names a definition is answered by that
        // definition: vectors add nothing, and loading the model costs more
        // than the whole lexical search.
        let lone_identifier = query.wording == Wording::Identifier && candidates.values().any(|c| c.defines.any());
        let skip_vectors =
            req.mode == SearchMode::Lexical || (req.mode == SearchMode::Hybrid && (lone_identifier || deferred));
        let vectors = self.add_vector_candidates(&mut candidates, query, req, fetch, prefetched, skip_vectors)?;
        if deferred && !lone_identifier {
            self.set_notice(
                "lexical results only: the embedding model is still loading (the server has just started); \
                 the next searches use it"
                    .to_string(),
            );
        }
        clock.phases.vector = clock.lap();
        // Fusion weighs every candidate on both sides: the ones only the
        // vector side found get their BM25 too (a chunk middling on both
        // sides is in neither side's top list, yet can be the best answer).
        // The lexical ranking scored every row it matched; those it skipped
        // for their bound (a one-shot search, without the rows' lengths) are
        // scored again.
        let mut unscored = Vec::new();
        if vectors.is_some() && req.mode == SearchMode::Hybrid && !matched_terms.is_empty() {
            for (&id, c) in candidates.iter_mut().filter(|(_, c)| c.bm25 == 0.0 && !c.defines.any()) {
                match match_scores.as_ref().map_or(MatchScore::Unscored, |s| s.of(id)) {
                    MatchScore::Scored(score) => c.bm25 = score,
                    MatchScore::NotMatched => {}
                    MatchScore::Unscored => unscored.push(id),
                }
            }
        }
        let with_content = needs_content(&common, query.fragments(req.mode));
        // In hybrid mode, candidates the vector side did not reach get their
        // similarity from their stored vectors, read with the rest of the
        // chunk, so fusion compares every candidate on both sides.
        let fill_from = vectors
            .as_ref()
            .filter(|_| req.mode == SearchMode::Hybrid)
            .map(|v| (v.side.embedder.id(), v.query.vector.as_slice()));
        let signature_model = vectors
            .as_ref()
            .map(|v| crate::embed::text::signature_model(v.side.embedder.id()));
        let signatures_from = vectors
            .as_ref()
            .zip(signature_model.as_deref())
            .map(|(v, model)| (model, v.query.vector.as_slice()));
        let models = RowModels {
            with_content,
            fragments: query.fragments(req.mode),
            vector: fill_from.map(|(model, _)| model),
            signature: signatures_from.map(|(model, _)| model),
        };
        // The rows still to read, in rowid order (neighbours share pages).
        let mut to_read: Vec<i64> = candidates
            .keys()
            .filter(|id| !preloaded.contains_key(id))
            .copied()
            .collect();
        to_read.sort_unstable();
        let (rows, scores) = self.read_on_two_connections(&to_read, &unscored, &matched_terms, models, clock)?;
        preloaded.extend(rows);
        let (mut hits, chunk_vectors) = hits_of_rows(&mut candidates, fill_from, signatures_from, preloaded);
        for (id, score) in scores {
            if let Some(c) = candidates.get_mut(&id) {
                c.bm25 = score;
            }
        }
        if !common.terms.is_empty() {
            add_common_term_scores(&mut hits, &mut candidates, &common);
        }
        let assembled = clock.lap();
        clock.phases.load += assembled;
        Ok(Gathered {
            candidates,
            hits,
            vectors,
            with_content,
            chunk_vectors,
        })
    }

    /// The rows of `to_read`, and the BM25 of `unscored` (candidates the
    /// lexical ranking skipped). The second connection, on the other core,
    /// takes the BM25, or else half of the rows, while this one reads the
    /// rest; without it, or if its snapshot has other chunks than this
    /// search's, all of it is done here.
    fn read_on_two_connections(
        &self,
        to_read: &[i64],
        unscored: &[i64],
        terms: &[(&String, f64)],
        models: RowModels,
        clock: &mut PhaseClock,
    ) -> Result<ReaderShare> {
        let (theirs, mine) = if unscored.is_empty() {
            to_read.split_at(to_read.len() / 2)
        } else {
            (&[][..], to_read)
        };
        let share = !unscored.is_empty() || theirs.len() >= MIN_ROWS_TO_SHARE;
        let reader = share.then(|| self.reader()).flatten();
        let generation = match reader {
            Some(_) => self.store.lexical_generation()?,
            None => 0,
        };
        let branch = self.branch.as_str();
        let beside = |reader: &std::sync::Mutex<Store>| -> Result<ReaderShare> {
            let store = reader.lock().unwrap_or_else(|e| e.into_inner());
            let _snapshot = store.read_snapshot()?;
            // Its snapshot may be newer than this search's: only if the
            // chunks are the same are its rows and scores theirs.
            anyhow::ensure!(
                store.lexical_generation()? == generation,
                "the index changed since the search began"
            );
            Ok((
                read_rows(&store, branch, theirs, models)?,
                bm25_of(&store, terms, unscored)?,
            ))
        };
        let mut read_mine = || {
            let rows = self.read_rows(mine, models);
            clock.phases.load = clock.lap();
            rows
        };
        let (from_reader, mine) = match reader {
            Some(reader) => {
                let (theirs, mine) = workers::beside(|| beside(reader), read_mine);
                (theirs.ok().and_then(Result::ok), mine)
            }
            None => (None, read_mine()),
        };
        clock.phases.rescore = clock.lap();
        let mut rows = mine?;
        let scores = match from_reader {
            Some((their_rows, scores)) => {
                rows.extend(their_rows);
                scores
            }
            None => {
                rows.extend(self.read_rows(theirs, models)?);
                bm25_of(&self.store, terms, unscored)?
            }
        };
        Ok((rows, scores))
    }

    /// The lexical side; meanwhile, when the search will use the query's
    /// vector, the query embedded on another core and its nearest vectors
    /// found there, and the lexical candidates' rows read while the model
    /// runs: (the lexical side, the query's vector and nearest vectors, the
    /// rows read).
    fn lexical_while_embedding<'q>(
        &self,
        query: &'q Query,
        req: &SearchRequest,
        fetch: usize,
        deferred: bool,
        phases: &mut SearchPhases,
    ) -> (
        Result<LexicalSide<'q>>,
        Option<Result<Prefetched>>,
        HashMap<i64, CandidateRow>,
    ) {
        // A query of several words will use its vector: embed it on another
        // core while this one runs the lexical side (the model is the slower half).
        let prefetch = req.mode != SearchMode::Lexical && !deferred && query.wording.several_words();
        let prefetch_side = if prefetch { self.semantic_side().ok() } else { None };
        let nearest = vector_fetch(req.mode, fetch);
        // A question's words as code says them are weak evidence: matched
        // only where the vector side weighs every candidate too (alone they
        // cost lexical agent file R@1 .675 → .625).
        let synonyms = req.mode == SearchMode::Hybrid && prefetch_side.is_some();
        let lexical_and_rows = || {
            let started = Instant::now();
            let lexical = self.lexical_side(query, req, fetch, synonyms);
            let lexical_done = Instant::now();
            // While the other core embeds the query, read the lexical
            // candidates' chunks and stored vectors (a failure here only
            // means they are read after).
            let preloaded = match (&lexical, prefetch_side) {
                (Ok(LexicalSide { candidates, common, .. }), Some(side)) => {
                    let vector_model = (req.mode == SearchMode::Hybrid).then(|| side.embedder.id());
                    let signature_model = crate::embed::text::signature_model(side.embedder.id());
                    let ids: Vec<i64> = candidates.keys().copied().collect();
                    let models = RowModels {
                        with_content: needs_content(common, query.fragments(req.mode)),
                        fragments: query.fragments(req.mode),
                        vector: vector_model,
                        signature: Some(&signature_model),
                    };
                    self.read_rows(&ids, models).unwrap_or_default()
                }
                _ => HashMap::new(),
            };
            let timed = (lexical_done - started, lexical_done.elapsed());
            (lexical, preloaded, timed)
        };
        match prefetch_side {
            Some(side) => {
                let embed = || -> (Result<Prefetched>, Duration) {
                    let started = Instant::now();
                    let embedded = side.embed_query(query).and_then(|vector| {
                        let embeddings = nearest_embeddings(side, &vector.vector, nearest)?;
                        Ok((vector, embeddings))
                    });
                    (embedded, started.elapsed())
                };
                // Semantic mode has no lexical side to run meanwhile: the
                // embedding takes every core from here (rayon's global pool).
                let (prefetched, (lexical, preloaded, timed)) = if req.mode == SearchMode::Semantic {
                    let rows = lexical_and_rows();
                    (std::panic::catch_unwind(std::panic::AssertUnwindSafe(embed)), rows)
                } else {
                    workers::beside(embed, lexical_and_rows)
                };
                (phases.lexical_only, phases.lexical_rows) = timed;
                let prefetched = match prefetched {
                    Ok((prefetched, took)) => {
                        phases.embedding = took;
                        prefetched
                    }
                    Err(_) => Err(anyhow::anyhow!("query embedding panicked")),
                };
                (lexical, Some(prefetched), preloaded)
            }
            None => {
                let (lexical, preloaded, timed) = lexical_and_rows();
                (phases.lexical_only, phases.lexical_rows) = timed;
                (lexical, None, preloaded)
            }
        }
    }

    /// Adds the vector side's candidates, the query's nearest chunks, with
    /// their similarity (none when `skip`). `None`: the vector side took no
    /// part (skipped, or no vectors or model: hybrid mode then answers
    /// lexically and says why, semantic mode fails).
    fn add_vector_candidates(
        &self,
        candidates: &mut HashMap<i64, Candidate>,
        query: &Query,
        req: &SearchRequest,
        fetch: usize,
        prefetched: Option<Result<Prefetched>>,
        skip: bool,
    ) -> Result<Option<VectorSearch<'_>>> {
        Ok(match (req.mode, self.semantic_side_unless(skip)) {
            (SearchMode::Lexical, _) => None,
            (_, Err(why)) if why.is_empty() => None,
            (mode, Ok(side)) => match self.vector_candidates(side, query, req, vector_fetch(mode, fetch), prefetched) {
                Ok((query, found)) => {
                    let depth_factor = vector_depth_factor(mode);
                    for (rank, (id, similarity)) in found.into_iter().enumerate() {
                        let c = candidates.entry(id).or_insert_with(Candidate::found_by_vectors);
                        c.similarity = Some(c.similarity.map_or(similarity, |s| s.max(similarity)));
                        c.ranked_by_vectors(rank, depth_factor);
                    }
                    Some(VectorSearch { side, query })
                }
                Err(e) if mode == SearchMode::Hybrid => {
                    self.set_notice(format!("lexical results only: {e:#}"));
                    None
                }
                Err(e) => return Err(e),
            },
            (SearchMode::Semantic, Err(why)) => bail!("semantic search is unavailable: {why}"),
            (SearchMode::Hybrid, Err(why)) => {
                self.set_notice(format!("lexical results only: {why}"));
                None
            }
        })
    }

    /// BM25 candidates and exact symbol-name matches (none in semantic mode),
    /// with the common terms left out of the match.
    /// With `synonyms`, also the words code says the query's with.
    fn lexical_side<'q>(
        &self,
        query: &'q Query,
        req: &SearchRequest,
        fetch: usize,
        synonyms: bool,
    ) -> Result<LexicalSide<'q>> {
        let mut candidates: HashMap<i64, Candidate> = HashMap::new();
        let (terms, common) = self.selective_terms(&query.lexical, synonyms)?;
        let mut scores = None;
        if req.mode != SearchMode::Semantic && !terms.is_empty() {
            let ranked = self.lexical_candidates(&terms, req, fetch)?;
            for (position, (id, rank)) in ranked.top.into_iter().enumerate() {
                let c = candidates.entry(id).or_default();
                c.bm25 = -rank;
                c.ranked_lexically(position);
            }
            scores = ranked.scores;
        }
        if req.mode != SearchMode::Semantic {
            self.add_definitions(&mut candidates, query, req)?;
        }
        Ok(LexicalSide {
            candidates,
            terms,
            common,
            scores,
        })
    }

    pub(super) fn chunk_total(&self) -> Result<f64> {
        Ok(
            match self
                .store
                .meta(MetaKey::ChunkCount)?
                .and_then(|v| v.parse::<f64>().ok())
            {
                Some(n) => n,
                None => self.store.chunk_rows_counted()? as f64,
            },
        )
    }

    /// Splits the query's terms (those present in the index) into the ones
    /// candidates are matched on and the very common ones, which are left out
    /// of the match when rarer terms exist and the match would visit more
    /// than [`MATCH_ROW_BUDGET`] rows (they cost the most and rank the least);
    /// those are scored on the candidates instead, with their document
    /// frequency. With `synonyms`, the query's [`QueryTerms::synonyms`] too.
    fn selective_terms<'q>(&self, q: &'q QueryTerms, synonyms: bool) -> Result<(Terms<'q>, CommonTerms<'q>)> {
        let total = self.chunk_total()?;
        let mut with_df = Vec::new();
        for term in &q.terms {
            let df = self.term_frequency(term)?;
            if df > 0 {
                with_df.push((term, df as f64));
            }
        }
        // The stored total is written at the end of an index run; chunks
        // committed since can make a term's frequency exceed it.
        let total = with_df.iter().map(|(_, df)| *df).fold(total, f64::max);
        // A word the question says as code says it weighs a share of its IDF,
        // given as the frequency that makes that IDF; left out when FTS5
        // would count the frequencies itself (they lag the index).
        if synonyms && !q.synonyms.is_empty() && self.store.common_terms_current()? {
            for term in &q.synonyms {
                let df = self.term_frequency(term)? as f64;
                if df > 0.0 {
                    with_df.push((term, bm25::frequency_for_idf_share(total, df, SYNONYM_IDF_SHARE)));
                }
            }
        }
        // Rare terms are always matched; commoner ones too, rarest first,
        // while the rows to score stay within budget: a chunk that has only
        // the moderately common words of a query must still be found.
        let mut by_df = with_df.clone();
        by_df.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut rows = 0.0;
        let mut chosen = Vec::new();
        for (term, df) in by_df {
            let within_budget = df <= total * MATCHED_TERM_MAX_SHARE && rows + df <= MATCH_ROW_BUDGET;
            if df <= total * COMMON_TERM_SHARE || within_budget {
                chosen.push(term);
                rows += df;
            }
        }
        // Only very common words: match on them all rather than on nothing.
        let (matched, common): (Vec<_>, Vec<_>) = with_df
            .into_iter()
            .partition(|(t, _)| chosen.is_empty() || chosen.contains(t));
        Ok((matched, CommonTerms { terms: common, total }))
    }

    pub(super) fn set_path_filter(&self, matcher: Option<GlobMatcher>) {
        let matches = matcher.map(|m| Box::new(move |path: &str| m.is_match(path)) as PathPredicate);
        self.store.set_path_filter(matches)
    }

    /// Which chunks the request lets through: the branch's, passing its filters.
    pub(super) fn chunk_filter(&self, req: &SearchRequest) -> ChunkFilter {
        ChunkFilter {
            branch: self.branch.clone(),
            path_filtered: req.path_glob.is_some(),
            language: req.language.clone(),
            kind: req.kind.clone(),
        }
    }

    /// The best `fetch` chunks by BM25 that pass the branch and filters
    /// (their FTS5 rank), and every matching row's score when the ranking kept them.
    /// FTS5 ranks alone first (no joins per match, which is what makes broad
    /// queries slow); the winners are then checked against the catalog and
    /// filters, fetching deeper only when too many were filtered out.
    fn lexical_candidates(
        &self,
        terms: &[(&String, f64)],
        req: &SearchRequest,
        fetch: usize,
    ) -> Result<LexicalRanking> {
        let fts_query = QueryTerms::fts_match(terms.iter().map(|(t, _)| *t));
        let frequencies = frequencies_in(&self.store, terms)?;
        // `ken_bm25` equals FTS5's bm25() on the rows it returns first and
        // skips reading the length of rows that cannot make the top `depth`.
        let ranking = Bm25Ranking {
            stock: self.stock_bm25.load(std::sync::atomic::Ordering::Relaxed),
            weights: BM25_WEIGHTS,
        };
        let filter = self.chunk_filter(req);
        let mut depth = fetch;
        loop {
            let ranked = self
                .store
                .lexical_ranked(&fts_query, frequencies.as_deref(), depth, ranking)?;
            let exhausted = ranked.top.len() < depth;
            let visible = self.store.first_visible(&filter, &ranked.top, fetch)?;
            if visible.len() >= fetch || exhausted || depth >= MAX_LEXICAL_DEPTH {
                return Ok(LexicalRanking {
                    top: visible,
                    scores: ranked.scores,
                });
            }
            depth *= 4;
        }
    }

    /// Chunks whose embedding is among the query's nearest neighbours, with
    /// similarity, restricted to the branch and filters.
    fn vector_candidates(
        &self,
        side: &SemanticSide,
        query: &Query,
        req: &SearchRequest,
        fetch: usize,
        prefetched: Option<Result<Prefetched>>,
    ) -> Result<(QueryVector, Neighbours)> {
        let (query, embeddings) = match prefetched {
            Some(found) => found?,
            None => {
                let vector = side.embed_query(query)?;
                let found = self.neighbours(side, &vector.vector, req, fetch)?;
                return Ok((vector, found));
            }
        };
        Ok((query, self.chunks_near(req, &embeddings, fetch)?))
    }

    /// The chunks (of the branch, passing the filters) whose vectors are
    /// nearest to `vector`, best first, with cosine similarity.
    pub(super) fn neighbours(
        &self,
        side: &SemanticSide,
        vector: &[f32],
        req: &SearchRequest,
        fetch: usize,
    ) -> Result<Vec<(i64, f32)>> {
        self.chunks_near(req, &nearest_embeddings(side, vector, fetch)?, fetch)
    }

    /// The chunks (of the branch, passing the filters) of `embeddings`,
    /// nearest first, up to `fetch`.
    fn chunks_near(&self, req: &SearchRequest, embeddings: &[(i64, f32)], fetch: usize) -> Result<Vec<(i64, f32)>> {
        self.store
            .chunks_of_embeddings(&self.chunk_filter(req), embeddings, fetch)
    }

    /// The rows of `ids` on this searcher's connection (see [`read_rows`]).
    pub(super) fn read_rows(&self, ids: &[i64], models: RowModels) -> Result<HashMap<i64, CandidateRow>> {
        read_rows(&self.store, &self.branch, ids, models)
    }

    /// The second connection ([`Searcher::reader`]), opened on first use;
    /// `None` if it cannot be (this connection then does its work).
    pub(super) fn reader(&self) -> Option<&std::sync::Mutex<crate::store::Store>> {
        self.reader
            .get_or_init(|| {
                let store = crate::store::Store::open_for_read(&self.store.dir).ok()?;
                store.register_bm25().ok()?;
                Some(std::sync::Mutex::new(store))
            })
            .as_ref()
    }

    /// Reads the text of hits loaded without it.
    pub(super) fn load_contents(&self, hits: &mut [SearchHit]) -> Result<()> {
        for hit in hits.iter_mut().filter(|h| h.content.is_empty()) {
            hit.content = self
                .store
                .chunk_text_and_comments(hit.chunk_id)?
                .map(|(text, _)| text)
                .with_context(|| format!("chunk {} is gone from the index", hit.chunk_id))?;
        }
        Ok(())
    }
}

/// The candidates as hits, from their `rows` (every candidate's, read
/// with [`read_rows`]). With `fill_from` (model, query vector), a
/// candidate that has no similarity yet gets it from its stored vector,
/// if it has one; with `signatures_from`, its signature similarity likewise.
pub(super) fn hits_of_rows(
    candidates: &mut HashMap<i64, Candidate>,
    fill_from: Option<(&str, &[f32])>,
    signatures_from: Option<(&str, &[f32])>,
    mut rows: HashMap<i64, CandidateRow>,
) -> (Vec<SearchHit>, ChunkVectors) {
    let mut hits = Vec::with_capacity(candidates.len());
    let mut vectors = HashMap::new();
    for (&id, candidate) in candidates.iter_mut() {
        // Callers read every candidate's row; one without is left out, never a panic.
        let Some(row) = rows.remove(&id) else { continue };
        if let (Some(blob), Some((_, query))) = (&row.vector, fill_from) {
            let vector = crate::store::vectors::decode(blob);
            if candidate.similarity.is_none() {
                candidate.similarity = Some(crate::embed::cosine(query, &vector));
            }
            vectors.insert(id, vector);
        }
        if let (Some(blob), Some((_, query))) = (&row.signature, signatures_from) {
            // One vector per name of the chunk, end to end: the nearest counts.
            candidate.signature_similarity = crate::store::vectors::decode(blob)
                .chunks_exact(query.len().max(1))
                .map(|v| crate::embed::cosine(query, v))
                .reduce(f32::max);
        }
        hits.push(row.hit);
    }
    (hits, vectors)
}

/// What a candidate's row is read with: its text, its vector of a model,
/// its signature vectors of a model.
#[derive(Clone, Copy, Default)]
pub(super) struct RowModels<'m> {
    pub with_content: bool,
    /// Code the query quotes: the import lines of a chunk that holds it are
    /// read (an import of it says nothing about where the code is).
    pub fragments: &'m [String],
    pub vector: Option<&'m str>,
    pub signature: Option<&'m str>,
}

/// The rows of `ids` in `store`, as cataloged on `branch`.
fn read_rows(store: &Store, branch: &str, ids: &[i64], models: RowModels) -> Result<HashMap<i64, CandidateRow>> {
    ids.iter()
        .map(|&id| {
            let row = store.chunk_row(branch, id, models.with_content, models.vector, models.signature)?;
            let text = row.text.unwrap_or_default();
            let import_lines = if models.fragments.iter().any(|f| text.contains(f.as_str())) {
                store.chunk_import_lines(id)?
            } else {
                Vec::new()
            };
            let hit = SearchHit {
                path: row.path,
                start_line: row.start_line,
                end_line: row.end_line,
                score: 0.0,
                kind: row.kind,
                symbol: row.symbol,
                language: row.language,
                snippet: String::new(),
                context: row.context,
                content: text,
                explain: None,
                copies: Vec::new(),
                chunk_id: id,
                content_hash: row.content_hash,
                comments: crate::source::chunk::parse_doc_lines(row.comments.as_deref(), row.start_line),
                import_lines,
                packed: row.side_by_side >= 2,
            };
            Ok((
                id,
                CandidateRow {
                    hit,
                    vector: row.vector,
                    signature: row.signature,
                },
            ))
        })
        .collect()
}

/// The BM25 score in `store` of each of `ids` that matches `terms` (with
/// their document frequencies): the lexical side's score, for chunks only
/// the vector side found.
fn bm25_of(store: &crate::store::Store, terms: &[(&String, f64)], ids: &[i64]) -> Result<Vec<(i64, f64)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let fts_query = QueryTerms::fts_match(terms.iter().map(|(t, _)| *t));
    let scores = store.bm25_of(&fts_query, frequencies_in(store, terms)?.as_deref(), ids, BM25_WEIGHTS)?;
    Ok(scores.into_iter().map(|(id, score)| (id, -score)).collect())
}

/// The document frequencies the terms were chosen by, as `ken_bm25` takes
/// them, when they are `store`'s snapshot's; `None` (FTS5 counts them again,
/// walking each term's list) when the stored ones lag the index.
fn frequencies_in(store: &crate::store::Store, terms: &[(&String, f64)]) -> Result<Option<Vec<u8>>> {
    Ok(store
        .common_terms_current()?
        .then(|| terms.iter().flat_map(|(_, df)| df.to_le_bytes()).collect()))
}

/// Whether every candidate is read with its text: when common terms score
/// on it or code fragments of the query are looked for in it.
fn needs_content(common: &CommonTerms, fragments: &[String]) -> bool {
    !common.terms.is_empty() || !fragments.is_empty()
}

/// The query's vector and its nearest stored vectors, found on the core
/// that embedded it while the lexical side ran.
type Prefetched = (QueryVector, Vec<(i64, f32)>);

/// The stored vectors nearest to `vector`, twice the `fetch` chunks wanted
/// (some belong to no chunk of the branch or fail the filters): (embedding
/// id, similarity).
fn nearest_embeddings(side: &SemanticSide, vector: &[f32], fetch: usize) -> Result<Vec<(i64, f32)>> {
    side.vectors.search(vector, fetch * 2)
}

/// How many vector neighbours a search of `mode` takes.
fn vector_fetch(mode: SearchMode, fetch: usize) -> usize {
    fetch * vector_depth_factor(mode)
}

/// How many times deeper than the lexical side the vector side goes.
fn vector_depth_factor(mode: SearchMode) -> usize {
    if mode == SearchMode::Hybrid {
        VECTOR_DEPTH_FACTOR
    } else {
        1
    }
}

/// Adds to each candidate the BM25 share of the common terms that were left
/// out of the lexical match, estimated from the chunk's text: term frequency by
/// counting the (stemmed) term in the lowercased symbol, path and body, and
/// length relative to the other candidates. These terms have a low IDF, so
/// the estimate only reorders candidates that the rare terms found.
fn add_common_term_scores(hits: &mut [SearchHit], candidates: &mut HashMap<i64, Candidate>, common: &CommonTerms) {
    let total = common.total;
    const K1: f64 = 1.2;
    const B: f64 = 0.75;
    let (ws, wp, wb) = BM25_WEIGHTS;
    // Each term's searcher built once for every candidate (`str::matches`
    // prepared one per call); non-overlapping occurrences, as it counts.
    let finders: Vec<(memchr::memmem::Finder, f64)> = common
        .terms
        .iter()
        .map(|(term, df)| (memchr::memmem::Finder::new(term.as_bytes()), *df))
        .collect();
    let count = |finder: &memchr::memmem::Finder, text: &str| finder.find_iter(text.as_bytes()).count() as f64;
    // The mean over the default list's pool, so the estimate does not move
    // with the limit.
    let (pooled_len, pooled) = hits
        .iter()
        .filter(|h| candidates.get(&h.chunk_id).is_none_or(|c| !c.beyond_default_pool))
        .fold((0.0, 0usize), |(len, n), h| (len + h.content.len() as f64, n + 1));
    let avg_len = pooled_len / pooled.max(1) as f64;
    for hit in hits.iter() {
        let symbol = hit.symbol.as_deref().unwrap_or("").to_lowercase();
        let path = hit.path.to_lowercase();
        let body = hit.content.to_lowercase();
        let norm = 1.0 - B + B * hit.content.len() as f64 / avg_len.max(1.0);
        let mut extra = 0.0;
        for (finder, df) in &finders {
            let tf = ws * count(finder, &symbol) + wp * count(finder, &path) + wb * count(finder, &body);
            if tf > 0.0 {
                let idf = bm25::idf_of(total, *df);
                extra += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
        }
        if let Some(c) = candidates.get_mut(&hit.chunk_id).filter(|c| c.bm25 > 0.0) {
            c.bm25 += extra;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A common term counts once per non-overlapping occurrence in the
    /// lowercased symbol, path and body, each with its column's weight.
    #[test]
    fn a_common_term_counts_its_occurrences_in_symbol_path_and_body() {
        let term = "aa".to_string();
        let common = CommonTerms {
            terms: vec![(&term, 10.0)],
            total: 1000.0,
        };
        let hit = |chunk_id, symbol: &str, path: &str, content: &str| SearchHit {
            chunk_id,
            symbol: Some(symbol.to_string()),
            path: path.to_string(),
            content: content.to_string(),
            ..Default::default()
        };
        let mut hits = vec![hit(1, "AAA", "x/aaaa", "aAaA aa"), hit(2, "b", "y", "bbbbbbb")];
        let found = || Candidate {
            bm25: 1.0,
            ..Default::default()
        };
        let mut candidates: HashMap<i64, Candidate> = [(1, found()), (2, found())].into();
        add_common_term_scores(&mut hits, &mut candidates, &common);
        // tf = 6 × 1 (symbol) + 2 × 2 (path) + 1 × 3 (body); both bodies of mean length.
        let tf = 13.0;
        let idf = ((1000.0f64 - 10.0 + 0.5) / 10.5).ln();
        let expected = 1.0 + idf * tf * 2.2 / (tf + 1.2);
        assert!(
            (candidates[&1].bm25 - expected).abs() < 1e-12,
            "{}",
            candidates[&1].bm25
        );
        assert_eq!(candidates[&2].bm25, 1.0);
    }
}
