//! `ken index`, `ken watch`, `ken embed` and `ken kb`: what writes an index.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::args::{IndexArgs, KbCommand, WatchArgs};
use super::{render, Place};
use crate::app;
use crate::index::progress::Reporter;
use crate::index::semantic::{self, EmbedReport};
use crate::index::IndexOptions;
use crate::search::kb;
use crate::serve::wire;
use crate::source::discover::DiscoverOptions;
use crate::store;

/// `ken index`: the lexical index, then (unless `--no-embed`) the embeddings,
/// here or in a background process.
pub(super) fn index(at: &Place, args: &IndexArgs) -> Result<i32> {
    let (root, index_dir) = at.write(args.path.as_deref(), "index", args.allow_broad_root)?;
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
    let embed_here = !args.no_embed && !args.background;
    let indexed = app::index_then_embed(&root, &index_dir, &opts, embed_here, |report| {
        remember_embedding_choice(&index_dir, !args.no_embed)?;
        if !args.json && !args.quiet {
            render::print_index_report(report);
        }
        // The lexical index is committed and searchable: the vectors can
        // follow in a process of their own.
        if args.background {
            let pid = spawn_background_embedding(&root, &index_dir)?;
            if !args.quiet {
                eprintln!("ken: embedding continues in the background (pid {pid}); `ken status` shows the coverage");
            }
        }
        Ok(())
    })?;
    let (report, embedding) = (indexed.report, indexed.embedding.and_then(warn_unembedded));
    if args.json {
        let mut value = serde_json::to_value(wire::IndexReport::from(report))?;
        value["embedding"] = serde_json::to_value(embedding.map(wire::EmbedReport::from))?;
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if let (Some(e), false) = (&embedding, args.quiet) {
        println!("  embedded:  {}", e.summary());
    }
    Ok(0)
}

/// `ken watch`: re-indexes what changes until interrupted.
pub(super) fn watch(at: &Place, args: &WatchArgs, verbose: u8) -> Result<i32> {
    let (root, index_dir) = at.write(args.path.as_deref(), "watch", args.allow_broad_root)?;
    let defaults = crate::index::watch::WatchOptions::default();
    let opts = crate::index::watch::WatchOptions {
        debounce: Duration::from_millis(args.debounce_ms.max(1)),
        embed: !args.no_embed,
        poll: args.poll || defaults.poll,
        json_events: args.json,
        ..defaults
    };
    if !args.json && verbose == 0 {
        eprintln!("ken: watching {} (Ctrl-C stops; -v shows each update)", root.display());
    }
    let state = crate::index::watch::WatchState::default();
    crate::index::watch::run(&root, &index_dir, &opts, stop_on_signal(), &state)?;
    Ok(0)
}

/// `ken embed`: the missing embeddings of the index.
pub(super) fn embed(at: &Place, quiet: bool) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let reporter = Reporter::terminal(!quiet && std::io::stderr().is_terminal());
    remember_embedding_choice(&index_dir, true)?;
    let report = semantic::embed_root(&root, &index_dir, &reporter)?;
    if !quiet {
        println!("embedded {}", report.summary());
    }
    Ok(0)
}

/// `ken kb add|list|remove`.
pub(super) fn kb(at: &Place, what: KbCommand) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    match what {
        KbCommand::Add { path, name, no_embed } => kb_add(&root, &index_dir, &path, name.as_deref(), no_embed)?,
        KbCommand::List { json } => kb_list(&index_dir, json)?,
        KbCommand::Remove { name } => {
            let base = kb::remove(&index_dir, &name)?;
            println!("removed knowledge base `{}` ({})", base.name, base.path);
        }
    }
    Ok(0)
}

/// `ken kb add`: registers the folder, indexes it (unregistered again if
/// that fails), then embeds it unless `no_embed`.
fn kb_add(root: &Path, index_dir: &Path, path: &Path, name: Option<&str>, no_embed: bool) -> Result<()> {
    let opts = IndexOptions {
        reporter: Reporter::terminal(std::io::stderr().is_terminal()),
        ..IndexOptions::default()
    };
    let (_, indexed) = app::add_knowledge_base(root, index_dir, path, name, &opts, !no_embed, |base, report| {
        println!(
            "added knowledge base `{}` ({}): {} files, {} chunks",
            base.name, base.path, report.files, report.chunks
        );
        Ok(())
    })?;
    if let Some(embedding) = indexed.embedding {
        warn_unembedded(embedding);
    }
    Ok(())
}

/// An embedding pass's report; its failure as a warning (lexical search works).
fn warn_unembedded(embedding: Result<EmbedReport>) -> Option<EmbedReport> {
    embedding
        .map_err(|e| eprintln!("ken: warning: semantic search is unavailable, lexical search works: {e:#}"))
        .ok()
}

/// `ken kb list`.
fn kb_list(index_dir: &Path, json: bool) -> Result<()> {
    let bases = kb::list(index_dir)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&wire::knowledge_bases(bases.clone()))?
        );
    } else if bases.is_empty() {
        println!("no knowledge bases; add one with `ken kb add PATH`");
    }
    for base in bases.iter().filter(|_| !json) {
        println!("{}\t{}\t(added {})", base.name, base.path, base.added_at);
    }
    Ok(())
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

/// Records whether the user wants this index embedded, so that servers and
/// watchers started later respect `ken index --no-embed`.
fn remember_embedding_choice(index_dir: &Path, embed: bool) -> Result<()> {
    let store = store::Store::open_for_write(index_dir)?;
    store.set_meta(crate::store::MetaKey::EmbeddingsOff, if embed { "0" } else { "1" })
}
