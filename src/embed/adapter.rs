//! The query adapter: a linear map, fitted on the index's own documented
//! definitions, that carries a question's vector toward the vectors of the
//! code it describes.
//!
//! A small sentence model places "Return the metadata for the flag of the
//! given name" nearer documented code that shares its words than the
//! undocumented `fn lookup(name: &str) -> Option<&dyn Flag>` it describes.
//! Every documented definition of the repository is a worked example of that
//! gap: its doc comment's first sentence is a question, its code without the
//! comment the answer. [`fit`] learns the repository's way of saying things from a
//! sample of those pairs two ways: by a ridge regression toward the identity,
//! and contrastively (each question's own code against the other pairs'
//! code, the stored chunks of its own file, which it must outrank in a
//! search, and a sample of the rest). It keeps whichever ranks a held-out
//! fifth of the pairs best, and none if neither beats the query as typed
//! (`KEN_QUERY_ADAPTER_FIT=ridge` fits ridge alone; [`Method`]). A search
//! uses `q` and `normalise(q·M)` half and half ([`QueryAdapter::apply`]),
//! for questions led by a word that led a fitted sentence
//! ([`QueryAdapter::carries`]). Chunk vectors are not changed, so fitting
//! again never re-embeds the index. On doc-public, semantic chunk H@10 .697
//! → .790 and hybrid .830 → .870; swe-public hybrid file R@5 is .758 (.771
//! with no adapter) (docs/experiments.md, "A query adapter fitted on the
//! repository's doc comments" and the sections after it).

use anyhow::Result;

use crate::store::adapter::SavedFit;
use crate::store::Store;
use std::collections::BTreeSet;

/// Pairs sampled for a fit. The code side costs about as much to embed as
/// as many chunks (~20 s here), the training as much again; twice as many
/// gained doc-public one hit in 300 at H@10 (seven at H@1) for twice the cost.
pub const MAX_PAIRS: usize = 600;
/// Fewer documented definitions than this and the index has no adapter: a
/// fit on a handful of pairs learns their words, not the repository's.
pub const MIN_PAIRS: usize = 100;
/// The ridge's pull toward the identity (vectors are unit length).
const RIDGE: f64 = 1.0;
/// The fit is redone when the branch's distinct contents grew or shrank by
/// more than this share since it was made.
const REFIT_DRIFT: f64 = 0.25;
/// How much of a search's query vector is the map's image (the rest is the
/// query as embedded); see [`QueryAdapter::apply`].
const ADAPTED_SHARE: f32 = 0.5;
/// Doc sentences shorter than this teach nothing, and queries shorter than
/// this (a lone identifier, two keywords) are not what the map learnt from:
/// they are searched as typed (semantic ident chunk H@1 with the map .770,
/// without .785).
const MIN_SENTENCE_WORDS: usize = 3;
/// First sentences longer than this are cut (characters).
const MAX_QUESTION_CHARS: usize = 300;

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The map, row-major `dims × dims`: `q'_j = Σ_i q_i m_ij`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryAdapter {
    dims: usize,
    matrix: Vec<f32>,
    /// The [`lead_word`]s of the sentences it was fitted on; `None`: any.
    leads: Option<BTreeSet<String>>,
}

impl QueryAdapter {
    /// The map of `matrix` (`dims` × `dims`, row-major), carrying any question.
    fn of(dims: usize, matrix: Vec<f32>) -> QueryAdapter {
        QueryAdapter {
            dims,
            matrix,
            leads: None,
        }
    }

    /// The ridge fit of `questions` onto `targets` (pairs of unit vectors of
    /// one dimension); `None` without pairs or when the system is singular.
    pub fn ridge(questions: &[Vec<f32>], targets: &[Vec<f32>]) -> Option<QueryAdapter> {
        let dims = questions.first()?.len();
        if dims == 0 || questions.len() != targets.len() {
            return None;
        }
        let mut gram = vec![0f64; dims * dims];
        let mut cross = vec![0f64; dims * dims];
        for (q, t) in questions.iter().zip(targets) {
            if q.len() != dims || t.len() != dims {
                return None;
            }
            for (i, &qi) in q.iter().enumerate() {
                let qi = f64::from(qi);
                let gram_row = &mut gram[i * dims..(i + 1) * dims];
                for (g, &qj) in gram_row.iter_mut().zip(q) {
                    *g += qi * f64::from(qj);
                }
                let cross_row = &mut cross[i * dims..(i + 1) * dims];
                for (c, &tj) in cross_row.iter_mut().zip(t) {
                    *c += qi * f64::from(tj);
                }
            }
        }
        for i in 0..dims {
            gram[i * dims + i] += RIDGE;
            cross[i * dims + i] += RIDGE;
        }
        let lower = cholesky(&gram, dims)?;
        let matrix = solve_columns(&lower, &cross, dims);
        Some(QueryAdapter::of(dims, matrix.into_iter().map(|x| x as f32).collect()))
    }

    /// The query vector search uses for a sentence ([`is_sentence`]): the
    /// mean of `vector` and its image by the map (both unit length),
    /// normalised; `vector` itself when its dimension is not the adapter's.
    /// The image alone is best for questions worded like doc comments but
    /// loses what the query shares word for word with code: on the public
    /// eval, semantic mode with the image alone took doc chunk H@10 .697 →
    /// .793 but swe file R@5 .621 → .562; the mean takes them to .767 and
    /// .683 (shares .3 and .7 compared in BENCHMARKS.md).
    pub fn apply(&self, vector: &[f32]) -> Vec<f32> {
        if vector.len() != self.dims {
            return vector.to_vec();
        }
        let mut out = self.carry(vector);
        for (o, &v) in out.iter_mut().zip(vector) {
            *o = ADAPTED_SHARE * *o + (1.0 - ADAPTED_SHARE) * v;
        }
        normalise(&mut out);
        out
    }

    /// Whether search carries `query` by the map: a sentence ([`is_sentence`])
    /// led by a word that led the sentences it was fitted on ("Returns",
    /// "Check"). The map learnt how doc comments say what code does; issue
    /// titles ("Wrong legend values of large ranges", "caplog fixture
    /// doesn't restore ...") it bends away from the code they share words
    /// with: on the public eval, swe file R@5 .733 carried, .771 as typed,
    /// .758 so chosen; doc chunk H@10 .873, .830, .870 (BENCHMARKS.md).
    pub fn carries(&self, query: &str) -> bool {
        is_sentence(query)
            && match &self.leads {
                None => true,
                Some(leads) => lead_word(query).is_some_and(|w| leads.contains(&w)),
            }
    }

    /// The map that carries only questions led by one of `leads`.
    pub fn led_by(self, leads: BTreeSet<String>) -> QueryAdapter {
        QueryAdapter {
            leads: Some(leads),
            ..self
        }
    }

    /// `vector` (of the adapter's dimension) times the map, normalised.
    fn carry(&self, vector: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; self.dims];
        for (&v, row) in vector.iter().zip(self.matrix.chunks_exact(self.dims)) {
            for (o, &m) in out.iter_mut().zip(row) {
                *o += v * m;
            }
        }
        normalise(&mut out);
        out
    }

    fn to_blob(&self) -> Vec<u8> {
        self.matrix.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn from_blob(blob: &[u8]) -> Option<QueryAdapter> {
        let matrix: Vec<f32> = blob
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let dims = (matrix.len() as f64).sqrt() as usize;
        (dims > 0 && dims * dims == matrix.len() && blob.len().is_multiple_of(4))
            .then(|| QueryAdapter::of(dims, matrix))
    }
}

/// A fit, chosen on held-out pairs ([`fit`]).
pub struct Fit {
    /// `None` when no map ranked the held-out code better than the query as typed.
    pub adapter: Option<QueryAdapter>,
    /// What was chosen and how it ranked, for the status and the log:
    /// "contrastive, 60 steps: held-out MRR 0.261 → 0.464".
    pub summary: String,
}

/// Fits the map on four fifths of the pairs, each way (a ridge regression,
/// and a contrastive fit checked every [`CHECK_EVERY`] steps), keeps the one
/// that ranks the other fifth's code best among all the pairs' code and the
/// `negatives` (stored chunk vectors), and fits it again on all the pairs.
/// The held-out fifth decides how far the contrastive fit goes: with 480
/// pairs for 147k weights it overfits after a few dozen steps.
pub fn fit(questions: &[Vec<f32>], targets: &[Vec<f32>], negatives: &Negatives, method: Method) -> Fit {
    let n = questions.len().min(targets.len());
    let (train, held): (Vec<usize>, Vec<usize>) = (0..n).partition(|i| i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1);
    let pick = |of: &[Vec<f32>]| -> Vec<Vec<f32>> { train.iter().map(|&i| of[i].clone()).collect() };
    let (train_questions, train_targets) = (pick(questions), pick(targets));
    let train_own: Vec<Option<usize>> = train.iter().map(|&i| negatives.own_of(i)).collect();
    let held_out = |adapter: Option<&QueryAdapter>| held_out_mrr(adapter, &held, questions, targets, negatives);
    let as_typed = held_out(None);
    // (steps, held-out MRR) of the best fit so far; 0 steps: the ridge fit.
    let mut best: Option<(usize, f64)> = None;
    if let Some(ridge) = QueryAdapter::ridge(&train_questions, &train_targets) {
        best = Some((0, held_out(Some(&ridge))));
    }
    if method == Method::Chosen {
        let _ = contrastive(
            &train_questions,
            &train_targets,
            &negatives.vectors,
            &train_own,
            MAX_STEPS,
            |step, adapter| {
                let mrr = held_out(Some(&adapter));
                if best.is_none_or(|(_, b)| mrr > b) {
                    best = Some((step, mrr));
                }
            },
        );
    }
    let chosen = best.filter(|&(_, mrr)| mrr > as_typed).and_then(|(steps, mrr)| {
        let adapter = match steps {
            0 => QueryAdapter::ridge(questions, targets),
            steps => {
                let mut last = None;
                contrastive(questions, targets, &negatives.vectors, &negatives.own, steps, |_, a| {
                    last = Some(a)
                })
                .ok()?;
                last
            }
        }?;
        let method = match steps {
            0 => "ridge".to_string(),
            steps => format!("contrastive, {steps} steps"),
        };
        Some((adapter, format!("{method}: held-out MRR {as_typed:.3} → {mrr:.3}")))
    });
    match chosen {
        Some((adapter, summary)) => Fit {
            adapter: Some(adapter),
            summary,
        },
        None => Fit {
            adapter: None,
            summary: format!("no map ranked held-out code above the query as typed (MRR {as_typed:.3})"),
        },
    }
}

/// How the map is fitted: whichever of a ridge regression and a contrastive
/// fit ranks the held-out pairs best (the default, `chosen`; it also drops a
/// definition's own name leading its doc sentence: one who asks does not
/// know it), or by ridge regression alone (`KEN_QUERY_ADAPTER_FIT=ridge`,
/// 5x cheaper to fit). On the public eval, every question carried, the
/// chosen fit, with each pair's file siblings as negatives, ranks
/// doc-comment questions better
/// (doc-public hybrid chunk H@10 .843 → .873) and issue titles about as
/// well (swe-public hybrid file R@5 .746 → .733, R@10 .790 → .827; a case
/// either way) (BENCHMARKS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Ridge,
    Chosen,
}

impl Method {
    pub fn from_env() -> Result<Method> {
        Ok(match crate::config::settings().query_adapter_fit {
            crate::config::AdapterFit::Chosen => Method::Chosen,
            crate::config::AdapterFit::Ridge => Method::Ridge,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Method::Ridge => "ridge",
            Method::Chosen => "chosen",
        }
    }
}

/// Every this-many-th pair is held out to choose the fit.
const HELD_OUT_EVERY: usize = 5;
/// The contrastive fit's longest run, how often the held-out pairs check
/// it, its learning rate and its softmax temperature.
const MAX_STEPS: usize = 60;
const CHECK_EVERY: usize = 10;
const LEARNING_RATE: f64 = 1e-3;
const TEMPERATURE: f64 = 0.05;

/// MRR of the `held` pairs' code among all `targets` and `negatives`, their
/// questions as search would use them with `adapter` (as typed without one).
fn held_out_mrr(
    adapter: Option<&QueryAdapter>,
    held: &[usize],
    questions: &[Vec<f32>],
    targets: &[Vec<f32>],
    negatives: &Negatives,
) -> f64 {
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let total: f64 = held
        .iter()
        .map(|&i| {
            let q = adapter.map_or_else(|| questions[i].clone(), |a| a.apply(&questions[i]));
            let own = dot(&q, &targets[i]);
            let own_chunk = negatives.own_of(i);
            let others = negatives
                .vectors
                .iter()
                .enumerate()
                .filter(|(j, _)| own_chunk != Some(*j));
            let above = targets
                .iter()
                .chain(others.map(|(_, v)| v))
                .filter(|t| dot(&q, t) > own)
                .count();
            1.0 / (above + 1) as f64
        })
        .sum();
    total / held.len().max(1) as f64
}

/// Trains the map contrastively for `steps` steps (InfoNCE: each question's
/// own code against the other pairs' code and the `negatives`, less its own
/// stored chunk, `own[i]`), handing it
/// to `checkpoint` every [`CHECK_EVERY`] steps and at the end. The loss is
/// taken on the vector search uses ([`QueryAdapter::apply`]: half the query
/// as typed), so the map learns what to add to it; it starts at the identity.
fn contrastive(
    questions: &[Vec<f32>],
    targets: &[Vec<f32>],
    negatives: &[Vec<f32>],
    own: &[Option<usize>],
    steps: usize,
    mut checkpoint: impl FnMut(usize, QueryAdapter),
) -> candle_core::Result<()> {
    use candle_core::{DType, Device, Tensor, Var};
    use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
    let n = questions.len();
    let Some(dims) = questions.first().map(Vec::len) else {
        return Ok(());
    };
    let consistent = |vs: &[Vec<f32>]| vs.iter().all(|v| v.len() == dims);
    if dims == 0 || n != targets.len() || !consistent(questions) || !consistent(targets) || !consistent(negatives) {
        return Ok(());
    }
    let unit_rows = |t: Tensor| t.broadcast_div(&t.sqr()?.sum_keepdim(1)?.sqrt()?);
    let cpu = Device::Cpu;
    let q = Tensor::from_vec(questions.concat(), (n, dims), &cpu)?;
    let mut code = Tensor::from_vec(targets.concat(), (n, dims), &cpu)?;
    if !negatives.is_empty() {
        let others = Tensor::from_vec(negatives.concat(), (negatives.len(), dims), &cpu)?;
        code = Tensor::cat(&[&code, &others], 0)?;
    }
    let code = code.t()?.contiguous()?;
    // A question's own stored chunk says what its code does in its own
    // words: the answer, not a negative.
    let width = n + negatives.len();
    let mut mask = vec![0f32; n * width];
    for (i, j) in own.iter().enumerate().take(n) {
        if let Some(j) = j.filter(|&j| j < negatives.len()) {
            mask[i * width + n + j] = -1e4;
        }
    }
    let mask = Tensor::from_vec(mask, (n, width), &cpu)?;
    let answers = Tensor::arange(0u32, n as u32, &cpu)?;
    let m = Var::from_tensor(&Tensor::eye(dims, DType::F32, &cpu)?)?;
    let mut optimizer = AdamW::new(
        vec![m.clone()],
        ParamsAdamW {
            lr: LEARNING_RATE,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        },
    )?;
    let as_typed = (&q * f64::from(1.0 - ADAPTED_SHARE))?;
    for step in 1..=steps {
        let image = unit_rows(q.matmul(m.as_tensor())?)?;
        let searched = unit_rows(((image * f64::from(ADAPTED_SHARE))? + &as_typed)?)?;
        let logits = ((searched.matmul(&code)? / TEMPERATURE)? + &mask)?;
        optimizer.backward_step(&candle_nn::loss::cross_entropy(&logits, &answers)?)?;
        if step % CHECK_EVERY == 0 || step == steps {
            let matrix: Vec<f32> = m.as_tensor().flatten_all()?.to_vec1()?;
            checkpoint(step, QueryAdapter::of(dims, matrix));
        }
    }
    Ok(())
}

/// The lower triangle `L` of `a = L·Lᵀ` (`a` symmetric positive definite).
fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let dot: f64 = (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum();
            let rest = a[i * n + j] - dot;
            if i == j {
                if rest <= 0.0 {
                    return None;
                }
                l[i * n + i] = rest.sqrt();
            } else {
                l[i * n + j] = rest / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// `X` with `L·Lᵀ·X = b`, column by column (forward then back substitution).
fn solve_columns(l: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut x = vec![0f64; n * n];
    let mut y = vec![0f64; n];
    for col in 0..n {
        for i in 0..n {
            let dot: f64 = (0..i).map(|k| l[i * n + k] * y[k]).sum();
            y[i] = (b[i * n + col] - dot) / l[i * n + i];
        }
        for i in (0..n).rev() {
            let dot: f64 = (i + 1..n).map(|k| l[k * n + i] * x[k * n + col]).sum();
            x[i * n + col] = (y[i] - dot) / l[i * n + i];
        }
    }
    x
}

/// A definition's doc comment reduced to its first sentence, and the
/// definition's text without the comment: `None` when it has no doc of at
/// least three words. `doc` holds the doc lines of the chunk's definitions
/// (lines of `text`, 1-based, as `source::chunk::parse_doc_lines` reads
/// them); the first one's is taken.
pub fn question_and_code(text: &str, doc: &[Option<(u32, u32)>]) -> Option<(String, String)> {
    let (first, last) = doc.iter().flatten().next().copied()?;
    let lines: Vec<&str> = text.lines().collect();
    let in_doc = |n: usize| (first as usize..=last as usize).contains(&n);
    let comment: Vec<String> = (first as usize..=last as usize)
        .filter_map(|n| lines.get(n - 1))
        .map(|l| without_markers(l).to_string())
        .collect();
    let code: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|&(i, _)| !in_doc(i + 1))
        .map(|(_, l)| *l)
        .collect();
    let question = first_sentence(&comment)?;
    let code = code.join("\n");
    (!code.trim().is_empty()).then_some((question, code))
}

/// A doc comment's line without the marks that make it one: `///`, `/**`,
/// ` * `, `*/`, `#`, `--|`, a docstring's quotes (`r"""`), an `@doc`.
fn without_markers(line: &str) -> &str {
    let mut t = line.trim();
    for attribute in ["@moduledoc", "@typedoc", "@doc"] {
        if let Some(rest) = t.strip_prefix(attribute) {
            t = rest.trim_start();
        }
    }
    for open in ["(**", "(*", "{-", "r\"", "R\"", "u\"", "r'", "R'", "u'"] {
        if let Some(rest) = t.strip_prefix(open) {
            t = rest;
            break;
        }
    }
    t = t.trim_start_matches(['/', '*', '!', '#', '-', '|', ';', '"', '\'']);
    for close in ["*/", "*)", "-}"] {
        t = t.strip_suffix(close).unwrap_or(t);
    }
    t.trim_end_matches(['"', '\'']).trim()
}

/// The first word of `text` as the adapter compares it: lowercase, letters,
/// digits, `_` and `-` only, a plural or third-person `s` dropped ("Returns"
/// and "return" are one); `None` when nothing is left.
pub fn lead_word(text: &str) -> Option<String> {
    let word: String = text
        .split_whitespace()
        .next()?
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
        .flat_map(char::to_lowercase)
        .collect();
    let word = match word.strip_suffix('s') {
        Some(stem) if word.chars().count() > 3 && !stem.ends_with('s') => stem.to_string(),
        _ => word,
    };
    (!word.is_empty()).then_some(word)
}

/// The lead words of `questions` (the fitted sentences), as [`lead_word`] gives them.
pub fn lead_words<'a>(questions: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    questions.into_iter().filter_map(lead_word).collect()
}

/// Whether `text` has the words of a sentence: a doc sentence the map learns
/// from, or a query it may carry. (The rerank's "question", four words or
/// more, is [`crate::source::lexical::is_question`].)
pub fn is_sentence(text: &str) -> bool {
    text.split_whitespace().count() >= MIN_SENTENCE_WORDS
}

/// The first sentence of the doc's first paragraph, without tag lines
/// (`@param`); `None` below three words.
fn first_sentence(doc: &[String]) -> Option<String> {
    let paragraph: Vec<&str> = doc
        .iter()
        .map(|l| l.trim())
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty() && !l.starts_with('@') && !l.starts_with('#'))
        .collect();
    let text = paragraph.join(" ");
    let end = text
        .match_indices(['.', '?', '!'])
        .map(|(i, _)| i + 1)
        .find(|&i| text[i..].is_empty() || text[i..].starts_with(' '))
        .unwrap_or(text.len());
    let sentence: String = text[..end].chars().take(MAX_QUESTION_CHARS).collect();
    is_sentence(&sentence).then_some(sentence)
}

/// `question` without a first word that is the definition's own `name`
/// (Go's "Bind parses the request body"): one who asks does not know it.
fn without_leading_name(question: &str, name: &str) -> String {
    let short = name.rsplit(['.', ':']).next().unwrap_or(name);
    match question.split_once(' ') {
        Some((first, rest)) if first.trim_matches(|c: char| !c.is_alphanumeric() && c != '_') == short => {
            rest.to_string()
        }
        _ => question.to_string(),
    }
}

/// Up to [`MAX_PAIRS`] (question, code) pairs from the branch's documented
/// single definitions, in content-hash order (a fixed, spread sample); the
/// code as `code_text(context, symbol, code)` makes it.
pub fn training_pairs(
    store: &Store,
    branch: &str,
    method: Method,
    code_text: impl Fn(Option<&str>, Option<&str>, &str) -> String,
) -> Result<Vec<(i64, String, String)>> {
    let mut pairs = Vec::new();
    store.for_each_documented_chunk(branch, |chunk| {
        let (context, symbol) = (chunk.context, chunk.symbol);
        let doc = crate::source::chunk::parse_doc_lines(chunk.doc.as_deref(), 1);
        if let Some((question, code)) = question_and_code(&chunk.text, &doc) {
            // Only the chosen fit was measured without the name (ridge
            // keeps the sentence it was measured with).
            let question = match symbol.as_deref() {
                Some(name) if method == Method::Chosen => without_leading_name(&question, name),
                _ => question,
            };
            if !is_sentence(&question) {
                return Ok(true);
            }
            pairs.push((
                chunk.hash,
                question,
                code_text(context.as_deref(), symbol.as_deref(), &code),
            ));
            if pairs.len() == MAX_PAIRS {
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    Ok(pairs)
}

/// Stored chunk vectors the contrastive fit pushes questions away from (the
/// code a search must rank below the right one): enough to stand for the
/// index, few enough to keep a step cheap.
pub const NEGATIVES: usize = 2000;

/// At most this many of the pairs' file siblings: a bound on a step's cost
/// in repositories of huge files (the eval's repositories have 2-7k).
const MAX_SIBLINGS: usize = 8000;

/// The stored chunk vectors a fit ranks each question's code against.
#[derive(Debug, Default)]
pub struct Negatives {
    pub vectors: Vec<Vec<f32>>,
    /// Per pair, the index in `vectors` of its own stored chunk (its doc
    /// comment and all), which its question is not ranked against.
    pub own: Vec<Option<usize>>,
}

impl Negatives {
    fn own_of(&self, pair: usize) -> Option<usize> {
        self.own.get(pair).copied().flatten()
    }
}

/// The stored vectors of `model` on `branch` that each pair's code must
/// beat: the chunks of the files that hold a pair (the documented siblings
/// a search ranks it among, up to [`MAX_SIBLINGS`]), then up to `spread`
/// more in hash order (a spread sample of the index).
pub fn negatives(store: &Store, branch: &str, model: &str, pairs: &[i64], spread: usize) -> Result<Negatives> {
    let mut index_of = std::collections::HashMap::new();
    let mut vectors = Vec::new();
    // The siblings, then the spread sample: rows until `limit` new vectors are in.
    for (siblings, limit) in [(true, MAX_SIBLINGS), (false, spread)] {
        let mut added = 0;
        let take = |hash: i64, blob: Vec<u8>| -> Result<bool> {
            if added == limit {
                return Ok(false);
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = index_of.entry(hash) {
                slot.insert(vectors.len());
                vectors.push(crate::store::vectors::decode(&blob));
                added += 1;
            }
            Ok(true)
        };
        if siblings {
            store.for_each_vector_beside(branch, model, pairs, take)?;
        } else {
            store.for_each_branch_vector(branch, model, take)?;
        }
    }
    let own = pairs.iter().map(|hash| index_of.get(hash).copied()).collect();
    Ok(Negatives { vectors, own })
}

/// What the index records of its last fit for `model`: the distinct
/// contents the branch had and how many pairs it found (0: too few, no adapter).
fn last_fit(store: &Store, model: &str) -> Result<Option<(u64, usize, String)>> {
    let value = store.query_adapter_record()?;
    Ok(value.and_then(|v| {
        let mut parts = v.rsplitn(4, ' ');
        let pairs = parts.next()?.parse().ok()?;
        let contents = parts.next()?.parse().ok()?;
        let method = parts.next()?.to_string();
        (parts.next()? == model).then_some((contents, pairs, method))
    }))
}

/// Whether the adapter of `model` (or the finding that there are too few
/// pairs for one) still stands for a branch of `contents` distinct contents.
pub fn is_current(store: &Store, model: &str, method: Method, contents: u64) -> Result<bool> {
    Ok(last_fit(store, model)?.is_some_and(|(then, _, how)| {
        how == method.name() && (contents as f64 - then as f64).abs() <= REFIT_DRIFT * (then as f64).max(1.0)
    }))
}

/// Records a fit of `pairs` pairs for `model` (`None`: too few pairs),
/// replacing any other.
pub fn save(store: &Store, model: &str, method: Method, contents: u64, pairs: usize, fit: Option<&Fit>) -> Result<()> {
    let adapter = fit.and_then(|f| f.adapter.as_ref());
    let matrix = adapter.map(QueryAdapter::to_blob);
    let leads = adapter
        .and_then(|a| a.leads.as_ref())
        .map(|leads| leads.iter().map(String::as_str).collect::<Vec<_>>().join(" "));
    let record = format!("{model} {} {contents} {pairs}", method.name());
    store.save_query_adapter(
        model,
        &SavedFit {
            record: &record,
            summary: fit.map(|f| f.summary.as_str()).unwrap_or_default(),
            adapter: matrix.as_deref().map(|m| (m, leads.as_deref())),
        },
    )
}

/// The adapter saved as these rows: its matrix and lead words.
fn from_saved(saved: Option<(Vec<u8>, Option<String>)>) -> Option<QueryAdapter> {
    let (blob, leads) = saved?;
    let adapter = QueryAdapter::from_blob(&blob)?;
    Some(match leads {
        Some(words) => adapter.led_by(words.split_whitespace().map(str::to_string).collect()),
        None => adapter,
    })
}

/// The adapter of `model`, if the index has one. `KEN_QUERY_ADAPTER=0`
/// ignores it (to compare).
pub fn load(store: &Store, model: &str) -> Option<QueryAdapter> {
    if !crate::config::settings().query_adapter {
        return None;
    }
    from_saved(store.query_adapter(model))
}

/// How many pairs the adapter of `model` was fitted on (0: too few for one),
/// if a fit was attempted.
pub fn fitted_pairs(store: &Store, model: &str) -> Option<usize> {
    last_fit(store, model).ok().flatten().map(|(_, pairs, _)| pairs)
}

/// How the saved fit was chosen ([`Fit::summary`]), if one was made.
pub fn summary(store: &Store) -> Option<String> {
    store.query_adapter_summary().filter(|s| !s.is_empty())
}

/// Identifies the saved fit, so a long-lived searcher notices a new one.
pub fn fingerprint(store: &Store) -> Option<String> {
    store.query_adapter_record().ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The question and code of the first chunk of `text` in `language`.
    fn question_and_code_in(language: &str, text: &str) -> Option<(String, String)> {
        let language = crate::source::lang::by_name(language).unwrap();
        let chunks = crate::source::chunk::chunk_source(Some(language), text, &Default::default()).unwrap();
        let doc = crate::source::chunk::parse_doc_lines(chunks[0].doc_label().as_deref(), 1);
        question_and_code(&chunks[0].text, &doc)
    }

    fn question(language: &str, text: &str) -> Option<String> {
        question_and_code_in(language, text).map(|(q, _)| q)
    }

    #[test]
    fn doc_comments_of_each_style_become_a_question_and_code_without_them() {
        let rust = "/// Look for a flag by its short name.\n/// More detail.\n#[inline]\nfn find_short(c: u8) -> Option<Flag> {\n    None\n}";
        let (q, code) = question_and_code_in("rust", rust).unwrap();
        assert_eq!(q, "Look for a flag by its short name.");
        assert!(
            code.starts_with("#[inline]\nfn find_short") && !code.contains("///"),
            "{code}"
        );

        let java = "/**\n * Get the current TagSet for this Parser. Which is the default.\n *\n * @return the tag set\n */\npublic TagSet tagSet() {\n    return tagSet;\n}";
        assert_eq!(
            question("java", java).as_deref(),
            Some("Get the current TagSet for this Parser.")
        );
        assert!(question_and_code_in("java", java)
            .unwrap()
            .1
            .starts_with("public TagSet"));

        let c = "/* Convert argument vector to a string. */\nchar *\ncmd_stringify_argv(int argc, char **argv)\n{\n}";
        assert_eq!(
            question("c", c).as_deref(),
            Some("Convert argument vector to a string.")
        );
        let go = "// Bind parses the request body\n// as JSON.\nfunc (c *Ctx) Bind() error {\n\treturn nil\n}";
        assert_eq!(
            question("go", go).as_deref(),
            Some("Bind parses the request body as JSON.")
        );

        let python = "@decorator\ndef parse_config(\n    path,\n):\n    \"\"\"Read the configuration file\n    at path.\n\n    Returns a dict.\n    \"\"\"\n    return {}\n";
        let (q, code) = question_and_code_in("python", python).unwrap();
        assert_eq!(q, "Read the configuration file at path.");
        assert_eq!(code, "@decorator\ndef parse_config(\n    path,\n):\n    return {}");
        let one_line = "def f(x):\n    r'''Square the given number.'''\n    return x * x";
        assert_eq!(
            question("python", one_line).as_deref(),
            Some("Square the given number.")
        );
        let ruby = "# Renders the page as HTML.\ndef render\n  html\nend\n";
        assert_eq!(question("ruby", ruby).as_deref(), Some("Renders the page as HTML."));
        let elixir = "@doc \"\"\"\nParses the given string.\n\"\"\"\ndef parse(s), do: s\n";
        assert_eq!(question("elixir", elixir).as_deref(), Some("Parses the given string."));
    }

    #[test]
    fn definitions_without_a_doc_of_three_words_give_no_pair() {
        assert_eq!(question("rust", "fn main() {\n    run();\n}"), None);
        assert_eq!(question("rust", "/// Runs.\nfn run() {}"), None);
        assert_eq!(question("rust", "// only a comment, with no code after it\n"), None);
        assert_eq!(question("c", "#include <stdio.h>\nint main(void) {}"), None);
        assert_eq!(
            question("python", "def f():\n    return \"\"\"not a docstring\"\"\""),
            None
        );
        assert_eq!(
            question("go", "// A licence header of many words.\n\nfunc f() {}"),
            None,
            "a blank line away"
        );
    }

    /// Unit vectors of `dims` dimensions from a fixed generator.
    fn unit_vectors(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut state = seed;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..dims).map(|_| next()).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect()
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// `v` with its coordinates rotated by `by`: a map the identity does not know.
    fn rotated(v: &[f32], by: usize) -> Vec<f32> {
        (0..v.len()).map(|i| v[(i + by) % v.len()]).collect()
    }

    /// `n` questions and, as their code, the questions rotated by `by`.
    fn rotation_pairs(n: usize, dims: usize, by: usize, seed: u64) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let questions = unit_vectors(n, dims, seed);
        let targets = questions.iter().map(|q| rotated(q, by)).collect();
        (questions, targets)
    }

    /// Each vector times `own`, plus itself rotated `by`, normalised.
    fn blended(vectors: &[Vec<f32>], own: f32, by: usize) -> Vec<Vec<f32>> {
        vectors
            .iter()
            .map(|v| {
                let mut t: Vec<f32> = v.iter().zip(rotated(v, by)).map(|(a, b)| own * a + b).collect();
                normalise(&mut t);
                t
            })
            .collect()
    }

    #[test]
    fn the_fit_learns_a_map_that_holds_for_unseen_questions() {
        let dims = 12;
        let rotate = |v: &Vec<f32>| rotated(v, 1);
        let (questions, targets) = rotation_pairs(300, dims, 1, 7);
        let adapter = QueryAdapter::ridge(&questions, &targets).unwrap();
        for unseen in unit_vectors(20, dims, 99) {
            let carried = adapter.carry(&unseen);
            assert!(cosine(&carried, &rotate(&unseen)) > 0.99, "{carried:?}");
            // A search's vector is halfway between the query and its image.
            let used = adapter.apply(&unseen);
            assert!((cosine(&used, &used) - 1.0).abs() < 1e-5, "normalised");
            let (to_image, to_query) = (cosine(&used, &carried), cosine(&used, &unseen));
            assert!(
                (to_image - to_query).abs() < 1e-4 && to_image > 0.5,
                "{to_image} {to_query}"
            );
        }
        // Pairs that already agree leave queries where they are.
        let same = QueryAdapter::ridge(&questions, &questions).unwrap();
        let q = &unit_vectors(1, dims, 5)[0];
        assert!(cosine(&same.apply(q), q) > 0.9999);
        // A vector of another dimension passes unchanged.
        assert_eq!(same.apply(&[1.0, 0.0]), vec![1.0, 0.0]);
        assert_eq!(QueryAdapter::ridge(&[], &[]), None);
    }

    #[test]
    fn the_contrastive_fit_ranks_held_out_code_higher_step_by_step() {
        // Code that half says what its question says: the query as typed
        // finds some, a map finds more.
        let questions = unit_vectors(200, 16, 11);
        let targets = blended(&questions, 0.3, 3);
        let negatives = Negatives {
            vectors: unit_vectors(100, 16, 12),
            own: Vec::new(),
        };
        let (train, held): (Vec<usize>, Vec<usize>) = (0..200).partition(|i| i % 5 != 4);
        let pick = |of: &[Vec<f32>]| -> Vec<Vec<f32>> { train.iter().map(|&i| of[i].clone()).collect() };
        let mut mrrs = vec![held_out_mrr(None, &held, &questions, &targets, &negatives)];
        contrastive(
            &pick(&questions),
            &pick(&targets),
            &negatives.vectors,
            &[],
            60,
            |step, adapter| {
                assert_eq!(step % CHECK_EVERY, 0);
                mrrs.push(held_out_mrr(Some(&adapter), &held, &questions, &targets, &negatives));
            },
        )
        .unwrap();
        assert_eq!(mrrs.len(), 7, "checked every {CHECK_EVERY} steps");
        assert!(mrrs.windows(2).all(|w| w[1] >= w[0]), "{mrrs:?}");
        assert!(mrrs[6] > 1.3 * mrrs[0], "{mrrs:?}");
    }

    #[test]
    fn a_pairs_own_stored_chunk_is_the_answer_not_a_negative() {
        // Each question's stored chunk (its doc comment and all) sits right
        // at it; its code without the comment a little away.
        let questions = unit_vectors(40, 16, 31);
        let targets = blended(&questions, 1.0 / 0.2, 1);
        let held: Vec<usize> = (0..40).collect();
        let mut negatives = Negatives {
            vectors: questions.clone(),
            own: Vec::new(),
        };
        let unmasked = held_out_mrr(None, &held, &questions, &targets, &negatives);
        assert!(unmasked <= 0.5, "{unmasked}");
        negatives.own = (0..40).map(Some).collect();
        let masked = held_out_mrr(None, &held, &questions, &targets, &negatives);
        assert!(masked > 0.9, "{masked}");
        // Training leaves it out too: the loss can reach the code.
        let mut last = None;
        contrastive(&questions, &targets, &negatives.vectors, &negatives.own, 30, |_, a| {
            last = Some(a)
        })
        .unwrap();
        let trained = held_out_mrr(last.as_ref(), &held, &questions, &targets, &negatives);
        assert!(trained >= masked, "{trained} < {masked}");
    }

    #[test]
    fn the_held_out_pairs_choose_the_fit_or_none() {
        let dims = 16;
        let rotate = |v: &Vec<f32>| rotated(v, 3);
        let (questions, targets) = rotation_pairs(200, dims, 3, 21);
        let negatives = Negatives {
            vectors: unit_vectors(100, dims, 22),
            own: Vec::new(),
        };
        let fit = fit(&questions, &targets, &negatives, Method::Chosen);
        let adapter = fit.adapter.expect("a map that the identity is not");
        let unseen = &unit_vectors(1, dims, 23)[0];
        assert!(
            cosine(&adapter.apply(unseen), &rotate(unseen)) > cosine(unseen, &rotate(unseen)) + 0.3,
            "{}",
            fit.summary
        );
        assert!(fit.summary.contains("held-out MRR"), "{}", fit.summary);
        // Ridge alone, when asked for.
        let ridge = super::fit(&questions, &targets, &negatives, Method::Ridge);
        assert!(
            ridge.adapter.is_some() && ridge.summary.starts_with("ridge: held-out MRR"),
            "{}",
            ridge.summary
        );
        // Questions already at their code: no map beats them as typed.
        let same = super::fit(&questions, &questions, &negatives, Method::Chosen);
        assert!(same.adapter.is_none(), "{}", same.summary);
        assert!(same.summary.starts_with("no map"), "{}", same.summary);
    }

    #[test]
    fn a_question_is_carried_only_when_a_fitted_sentence_began_with_its_word() {
        assert_eq!(lead_word("Returns the flag.").as_deref(), Some("return"));
        assert_eq!(lead_word("`caplog` fixture").as_deref(), Some("caplog"));
        assert_eq!(
            lead_word("Class of the node").as_deref(),
            Some("class"),
            "no `s` off a double s"
        );
        assert_eq!(lead_word("Has it").as_deref(), Some("has"), "short words stay whole");
        assert_eq!(lead_word("'.[' replaced"), None);
        assert_eq!(lead_word(""), None);

        let map = QueryAdapter::ridge(&unit_vectors(20, 4, 1), &unit_vectors(20, 4, 2)).unwrap();
        assert!(
            map.carries("caplog fixture does not restore the level"),
            "no lead words: any question"
        );
        assert!(!map.carries("parse config"), "two words are not a question");
        let led = map.led_by(lead_words(["Returns the flag of a name.", "Check the token twice."]));
        assert!(led.carries("return the metadata of a flag"));
        assert!(led.carries("Checks whether the token expired"));
        assert!(!led.carries("Wrong legend values of large ranges"));
        assert!(!led.carries("why is the token checked twice"));
    }

    #[test]
    fn an_adapter_is_saved_loaded_and_refitted_only_after_the_branch_drifts() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_for_write(dir.path()).unwrap();
        let conn = &store;
        assert_eq!(load(conn, "m/text3"), None, "none yet");
        assert!(!is_current(conn, "m/text3", Method::Ridge, 1000).unwrap());
        let questions = unit_vectors(50, 8, 1);
        let adapter = QueryAdapter::ridge(&questions, &unit_vectors(50, 8, 2))
            .unwrap()
            .led_by(lead_words(["Returns it.", "Parses it."]));
        let fit = Fit {
            adapter: Some(adapter.clone()),
            summary: "ridge: held-out MRR 0.100 → 0.200".to_string(),
        };
        save(conn, "m/text3", Method::Ridge, 1000, 50, Some(&fit)).unwrap();
        let loaded = load(conn, "m/text3").unwrap();
        assert_eq!(loaded, adapter);
        assert!(loaded.carries("parse the config file") && !loaded.carries("render the config file"));
        assert_eq!(summary(conn).as_deref(), Some(fit.summary.as_str()));
        assert_eq!(load(conn, "other/text3"), None);
        assert_eq!(fitted_pairs(conn, "m/text3"), Some(50));
        assert!(is_current(conn, "m/text3", Method::Ridge, 1200).unwrap());
        assert!(
            !is_current(conn, "m/text3", Method::Ridge, 1300).unwrap(),
            "30% more contents"
        );
        assert!(!is_current(conn, "m/text3", Method::Ridge, 700).unwrap(), "30% fewer");
        assert!(
            !is_current(conn, "other/text3", Method::Ridge, 1000).unwrap(),
            "another model"
        );
        assert!(
            !is_current(conn, "m/text3", Method::Chosen, 1000).unwrap(),
            "another method"
        );
        let before = fingerprint(conn);
        save(conn, "m/text3", Method::Ridge, 1300, 12, None).unwrap();
        assert_eq!(load(conn, "m/text3"), None, "too few pairs: the old adapter is gone");
        assert_eq!(fitted_pairs(conn, "m/text3"), Some(12));
        assert_eq!(summary(conn), None);
        assert_ne!(fingerprint(conn), before);
        // A record of the old way of fitting does not count as a fit.
        store.clear_meta().unwrap();
        store
            .set_meta(crate::store::MetaKey::OldQueryAdapter(1), "m/text3 1000 50")
            .unwrap();
        assert!(!is_current(conn, "m/text3", Method::Ridge, 1000).unwrap());
        save(conn, "m/text3", Method::Ridge, 1000, 50, Some(&fit)).unwrap();
        let keys = store.meta_keys().unwrap();
        assert_eq!(keys, ["query_adapter_fit", "query_adapter_leads", "query_adapter_v4"]);
    }
}
