//! The `ken` command line: [`args`] defines the commands, [`run`] hands each
//! to its function, grouped by area ([`index`], [`search`], [`context`],
//! [`graph`], [`status`], [`model`], [`serve`], [`bench`]); [`render`] is
//! how answers read for people.

mod args;
mod bench;
mod context;
mod engine;
mod graph;
mod index;
mod model;
mod render;
mod search;
mod serve;
mod status;
mod workspace;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;

use crate::store::{self, INDEX_DIR_NAME};
use args::{Cli, Command};

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse_from(args::hyphen_words_last(std::env::args_os().collect()));
    let typos = match crate::config::check() {
        Ok(typos) => typos,
        Err(e) => {
            eprintln!("ken: error: {e:#}");
            return 2;
        }
    };
    crate::serve::logs::init(cli.verbose);
    for typo in typos {
        tracing::warn!("{typo}");
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ken: error: {e:#}");
            1
        }
    }
}

/// Runs one command; its exit code.
fn run(cli: Cli) -> Result<i32> {
    let Cli {
        root,
        index_dir,
        verbose,
        workspace,
        command,
    } = cli;
    let at = Place {
        root: root.as_deref(),
        index_dir: index_dir.as_deref(),
        workspace: workspace.as_deref(),
    };
    match command {
        Command::Index(args) if args.path.is_none() => match at.workspace()? {
            Some(ws) => workspace::index(&ws, &args),
            None => index::index(&at, &args),
        },
        Command::Index(args) => index::index(&at, &args),
        Command::Watch(args) => index::watch(&at, &args, verbose),
        Command::Embed {
            quiet,
            adapter_only,
            budget_secs,
        } => match adapter_only {
            true => index::fit_adapter(&at, quiet, budget_secs),
            false => index::embed(&at, quiet),
        },
        Command::Kb { what } => index::kb(&at, what),
        Command::Search(args) => match at.workspace()? {
            Some(ws) => workspace::search(&ws, args),
            None => search::search(&at, args),
        },
        Command::Similar {
            target,
            k,
            include_source_file,
            json,
        } => search::similar(&at, &target, k, include_source_file, json),
        Command::Callgraph(args) => match at.workspace()? {
            Some(ws) => workspace::callgraph(&ws, &args),
            None => graph::callgraph(&at, &args),
        },
        Command::Path(args) => graph::path(&at, &args),
        Command::Def(args) => graph::def(&at, &args),
        Command::Map(args) => context::map(&at, &args),
        Command::Context(args) => context::context(&at, &args),
        Command::Impact(args) => context::impact(&at, &args),
        Command::Status { json } => status::status(&at, json),
        Command::Health { repair, full, json } => status::health(&at, repair, full, json),
        Command::Chunks { file, json } => status::chunks(&file, json),
        Command::Model { what } => model::model(what),
        Command::Serve(args) => serve::serve(&at, args),
        Command::Schemas { out } => serve::schemas(&out),
        Command::Bench { what } => bench::bench(&at, what),
        Command::Workspace { what } => workspace::workspace(&at, what),
        Command::Engine { what } => engine::engine(&at, what),
    }
}

/// Where a command works: the global `--root`, `--index-dir` and `--workspace` as given.
struct Place<'a> {
    root: Option<&'a Path>,
    index_dir: Option<&'a Path>,
    workspace: Option<&'a Path>,
}

impl Place<'_> {
    /// The workspace file to use: `--workspace` (a file or its folder), else
    /// the nearest `ken.toml` with a `[workspace]` above the working
    /// directory, unless `--root` or `--index-dir` names one repository.
    fn workspace_file(&self) -> Result<Option<PathBuf>> {
        if let Some(given) = self.workspace {
            let file = match given.is_dir() {
                true => given.join(crate::source::workspace::FILE_NAME),
                false => given.to_path_buf(),
            };
            return Ok(Some(file));
        }
        if self.root.is_some() || self.index_dir.is_some() {
            return Ok(None);
        }
        let cwd = std::env::current_dir().context("cannot read the working directory")?;
        Ok(crate::source::workspace::find(&cwd))
    }

    /// The workspace in use, if any (see [`Place::workspace_file`]).
    fn workspace(&self) -> Result<Option<crate::source::workspace::Workspace>> {
        self.workspace_file()?
            .map(|file| crate::source::workspace::Workspace::load(&file))
            .transpose()
    }

    /// The root and index folder of a command that reads an index: `--root`,
    /// else the nearest ancestor of the working directory with an index, else
    /// the top of its git work tree, else the working directory.
    fn read(&self) -> Result<(PathBuf, PathBuf)> {
        let root = resolve_root(self.root)?;
        let index_dir = self.index_dir_of(&root);
        Ok((root, index_dir))
    }

    /// The root `ken index` or `ken watch` writes the index of: the PATH
    /// argument, else `--root`, else the working directory; `/` and home only
    /// when allowed.
    fn write(&self, path: Option<&Path>, verb: &str, allow_broad: bool) -> Result<(PathBuf, PathBuf)> {
        let root = match path.or(self.root) {
            Some(p) => p.to_path_buf(),
            None => std::env::current_dir()?,
        };
        let root = root
            .canonicalize()
            .with_context(|| format!("cannot {verb} {}: no such directory", root.display()))?;
        crate::index::watch::check_root(&root, allow_broad)?;
        let index_dir = self.index_dir_of(&root);
        Ok((root, index_dir))
    }

    /// `--index-dir` (or `KEN_INDEX_DIR`) if given, else the root's `.ken/`.
    fn index_dir_of(&self, root: &Path) -> PathBuf {
        self.index_dir
            .map_or_else(|| store::index_dir_for(root), Path::to_path_buf)
    }
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
