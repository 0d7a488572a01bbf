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
use crate::index::share;
use crate::index::IndexOptions;
use crate::search::kb;
use crate::serve::wire;
use crate::source::discover::DiscoverOptions;
use crate::store;

/// `ken index`: the lexical index, then (unless `--no-embed`) the embeddings,
/// here or in a background process, then the query adapter's fit in a
/// background process (here with `--wait-for-adapter`). Ctrl-C stops after
/// the current batch, keeping (and publishing) everything done.
pub(super) fn index(at: &Place, args: &IndexArgs) -> Result<i32> {
    let (root, index_dir) = at.write(args.path.as_deref(), "index", args.allow_broad_root)?;
    let opts = IndexOptions {
        discover: DiscoverOptions {
            max_file_size: args.max_file_size,
            default_excludes: !args.no_default_excludes,
            ..DiscoverOptions::default()
        },
        reporter: Reporter::terminal(!args.quiet && std::io::stderr().is_terminal()).with_cancel(stop_on_interrupt()),
        lock_timeout: crate::store::WRITE_LOCK_TIMEOUT,
        ..IndexOptions::default()
    };
    let to_export = args
        .export
        .as_deref()
        .map(|file| share::tree_to_export(&root, file, args.allow_dirty))
        .transpose()?;
    let imported = match &args.import {
        Some(file) => Some(import(&root, &index_dir, file, args)?),
        None => None,
    };
    let embed_here = (!args.no_embed && !args.background).then_some(match args.wait_for_adapter {
        true => app::FitWhen::Now,
        false => app::FitWhen::Background,
    });
    let indexed = app::index_then_embed(&root, &index_dir, &opts, embed_here, |report| {
        remember_embedding_choice(&index_dir, !args.no_embed)?;
        if !args.json && !args.quiet {
            render::print_index_report(report);
            if embed_here.is_some() && std::io::stderr().is_terminal() {
                eprintln!(
                    "ken: lexical search works now; semantic search covers the chunks embedded so far \
                     (Ctrl-C stops and keeps them)"
                );
            }
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
    });
    if opts.reporter.is_cancelled() {
        return Ok(interrupted());
    }
    let indexed = indexed?;
    let (report, embedding) = (indexed.report, indexed.embedding.and_then(warn_unembedded));
    let adapter = indexed.adapter.as_ref().and_then(app::Adapter::describe);
    let exported = match (&args.export, &to_export) {
        (Some(file), Some(tree)) => Some(share::export(&index_dir, tree, file)?),
        _ => None,
    };
    if args.json {
        let mut value = serde_json::to_value(wire::IndexReport::from(report))?;
        value["embedding"] = serde_json::to_value(embedding.map(wire::EmbedReport::from))?;
        value["query_adapter"] = serde_json::to_value(&adapter)?;
        value["imported"] = serde_json::to_value(imported.map(wire::SharedIndexFile::from))?;
        value["exported"] = serde_json::to_value(exported.map(wire::SharedIndexFile::from))?;
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if !args.quiet {
        if let Some(e) = &embedding {
            println!("  embedded:  {}", e.summary());
        }
        if let Some(adapter) = &adapter {
            println!("  query adapter: {adapter}");
        }
        if let Some(exported) = &exported {
            println!("exported {} to {}", exported.describe(), exported.file.display());
        }
    }
    Ok(0)
}

/// `ken index --import FILE`: the file checked and installed (against the
/// embedder this checkout uses, unless `--no-embed`); the run that follows
/// catches up with the working tree.
fn import(root: &Path, index_dir: &Path, file: &Path, args: &IndexArgs) -> Result<share::SharedFile> {
    let embedder = match args.no_embed {
        true => None,
        false => Some(crate::embed::configured_embedder()?.0.id().to_string()),
    };
    let imported = share::import(root, index_dir, file, args.force, embedder.as_deref())?;
    if !args.json && !args.quiet {
        println!(
            "imported {} from {}; catching up with the working tree",
            imported.describe(),
            file.display()
        );
    }
    Ok(imported)
}

/// Says what an interrupted run kept; the exit code of an interrupt.
fn interrupted() -> i32 {
    eprintln!(
        "ken: interrupted; everything indexed and embedded so far is kept and searchable, and the next \
         `ken index` continues from it"
    );
    130
}

/// A flag set by the first Ctrl-C (SIGINT) or SIGTERM, for a job to stop
/// after its current batch; a second one ends the process at once.
fn stop_on_interrupt() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, OnceLock};
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    extern "C" fn on_signal(signal: libc::c_int) {
        if let Some(flag) = FLAG.get() {
            flag.store(true, Ordering::SeqCst);
        }
        const SAID: &[u8] = b"\nken: stopping after the current batch; what is done is kept (Ctrl-C again quits now)\n";
        // SAFETY: write(2) and signal(2) are async-signal-safe; the next
        // signal of this kind gets the default action (the process ends).
        unsafe {
            libc::write(2, SAID.as_ptr().cast(), SAID.len());
            libc::signal(signal, libc::SIG_DFL);
        }
    }
    let flag = FLAG.get_or_init(|| Arc::new(AtomicBool::new(false))).clone();
    // SAFETY: the handler only stores to an atomic, writes and resets itself.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    flag
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
        fit_adapter: true,
        ..defaults
    };
    if !args.json && verbose == 0 {
        eprintln!("ken: watching {} (Ctrl-C stops; -v shows each update)", root.display());
    }
    let state = crate::index::watch::WatchState::default();
    crate::index::watch::run(&root, &index_dir, &opts, stop_on_signal(), &state)?;
    Ok(0)
}

/// `ken embed`: the missing embeddings of the index, then the query
/// adapter's fit in a background process.
pub(super) fn embed(at: &Place, quiet: bool) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let reporter = Reporter::terminal(!quiet && std::io::stderr().is_terminal()).with_cancel(stop_on_interrupt());
    remember_embedding_choice(&index_dir, true)?;
    let report = semantic::embed_root(&root, &index_dir, &reporter);
    if reporter.is_cancelled() {
        return Ok(interrupted());
    }
    let report = report?;
    let adapter = app::fit_adapter(&root, &index_dir, app::FitWhen::Background, &reporter);
    if !quiet {
        println!("embedded {}", report.summary());
        if let Some(adapter) = adapter.describe() {
            println!("query adapter: {adapter}");
        }
    }
    Ok(0)
}

/// `ken embed --adapter-only`: the query adapter's fit, here (what `ken
/// index` starts in the background, with a time budget).
pub(super) fn fit_adapter(at: &Place, quiet: bool, budget_secs: Option<u64>) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let reporter = Reporter::terminal(!quiet && std::io::stderr().is_terminal()).with_cancel(stop_on_interrupt());
    let started = std::time::Instant::now();
    let outcome = crate::index::fit::fit_root(&root, &index_dir, &reporter, budget_secs.map(Duration::from_secs))?;
    if !quiet {
        println!(
            "query adapter: {} ({:.1} s, {})",
            outcome.describe(),
            started.elapsed().as_secs_f64(),
            crate::store::now_rfc3339()
        );
    }
    Ok(if outcome == crate::index::fit::FitOutcome::Stopped {
        130
    } else {
        0
    })
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
    let embed = (!no_embed).then_some(app::FitWhen::Background);
    let (_, indexed) = app::add_knowledge_base(root, index_dir, path, name, &opts, embed, |base, report| {
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
    let mut child = crate::index::fit::background_ken(root, index_dir)?
        .args(["embed", "--quiet"])
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
