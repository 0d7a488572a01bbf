//! The wire format of the MCP tools: their arguments (here) and results
//! (`search`, `index`, `graph`, `context`), the only types deriving
//! `JsonSchema`; `schemas/` holds what they generate. The core types convert
//! into them (`From`), so a change in the core changes what a client reads
//! only where a conversion here is changed with it. The CLI's `--json`
//! output is written with the same types.

mod context;
mod graph;
mod index;
mod search;

pub use context::{
    AffectedTest, Caller, ChangedFile, ChangedSymbol, Commit, Impact, Pack, Piece, QuestionContext, RepoMap, Risk,
    SymbolContext, SymbolInfo,
};
pub use graph::{symbols, CallGraph, CallPath, Confidence as EdgeConfidence, Direction, Edge, Site, Symbol};
pub use index::{
    knowledge_bases, BaseIndexed, BaseStatus, EmbedReport, Finding, Freshness, HealthReport, IndexOutcome, IndexReport,
    KnowledgeBase, KnowledgeBaseAdded, KnowledgeBaseRemoved, KnowledgeBasesOutput, ServerStatus, ServiceStatus,
    Severity, SharedIndexFile, SkipCounts, SkipReason, Status,
};
pub use search::{
    Confidence, Explain, ExplainFactor, Hit, Level, Location, SearchMode, SearchOutput, Signals, Weights,
};

use rmcp::schemars;
use serde::{Deserialize, Serialize};

/// Tool arguments whose errors name the argument at fault
/// (`argument \`limit\`: invalid type: string "ten", expected usize`).
#[derive(Debug)]
pub struct Args<T>(pub T);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Args<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        serde_path_to_error::deserialize(value).map(Args).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." {
                D::Error::custom(inner)
            } else {
                D::Error::custom(format!("argument `{path}`: {inner}"))
            }
        })
    }
}

impl<T: schemars::JsonSchema> schemars::JsonSchema for Args<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }

    fn inline_schema() -> bool {
        T::inline_schema()
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SearchArgs {
    /// What to look for: a question, keywords, or an identifier.
    pub query: String,
    /// How many results (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// hybrid (default), semantic or lexical.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Only paths matching this glob (`src/**/*.rs`) or under this folder.
    #[serde(default)]
    pub path: Option<String>,
    /// Only this language (rust, python, typescript...).
    #[serde(default)]
    pub language: Option<String>,
    /// Only this chunk kind (function, method, class, struct, section...).
    #[serde(default)]
    pub kind: Option<String>,
    /// At most this many results per file (1 lists files).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_per_file: Option<usize>,
    /// Fill about this many tokens of code instead of a fixed count.
    #[serde(default)]
    pub token_budget: Option<usize>,
    /// Only `project` or one knowledge base (default: all).
    #[serde(default)]
    pub base: Option<String>,
    /// Say why each result ranks where it does.
    #[serde(default)]
    pub explain: Option<bool>,
    /// Only these workspace members (default: all).
    #[serde(default)]
    pub member: Option<Vec<String>>,
}

/// codebase_peek takes the filters of a search; what shapes code it does not return is left out.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PeekArgs {
    /// What to look for: a question, keywords, or an identifier.
    pub query: String,
    /// How many results (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// hybrid (default), semantic or lexical.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Only paths matching this glob (`src/**/*.rs`) or under this folder.
    #[serde(default)]
    pub path: Option<String>,
    /// Only this language (rust, python, typescript...).
    #[serde(default)]
    pub language: Option<String>,
    /// At most this many results per file (1 lists files).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_per_file: Option<usize>,
}

impl From<PeekArgs> for SearchArgs {
    fn from(p: PeekArgs) -> SearchArgs {
        SearchArgs {
            query: p.query,
            limit: p.limit,
            mode: p.mode,
            path: p.path,
            language: p.language,
            kind: None,
            max_per_file: p.max_per_file,
            token_budget: None,
            base: None,
            explain: None,
            member: None,
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct QuestionArgs {
    /// The question or task, in words or identifiers.
    pub query: String,
    /// Tokens the whole answer may take (default 3000).
    #[serde(default)]
    #[schemars(range(min = 500, max = 16000))]
    pub budget: Option<usize>,
    /// hybrid (default), semantic or lexical.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Only paths matching this glob (`src/**/*.rs`) or under this folder.
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SimilarArgs {
    /// A code snippet, or `path:line` of an indexed chunk.
    pub target: String,
    /// How many results (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// Keep results from the target's own file.
    #[serde(default)]
    pub include_source_file: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct NoArgs {}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CallGraphArgs {
    /// A symbol name, `path:line`, or symbol id.
    pub symbol: String,
    /// callers (default) or callees.
    #[serde(default)]
    pub direction: Option<Direction>,
    /// How many call levels to follow (default 1).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10))]
    pub depth: Option<usize>,
    /// Look the symbol up in this workspace member only.
    #[serde(default)]
    pub member: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RepoMapArgs {
    /// Tokens the map may take (default 2000).
    #[serde(default)]
    #[schemars(range(min = 500, max = 16000))]
    pub budget: Option<usize>,
    /// Rank around this: a path (file or folder) or a question.
    #[serde(default)]
    pub focus: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ChangeImpactArgs {
    /// Which change: `A..B`, `A...B`, or a revision or branch (from its merge base with HEAD to the working
    /// tree). Default: the uncommitted changes.
    #[serde(default)]
    pub rev: Option<String>,
    /// Only the staged changes.
    #[serde(default)]
    pub staged: Option<bool>,
    /// Caller levels to list (default 2).
    #[serde(default)]
    #[schemars(range(min = 1, max = 6))]
    pub depth: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CallPathArgs {
    /// Where the calls start: a symbol name, `path:line`, or symbol id.
    pub from: String,
    /// Where they end: a symbol name, `path:line`, or symbol id.
    pub to: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct HealthArgs {
    /// Fix what can be fixed (a damaged index is rebuilt from the files, keeping its vectors).
    #[serde(default)]
    pub repair: Option<bool>,
    /// Check the whole database page by page instead of the quick check (slower).
    #[serde(default)]
    pub full: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct IndexArgs {
    /// Rebuild the index from scratch.
    #[serde(default)]
    pub force: Option<bool>,
    /// Only count the files that would be indexed.
    #[serde(default)]
    pub estimate_only: Option<bool>,
    /// Also wait for the embeddings (default: computed in the background).
    #[serde(default)]
    pub wait_for_embeddings: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct LogsArgs {
    /// How many of the newest records (default 50, at most 2000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Minimum level: error, warn, info (default) or debug.
    #[serde(default)]
    pub level: Option<LogLevel>,
    /// Only this part of ken: index, semantic, search, mcp, watch, kb...
    #[serde(default)]
    pub category: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AddKnowledgeBaseArgs {
    /// The folder to add (absolute, or relative to the project root).
    pub path: String,
    /// A short name for results and removal (default: the folder's name).
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RemoveKnowledgeBaseArgs {
    /// The knowledge base's name, as list_knowledge_bases shows it.
    pub name: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct LogsOutput {
    /// Oldest first.
    pub records: Vec<crate::serve::logs::LogRecord>,
    /// Where the full log is written.
    pub log_file: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct QueryPromptArgs {
    /// What to look for.
    pub query: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SymbolPromptArgs {
    /// A function, method or type name.
    pub symbol: String,
}

/// Arguments of the `symbol_context` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SymbolContextArgs {
    /// A symbol: name (`parse`), `Type.name`, `path:line` or symbol id.
    pub symbol: String,
    /// Tokens the whole answer may take (default 3000).
    #[serde(default)]
    #[schemars(range(min = 500, max = 16000))]
    pub budget: Option<usize>,
    /// Only where the name is defined (`path:line kind name`): the cheap "where is X defined?".
    #[serde(default)]
    pub locations_only: Option<bool>,
}
