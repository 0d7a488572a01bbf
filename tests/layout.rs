//! The code's layout, checked: the rules ARCHITECTURE.md states for the
//! modules under src/ (rust-analyzer's "tidy" tests are the model).

use std::path::{Path, PathBuf};

/// The pipeline's stages, lowest first: a module imports only from its own
/// stage and the ones before it.
const STAGES: &[&str] = &[
    "config", "source", "store", "embed", "graph", "index", "search", "context", "bench", "app", "serve", "cli",
];

const MAX_FILE_LINES: usize = 1_200;

fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out.sort();
    out
}

/// The stage a file belongs to: its folder, or its name for a file at the top.
fn stage_of(path: &Path) -> Option<&'static str> {
    let rel = path
        .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
        .ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    STAGES.iter().copied().find(|s| *s == name)
}

/// The code of a file without its unit tests (they may use anything).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests").map_or(text, |at| &text[..at])
}

/// Lines of code, comments left out.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
}

fn relative(path: &Path) -> String {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_source_file_is_under_the_size_limit() {
    let long: Vec<String> = sources()
        .iter()
        .filter(|(_, text)| text.lines().count() > MAX_FILE_LINES)
        .map(|(path, text)| format!("{} ({} lines)", relative(path), text.lines().count()))
        .collect();
    assert!(long.is_empty(), "files over {MAX_FILE_LINES} lines: {long:#?}");
}

#[test]
fn imports_point_down_the_pipeline() {
    let rank = |stage: &str| STAGES.iter().position(|s| *s == stage);
    let mut upward = Vec::new();
    for (path, text) in sources() {
        let Some(own) = stage_of(&path) else { continue };
        for (line_no, line) in code_lines(without_tests(&text)) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let target: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if let (Some(to), Some(from)) = (rank(&target), rank(own)) {
                    if to > from {
                        upward.push(format!("{}:{line_no}: {own} -> {target}", relative(&path)));
                    }
                }
            }
        }
    }
    assert!(upward.is_empty(), "imports that point up the pipeline: {upward:#?}");
}

#[test]
fn only_the_config_module_reads_settings_from_the_environment() {
    let mut reads = Vec::new();
    for (path, text) in sources() {
        if stage_of(&path) == Some("config") {
            continue;
        }
        for (line_no, line) in code_lines(&text) {
            let reads_env = [
                "env::var(\"KEN_",
                "env::var_os(\"KEN_",
                "try_from_env(\"KEN_",
                "crate::setting(",
            ]
            .iter()
            .any(|pattern| line.contains(pattern));
            if reads_env {
                reads.push(format!("{}:{line_no}: {}", relative(&path), line.trim()));
            }
        }
    }
    assert!(reads.is_empty(), "settings read outside src/config/: {reads:#?}");
}

/// The front ends' traits stay in the front ends: MCP's schemas
/// (`schemars`, `JsonSchema`) in `src/serve/` (its wire types), clap in
/// `src/cli/`, so a change in the core cannot change a client's format or a
/// flag by accident.
#[test]
fn front_end_traits_stay_in_the_front_ends() {
    let mut outside = Vec::new();
    for (path, text) in sources() {
        if matches!(stage_of(&path), Some("serve" | "cli")) {
            continue;
        }
        for (line_no, line) in code_lines(&text) {
            let front_end = ["schemars", "JsonSchema", "clap::", "clap;", "ValueEnum"]
                .iter()
                .any(|pattern| line.contains(pattern));
            if front_end {
                outside.push(format!("{}:{line_no}: {}", relative(&path), line.trim()));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "front-end traits outside src/serve/ and src/cli/: {outside:#?}"
    );
}

/// Whether `line` reads a field `conn` (`.conn` not followed by more of a name).
fn names_the_connection(line: &str) -> bool {
    line.match_indices(".conn").any(|(at, m)| {
        !line[at + m.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[test]
fn only_the_store_touches_the_database() {
    let mut outside = Vec::new();
    for (path, text) in sources() {
        if stage_of(&path) == Some("store") {
            continue;
        }
        for (line_no, line) in code_lines(without_tests(&text)) {
            let sql = line.contains("rusqlite") || line.contains("prepare_cached(") || names_the_connection(line);
            if sql {
                outside.push(format!("{}:{line_no}: {}", relative(&path), line.trim()));
            }
        }
    }
    assert!(outside.is_empty(), "database access outside src/store/: {outside:#?}");
}
