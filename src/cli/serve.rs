//! `ken serve` and `ken schemas`: the MCP server and its tools' schemas.

use std::path::Path;

use anyhow::{Context, Result};

use super::args::ServeArgs;
use super::Place;

/// `ken serve`: the settings file and the flags, read once, then the server.
pub(super) fn serve(at: &Place, args: ServeArgs) -> Result<i32> {
    let settings = crate::config::load()?;
    let tools = if args.tools.is_empty() {
        settings.serve.tools.unwrap_or_default()
    } else {
        args.tools
    };
    if args.list_tools {
        return list_tools(&tools);
    }
    let workspace = at.workspace()?;
    let (root, index_dir) = match &workspace {
        Some(ws) => served_member(ws)?,
        None => at.read()?,
    };
    let mut allowed_kb_folders = args.allow_kb;
    allowed_kb_folders.extend(settings.knowledge_bases.allow);
    let opts = crate::serve::ServeOptions {
        tools,
        allowed_kb_folders,
        watch: (!args.no_watch).then(crate::index::watch::WatchOptions::for_server),
        workspace,
    };
    let ken = crate::config::try_settings()?;
    if let Some(key) = args.service {
        let rendezvous = crate::serve::rendezvous::Rendezvous::named(&key)?;
        let idle = std::time::Duration::from_secs(ken.service_idle_secs);
        crate::serve::service::run(root, index_dir, opts, rendezvous, idle)?;
    } else if args.no_service || !ken.service {
        crate::serve::serve(root, index_dir, opts)?;
    } else {
        crate::serve::proxy::attach(&root, &index_dir, &opts)?;
    }
    Ok(0)
}

/// In a workspace, the member the server's other tools (and its watcher)
/// work on: the one holding the working directory, else the first.
fn served_member(ws: &crate::source::workspace::Workspace) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let cwd = std::env::current_dir()?;
    let cwd = cwd.canonicalize().unwrap_or(cwd);
    let member = ws
        .member_holding(&cwd)
        .or_else(|| ws.members.iter().find(|m| m.exists()))
        .with_context(|| format!("{} has no member folder to serve ({})", ws.file.display(), ws.names()))?;
    Ok((member.root.clone(), crate::store::index_dir_for(&member.root)))
}

/// `ken serve --list-tools`: each exposed tool and what it costs an agent's turn.
fn list_tools(tools: &[String]) -> Result<i32> {
    let router = crate::serve::selected_tools(tools)?;
    let mut total = 0;
    for tool in router.list_all() {
        let size = crate::serve::surface::model_facing_size(&tool);
        total += size;
        println!("{:<24} {size:>6}", tool.name);
    }
    println!("{:<24} {total:>6} characters", "total");
    Ok(0)
}

/// `ken schemas`: the JSON Schemas of the tools' inputs and outputs into `out`.
pub(super) fn schemas(out: &Path) -> Result<i32> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, text) in crate::serve::schema_files() {
        std::fs::write(out.join(&name), text)?;
        println!("{}", out.join(&name).display());
    }
    Ok(0)
}
