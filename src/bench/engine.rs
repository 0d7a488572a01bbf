//! `ken engine bench`: the shared engine's search latency, and its HNSW
//! index's recall against an exact scan of the same vectors.

use std::collections::HashSet;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use super::percentile;
use crate::search::engine::EngineSearcher;
use crate::search::SearchRequest;
use crate::store::engine::QueryEmbedding;

/// The depth the search's vector side asks the HNSW index for (10 results).
const SEARCH_VECTOR_DEPTH: usize = 160;

#[derive(Debug, Serialize)]
pub struct EngineBench {
    pub queries: usize,
    pub k: usize,
    pub search_p50_ms: f64,
    pub search_p95_ms: f64,
    pub hnsw_p50_ms: f64,
    pub exact_p50_ms: f64,
    /// Share of the exact top k the HNSW index returns, at k and at the search's depth.
    pub hnsw_recall_at_k: f64,
    pub hnsw_recall_at_search_depth: f64,
}

pub fn engine_bench(searcher: &mut EngineSearcher, queries: &[String], k: usize) -> Result<EngineBench> {
    let (mut search_ms, mut hnsw_ms, mut exact_ms) = (Vec::new(), Vec::new(), Vec::new());
    let (mut found_k, mut total_k, mut found_deep, mut total_deep) = (0usize, 0usize, 0usize, 0usize);
    for query in queries {
        let started = Instant::now();
        searcher.search(&SearchRequest {
            limit: k,
            ..SearchRequest::new(query.as_str())
        })?;
        search_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let Some((embedder, vector)) = searcher.query_vector(query)? else {
            continue;
        };
        let q = QueryEmbedding {
            embedder: &embedder,
            vector: &vector,
        };
        for (depth, found, total) in [
            (k, &mut found_k, &mut total_k),
            (SEARCH_VECTOR_DEPTH, &mut found_deep, &mut total_deep),
        ] {
            let started = Instant::now();
            let approximate: HashSet<i64> = searcher
                .engine()
                .nearest(&q, depth)?
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            let hnsw = started.elapsed().as_secs_f64() * 1e3;
            let started = Instant::now();
            let exact = searcher.engine().nearest_exact(&q, depth)?;
            let scan = started.elapsed().as_secs_f64() * 1e3;
            if depth == k {
                hnsw_ms.push(hnsw);
                exact_ms.push(scan);
            }
            *found += exact.iter().filter(|(id, _)| approximate.contains(id)).count();
            *total += exact.len();
        }
    }
    let share = |found: usize, total: usize| found as f64 / total.max(1) as f64;
    Ok(EngineBench {
        queries: queries.len(),
        k,
        search_p50_ms: percentile(&mut search_ms, 0.50),
        search_p95_ms: percentile(&mut search_ms, 0.95),
        hnsw_p50_ms: percentile(&mut hnsw_ms, 0.50),
        exact_p50_ms: percentile(&mut exact_ms, 0.50),
        hnsw_recall_at_k: share(found_k, total_k),
        hnsw_recall_at_search_depth: share(found_deep, total_deep),
    })
}
