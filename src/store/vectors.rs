//! The approximate nearest-neighbour index over chunk embeddings: usearch
//! HNSW (cosine, f32 by default), one file per embedder next to the SQLite
//! index. SQLite holds the vectors (the source of truth); this file is derived
//! from them, updated incrementally (the vectors of deleted rows removed, new
//! rows added), written to a temporary name and renamed into place, and
//! rebuilt from SQLite when it is missing, unreadable, does not match the
//! rows, or has had a quarter of its vectors removed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use super::{MetaKey, Store};

/// Candidates considered when linking a new vector (usearch's default is
/// 128). On 51.8k real chunk vectors the walk finds 94.3% of the true 160
/// nearest at 40, 96.6% at 64, 97.8% at 96, 98.5% at 128; with the dot
/// product metric 10k adds take 0.36, 0.58 and 0.83 s (docs/experiments.md,
/// "Vectors"): 96 keeps adds well under a second.
const EXPANSION_ADD: usize = 96;
/// Candidates a search keeps while walking the graph (at least the number
/// asked for). usearch's default (64, or the number asked for) lost true
/// neighbours in indexes grown by many incremental adds (a checkout moved
/// across 19 commits): semantic swe-public file R@1 .394 at the default,
/// .444 at 400 and at 1000, in the same index; no measurable cost at 123k
/// chunks (docs/experiments.md, "Searching the graph wider").
const EXPANSION_SEARCH: usize = 400;
/// Up to this many vectors a search scans them all instead of walking the
/// graph. The walk misses a few of the true nearest 160 even at width 400
/// (1-4 of 160 on pylint's 6.5k chunk vectors, and once the chunk that
/// ranked first), and at this size the scan costs about 2 ms (docs/experiments.md,
/// "Exact neighbours for small indexes").
const EXACT_SEARCH_MAX: usize = 20_000;

/// How vectors are stored in the HNSW graph. f32 is the default: this build
/// has no SIMD half-float kernels (usearch without numkong, which costs six
/// minutes of build), so f16 adds 4x slower; i8 halves memory again at
/// some recall.
pub use crate::config::Quantization;

/// The usearch scalar kind that stores `quantization`.
fn scalar_kind(quantization: Quantization) -> ScalarKind {
    match quantization {
        Quantization::F32 => ScalarKind::F32,
        Quantization::F16 => ScalarKind::F16,
        Quantization::I8 => ScalarKind::I8,
    }
}

/// The quantization `KEN_VECTOR_QUANTIZATION` chose (f32 when unset).
pub fn configured_quantization() -> Quantization {
    crate::config::settings().vector_quantization
}

pub struct VectorIndex {
    index: Index,
}

/// The file of an embedder's vectors in `index_dir`.
pub fn vectors_path(index_dir: &Path, embedder_id: &str) -> PathBuf {
    let safe: String = embedder_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    index_dir.join(format!("vectors-{safe}.usearch"))
}

fn new_index(dimensions: usize, quantization: Quantization) -> Result<Index> {
    let options = IndexOptions {
        dimensions,
        metric: MetricKind::Cos,
        quantization: scalar_kind(quantization),
        connectivity: 0,
        expansion_add: EXPANSION_ADD,
        expansion_search: EXPANSION_SEARCH,
        multi: false,
    };
    Index::new(&options).map_err(|e| anyhow!("creating the vector index: {e}"))
}

/// Gives an f32 index an AVX2/FMA dot product as its distance, on CPUs that
/// have them. usearch's own cosine is compiled for baseline x86-64 here (no
/// numkong: SSE2, no FMA, and three sums where one does, since every vector
/// is L2-normalised and its cosine is its dot product). At 51k vectors a
/// search's walk took 0.95-1.0 ms with it against 1.5-1.7 ms (docs/experiments.md,
/// "A dot product for the graph"). Call once per `Index`, after any `load`
/// (which restores the file's built-in metric); the file keeps `Cos`.
fn with_fast_metric(mut index: Index) -> Index {
    #[cfg(target_arch = "x86_64")]
    if index.scalar_kind() == ScalarKind::F32 && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        let dimensions = index.dimensions();
        let dot: unsafe fn(*const f32, *const f32, usize) -> f32 = if is_x86_feature_detected!("avx512f") {
            avx512::dot
        } else {
            avx2::dot
        };
        // SAFETY: usearch passes two vectors of the index's `dimensions`
        // f32s; the CPU has AVX2 and FMA (checked above), and AVX-512F for
        // its kernel.
        index.change_metric::<f32>(Box::new(move |a, b| 1.0 - unsafe { dot(a, b, dimensions) }));
    }
    index
}

/// The walk's distance on CPUs with AVX-512: 70% of a walk was the AVX2 dot
/// product, two chains of 24 dependent FMAs for 384 dimensions; this one
/// runs four chains of six.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// `Σ a[i]·b[i]` over `n` f32s.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot(a: *const f32, b: *const f32, n: usize) -> f32 {
        let mut sums = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i + 64 <= n {
            for (lane, sum) in sums.iter_mut().enumerate() {
                let at = i + 16 * lane;
                *sum = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(at)), _mm512_loadu_ps(b.add(at)), *sum);
            }
            i += 64;
        }
        while i + 16 <= n {
            sums[0] = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)), sums[0]);
            i += 16;
        }
        let sum = _mm512_add_ps(_mm512_add_ps(sums[0], sums[1]), _mm512_add_ps(sums[2], sums[3]));
        let mut total = _mm512_reduce_add_ps(sum);
        while i < n {
            total += *a.add(i) * *b.add(i);
            i += 1;
        }
        total
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// `Σ a[i]·b[i]` over `n` f32s.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot(a: *const f32, b: *const f32, n: usize) -> f32 {
        let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= n {
            even = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(b.add(i)), even);
            odd = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i + 8)), _mm256_loadu_ps(b.add(i + 8)), odd);
            i += 16;
        }
        let sum = _mm256_add_ps(even, odd);
        let sum = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
        let sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
        let mut total = _mm_cvtss_f32(_mm_add_ss(sum, _mm_shuffle_ps(sum, sum, 1)));
        while i < n {
            total += *a.add(i) * *b.add(i);
            i += 1;
        }
        total
    }
}

/// Decodes a vector stored as little-endian f32s.
pub fn decode(blob: &[u8]) -> Vec<f32> {
    blob.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

pub fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl VectorIndex {
    /// Brings the file of `embedder_id`'s vectors up to date with SQLite:
    /// removes the vectors SQLite dropped, adds the rows it lacks, or
    /// rebuilds it when it cannot be trusted or holds too many removed ones.
    pub fn sync(store: &Store, embedder_id: &str, dimensions: usize, quantization: Quantization) -> Result<usize> {
        let path = vectors_path(&store.dir, embedder_id);
        let rows = store.vector_count(embedder_id)?;
        let meta_key = MetaKey::VectorsMaxId(embedder_id);
        let removed_key = MetaKey::VectorsRemoved(embedder_id);
        let stored_max: i64 = store.meta_parsed(meta_key)?.unwrap_or(-1);
        let index = new_index(dimensions, quantization)?;
        let loaded =
            path.is_file() && stored_max >= 0 && index.load(path.to_str().context("non-UTF-8 index path")?).is_ok();
        // The removal count is kept from the first build of a build that
        // never reuses ids; a file without it may hold a stale vector under a
        // reused id, so it is rebuilt once.
        let removed_before: Option<usize> = store.meta_parsed(removed_key)?;
        let mut removed = 0usize;
        // With the file usable as it is: the removals since its last build.
        let removed_in_all = if loaded && index.dimensions() == dimensions && removed_before.is_some() {
            // Ids are never reused (`store::embeddings`), so a key whose row
            // is gone is a vector to remove, and every other key still holds
            // its row's vector.
            let mut stmt = store
                .conn
                .prepare("SELECT id FROM embeddings WHERE model = ?1 AND id <= ?2")?;
            let live: HashSet<u64> = stmt
                .query_map(rusqlite::params![embedder_id, stored_max], |r| r.get::<_, i64>(0))?
                .map(|id| id.map(|id| id as u64))
                .collect::<rusqlite::Result<_>>()?;
            // A removal usearch refuses leaves the file untrusted: rebuilt below.
            let removals_done = (0..=stored_max as u64)
                .filter(|key| !live.contains(key) && index.contains(*key))
                .all(|key| {
                    removed += 1;
                    index.remove(key).is_ok()
                });
            let total = removed_before.unwrap_or(0) + removed;
            // Removed nodes stay in the graph as waypoints; past a quarter of
            // the live ones a rebuild makes a smaller, better graph.
            (removals_done && index.size() == live.len() && total * 4 <= live.len().max(1)).then_some(total)
        } else {
            None
        };
        let trusted = removed_in_all.is_some();
        let (index, from_id) = if trusted {
            (index, stored_max)
        } else {
            removed = 0;
            (new_index(dimensions, quantization)?, -1)
        };
        let index = with_fast_metric(index);
        index
            .reserve(rows as usize)
            .map_err(|e| anyhow!("reserving vector index space: {e}"))?;
        let mut stmt = store
            .conn
            .prepare("SELECT id, vector FROM embeddings WHERE model = ?1 AND id > ?2 ORDER BY id")?;
        let mut rows_iter = stmt.query(rusqlite::params![embedder_id, from_id])?;
        let mut max_id = from_id;
        let mut added = 0usize;
        while let Some(row) = rows_iter.next()? {
            let id: i64 = row.get(0)?;
            let blob: Vec<u8> = row.get(1)?;
            let vector = decode(&blob);
            if vector.len() != dimensions {
                continue;
            }
            index
                .add(id as u64, &vector)
                .map_err(|e| anyhow!("adding to the vector index: {e}"))?;
            max_id = id;
            added += 1;
        }
        if added > 0 || removed > 0 || !trusted {
            let tmp = path.with_extension("usearch.tmp");
            index
                .save(tmp.to_str().context("non-UTF-8 index path")?)
                .map_err(|e| anyhow!("saving the vector index: {e}"))?;
            std::fs::rename(&tmp, &path).with_context(|| format!("publishing {}", path.display()))?;
            store.set_meta(meta_key, &max_id.to_string())?;
            store.set_meta(removed_key, &removed_in_all.unwrap_or(0).to_string())?;
        }
        Ok(index.size())
    }

    /// An empty index in memory (for benchmarks).
    pub fn in_memory(dimensions: usize, quantization: Quantization) -> Result<VectorIndex> {
        Ok(VectorIndex {
            index: with_fast_metric(new_index(dimensions, quantization)?),
        })
    }

    pub fn reserve(&self, capacity: usize) -> Result<()> {
        self.index
            .reserve(capacity)
            .map_err(|e| anyhow!("reserving vector index space: {e}"))
    }

    pub fn add(&self, id: i64, vector: &[f32]) -> Result<()> {
        self.index
            .add(id as u64, vector)
            .map_err(|e| anyhow!("adding to the vector index: {e}"))
    }

    /// Opens the vector file of `embedder_id` for searching (memory-mapped).
    pub fn open(store: &Store, embedder_id: &str, dimensions: usize) -> Result<Option<VectorIndex>> {
        let path = vectors_path(&store.dir, embedder_id);
        if !path.is_file() {
            return Ok(None);
        }
        let index = Index::restore_view(path.to_str().context("non-UTF-8 index path")?)
            .map_err(|e| anyhow!("opening {}: {e}", path.display()))?;
        if index.dimensions() != dimensions {
            anyhow::bail!(
                "{} holds {}-d vectors, the model makes {dimensions}-d; run `ken index` to rebuild it",
                path.display(),
                index.dimensions()
            );
        }
        // A file written by an older build keeps the expansion it was saved with.
        index.change_expansion_search(EXPANSION_SEARCH);
        Ok(Some(VectorIndex {
            index: with_fast_metric(index),
        }))
    }

    /// The `k` nearest embedding ids to `query`, with cosine similarity:
    /// exact while the index is small, from the HNSW graph beyond.
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        if self.index.size() <= EXACT_SEARCH_MAX {
            self.scan(query, k)
        } else {
            self.walk(query, k)
        }
    }

    /// The `k` nearest by walking the HNSW graph (approximate).
    pub fn walk(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        let matches = self.index.search(query, k).map_err(|e| anyhow!("vector search: {e}"))?;
        Ok(Self::similarities(matches))
    }

    /// The `k` nearest by comparing the query with every vector (exact).
    pub fn scan(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        let matches = self
            .index
            .exact_search(query, k)
            .map_err(|e| anyhow!("vector scan: {e}"))?;
        Ok(Self::similarities(matches))
    }

    fn similarities(matches: usearch::ffi::Matches) -> Vec<(i64, f32)> {
        matches
            .keys
            .iter()
            .zip(&matches.distances)
            .map(|(&key, &d)| (key as i64, 1.0 - d))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.index.size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_metric_ranks_as_usearchs_cosine() {
        let (count, dimensions) = (500, 37); // not a multiple of the vector width
        let data = crate::bench::clustered_vectors(
            &mut crate::bench::Noise(0x9e37_79b9_7f4a_7c15),
            count,
            dimensions,
            5,
            0.2,
        );
        let builtin = VectorIndex {
            index: new_index(dimensions, Quantization::F32).unwrap(),
        };
        let ours = VectorIndex::in_memory(dimensions, Quantization::F32).unwrap();
        for index in [&builtin, &ours] {
            index.reserve(count).unwrap();
            for (id, v) in data.iter().enumerate() {
                index.add(id as i64, v).unwrap();
            }
        }
        for q in data.iter().step_by(41) {
            let want = builtin.scan(q, 20).unwrap();
            let got = ours.scan(q, 20).unwrap();
            let ids = |found: &[(i64, f32)]| found.iter().map(|(id, _)| *id).collect::<Vec<_>>();
            assert_eq!(ids(&got), ids(&want));
            for ((_, a), (_, b)) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "similarity {a} vs {b}");
            }
            assert!((got[0].1 - 1.0).abs() < 1e-5, "a vector is nearest to itself");
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_dot_products_match_a_plain_sum() {
        let mut noise = crate::bench::Noise(7);
        // Tails on every side of the 16- and 64-float steps.
        for n in [1, 15, 37, 64, 100, 384, 390] {
            let a = crate::bench::clustered_vectors(&mut noise, 1, n, 1, 0.5).remove(0);
            let b = crate::bench::clustered_vectors(&mut noise, 1, n, 1, 0.5).remove(0);
            let plain: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            let mut kernels: Vec<(&str, f32)> = Vec::new();
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                // SAFETY: both vectors hold n floats; the CPU has the features.
                kernels.push(("avx2", unsafe { avx2::dot(a.as_ptr(), b.as_ptr(), n) }));
            }
            if is_x86_feature_detected!("avx512f") {
                // SAFETY: as above.
                kernels.push(("avx512", unsafe { avx512::dot(a.as_ptr(), b.as_ptr(), n) }));
            }
            for (kernel, dot) in kernels {
                assert!(
                    (f64::from(dot) - plain).abs() < 1e-5,
                    "{kernel} at {n}: {dot} against {plain}"
                );
            }
        }
    }

    #[test]
    fn a_small_index_returns_exactly_the_nearest_vectors() {
        let (count, dimensions, k) = (3000, 64, 400);
        // Tight clusters: the shape that makes a graph walk miss neighbours.
        let data = crate::bench::clustered_vectors(
            &mut crate::bench::Noise(0x2545_f491_4f6c_dd1d),
            count,
            dimensions,
            20,
            0.05,
        );
        let index = VectorIndex::in_memory(dimensions, Quantization::F32).unwrap();
        index.reserve(count).unwrap();
        for (id, v) in data.iter().enumerate() {
            index.add(id as i64, v).unwrap();
        }
        let mut walk_missed = 0;
        for q in data.iter().step_by(97) {
            let mut truth: Vec<(i64, f32)> = data
                .iter()
                .enumerate()
                .map(|(id, v)| (id as i64, crate::embed::cosine(q, v)))
                .collect();
            truth.sort_by(|a, b| b.1.total_cmp(&a.1));
            let want: std::collections::HashSet<i64> = truth[..k].iter().map(|(id, _)| *id).collect();
            let got = index.search(q, k).unwrap();
            assert_eq!(got.len(), k);
            assert!(
                got.iter().all(|(id, _)| want.contains(id)),
                "search missed a true neighbour"
            );
            walk_missed += index
                .walk(q, k)
                .unwrap()
                .iter()
                .filter(|(id, _)| !want.contains(id))
                .count();
        }
        // The graph walk alone is approximate on this data: what the scan is for.
        assert!(
            walk_missed > 0,
            "the walk found every neighbour; the test data is too easy"
        );
    }
}
