//! `ken bench context` and `ken bench impact`: the context tools' latency in
//! process, on the index of the root.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use super::percentile;
use crate::context::impact::{self, Target};
use crate::context::symbol;
use crate::store::Store;

/// `ken bench context` numbers: symbol_context in process on sampled symbols.
#[derive(Debug, Default, Serialize)]
pub struct ContextBench {
    pub queried: usize,
    pub budget: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    pub locations_p50_ms: f64,
    /// Answers over the budget (must be 0).
    pub over_budget: usize,
}

/// Times `symbol_context` (opening the index included, as a tool call does)
/// on `samples` referenced functions and methods of the index.
pub fn symbol_context(root: &Path, index_dir: &Path, samples: usize, budget: usize) -> Result<ContextBench> {
    let store = Store::open_for_read(index_dir)?;
    let ids = store.sampled_symbols(samples)?;
    drop(store);
    let (mut times, mut located) = (Vec::new(), Vec::new());
    let mut over = 0;
    for id in &ids {
        let spec = id.to_string();
        let t = Instant::now();
        let out = symbol::symbol_context(root, index_dir, &spec, Some(budget))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if symbol::tokens_of(&out) > budget {
            over += 1;
        }
        let t = Instant::now();
        symbol::locations(root, index_dir, &spec)?;
        located.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let max_ms = times.iter().cloned().fold(0.0, f64::max);
    Ok(ContextBench {
        queried: ids.len(),
        budget,
        p50_ms: percentile(&mut times, 0.5),
        p95_ms: percentile(&mut times, 0.95),
        max_ms,
        locations_p50_ms: percentile(&mut located, 0.5),
        over_budget: over,
    })
}

/// `ken bench impact`: p50/p95 of the working tree's change impact, in process.
pub fn change_impact(root: &Path, index_dir: &Path, iterations: usize) -> Result<String> {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..iterations.max(1) {
        let started = Instant::now();
        last = Some(impact::change_impact(root, index_dir, &Target::WorkTree, 2)?);
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let impact = last.expect("one run");
    Ok(format!(
        "{} file(s), {} symbol(s), {} caller(s), {} test(s): p50 {:.1} ms, p95 {:.1} ms over {} runs",
        impact.files.len(),
        impact.symbols.len(),
        impact.caller_count,
        impact.tests.len(),
        at(0.5),
        at(0.95),
        times.len()
    ))
}
