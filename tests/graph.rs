//! The code graph: exact edge sets on per-language fixtures, the CLI
//! commands, and branch-correct answers.
//!
//! Each `tests/fixtures/graph/<lang>/` holds a small project and `edges.txt`,
//! every edge the graph must find in it (`from -> to kind confidence`, with
//! `path:Container.name`) and no other.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{git, ken, ken_json, ken_ok, write};
use ken::graph::query::Graph;
use ken::index::{index, IndexOptions};
use ken::store::Store;

fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/graph")
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "edges.txt" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Every edge the graph finds in the fixture of `lang`, as `describe()` lines.
fn fixture_edges(lang: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let dir = fixture_root().join(lang);
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&dir, tmp.path());
    let index_dir = tmp.path().join(".ken");
    index(tmp.path(), &index_dir, &IndexOptions::default()).unwrap();
    let store = Store::open_for_read(&index_dir).unwrap();
    let mut graph = Graph::for_branch(&store.conn, "");
    let found: BTreeSet<String> = graph.all_edges().unwrap().iter().map(|e| e.describe()).collect();
    let expected: BTreeSet<String> = std::fs::read_to_string(dir.join("edges.txt"))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    (found, expected)
}

#[test]
fn every_fixture_yields_exactly_its_edges() {
    let mut failures = Vec::new();
    let mut langs: Vec<String> = std::fs::read_dir(fixture_root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    langs.sort();
    let only = std::env::var("KEN_GRAPH_FIXTURE").ok();
    for lang in langs.iter().filter(|l| only.as_deref().is_none_or(|o| o == l.as_str())) {
        let (found, expected) = fixture_edges(lang);
        let missing: Vec<&String> = expected.difference(&found).collect();
        let extra: Vec<&String> = found.difference(&expected).collect();
        if !missing.is_empty() || !extra.is_empty() {
            failures.push(format!("{lang}:\n  missing: {missing:#?}\n  unexpected: {extra:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
