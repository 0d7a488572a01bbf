//! Fusion: how the lexical side, the vector side and the signature vectors
//! combine into one score per candidate before the rerank ([`Fusion`], its
//! [`Weights`], the candidates' [`Sides`] and their [`SpreadScale`]).

use std::collections::HashMap;

use super::candidates::Candidate;
use super::hit::{Explain, ExplainFactor};
use super::SearchMode;
use crate::config::{FusionKind, Settings};

/// How hybrid search combines the lexical side, the vector side and the
/// signature vectors (`semantic::signature_texts`). Every candidate of either
/// side is scored on all three (a lexical candidate's similarities come from
/// its stored vectors), then:
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// `w_lex * bm25 / max bm25 + w_sem * s + w_sig * g`, where `s` and `g`
    /// are the chunk and signature similarities scaled by mean ± 3σ of the
    /// candidates' (the default: on the public eval it beat RRF clearly on
    /// swe, about matched it on doc and equalled it on ident; see BENCHMARKS.md).
    Convex(Weights),
    /// Reciprocal rank fusion: `w / (k + rank)` summed over the three rankings.
    Rrf { k: f64, weights: Weights },
}

/// The weight of each side of the fusion (lexical, semantic, signature).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    pub lexical: f64,
    pub semantic: f64,
    pub signature: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            lexical: 1.0,
            semantic: 1.0,
            signature: 1.0,
        }
    }
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Convex(Weights::default())
    }
}

impl Fusion {
    /// This fusion with the lexical side weighing `factor` times more.
    fn lexical_times(self, factor: f64) -> Fusion {
        let lean = |w: Weights| Weights {
            lexical: w.lexical * factor,
            ..w
        };
        match self {
            Fusion::Convex(w) => Fusion::Convex(lean(w)),
            Fusion::Rrf { k, weights } => Fusion::Rrf {
                k,
                weights: lean(weights),
            },
        }
    }

    fn weights(&self) -> Weights {
        match *self {
            Fusion::Convex(weights) | Fusion::Rrf { weights, .. } => weights,
        }
    }

    /// This fusion for a search whose vector side took part: the lexical
    /// side weighs `model_weight` times more (the model's lexical weight,
    /// unless `KEN_FUSION_WEIGHTS` sets the weights),
    /// [`UNCARRIED_LEXICAL_WEIGHT`] times more again for a query the
    /// index's adapter passes by, and [`terms_lean`] times more for a query
    /// of many terms that no adapter carries.
    pub(super) fn leaned(self, model_weight: Option<f64>, query: &QueryVectorKind) -> Fusion {
        let mut fusion = self;
        if let Some(weight) = model_weight {
            fusion = fusion.lexical_times(weight);
        }
        match query.adapter {
            AdapterUse::Carried => fusion,
            AdapterUse::PassedBy => fusion
                .lexical_times(UNCARRIED_LEXICAL_WEIGHT)
                .lexical_times(terms_lean(query.terms)),
            AdapterUse::NoAdapter => fusion.lexical_times(terms_lean(query.terms)),
        }
    }

    /// The fusion the settings say: `KEN_FUSION` (`convex` | `rrf`),
    /// `KEN_FUSION_WEIGHTS` (`lexical,semantic[,signature]`, default `1,1,1`)
    /// and `KEN_RRF_K`.
    pub fn of(settings: &Settings) -> Fusion {
        let weights = settings
            .fusion_weights
            .map_or_else(Weights::default, |[lexical, semantic, signature]| Weights {
                lexical,
                semantic,
                signature,
            });
        match settings.fusion {
            FusionKind::Convex => Fusion::Convex(weights),
            FusionKind::Rrf => Fusion::Rrf {
                k: settings.rrf_k,
                weights,
            },
        }
    }
}

/// How much more the lexical side weighs in hybrid fusion for a query the
/// index's adapter leaves as typed ([`super::semantic::QueryVector`]'s
/// `passed_by`). The map carries questions worded like the repository's doc
/// comments, and on those the sides weigh the same; the others meet the bare
/// model, which is weaker than BM25 on them (swe-public: ken lexical file
/// R@5 .721, semantic .621).
/// Measured on the public eval: swe file R@1 .519 → .544, R@5 .758 → .771,
/// chunk H@1 .225 → .250; doc the same but chunk H@1 .417 → .410 and H@5
/// .740 → .737 (BENCHMARKS.md "An identifier in a question, and BM25 for what
/// the adapter passes by", with 1.3, 1.5 and 2).
const UNCARRIED_LEXICAL_WEIGHT: f64 = 1.4;

/// What the index's query adapter did with a query's vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AdapterUse {
    /// The index has no adapter (or the search runs on an engine).
    NoAdapter,
    /// The adapter left the query as typed: not worded like the repository's
    /// doc comments (an issue title, a "why" question, keywords), which the
    /// bare model matches to code less well than BM25 does.
    PassedBy,
    /// The adapter carried the query: worded like a doc comment.
    Carried,
}

/// What the fusion leans by, of one query whose vector side took part.
#[derive(Debug, Clone, Copy)]
pub(super) struct QueryVectorKind {
    pub adapter: AdapterUse,
    /// The query's distinct terms (`QueryTerms::terms`, stopwords out).
    pub terms: usize,
}

/// A query's terms per unit of [`terms_lean`]. BM25 gains evidence with
/// every informative term, while the model's one vector of a long question
/// blurs into its topic: on agent questions (median 13 terms) the vector side
/// put short, documented neighbours of the answer (a type's declaration, a
/// one-line wrapper) above the long function that answers. A query the
/// adapter carries is worded like the doc comments it was fitted on, where
/// the vector side is strong, and is left as it is. Measured on the public
/// eval (BENCHMARKS.md "Long questions lean on BM25"): agent chunk H@1 .317
/// → .367, H@10 .783 → .817; swe file R@1 .519 → .581; doc within two
/// cases of before on every metric. 4 terms per unit gained less (swe .544).
const TERMS_PER_LEAN: f64 = 3.0;
/// The most [`terms_lean`] multiplies the lexical weight by.
const MOST_TERMS_LEAN: f64 = 3.0;

/// How many times more the lexical side weighs for a query of `terms`
/// distinct terms that no adapter carries: 1 up to [`TERMS_PER_LEAN`]
/// terms, then in proportion, at most [`MOST_TERMS_LEAN`] (9 terms).
fn terms_lean(terms: usize) -> f64 {
    (terms as f64 / TERMS_PER_LEAN).clamp(1.0, MOST_TERMS_LEAN)
}

/// The sides of the fusion for one query's candidates: BM25 over the best
/// candidate's, and the chunk and signature similarities, each scaled by the
/// spread of the candidates' (distribution-based score fusion: min-max let
/// the one most or least similar candidate set the scale for all the others).
struct Sides {
    max_bm25: f64,
    chunk: SpreadScale,
    signature: SpreadScale,
}

impl Sides {
    fn of(candidates: &HashMap<i64, Candidate>) -> Sides {
        Sides {
            max_bm25: candidates.values().map(|c| c.bm25).fold(0.0f64, f64::max),
            chunk: SpreadScale::of(candidates, Candidate::ranking_similarity),
            signature: SpreadScale::of(candidates, |c| c.signature_similarity),
        }
    }

    fn lexical(&self, c: &Candidate) -> f64 {
        if self.max_bm25 > 0.0 {
            c.bm25.max(0.0) / self.max_bm25
        } else {
            0.0
        }
    }

    fn semantic(&self, c: &Candidate) -> f64 {
        self.chunk.score(c.ranking_similarity())
    }

    fn signature(&self, c: &Candidate) -> f64 {
        self.signature.score(c.signature_similarity)
    }

    /// `vectors`: whether the search used the vector sides; `weights`, those
    /// of the sides in `fused`, when all three were combined.
    fn explain(
        &self,
        c: &Candidate,
        vectors: bool,
        weights: Option<Weights>,
        fused: f64,
        factors: &[(&str, f64)],
    ) -> Explain {
        Explain {
            bm25: c.bm25,
            lexical: self.lexical(c),
            cosine: c.ranking_similarity().filter(|_| vectors),
            semantic: vectors.then(|| self.semantic(c)),
            signature_cosine: c.signature_similarity.filter(|_| vectors),
            signature: vectors.then(|| self.signature(c)),
            fused,
            weights,
            factors: factors
                .iter()
                .map(|(reason, factor)| ExplainFactor {
                    reason: reason.to_string(),
                    factor: *factor,
                })
                .collect(),
        }
    }
}

/// What `--explain` says of the fusion of one search.
pub(super) struct FusionExplain {
    sides: Sides,
    /// Whether the search used the vector sides.
    vectors: bool,
    /// The weights of the sides in `fused`, when all three were combined.
    weights: Option<Weights>,
}

impl FusionExplain {
    pub(super) fn of(candidates: &HashMap<i64, Candidate>, mode: SearchMode, vectors: bool, fusion: Fusion) -> Self {
        FusionExplain {
            sides: Sides::of(candidates),
            vectors,
            weights: (vectors && mode == SearchMode::Hybrid).then(|| fusion.weights()),
        }
    }

    pub(super) fn explain(&self, c: &Candidate, fused: f64, factors: &[(&str, f64)]) -> Explain {
        self.sides.explain(c, self.vectors, self.weights, fused, factors)
    }
}

/// The pre-rerank score of every candidate. Lexical: BM25. Semantic: cosine
/// similarity. Hybrid: the two combined by `fusion` (exact symbol matches
/// count with the lexical side).
pub(super) fn fuse(
    candidates: &HashMap<i64, Candidate>,
    mode: SearchMode,
    semantic_on: bool,
    fusion: Fusion,
) -> HashMap<i64, f64> {
    match (mode, semantic_on, fusion) {
        (SearchMode::Lexical, _, _) | (SearchMode::Hybrid, false, _) => {
            candidates.iter().map(|(&id, c)| (id, c.bm25)).collect()
        }
        // By meaning alone: the chunk and the signature similarity, each
        // scaled by the candidates' spread.
        (SearchMode::Semantic, _, fusion) => {
            let w = fusion.weights();
            let (semantic, signature) = if w.semantic + w.signature > 0.0 {
                (w.semantic, w.signature)
            } else {
                (1.0, 0.0)
            };
            let sides = Sides::of(candidates);
            candidates
                .iter()
                .map(|(&id, c)| {
                    let score = semantic * sides.semantic(c) + signature * sides.signature(c);
                    (id, score / (semantic + signature))
                })
                .collect()
        }
        (SearchMode::Hybrid, true, Fusion::Convex(w)) => {
            let sides = Sides::of(candidates);
            let total = w.lexical + w.semantic + w.signature;
            candidates
                .iter()
                .map(|(&id, c)| {
                    let score = w.lexical * sides.lexical(c)
                        + w.semantic * sides.semantic(c)
                        + w.signature * sides.signature(c);
                    (id, score / total)
                })
                .collect()
        }
        (SearchMode::Hybrid, true, Fusion::Rrf { k, weights: w }) => {
            let rank_by = |key: &dyn Fn(&Candidate) -> Option<f64>| -> HashMap<i64, usize> {
                let mut scored: Vec<(i64, f64)> = candidates
                    .iter()
                    .filter_map(|(&id, c)| key(c).map(|s| (id, s)))
                    .collect();
                scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                scored
                    .into_iter()
                    .enumerate()
                    .map(|(rank, (id, _))| (id, rank))
                    .collect()
            };
            let lexical_rank = rank_by(&|c| (c.bm25 > 0.0).then_some(c.bm25));
            let semantic_rank = rank_by(&|c| c.ranking_similarity().map(f64::from));
            let signature_rank = rank_by(&|c| c.signature_similarity.map(f64::from));
            let rrf = |weight: f64, rank: Option<&usize>| rank.map_or(0.0, |&r| weight / (k + r as f64 + 1.0));
            candidates
                .keys()
                .map(|id| {
                    (
                        *id,
                        rrf(w.lexical, lexical_rank.get(id))
                            + rrf(w.semantic, semantic_rank.get(id))
                            + rrf(w.signature, signature_rank.get(id)),
                    )
                })
                .collect()
        }
    }
}

/// `mean - 3σ, mean + 3σ` of `scores` (population σ).
fn three_sigma_range(scores: &[f64]) -> (f64, f64) {
    let n = scores.len().max(1) as f64;
    let mean = scores.iter().sum::<f64>() / n;
    let sigma = (scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n).sqrt();
    (mean - 3.0 * sigma, mean + 3.0 * sigma)
}

/// Maps a similarity to 0..1 by mean ± 3σ of the candidates' similarities of
/// one kind. The scale comes from the usual pool: the deeper vector
/// candidates are scored on it, but do not stretch it. A chunk without that
/// vector (not embedded yet, or no signature) scores as an average candidate,
/// so a file just edited is not buried while its vectors are computed.
struct SpreadScale {
    low: f64,
    high: f64,
    average: f64,
}

impl SpreadScale {
    fn of(candidates: &HashMap<i64, Candidate>, similarity: impl Fn(&Candidate) -> Option<f32>) -> SpreadScale {
        let similarities: Vec<f64> = candidates
            .values()
            .filter(|c| !c.deep)
            .filter_map(|c| similarity(c).map(f64::from))
            .collect();
        let (low, high) = three_sigma_range(&similarities);
        let mut scale = SpreadScale {
            low,
            high,
            average: 0.0,
        };
        scale.average =
            similarities.iter().map(|&s| scale.normalise(s)).sum::<f64>() / similarities.len().max(1) as f64;
        scale
    }

    fn normalise(&self, similarity: f64) -> f64 {
        ((similarity - self.low) / (self.high - self.low).max(1e-9)).clamp(0.0, 1.0)
    }

    fn score(&self, similarity: Option<f32>) -> f64 {
        similarity.map_or(self.average, |s| self.normalise(f64::from(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_choose_the_fusion() {
        let of = |pairs: &[(&str, &str)]| {
            let vars = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Fusion::of(&Settings::from_vars(vars).unwrap())
        };
        assert_eq!(of(&[]), Fusion::default());
        assert_eq!(
            of(&[
                ("KEN_FUSION", "rrf"),
                ("KEN_RRF_K", "20"),
                ("KEN_FUSION_WEIGHTS", "2, 1")
            ]),
            Fusion::Rrf {
                k: 20.0,
                weights: Weights {
                    lexical: 2.0,
                    semantic: 1.0,
                    signature: 1.0
                }
            }
        );
        assert_eq!(
            of(&[("KEN_FUSION_WEIGHTS", "1,0.5,0")]),
            Fusion::Convex(Weights {
                lexical: 1.0,
                semantic: 0.5,
                signature: 0.0
            })
        );
    }

    #[test]
    fn deeper_vector_candidates_are_scored_without_moving_the_scale() {
        let candidate = |bm25: f64, similarity: f32, deep: bool| Candidate {
            bm25,
            similarity: Some(similarity),
            deep,
            ..Candidate::default()
        };
        let mut candidates: HashMap<i64, Candidate> = (0..80)
            .map(|i| {
                (
                    i,
                    candidate(1.0 + (i % 7) as f64, 0.30 + 0.005 * (i % 20) as f32, false),
                )
            })
            .collect();
        let before = fuse(&candidates, SearchMode::Hybrid, true, Fusion::default());
        // The vector side's next 80: less similar, some with a little BM25.
        for i in 0..80 {
            candidates.insert(1000 + i, candidate((i % 3) as f64, 0.20 + 0.001 * i as f32, true));
        }
        let after = fuse(&candidates, SearchMode::Hybrid, true, Fusion::default());
        for (id, score) in &before {
            assert!((after[id] - score).abs() < 1e-12, "{id}: {score} -> {}", after[id]);
        }
        // Middling on both sides beats weak on one: BM25 counts for them too.
        assert!(after[&1002] > after[&1000]);
    }

    #[test]
    fn one_far_vector_outlier_does_not_flatten_the_other_similarities() {
        let candidate = |bm25: f64, similarity: f32| Candidate {
            bm25,
            similarity: Some(similarity),
            ..Candidate::default()
        };
        let mut candidates: HashMap<i64, Candidate> = (0..100)
            .map(|i| (100 + i, candidate(1.0, 0.30 + 0.01 * (i % 10) as f32)))
            .collect();
        candidates.insert(1, candidate(10.0, 0.32)); // best lexically, average semantically
        candidates.insert(2, candidate(8.5, 0.40)); // a little less lexically, the most similar of the rest
        candidates.insert(3, candidate(0.0, 0.95)); // the vector side's one far outlier
        let scores = fuse(&candidates, SearchMode::Hybrid, true, Fusion::default());
        // With min-max scaling the outlier would shrink 2's lead in similarity to
        // 0.08 / 0.65 of the scale and 1 would win; within the bulk's spread it counts.
        assert!(scores[&2] > scores[&1], "{} vs {}", scores[&2], scores[&1]);
        assert!(
            scores[&3] <= 0.5 + 1e-9,
            "a vector-only candidate scores at most the semantic half"
        );
        let (low, high) = three_sigma_range(&[1.0, 2.0, 3.0]);
        assert!((low - (2.0 - 3.0 * (2.0f64 / 3.0).sqrt())).abs() < 1e-12 && (high + low - 4.0).abs() < 1e-12);
    }

    #[test]
    fn a_signature_near_the_query_lifts_a_chunk_unless_its_weight_is_zero() {
        // Two chunks equal on both sides; the second's name and signature are
        // nearer the query. Three more give the similarities a spread.
        let candidates: HashMap<i64, Candidate> = [
            (1, 5.0, 0.5, 0.30),
            (2, 5.0, 0.5, 0.70),
            (3, 4.0, 0.4, 0.40),
            (4, 3.0, 0.3, 0.35),
            (5, 2.0, 0.2, 0.45),
        ]
        .into_iter()
        .map(|(id, bm25, similarity, signature)| {
            (
                id,
                Candidate {
                    bm25,
                    similarity: Some(similarity),
                    signature_similarity: Some(signature),
                    ..Candidate::default()
                },
            )
        })
        .collect();
        let scores = fuse(&candidates, SearchMode::Hybrid, true, Fusion::default());
        assert!(scores[&2] > scores[&1], "{scores:?}");
        let without = Fusion::Convex(Weights {
            signature: 0.0,
            ..Weights::default()
        });
        let scores = fuse(&candidates, SearchMode::Hybrid, true, without);
        assert_eq!(scores[&2], scores[&1]);
    }

    /// Candidates by id with their BM25 and chunk similarity.
    fn scored_candidates(rows: &[(i64, f64, Option<f32>)]) -> HashMap<i64, Candidate> {
        rows.iter()
            .map(|&(id, bm25, similarity)| {
                let candidate = Candidate {
                    bm25,
                    similarity,
                    ..Candidate::default()
                };
                (id, candidate)
            })
            .collect()
    }

    #[test]
    fn a_long_question_no_adapter_carries_leans_on_bm25() {
        let candidates = scored_candidates(&[
            (1, 10.0, Some(0.20)), // the best BM25, a long function far from the question's vector
            (2, 8.0, Some(0.80)),  // a short declaration near it
            (3, 2.0, Some(0.10)),
            (4, 1.0, Some(0.20)),
        ]);
        let first = |terms: usize, carried: bool| {
            let adapter = if carried {
                AdapterUse::Carried
            } else {
                AdapterUse::NoAdapter
            };
            let query = QueryVectorKind { adapter, terms };
            let fusion = Fusion::default().leaned(None, &query);
            let scores = fuse(&candidates, SearchMode::Hybrid, true, fusion);
            (
                *scores.iter().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0,
                fusion.weights().lexical,
            )
        };
        // A few terms: the sides weigh the same and the near vector wins.
        assert_eq!(first(2, false), (2, 1.0));
        assert_eq!(first(3, false), (2, 1.0));
        // A question of many terms weighs BM25 in proportion, up to the cap.
        assert_eq!(first(6, false).1, 2.0);
        assert_eq!(first(9, false), (1, MOST_TERMS_LEAN));
        assert_eq!(first(40, false), (1, MOST_TERMS_LEAN));
        // One the adapter carries is worded like the doc comments it was fitted on.
        assert_eq!(first(12, true), (2, 1.0));
        // The lean for a query the adapter passes by comes on top.
        let passed = QueryVectorKind {
            adapter: AdapterUse::PassedBy,
            terms: 12,
        };
        let weight = Fusion::default().leaned(None, &passed).weights().lexical;
        assert!((weight - UNCARRIED_LEXICAL_WEIGHT * 3.0).abs() < 1e-9, "{weight}");
    }

    #[test]
    fn fusion_prefers_candidates_strong_on_both_sides() {
        let candidates = scored_candidates(&[
            (1, 10.0, Some(0.30)), // best lexically, weak semantically
            (2, 8.0, Some(0.80)),  // good on both
            (3, 0.0, Some(0.85)),  // found by vectors only
            (4, 2.0, Some(0.10)),
        ]);
        let best = |fusion| {
            let scores = fuse(&candidates, SearchMode::Hybrid, true, fusion);
            let mut ids: Vec<i64> = scores.keys().copied().collect();
            ids.sort_by(|a, b| scores[b].total_cmp(&scores[a]).then(a.cmp(b)));
            ids
        };
        assert_eq!(best(Fusion::default()), vec![2, 1, 3, 4]);
        // RRF sees ranks only: 1 (ranks 1 and 3) edges out 2 (ranks 2 and 2).
        let rrf = best(Fusion::Rrf {
            k: crate::config::DEFAULT_RRF_K,
            weights: Weights::default(),
        });
        assert_eq!(rrf, vec![1, 2, 4, 3]);
        // All weight on one side is that side's order.
        let lexical_only = Fusion::Convex(Weights {
            lexical: 1.0,
            semantic: 0.0,
            signature: 0.0,
        });
        assert_eq!(best(lexical_only), vec![1, 2, 4, 3]);
        // A query the adapter passes by leans on BM25: the lexical best now
        // edges out the chunk good on both sides, and the rest keeps its order.
        let leaning = Fusion::default().lexical_times(UNCARRIED_LEXICAL_WEIGHT);
        assert_eq!(leaning.weights().lexical, UNCARRIED_LEXICAL_WEIGHT);
        assert_eq!(leaning.weights().semantic, Weights::default().semantic);
        assert_eq!(best(leaning), vec![1, 2, 3, 4]);
        // A chunk without a vector yet counts as average on the vector side:
        // below an equally lexical chunk that is similar, above a dissimilar one.
        let mut partial = candidates;
        partial.insert(
            5,
            Candidate {
                bm25: 8.0,
                similarity: None,
                ..Candidate::default()
            },
        );
        partial.insert(
            6,
            Candidate {
                bm25: 8.0,
                similarity: Some(0.10),
                ..Candidate::default()
            },
        );
        let scores = fuse(&partial, SearchMode::Hybrid, true, Fusion::default());
        assert!(scores[&2] > scores[&5] && scores[&5] > scores[&6], "{scores:?}");
        let candidates = partial;
        // Without vectors hybrid is BM25.
        let scores = fuse(&candidates, SearchMode::Hybrid, false, Fusion::default());
        assert_eq!(scores[&1], 10.0);
    }
}
