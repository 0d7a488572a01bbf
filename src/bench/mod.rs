//! `ken bench index ROOT`: throughput, memory and latency, each next to a
//! baseline measured in the same run (the machines are shared and noisy, so
//! ratios are what compare across runs).
//!
//! Baselines: for indexing, walking the same files and reading + hashing them
//! (the I/O floor); for queries, the bare FTS5 `MATCH ... ORDER BY rank` on
//! the same terms (the storage engine's floor, without ken's rerank).

pub mod context;
pub mod engine;
pub mod first_run;
pub mod graph;
pub mod serve;
pub mod watch;

use std::fmt::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use rayon::prelude::*;
use serde::Serialize;

use crate::index::{self, IndexOptions, IndexReport};
use crate::search::{SearchMode, SearchPhases, SearchRequest, Searcher};
use crate::source::discover::{self, DiscoverOptions};
use crate::source::lexical::QueryTerms;

pub struct BenchOptions {
    pub root: PathBuf,
    pub queries: Option<PathBuf>,
    pub iterations: usize,
}

#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub root: String,
    pub files: u64,
    pub lines: u64,
    pub megabytes: f64,
    pub chunks: u64,
    /// Walk + read + xxh3 of every candidate file.
    pub baseline_read_seconds: f64,
    /// Read + parse + chunk every file in parallel, storing nothing.
    pub parse_seconds: f64,
    pub cold_index_seconds: f64,
    pub cold_files_per_second: f64,
    pub cold_lines_per_second: f64,
    pub cold_megabytes_per_second: f64,
    pub reindex_seconds: f64,
    pub peak_rss_megabytes: f64,
    pub index_megabytes: f64,
    pub queries: usize,
    pub query_p50_ms: f64,
    pub query_p95_ms: f64,
    pub baseline_query_p50_ms: f64,
    pub baseline_query_p95_ms: f64,
    pub graph: crate::bench::graph::GraphBench,
}

pub fn run(opts: &BenchOptions) -> Result<BenchReport> {
    let root = opts
        .root
        .canonicalize()
        .with_context(|| format!("cannot benchmark {}: no such directory", opts.root.display()))?;
    let index_dir = std::env::temp_dir().join(format!("ken-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&index_dir);
    let result = run_in(&root, &index_dir, opts);
    let _ = std::fs::remove_dir_all(&index_dir);
    result
}

fn run_in(root: &std::path::Path, index_dir: &std::path::Path, opts: &BenchOptions) -> Result<BenchReport> {
    let t = Instant::now();
    let found = discover::discover(root, &DiscoverOptions::default());
    let (bytes, lines): (u64, u64) = found
        .files
        .par_iter()
        .filter_map(|c| std::fs::read(&c.abs_path).ok())
        .map(|b| {
            let _ = xxhash_rust::xxh3::xxh3_64(&b);
            (b.len() as u64, bytecount_newlines(&b))
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let baseline_read_seconds = t.elapsed().as_secs_f64();

    // Parsing and chunking alone, in parallel, with nothing stored: what the
    // index costs above this is the store.
    let t = Instant::now();
    let limits = crate::source::chunk::ChunkLimits::default();
    let parsed_chunks: usize = found
        .files
        .par_iter()
        .filter_map(|c| std::fs::read(&c.abs_path).ok().map(|b| (c, b)))
        .map(|(c, bytes)| match discover::check_content(&bytes) {
            Ok(text) => {
                let lang = crate::source::lang::for_source(std::path::Path::new(&c.rel_path), text);
                crate::source::chunk::chunk_source(lang, text, &limits).map_or(0, |v| v.len())
            }
            Err(_) => 0,
        })
        .sum();
    let parse_seconds = t.elapsed().as_secs_f64();
    std::hint::black_box(parsed_chunks);

    // The same cold index without the code graph, for its share of the time.
    let no_graph_dir = index_dir.with_extension("nograph");
    let no_graph = IndexOptions {
        graph: false,
        ..IndexOptions::default()
    };
    let without_graph = index::index(root, &no_graph_dir, &no_graph);
    let _ = std::fs::remove_dir_all(&no_graph_dir);
    let without_graph_seconds = without_graph?.seconds;

    let index_opts = IndexOptions::default();
    let cold: IndexReport = index::index(root, index_dir, &index_opts)?;
    let peak_rss_megabytes = peak_rss_bytes() as f64 / 1e6;
    let again = index::index(root, index_dir, &index_opts)?;

    let searcher = Searcher::open(root, index_dir)?;
    let queries = match &opts.queries {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
        None => sample_queries(&searcher)?,
    };
    let iterations = opts.iterations.max(1);
    let mut ken_ms = Vec::new();
    let mut base_ms = Vec::new();
    for query in &queries {
        let req = SearchRequest::new(query.clone());
        let terms = QueryTerms::parse(query);
        let fts = QueryTerms::fts_match(&terms.terms);
        for _ in 0..iterations {
            let t = Instant::now();
            searcher.search(&req)?;
            ken_ms.push(t.elapsed().as_secs_f64() * 1e3);
            if !terms.is_empty() {
                let t = Instant::now();
                let n = searcher.store().fts_top_ten(&fts)?.len();
                std::hint::black_box(n);
                base_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let mut graph = crate::bench::graph::queries(searcher.store(), root, 50)?;
    graph.cold_index_without_graph_seconds = without_graph_seconds;
    graph.cold_index_graph_ratio = cold.seconds / without_graph_seconds.max(1e-9);
    let megabytes = bytes as f64 / 1e6;
    let secs = cold.seconds.max(1e-9);
    Ok(BenchReport {
        root: root.display().to_string(),
        files: cold.files,
        lines,
        megabytes,
        chunks: cold.chunks,
        baseline_read_seconds,
        parse_seconds,
        cold_index_seconds: cold.seconds,
        cold_files_per_second: cold.files as f64 / secs,
        cold_lines_per_second: lines as f64 / secs,
        cold_megabytes_per_second: megabytes / secs,
        reindex_seconds: again.seconds,
        peak_rss_megabytes,
        index_megabytes: dir_size(index_dir) as f64 / 1e6,
        queries: queries.len(),
        query_p50_ms: percentile(&mut ken_ms, 0.50),
        query_p95_ms: percentile(&mut ken_ms, 0.95),
        baseline_query_p50_ms: percentile(&mut base_ms, 0.50),
        baseline_query_p95_ms: percentile(&mut base_ms, 0.95),
        graph,
    })
}

/// Queries made from the index itself: symbol names (identifier lookups)
/// and their words (keyword searches), picked evenly across the index.
fn sample_queries(searcher: &Searcher) -> Result<Vec<String>> {
    // A packed chunk's label lists several names; the first is one of them.
    let symbols: Vec<String> = searcher
        .store()
        .sampled_chunk_symbols()?
        .into_iter()
        .map(|s| s.split(", ").next().unwrap_or_default().to_string())
        .collect();
    let mut queries = symbols.clone();
    for pair in symbols.chunks(2) {
        let words: Vec<String> = pair
            .iter()
            .flat_map(|s| {
                crate::source::lexical::split_identifier(s)
                    .into_iter()
                    .map(str::to_lowercase)
                    .collect::<Vec<_>>()
            })
            .collect();
        queries.push(words.join(" "));
    }
    Ok(queries)
}

/// The word queries [`sample_queries`] makes from the index's symbol names.
pub(crate) fn sampled_word_queries(root: &std::path::Path, index_dir: &std::path::Path) -> Result<Vec<String>> {
    let searcher = Searcher::open(root, index_dir)?;
    let words: Vec<String> = sample_queries(&searcher)?
        .into_iter()
        .filter(|q| q.contains(' '))
        .collect();
    anyhow::ensure!(
        !words.is_empty(),
        "the index has too few named chunks to make queries of"
    );
    Ok(words)
}

fn bytecount_newlines(b: &[u8]) -> u64 {
    b.iter().filter(|&&c| c == b'\n').count() as u64
}

pub(crate) fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let idx = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[idx]
}

fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| it.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// Peak resident set size of this process, in bytes.
pub fn peak_rss_bytes() -> u64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_maxrss as u64 * 1024
}

impl BenchReport {
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "ken bench index {}", self.root);
        let _ = writeln!(
            s,
            "  corpus:            {} files, {} lines, {:.1} MB -> {} chunks",
            self.files, self.lines, self.megabytes, self.chunks
        );
        let _ = writeln!(s, "  baseline (walk+read+xxh3): {:.3} s", self.baseline_read_seconds);
        let _ = writeln!(
            s,
            "  parse+chunk only:  {:.3} s  ({:.1}x baseline; the rest of the cold index is the store)",
            self.parse_seconds,
            self.parse_seconds / self.baseline_read_seconds.max(1e-9)
        );
        let _ = writeln!(
            s,
            "  cold index:        {:.3} s  ({:.1}x baseline; {:.0} files/s, {:.0} lines/s, {:.1} MB/s)",
            self.cold_index_seconds,
            self.cold_index_seconds / self.baseline_read_seconds.max(1e-9),
            self.cold_files_per_second,
            self.cold_lines_per_second,
            self.cold_megabytes_per_second
        );
        let _ = writeln!(
            s,
            "  no-change reindex: {:.3} s  ({:.2}x baseline)",
            self.reindex_seconds,
            self.reindex_seconds / self.baseline_read_seconds.max(1e-9)
        );
        let _ = writeln!(s, "  peak RSS:          {:.0} MB", self.peak_rss_megabytes);
        let _ = writeln!(s, "  index size:        {:.1} MB", self.index_megabytes);
        let _ = writeln!(
            s,
            "  queries ({}):      p50 {:.2} ms, p95 {:.2} ms  (bare FTS5 baseline p50 {:.2} ms, p95 {:.2} ms; {:.1}x)",
            self.queries,
            self.query_p50_ms,
            self.query_p95_ms,
            self.baseline_query_p50_ms,
            self.baseline_query_p95_ms,
            self.query_p50_ms / self.baseline_query_p50_ms.max(1e-9)
        );
        let g = &self.graph;
        let _ = writeln!(
            s,
            "  graph:             {} symbols, {} refs; cold index {:.2}x the index without it ({:.3} s)",
            g.symbols, g.refs, g.cold_index_graph_ratio, g.cold_index_without_graph_seconds
        );
        let _ = writeln!(
            s,
            "  graph queries ({}): callers p50 {:.2} ms p95 {:.2} ms, callees p50 {:.2} ms p95 {:.2} ms, \
             callers depth 3 p50 {:.2} ms, path p50 {:.2} ms p95 {:.2} ms",
            g.queried,
            g.callers_p50_ms,
            g.callers_p95_ms,
            g.callees_p50_ms,
            g.callees_p95_ms,
            g.callers_depth3_p50_ms,
            g.path_p50_ms,
            g.path_p95_ms
        );
        s
    }
}

/// `ken bench vectors`: add and search `count` clustered unit vectors in the
/// HNSW index, against an exact scan of the same vectors as the baseline.
#[derive(Debug, Serialize)]
pub struct VectorBench {
    pub count: usize,
    pub dimensions: usize,
    pub add_seconds: f64,
    pub adds_per_second: f64,
    pub search_p50_ms: f64,
    pub exact_scan_p50_ms: f64,
    pub recall_at_10: f64,
}

/// Deterministic numbers in [-0.5, 0.5) (xorshift), for test and benchmark data.
pub(crate) struct Noise(pub(crate) u64);

impl Noise {
    pub(crate) fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    }
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// `count` unit vectors spread by `spread` around `centres` random centres.
pub(crate) fn clustered_vectors(
    noise: &mut Noise,
    count: usize,
    dimensions: usize,
    centres: usize,
    spread: f32,
) -> Vec<Vec<f32>> {
    let centroids: Vec<Vec<f32>> = (0..centres)
        .map(|_| (0..dimensions).map(|_| noise.next()).collect())
        .collect();
    (0..count)
        .map(|i| {
            unit(
                centroids[i % centres]
                    .iter()
                    .map(|c| c + spread * noise.next())
                    .collect(),
            )
        })
        .collect()
}

pub fn vectors(
    count: usize,
    dimensions: usize,
    quantization: crate::store::vectors::Quantization,
) -> Result<VectorBench> {
    // Deterministic clustered data (uniform random vectors are adversarial for HNSW).
    let mut noise = Noise(0x9E3779B97F4A7C15);
    let data = clustered_vectors(&mut noise, count, dimensions, 100, 0.3);
    let index = crate::store::vectors::VectorIndex::in_memory(dimensions, quantization)?;
    let t = Instant::now();
    index.reserve(count)?;
    for (i, v) in data.iter().enumerate() {
        index.add(i as i64, v)?;
    }
    let add_seconds = t.elapsed().as_secs_f64();
    let queries: Vec<Vec<f32>> = (0..200)
        .map(|i| unit(data[(i * 37) % count].iter().map(|x| x + 0.05 * noise.next()).collect()))
        .collect();
    let (mut ann_ms, mut exact_ms, mut found) = (Vec::new(), Vec::new(), 0usize);
    for q in &queries {
        let t = Instant::now();
        let ann = index.walk(q, 10)?;
        ann_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let mut exact: Vec<(usize, f32)> = data
            .iter()
            .enumerate()
            .map(|(i, v)| (i, crate::embed::cosine(q, v)))
            .collect();
        exact.select_nth_unstable_by(9, |a, b| b.1.total_cmp(&a.1));
        exact_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let truth: Vec<i64> = exact[..10].iter().map(|(i, _)| *i as i64).collect();
        found += ann.iter().filter(|(id, _)| truth.contains(id)).count();
    }
    Ok(VectorBench {
        count,
        dimensions,
        add_seconds,
        adds_per_second: count as f64 / add_seconds.max(1e-9),
        search_p50_ms: percentile(&mut ann_ms, 0.5),
        exact_scan_p50_ms: percentile(&mut exact_ms, 0.5),
        recall_at_10: found as f64 / (queries.len() * 10) as f64,
    })
}

/// `ken bench embed`: built-in model throughput on real chunks of ROOT's
/// index, at several token budgets and product precisions measured in the
/// same run.
#[derive(Debug, Serialize)]
pub struct EmbedBench {
    pub chunks: usize,
    pub runs: Vec<EmbedRun>,
    pub query_p50_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct EmbedRun {
    pub budget: usize,
    pub precision: String,
    pub chunks_per_s: f64,
    pub mean_tokens: f64,
    /// The least cosine of a chunk's vector against the first precision's
    /// at the same budget (the reference, f32 by default).
    pub least_cosine_to_first: Option<f64>,
}

pub fn embed(
    root: &std::path::Path,
    index_dir: &std::path::Path,
    chunks: usize,
    budgets: &[usize],
    precisions: &[crate::embed::projection::Precision],
) -> Result<EmbedBench> {
    let searcher = Searcher::open(root, index_dir)?;
    let texts: Vec<String> = searcher
        .store()
        .sampled_chunk_texts(chunks)?
        .into_iter()
        .map(|(context, text, symbol)| crate::embed::text::embedding_text(context.as_deref(), symbol.as_deref(), &text))
        .collect();
    crate::embed::model::fetch(crate::embed::model::chosen()?)?;
    let mut sorted: Vec<&str> = texts.iter().map(String::as_str).collect();
    sorted.sort_by_key(|t| t.len());
    let mut runs = Vec::new();
    let mut query_ms = Vec::new();
    for &budget in budgets {
        let mut first: Option<Vec<Vec<f32>>> = None;
        for &precision in precisions {
            let model = crate::embed::LocalBert::chosen_model(budget)?.with_precision(precision);
            let tokens: usize = model.token_counts(&sorted)?.iter().sum();
            let t = Instant::now();
            let mut vectors = Vec::with_capacity(sorted.len());
            // The batches `ken index` makes.
            for batch in sorted.chunks(crate::embed::Embedder::preferred_batch(&model)) {
                vectors.extend(crate::embed::Embedder::embed(
                    &model,
                    batch,
                    crate::embed::InputKind::Document,
                )?);
            }
            let secs = t.elapsed().as_secs_f64();
            let least_cosine_to_first = first.as_ref().map(|reference| {
                reference
                    .iter()
                    .zip(&vectors)
                    .map(|(a, b)| f64::from(crate::embed::cosine(a, b)))
                    .fold(1.0, f64::min)
            });
            runs.push(EmbedRun {
                budget,
                precision: format!("{precision:?}").to_lowercase(),
                chunks_per_s: texts.len() as f64 / secs.max(1e-9),
                mean_tokens: tokens as f64 / texts.len().max(1) as f64,
                least_cosine_to_first,
            });
            first.get_or_insert(vectors);
            for q in [
                "parse the configuration file",
                "retry a request with exponential backoff",
            ] {
                let t = Instant::now();
                crate::embed::Embedder::embed(&model, &[q], crate::embed::InputKind::Query)?;
                query_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    Ok(EmbedBench {
        chunks: texts.len(),
        runs,
        query_p50_ms: percentile(&mut query_ms, 0.5),
    })
}

/// In-process latency of each search mode on an existing index.
#[derive(Debug, Serialize)]
pub struct QueryBench {
    pub chunks: u64,
    pub vectors: u64,
    pub queries: usize,
    /// (mode and query kind, p50 ms, p95 ms)
    pub modes: Vec<(String, f64, f64)>,
    /// Hybrid searches by phase (`search::SearchPhases`), per kind of query
    /// (words, questions): (kind, [(phase, p50 ms)]).
    pub hybrid_phases: Vec<(String, Vec<(String, f64)>)>,
    /// Embedding the query alone (built-in model), p50 ms.
    pub query_embedding_p50_ms: f64,
    /// The same for the questions, when given.
    pub question_embedding_p50_ms: Option<f64>,
    /// The same through candle's batch pass (the baseline; ken's batch pass
    /// for a model candle lacks), p50 ms.
    pub query_embedding_batch_pass_p50_ms: f64,
}

/// The p50 of each phase of these searches, in ms, named as reported.
pub(crate) fn phase_p50s(searches: &[SearchPhases]) -> Vec<(String, f64)> {
    let phase_p50 = |of: fn(&SearchPhases) -> std::time::Duration| {
        let mut ms: Vec<f64> = searches.iter().map(|p| of(p).as_secs_f64() * 1e3).collect();
        percentile(&mut ms, 0.5)
    };
    vec![
        (
            "lexical side, query embedding beside it".to_string(),
            phase_p50(|p| p.lexical),
        ),
        (
            "inside it, BM25 and exact names".to_string(),
            phase_p50(|p| p.lexical_only),
        ),
        (
            "inside it, reading their rows".to_string(),
            phase_p50(|p| p.lexical_rows),
        ),
        (
            "beside it, the query embedding and its nearest vectors".to_string(),
            phase_p50(|p| p.embedding),
        ),
        ("vector neighbours".to_string(), phase_p50(|p| p.vector)),
        (
            "the second connection's share, beyond the loading".to_string(),
            phase_p50(|p| p.rescore),
        ),
        (
            "loading candidates and their vectors".to_string(),
            phase_p50(|p| p.load),
        ),
        ("fusion, rerank, snippets".to_string(), phase_p50(|p| p.rank)),
    ]
}

/// One query embedding's time per query, ken's pass and the baseline
/// (candle's BertModel, or ken's batch pass for a model candle lacks), in ms.
fn time_query_embedding(searcher: &Searcher, queries: &[String]) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut embed_ms, mut batch_pass_ms) = (Vec::new(), Vec::new());
    // The index's model, whatever KEN_MODEL says.
    let id = searcher
        .store()
        .meta(crate::store::MetaKey::EmbeddingModel)?
        .unwrap_or_default();
    let model = crate::embed::LocalBert::for_id(&id)?;
    // The baseline: candle's BertModel, or ken's batch pass for a model candle lacks (MPNet).
    let with_candle = model.runs_on_candle();
    for query in queries {
        let t = Instant::now();
        crate::embed::Embedder::embed(&model, &[query.as_str()], crate::embed::InputKind::Query)?;
        embed_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        if with_candle {
            model.embed_batch_with_candle(&[query.as_str()])?;
        } else {
            model.embed_batch(&[query.as_str()])?;
        }
        batch_pass_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }

    Ok((embed_ms, batch_pass_ms))
}

/// The questions of `file`: its lines, or the `query` field of each line of a `.jsonl` file.
pub fn read_questions(file: &std::path::Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let jsonl = file.extension().is_some_and(|e| e == "jsonl");
    let questions: Vec<String> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .enumerate()
        .map(|(n, line)| {
            if !jsonl {
                return Ok(line.trim().to_string());
            }
            let value: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{}: line {} is not JSON", file.display(), n + 1))?;
            value["query"]
                .as_str()
                .map(str::to_string)
                .with_context(|| format!("{}: line {} has no \"query\" string", file.display(), n + 1))
        })
        .collect::<Result<_>>()?;
    anyhow::ensure!(!questions.is_empty(), "{} holds no questions", file.display());
    Ok(questions)
}

/// Runs every sampled query, and each of `questions`, `iterations` times in
/// each mode, after one warm-up pass that loads the model and the vector file.
pub fn query(
    root: &std::path::Path,
    index_dir: &std::path::Path,
    iterations: usize,
    questions: &[String],
) -> Result<QueryBench> {
    let searcher = Searcher::open(root, index_dir)?;
    let store = searcher.store();
    let chunks = store.counted_chunks()? as u64;
    // The chunk vectors of the index's model (signature vectors are read per candidate).
    let vectors = match store.meta(crate::store::MetaKey::EmbeddingModel)? {
        Some(model) => store.vector_count(&model)?,
        None => 0,
    };
    let queries = sample_queries(&searcher)?;
    // sample_queries gives identifiers first, then word queries made of them.
    let identifiers = queries.iter().filter(|q| !q.contains(' ')).count();
    let (idents, words) = queries.split_at(identifiers);
    let mut modes = Vec::new();
    // Hybrid searches by phase, per kind of query.
    let mut phases: Vec<(&str, Vec<SearchPhases>)> = Vec::new();
    // The second lexical run ranks with FTS5's own bm25(), the baseline of ken_bm25.
    let runs = [
        ("lexical", SearchMode::Lexical, false),
        ("lexical-fts5-bm25", SearchMode::Lexical, true),
        ("semantic", SearchMode::Semantic, false),
        ("hybrid", SearchMode::Hybrid, false),
    ];
    for (label, mode, stock_bm25) in runs {
        // An index without vectors (`ken index --no-embed`) times the lexical rows only.
        if vectors == 0 && mode != SearchMode::Lexical {
            continue;
        }
        searcher.rank_with_stock_bm25(stock_bm25);
        for (kind, set) in [("identifiers", idents), ("words", words), ("questions", questions)] {
            if set.is_empty() {
                continue;
            }
            let mut ms = Vec::new();
            for (pass, query) in std::iter::once(&set[0]).chain(set).enumerate() {
                let req = SearchRequest {
                    mode,
                    ..SearchRequest::new(query.clone())
                };
                for _ in 0..iterations.max(1) {
                    searcher.forget_query_vectors();
                    let t = Instant::now();
                    searcher.search(&req)?;
                    if pass > 0 {
                        ms.push(t.elapsed().as_secs_f64() * 1e3);
                        if mode == SearchMode::Hybrid && kind != "identifiers" {
                            match phases.iter_mut().find(|(k, _)| *k == kind) {
                                Some((_, of_kind)) => of_kind.push(searcher.last_phases()),
                                None => phases.push((kind, vec![searcher.last_phases()])),
                            }
                        }
                    }
                }
            }
            if let Some(notice) = searcher.notice() {
                anyhow::bail!("{mode:?} search did not run as asked: {notice}");
            }
            modes.push((
                format!("{label} {kind}"),
                percentile(&mut ms, 0.5),
                percentile(&mut ms, 0.95),
            ));
        }
    }
    // The same word queries again, each right after itself: the second
    // search re-uses the remembered query vector (an agent re-filtering).
    let mut repeated = Vec::new();
    for query in words.iter().filter(|_| vectors > 0) {
        let req = SearchRequest::new(query.clone());
        searcher.forget_query_vectors();
        searcher.search(&req)?;
        let t = Instant::now();
        searcher.search(&req)?;
        repeated.push(t.elapsed().as_secs_f64() * 1e3);
    }
    if !repeated.is_empty() {
        modes.push((
            "hybrid words (repeated)".to_string(),
            percentile(&mut repeated, 0.5),
            percentile(&mut repeated, 0.95),
        ));
    }
    let (mut embed_ms, mut batch_pass_ms) = if vectors > 0 {
        time_query_embedding(&searcher, &queries)?
    } else {
        (Vec::new(), Vec::new())
    };
    let mut question_embed_ms = if vectors > 0 && !questions.is_empty() {
        time_query_embedding(&searcher, questions)?.0
    } else {
        Vec::new()
    };
    let hybrid_phases = phases
        .iter()
        .map(|(kind, of_kind)| (kind.to_string(), phase_p50s(of_kind)))
        .collect();
    Ok(QueryBench {
        chunks,
        vectors,
        queries: queries.len() + questions.len(),
        modes,
        hybrid_phases,
        query_embedding_p50_ms: percentile(&mut embed_ms, 0.5),
        question_embedding_p50_ms: (!question_embed_ms.is_empty()).then(|| percentile(&mut question_embed_ms, 0.5)),
        query_embedding_batch_pass_p50_ms: percentile(&mut batch_pass_ms, 0.5),
    })
}
