//! The code graph: exact edge sets on per-language fixtures, the CLI
//! commands, and branch-correct answers.
//!
//! Each `tests/fixtures/graph/<lang>/` holds a small project and `edges.txt`,
//! every edge the graph must find in it (`from -> to kind confidence`, with
//! `path:Container.name`) and no other.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{copy_dir, git, ken, ken_json, ken_ok, write};
use ken::graph::query::Graph;
use ken::index::{index, IndexOptions};
use ken::store::Store;

fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/graph")
}

/// Every edge the graph finds in the fixture of `lang`, as `describe()` lines.
fn fixture_edges(lang: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let dir = fixture_root().join(lang);
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&dir, tmp.path());
    let index_dir = tmp.path().join(".ken");
    index(tmp.path(), &index_dir, &IndexOptions::default()).unwrap();
    let store = Store::open_for_read(&index_dir).unwrap();
    let mut graph = Graph::for_branch(&store, "");
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

fn callers(dir: &Path, symbol: &str) -> Vec<String> {
    let out = ken_json(dir, &["callgraph", symbol, "--callers", "--json"]);
    out["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["from"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_cli_answers_callers_callees_paths_and_definitions() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture_root().join("python"), tmp.path());
    let dir = tmp.path();
    ken_ok(dir, &["index", "--no-embed", "-q"]);

    // Callers through an import alias, JSON with call sites and confidence.
    let out = ken_json(dir, &["callgraph", "User", "--callers", "--json"]);
    let edges = out["edges"].as_array().unwrap();
    let described: BTreeSet<String> = edges
        .iter()
        .map(|e| {
            format!(
                "{} {}:{} {} {}",
                e["from"]["name"].as_str().unwrap(),
                e["call_site"]["path"].as_str().unwrap(),
                e["call_site"]["line"],
                e["kind"].as_str().unwrap(),
                e["confidence"].as_str().unwrap()
            )
        })
        .collect();
    let expected: BTreeSet<String> = ["make app.py:8 constructor import".to_string()].into();
    assert_eq!(described, expected);
    assert_eq!(out["symbol"]["path"], "pkg/models.py");

    // Callees to depth 2, as a tree.
    let tree = ken_ok(dir, &["callgraph", "run", "--callees", "--depth", "2"]);
    assert!(tree.starts_with("callees of run function  app.py:13"), "{tree}");
    assert!(
        tree.contains("│  ├─ User class  pkg/models.py:9  constructor at app.py:8 (import)"),
        "{tree}"
    );
    assert!(
        tree.contains("helper function  pkg/util.py:5  call at app.py:15 (import)"),
        "{tree}"
    );

    // An ambiguous name lists the candidates and exits 2; path:line and ids pick one.
    let out = ken(dir, &["callgraph", "greet"]);
    assert_eq!(out.status.code(), Some(2));
    let listing = String::from_utf8_lossy(&out.stderr);
    assert!(listing.contains("pkg/models.py:13  method User.greet"), "{listing}");
    assert!(listing.contains("pkg/other.py:2  method Admin.greet"), "{listing}");
    assert_eq!(callers(dir, "pkg/other.py:3"), vec!["run"]);
    assert_eq!(callers(dir, "Admin.greet"), vec!["run"]);

    // The shortest path.
    let out = ken_json(dir, &["path", "run", "validate", "--json"]);
    let hops: Vec<&str> = out["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["to"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(hops, vec!["make", "save", "validate"]);
    assert_eq!(ken(dir, &["path", "validate", "run"]).status.code(), Some(1));

    // Definitions with kind and path filters.
    let defs = ken_json(dir, &["def", "format_name", "--json"]);
    assert_eq!(defs.as_array().unwrap().len(), 3);
    let defs = ken_json(
        dir,
        &["def", "format_name", "--path", "pkg/**", "--kind", "function", "--json"],
    );
    let paths: Vec<&str> = defs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, vec!["pkg/models.py", "pkg/util.py"]);
}

#[test]
fn a_branch_switch_changes_the_callers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    git(dir, &["init", "-q"]);
    write(dir, "a.py", "def target():\n    return 1\n");
    write(
        dir,
        "b.py",
        "from a import target\n\n\ndef caller_one():\n    return target()\n",
    );
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "one"]);
    ken_ok(dir, &["index", "--no-embed", "-q"]);
    assert_eq!(callers(dir, "target"), vec!["caller_one"]);

    git(dir, &["checkout", "-qb", "feature"]);
    write(
        dir,
        "b.py",
        "from a import target\n\n\ndef caller_two():\n    return target()\n",
    );
    write(
        dir,
        "c.py",
        "import a\n\n\ndef caller_three():\n    return a.target()\n",
    );
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "two"]);
    ken_ok(dir, &["index", "--no-embed", "-q"]);
    assert_eq!(callers(dir, "target"), vec!["caller_two", "caller_three"]);

    git(dir, &["checkout", "-q", "main"]);
    ken_ok(dir, &["index", "--no-embed", "-q"]);
    assert_eq!(callers(dir, "target"), vec!["caller_one"]);
}

#[test]
fn an_index_without_a_graph_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "notes.md", "# Notes\n\nNothing to call here.\n");
    ken_ok(dir, &["index", "--no-embed", "-q"]);
    let out = ken(dir, &["callgraph", "anything"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no code graph"));
}

#[test]
fn huge_fan_in_and_fan_out_are_capped_and_say_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Fifteen classes with a `get` method: an unknown receiver's `.get()` is ambiguous.
    for i in 0..15 {
        write(
            dir,
            &format!("m{i:02}.py"),
            &format!("class C{i}:\n    def get(self):\n        return {i}\n"),
        );
    }
    write(dir, "use.py", "def fetch(x):\n    return x.get()\n");
    // More calls of one function than a level examines.
    let calls = "    target()\n".repeat(ken::graph::query::MAX_REFS_PER_LEVEL + 1);
    write(
        dir,
        "t.py",
        &format!("def target():\n    return 1\n\n\ndef caller():\n{calls}"),
    );
    ken_ok(dir, &["index", "--no-embed", "-q"]);

    let out = ken_json(dir, &["callgraph", "fetch", "--callees", "--json"]);
    let edges = out["edges"].as_array().unwrap();
    let max = ken::graph::query::MAX_CANDIDATES;
    assert_eq!(edges.len(), max, "{out}");
    for e in edges {
        assert_eq!(e["confidence"], "ambiguous");
        assert_eq!(e["candidate_count"], 15);
        assert_eq!(e["candidates"].as_array().unwrap().len(), max);
    }
    assert_eq!(out["truncated"], false);
    // The callers of one of them beyond the first ten still find the call.
    let out = ken_json(dir, &["callgraph", "m14.py:2", "--callers", "--json"]);
    assert_eq!(out["edges"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(out["edges"][0]["candidate_count"], 15);

    let out = ken_json(dir, &["callgraph", "target", "--callers", "--json"]);
    assert_eq!(out["truncated"], true, "{out}");
    assert!(out["note"].as_str().unwrap().contains("partial"), "{out}");
    let tree = ken_ok(dir, &["callgraph", "target", "--callers"]);
    assert!(tree.contains("truncated:"), "{tree}");
}

/// `graph_symbols` (what `change_impact` parses a side of a diff with) finds
/// exactly the symbols indexing stores, in every fixture of every language,
/// though it runs no reference patterns.
#[test]
fn symbols_alone_equal_the_symbols_of_indexing() {
    let mut compared = 0;
    let mut with_container = BTreeSet::new();
    for entry in walk(&fixture_root()) {
        let Some(lang) = ken::source::lang::for_path(&entry) else {
            continue;
        };
        let source = std::fs::read_to_string(&entry).unwrap();
        let limits = ken::source::chunk::ChunkLimits::default();
        let Some(indexed) = ken::source::chunk::chunk_and_graph(Some(lang), &source, &limits, true)
            .unwrap()
            .1
        else {
            continue;
        };
        let alone = ken::source::chunk::graph_symbols(lang, &source).unwrap();
        assert_eq!(alone, indexed.symbols, "{}", entry.display());
        if alone.iter().any(|s| s.container.is_some()) {
            with_container.insert(lang.name);
        }
        compared += 1;
    }
    assert!(compared >= 15, "only {compared} fixture files compared");
    // Containers come from the tags query's definition patterns as well (Go's receivers).
    for lang in ["go", "rust", "java", "python", "typescript"] {
        assert!(with_container.contains(lang), "no symbol with a container in {lang}");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}
