//! Log records: stderr for people, an in-memory ring buffer for the
//! `index_logs` tool, and (in `ken serve`) `.ken/ken.log`, rotated.
//!
//! stdout never carries logs: in `ken serve` it is JSON-RPC only.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Records kept in memory for `index_logs`.
const RING_CAPACITY: usize = 2000;
/// `ken.log` is renamed to `ken.log.1` (replacing it) beyond this size.
const ROTATE_BYTES: u64 = 2 * 1024 * 1024;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LogRecord {
    /// RFC 3339, UTC.
    pub time: String,
    /// error, warn, info, debug or trace.
    pub level: String,
    /// The part of ken that logged it (index, semantic, search, mcp, watch...).
    pub category: String,
    pub message: String,
}

struct LogFile {
    path: PathBuf,
    file: File,
    written: u64,
}

#[derive(Default)]
struct Sinks {
    ring: VecDeque<LogRecord>,
    file: Option<LogFile>,
}

fn sinks() -> &'static Mutex<Sinks> {
    static SINKS: OnceLock<Mutex<Sinks>> = OnceLock::new();
    SINKS.get_or_init(Mutex::default)
}

/// Sets up logging: stderr at `verbose` (or `KEN_LOG`), and every ken record
/// at info and above (anything at warn and above) into the ring buffer.
pub fn init(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let stderr_filter = (crate::config::settings().log.as_deref())
        .and_then(|filter| EnvFilter::try_new(filter).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(stderr_filter);
    let kept = EnvFilter::new("warn,ken=info");
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(RecordLayer.with_filter(kept))
        .try_init();
}

/// Also appends records to `path` (created with its folder), rotating it.
pub fn write_to_file(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let written = file.metadata()?.len();
    sinks().lock().unwrap_or_else(|e| e.into_inner()).file = Some(LogFile {
        path: path.to_path_buf(),
        file,
        written,
    });
    Ok(())
}

/// The newest `limit` records, oldest first, at `min_level` or more severe,
/// of `category` if given.
pub fn recent(limit: usize, min_level: Level, category: Option<&str>) -> Vec<LogRecord> {
    let sinks = sinks().lock().unwrap_or_else(|e| e.into_inner());
    let mut picked: Vec<LogRecord> = sinks
        .ring
        .iter()
        .rev()
        .filter(|r| r.level.parse::<Level>().is_ok_and(|l| l <= min_level))
        .filter(|r| category.is_none_or(|c| r.category == c))
        .take(limit)
        .cloned()
        .collect();
    picked.reverse();
    picked
}

struct RecordLayer;

impl<S: Subscriber> Layer<S> for RecordLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut message = MessageVisitor(String::new());
        event.record(&mut message);
        let meta = event.metadata();
        let record = LogRecord {
            time: crate::store::now_rfc3339(),
            level: meta.level().as_str().to_ascii_lowercase(),
            category: category_of(meta.target()),
            message: message.0,
        };
        let mut sinks = sinks().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = &mut sinks.file {
            append(log, &record);
        }
        if sinks.ring.len() == RING_CAPACITY {
            sinks.ring.pop_front();
        }
        sinks.ring.push_back(record);
    }
}

fn append(log: &mut LogFile, record: &LogRecord) {
    let line = format!(
        "{} {:5} {}: {}\n",
        record.time,
        record.level.to_ascii_uppercase(),
        record.category,
        record.message
    );
    if log.written + line.len() as u64 > ROTATE_BYTES {
        let rotated = log.path.with_extension("log.1");
        let reopened = std::fs::rename(&log.path, &rotated)
            .and_then(|_| OpenOptions::new().create(true).append(true).open(&log.path));
        if let Ok(file) = reopened {
            log.file = file;
            log.written = 0;
        }
    }
    // A full disk must not take the server down; the ring buffer still has it.
    if log.file.write_all(line.as_bytes()).is_ok() {
        log.written += line.len() as u64;
    }
}

/// The part of ken a record comes from, named as before the modules were
/// grouped by stage (clients filter by these names): `ken::index::watch` →
/// `watch`, `ken::index` → `index`, `ken::graph::query` → `graph`, the MCP
/// server's records `mcp`; other crates keep their crate name.
fn category_of(target: &str) -> String {
    match target.strip_prefix("ken::") {
        Some(rest) => {
            let mut parts = rest.split("::");
            let category = match parts.next().unwrap_or(rest) {
                "serve" => "mcp",
                stage @ ("source" | "store" | "embed" | "index" | "search") => parts.next().unwrap_or(stage),
                stage => stage,
            };
            category.to_string()
        }
        None => target.split("::").next().unwrap_or(target).to_string(),
    }
}

struct MessageVisitor(String);

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            self.0.push_str(&format!(" {}={value}", field.name()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_name_the_module() {
        assert_eq!(category_of("ken::index"), "index");
        assert_eq!(category_of("ken::serve::tools"), "mcp");
        assert_eq!(category_of("ken::index::watch"), "watch");
        assert_eq!(category_of("ken::embed::provider"), "provider");
        assert_eq!(category_of("ken::graph::query"), "graph");
        assert_eq!(category_of("rmcp::service"), "rmcp");
    }

    #[test]
    fn the_log_file_rotates_and_keeps_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ken.log");
        let mut log = LogFile {
            path: path.clone(),
            file: File::create(&path).unwrap(),
            written: ROTATE_BYTES - 10,
        };
        let record = LogRecord {
            time: "2026-01-01T00:00:00Z".into(),
            level: "info".into(),
            category: "index".into(),
            message: "a record long enough to rotate".into(),
        };
        append(&mut log, &record);
        assert!(dir.path().join("ken.log.1").exists());
        let now = std::fs::read_to_string(&path).unwrap();
        assert!(now.contains("INFO  index: a record long enough to rotate"), "{now}");
    }
}
