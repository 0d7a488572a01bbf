//! Counters and latency histograms of a running server (`index_metrics`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Upper bounds (ms) of the latency histogram's buckets; the last is open.
const BUCKETS_MS: [f64; 14] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 30000.0,
];
/// Latest samples kept for exact percentiles.
const SAMPLES: usize = 1000;
/// Latest index runs listed.
const RECENT_RUNS: usize = 10;

#[derive(Default)]
struct Latencies {
    count: u64,
    buckets: [u64; BUCKETS_MS.len() + 1],
    recent: VecDeque<f64>,
    max_ms: f64,
}

impl Latencies {
    fn record(&mut self, ms: f64) {
        self.count += 1;
        let bucket = BUCKETS_MS.iter().position(|&b| ms <= b).unwrap_or(BUCKETS_MS.len());
        self.buckets[bucket] += 1;
        if self.recent.len() == SAMPLES {
            self.recent.pop_front();
        }
        self.recent.push_back(ms);
        self.max_ms = self.max_ms.max(ms);
    }

    fn summary(&self) -> LatencySummary {
        let mut recent: Vec<f64> = self.recent.iter().copied().collect();
        LatencySummary {
            count: self.count,
            p50_ms: crate::bench::percentile(&mut recent, 0.50),
            p95_ms: crate::bench::percentile(&mut recent, 0.95),
            max_ms: self.max_ms,
            histogram: BUCKETS_MS
                .iter()
                .map(|&b| Some(b))
                .chain([None])
                .zip(self.buckets)
                .filter(|(_, n)| *n > 0)
                .map(|(le_ms, count)| Bucket { le_ms, count })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct LatencySummary {
    pub count: u64,
    /// Percentiles over the latest 1000 samples.
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    /// Non-empty buckets: samples at most `le_ms` (and above the previous bound); no bound = slower.
    pub histogram: Vec<Bucket>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Bucket {
    pub le_ms: Option<f64>,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct IndexRun {
    pub finished_at: String,
    pub seconds: f64,
    pub ok: bool,
    /// Files parsed, or the error.
    pub summary: String,
}

#[derive(Default)]
struct Counters {
    tools: BTreeMap<String, (Latencies, u64)>,
    queries: Latencies,
    lexical_fallbacks: u64,
    embeddings_computed: u64,
    embeddings_reused: u64,
    embeddings_from_shared_cache: u64,
    index_runs: Latencies,
    index_failures: u64,
    recent_runs: VecDeque<IndexRun>,
}

pub struct Metrics {
    started: Instant,
    counters: Mutex<Counters>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            counters: Mutex::default(),
        }
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct MetricsReport {
    pub uptime_seconds: f64,
    /// Searches (codebase_search, codebase_peek, find_similar): latency of the whole call.
    pub queries: LatencySummary,
    /// Searches answered by BM25 alone because no vectors could be used.
    pub lexical_fallbacks: u64,
    pub embeddings: EmbeddingCounts,
    /// Index runs started by this server (index_codebase, add_knowledge_base).
    pub index_runs: IndexRuns,
    /// Per tool: calls, errors and latency.
    pub tools: BTreeMap<String, ToolMetrics>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct EmbeddingCounts {
    /// Chunk contents embedded by this server's index runs.
    pub computed: u64,
    /// Contents that already had a vector (same code elsewhere, another branch, an earlier run).
    pub reused: u64,
    /// Of the computed ones, vectors found in the per-user cache instead of the model.
    pub from_shared_cache: u64,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct IndexRuns {
    pub count: u64,
    pub failed: u64,
    /// Durations in milliseconds.
    pub duration: LatencySummary,
    pub recent: Vec<IndexRun>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ToolMetrics {
    pub errors: u64,
    pub latency: LatencySummary,
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Counters) -> T) -> T {
        f(&mut self.counters.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn tool_call(&self, tool: &str, elapsed: Duration, ok: bool) {
        self.with(|c| {
            let (latency, errors) = c.tools.entry(tool.to_string()).or_default();
            latency.record(elapsed.as_secs_f64() * 1000.0);
            *errors += u64::from(!ok);
        });
    }

    pub fn query(&self, elapsed: Duration, lexical_fallback: bool) {
        self.with(|c| {
            c.queries.record(elapsed.as_secs_f64() * 1000.0);
            c.lexical_fallbacks += u64::from(lexical_fallback);
        });
    }

    pub fn embedded(&self, computed: u64, reused: u64, from_shared_cache: u64) {
        self.with(|c| {
            c.embeddings_computed += computed;
            c.embeddings_reused += reused;
            c.embeddings_from_shared_cache += from_shared_cache;
        });
    }

    pub fn index_run(&self, elapsed: Duration, outcome: Result<String, String>) {
        self.with(|c| {
            c.index_runs.record(elapsed.as_secs_f64() * 1000.0);
            c.index_failures += u64::from(outcome.is_err());
            if c.recent_runs.len() == RECENT_RUNS {
                c.recent_runs.pop_front();
            }
            let ok = outcome.is_ok();
            c.recent_runs.push_back(IndexRun {
                finished_at: crate::store::now_rfc3339(),
                seconds: elapsed.as_secs_f64(),
                ok,
                summary: outcome.unwrap_or_else(|e| e),
            });
        });
    }

    pub fn report(&self) -> MetricsReport {
        self.with(|c| MetricsReport {
            uptime_seconds: self.started.elapsed().as_secs_f64(),
            queries: c.queries.summary(),
            lexical_fallbacks: c.lexical_fallbacks,
            embeddings: EmbeddingCounts {
                computed: c.embeddings_computed,
                reused: c.embeddings_reused,
                from_shared_cache: c.embeddings_from_shared_cache,
            },
            index_runs: IndexRuns {
                count: c.index_runs.count,
                failed: c.index_failures,
                duration: c.index_runs.summary(),
                recent: c.recent_runs.iter().cloned().collect(),
            },
            tools: c
                .tools
                .iter()
                .map(|(name, (latency, errors))| {
                    (
                        name.clone(),
                        ToolMetrics {
                            errors: *errors,
                            latency: latency.summary(),
                        },
                    )
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_buckets_follow_the_samples() {
        let m = Metrics::default();
        for ms in 1..=100 {
            m.query(Duration::from_millis(ms), ms % 10 == 0);
        }
        let r = m.report();
        assert_eq!(r.queries.count, 100);
        assert_eq!(r.lexical_fallbacks, 10);
        assert!((49.0..=52.0).contains(&r.queries.p50_ms), "{}", r.queries.p50_ms);
        assert!((94.0..=96.0).contains(&r.queries.p95_ms), "{}", r.queries.p95_ms);
        assert_eq!(r.queries.histogram.iter().map(|b| b.count).sum::<u64>(), 100);
        assert_eq!(r.queries.histogram.last().unwrap().le_ms, Some(100.0));
    }

    #[test]
    fn tool_errors_and_index_runs_are_counted() {
        let m = Metrics::default();
        m.tool_call("codebase_search", Duration::from_millis(3), true);
        m.tool_call("codebase_search", Duration::from_millis(4), false);
        m.index_run(Duration::from_secs(2), Ok("3 files parsed".into()));
        m.index_run(Duration::from_secs(1), Err("locked".into()));
        m.embedded(5, 7, 2);
        let r = m.report();
        assert_eq!(r.tools["codebase_search"].latency.count, 2);
        assert_eq!(r.tools["codebase_search"].errors, 1);
        assert_eq!((r.index_runs.count, r.index_runs.failed), (2, 1));
        assert_eq!(r.index_runs.recent[1].summary, "locked");
        assert_eq!(r.embeddings.computed, 5);
    }
}
