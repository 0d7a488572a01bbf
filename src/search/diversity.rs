//! The per-file spread of the results: overlapping chunks and identical
//! copies rank once, and a file already listed competes at a discount.

use std::collections::HashMap;

use super::hit::{ExplainFactor, Location, SearchHit};

/// A chunk of a file already listed competes at this share of its score
/// (see `diversify`): a soft per-file limit. Chosen on the public eval
/// (BENCHMARKS.md): a hard limit of 3 per file cut chunk hits; a factor that
/// compounded per listed chunk (×0.95 each) buried the fourth and fifth
/// functions of the right file; a stronger one traded chunk hits for file recall.
const SAME_FILE_FACTOR: f64 = 0.9;
/// The same for the first results of a question that asks where or how code
/// does something: it asks for one place, and the other functions of its
/// file are the alternatives worth seeing (agent questions' answers were
/// often second in their file, below a short neighbour: BENCHMARKS.md
/// "Questions ask for one place"). An issue's title or a description asks
/// for the files to change: spread.
const SAME_FILE_FACTOR_FOR_QUESTIONS: f64 = 1.0;
/// How many results a question's one place and its neighbours fill; after
/// them a question's list spreads over files like any other (a file's fourth
/// and fifth chunks had pushed the next file out of the first ten).
const QUESTION_HEAD: usize = 5;

/// What a chunk of a file already listed competes at, by how many results
/// are listed above it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct FileSpread {
    head: usize,
    head_share: f64,
    share: f64,
}

impl FileSpread {
    /// [`SAME_FILE_FACTOR`] at every position.
    pub(super) const EVEN: FileSpread = FileSpread {
        head: 0,
        head_share: SAME_FILE_FACTOR,
        share: SAME_FILE_FACTOR,
    };

    fn share_at(self, listed: usize) -> f64 {
        if listed < self.head {
            self.head_share
        } else {
            self.share
        }
    }
}

/// How a file already listed competes: [`FileSpread::EVEN`], or for a
/// question asked as one [`SAME_FILE_FACTOR_FOR_QUESTIONS`] in its first
/// [`QUESTION_HEAD`] results.
pub(super) fn same_file_share(interrogative: bool) -> FileSpread {
    if interrogative {
        FileSpread {
            head: QUESTION_HEAD,
            head_share: SAME_FILE_FACTOR_FOR_QUESTIONS,
            share: SAME_FILE_FACTOR,
        }
    } else {
        FileSpread::EVEN
    }
}

/// Keeps the best hits, dropping any that overlaps a better one in the same
/// file and any beyond `max_per_file` per file. A hit of a file already
/// listed competes at `spread`'s share of its score ([`same_file_share`]), so
/// a second file comes before the first file's next chunk unless that chunk
/// clearly beats it.
pub(super) fn diversify(
    hits: Vec<SearchHit>,
    limit: usize,
    max_per_file: Option<usize>,
    spread: FileSpread,
) -> Vec<SearchHit> {
    let max_per_file = max_per_file.unwrap_or(usize::MAX).max(1);
    let mut file_numbers: HashMap<&str, usize> = HashMap::new();
    let file_of: Vec<usize> = hits
        .iter()
        .map(|h| {
            let next = file_numbers.len();
            *file_numbers.entry(h.path.as_str()).or_insert(next)
        })
        .collect();
    let mut kept_per_file = vec![0usize; file_numbers.len()];
    let mut pending: Vec<Option<SearchHit>> = hits.into_iter().map(Some).collect();
    let mut kept: Vec<SearchHit> = Vec::with_capacity(limit);
    while kept.len() < limit {
        let same_file = spread.share_at(kept.len());
        // The best discounted score; the earlier hit on a tie.
        let best = pending
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| {
                let score = slot.as_ref()?.score;
                Some((i, score * same_file_factor(score, kept_per_file[file_of[i]], same_file)))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((i, score)) = best else { break };
        let mut hit = pending[i].take().expect("chosen hit is pending");
        let file = file_of[i];
        let factor = same_file_factor(hit.score, kept_per_file[file], same_file);
        if let (Some(explain), true) = (&mut hit.explain, factor != 1.0) {
            explain.factors.push(ExplainFactor {
                reason: match kept_per_file[file] {
                    1 => "a result of its file listed above".to_string(),
                    n => format!("{n} results of its file listed above"),
                },
                factor,
            });
        }
        hit.score = score;
        kept_per_file[file] += 1;
        // Drop what this hit rules out: chunks of its file that overlap it,
        // or all the rest of its file once the file is full; and fold in its
        // copies, best first (an agent needs to know of them, not to read
        // them again).
        let full = kept_per_file[file] >= max_per_file;
        for (slot, &slot_file) in pending.iter_mut().zip(&file_of) {
            let Some(p) = slot.as_ref() else { continue };
            let overlaps = slot_file == file && p.start_line <= hit.end_line && hit.start_line <= p.end_line;
            let copy = hit.content_hash != 0 && p.content_hash == hit.content_hash;
            if copy && !overlaps {
                hit.copies.push(Location {
                    path: p.path.clone(),
                    start_line: p.start_line,
                    end_line: p.end_line,
                });
            }
            if copy || overlaps || (slot_file == file && full) {
                *slot = None;
            }
        }
        kept.push(hit);
    }
    kept
}

/// What a hit's `score` is multiplied by when `earlier` hits of its file are
/// listed above it: `same_file` once, inverted for a negative score (the
/// semantic side can give one) so that it is lowered too.
fn same_file_factor(score: f64, earlier: usize, same_file: f64) -> f64 {
    match (earlier, score >= 0.0) {
        (0, _) => 1.0,
        (_, true) => same_file,
        (_, false) => 1.0 / same_file,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::hit::narrow_to_member;

    #[test]
    fn diversify_spreads_files_softly_and_keeps_hard_limits() {
        let hit = |path: &str, start: u32, end: u32, score: f64| SearchHit {
            path: path.into(),
            start_line: start,
            end_line: end,
            score,
            ..Default::default()
        };
        let order = |hits: &[SearchHit]| hits.iter().map(|h| (h.path.clone(), h.start_line)).collect::<Vec<_>>();
        let hits = vec![
            hit("a.rs", 1, 10, 1.00),
            hit("a.rs", 5, 12, 0.99), // overlaps the first: dropped
            hit("a.rs", 20, 30, 0.99),
            hit("c.rs", 1, 10, 0.95),
            hit("a.rs", 40, 50, 0.97),
            hit("a.rs", 60, 70, 0.96),
            hit("b.rs", 1, 10, 0.85),
            hit("a.rs", 80, 90, 0.80),
        ];
        let kept = diversify(hits.clone(), 10, None, FileSpread::EVEN);
        // c.rs comes before a.rs:20 (0.99 x 0.9 = 0.891); the factor does not
        // compound, so a.rs:60 (0.96 x 0.9 = 0.864) still beats b.rs.
        assert_eq!(
            order(&kept),
            [
                ("a.rs".into(), 1),
                ("c.rs".into(), 1),
                ("a.rs".into(), 20),
                ("a.rs".into(), 40),
                ("a.rs".into(), 60),
                ("b.rs".into(), 1),
                ("a.rs".into(), 80)
            ]
        );
        assert!(
            kept.windows(2).all(|w| w[0].score >= w[1].score),
            "scores fall with rank"
        );
        assert_eq!(
            order(&diversify(hits.clone(), 10, Some(2), FileSpread::EVEN)),
            [
                ("a.rs".into(), 1),
                ("c.rs".into(), 1),
                ("a.rs".into(), 20),
                ("b.rs".into(), 1)
            ]
        );
        assert_eq!(diversify(hits.clone(), 2, None, FileSpread::EVEN).len(), 2);
        // Negative scores (semantic side) are lowered too, not raised.
        let negative = diversify(
            vec![
                hit("a.rs", 1, 2, -0.10),
                hit("a.rs", 5, 6, -0.11),
                hit("b.rs", 1, 2, -0.112),
            ],
            3,
            None,
            FileSpread::EVEN,
        );
        assert_eq!(order(&negative)[1], ("b.rs".into(), 1));
    }

    /// A question asked as one lists a file's next function at its own
    /// score; otherwise it competes at a discount and another file's comes first.
    #[test]
    fn a_question_asked_as_one_lists_a_files_next_function_at_its_score() {
        let hit = |path: &str, start: u32, score: f64| SearchHit {
            path: path.into(),
            start_line: start,
            end_line: start + 9,
            score,
            ..Default::default()
        };
        let hits = vec![hit("a.rs", 1, 1.0), hit("a.rs", 20, 0.8), hit("b.rs", 1, 0.75)];
        let order =
            |kept: Vec<SearchHit>| -> Vec<(String, u32)> { kept.into_iter().map(|h| (h.path, h.start_line)).collect() };
        assert_eq!(
            order(diversify(hits.clone(), 3, None, same_file_share(true))),
            [("a.rs".into(), 1), ("a.rs".into(), 20), ("b.rs".into(), 1)]
        );
        assert_eq!(
            order(diversify(hits, 3, None, same_file_share(false))),
            [("a.rs".into(), 1), ("b.rs".into(), 1), ("a.rs".into(), 20)]
        );
        // After its first results, a question's list spreads over files: a
        // sixth chunk of a.rs competes with c.rs at 0.9 of its score.
        let mut six: Vec<SearchHit> = (0..6).map(|i| hit("a.rs", 1 + 20 * i, 1.0 - 0.01 * i as f64)).collect();
        six.push(hit("c.rs", 1, 0.9));
        let kept = order(diversify(six, 7, None, same_file_share(true)));
        assert!(kept[..5].iter().all(|(path, _)| path == "a.rs"), "{kept:?}");
        assert_eq!(kept[5], ("c.rs".into(), 1));
    }

    #[test]
    fn identical_chunks_rank_once_with_their_copies_listed() {
        let hit = |path: &str, start: u32, content_hash: i64, score: f64| SearchHit {
            path: path.into(),
            start_line: start,
            end_line: start + 9,
            score,
            content_hash,
            ..Default::default()
        };
        let kept = diversify(
            vec![
                hit("src/a.rs", 1, 7, 1.0),
                hit("vendor/a.rs", 1, 7, 0.98),
                hit("src/b.rs", 1, 8, 0.9),
                hit("src/a.rs", 40, 7, 0.85), // the same text again in its own file
                hit("src/c.rs", 1, 0, 0.8),   // hash unknown: never a copy
                hit("src/d.rs", 1, 0, 0.7),
            ],
            10,
            Some(1),
            FileSpread::EVEN,
        );
        let places = |h: &SearchHit| (h.path.clone(), h.start_line);
        assert_eq!(
            kept.iter().map(places).collect::<Vec<_>>(),
            [
                ("src/a.rs".into(), 1),
                ("src/b.rs".into(), 1),
                ("src/c.rs".into(), 1),
                ("src/d.rs".into(), 1)
            ]
        );
        let copies: Vec<(String, u32, u32)> = kept[0]
            .copies
            .iter()
            .map(|c| (c.path.clone(), c.start_line, c.end_line))
            .collect();
        assert_eq!(copies, [("vendor/a.rs".into(), 1, 10), ("src/a.rs".into(), 40, 49)]);
        assert!(kept[1..].iter().all(|h| h.copies.is_empty()));
        // Narrowed to a definition, the copies show the same lines of the text.
        let mut narrowed = kept[0].clone();
        narrow_to_member(&mut narrowed, &("f".to_string(), 3, 5));
        assert_eq!((narrowed.start_line, narrowed.end_line), (3, 5));
        assert_eq!((narrowed.copies[1].start_line, narrowed.copies[1].end_line), (42, 44));
    }
}
