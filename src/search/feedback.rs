//! Pseudo-relevance feedback on the vector side (Rocchio): the query's
//! vector moved a little toward the mean of the first results' vectors,
//! and every candidate's similarity taken again against it. A long question
//! embedded alone blurs into its topic; the first results, found by both
//! sides, say which code it is about, so its neighbours in meaning (the
//! function that answers, beside the declaration that shares its words)
//! rise. Measured on the public eval (BENCHMARKS.md "Feedback on the
//! vector side"): hybrid chunk H@5 agent .650 → .683, doc .733 → .750;
//! swe and ident unchanged. The confidence keeps the query's own similarities.

use std::collections::HashMap;

use anyhow::Result;

use super::candidates::Candidate;
use super::fusion::{self, Fusion};
use super::hit::SearchHit;
use super::{rerank, SearchMode};

/// How many of the first results the query moves toward: two lost agent
/// file R@1 and chunk H@1 (.633 → .617, .383 → .367).
const FEEDBACK_RESULTS: usize = 3;
/// How far down the first ranking a result's vector is looked for, when
/// some of the first have none yet (an index still being embedded).
const FEEDBACK_DEPTH: usize = 10;
/// How far it moves: the results' mean counts this much beside the query,
/// which weighs 1. 0.3 lost an agent chunk hit at 10 and two doc ones at 1
/// more; 0.5 and more drifted from the question (swe file R@10 .840 → .815
/// at 0.5, .802 at 1.0).
const FEEDBACK_WEIGHT: f32 = 0.2;

/// Where the feedback reads the candidates' chunk vectors: the vectors a
/// local search read with its candidates' rows, or the shared engine, which
/// sends the few vectors asked for and computes the similarities itself.
pub(super) trait ChunkVectorSource {
    /// The vectors of those of `ids` that have one.
    fn vectors_of(&mut self, ids: &[i64]) -> Result<HashMap<i64, Vec<f32>>>;
    /// The cosine similarity of each of `ids` that has a vector to `target`.
    fn similarities_to(&mut self, target: &[f32], ids: &[i64]) -> Result<Vec<(i64, f32)>>;
}

impl ChunkVectorSource for HashMap<i64, Vec<f32>> {
    fn vectors_of(&mut self, ids: &[i64]) -> Result<HashMap<i64, Vec<f32>>> {
        Ok(ids.iter().filter_map(|id| Some((*id, self.get(id)?.clone()))).collect())
    }

    fn similarities_to(&mut self, target: &[f32], ids: &[i64]) -> Result<Vec<(i64, f32)>> {
        Ok(ids
            .iter()
            .filter_map(|id| self.get(id).filter(|v| v.len() == target.len()).map(|v| (*id, v)))
            .map(|(id, v)| (id, crate::embed::cosine(target, v)))
            .collect())
    }
}

/// The fusion of a hybrid search taken again after the feedback: `hits`
/// ranked by the first fusion `fused`, the query's vector moved toward the
/// first results ([`move_query`]), every candidate fused again.
pub(super) fn fuse_again(
    hits: &mut [SearchHit],
    candidates: &mut HashMap<i64, Candidate>,
    fused: HashMap<i64, f64>,
    factors: &rerank::RerankFactors,
    fusion: Fusion,
    query_vector: &[f32],
    source: &mut impl ChunkVectorSource,
) -> Result<HashMap<i64, f64>> {
    rerank::rerank(hits, factors, &fused, None);
    if !move_query(query_vector, hits, source, candidates)? {
        return Ok(fused);
    }
    Ok(fusion::fuse(candidates, SearchMode::Hybrid, true, fusion))
}

/// Sets each candidate's feedback similarity: to the query's vector moved
/// toward the vectors of the first [`FEEDBACK_RESULTS`] of `ranked` that
/// have one (best first by score, then by chunk id). `false`, and nothing
/// set, when none of them has a vector.
pub(super) fn move_query(
    query: &[f32],
    ranked: &[SearchHit],
    source: &mut impl ChunkVectorSource,
    candidates: &mut HashMap<i64, Candidate>,
) -> Result<bool> {
    let mut order: Vec<&SearchHit> = ranked.iter().collect();
    order.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.chunk_id.cmp(&b.chunk_id)));
    let first_ids: Vec<i64> = order.iter().take(FEEDBACK_DEPTH).map(|h| h.chunk_id).collect();
    let found = source.vectors_of(&first_ids)?;
    let first: Vec<&[f32]> = first_ids
        .iter()
        .filter_map(|id| found.get(id))
        .filter(|v| v.len() == query.len())
        .take(FEEDBACK_RESULTS)
        .map(Vec::as_slice)
        .collect();
    let Some(moved) = moved_toward(query, &first) else {
        return Ok(false);
    };
    let ids: Vec<i64> = candidates.keys().copied().collect();
    for (id, similarity) in source.similarities_to(&moved, &ids)? {
        if let Some(candidate) = candidates.get_mut(&id) {
            candidate.feedback_similarity = Some(similarity);
        }
    }
    Ok(true)
}

/// `query` + [`FEEDBACK_WEIGHT`] × the mean of `first`, of unit length;
/// `None` without any vector to move toward.
fn moved_toward(query: &[f32], first: &[&[f32]]) -> Option<Vec<f32>> {
    if first.is_empty() {
        return None;
    }
    let share = FEEDBACK_WEIGHT / first.len() as f32;
    let mut moved = query.to_vec();
    for vector in first {
        for (m, v) in moved.iter_mut().zip(vector.iter()) {
            *m += share * v;
        }
    }
    let norm = moved.iter().map(|x| x * x).sum::<f32>().sqrt();
    (norm > 0.0).then(|| moved.iter().map(|x| x / norm).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn hit(chunk_id: i64, score: f64) -> SearchHit {
        SearchHit {
            chunk_id,
            score,
            ..SearchHit::default()
        }
    }

    #[test]
    fn the_query_moves_toward_the_first_results_and_rescores_every_candidate() {
        let query = unit(&[1.0, 0.0, 0.0]);
        // Chunks 1-3 rank first and lie toward the second axis; chunk 4
        // (ranked last) lies there too, chunk 5 toward the third axis.
        let vectors: HashMap<i64, Vec<f32>> = [
            (1, unit(&[0.8, 0.6, 0.0])),
            (2, unit(&[0.7, 0.7, 0.0])),
            (3, unit(&[0.9, 0.4, 0.1])),
            (4, unit(&[0.5, 0.85, 0.0])),
            (5, unit(&[0.5, 0.0, 0.85])),
        ]
        .into();
        let ranked = vec![hit(4, 0.1), hit(1, 0.9), hit(5, 0.05), hit(2, 0.8), hit(3, 0.7)];
        let mut candidates: HashMap<i64, Candidate> = (1..=6).map(|id| (id, Candidate::default())).collect();
        for (id, c) in candidates.iter_mut() {
            c.similarity = vectors.get(id).map(|v| crate::embed::cosine(&query, v));
        }
        let mut vectors = vectors;
        assert!(move_query(&query, &ranked, &mut vectors, &mut candidates).unwrap());

        let (before4, after4) = (
            candidates[&4].similarity.unwrap(),
            candidates[&4].feedback_similarity.unwrap(),
        );
        let (before5, after5) = (
            candidates[&5].similarity.unwrap(),
            candidates[&5].feedback_similarity.unwrap(),
        );
        assert!((before4 - before5).abs() < 1e-6, "equal to the query alone");
        assert!(
            after4 > after5 + 0.05,
            "the one near the first results rises: {after4} vs {after5}"
        );
        assert!(after4 > before4);
        assert!(candidates[&6].feedback_similarity.is_none(), "no vector, no feedback");
        assert_eq!(candidates[&4].ranking_similarity(), Some(after4));
        assert_eq!(candidates[&6].ranking_similarity(), None);
        // The query's own similarity is kept (the confidence reads it).
        assert!((candidates[&1].similarity.unwrap() - 0.8).abs() < 1e-6);
    }

    #[test]
    fn the_move_is_the_weighted_mean_of_the_first_three_only() {
        let query = [1.0f32, 0.0, 0.0];
        let a = [0.0f32, 1.0, 0.0];
        let b = [0.0f32, 0.0, 1.0];
        let moved = moved_toward(&query, &[&a, &b]).unwrap();
        let expected = unit(&[1.0, FEEDBACK_WEIGHT / 2.0, FEEDBACK_WEIGHT / 2.0]);
        for (m, e) in moved.iter().zip(&expected) {
            assert!((m - e).abs() < 1e-6);
        }
        assert!(moved_toward(&query, &[]).is_none());

        // A fourth result does not count.
        let mut vectors: HashMap<i64, Vec<f32>> =
            [(1, a.to_vec()), (2, a.to_vec()), (3, a.to_vec()), (4, b.to_vec())].into();
        let ranked = vec![hit(1, 4.0), hit(2, 3.0), hit(3, 2.0), hit(4, 1.0)];
        let mut candidates: HashMap<i64, Candidate> = [(4, Candidate::default())].into();
        assert!(move_query(&query, &ranked, &mut vectors, &mut candidates).unwrap());
        let toward_a = unit(&[1.0, FEEDBACK_WEIGHT, 0.0]);
        let got = candidates[&4].feedback_similarity.unwrap();
        assert!((got - crate::embed::cosine(&toward_a, &b)).abs() < 1e-6, "{got}");
    }
}
