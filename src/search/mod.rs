//! Answering a query: lexical candidates from BM25 plus exact symbol-name
//! matches, then a deterministic rerank (definitions and exact names first,
//! tests and docs after source unless asked for), overlap removal and a cap
//! of chunks per file.

pub mod confidence;
pub mod kb;

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use globset::GlobMatcher;
use rusqlite::functions::FunctionFlags;
use rusqlite::types::Value;
use rusqlite::{params_from_iter, OptionalExtension};
use serde::Serialize;

use crate::embed::adapter::QueryAdapter;
use crate::embed::{Embedder, InputKind};
use crate::search::confidence::{Confidence, Evidence, TermStat};
use crate::source::git;
use crate::source::lexical::{self, QueryTerms};
use crate::source::paths::{is_changelog_path, is_config_language, is_docs_path, is_prose_kind, is_test_path};
use crate::store::vectors::VectorIndex;
use crate::store::Store;

/// BM25 column weights: symbol name, path, body.
const BM25_WEIGHTS: (f64, f64, f64) = (6.0, 2.0, 1.0);
/// Lexical candidates fetched per requested result, before the rerank.
const OVERFETCH: usize = 8;
/// In hybrid mode the vector side goes this many times deeper than the
/// lexical side: HNSW neighbours are cheap, and each is scored on both sides.
const VECTOR_DEPTH_FACTOR: usize = 2;
/// How deep the lexical ranking goes when filters reject most of the top.
const MAX_LEXICAL_DEPTH: usize = 20_000;
/// Terms in more than this share of chunks are left out of the lexical
/// match when rarer terms remain (they cost the most and rank the least).
const COMMON_TERM_SHARE: f64 = 0.05;
/// Commoner terms join the match while the rows it visits stay under this,
const MATCH_ROW_BUDGET: f64 = 10_000.0;
/// unless they are in more than this share of chunks (words like `return`:
/// they would match everything and rank nothing).
const MATCHED_TERM_MAX_SHARE: f64 = 0.25;
/// A chunk of a file already listed competes at this share of its score
/// (see `diversify`): a soft per-file limit. Chosen on the public eval
/// (BENCHMARKS.md): a hard limit of 3 per file cut chunk hits; a factor that
/// compounded per listed chunk (×0.95 each) buried the fourth and fifth
/// functions of the right file; a stronger one traded chunk hits for file recall.
const SAME_FILE_FACTOR: f64 = 0.9;

/// Why a `max_per_file` of 0 is refused (the CLI and the MCP tools say so).
pub const MAX_PER_FILE_AT_LEAST_ONE: &str = "must be at least 1 (1 lists each file once)";

/// A search request. Filters apply before ranking.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub query: String,
    pub limit: usize,
    /// Glob over root-relative paths (`src/**/*.rs`, `*.py`); a plain
    /// directory (`src/auth`) means everything under it.
    pub path_glob: Option<String>,
    pub language: Option<String>,
    pub kind: Option<String>,
    /// A hard limit per file; without it `diversify`'s decay spreads results.
    pub max_per_file: Option<usize>,
    pub mode: SearchMode,
    /// Attach an [`Explain`] to every hit.
    pub explain: bool,
}

impl SearchRequest {
    pub fn new(query: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            limit: 10,
            path_glob: None,
            language: None,
            kind: None,
            max_per_file: None,
            mode: SearchMode::default(),
            explain: false,
        }
    }
}

/// One ranked result.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SearchHit {
    /// Path relative to the indexed root, `/`-separated.
    pub path: String,
    /// 1-based, inclusive.
    pub start_line: u32,
    pub end_line: u32,
    pub score: f64,
    pub kind: String,
    pub symbol: Option<String>,
    pub language: String,
    /// The lines of the chunk that best match the query.
    pub snippet: String,
    /// Signatures of enclosing definitions (e.g. the class of a method).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Why the hit ranks where it does (only when asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
    /// The same text elsewhere: chunks identical to this one, which rank
    /// here once instead of filling the list with copies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<Location>,
    #[serde(skip)]
    pub content: String,
    #[serde(skip)]
    pub chunk_id: i64,
    /// The hash of the chunk's text (0: unknown).
    #[serde(skip)]
    pub content_hash: i64,
}

/// Lines of a file, 1-based and inclusive.
#[derive(Debug, Clone, Default, Serialize, PartialEq, schemars::JsonSchema)]
pub struct Location {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
}

/// How a hit's score was made: the sides of the fusion, then each factor
/// of the rerank and of the per-file spread. `score` = `fused` × the factors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Explain {
    /// BM25 of the chunk for the query's terms (0: none of them in it).
    pub bm25: f64,
    /// The lexical side: BM25 over the best candidate's, 0..1.
    pub lexical: f64,
    /// Cosine similarity of the chunk's vector to the query's (none: no vector, or lexical mode).
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
    /// weight); BM25's times 1.4 for a query the query adapter leaves as typed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    /// The factors applied after the fusion, in order.
    pub factors: Vec<ExplainFactor>,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ExplainFactor {
    pub reason: String,
    pub factor: f64,
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
            chunk: SpreadScale::of(candidates, |c| c.similarity),
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
        self.chunk.score(c.similarity)
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
            cosine: c.similarity.filter(|_| vectors),
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

/// Where one search spent its time (`Searcher::last_phases`, `ken bench query`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SearchPhases {
    /// The lexical side, with the query embedding running beside it.
    pub lexical: Duration,
    /// Vector neighbours: the HNSW search and their chunks.
    pub vector: Duration,
    /// BM25 of the candidates only the vectors found.
    pub rescore: Duration,
    /// Reading the candidates with their stored vectors.
    pub load: Duration,
    /// Fusion, rerank, the per-file spread and snippets.
    pub rank: Duration,
}

pub struct Searcher {
    store: Store,
    branch: String,
    /// The query embedder and vector index, loaded on the first query that needs them.
    /// Only a successful load is kept: a failure (no vectors yet, no model)
    /// is retried by the next query, which may come after `ken index`.
    semantic: OnceLock<SemanticSide>,
    notice: std::sync::Mutex<Option<String>>,
    fusion: Fusion,
    /// `KEN_FUSION_WEIGHTS` is set: the embedder's lexical weight is not applied.
    fusion_weights_set: bool,
    /// Benchmarks only: rank with FTS5's own `bm25()`, the baseline of `ken_bm25`.
    stock_bm25: std::sync::atomic::AtomicBool,
    last_phases: std::sync::Mutex<SearchPhases>,
    /// Set by a server that loads the model in the background: while it is
    /// true, a hybrid search of this searcher answers lexically (and says
    /// so) instead of loading the model itself.
    model_loading_elsewhere: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// What semantic search needs: the embedder of the index's vectors and the
/// vector index file.
struct SemanticSide {
    embedder: Box<dyn Embedder>,
    vectors: VectorIndex,
    dimensions: usize,
    /// Identity of the vector file opened (a republished file is a new inode).
    stamp: Option<(u64, std::time::SystemTime)>,
    /// Carries query vectors toward the code they describe (`adapter`), with
    /// the fit it comes from.
    adapter: Option<QueryAdapter>,
    adapter_fit: Option<String>,
    /// The vectors of the latest queries: agents often repeat a query with
    /// other filters, and the model is the slowest part of a search.
    recent_queries: std::sync::Mutex<std::collections::VecDeque<(String, Vec<f32>)>>,
}

/// How many query vectors a searcher remembers.
const RECENT_QUERY_VECTORS: usize = 64;

impl SemanticSide {
    /// Whether the index has a query adapter and it leaves `query` as typed:
    /// not worded like the repository's doc comments (an issue title, a "why"
    /// question, keywords), which the bare model matches to code less well
    /// than BM25 does.
    fn passes_by(&self, query: &str) -> bool {
        self.adapter.as_ref().is_some_and(|adapter| !adapter.carries(query))
    }

    fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        let recent = || self.recent_queries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, vector)) = recent().iter().find(|(q, _)| q == query) {
            return Ok(vector.clone());
        }
        let text = crate::embed::text::query_text(query);
        // Bounded: a remote provider answers within its query budget or the
        // search goes on lexically, saying why.
        let vector = self.embedder.embed_now(text.as_ref(), InputKind::Query)?;
        let vector = match &self.adapter {
            Some(adapter) if adapter.carries(query) => adapter.apply(&vector),
            _ => vector,
        };
        let mut recent = recent();
        if recent.len() >= RECENT_QUERY_VECTORS {
            recent.pop_front();
        }
        recent.push_back((query.to_string(), vector.clone()));
        Ok(vector)
    }
}

fn vector_file_stamp(store: &Store, model: &str) -> Option<(u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(crate::store::vectors::vectors_path(&store.dir, model)).ok()?;
    Some((meta.ino(), meta.modified().ok()?))
}

#[derive(Default)]
struct Candidate {
    /// BM25 score (0 when only the vector side found the chunk).
    bm25: f64,
    /// Cosine similarity to the query, when the vector side found the chunk.
    similarity: Option<f32>,
    /// Cosine similarity of the chunk's signature vector to the query
    /// (the nearest of `semantic::signature_texts`), when it has one.
    signature_similarity: Option<f32>,
    /// Whether the chunk defines one of the query's identifiers, and how well.
    defines: Defines,
    /// Found only by the vector side, below the lexical side's depth.
    deep: bool,
    /// The definitions a query's identifiers name, when they are among
    /// several packed in the chunk: the result is narrowed to their lines,
    /// from the first to the last (overloads of one name stay together).
    exact_member: Option<Member>,
}

/// A candidate's chunk as read from the index, with its stored vectors (raw)
/// until the query vector is there to compare them with.
struct CandidateRow {
    hit: SearchHit,
    vector: Option<Vec<u8>>,
    signature: Option<Vec<u8>>,
}

/// A definition inside a packed chunk: name, first and last line.
type Member = (String, u32, u32);

/// Whether a candidate defines an identifier of the query (its joined key,
/// [`lexical::joined_key`], names one of the chunk's definitions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Defines {
    #[default]
    No,
    /// Defines it as asked: spelled as typed (or no definition is), the
    /// type itself rather than an impl of it, of a definition cut in several
    /// chunks the part that declares it.
    Asked,
    /// Defines it, but another definition among the candidates is the one
    /// asked for: why ([`outranked_definitions`]).
    Outranked(&'static str),
}

impl Defines {
    fn any(self) -> bool {
        self != Defines::No
    }
}

/// A definition of a query identifier, as `chunk_symbols` has it.
struct SymbolRow {
    chunk_id: i64,
    file_id: i64,
    /// The chunk's kind (`impl` for an impl block or an extension).
    kind: String,
    language: String,
    member: Member,
}

impl SymbolRow {
    /// A definition in code, not a heading of prose or a key of a config file.
    fn is_code(&self) -> bool {
        !is_prose_kind(&self.kind) && !is_config_language(&self.language)
    }
}

/// How results are found.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
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

/// Chunk ids with their cosine similarity to the query, best first.
type Neighbours = Vec<(i64, f32)>;

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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
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

    /// From `KEN_FUSION` (`convex` | `rrf`), `KEN_FUSION_WEIGHTS`
    /// (`lexical,semantic[,signature]`, default `1,1,1`) and `KEN_RRF_K` (default 60).
    pub fn from_env() -> Result<Fusion> {
        Fusion::from_vars(crate::setting)
    }

    /// Whether `KEN_FUSION_WEIGHTS` sets the weights (else each model's
    /// lexical weight applies).
    fn weights_set_in_env() -> bool {
        crate::setting("KEN_FUSION_WEIGHTS").is_some()
    }

    /// The fusion that the settings `var` gives say.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Fusion> {
        let weights = match var("KEN_FUSION_WEIGHTS") {
            None => Weights::default(),
            Some(v) => parse_weights(&v).with_context(|| {
                format!(
                    "KEN_FUSION_WEIGHTS must be two or three non-negative numbers \
                     `lexical,semantic[,signature]` (e.g. `1,1,1`), not `{v}`"
                )
            })?,
        };
        match var("KEN_FUSION").as_deref().map(str::trim) {
            None | Some("convex") => Ok(Fusion::Convex(weights)),
            Some("rrf") => {
                let k = match var("KEN_RRF_K") {
                    None => 60.0,
                    Some(v) => v
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|k| *k >= 0.0)
                        .with_context(|| format!("KEN_RRF_K must be a non-negative number, not `{v}`"))?,
                };
                Ok(Fusion::Rrf { k, weights })
            }
            Some(other) => bail!("KEN_FUSION must be `convex` or `rrf`, not `{other}`"),
        }
    }
}

/// `lexical,semantic[,signature]`: non-negative numbers, not all zero; the
/// signature weight defaults to 1.
fn parse_weights(text: &str) -> Option<Weights> {
    let numbers: Vec<f64> = text
        .split(',')
        .map(|n| n.trim().parse::<f64>().ok().filter(|w| *w >= 0.0 && w.is_finite()))
        .collect::<Option<_>>()?;
    let weights = match numbers[..] {
        [lexical, semantic] => Weights {
            lexical,
            semantic,
            ..Weights::default()
        },
        [lexical, semantic, signature] => Weights {
            lexical,
            semantic,
            signature,
        },
        _ => return None,
    };
    (numbers.iter().sum::<f64>() > 0.0).then_some(weights)
}

/// How much more the lexical side weighs in hybrid fusion for a query the
/// index's adapter leaves as typed ([`SemanticSide::passes_by`]). The map
/// carries questions worded like the repository's doc comments, and on those
/// the sides weigh the same; the others meet the bare model, which is weaker
/// than BM25 on them (swe-public: ken lexical file R@5 .721, semantic .621).
/// Measured on the public eval: swe file R@1 .519 → .544, R@5 .758 → .771,
/// chunk H@1 .225 → .250; doc the same but chunk H@1 .417 → .410 and H@5
/// .740 → .737 (BENCHMARKS.md "An identifier in a question, and BM25 for what
/// the adapter passes by", with 1.3, 1.5 and 2).
const UNCARRIED_LEXICAL_WEIGHT: f64 = 1.4;

/// Score factors of the rerank for what is not source code, each measured on
/// the public eval's swe set (tests, changelogs, prose and config files
/// outranked the source files an issue is about) and lifted, or softened for
/// tests, when the query asks for that kind of file.
const TEST_FACTOR: f64 = 0.3;
/// A query that says "test" often means the product's own tests (pytest's
/// issues do), so asking softens the demotion instead of lifting it.
const TEST_FACTOR_ASKED: f64 = 0.5;
const DOCS_FOLDER_FACTOR: f64 = 0.7;
const PROSE_FACTOR: f64 = 0.35;
const CONFIG_FACTOR: f64 = 0.5;
const CHANGELOG_FACTOR: f64 = 0.3;
const MODULE_FACTOR: f64 = 0.8;
/// A question of several words asks what code does, which a function
/// answers: a type's fields and header share its words but rarely are the
/// answer (measured on the public eval, see BENCHMARKS.md "Types after code
/// for questions"). Names and keywords (one to three words) are untouched,
/// and so is a question that says "class" or "struct": those words are as
/// often about the classes the code handles (swe pytest-10356).
const TYPE_FACTOR: f64 = 0.9;
/// A definition of the identifier the query is (`parse_config`), or one of
/// a few words names: that is what was asked for.
const EXACT_SYMBOL_FACTOR: f64 = 3.0;
/// In a question of several words, an identifier is one clue among the
/// words: the answer is as often code that uses it ("Get the TreeBuilder
/// currently in use" asks for `getTreeBuilder`, not the class). Measured on
/// the public eval: hybrid file R@1 swe .506 → .519, doc .717 → .723; lexical
/// swe .512 → .525; no metric lower in any set (BENCHMARKS.md "An identifier
/// in a question, and BM25 for what the adapter passes by").
const EXACT_SYMBOL_IN_QUESTION_FACTOR: f64 = 2.0;
/// What a definition of a query identifier counts for when another one is
/// the one asked for ([`outranked_definitions`]): as any other candidate, so
/// the one asked for (BM25 at least half the best's, times
/// [`EXACT_SYMBOL_FACTOR`]) comes first.
const OUTRANKED_DEFINITION_FACTOR: f64 = 1.0;
const TYPE_KINDS: &[&str] = &[
    "struct",
    "class",
    "interface",
    "type",
    "enum",
    "trait",
    "impl",
    "union",
    "object",
];
/// A chunk that holds code quoted in the query, verbatim, or lies in a file
/// the query names (swe: `method = builtin_str(method)` rose from 8th to 1st).
const FRAGMENT_FACTOR: f64 = 3.0;
/// A definition whose name the query says in words (`toRgb` for "convert to
/// a RGB color"): an undocumented function otherwise loses to a documented
/// neighbour that shares the question's words. Measured on the public eval:
/// doc cH@1 .303 → .333 at 1.1; at 1.2 and more, issue titles that name the API
/// they use (`xfail`, `default_headers`) ranked it above the file to fix.
const NAME_SAID_FACTOR: f64 = 1.1;

/// Query terms with their document frequencies.
type Terms<'q> = Vec<(&'q String, f64)>;

/// The query's very common terms (with document frequency), left out of the
/// lexical match, and the chunk total their IDF is computed against.
struct CommonTerms<'q> {
    terms: Terms<'q>,
    total: f64,
}

/// Which kinds of non-source files the query asks for (stemmed terms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct QueryIntent {
    tests: bool,
    docs: bool,
    config: bool,
    changelog: bool,
    /// A question of several words, not a name or a few keywords.
    question: bool,
}

impl QueryIntent {
    fn of(q: &QueryTerms, text: &str) -> QueryIntent {
        let any = |pred: &dyn Fn(&str) -> bool| q.terms.iter().any(|t| pred(t));
        QueryIntent {
            tests: any(&|t| t.starts_with("test") || t == "spec"),
            docs: any(&|t| ["doc", "readm", "document", "guid"].contains(&t)),
            config: any(&|t| {
                t.starts_with("config")
                    || t.starts_with("setting")
                    || ["toml", "yaml", "yml", "json", "ini"].contains(&t)
            }),
            changelog: any(&|t| t == "changelog" || t == "news" || t.starts_with("releas")),
            question: lexical::is_question(text),
        }
    }
}

impl Searcher {
    /// Opens the index of `root` (stored in `index_dir`) for searching the
    /// root's current branch.
    pub fn open(root: &Path, index_dir: &Path) -> Result<Searcher> {
        let store = Store::open_for_read(index_dir)?;
        crate::store::bm25::register(&store.conn)?;
        let branch = git::head(root).catalog_key();
        let has_catalog = || -> Result<bool> {
            let sql = "SELECT EXISTS (SELECT 1 FROM catalog WHERE branch = ?1)";
            Ok(store.conn.query_row(sql, [&branch], |r| r.get(0))?)
        };
        let mut indexed = has_catalog()?;
        // Just after a checkout a watcher is indexing the branch (in one
        // transaction): wait for it rather than fail or mix branches.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !indexed
            && std::time::Instant::now() < deadline
            && crate::index::freshness::live_watcher(&store)?.is_some()
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
            indexed = has_catalog()?;
        }
        if !indexed {
            let any: bool = store
                .conn
                .query_row("SELECT EXISTS (SELECT 1 FROM catalog)", [], |r| r.get(0))?;
            if any {
                bail!(
                    "the index has no files for the current branch `{branch}`; run `ken index` to index it \
                     (unchanged files are re-used, not re-parsed)"
                );
            }
        }
        Ok(Searcher {
            store,
            branch,
            semantic: OnceLock::new(),
            notice: std::sync::Mutex::new(None),
            fusion: Fusion::from_env()?,
            fusion_weights_set: Fusion::weights_set_in_env(),
            stock_bm25: Default::default(),
            last_phases: Default::default(),
            model_loading_elsewhere: None,
        })
    }

    /// Hybrid searches answer lexically while `loading` is true, unless this
    /// searcher has its model already (see [`Searcher::load_model`]).
    pub fn defer_model_while(&mut self, loading: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.model_loading_elsewhere = Some(loading);
    }

    /// Loads the query embedder and the vector index now and embeds a query
    /// once (the first forward pass is the slow one), so that the first
    /// search does not wait for them. `Err`: why semantic search is not
    /// available (no vectors yet, no model).
    pub fn load_model(&self) -> Result<(), String> {
        let side = self.semantic_side()?;
        side.embed_query("warm up").map(drop).map_err(|e| format!("{e:#}"))
    }

    fn model_deferred(&self) -> bool {
        self.semantic.get().is_none()
            && self
                .model_loading_elsewhere
                .as_ref()
                .is_some_and(|l| l.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Ranks lexical candidates with FTS5's own `bm25()` (same results,
    /// slower): the baseline `ken bench query` measures `ken_bm25` against.
    pub fn rank_with_stock_bm25(&self, on: bool) {
        self.stock_bm25.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where the last search that got past its checks spent its time.
    pub fn last_phases(&self) -> SearchPhases {
        *self.last_phases.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Keeps a long-lived searcher in step with the index: `false` when HEAD
    /// is now on another branch (open a new searcher); a republished vector
    /// file is reopened (the query embedder is kept).
    pub fn refresh(&mut self, root: &Path) -> bool {
        if git::head(root).catalog_key() != self.branch {
            return false;
        }
        if let Some(side) = self.semantic.get_mut() {
            let model = side.embedder.id().to_string();
            let adapter_fit = crate::embed::adapter::fingerprint(&self.store.conn);
            if adapter_fit != side.adapter_fit {
                side.adapter = crate::embed::adapter::load(&self.store.conn, &model);
                side.adapter_fit = adapter_fit;
                side.recent_queries.get_mut().unwrap_or_else(|e| e.into_inner()).clear();
            }
            let stamp = vector_file_stamp(&self.store, &model);
            if stamp != side.stamp {
                match VectorIndex::open(&self.store, &model, side.dimensions) {
                    Ok(Some(vectors)) => {
                        side.vectors = vectors;
                        side.stamp = stamp;
                    }
                    _ => return false,
                }
            }
        }
        true
    }

    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Chunks most similar in meaning to `target`: a code snippet, or
    /// `path:line` naming a chunk of the index (whose file is then left out
    /// unless `include_source_file`).
    pub fn similar(&self, target: &str, limit: usize, include_source_file: bool) -> Result<Vec<SearchHit>> {
        let side = self
            .semantic_side()
            .map_err(|why| anyhow::anyhow!("similarity search is unavailable: {why}"))?;
        let (vector, source) = match self.chunk_at(target)? {
            Some((chunk_id, path, content_hash)) => {
                let blob: Option<Vec<u8>> = self
                    .store
                    .conn
                    .query_row(
                        "SELECT vector FROM embeddings WHERE content_hash = ?1 AND model = ?2",
                        rusqlite::params![content_hash, side.embedder.id()],
                        |r| r.get(0),
                    )
                    .optional()?;
                let vector = match blob {
                    Some(b) => crate::store::vectors::decode(&b),
                    None => bail!("{target} has no embedding yet; run `ken index`"),
                };
                (vector, Some((chunk_id, path)))
            }
            None => (side.embedder.embed_now(target, InputKind::Document)?, None),
        };
        let req = SearchRequest {
            limit,
            ..SearchRequest::new(target)
        };
        self.register_path_filter(None)?;
        let mut candidates: HashMap<i64, Candidate> = HashMap::new();
        for (id, similarity) in self.neighbours(side, &vector, &req, (limit * OVERFETCH).max(50))? {
            let skip = source.as_ref().is_some_and(|(src_id, _)| *src_id == id);
            if !skip {
                candidates.entry(id).or_default().similarity = Some(similarity);
            }
        }
        let mut hits = self.load_hits(&mut candidates, false, None, None, HashMap::new())?;
        if let Some((_, path)) = &source {
            if !include_source_file {
                hits.retain(|h| &h.path != path);
            }
        }
        for hit in &mut hits {
            hit.score = candidates[&hit.chunk_id].similarity.map_or(0.0, f64::from);
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.path.cmp(&b.path)));
        let mut hits = diversify(hits, limit, None);
        self.load_contents(&mut hits)?;
        let q = QueryTerms::default();
        for hit in &mut hits {
            hit.snippet = snippet(&hit.content, &q, 4);
            hit.score = (hit.score * 1e6).round() / 1e6;
        }
        Ok(hits)
    }

    /// The innermost chunk of the branch at `path:line`, if `target` names one:
    /// (chunk id, path, content hash).
    fn chunk_at(&self, target: &str) -> Result<Option<(i64, String, i64)>> {
        let Some((path, line)) = target.rsplit_once(':') else {
            return Ok(None);
        };
        let Ok(line) = line.trim().parse::<u32>() else {
            return Ok(None);
        };
        let path = path.trim().trim_start_matches("./");
        if path.is_empty() || path.contains(char::is_whitespace) {
            return Ok(None);
        }
        let found = self
            .store
            .conn
            .query_row(
                "SELECT c.id, k.path, c.content_hash FROM chunks c
                 JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
                 WHERE k.path = ?2 AND c.start_line <= ?3 AND c.end_line >= ?3
                 ORDER BY c.end_line - c.start_line LIMIT 1",
                rusqlite::params![self.branch, path, line],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        if found.is_some() {
            return Ok(found);
        }
        // A `path:line` that names nothing indexed is an error, not a snippet
        // to embed (which would return unrelated code).
        let lines: Option<u32> = self
            .store
            .conn
            .query_row(
                "SELECT f.line_count FROM catalog k JOIN files f ON f.id = k.file_id WHERE k.branch = ?1 AND k.path = ?2",
                rusqlite::params![self.branch, path],
                |r| r.get(0),
            )
            .optional()?;
        match lines {
            None => bail!("{path} is not in the index (no such file, or not indexed: `ken status` shows what is)"),
            Some(n) => bail!("{path} has no indexed code at line {line} (it has {n} lines)"),
        }
    }

    /// Forgets the remembered query vectors (benchmarks time the model).
    pub fn forget_query_vectors(&self) {
        if let Some(side) = self.semantic.get() {
            side.recent_queries.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    /// What the last search could not do (e.g. semantic search unavailable,
    /// so the results are lexical only).
    pub fn notice(&self) -> Option<String> {
        self.notice.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_notice(&self, text: String) {
        *self.notice.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
    }

    /// [`Self::semantic_side`], or an empty error without loading anything when `skip`.
    fn semantic_side_unless(&self, skip: bool) -> Result<&SemanticSide, String> {
        if skip {
            return Err(String::new());
        }
        self.semantic_side()
    }

    fn semantic_side(&self) -> Result<&SemanticSide, String> {
        if let Some(side) = self.semantic.get() {
            return Ok(side);
        }
        let load = || -> Result<SemanticSide, String> {
            let model = self
                .store
                .meta("embedding_model")
                .map_err(|e| e.to_string())?
                .ok_or_else(|| match self.store.active_writer() {
                    Some(writer) => format!(
                        "no embeddings yet: {writer} is indexing the project or computing its embeddings \
                         (`ken status` shows the coverage)"
                    ),
                    None => crate::index::semantic::why_no_vectors(&self.store),
                })?;
            let provider = self.store.meta("embedding_provider").map_err(|e| e.to_string())?;
            let embedder =
                crate::embed::embedder_for_index(&model, provider.as_deref()).map_err(|e| format!("{e:#}"))?;
            let dimensions: usize = self
                .store
                .meta("embedding_dimensions")
                .map_err(|e| e.to_string())?
                .and_then(|d| d.parse().ok())
                .unwrap_or(embedder.dimensions());
            let stamp = vector_file_stamp(&self.store, &model);
            let vectors = VectorIndex::open(&self.store, &model, dimensions)
                .map_err(|e| format!("{e:#}"))?
                .ok_or("the vector index file is missing; run `ken index` to rebuild it")?;
            Ok(SemanticSide {
                embedder,
                vectors,
                dimensions,
                stamp,
                adapter: crate::embed::adapter::load(&self.store.conn, &model),
                adapter_fit: crate::embed::adapter::fingerprint(&self.store.conn),
                recent_queries: Default::default(),
            })
        };
        let side = load()?;
        Ok(self.semantic.get_or_init(|| side))
    }

    pub fn search(&self, req: &SearchRequest) -> Result<Vec<SearchHit>> {
        Ok(self.search_rated(req)?.0)
    }

    /// The results with how likely they are to answer the query.
    pub fn search_rated(&self, req: &SearchRequest) -> Result<(Vec<SearchHit>, Confidence)> {
        let path_filter = req
            .path_glob
            .as_deref()
            .map(crate::source::paths::compile_path_glob)
            .transpose()?;
        let q = QueryTerms::parse(&req.query);
        if req.limit == 0 || (q.is_empty() && req.mode == SearchMode::Lexical) || req.query.trim().is_empty() {
            return Ok((Vec::new(), Confidence::none()));
        }
        self.register_path_filter(path_filter)?;
        // One snapshot for every read of this search: a writer committing
        // between two of them would skew the term statistics (a chunk total
        // read before a batch, document frequencies after it).
        let _snapshot = self.store.conn.unchecked_transaction()?;

        let started = Instant::now();
        let fetch = (req.limit * OVERFETCH).max(50);
        // A query of several words will use its vector: embed it on another
        // core while this one runs the lexical side (the model is the slower half).
        // Semantic mode waits for the model; hybrid answers lexically meanwhile.
        let deferred = req.mode == SearchMode::Hybrid && self.model_deferred();
        let prefetch = req.mode != SearchMode::Lexical && !deferred && req.query.split_whitespace().count() > 1;
        let prefetch_side = if prefetch { self.semantic_side().ok() } else { None };
        // Quoted code is a lexical signal: semantic mode ranks by meaning alone.
        let fragments: &[String] = if req.mode == SearchMode::Semantic {
            &[]
        } else {
            &q.fragments
        };
        // Text is read for every candidate only when common terms score on
        // it or code fragments of the query are looked for in it.
        let needs_content = |common: &CommonTerms| !common.terms.is_empty() || !fragments.is_empty();
        let (lexical, prefetched, preloaded) = std::thread::scope(|scope| {
            let job = prefetch_side.map(|side| {
                let query = req.query.as_str();
                scope.spawn(move || side.embed_query(query))
            });
            let lexical = self.lexical_side(&q, req, fetch);
            // While the other core embeds the query, read the lexical
            // candidates' chunks and stored vectors (a failure here only
            // means they are read after).
            let preloaded = match (&lexical, prefetch_side) {
                (Ok((candidates, _, common)), Some(side)) => {
                    let vector_model = (req.mode == SearchMode::Hybrid).then(|| side.embedder.id());
                    let signature_model = crate::embed::text::signature_model(side.embedder.id());
                    self.read_rows(
                        candidates.keys().copied(),
                        needs_content(common),
                        vector_model,
                        Some(&signature_model),
                    )
                    .unwrap_or_default()
                }
                _ => HashMap::new(),
            };
            let prefetched = job.map(|j| {
                j.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("query embedding panicked")))
            });
            (lexical, prefetched, preloaded)
        });
        let (mut candidates, matched_terms, common) = lexical?;
        let lexical_done = Instant::now();
        *self.notice.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // A lone identifier that names a definition is answered by that
        // definition: vectors add nothing, and loading the model costs more
        // than the whole lexical search.
        let lone_identifier = req.query.split_whitespace().count() == 1 && candidates.values().any(|c| c.defines.any());
        let mut fill_from = None;
        let mut signatures_from = None;
        let mut fusion = self.fusion;
        let semantic_on = match (
            req.mode,
            self.semantic_side_unless(
                req.mode == SearchMode::Lexical || (req.mode == SearchMode::Hybrid && (lone_identifier || deferred)),
            ),
        ) {
            (SearchMode::Lexical, _) => false,
            (_, Err(why)) if why.is_empty() => false,
            (mode, Ok(side)) => match self.vector_candidates(side, req, vector_fetch(mode, fetch), prefetched) {
                Ok((query, found)) => {
                    for (rank, (id, similarity)) in found.into_iter().enumerate() {
                        let c = candidates.entry(id).or_default();
                        c.similarity = Some(c.similarity.map_or(similarity, |s| s.max(similarity)));
                        c.deep = rank >= fetch && c.bm25 == 0.0;
                    }
                    signatures_from = Some((crate::embed::text::signature_model(side.embedder.id()), query.clone()));
                    if !self.fusion_weights_set {
                        fusion = fusion.lexical_times(side.embedder.lexical_weight());
                    }
                    if side.passes_by(&req.query) {
                        fusion = fusion.lexical_times(UNCARRIED_LEXICAL_WEIGHT);
                    }
                    if mode == SearchMode::Hybrid {
                        // Candidates the vector side did not reach get their
                        // similarity from their stored vectors, read with the
                        // rest of the chunk, so fusion compares every candidate on both sides.
                        fill_from = Some((side.embedder.id(), query));
                    }
                    true
                }
                Err(e) if mode == SearchMode::Hybrid => {
                    self.set_notice(format!("lexical results only: {e:#}"));
                    false
                }
                Err(e) => return Err(e),
            },
            (SearchMode::Semantic, Err(why)) => bail!("semantic search is unavailable: {why}"),
            (SearchMode::Hybrid, Err(why)) => {
                self.set_notice(format!("lexical results only: {why}"));
                false
            }
        };
        if deferred && !lone_identifier {
            self.set_notice(
                "lexical results only: the embedding model is still loading (the server has just started); \
                 the next searches use it"
                    .to_string(),
            );
        }
        let vector_done = Instant::now();
        // Fusion weighs every candidate on both sides: the ones only the
        // vector side found get their BM25 too (a chunk middling on both sides
        // is in neither side's top list, yet can be the best answer).
        if semantic_on && req.mode == SearchMode::Hybrid && !matched_terms.is_empty() {
            let only_vector: Vec<i64> = candidates
                .iter()
                .filter(|(_, c)| c.bm25 == 0.0 && !c.defines.any())
                .map(|(&id, _)| id)
                .collect();
            for (id, score) in self.bm25_of(&matched_terms, &only_vector)? {
                if let Some(c) = candidates.get_mut(&id) {
                    c.bm25 = score;
                }
            }
        }
        let rescore_done = Instant::now();
        let with_content = needs_content(&common);
        let mut hits = self.load_hits(
            &mut candidates,
            with_content,
            fill_from.as_ref().map(|(model, query)| (*model, query.as_slice())),
            signatures_from
                .as_ref()
                .map(|(model, query)| (model.as_str(), query.as_slice())),
            preloaded,
        )?;
        if !common.terms.is_empty() {
            add_common_term_scores(&mut hits, &mut candidates, &common);
        }
        let load_done = Instant::now();
        let fused = fuse(&candidates, req.mode, semantic_on, fusion);
        let intent = QueryIntent::of(&q, &req.query);
        // A lone word is an identifier, answered by exact symbol matches;
        // names are a lexical signal, so semantic mode ranks by meaning alone.
        let names_said = req.mode != SearchMode::Semantic && req.query.split_whitespace().count() > 1;
        let sides = req.explain.then(|| Sides::of(&candidates));
        let vectors = semantic_on && req.mode != SearchMode::Lexical;
        let hybrid_weights = (vectors && req.mode == SearchMode::Hybrid).then(|| fusion.weights());
        for hit in &mut hits {
            let cand = &candidates[&hit.chunk_id];
            let mut factors = rerank_factors(hit, cand.defines, intent);
            // Tests quote the calls and flags of the issue they reproduce:
            // there a verbatim match says little about where the code is.
            if quotes_fragment(hit, fragments) && (intent.tests || !is_test_code(hit)) {
                factors.push(("quotes the query's code or names its file", FRAGMENT_FACTOR));
            }
            if let Some(reason) = names_said.then(|| says_name(hit, &q)).flatten() {
                factors.push((reason, NAME_SAID_FACTOR));
            }
            let fused = fused[&hit.chunk_id];
            hit.score = fused * factors.iter().map(|(_, f)| f).product::<f64>();
            if let Some(sides) = &sides {
                hit.explain = Some(sides.explain(cand, vectors, hybrid_weights, fused, &factors));
            }
        }
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.path.cmp(&b.path))
                .then_with(|| a.start_line.cmp(&b.start_line))
        });
        let mut hits = diversify(hits, req.limit, req.max_per_file);
        if !with_content {
            self.load_contents(&mut hits)?;
        }
        for hit in &mut hits {
            if let Some(member) = &candidates[&hit.chunk_id].exact_member {
                narrow_to_member(hit, member);
            }
            hit.snippet = snippet(&hit.content, &q, 4);
            hit.score = (hit.score * 1e6).round() / 1e6;
        }
        let confidence = self.rate(&q, req, &hits, &candidates)?;
        *self.last_phases.lock().unwrap_or_else(|e| e.into_inner()) = SearchPhases {
            lexical: lexical_done - started,
            vector: vector_done - lexical_done,
            rescore: rescore_done - vector_done,
            load: load_done - rescore_done,
            rank: load_done.elapsed(),
        };
        Ok((hits, confidence))
    }

    /// How likely `hits` are to answer the query ([`Confidence`]).
    fn rate(
        &self,
        q: &QueryTerms,
        req: &SearchRequest,
        hits: &[SearchHit],
        candidates: &HashMap<i64, Candidate>,
    ) -> Result<Confidence> {
        let mut terms = Vec::with_capacity(q.terms.len());
        for term in &q.terms {
            let df = self.store.term_frequency(term)? as f64;
            terms.push(TermStat { term: term.clone(), df });
        }
        let total = terms.iter().map(|t| t.df).fold(self.chunk_total()?, f64::max);
        let mut absent_words = Vec::new();
        for (word, whole) in lexical::whole_word_terms(&req.query) {
            if self.store.term_frequency(&whole)? == 0 {
                absent_words.push(word);
            }
        }
        let hit_terms: Vec<_> = hits
            .iter()
            .take(crate::search::confidence::RESULTS_WEIGHED)
            .map(|h| crate::search::confidence::hit_terms(h.symbol.as_deref(), &h.path, &h.content))
            .collect();
        let defines_name =
            !lexical::is_question(&req.query) && hits.iter().any(|h| candidates[&h.chunk_id].defines == Defines::Asked);
        let similarities: Vec<f64> = candidates
            .values()
            .filter(|c| !c.deep)
            .filter_map(|c| c.similarity.map(f64::from))
            .collect();
        let cosine = hits
            .iter()
            .filter_map(|h| candidates[&h.chunk_id].similarity.map(f64::from))
            .reduce(f64::max);
        let cosine_z = cosine.filter(|_| similarities.len() > 1).map(|best| {
            let n = similarities.len() as f64;
            let mean = similarities.iter().sum::<f64>() / n;
            let sigma = (similarities.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n).sqrt();
            ((best - mean) / sigma.max(1e-9) * 1000.0).round() / 1000.0
        });
        Ok(Confidence::rate(
            &Evidence {
                terms: &terms,
                total,
                hit_terms: &hit_terms,
                defines_name,
                absent_words: &absent_words,
                cosine: cosine.map(|c| (c * 1000.0).round() / 1000.0),
                cosine_z,
            },
            req.explain,
        ))
    }

    /// BM25 candidates and exact symbol-name matches (none in semantic mode),
    /// with the common terms left out of the match.
    fn lexical_side<'q>(
        &self,
        q: &'q QueryTerms,
        req: &SearchRequest,
        fetch: usize,
    ) -> Result<(HashMap<i64, Candidate>, Terms<'q>, CommonTerms<'q>)> {
        let mut candidates: HashMap<i64, Candidate> = HashMap::new();
        let (terms, common) = self.selective_terms(q)?;
        if req.mode != SearchMode::Semantic && !terms.is_empty() {
            let words: Vec<&String> = terms.iter().map(|(t, _)| *t).collect();
            for (id, rank) in self.lexical_candidates(&words, req, fetch)? {
                candidates.entry(id).or_default().bm25 = -rank;
            }
        }
        if req.mode != SearchMode::Semantic {
            let best_bm25 = candidates.values().map(|c| c.bm25).fold(0.0f64, f64::max).max(1.0);
            // Each chunk's definitions of the query's identifiers, with
            // whether another definition is the one asked for. A name or a
            // few keywords type the identifier as meant; a question writes
            // it as prose does ("the current TagSet" asks for `tagSet()`),
            // and there every definition counts the same.
            let typed = !lexical::is_question(&req.query);
            let mut defined: HashMap<i64, Vec<(Member, Option<&'static str>)>> = HashMap::new();
            for key in &q.identifiers {
                let spelled = q.spellings.iter().find(|s| lexical::joined_key(s) == *key);
                let rows = self.symbol_candidates(key, spelled.filter(|_| typed), req)?;
                let outranked = if typed {
                    outranked_definitions(&rows, q, |row| self.declares(row))
                } else {
                    vec![None; rows.len()]
                };
                for (row, outranked) in rows.into_iter().zip(outranked) {
                    defined.entry(row.chunk_id).or_default().push((row.member, outranked));
                }
            }
            for (id, members) in defined {
                let c = candidates.entry(id).or_insert(Candidate {
                    bm25: best_bm25 * 0.5,
                    ..Candidate::default()
                });
                // Asked for by one of its definitions: those are the answer.
                let asked = members.iter().any(|(_, outranked)| outranked.is_none());
                c.defines = match members.iter().find_map(|(_, outranked)| *outranked) {
                    Some(why) if !asked => Defines::Outranked(why),
                    _ => Defines::Asked,
                };
                for (member, _) in members.into_iter().filter(|(_, o)| !asked || o.is_none()) {
                    c.exact_member = Some(match c.exact_member.take() {
                        // Overloads packed together, or two names the query
                        // says: the answer is all of them.
                        Some((mut names, start, end)) => {
                            if !names.split(", ").any(|n| n == member.0) {
                                names = format!("{names}, {}", member.0);
                            }
                            (names, start.min(member.1), end.max(member.2))
                        }
                        None => member,
                    });
                }
            }
        }
        Ok((candidates, terms, common))
    }

    fn chunk_total(&self) -> Result<f64> {
        Ok(
            match self.store.meta("chunk_count")?.and_then(|v| v.parse::<f64>().ok()) {
                Some(n) => n,
                None => self
                    .store
                    .conn
                    .query_row("SELECT count(*) FROM chunks", [], |r| r.get::<_, i64>(0))?
                    as f64,
            },
        )
    }

    /// Splits the query's terms (those present in the index) into the ones
    /// candidates are matched on and the very common ones, which are left out
    /// of the match when rarer terms exist and the match would visit more
    /// than [`MATCH_ROW_BUDGET`] rows (they cost the most and rank the least);
    /// those are scored on the candidates instead, with their document frequency.
    fn selective_terms<'q>(&self, q: &'q QueryTerms) -> Result<(Terms<'q>, CommonTerms<'q>)> {
        let total = self.chunk_total()?;
        let mut with_df = Vec::new();
        for term in &q.terms {
            let df = self.store.term_frequency(term)?;
            if df > 0 {
                with_df.push((term, df as f64));
            }
        }
        // The stored total is written at the end of an index run; chunks
        // committed since can make a term's frequency exceed it.
        let total = with_df.iter().map(|(_, df)| *df).fold(total, f64::max);
        // Rare terms are always matched; commoner ones too, rarest first,
        // while the rows to score stay within budget: a chunk that has only
        // the moderately common words of a query must still be found.
        let mut by_df = with_df.clone();
        by_df.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut rows = 0.0;
        let mut chosen = Vec::new();
        for (term, df) in by_df {
            let within_budget = df <= total * MATCHED_TERM_MAX_SHARE && rows + df <= MATCH_ROW_BUDGET;
            if df <= total * COMMON_TERM_SHARE || within_budget {
                chosen.push(term);
                rows += df;
            }
        }
        // Only very common words: match on them all rather than on nothing.
        let (matched, common): (Vec<_>, Vec<_>) = with_df
            .into_iter()
            .partition(|(t, _)| chosen.is_empty() || chosen.contains(t));
        Ok((matched, CommonTerms { terms: common, total }))
    }

    fn register_path_filter(&self, matcher: Option<GlobMatcher>) -> Result<()> {
        self.store.conn.create_scalar_function(
            "ken_path_matches",
            1,
            FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
            move |ctx| {
                let path: String = ctx.get(0)?;
                Ok(matcher.as_ref().is_none_or(|m| m.is_match(&path)))
            },
        )?;
        Ok(())
    }

    /// SQL conditions and parameters for the request's filters; `?1` is the branch.
    fn filters(&self, req: &SearchRequest) -> (String, Vec<Value>) {
        let mut sql = String::new();
        let mut params = vec![Value::Text(self.branch.clone())];
        if req.path_glob.is_some() {
            sql.push_str(" AND ken_path_matches(k.path)");
        }
        if let Some(lang) = &req.language {
            params.push(Value::Text(lang.to_ascii_lowercase()));
            // A lookup only when filtering: the queries do not join `files`.
            sql.push_str(&format!(
                " AND (SELECT language FROM files WHERE id = c.file_id) = ?{}",
                params.len()
            ));
        }
        if let Some(kind) = &req.kind {
            params.push(Value::Text(kind.to_ascii_lowercase()));
            sql.push_str(&format!(" AND c.kind = ?{}", params.len()));
        }
        (sql, params)
    }

    /// The best `fetch` chunks by BM25 that pass the branch and filters.
    /// FTS5 ranks alone first (no joins per match, which is what makes broad
    /// queries slow); the winners are then checked against the catalog and
    /// filters, fetching deeper only when too many were filtered out.
    fn lexical_candidates(&self, terms: &[&String], req: &SearchRequest, fetch: usize) -> Result<Vec<(i64, f64)>> {
        let fts_query = QueryTerms::fts_match(terms.iter().copied());
        let (ws, wp, wb) = BM25_WEIGHTS;
        // `ken_bm25` equals FTS5's bm25() on the rows it returns first and
        // skips reading the length of rows that cannot make the top `depth`.
        let rank = if self.stock_bm25.load(std::sync::atomic::Ordering::Relaxed) {
            format!("bm25(chunks_fts, {ws}, {wp}, {wb})")
        } else {
            format!("ken_bm25(chunks_fts, ?2, {ws}, {wp}, {wb})")
        };
        let mut ranked_stmt = self.store.conn.prepare_cached(&format!(
            "SELECT rowid, {rank} AS s FROM chunks_fts
             WHERE chunks_fts MATCH ?1 ORDER BY s LIMIT ?2"
        ))?;
        let (filter_sql, mut params) = self.filters(req);
        params.push(Value::Null);
        let id_param = params.len();
        let mut visible_stmt = self.store.conn.prepare_cached(&format!(
            "SELECT c.id FROM chunks c
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             WHERE c.id = ?{id_param}{filter_sql}"
        ))?;
        let mut depth = fetch;
        loop {
            let ranked: Vec<(i64, f64)> = ranked_stmt
                .query_map(rusqlite::params![fts_query, depth as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<_>>()
                .context("lexical search failed")?;
            let exhausted = ranked.len() < depth;
            let mut visible = Vec::with_capacity(fetch);
            for (id, rank) in ranked {
                *params.last_mut().expect("id parameter") = Value::Integer(id);
                if visible_stmt.exists(params_from_iter(params.iter()))? {
                    visible.push((id, rank));
                    if visible.len() >= fetch {
                        break;
                    }
                }
            }
            if visible.len() >= fetch || exhausted || depth >= MAX_LEXICAL_DEPTH {
                return Ok(visible);
            }
            depth *= 4;
        }
    }

    /// The BM25 score of each of `ids` that matches `terms` (with their
    /// document frequencies): the lexical side's score, for chunks only the
    /// vector side found.
    fn bm25_of(&self, terms: &[(&String, f64)], ids: &[i64]) -> Result<Vec<(i64, f64)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let fts_query = QueryTerms::fts_match(terms.iter().map(|(t, _)| *t));
        let frequencies: Vec<u8> = terms.iter().flat_map(|(_, df)| df.to_le_bytes()).collect();
        let (ws, wp, wb) = BM25_WEIGHTS;
        // One pass over the query's matches (`+rowid` keeps the list out of
        // FTS5's plan, which would restart the match once per id).
        let list = ids.iter().map(|id| id.to_string()).collect::<Vec<_>>().join(",");
        let mut stmt = self.store.conn.prepare(&format!(
            "SELECT rowid, ken_bm25(chunks_fts, ?2, {ws}, {wp}, {wb}) FROM chunks_fts
             WHERE chunks_fts MATCH ?1 AND +rowid IN ({list})"
        ))?;
        let rows = stmt.query_map(rusqlite::params![fts_query, frequencies], |r| {
            Ok((r.get(0)?, -r.get::<_, f64>(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Chunks whose embedding is among the query's nearest neighbours, with
    /// similarity, restricted to the branch and filters.
    fn vector_candidates(
        &self,
        side: &SemanticSide,
        req: &SearchRequest,
        fetch: usize,
        prefetched: Option<Result<Vec<f32>>>,
    ) -> Result<(Vec<f32>, Neighbours)> {
        let query = match prefetched {
            Some(vector) => vector?,
            None => side.embed_query(&req.query)?,
        };
        let found = self.neighbours(side, &query, req, fetch)?;
        Ok((query, found))
    }

    /// The chunks (of the branch, passing the filters) whose vectors are
    /// nearest to `vector`, best first, with cosine similarity.
    fn neighbours(
        &self,
        side: &SemanticSide,
        vector: &[f32],
        req: &SearchRequest,
        fetch: usize,
    ) -> Result<Vec<(i64, f32)>> {
        let neighbours = side.vectors.search(vector, fetch * 2)?;
        let (filter_sql, mut params) = self.filters(req);
        params.push(Value::Null);
        let id_param = params.len();
        let mut stmt = self.store.conn.prepare_cached(&format!(
            "SELECT c.id FROM embeddings e
             JOIN chunks c ON c.content_hash = e.content_hash
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             WHERE e.id = ?{id_param}{filter_sql}"
        ))?;
        let mut out = Vec::new();
        for (embedding_id, similarity) in neighbours {
            *params.last_mut().expect("id parameter") = Value::Integer(embedding_id);
            let ids: Vec<i64> = stmt
                .query_map(params_from_iter(params.iter()), |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            out.extend(ids.into_iter().map(|id| (id, similarity)));
            if out.len() >= fetch {
                break;
            }
        }
        Ok(out)
    }

    /// Definitions of the identifier `key`: their chunks, names and lines;
    /// with `spelled`, those spelled so first.
    fn symbol_candidates(&self, key: &str, spelled: Option<&String>, req: &SearchRequest) -> Result<Vec<SymbolRow>> {
        let (filter_sql, mut params) = self.filters(req);
        params.push(Value::Text(key.to_string()));
        let key_param = params.len();
        let order = match spelled {
            Some(spelled) => {
                params.push(Value::Text(spelled.clone()));
                format!("ORDER BY s.name = ?{} DESC", params.len())
            }
            None => String::new(),
        };
        let sql = format!(
            "SELECT c.id, c.file_id, c.kind, (SELECT language FROM files WHERE id = c.file_id),
                    s.name, s.start_line, s.end_line FROM chunk_symbols s
             JOIN chunks c ON c.id = s.chunk_id
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             WHERE s.key = ?{key_param}{filter_sql}
             {order} LIMIT 50"
        );
        let mut stmt = self.store.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(params.iter()), |r| {
            Ok(SymbolRow {
                chunk_id: r.get(0)?,
                file_id: r.get(1)?,
                kind: r.get(2)?,
                language: r.get(3)?,
                member: (r.get(4)?, r.get(5)?, r.get(6)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Whether the code of the row's chunk says the row's name (comments
    /// aside): the part of a split definition that holds its signature.
    /// Unreadable text counts as not saying it.
    fn declares(&self, row: &SymbolRow) -> bool {
        let text: Option<String> = self
            .store
            .conn
            .prepare_cached("SELECT text FROM contents WHERE hash = (SELECT content_hash FROM chunks WHERE id = ?1)")
            .and_then(|mut stmt| stmt.query_row([row.chunk_id], |r| r.get(0)).optional())
            .ok()
            .flatten();
        text.is_some_and(|text| contains_whole(&code_words(&text).join(" "), &row.member.0))
    }

    /// The candidates' chunks, with their text when `with_content` (else
    /// [`Self::load_contents`] reads it for the few that are returned). With
    /// `fill_from` (model, query vector), a candidate that has no similarity
    /// yet gets it from its stored vector, if it has one; with
    /// `signatures_from`, its signature similarity likewise. Rows in
    /// `preloaded` (read with the same `with_content` and models) are not read again.
    fn load_hits(
        &self,
        candidates: &mut HashMap<i64, Candidate>,
        with_content: bool,
        fill_from: Option<(&str, &[f32])>,
        signatures_from: Option<(&str, &[f32])>,
        mut preloaded: HashMap<i64, CandidateRow>,
    ) -> Result<Vec<SearchHit>> {
        let mut stmt = self.row_statement()?;
        let mut hits = Vec::with_capacity(candidates.len());
        for (&id, candidate) in candidates.iter_mut() {
            let row = match preloaded.remove(&id) {
                Some(row) => row,
                None => {
                    let model = fill_from
                        .filter(|_| candidate.similarity.is_none())
                        .map(|(model, _)| model);
                    let signature_model = signatures_from.map(|(model, _)| model);
                    self.read_row(&mut stmt, id, with_content, model, signature_model)?
                }
            };
            if let (None, Some(blob), Some((_, query))) = (candidate.similarity, &row.vector, fill_from) {
                candidate.similarity = Some(crate::embed::cosine(query, &crate::store::vectors::decode(blob)));
            }
            if let (Some(blob), Some((_, query))) = (&row.signature, signatures_from) {
                // One vector per name of the chunk, end to end: the nearest counts.
                candidate.signature_similarity = crate::store::vectors::decode(blob)
                    .chunks_exact(query.len().max(1))
                    .map(|v| crate::embed::cosine(query, v))
                    .reduce(f32::max);
            }
            hits.push(row.hit);
        }
        Ok(hits)
    }

    /// The rows of `ids` (see [`Self::read_row`]).
    fn read_rows(
        &self,
        ids: impl IntoIterator<Item = i64>,
        with_content: bool,
        vector_model: Option<&str>,
        signature_model: Option<&str>,
    ) -> Result<HashMap<i64, CandidateRow>> {
        let mut stmt = self.row_statement()?;
        ids.into_iter()
            .map(|id| {
                let row = self.read_row(&mut stmt, id, with_content, vector_model, signature_model)?;
                Ok((id, row))
            })
            .collect()
    }

    /// The statement [`Self::read_row`] runs: one lookup per chunk, whose
    /// CASEs skip what is not asked for.
    fn row_statement(&self) -> Result<rusqlite::CachedStatement<'_>> {
        Ok(self.store.conn.prepare_cached(
            "SELECT k.path, c.start_line, c.end_line, c.kind, c.symbol, f.language, c.context,
                    CASE WHEN ?3 THEN (SELECT text FROM contents WHERE hash = c.content_hash) END,
                    CASE WHEN ?4 IS NOT NULL THEN
                        (SELECT vector FROM embeddings WHERE content_hash = c.content_hash AND model = ?4) END,
                    CASE WHEN ?5 IS NOT NULL AND c.symbol IS NOT NULL THEN
                        (SELECT vector FROM embeddings WHERE content_hash = c.content_hash AND model = ?5) END,
                    c.content_hash
             FROM chunks c
             JOIN files f ON f.id = c.file_id
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?2
             WHERE c.id = ?1",
        )?)
    }

    /// A candidate's chunk, with its text when `with_content`, its vector of
    /// `vector_model` and its signature vectors of `signature_model` when given.
    fn read_row(
        &self,
        stmt: &mut rusqlite::Statement,
        id: i64,
        with_content: bool,
        vector_model: Option<&str>,
        signature_model: Option<&str>,
    ) -> Result<CandidateRow> {
        let row = stmt.query_row(
            rusqlite::params![id, self.branch, with_content, vector_model, signature_model],
            |r| {
                Ok(CandidateRow {
                    hit: SearchHit {
                        path: r.get(0)?,
                        start_line: r.get(1)?,
                        end_line: r.get(2)?,
                        score: 0.0,
                        kind: r.get(3)?,
                        symbol: r.get(4)?,
                        language: r.get(5)?,
                        snippet: String::new(),
                        context: r.get(6)?,
                        content: r.get::<_, Option<String>>(7)?.unwrap_or_default(),
                        explain: None,
                        copies: Vec::new(),
                        chunk_id: id,
                        content_hash: r.get(10)?,
                    },
                    vector: r.get(8)?,
                    signature: r.get(9)?,
                })
            },
        )?;
        Ok(row)
    }

    /// Reads the text of hits loaded without it.
    fn load_contents(&self, hits: &mut [SearchHit]) -> Result<()> {
        let mut stmt = self
            .store
            .conn
            .prepare_cached("SELECT t.text FROM chunks c JOIN contents t ON t.hash = c.content_hash WHERE c.id = ?1")?;
        for hit in hits.iter_mut().filter(|h| h.content.is_empty()) {
            hit.content = stmt.query_row([hit.chunk_id], |r| r.get(0))?;
        }
        Ok(())
    }
}

/// The pre-rerank score of every candidate. Lexical: BM25. Semantic: cosine
/// similarity. Hybrid: the two combined by `fusion` (exact symbol matches
/// count with the lexical side).
fn fuse(
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
            let semantic_rank = rank_by(&|c| c.similarity.map(f64::from));
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

/// How many vector neighbours a search of `mode` takes.
fn vector_fetch(mode: SearchMode, fetch: usize) -> usize {
    if mode == SearchMode::Hybrid {
        fetch * VECTOR_DEPTH_FACTOR
    } else {
        fetch
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

/// Adds to each candidate the BM25 share of the common terms that were left
/// out of the lexical match, estimated from the chunk's text: term frequency by
/// counting the (stemmed) term in the lowercased symbol, path and body, and
/// length relative to the other candidates. These terms have a low IDF, so
/// the estimate only reorders candidates that the rare terms found.
fn add_common_term_scores(hits: &mut [SearchHit], candidates: &mut HashMap<i64, Candidate>, common: &CommonTerms) {
    let total = common.total;
    const K1: f64 = 1.2;
    const B: f64 = 0.75;
    let (ws, wp, wb) = BM25_WEIGHTS;
    let avg_len = hits.iter().map(|h| h.content.len() as f64).sum::<f64>() / hits.len().max(1) as f64;
    for hit in hits.iter() {
        let symbol = hit.symbol.as_deref().unwrap_or("").to_lowercase();
        let path = hit.path.to_lowercase();
        let body = hit.content.to_lowercase();
        let norm = 1.0 - B + B * hit.content.len() as f64 / avg_len.max(1.0);
        let mut extra = 0.0;
        for (term, df) in &common.terms {
            let tf = ws * symbol.matches(term.as_str()).count() as f64
                + wp * path.matches(term.as_str()).count() as f64
                + wb * body.matches(term.as_str()).count() as f64;
            if tf > 0.0 {
                let idf = ((total - df + 0.5) / (df + 0.5)).ln().max(1e-6);
                extra += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
        }
        if let Some(c) = candidates.get_mut(&hit.chunk_id).filter(|c| c.bm25 > 0.0) {
            c.bm25 += extra;
        }
    }
}

/// Cuts a hit on a packed chunk down to the definitions the query named.
fn narrow_to_member(hit: &mut SearchHit, (name, start, end): &Member) {
    if *start < hit.start_line || *end > hit.end_line || (*start, *end) == (hit.start_line, hit.end_line) {
        return;
    }
    let skip = (start - hit.start_line) as usize;
    let take = (end - start + 1) as usize;
    hit.content = hit.content.split_inclusive('\n').skip(skip).take(take).collect();
    hit.symbol = Some(name.clone());
    // Copies hold the same text: the same lines of it.
    for copy in &mut hit.copies {
        copy.start_line += skip as u32;
        copy.end_line = copy.start_line + take as u32 - 1;
    }
    hit.start_line = *start;
    hit.end_line = *end;
}

/// Test code: a test file, or a test module inside a source file (Rust's
/// `#[cfg(test)] mod tests`, whose chunks share the file of the code they test).
fn is_test_code(hit: &SearchHit) -> bool {
    is_test_path(&hit.path) || hit.context.as_deref().is_some_and(is_test_module_context)
}

/// Whether one of the enclosing signatures opens a test module (`mod tests {`).
fn is_test_module_context(context: &str) -> bool {
    context.lines().any(|line| {
        let line = line.trim_start();
        let line = line.strip_prefix("pub ").unwrap_or(line);
        line.strip_prefix("mod ").is_some_and(|rest| {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            name == "test" || name == "tests" || name.starts_with("test_") || name.ends_with("_tests")
        })
    })
}

/// Why another definition of a query identifier is the one asked for
/// (`--explain` says it), in the order [`outranked_definitions`] looks.
const SPELLED_OTHERWISE: &str = "spelled otherwise than typed, and a definition spelled so is found";
const IMPL_OF_DEFINED_TYPE: &str = "an impl of the type, whose definition is found";
const OTHER_PART: &str = "a part of a split definition, and the part that declares it is found";

/// For each definition of one query identifier (all of them, as
/// `symbol_candidates` found them), whether another one is the one asked
/// for, and why: an exact spelling beats a case or separator variant
/// (`provisionContext` is not `ProvisionContext`, `poll_future` not
/// `PollFuture`); the definition of a type beats an impl or extension of it
/// (`impl Foo`, `unsafe impl Send for Foo {}`); of a definition split into
/// several chunks, the part that declares it (`declares`: its code says the
/// name, as the signature does) beats the others. A definition is outranked
/// only by one in code that is found, so an impl whose type lies outside the
/// index, or a variant when nothing is spelled as typed (or only a heading
/// of the docs is), is still the answer.
fn outranked_definitions(
    rows: &[SymbolRow],
    q: &QueryTerms,
    mut declares: impl FnMut(&SymbolRow) -> bool,
) -> Vec<Option<&'static str>> {
    let other_part = other_parts(rows, &mut declares);
    let spelled_found = rows.iter().any(|r| r.is_code() && q.spells(&r.member.0));
    let is_impl = |r: &SymbolRow| r.kind == "impl";
    let type_found = |name: &str| {
        rows.iter()
            .zip(&other_part)
            .any(|(o, other)| o.member.0 == name && o.is_code() && !is_impl(o) && !other)
    };
    rows.iter()
        .zip(&other_part)
        .map(|(r, &other)| {
            if spelled_found && !q.spells(&r.member.0) {
                Some(SPELLED_OTHERWISE)
            } else if is_impl(r) && type_found(&r.member.0) {
                Some(IMPL_OF_DEFINED_TYPE)
            } else if other {
                Some(OTHER_PART)
            } else {
                None
            }
        })
        .collect()
}

/// Which rows are parts of a definition split into several chunks other than
/// the one that declares it: the first part whose code says the name
/// (`declares`), else the first part. Parts of one definition share its
/// name and file and overlap by the chunker's few lines; two overloads lie
/// next to each other without overlapping.
fn other_parts(rows: &[SymbolRow], declares: &mut impl FnMut(&SymbolRow) -> bool) -> Vec<bool> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    let place = |i: &usize| {
        (
            rows[*i].file_id,
            &rows[*i].member.0,
            rows[*i].member.1,
            rows[*i].member.2,
        )
    };
    order.sort_by(|a, b| place(a).cmp(&place(b)));
    let mut other = vec![false; rows.len()];
    let mut at = 0;
    while at < order.len() {
        let first = &rows[order[at]];
        let (mut end, mut next) = (first.member.2, at + 1);
        while let Some(r) = order.get(next).map(|&i| &rows[i]) {
            if r.file_id != first.file_id || r.member.0 != first.member.0 || r.member.1 > end {
                break;
            }
            end = end.max(r.member.2);
            next += 1;
        }
        let parts = &order[at..next];
        if parts.len() > 1 {
            let head = parts.iter().copied().find(|&i| declares(&rows[i])).unwrap_or(parts[0]);
            for &i in parts {
                other[i] = i != head;
            }
        }
        at = next;
    }
    other
}

/// The rerank's factors for a hit, each with what it is for (see [`Explain`]).
fn rerank_factors(hit: &SearchHit, defines: Defines, intent: QueryIntent) -> Vec<(&'static str, f64)> {
    let mut factors = Vec::new();
    if defines.any() {
        let factor = if intent.question {
            EXACT_SYMBOL_IN_QUESTION_FACTOR
        } else {
            EXACT_SYMBOL_FACTOR
        };
        factors.push(("defines the identifier", factor));
        if let Defines::Outranked(why) = defines {
            factors.push((why, OUTRANKED_DEFINITION_FACTOR / factor));
        }
    }
    if hit.kind == "module" {
        factors.push(("module-level code", MODULE_FACTOR));
    }
    if intent.question && TYPE_KINDS.contains(&hit.kind.as_str()) {
        factors.push(("a type, for a question", TYPE_FACTOR));
    }
    let prose = is_prose_kind(&hit.kind);
    let changelog = prose && is_changelog_path(&hit.path);
    let config = is_config_language(&hit.language);
    let asked_for_this = (changelog && intent.changelog) || (config && intent.config);
    if !intent.docs {
        if prose && !asked_for_this {
            factors.push(("prose", PROSE_FACTOR));
        }
        if config && !intent.config {
            factors.push(("config file", CONFIG_FACTOR));
        }
        if is_docs_path(&hit.path) {
            factors.push(("docs folder", DOCS_FOLDER_FACTOR));
        }
    }
    if changelog && !intent.changelog {
        factors.push(("changelog", CHANGELOG_FACTOR));
    }
    if is_test_code(hit) {
        factors.push(("test code", if intent.tests { TEST_FACTOR_ASKED } else { TEST_FACTOR }));
    }
    factors
}

/// Whether the query says every word of the hit's name, or of one of its
/// names in a chunk of several definitions (stopwords such as `get` and `is`
/// aside): "Convert to a RGB color object" says `toRgb`, not `toRgba`. A
/// constructor is named by its type. The reason `--explain` gives, if so.
fn says_name(hit: &SearchHit, q: &QueryTerms) -> Option<&'static str> {
    let symbol = hit.symbol.as_deref()?;
    let owner = hit.context.as_deref().and_then(enclosing_type);
    let said = |words: Vec<String>| !words.is_empty() && words.iter().all(|w| lexical::says_name_word(w, &q.terms));
    symbol
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .find_map(|name| match &owner {
            Some(owner) if is_constructor(name, owner) => {
                said(lexical::name_words(owner)).then_some("the question names its type (a constructor)")
            }
            _ => said(lexical::name_words(name)).then_some("the question says its name"),
        })
}

/// Names a constructor has, whatever its type: a question names the type
/// ("Creates a new searcher builder" for `SearcherBuilder::new`).
const CONSTRUCTOR_NAMES: &[&str] = &[
    "new",
    "constructor",
    "__init__",
    "__new__",
    "init",
    "initialize",
    "__construct",
];

fn is_constructor(name: &str, owner: &str) -> bool {
    CONSTRUCTOR_NAMES.contains(&name) || name == owner
}

/// The type whose body holds a chunk, from the last of its enclosing
/// signatures: `impl<W: Write> Standard<W> {` → `Standard`, `impl Display
/// for Span` → `Span`, `export class GlProgram extends X` → `GlProgram`.
fn enclosing_type(context: &str) -> Option<String> {
    const TYPE_KEYWORDS: &[&str] = &[
        "class",
        "struct",
        "impl",
        "interface",
        "trait",
        "enum",
        "object",
        "record",
    ];
    // Generic parameters (`<'a, W: Write>`) name no type of the chunk.
    let mut depth = 0usize;
    let line: String = context
        .lines()
        .last()?
        .chars()
        .map(|c| {
            match c {
                '<' => depth += 1,
                '>' => depth = depth.saturating_sub(1),
                _ if depth == 0 => return c,
                _ => {}
            }
            ' '
        })
        .collect();
    let words: Vec<&str> = line
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let at = words.iter().position(|w| TYPE_KEYWORDS.contains(w))?;
    let rest = &words[at + 1..];
    // `impl Trait for Type`: the type follows `for`.
    let rest = match (words[at] == "impl", rest.iter().position(|w| *w == "for")) {
        (true, Some(f)) => &rest[f + 1..],
        _ => rest,
    };
    rest.first().map(|w| w.to_string())
}

/// Whether the hit's code holds one of the query's code fragments verbatim
/// (up to whitespace) or the hit sits in the file one of them names.
fn quotes_fragment(hit: &SearchHit, fragments: &[String]) -> bool {
    if fragments.is_empty() {
        return false;
    }
    let text = code_words(&hit.content).join(" ");
    fragments
        .iter()
        .any(|f| contains_whole(&text, f) || fragment_names_path(f, &hit.path))
}

/// The words of a chunk's code lines. Comments and doctest examples
/// (`>>> r = requests.get(url)` in a docstring) show how an API is used;
/// quoting it, a question is after the code itself.
fn code_words(content: &str) -> Vec<&str> {
    content
        .lines()
        .map(str::trim_start)
        .filter(|l| !is_commentary(l))
        .flat_map(str::split_whitespace)
        .collect()
}

/// A (trimmed) line that is a comment or a doctest example. Unlike the
/// signature texts' filter, attributes and preprocessor lines (`#[cfg(test)]`,
/// `#ifdef HAVE_UTF8PROC`) are code here: a question may quote them.
fn is_commentary(line: &str) -> bool {
    let hash_comment =
        line.starts_with('#') && !line[1..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '[' || c == '!');
    hash_comment
        || ["//", "/*", "*/", "* ", "-- ", ">>>", "... ", "\"\"\"", "'''"]
            .iter()
            .any(|p| line.starts_with(p))
        || line == "*"
}

/// Whether `text` holds `fragment` not as part of a longer name: the quoted
/// `pytest.mark.skip` is not in `pytest.mark.skipif`, `get(` is not in `target(`.
fn contains_whole(text: &str, fragment: &str) -> bool {
    let is_name_char = |c: char| c.is_alphanumeric() || c == '_';
    let starts_with_name = fragment.chars().next().is_some_and(is_name_char);
    let ends_with_name = fragment.chars().next_back().is_some_and(is_name_char);
    text.match_indices(fragment).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + fragment.len()..].chars().next();
        let joins_before = starts_with_name && before.is_some_and(is_name_char);
        let joins_after = ends_with_name && after.is_some_and(is_name_char);
        !(joins_before || joins_after)
    })
}

/// Whether `fragment` names the file at `path`: a path suffix (`flask/app.py`,
/// `sessions.py`) or a dotted module path (`_pytest.capture.EncodedFile` for
/// `src/_pytest/capture.py`), matched at segment boundaries.
fn fragment_names_path(fragment: &str, path: &str) -> bool {
    let ends_at_segment = |p: &str, suffix: &str| p == suffix || p.ends_with(&format!("/{suffix}"));
    let fragment = fragment.trim_start_matches("./");
    if fragment.contains(' ') {
        return false;
    }
    if ends_at_segment(path, fragment) {
        return true;
    }
    let parts: Vec<&str> = fragment.split('.').collect();
    let dotted_name = parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'));
    if !dotted_name {
        return false;
    }
    let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
    let stem = file.split_once('.').map_or(file, |(stem, _)| stem);
    let module = match (dir, stem) {
        (_, "__init__" | "mod" | "index") => dir.to_string(),
        ("", _) => stem.to_string(),
        _ => format!("{dir}/{stem}"),
    };
    (2..=parts.len()).any(|n| ends_at_segment(&module, &parts[..n].join("/")))
}

/// Keeps the best hits, dropping any that overlaps a better one in the same
/// file and any beyond `max_per_file` per file. A hit of a file already
/// listed competes at `SAME_FILE_FACTOR` times its score, so a second file
/// comes before the first file's next chunk unless that chunk clearly beats it.
fn diversify(hits: Vec<SearchHit>, limit: usize, max_per_file: Option<usize>) -> Vec<SearchHit> {
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
        // The best discounted score; the earlier hit on a tie.
        let best = pending
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| {
                let score = slot.as_ref()?.score;
                Some((i, score * same_file_factor(score, kept_per_file[file_of[i]])))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((i, score)) = best else { break };
        let mut hit = pending[i].take().expect("chosen hit is pending");
        let file = file_of[i];
        if let (Some(explain), true) = (&mut hit.explain, kept_per_file[file] > 0) {
            explain.factors.push(ExplainFactor {
                reason: match kept_per_file[file] {
                    1 => "a result of its file listed above".to_string(),
                    n => format!("{n} results of its file listed above"),
                },
                factor: same_file_factor(hit.score, kept_per_file[file]),
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
/// listed above it: `SAME_FILE_FACTOR` once, inverted for a negative score
/// (the semantic side can give one) so that it is lowered too.
fn same_file_factor(score: f64, earlier: usize) -> f64 {
    match (earlier, score >= 0.0) {
        (0, _) => 1.0,
        (_, true) => SAME_FILE_FACTOR,
        (_, false) => 1.0 / SAME_FILE_FACTOR,
    }
}

/// The `max_lines` consecutive lines of `content` that contain the most
/// distinct query terms (the first lines when nothing matches).
pub fn snippet(content: &str, q: &QueryTerms, max_lines: usize) -> String {
    let lines: Vec<&str> = content.lines().collect();
    if lines.len() <= max_lines {
        return lines.join("\n");
    }
    let line_terms: Vec<Vec<String>> = lines
        .iter()
        .map(|line| {
            let mut s = String::new();
            lexical::index_terms(line, &mut s);
            s.split(' ')
                .filter(|t| q.terms.iter().any(|qt| qt == t))
                .map(str::to_string)
                .collect()
        })
        .collect();
    let mut best = (0usize, 0usize);
    for start in 0..=lines.len() - max_lines {
        let mut distinct: Vec<&String> = line_terms[start..start + max_lines].iter().flatten().collect();
        distinct.sort();
        distinct.dedup();
        if distinct.len() > best.1 {
            best = (start, distinct.len());
        }
    }
    lines[best.0..best.0 + max_lines].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let kept = diversify(hits.clone(), 10, None);
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
            order(&diversify(hits.clone(), 10, Some(2))),
            [
                ("a.rs".into(), 1),
                ("c.rs".into(), 1),
                ("a.rs".into(), 20),
                ("b.rs".into(), 1)
            ]
        );
        assert_eq!(diversify(hits.clone(), 2, None).len(), 2);
        // Negative scores (semantic side) are lowered too, not raised.
        let negative = diversify(
            vec![
                hit("a.rs", 1, 2, -0.10),
                hit("a.rs", 5, 6, -0.11),
                hit("b.rs", 1, 2, -0.112),
            ],
            3,
            None,
        );
        assert_eq!(order(&negative)[1], ("b.rs".into(), 1));
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

    #[test]
    fn fusion_settings_parse_and_reject_nonsense() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(Fusion::from_vars(vars(&[])).unwrap(), Fusion::default());
        assert_eq!(
            Fusion::from_vars(vars(&[
                ("KEN_FUSION", "rrf"),
                ("KEN_RRF_K", "20"),
                ("KEN_FUSION_WEIGHTS", "2, 1")
            ]))
            .unwrap(),
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
            Fusion::from_vars(vars(&[("KEN_FUSION_WEIGHTS", "1,0.5,0")])).unwrap(),
            Fusion::Convex(Weights {
                lexical: 1.0,
                semantic: 0.5,
                signature: 0.0
            })
        );
        for bad in [
            &[("KEN_FUSION", "max")][..],
            &[("KEN_FUSION_WEIGHTS", "1")],
            &[("KEN_FUSION_WEIGHTS", "0,0")],
            &[("KEN_FUSION_WEIGHTS", "1,1,-1")],
            &[("KEN_FUSION_WEIGHTS", "1,1,1,1")],
            &[("KEN_FUSION", "rrf"), ("KEN_RRF_K", "-1")],
        ] {
            let err = Fusion::from_vars(vars(bad)).unwrap_err().to_string();
            assert!(err.contains("KEN_"), "{err}");
        }
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

    #[test]
    fn fusion_prefers_candidates_strong_on_both_sides() {
        let candidates: HashMap<i64, Candidate> = [
            (1, 10.0, Some(0.30)), // best lexically, weak semantically
            (2, 8.0, Some(0.80)),  // good on both
            (3, 0.0, Some(0.85)),  // found by vectors only
            (4, 2.0, Some(0.10)),
        ]
        .into_iter()
        .map(|(id, bm25, similarity)| {
            (
                id,
                Candidate {
                    bm25,
                    similarity,
                    ..Candidate::default()
                },
            )
        })
        .collect();
        let best = |fusion| {
            let scores = fuse(&candidates, SearchMode::Hybrid, true, fusion);
            let mut ids: Vec<i64> = scores.keys().copied().collect();
            ids.sort_by(|a, b| scores[b].total_cmp(&scores[a]).then(a.cmp(b)));
            ids
        };
        assert_eq!(best(Fusion::default()), vec![2, 1, 3, 4]);
        // RRF sees ranks only: 1 (ranks 1 and 3) edges out 2 (ranks 2 and 2).
        let rrf = best(Fusion::Rrf {
            k: 60.0,
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

    #[test]
    fn quoted_code_is_looked_for_in_code_lines_only() {
        let chunk = "\"\"\"Fetch a page.\n    >>> r = requests.get(url)\n    ... r.ok\n\"\"\"\n# requests.get in a comment\n// requests.get\n * requests.get\n#[cfg(test)]\n#ifdef HAVE_UTF8PROC\nreturn session.request(url)\n";
        let words = code_words(chunk).join(" ");
        assert!(!words.contains("requests.get"), "{words}");
        assert!(!words.contains("r.ok"), "{words}");
        assert!(words.contains("#[cfg(test)]"), "{words}");
        assert!(words.contains("#ifdef HAVE_UTF8PROC"), "{words}");
        assert!(words.contains("session.request(url)"), "{words}");
    }

    #[test]
    fn a_quoted_fragment_matches_only_whole_names() {
        assert!(contains_whole("use pytest.mark.skip here", "pytest.mark.skip"));
        assert!(contains_whole("@pytest.mark.skip(reason=x)", "pytest.mark.skip"));
        assert!(!contains_whole("use the pytest.mark.skipif marker", "pytest.mark.skip"));
        assert!(!contains_whole("mypytest.mark.skip", "pytest.mark.skip"));
        assert!(contains_whole("x = builtin_str(method)", "builtin_str(method)"));
        // Punctuation at the fragment's edge needs no boundary.
        assert!(contains_whole("self.get(key)", ".get("));
        assert!(contains_whole("--jobs=0 -v", "--jobs=0"));
        assert!(!contains_whole("--jobs=01", "--jobs=0"));
        assert!(contains_whole("é--runxfail", "--runxfail"));
    }

    #[test]
    fn fragments_name_files_by_path_suffix_or_module() {
        for (fragment, path) in [
            ("src/flask/app.py", "src/flask/app.py"),
            ("flask/app.py", "src/flask/app.py"),
            ("sessions.py", "requests/sessions.py"),
            ("_pytest.capture.EncodedFile", "src/_pytest/capture.py"),
            ("_pytest.mark", "src/_pytest/mark/__init__.py"),
        ] {
            assert!(fragment_names_path(fragment, path), "{fragment} names {path}");
        }
        for (fragment, path) in [
            ("sessions.py", "requests/old_sessions.py"),
            ("pytest.mark.skip", "src/_pytest/mark/__init__.py"),
            ("caplog.get_records", "src/_pytest/logging.py"),
            ("a = b.c", "b/c.py"),
        ] {
            assert!(!fragment_names_path(fragment, path), "{fragment} does not name {path}");
        }
    }

    #[test]
    fn a_question_says_a_name_when_it_has_all_its_words() {
        let named = |symbol: &str| SearchHit {
            symbol: Some(symbol.to_string()),
            ..SearchHit::default()
        };
        let q = QueryTerms::parse("Convert to a RGB color object with normalized components");
        assert_eq!(says_name(&named("toRgb"), &q), Some("the question says its name"));
        assert!(
            says_name(&named("normalize_components"), &q).is_some(),
            "words are stemmed"
        );
        assert!(
            says_name(&named("toRgba, toRgb"), &q).is_some(),
            "one of a chunk's names"
        );
        assert!(says_name(&named("toRgba"), &q).is_none());
        assert!(says_name(&named("toHsl"), &q).is_none());
        assert!(
            says_name(&named("to"), &q).is_none(),
            "a name of stopwords says nothing"
        );
        assert!(says_name(&SearchHit::default(), &q).is_none());
        let q = QueryTerms::parse("Set the maximum number of columns allowed");
        assert!(
            says_name(&named("max_columns"), &q).is_some(),
            "max abbreviates maximum"
        );
        assert!(says_name(&named("min_columns"), &q).is_none());
    }

    #[test]
    fn a_constructor_is_named_by_its_type() {
        let member = |symbol: &str, context: &str| SearchHit {
            symbol: Some(symbol.to_string()),
            context: Some(context.to_string()),
            ..SearchHit::default()
        };
        let by_type = Some("the question names its type (a constructor)");
        let q = QueryTerms::parse("Create a new searcher builder with a default configuration");
        assert_eq!(says_name(&member("new", "impl SearcherBuilder {"), &q), by_type);
        let nested = member("new", "mod searcher {\nimpl<'a, W: Write> SearcherBuilder<W> {");
        assert_eq!(says_name(&nested, &q), by_type);
        let other = member("new", "impl StandardBuilder {");
        assert!(says_name(&other, &q).is_none(), "another type's constructor");
        let method = member("build", "impl SearcherBuilder {");
        assert!(says_name(&method, &q).is_none(), "not a constructor");
        let q = QueryTerms::parse("Creates a shiny new GlProgram.");
        for (name, context) in [
            ("constructor", "export class GlProgram extends Base"),
            ("GlProgram", "public final class GlProgram implements Program {"),
            ("__init__", "class GlProgram(Base):"),
        ] {
            assert_eq!(says_name(&member(name, context), &q), by_type, "{name}");
        }
    }

    #[test]
    fn the_enclosing_type_is_read_from_the_last_signature() {
        assert_eq!(
            enclosing_type("impl<W: Write> Standard<W> {").as_deref(),
            Some("Standard")
        );
        assert_eq!(enclosing_type("impl fmt::Display for Span {").as_deref(), Some("Span"));
        assert_eq!(
            enclosing_type("export class GlProgram extends X").as_deref(),
            Some("GlProgram")
        );
        assert_eq!(
            enclosing_type("public static final class Builder {").as_deref(),
            Some("Builder")
        );
        assert_eq!(
            enclosing_type("class Session(SessionRedirectMixin):").as_deref(),
            Some("Session")
        );
        assert_eq!(enclosing_type("func (c *Ctx) Bind() {"), None);
        assert_eq!(
            enclosing_type("impl<'a, M: Matcher<T>, W> StandardImpl<'a, M, W> {").as_deref(),
            Some("StandardImpl")
        );
    }

    #[test]
    fn a_test_module_inside_a_source_file_is_test_code() {
        let hit = |path: &str, context: Option<&str>| SearchHit {
            path: path.into(),
            context: context.map(str::to_string),
            ..SearchHit::default()
        };
        assert!(is_test_code(&hit("src/standard.rs", Some("mod tests {"))));
        assert!(is_test_code(&hit(
            "src/a.rs",
            Some("pub mod tests {\n    impl Fixture {")
        )));
        assert!(is_test_code(&hit("src/a.rs", Some("mod parser_tests {"))));
        assert!(is_test_code(&hit("tests/it.rs", None)));
        assert!(!is_test_code(&hit("src/a.rs", Some("impl StandardBuilder {"))));
        assert!(!is_test_code(&hit("src/a.rs", Some("mod testimony {"))));
        assert!(!is_test_code(&hit("src/a.rs", Some("mod attestation {"))));
        assert!(!is_test_code(&hit("src/a.rs", None)));
    }

    #[test]
    fn a_definition_is_outranked_by_its_spelling_its_type_and_its_declaring_part() {
        let row = |chunk_id: i64, file_id: i64, kind: &str, name: &str, start: u32, end: u32| SymbolRow {
            chunk_id,
            file_id,
            kind: kind.into(),
            language: "rust".into(),
            member: (name.into(), start, end),
        };
        let rows = [
            row(1, 1, "enum", "PollFuture", 5, 10),
            row(2, 1, "impl", "PollFuture", 12, 30),
            row(3, 1, "function", "poll_future", 40, 120),
            row(4, 1, "function", "poll_future", 118, 160),
            row(5, 2, "section", "poll_future", 1, 9),
        ];
        let declares = |r: &SymbolRow| r.chunk_id != 3;
        let why = |query: &str| outranked_definitions(&rows, &QueryTerms::parse(query), declares);
        // The function as typed, at the part that declares it (here the
        // second: the first held a long comment only).
        assert_eq!(
            why("poll_future"),
            [
                Some(SPELLED_OTHERWISE),
                Some(SPELLED_OTHERWISE),
                Some(OTHER_PART),
                None,
                None
            ]
        );
        // The type as typed, before its impl.
        assert_eq!(
            why("PollFuture"),
            [
                None,
                Some(IMPL_OF_DEFINED_TYPE),
                Some(SPELLED_OTHERWISE),
                Some(SPELLED_OTHERWISE),
                Some(SPELLED_OTHERWISE)
            ]
        );
        // Neither spelling typed: no definition outranks another by its spelling.
        assert_eq!(
            why("pollFuture"),
            [None, Some(IMPL_OF_DEFINED_TYPE), Some(OTHER_PART), None, None]
        );
        // A heading of the docs spelled as typed outranks no code, and an
        // impl whose type is not found is the answer; overloads side by side
        // are two definitions, not parts of one.
        let rows = [
            row(1, 1, "function", "Poll_future", 1, 5),
            row(5, 2, "section", "poll_future", 1, 9),
            row(6, 3, "impl", "PollFuture", 1, 3),
            row(7, 1, "function", "Poll_future", 6, 9),
        ];
        assert_eq!(
            outranked_definitions(&rows, &QueryTerms::parse("poll_future"), |_| true),
            [None, None, None, None]
        );
    }

    #[test]
    fn query_intent_lifts_only_what_the_query_names() {
        let intent = |q: &str| QueryIntent::of(&QueryTerms::parse(q), q);
        assert_eq!(intent("retry backoff delay"), QueryIntent::default());
        assert!(intent("how long to wait between retries").question);
        assert!(!intent("getTreeBuilderDefaultNamespace").question);
        assert!(intent("tests for the retry delay").tests);
        assert!(intent("where is the retry configured").config);
        assert!(intent("retry settings in pyproject.toml").config);
        assert!(intent("changelog entry for retries").changelog);
        assert!(intent("release notes of 2.0").changelog);
        assert!(intent("retry guide in the docs").docs);
        let hit = |path: &str, kind: &str, language: &str| SearchHit {
            path: path.into(),
            kind: kind.into(),
            language: language.into(),
            ..SearchHit::default()
        };
        let none = QueryIntent::default();
        let rerank_factor = |hit: &SearchHit, exact: bool, intent: QueryIntent| -> f64 {
            let defines = if exact { Defines::Asked } else { Defines::No };
            rerank_factors(hit, defines, intent).iter().map(|(_, f)| f).product()
        };
        let source = rerank_factor(&hit("src/retry.py", "function", "python"), false, none);
        for other in [
            hit("CHANGELOG.md", "section", "markdown"),
            hit("pyproject.toml", "table", "toml"),
            hit("pylintrc", "text", "text"),
            hit("tests/test_retry.py", "function", "python"),
            hit("docs/retry.md", "section", "markdown"),
        ] {
            assert!(rerank_factor(&other, false, none) < source, "{}", other.path);
        }
        let changelog = hit("CHANGELOG.md", "section", "markdown");
        let asked = intent("changelog retry");
        assert!(rerank_factor(&changelog, false, asked) > rerank_factor(&changelog, false, none));
        let test = hit("tests/test_retry.py", "function", "python");
        let asked = intent("test retry");
        assert!(rerank_factor(&test, false, asked) > rerank_factor(&test, false, none));
        // A definition of the identifier asked for: most when the query is the
        // name or a few words, less inside a question, more than any other.
        let function = hit("src/retry.py", "function", "python");
        let named = rerank_factor(&function, true, intent("retry_delay"));
        let in_keywords = rerank_factor(&function, true, intent("retry_delay backoff"));
        let in_question = rerank_factor(&function, true, intent("how is retry_delay computed here"));
        assert_eq!(named, in_keywords);
        assert!(
            named > in_question && in_question > source,
            "{named} {in_question} {source}"
        );
    }
}
