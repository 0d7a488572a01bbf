//! Packing evidence into an agent's token budget, shared by every context
//! tool: tokens are counted (cl100k_base: within 0.3% of o200k_base on
//! ken's own code and loaded in 85 ms instead of 222 ms; Claude's tokenizer
//! is not public), identical text goes in once, overlapping spans of a file are merged,
//! several files come before a second piece of one, a long body is cut to
//! its head rather than dropped, and what did not fit is named in one line.
//!
//! The budget covers the serialized pieces as the agent receives them (JSON,
//! escapes included); the caller reserves what its own fields cost.

use std::collections::{HashMap, HashSet};

use anyhow::{bail, Result};
use serde::Serialize;

/// Budgets an agent may ask for, in tokens.
pub const MIN_BUDGET: usize = 500;
pub const MAX_BUDGET: usize = 16_000;
pub const DEFAULT_BUDGET: usize = 3_000;

/// Pieces of one file taken in plain priority order.
const FREE_PIECES_PER_FILE: usize = 2;
/// Positions each further piece of a file moves back.
const REPEAT_WAIT: usize = 4;
/// No piece costs less (its path, lines and role alone): below this, the
/// rest is left out without being counted.
const MIN_PIECE_TOKENS: usize = 16;
/// The left-out line may grow this much when the second fill leaves out more.
const LEFT_OUT_MARGIN: usize = 12;
/// Pieces of fewer lines than this (call sites, signatures) go in the first
/// round without counting towards their file's pieces.
const SMALL_PIECE_LINES: usize = 3;
/// A piece is cut to fit only if at least this much of the budget is left.
const MIN_CUT_TOKENS: usize = 60;

/// Tokens of `text` as OpenAI's cl100k_base encoding counts them.
pub fn count_tokens(text: &str) -> usize {
    tiktoken_rs::cl100k_base_singleton().count_ordinary(text)
}

/// Loads the tokenizer (85 ms), e.g. on a server's start, so that the first
/// context call does not wait for it.
pub fn warm_up() {
    count_tokens("");
}

/// `budget`, or an error saying the range.
pub fn checked_budget(budget: Option<usize>) -> Result<usize> {
    let budget = budget.unwrap_or(DEFAULT_BUDGET);
    if !(MIN_BUDGET..=MAX_BUDGET).contains(&budget) {
        bail!("budget must be between {MIN_BUDGET} and {MAX_BUDGET} tokens (got {budget})");
    }
    Ok(budget)
}

/// A piece of evidence offered to the pack: `text` is exactly lines
/// `start_line..=end_line` of `path`.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    /// What the piece is to the question: "match", "body", "caller", "callee", "test", "doc"...
    pub role: &'static str,
    /// A short description ("function parse_config", "calls parse_config").
    pub label: String,
    /// Higher goes first.
    pub priority: f64,
    /// A long piece may be cut to its first lines (a body); otherwise it goes whole or not at all.
    pub cuttable: bool,
}

/// A piece in the pack, as the agent receives it.
#[derive(Debug, Clone, Serialize)]
pub struct Piece {
    pub path: String,
    /// `start-end`, 1-based, inclusive.
    pub lines: String,
    pub role: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label: String,
    pub text: String,
}

/// Evidence packed within a budget.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Pack {
    pub pieces: Vec<Piece>,
    /// Tokens of this pack as serialized (compact JSON).
    pub tokens: usize,
    /// What did not fit, and how to get it; absent when everything fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out: Option<String>,
}

/// A candidate taken, with where its lines are now.
struct Taken {
    candidate: Candidate,
    tokens: usize,
}

/// Packs `candidates` into `budget` tokens (of the serialized pieces).
pub fn pack(mut candidates: Vec<Candidate>, budget: usize) -> Pack {
    candidates.sort_by(|a, b| {
        b.priority
            .total_cmp(&a.priority)
            .then_with(|| a.path.cmp(&b.path))
            .then(a.start_line.cmp(&b.start_line))
    });
    let mut seen_texts = HashSet::new();
    let mut unique = Vec::with_capacity(candidates.len());
    for c in candidates {
        if !c.text.trim().is_empty() && seen_texts.insert(xxhash_rust::xxh3::xxh3_64(c.text.trim().as_bytes())) {
            unique.push(c);
        }
    }
    // Several files before many pieces of one: past its first few pieces, each
    // further piece of a file waits behind a few more pieces of other files.
    // A wait, not a second round: a file holding most of the best results is
    // the answer, and its third result must not fall behind every other file's.
    let mut per_file: HashMap<String, usize> = HashMap::new();
    let mut keyed: Vec<(usize, Candidate)> = unique
        .into_iter()
        .enumerate()
        .map(|(position, c)| {
            // A line or three (a call site, a signature) does not count as its file's piece.
            if c.end_line < c.start_line + SMALL_PIECE_LINES {
                return (position, c);
            }
            let n = per_file.entry(c.path.clone()).or_default();
            *n += 1;
            let repeats = n.saturating_sub(FREE_PIECES_PER_FILE);
            (position + REPEAT_WAIT * repeats, c)
        })
        .collect();
    keyed.sort_by_key(|(key, _)| *key);
    let ordered: Vec<Candidate> = keyed.into_iter().map(|(_, c)| c).collect();
    let fixed = serialized_tokens(&Pack::default());
    let (mut taken, mut left_out) = fill(&ordered, budget.saturating_sub(fixed));
    if !left_out.is_empty() {
        // Again with room for the line that names what is left out.
        let line = serialized_tokens(&describe_left_out(&left_out)) + LEFT_OUT_MARGIN;
        (taken, left_out) = fill(&ordered, budget.saturating_sub(fixed + line));
    }
    let mut pieces: Vec<Piece> = taken.iter().map(|t| piece_of(&t.candidate)).collect();
    // The estimate adds pieces' own counts; the serialized whole (its
    // left-out line too) is what counts: the least useful pieces go until it fits.
    loop {
        let mut whole = Pack {
            tokens: 0,
            left_out: describe_left_out(&left_out),
            pieces: std::mem::take(&mut pieces),
        };
        whole.tokens = serialized_tokens(&whole);
        whole.tokens = serialized_tokens(&whole);
        let worst = (0..taken.len()).min_by(|&a, &b| {
            taken[a]
                .candidate
                .priority
                .total_cmp(&taken[b].candidate.priority)
                .then(b.cmp(&a))
        });
        match worst {
            Some(worst) if whole.tokens > budget => {
                pieces = whole.pieces;
                pieces.remove(worst);
                left_out.push(taken.remove(worst).candidate);
            }
            _ => return whole,
        }
    }
}

/// Takes `ordered` candidates (most useful first) into `room` tokens:
/// what was taken, and what was left out.
fn fill(ordered: &[Candidate], room: usize) -> (Vec<Taken>, Vec<Candidate>) {
    let (mut taken, mut left_out) = (Vec::new(), Vec::new());
    let mut used = 0;
    for c in ordered {
        let room = room.saturating_sub(used);
        if room < MIN_PIECE_TOKENS {
            left_out.push(c.clone());
            continue;
        }
        match offer(&mut taken, c.clone(), room) {
            Offer::Added(tokens) => used += tokens,
            Offer::Grew { before, after } => used = used - before + after,
            Offer::Covered => {}
            Offer::TooBig(c) => left_out.push(c),
        }
    }
    (taken, left_out)
}

enum Offer {
    Added(usize),
    Grew { before: usize, after: usize },
    Covered,
    TooBig(Candidate),
}

/// Adds `c` to `taken` within `room` tokens: merged into a piece of the
/// same file it overlaps or touches, whole, cut to its first lines, or not.
fn offer(taken: &mut Vec<Taken>, c: Candidate, room: usize) -> Offer {
    let overlapping = taken.iter().position(|t| touches(&t.candidate, &c));
    if let Some(i) = overlapping {
        let old = &taken[i].candidate;
        if old.start_line <= c.start_line && c.end_line <= old.end_line {
            return Offer::Covered;
        }
        let mut merged = merge(old, &c);
        let mut before = taken[i].tokens;
        // The grown span may reach other pieces of the file: they merge too.
        let mut absorbed = Vec::new();
        loop {
            let reached =
                (0..taken.len()).find(|&j| j != i && !absorbed.contains(&j) && touches(&taken[j].candidate, &merged));
            let Some(j) = reached else { break };
            merged = merge(&merged, &taken[j].candidate);
            before += taken[j].tokens;
            absorbed.push(j);
        }
        absorbed.sort_unstable();
        let after = piece_tokens(&merged);
        if after <= before + room {
            taken[i] = Taken {
                candidate: merged,
                tokens: after,
            };
            for j in absorbed.into_iter().rev() {
                taken.remove(j);
            }
            return Offer::Grew { before, after };
        }
        return Offer::TooBig(c);
    }
    let tokens = piece_tokens(&c);
    if tokens <= room {
        taken.push(Taken { candidate: c, tokens });
        return Offer::Added(tokens);
    }
    if c.cuttable && room >= MIN_CUT_TOKENS {
        if let Some(cut) = cut_to_fit(&c, room) {
            let tokens = piece_tokens(&cut);
            taken.push(Taken { candidate: cut, tokens });
            return Offer::Added(tokens);
        }
    }
    Offer::TooBig(c)
}

/// Whether two spans of one file overlap or touch.
fn touches(a: &Candidate, b: &Candidate) -> bool {
    a.path == b.path && b.start_line <= a.end_line + 1 && a.start_line <= b.end_line + 1
}

/// The union of two overlapping or touching spans of one file; the role and
/// label of `first` (taken earlier: the more useful), the other's label added.
fn merge(first: &Candidate, other: &Candidate) -> Candidate {
    let lines_of = |c: &Candidate| -> Vec<(usize, String)> {
        c.text
            .split('\n')
            .enumerate()
            .map(|(i, l)| (c.start_line + i, l.to_string()))
            .collect()
    };
    let mut by_line: std::collections::BTreeMap<usize, String> = lines_of(other).into_iter().collect();
    by_line.extend(lines_of(first));
    let start_line = first.start_line.min(other.start_line);
    let end_line = first.end_line.max(other.end_line);
    let text = by_line
        .range(start_line..=end_line)
        .map(|(_, l)| l.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let mut label = first.label.clone();
    if !other.label.is_empty() && !label.contains(&other.label) {
        if !label.is_empty() {
            label.push_str("; ");
        }
        label.push_str(&other.label);
    }
    Candidate {
        start_line,
        end_line,
        text,
        label,
        ..first.clone()
    }
}

/// `c` cut to its first lines so that it fits in `room` tokens (with a last
/// line saying what was cut), if at least a few lines fit.
fn cut_to_fit(c: &Candidate, room: usize) -> Option<Candidate> {
    let lines: Vec<&str> = c.text.split('\n').collect();
    let cut_at = |keep: usize| -> Candidate {
        let mut text = lines[..keep].join("\n");
        text.push_str(&format!(
            "\n… lines {}-{} cut for the budget",
            c.start_line + keep,
            c.end_line
        ));
        Candidate {
            end_line: c.start_line + keep - 1,
            text,
            ..c.clone()
        }
    };
    // The most lines that fit: tokens grow with the lines kept.
    let (mut lo, mut hi) = (0usize, lines.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if piece_tokens(&cut_at(mid)) <= room {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    (lo >= 3).then(|| cut_at(lo))
}

fn piece_of(c: &Candidate) -> Piece {
    Piece {
        path: c.path.clone(),
        lines: format!("{}-{}", c.start_line, c.end_line),
        role: c.role.to_string(),
        label: c.label.clone(),
        text: c.text.clone(),
    }
}

/// Tokens of a piece as serialized in the list (its comma included).
fn piece_tokens(c: &Candidate) -> usize {
    count_tokens(&serde_json::to_string(&piece_of(c)).unwrap_or_default()) + 1
}

fn serialized_tokens(value: &impl Serialize) -> usize {
    count_tokens(&serde_json::to_string(value).unwrap_or_default())
}

/// "left out: 3 pieces (~1,240 tokens): src/a.rs:10-40 caller, …" with how to get them.
fn describe_left_out(left: &[Candidate]) -> Option<String> {
    if left.is_empty() {
        return None;
    }
    // The named pieces counted, the others estimated (a token is ~4 bytes of code).
    let tokens: usize = left
        .iter()
        .enumerate()
        .map(|(i, c)| if i < 6 { count_tokens(&c.text) } else { c.text.len() / 4 })
        .sum();
    let mut named: Vec<String> = left
        .iter()
        .take(6)
        .map(|c| format!("{}:{}-{} {}", c.path, c.start_line, c.end_line, c.role))
        .collect();
    if left.len() > named.len() {
        named.push(format!("and {} more", left.len() - named.len()));
    }
    Some(format!(
        "left out: {} piece{} (~{tokens} tokens): {}; ask with a larger budget, or read one with codebase_peek",
        left.len(),
        if left.len() == 1 { "" } else { "s" },
        named.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(path: &str, start: usize, lines: usize, priority: f64) -> Candidate {
        let text = (start..start + lines)
            .map(|n| format!("    let value_{n} = compute_something({n}) + other_thing(\"{path}\");"))
            .collect::<Vec<_>>()
            .join("\n");
        Candidate {
            path: path.to_string(),
            start_line: start,
            end_line: start + lines - 1,
            text,
            role: "match",
            label: String::new(),
            priority,
            cuttable: false,
        }
    }

    #[test]
    fn the_serialized_pack_never_exceeds_its_budget() {
        for budget in [MIN_BUDGET, 800, 1_000, 2_000, 3_000] {
            let candidates: Vec<Candidate> = (0..40)
                .map(|i| Candidate {
                    cuttable: i % 2 == 0,
                    ..candidate(
                        &format!("src/f{}.rs", i % 7),
                        1 + 50 * (i / 7),
                        3 + i % 11,
                        100.0 - i as f64,
                    )
                })
                .collect();
            let pack = pack(candidates, budget);
            let counted = count_tokens(&serde_json::to_string(&pack).unwrap());
            assert_eq!(pack.tokens, counted);
            assert!(counted <= budget, "{counted} > {budget}");
            // Most of the budget is used when there is more than fits.
            assert!(counted * 10 >= budget * 8, "{counted} of {budget}");
            assert!(pack.left_out.is_some());
        }
    }

    #[test]
    fn identical_text_goes_in_once_and_overlapping_spans_merge() {
        let a = candidate("a.rs", 10, 5, 3.0);
        let mut same_text = a.clone();
        same_text.path = "b.rs".into();
        let overlapping = candidate("a.rs", 12, 6, 2.0);
        let covered = candidate("a.rs", 11, 2, 1.0);
        let pack = pack(vec![a, same_text, overlapping, covered], 3_000);
        assert_eq!(pack.pieces.len(), 1, "{:?}", pack.pieces);
        assert_eq!(pack.pieces[0].lines, "10-17");
        assert_eq!(pack.pieces[0].text.lines().count(), 8);
        assert!(pack.pieces[0].text.contains("value_17") && pack.pieces[0].text.contains("value_10"));
    }

    #[test]
    fn a_span_that_grows_over_two_pieces_merges_them() {
        let first = candidate("a.rs", 4, 2, 3.0);
        let second = candidate("a.rs", 8, 2, 2.0);
        let whole = candidate("a.rs", 1, 9, 1.0);
        let pack = pack(vec![first, second, whole], 3_000);
        assert_eq!(pack.pieces.len(), 1, "{:?}", pack.pieces);
        assert_eq!(pack.pieces[0].lines, "1-9");
        assert_eq!(pack.pieces[0].text.lines().count(), 9);
    }

    #[test]
    fn other_files_come_before_a_third_piece_of_one_file() {
        let mut candidates: Vec<Candidate> = (0..5)
            .map(|i| candidate("big.rs", 1 + 20 * i, 4, 10.0 - i as f64))
            .collect();
        candidates.push(candidate("other.rs", 1, 4, 1.0));
        let pack = pack(candidates, 600);
        let files: Vec<&str> = pack.pieces.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(&files[..3], ["big.rs", "big.rs", "other.rs"], "{files:?}");
        // A signature of a line does not take a file's turn.
        let mut candidates: Vec<Candidate> = (0..3)
            .map(|i| candidate("big.rs", 1 + 20 * i, 4, 10.0 - i as f64))
            .collect();
        candidates.insert(1, candidate("big.rs", 100, 1, 9.5));
        let pack = super::pack(candidates, 3_000);
        let lines: Vec<&str> = pack.pieces.iter().map(|p| p.lines.as_str()).collect();
        assert_eq!(lines, ["1-4", "100-100", "21-24", "41-44"], "{lines:?}");
    }

    #[test]
    fn a_third_piece_of_one_file_waits_behind_a_few_others_not_all() {
        let mut candidates: Vec<Candidate> = (0..3)
            .map(|i| candidate("big.rs", 1 + 20 * i, 4, 20.0 - i as f64))
            .collect();
        candidates.extend((0..10).map(|i| candidate(&format!("f{i}.rs"), 1, 4, 10.0 - i as f64)));
        let pack = pack(candidates, 16_000);
        let at = pack
            .pieces
            .iter()
            .position(|p| p.path == "big.rs" && p.lines == "41-44");
        // Behind the first REPEAT_WAIT - 1 pieces of other files, ahead of the rest.
        assert_eq!(at, Some(1 + REPEAT_WAIT), "{:?}", pack.pieces);
    }

    #[test]
    fn a_long_body_is_cut_to_its_head_and_what_is_left_out_is_named() {
        let mut body = candidate("a.rs", 1, 200, 2.0);
        body.cuttable = true;
        let whole_only = candidate("b.rs", 1, 200, 1.0);
        let pack = pack(vec![body, whole_only], 1_000);
        assert_eq!(pack.pieces.len(), 1);
        let cut = &pack.pieces[0];
        assert!(cut.text.ends_with("cut for the budget"), "{}", cut.text);
        assert!(pack.tokens <= 1_000);
        let left = pack.left_out.unwrap();
        assert!(left.contains("b.rs:1-200 match"), "{left}");
    }

    #[test]
    fn budgets_outside_the_range_are_refused() {
        assert_eq!(checked_budget(None).unwrap(), DEFAULT_BUDGET);
        assert!(checked_budget(Some(100))
            .unwrap_err()
            .to_string()
            .contains("between 500 and 16000"));
        assert!(checked_budget(Some(20_000)).is_err());
    }
}
