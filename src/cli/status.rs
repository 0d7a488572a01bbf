//! `ken status`, `ken health` and `ken chunks`: what is indexed, whether the
//! index is sound, and how a file is cut into chunks.

use std::path::Path;

use anyhow::{Context, Result};

use super::render::{self, Style};
use super::Place;
use crate::serve::wire;

/// `ken status`.
pub(super) fn status(at: &Place, json: bool) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let status = crate::index::status::status(&root, &index_dir)?;
    // The shared service a `ken serve` with these settings would attach to, if one runs.
    let service = [true, false]
        .into_iter()
        .find_map(|watch| crate::serve::proxy::probe(&root, &index_dir, watch))
        .map(|w| wire::ServiceStatus {
            pid: w.pid,
            sessions: w.sessions as u64,
        });
    if json {
        let mut value = serde_json::to_value(wire::Status::from(status))?;
        if let (Some(service), Some(object)) = (&service, value.as_object_mut()) {
            object.insert("service".to_string(), serde_json::to_value(service)?);
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", render::status(&status, Style::stdout()));
        if let Some(service) = service {
            println!("  service:      pid {}, {} sessions", service.pid, service.sessions);
        }
    }
    Ok(0)
}

/// `ken health`: exit code 1 when the index is unhealthy.
pub(super) fn health(at: &Place, repair: bool, full: bool, json: bool) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let report = crate::index::health::check(&root, &index_dir, repair, full)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&wire::HealthReport::from(report.clone()))?
        );
    } else {
        for f in &report.findings {
            let fixed = if f.repaired { " (repaired)" } else { "" };
            println!("{:?}: {} ({}): {}{fixed}", f.severity, f.check, f.count, f.message);
        }
        println!("{}", if report.healthy { "healthy" } else { "unhealthy" });
    }
    Ok(if report.healthy { 0 } else { 1 })
}

/// `ken chunks FILE`: the chunks of one file, whatever the index holds.
pub(super) fn chunks(file: &Path, json: bool) -> Result<i32> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let text = crate::source::discover::check_content(&bytes)
        .map_err(|reason| anyhow::anyhow!("{} is not indexed: {}", file.display(), reason.label()))?;
    let lang = crate::source::lang::for_source(file, text);
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
