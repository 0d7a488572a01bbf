//! The searching tools' results as a client reads them: hits, their
//! explanation, and how sure the list is.

use rmcp::schemars;
use serde::{Deserialize, Serialize};

use super::index::Freshness;
use crate::search;
use crate::search::confidence;

/// How results are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// Lexical and vector candidates, each scored on both sides and combined (the default).
    #[default]
    Hybrid,
    /// Embedding similarity only.
    Semantic,
    /// BM25 over code-aware terms only.
    Lexical,
}

impl From<SearchMode> for search::SearchMode {
    fn from(mode: SearchMode) -> search::SearchMode {
        match mode {
            SearchMode::Hybrid => search::SearchMode::Hybrid,
            SearchMode::Semantic => search::SearchMode::Semantic,
            SearchMode::Lexical => search::SearchMode::Lexical,
        }
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Hit {
    /// `project`, or the knowledge base the result comes from.
    pub base: String,
    /// The workspace member the result is in (only in a workspace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Relative to the base's root.
    pub path: String,
    /// The file's absolute path, for results from a knowledge base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absolute_path: Option<String>,
    pub start_line: u32,
    pub end_line: u32,
    pub kind: String,
    pub symbol: Option<String>,
    pub language: String,
    /// Ranks the list (higher first). Its scale depends on the mode: BM25 evidence in lexical,
    /// cosine similarity in semantic and find_similar, both fused in hybrid; compare scores
    /// within one list only.
    pub score: f64,
    /// The chunk's code (omitted by codebase_peek).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Enclosing definitions' signatures (e.g. the class of a method).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Why the result ranks where it does (with `explain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
    /// The same code elsewhere: identical chunks, listed here instead of
    /// ranked again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<Location>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SearchOutput {
    /// How likely the results are to answer the query; when low, `note`
    /// says so and why (stop searching, or ask otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Confidence>,
    pub results: Vec<Hit>,
    /// Set when the search could not do everything asked (e.g. lexical only,
    /// an index run in progress).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// What the index reflects: branch, commit, when indexed, pending changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<Freshness>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    High,
    Medium,
    Low,
}

impl From<confidence::Level> for Level {
    fn from(level: confidence::Level) -> Level {
        match level {
            confidence::Level::High => Level::High,
            confidence::Level::Medium => Level::Medium,
            confidence::Level::Low => Level::Low,
        }
    }
}

/// How sure ken is that the results answer the query.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Confidence {
    pub level: Level,
    /// 0..1: the largest IDF-weighted share of the query's terms one of the
    /// first results holds, times the share the index has at all (1 for a
    /// name defined in the index).
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

impl From<confidence::Confidence> for Confidence {
    fn from(c: confidence::Confidence) -> Confidence {
        Confidence {
            level: c.level.into(),
            score: c.score,
            note: c.note,
            signals: c.signals.map(Signals::from),
        }
    }
}

/// What the confidence is made of.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Signals {
    /// The largest IDF-weighted share of the query's terms one of the first results holds.
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

impl From<confidence::Signals> for Signals {
    fn from(s: confidence::Signals) -> Signals {
        Signals {
            coverage: s.coverage,
            absent: s.absent,
            defines_name: s.defines_name,
            cosine: s.cosine,
            cosine_z: s.cosine_z,
            terms: s.terms,
            held: s.held,
            total: s.total,
        }
    }
}

/// Lines of a file, 1-based and inclusive.
#[derive(Debug, Clone, Default, Serialize, PartialEq, schemars::JsonSchema)]
pub struct Location {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
}

impl From<search::Location> for Location {
    fn from(l: search::Location) -> Location {
        Location {
            path: l.path,
            start_line: l.start_line,
            end_line: l.end_line,
        }
    }
}

/// How a hit's score was made: the sides of the fusion, then each factor
/// of the rerank and of the per-file spread. `score` = `fused` × the factors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Explain {
    /// BM25 of the chunk for the query's terms (0: none of them in it).
    pub bm25: f64,
    /// The lexical side: BM25 over the best candidate's, 0..1.
    pub lexical: f64,
    /// Cosine similarity of the chunk's vector to the query's (hybrid: after the feedback; none: no vector, or lexical mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f32>,
    /// The semantic side: that similarity scaled by the candidates' spread, 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic: Option<f64>,
    /// Cosine similarity of the nearest of the chunk's signature vectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_cosine: Option<f32>,
    /// The signature side, scaled like the semantic side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<f64>,
    /// The sides combined (`KEN_FUSION`, `KEN_FUSION_WEIGHTS`).
    pub fused: f64,
    /// The weight of each side in `fused`, in hybrid mode with vectors:
    /// `KEN_FUSION_WEIGHTS`, else the model's (BM25's times its lexical
    /// weight); BM25's times 1.4 for a query the query adapter leaves as typed,
    /// and up to 3 times for a long one it does not carry (terms / 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    /// The factors applied after the fusion, in order.
    pub factors: Vec<ExplainFactor>,
}

impl From<search::Explain> for Explain {
    fn from(e: search::Explain) -> Explain {
        Explain {
            bm25: e.bm25,
            lexical: e.lexical,
            cosine: e.cosine,
            semantic: e.semantic,
            signature_cosine: e.signature_cosine,
            signature: e.signature,
            fused: e.fused,
            weights: e.weights.map(Weights::from),
            factors: e.factors.into_iter().map(ExplainFactor::from).collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ExplainFactor {
    pub reason: String,
    pub factor: f64,
}

impl From<search::ExplainFactor> for ExplainFactor {
    fn from(f: search::ExplainFactor) -> ExplainFactor {
        ExplainFactor {
            reason: f.reason,
            factor: f.factor,
        }
    }
}

/// The weight of each side of the fusion (lexical, semantic, signature).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Weights {
    pub lexical: f64,
    pub semantic: f64,
    pub signature: f64,
}

impl From<search::Weights> for Weights {
    fn from(w: search::Weights) -> Weights {
        Weights {
            lexical: w.lexical,
            semantic: w.semantic,
            signature: w.signature,
        }
    }
}
