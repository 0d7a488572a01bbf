//! `ken bench index` numbers for the code graph: what extraction adds to a
//! cold index, and how long callers, callees and path queries take.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::bench::percentile;
use crate::graph::query::{Direction, Graph};
use crate::store::Store;

#[derive(Debug, Default, Serialize)]
pub struct GraphBench {
    /// The same cold index without graph extraction.
    pub cold_index_without_graph_seconds: f64,
    /// Cold index with the graph over without (1.10: the graph adds 10 %).
    pub cold_index_graph_ratio: f64,
    pub symbols: u64,
    pub refs: u64,
    /// Symbols queried (the most referenced function and method names first).
    pub queried: usize,
    pub callers_p50_ms: f64,
    pub callers_p95_ms: f64,
    pub callees_p50_ms: f64,
    pub callees_p95_ms: f64,
    pub callers_depth3_p50_ms: f64,
    pub path_p50_ms: f64,
    pub path_p95_ms: f64,
}

/// Times graph queries on `samples` symbols of the index at `index_dir`.
pub fn queries(store: &Store, root: &std::path::Path, samples: usize) -> Result<GraphBench> {
    let (symbols, refs) = store.graph_row_counts()?;
    let mut report = GraphBench {
        symbols,
        refs,
        ..GraphBench::default()
    };
    let ids = store.sampled_symbols(samples)?;
    let mut graph = Graph::open(store, root)?;
    let symbols: Vec<_> = ids.iter().filter_map(|&id| graph.symbol(id).ok().flatten()).collect();
    report.queried = symbols.len();
    let (mut callers, mut callees, mut deep, mut paths) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, s) in symbols.iter().enumerate() {
        // A fresh graph per query: no cache carried over from the last one.
        let mut graph = Graph::open(store, root)?;
        let t = Instant::now();
        graph.call_graph(s, Direction::Callers, 1)?;
        callers.push(t.elapsed().as_secs_f64() * 1e3);
        let mut graph = Graph::open(store, root)?;
        let t = Instant::now();
        graph.call_graph(s, Direction::Callees, 1)?;
        callees.push(t.elapsed().as_secs_f64() * 1e3);
        let mut graph = Graph::open(store, root)?;
        let t = Instant::now();
        graph.call_graph(s, Direction::Callers, 3)?;
        deep.push(t.elapsed().as_secs_f64() * 1e3);
        if let Some(to) = symbols.get((i + 1) % symbols.len()) {
            let mut graph = Graph::open(store, root)?;
            let t = Instant::now();
            graph.path(s, to)?;
            paths.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    report.callers_p50_ms = percentile(&mut callers, 0.5);
    report.callers_p95_ms = percentile(&mut callers, 0.95);
    report.callees_p50_ms = percentile(&mut callees, 0.5);
    report.callees_p95_ms = percentile(&mut callees, 0.95);
    report.callers_depth3_p50_ms = percentile(&mut deep, 0.5);
    report.path_p50_ms = percentile(&mut paths, 0.5);
    report.path_p95_ms = percentile(&mut paths, 0.95);
    Ok(report)
}
