//! How likely a result list is to hold what the query asks for, so that an
//! agent can stop searching instead of reading the closest noise.
//!
//! The evidence is lexical and comes from the index's own statistics, so it
//! holds in any repository without fitted thresholds: the query's words are
//! weighted by IDF (a word in few chunks says more about what is asked), and
//! the confidence is the largest share of that weight one result holds (the
//! first results together for a long question, whose scenario spreads its
//! words over the answer and the code around it). A question the
//! repository can answer has its rarer words together in the answer; one it
//! cannot answer has them nowhere (`kubernetes`, `oauth2` in a terminal
//! multiplexer) or scattered over unrelated chunks. A word no chunk has but
//! that is only how the question is put (one of the 2,000 most frequent
//! English words: `turned`, `several`, `picked`) is left out of the rating:
//! an agent's paraphrase is not a topic the repository lacks.
//!
//! When the vectors took part, they are the second witness: a list whose
//! words only partly match ([`Level::Medium`]) is low when nothing is close
//! in meaning either, neither near in cosine nor standing out from the
//! other candidates. Off-topic questions often share their everyday words
//! ("update", "release", "github") with some changelog; their meaning is
//! close to nothing. Without that witness (lexical mode, an index not yet
//! embedded), a partial match must hold more of the query's weight.

use std::collections::HashSet;

use serde::Serialize;

use crate::source::lexical;

/// A score at or above this is a match: most of the query's weight is in
/// one of the first results.
pub const HIGH_SCORE: f64 = 0.6;
/// Below this no result is close: the list is flagged. Measured on the
/// public eval and hand-written off-topic questions (BENCHMARKS.md "Saying
/// when nothing matches"); a round value, not fitted to the last digit.
pub const LOW_SCORE: f64 = 0.3;
/// The same when the vectors took no part (lexical mode, an index not yet
/// embedded, a server's first answers while the model loads): with no
/// second witness for a partial word match, it must hold more of the
/// query's weight. Every set, lexical: off-topic flagged 82.1% → 90.7%,
/// correct top results flagged 0.3% → 2.9% (BENCHMARKS.md).
pub const LOW_SCORE_WORDS_ALONE: f64 = 0.4;
/// With vectors, a partial word match is low when the nearest result's
/// cosine is below this and it stands fewer than [`WEAK_COSINE_Z`] standard
/// deviations above the candidates' mean. Round values, measured on the
/// public eval and hand-written off-topic questions (BENCHMARKS.md "Saying
/// when nothing matches"); where a model's cosines run low the z-score alone
/// decides.
pub const WEAK_COSINE: f64 = 0.5;
pub const WEAK_COSINE_Z: f64 = 1.5;
/// The first results are the ones an agent reads; a strong match further
/// down is more likely a long chunk that holds many words by chance.
pub const RESULTS_WEIGHED: usize = 3;
/// A query of at least this many distinct terms is a scenario and its
/// question ("when a pane gets narrower, where are wrapped lines split?"):
/// its words are spread over the answer and the code around it, so the
/// first results' words count together. Shorter questions name one thing,
/// which one result should hold. Measured on every public set and the
/// off-topic questions (BENCHMARKS.md "Saying when nothing matches"):
/// correct agent answers flagged 5 → 2 of 22, off-topic flagged the same.
pub const LONG_QUESTION_TERMS: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    High,
    Medium,
    Low,
}

/// How sure ken is that the results answer the query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Confidence {
    pub level: Level,
    /// 0..1: the largest IDF-weighted share of the query's terms one of the
    /// first results holds (for a long question, the first results
    /// together), times the share the index has at all (1 for a name
    /// defined in the index).
    pub score: f64,
    /// For a low confidence, the line to read first: no strong match, why
    /// (e.g. the query's words that occur nowhere in the index), and that
    /// the results are only the closest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The evidence (only when explain is asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signals: Option<Signals>,
}

/// What the confidence is made of.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Signals {
    /// The largest IDF-weighted share of the query's terms one of the first
    /// results holds (for a long question, the first results together).
    pub coverage: f64,
    /// The IDF share of the query's terms that no chunk of the index has.
    pub absent: f64,
    /// A result defines the name the query is.
    pub defines_name: bool,
    /// Cosine similarity of the nearest result to the query (vector modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f64>,
    /// How far that similarity stands above the candidates' mean, in
    /// standard deviations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cosine_z: Option<f64>,
    /// The query's terms with their document frequencies.
    pub terms: Vec<(String, f64)>,
    /// For each of the first results, the indexes in `terms` of the terms it holds.
    pub held: Vec<Vec<usize>>,
    /// Chunks in the index.
    pub total: f64,
}

/// One query term with its document frequency in the index.
pub struct TermStat {
    pub term: String,
    pub df: f64,
}

/// What a search knows when it rates its results.
pub struct Evidence<'a> {
    pub terms: &'a [TermStat],
    /// Chunks in the index.
    pub total: f64,
    /// The index terms (symbol, path and body) of the first
    /// [`RESULTS_WEIGHED`] results: the others are not read.
    pub hit_terms: &'a [HashSet<String>],
    /// A result defines the identifier a name-like query is.
    pub defines_name: bool,
    /// The query's words that occur nowhere in the index, as typed.
    pub absent_words: &'a [String],
    pub cosine: Option<f64>,
    pub cosine_z: Option<f64>,
}

/// BM25's IDF; a term no chunk has weighs the most.
fn idf(df: f64, total: f64) -> f64 {
    (1.0 + (total - df + 0.5) / (df + 0.5)).ln()
}

impl Confidence {
    pub fn rate(e: &Evidence, explain: bool) -> Confidence {
        let weights: Vec<f64> = e.terms.iter().map(|t| idf(t.df, e.total)).collect();
        let all: f64 = weights.iter().sum();
        let share = |held: &dyn Fn(&TermStat) -> bool| -> f64 {
            if all <= 0.0 {
                return 0.0;
            }
            e.terms
                .iter()
                .zip(&weights)
                .filter(|(t, _)| held(t))
                .map(|(_, w)| w)
                .sum::<f64>()
                / all
        };
        let first = &e.hit_terms[..e.hit_terms.len().min(RESULTS_WEIGHED)];
        let mut coverage = first
            .iter()
            .map(|terms| share(&|t| terms.contains(&t.term)))
            .fold(0.0, f64::max);
        if e.terms.len() >= LONG_QUESTION_TERMS {
            coverage = coverage.max(share(&|t| first.iter().any(|terms| terms.contains(&t.term))));
        }
        // Words the index lacks altogether weigh twice: the result misses
        // them, and no other chunk could hold them.
        let absent = share(&|t| t.df == 0.0);
        let score = if e.defines_name { 1.0 } else { coverage * (1.0 - absent) };
        let vectors_find_nothing_close = match (e.cosine, e.cosine_z) {
            (Some(cosine), Some(z)) => cosine < WEAK_COSINE && z < WEAK_COSINE_Z,
            _ => false,
        };
        let low_score = if e.cosine.is_some() {
            LOW_SCORE
        } else {
            LOW_SCORE_WORDS_ALONE
        };
        let level = if e.hit_terms.is_empty() {
            Level::Low
        } else if score >= HIGH_SCORE {
            Level::High
        } else if score >= low_score && !vectors_find_nothing_close {
            Level::Medium
        } else {
            Level::Low
        };
        let note = (level == Level::Low).then(|| no_match_line(&why_low(e, score >= low_score)));
        Confidence {
            level,
            score: (score * 1000.0).round() / 1000.0,
            note,
            signals: explain.then(|| Signals {
                coverage: (coverage * 1000.0).round() / 1000.0,
                absent: (absent * 1000.0).round() / 1000.0 + 0.0,
                defines_name: e.defines_name,
                cosine: e.cosine,
                cosine_z: e.cosine_z,
                terms: e.terms.iter().map(|t| (t.term.clone(), t.df)).collect(),
                held: e
                    .hit_terms
                    .iter()
                    .map(|h| (0..e.terms.len()).filter(|&i| h.contains(&e.terms[i].term)).collect())
                    .collect(),
                total: e.total,
            }),
        }
    }

    /// Nothing to rate (an empty query).
    pub fn none() -> Confidence {
        Confidence {
            level: Level::Low,
            score: 0.0,
            note: Some(no_match_line("nothing matches")),
            signals: None,
        }
    }
}

fn no_match_line(why: &str) -> String {
    format!("no strong match ({why}); the results are only the closest")
}

/// Why a list is low; `words_partly_match`: it is low for its vectors.
fn why_low(e: &Evidence, words_partly_match: bool) -> String {
    match e.absent_words {
        [] if e.hit_terms.is_empty() => "nothing matches".to_string(),
        [] if words_partly_match => "some of its words match, but nothing is close in meaning".to_string(),
        [] => "no result holds most of the query's rarer words".to_string(),
        words => {
            let quoted: Vec<String> = words.iter().take(4).map(|w| format!("`{w}`")).collect();
            let verb = if quoted.len() == 1 { "occurs" } else { "occur" };
            format!("{} {verb} nowhere in the index", quoted.join(", "))
        }
    }
}

/// The index terms of one result: its symbol, path and body, as the lexical
/// index has them.
pub fn hit_terms(symbol: Option<&str>, path: &str, content: &str) -> HashSet<String> {
    let mut text = String::new();
    for part in [symbol.unwrap_or(""), path, content] {
        lexical::index_terms(part, &mut text);
        text.push(' ');
    }
    text.split(' ').filter(|t| !t.is_empty()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The confidence of `terms` in an index of 900 chunks whose first
    /// results hold `hit_terms`, the nearest at (cosine, z) when given.
    fn rate_in_900(terms: &[TermStat], hit_terms: &[HashSet<String>], cosine: Option<(f64, f64)>) -> Confidence {
        Confidence::rate(
            &Evidence {
                terms,
                total: 900.0,
                hit_terms,
                defines_name: false,
                absent_words: &[],
                cosine: cosine.map(|c| c.0),
                cosine_z: cosine.map(|c| c.1),
            },
            false,
        )
    }

    /// A query of three words: `common` in a third of 900 chunks, `rare` in
    /// 3, `rarest` in 1; the first result holds `held` of them.
    fn rate(held: &[&str], cosine: Option<(f64, f64)>) -> Confidence {
        let terms =
            [("common", 300.0), ("rare", 3.0), ("rarest", 1.0)].map(|(term, df)| TermStat { term: term.into(), df });
        rate_in_900(&terms, &[held.iter().map(|t| t.to_string()).collect()], cosine)
    }

    #[test]
    fn a_partial_word_match_is_low_only_when_nothing_is_close_in_meaning() {
        let partial = ["common", "rare"];
        assert_eq!(rate(&partial, None).level, Level::Medium, "lexical alone");
        let far = rate(&partial, Some((0.35, 0.9)));
        assert_eq!(far.level, Level::Low);
        assert!(far.note.unwrap().contains("nothing is close in meaning"));
        assert_eq!(rate(&partial, Some((0.35, 2.5))).level, Level::Medium, "stands out");
        assert_eq!(rate(&partial, Some((0.62, 0.9))).level, Level::Medium, "near");
        let all = ["common", "rare", "rarest"];
        assert_eq!(rate(&all, Some((0.2, 0.1))).level, Level::High, "every word held");
        assert_eq!(rate(&["common"], Some((0.9, 4.0))).level, Level::Low, "few words held");
    }

    /// `n` query terms, each in 5 of 900 chunks, whose first results hold
    /// the terms of `held` (ranges of term numbers), the nearest at
    /// (cosine, z) when given.
    fn rate_spread(n: usize, held: &[std::ops::Range<usize>], cosine: Option<(f64, f64)>) -> Confidence {
        let terms: Vec<TermStat> = (0..n)
            .map(|i| TermStat {
                term: format!("t{i}"),
                df: 5.0,
            })
            .collect();
        let hit_terms: Vec<HashSet<String>> = held
            .iter()
            .map(|range| range.clone().map(|i| format!("t{i}")).collect())
            .collect();
        rate_in_900(&terms, &hit_terms, cosine)
    }

    #[test]
    fn a_long_questions_words_count_over_the_first_results_together() {
        // 8 of 12 words in the first two results, 4 in each: together 0.67.
        let long = rate_spread(LONG_QUESTION_TERMS, &[0..4, 4..8, 0..0], None);
        assert_eq!(long.level, Level::High, "{long:?}");
        // A shorter question so spread: 4 of 11 in the best one (0.36).
        let short = rate_spread(LONG_QUESTION_TERMS - 1, &[0..4, 4..8, 0..0], None);
        assert_eq!(short.level, Level::Low, "{short:?}");
        assert!(short.score > 0.35 && short.score < 0.4, "{short:?}");
    }

    #[test]
    fn words_alone_must_hold_more_of_the_query_than_words_with_vectors() {
        // 7 of 20 words in the first result (none in the second): 0.35.
        let partial = [0..7, 0..0];
        let alone = rate_spread(20, &partial, None);
        assert_eq!(alone.level, Level::Low, "{alone:?}");
        assert!(alone.note.unwrap().contains("rarer words"));
        let near = rate_spread(20, &partial, Some((0.62, 2.0)));
        assert_eq!(near.level, Level::Medium, "{near:?}");
        assert_eq!(
            rate_spread(20, &[0..9, 0..0], None).level,
            Level::Medium,
            "0.45 of the words"
        );
    }
}
