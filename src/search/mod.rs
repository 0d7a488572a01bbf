//! Answering a query, stage by stage, one file each: the query is parsed
//! once (`query.rs`); candidates come from BM25, exact symbol-name matches
//! (`definitions.rs`) and the nearest vectors (`candidates.rs`, with the
//! model side in `semantic.rs`); `fusion.rs` combines their sides into one
//! score; a deterministic rerank (`rerank.rs`) multiplies it by factors
//! (definitions and exact names first, tests and docs after source unless
//! asked for); `diversity.rs` removes overlaps and spreads the files;
//! `hit.rs` is what is returned. [`confidence`] says how likely the results
//! are to answer, and [`kb`] searches the knowledge bases beside the project.

mod candidates;
pub mod confidence;
mod definitions;
mod diversity;
pub mod engine;
mod feedback;
mod fusion;
mod hit;
pub mod kb;
mod query;
mod rerank;
mod semantic;
mod workers;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::embed::InputKind;
use crate::search::confidence::{Confidence, Evidence, TermStat};
use crate::source::git;
use crate::source::lexical::{self, QueryTerms};
use crate::store::bm25::RowLengths;
use crate::store::lookup::RowLengthsInUse;
use crate::store::{index_maps, populate_maps, Store};

use candidates::{candidate_pool, hits_of_rows, Candidate, Gathered, RowModels, VectorSearch};
use definitions::Defines;
use diversity::{diversify, same_file_share};
use fusion::FusionExplain;
use hit::finish_hit;
use query::{Query, Wording};
use semantic::SemanticSide;

pub use fusion::{Fusion, Weights};
pub use hit::{snippet, Explain, ExplainFactor, Location, SearchHit};

/// Why a `max_per_file` of 0 is refused (the CLI and the MCP tools say so).
pub const MAX_PER_FILE_AT_LEAST_ONE: &str = "must be at least 1 (1 lists each file once)";

/// Results a search lists unless asked for another number.
pub const DEFAULT_LIMIT: usize = 10;

/// A search request. Filters apply before ranking.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub query: String,
    pub limit: usize,
    /// Glob over root-relative paths (`src/**/*.rs`, `*.py`); a plain
    /// directory (`src/auth`) means everything under it.
    pub path_glob: Option<String>,
    pub language: Option<String>,
    pub kind: Option<String>,
    /// A hard limit per file; without it `diversify`'s decay spreads results.
    pub max_per_file: Option<usize>,
    pub mode: SearchMode,
    /// Attach an [`Explain`] to every hit.
    pub explain: bool,
}

impl SearchRequest {
    pub fn new(query: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            limit: DEFAULT_LIMIT,
            path_glob: None,
            language: None,
            kind: None,
            max_per_file: None,
            mode: SearchMode::default(),
            explain: false,
        }
    }
}

/// How results are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchMode {
    /// Lexical and vector candidates, each scored on both sides and combined (the default).
    #[default]
    Hybrid,
    /// Embedding similarity only.
    Semantic,
    /// BM25 over code-aware terms only.
    Lexical,
}

/// Where one search spent its time (`Searcher::last_phases`, `ken bench query`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SearchPhases {
    /// The lexical side, with the query embedding running beside it.
    pub lexical: Duration,
    /// Inside it: BM25 and the exact names ...
    pub lexical_only: Duration,
    /// ... then the lexical candidates' rows, read while the model runs.
    pub lexical_rows: Duration,
    /// Beside them, on another core: the query's embedding and its nearest vectors.
    pub embedding: Duration,
    /// Vector neighbours: the HNSW search and their chunks.
    pub vector: Duration,
    /// The second connection's share, beside this one's reads: the BM25 of
    /// vector candidates the lexical ranking did not score, or else half
    /// the rows; what is left of it after this connection's share.
    pub rescore: Duration,
    /// Reading the candidates with their stored vectors.
    pub load: Duration,
    /// Fusion, rerank, the per-file spread and snippets.
    pub rank: Duration,
}

/// Times the phases of one search, one after the other.
struct PhaseClock {
    phases: SearchPhases,
    lap: Instant,
}

impl PhaseClock {
    fn start() -> PhaseClock {
        PhaseClock {
            phases: SearchPhases::default(),
            lap: Instant::now(),
        }
    }

    /// The time since the previous lap (or the start); the next lap starts now.
    fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let lap = now - self.lap;
        self.lap = now;
        lap
    }
}

pub struct Searcher {
    store: Store,
    branch: String,
    /// The query embedder and vector index, loaded on the first query that needs them.
    /// Only a successful load is kept: a failure (no vectors yet, no model)
    /// is retried by the next query, which may come after `ken index`.
    semantic: OnceLock<SemanticSide>,
    /// A second connection to the index, opened by the first search that
    /// scores vector-only candidates: their BM25 is taken there while this
    /// connection reads the candidates' rows. `None`: it could not be opened
    /// (not tried again; this connection does that work).
    reader: OnceLock<Option<std::sync::Mutex<Store>>>,
    /// The document frequencies read by the search under way (one snapshot):
    /// the lexical side and the confidence ask for the same terms.
    term_frequencies: std::sync::Mutex<HashMap<String, i64>>,
    /// Every chunk's length for `ken_bm25`, with the lexical generation it
    /// was read at (`None` inside: the index's rowids too sparse to keep).
    /// Read by a searcher's second search (a one-shot search does not pay
    /// for it) or by a server before the first, and again when the
    /// generation moves.
    row_lengths: std::sync::Mutex<Option<(i64, Option<std::sync::Arc<RowLengths>>)>>,
    searches: std::sync::atomic::AtomicUsize,
    notice: std::sync::Mutex<Option<String>>,
    fusion: Fusion,
    /// `KEN_FUSION_WEIGHTS` is set: the embedder's lexical weight is not applied.
    fusion_weights_set: bool,
    /// Benchmarks only: rank with FTS5's own `bm25()`, the baseline of `ken_bm25`.
    stock_bm25: std::sync::atomic::AtomicBool,
    last_phases: std::sync::Mutex<SearchPhases>,
    /// Set by a server that loads the model in the background: while it is
    /// true, a hybrid search of this searcher answers lexically (and says
    /// so) instead of loading the model itself.
    model_loading_elsewhere: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Searcher {
    /// Opens the index of `root` (stored in `index_dir`) for searching the
    /// root's current branch.
    pub fn open(root: &Path, index_dir: &Path) -> Result<Searcher> {
        let settings = crate::config::try_settings()?;
        let store = Store::open_for_read(index_dir)?;
        store.register_bm25()?;
        let branch = git::head(root).catalog_key();
        let mut indexed = store.has_catalog(Some(&branch))?;
        // Just after a checkout a watcher is indexing the branch (in one
        // transaction): wait for it rather than fail or mix branches.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !indexed
            && std::time::Instant::now() < deadline
            && crate::index::freshness::live_watcher(&store)?.is_some()
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
            indexed = store.has_catalog(Some(&branch))?;
        }
        if !indexed {
            let any = store.has_catalog(None)?;
            if any {
                bail!(
                    "the index has no files for the current branch `{branch}`; run `ken index` to index it \
                     (unchanged files are re-used, not re-parsed)"
                );
            }
        }
        Ok(Searcher {
            store,
            branch,
            semantic: OnceLock::new(),
            reader: OnceLock::new(),
            term_frequencies: Default::default(),
            row_lengths: Default::default(),
            searches: Default::default(),
            notice: std::sync::Mutex::new(None),
            fusion: Fusion::of(settings),
            fusion_weights_set: settings.fusion_weights.is_some(),
            stock_bm25: Default::default(),
            last_phases: Default::default(),
            model_loading_elsewhere: None,
        })
    }

    /// Hybrid searches answer lexically while `loading` is true, unless this
    /// searcher has its model already (see [`Searcher::load_model`]).
    pub fn defer_model_while(&mut self, loading: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.model_loading_elsewhere = Some(loading);
    }

    /// Loads the query embedder and the vector index now and embeds a query
    /// once (the first forward pass is the slow one), so that the first
    /// search does not wait for them. `Err`: why semantic search is not
    /// available (no vectors yet, no model).
    pub fn load_model(&self) -> Result<(), String> {
        let side = self.semantic_side()?;
        side.embed_query(&Query::parse("warm up"))
            .map(drop)
            .map_err(|e| format!("{e:#}"))
    }

    /// Ranks lexical candidates with FTS5's own `bm25()` (same results,
    /// slower): the baseline `ken bench query` measures `ken_bm25` against.
    pub fn rank_with_stock_bm25(&self, on: bool) {
        self.stock_bm25.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where the last search that got past its checks spent its time.
    pub fn last_phases(&self) -> SearchPhases {
        *self.last_phases.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Keeps a long-lived searcher in step with the index: `false` when HEAD
    /// is now on another branch (open a new searcher); a republished vector
    /// file is reopened (the query embedder is kept).
    pub fn refresh(&mut self, root: &Path) -> bool {
        if git::head(root).catalog_key() != self.branch {
            return false;
        }
        match self.semantic.get_mut() {
            Some(side) => side.refresh(&self.store),
            None => true,
        }
    }

    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Chunks most similar in meaning to `target`: a code snippet, or
    /// `path:line` naming a chunk of the index (whose file is then left out
    /// unless `include_source_file`).
    pub fn similar(&self, target: &str, limit: usize, include_source_file: bool) -> Result<Vec<SearchHit>> {
        let side = self
            .semantic_side()
            .map_err(|why| anyhow::anyhow!("similarity search is unavailable: {why}"))?;
        let (vector, source) = match self.chunk_at(target)? {
            Some((chunk_id, path, content_hash)) => {
                let blob = self.store.vector_of(content_hash, side.embedder.id())?;
                let vector = match blob {
                    Some(b) => crate::store::vectors::decode(&b),
                    None => bail!("{target} has no embedding yet; run `ken index`"),
                };
                (vector, Some((chunk_id, path)))
            }
            None => (side.embedder.embed_now(target, InputKind::Document)?, None),
        };
        let req = SearchRequest {
            limit,
            ..SearchRequest::new(target)
        };
        self.set_path_filter(None);
        let mut candidates: HashMap<i64, Candidate> = HashMap::new();
        for (rank, (id, similarity)) in self
            .neighbours(side, &vector, &req, candidate_pool(limit))?
            .into_iter()
            .enumerate()
        {
            let skip = source.as_ref().is_some_and(|(src_id, _)| *src_id == id);
            if !skip {
                let c = candidates.entry(id).or_insert_with(Candidate::found_by_vectors);
                c.ranked_by_vectors(rank, 1);
                c.similarity = Some(similarity);
            }
        }
        let ids: Vec<i64> = candidates.keys().copied().collect();
        let rows = self.read_rows(&ids, RowModels::default())?;
        let (mut hits, _) = hits_of_rows(&mut candidates, None, None, rows);
        if let Some((_, path)) = &source {
            if !include_source_file {
                hits.retain(|h| &h.path != path);
            }
        }
        for hit in &mut hits {
            hit.score = candidates[&hit.chunk_id].similarity.map_or(0.0, f64::from);
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.path.cmp(&b.path)));
        let mut hits = diversify(hits, limit, None, same_file_share(false));
        self.load_contents(&mut hits)?;
        let q = QueryTerms::default();
        for hit in &mut hits {
            finish_hit(hit, None, &q);
        }
        Ok(hits)
    }

    /// The innermost chunk of the branch at `path:line`, if `target` names one:
    /// (chunk id, path, content hash).
    fn chunk_at(&self, target: &str) -> Result<Option<(i64, String, i64)>> {
        let Some((path, line)) = target.rsplit_once(':') else {
            return Ok(None);
        };
        let Ok(line) = line.trim().parse::<u32>() else {
            return Ok(None);
        };
        let path = path.trim().trim_start_matches("./");
        if path.is_empty() || path.contains(char::is_whitespace) {
            return Ok(None);
        }
        if let Some((chunk_id, content_hash)) = self.store.innermost_chunk_at(&self.branch, path, line)? {
            return Ok(Some((chunk_id, path.to_string(), content_hash)));
        }
        // A `path:line` that names nothing indexed is an error, not a snippet
        // to embed (which would return unrelated code).
        let lines = self.store.line_count_of(&self.branch, path)?;
        match lines {
            None => bail!("{path} is not in the index (no such file, or not indexed: `ken status` shows what is)"),
            Some(n) => bail!("{path} has no indexed code at line {line} (it has {n} lines)"),
        }
    }

    /// Forgets the remembered query vectors (benchmarks time the model).
    pub fn forget_query_vectors(&self) {
        if let Some(side) = self.semantic.get() {
            side.forget_queries();
        }
    }

    /// What the last search could not do (e.g. semantic search unavailable,
    /// so the results are lexical only).
    pub fn notice(&self) -> Option<String> {
        self.notice.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_notice(&self, text: String) {
        *self.notice.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
    }

    pub fn search(&self, req: &SearchRequest) -> Result<Vec<SearchHit>> {
        Ok(self.search_rated(req)?.0)
    }

    /// The results with how likely they are to answer the query: the
    /// candidates, fused, reranked, and finished.
    pub fn search_rated(&self, req: &SearchRequest) -> Result<(Vec<SearchHit>, Confidence)> {
        let path_filter = req
            .path_glob
            .as_deref()
            .map(crate::source::paths::compile_path_glob)
            .transpose()?;
        let query = Query::parse(&req.query);
        let blank = query.wording == Wording::Blank;
        if req.limit == 0 || (query.lexical.is_empty() && req.mode == SearchMode::Lexical) || blank {
            return Ok((Vec::new(), Confidence::none()));
        }
        self.set_path_filter(path_filter);
        // One snapshot for every read of this search: a writer committing
        // between two of them would skew the term statistics (a chunk total
        // read before a batch, document frequencies after it).
        let _snapshot = self.store.read_snapshot()?;
        self.term_frequencies.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let repeated = self.searches.fetch_add(1, std::sync::atomic::Ordering::Relaxed) > 0;
        let _lengths = self.keep_row_lengths(repeated);

        let mut clock = PhaseClock::start();
        let Gathered {
            mut candidates,
            mut hits,
            vectors,
            with_content,
            mut chunk_vectors,
        } = self.gather(&query, req, &mut clock)?;
        let fusion = self.fusion_for(vectors.as_ref(), &query);
        let mut fused = fusion::fuse(&candidates, req.mode, vectors.is_some(), fusion);
        let factors = rerank::RerankFactors::of(&hits, &candidates, &query, req.mode);
        if let Some(v) = vectors.as_ref().filter(|_| req.mode == SearchMode::Hybrid) {
            fused = feedback::fuse_again(
                &mut hits,
                &mut candidates,
                fused,
                &factors,
                fusion,
                &v.query.vector,
                &mut chunk_vectors,
            )?;
        }
        let explain = req
            .explain
            .then(|| FusionExplain::of(&candidates, req.mode, vectors.is_some(), fusion));
        rerank::rerank(&mut hits, &factors, &fused, explain.as_ref().map(|e| (e, &candidates)));
        let hits = self.finish(hits, &candidates, &query, req, with_content)?;
        let confidence = self.rate(&query, req, &hits, &candidates)?;
        clock.phases.rank = clock.lap();
        *self.last_phases.lock().unwrap_or_else(|e| e.into_inner()) = clock.phases;
        Ok((hits, confidence))
    }

    /// Readies a long-lived searcher (a server's, before its first search):
    /// starts the search workers, reads every chunk's length now, opens the
    /// second connection, and maps in the index's pages on this searcher's
    /// maps: those not in `before` ([`index_maps`] before it was opened).
    /// Returns the bytes mapped in.
    pub fn warm_up(&self, before: &[std::ops::Range<usize>]) -> Result<usize> {
        {
            let _snapshot = self.store.read_snapshot()?;
            self.searches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(self.keep_row_lengths(true));
        }
        workers::start();
        // SQLite maps the file on a connection's first read.
        if let Some(reader) = self.reader() {
            reader.lock().unwrap_or_else(|e| e.into_inner()).lexical_generation()?;
        }
        let own: Vec<_> = index_maps(&self.store.dir)
            .into_iter()
            .filter(|m| !before.contains(m))
            .collect();
        Ok(populate_maps(&own))
    }

    /// Hands `ken_bm25` the rows' lengths of this snapshot's generation for
    /// the search's duration: those kept while the generation holds, else
    /// read now when `load`; without them it reads each length from the index.
    fn keep_row_lengths(&self, load: bool) -> RowLengthsInUse<'_> {
        let Ok(generation) = self.store.lexical_generation() else {
            return self.store.use_row_lengths(None);
        };
        let mut kept = self.row_lengths.lock().unwrap_or_else(|e| e.into_inner());
        if kept.as_ref().is_some_and(|(at, _)| *at != generation) {
            *kept = None;
        }
        if kept.is_none() && load {
            if let Ok(lengths) = self.store.row_lengths() {
                *kept = Some((generation, lengths.map(std::sync::Arc::new)));
            }
        }
        self.store
            .use_row_lengths(kept.as_ref().and_then(|(_, lengths)| lengths.clone()))
    }

    /// The fusion of a search whose vector side is `vectors`: leaning on the
    /// lexical side by the model's weight, for a query the adapter passes by
    /// and for a long one it does not carry ([`Fusion::leaned`]) when the
    /// vector side took part.
    fn fusion_for(&self, vectors: Option<&VectorSearch>, query: &Query) -> Fusion {
        match vectors {
            Some(v) => self.fusion.leaned(
                (!self.fusion_weights_set).then(|| v.side.embedder.lexical_weight()),
                &fusion::QueryVectorKind {
                    adapter: v.query.adapter,
                    terms: query.lexical.terms.len(),
                },
            ),
            None => self.fusion,
        }
    }

    /// The results as returned: best first, spread over files (see
    /// [`diversify`]), each with its text, cut to the definitions the query
    /// named, and its snippet.
    fn finish(
        &self,
        mut hits: Vec<SearchHit>,
        candidates: &HashMap<i64, Candidate>,
        query: &Query,
        req: &SearchRequest,
        with_content: bool,
    ) -> Result<Vec<SearchHit>> {
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.path.cmp(&b.path))
                .then_with(|| a.start_line.cmp(&b.start_line))
        });
        let mut hits = diversify(
            hits,
            req.limit,
            req.max_per_file,
            same_file_share(query.intent.interrogative),
        );
        if !with_content {
            self.load_contents(&mut hits)?;
        }
        for hit in &mut hits {
            finish_hit(hit, candidates[&hit.chunk_id].exact_member.as_ref(), &query.lexical);
        }
        Ok(hits)
    }

    /// The number of chunks that have `term`, read once per search.
    fn term_frequency(&self, term: &str) -> Result<i64> {
        if let Some(&df) = self
            .term_frequencies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(term)
        {
            return Ok(df);
        }
        let df = self.store.term_frequency(term)?;
        self.term_frequencies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(term.to_string(), df);
        Ok(df)
    }

    /// How likely `hits` are to answer the query ([`Confidence`]).
    fn rate(
        &self,
        query: &Query,
        req: &SearchRequest,
        hits: &[SearchHit],
        candidates: &HashMap<i64, Candidate>,
    ) -> Result<Confidence> {
        // A word no chunk has is evidence the repository cannot answer,
        // unless it is only how the question is put: a common English word
        // (`turned`, `several`) or a value given as an example (`10k`,
        // `4xx`: it starts with a digit). Such words leave the rating
        // altogether.
        let (mut absent_words, mut wording) = (Vec::new(), HashSet::new());
        for (word, whole) in lexical::whole_word_terms(&query.text) {
            if self.term_frequency(&whole)? > 0 {
                continue;
            }
            if word.starts_with(|c: char| c.is_ascii_digit()) {
                // Its parts too (`250ms`: `250`, `ms`).
                let mut terms = String::new();
                lexical::index_terms(&word, &mut terms);
                wording.extend(terms.split_whitespace().map(str::to_string));
            } else if lexical::is_common_english(&word) {
                wording.insert(whole);
            } else {
                absent_words.push(word);
            }
        }
        let mut terms = Vec::with_capacity(query.lexical.terms.len());
        for term in query.lexical.terms.iter().filter(|t| !wording.contains(*t)) {
            let df = self.term_frequency(term)? as f64;
            terms.push(TermStat { term: term.clone(), df });
        }
        let total = terms.iter().map(|t| t.df).fold(self.chunk_total()?, f64::max);
        let hit_terms: Vec<_> = hits
            .iter()
            .take(crate::search::confidence::RESULTS_WEIGHED)
            .map(|h| crate::search::confidence::hit_terms(h.symbol.as_deref(), &h.path, &h.content))
            .collect();
        let defines_name =
            !query.intent.question && hits.iter().any(|h| candidates[&h.chunk_id].defines == Defines::Asked);
        let similarities: Vec<f64> = candidates
            .values()
            .filter(|c| !c.deep)
            .filter_map(|c| c.similarity.map(f64::from))
            .collect();
        let cosine = hits
            .iter()
            .filter_map(|h| candidates[&h.chunk_id].similarity.map(f64::from))
            .reduce(f64::max);
        let cosine_z = cosine.filter(|_| similarities.len() > 1).map(|best| {
            let n = similarities.len() as f64;
            let mean = similarities.iter().sum::<f64>() / n;
            let sigma = (similarities.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n).sqrt();
            ((best - mean) / sigma.max(1e-9) * 1000.0).round() / 1000.0
        });
        Ok(Confidence::rate(
            &Evidence {
                terms: &terms,
                total,
                hit_terms: &hit_terms,
                defines_name,
                absent_words: &absent_words,
                cosine: cosine.map(|c| (c * 1000.0).round() / 1000.0),
                cosine_z,
            },
            req.explain,
        ))
    }
}
