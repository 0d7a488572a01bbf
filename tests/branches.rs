//! The per-branch catalog with the real built-in model: switching branches
//! re-parses only what differs, re-uses every vector it has, searches only
//! the current branch, and deleted branches are garbage-collected. Also a
//! kill -9 during the embedding, in a loop of trials.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn model() {
    ken::embed::model::fetch(&ken::embed::model::MINILM).expect("the built-in model (run `ken model fetch`)");
}

fn embeddings(root: &Path) -> i64 {
    let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    conn.query_row("SELECT count(*) FROM embeddings", [], |r| r.get(0))
        .unwrap()
}

/// Chunk vectors and signature vectors in the index.
fn vectors_by_side(root: &Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    conn.query_row(
        "SELECT count(*) FILTER (WHERE model NOT LIKE '%/sig%'), count(*) FILTER (WHERE model LIKE '%/sig%')
         FROM embeddings",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

/// What `ken status` counts on the current branch.
fn branch_totals(status: &Value) -> Vec<Value> {
    [
        "files",
        "chunks",
        "languages",
        "distinct_contents",
        "embedded_contents",
        "signature_vectors",
    ]
    .iter()
    .map(|key| status[*key].clone())
    .collect()
}

fn symbols(root: &Path, query: &str) -> Vec<String> {
    search(root, query, 10)
        .iter()
        .filter_map(|h| h["symbol"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn branch_switches_reuse_chunks_and_vectors_and_search_only_the_current_branch() {
    model();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    git(root, &["init", "-q"]);
    write(
        root,
        "changed.py",
        "def shared_changed_fn():\n    return 'main version'\n",
    );
    write(root, "deleted.py", "def only_on_main_fn():\n    return 1\n");
    write(root, "renamed.py", "def moved_around_fn():\n    return 2\n");
    write(root, "same.py", "def never_changes_fn():\n    return 3\n");
    git(root, &["add", "."]);
    git(root, &["commit", "-qm", "main"]);

    let main = ken_json(root, &["index", "--json"]);
    assert_eq!(main["parsed"], 4, "{main}");
    let after_main = embeddings(root);
    assert!(after_main >= 4, "{main}");

    // A new branch with no change: seeded from main's catalog, nothing read or parsed.
    git(root, &["checkout", "-qb", "feature"]);
    let seeded = ken_json(root, &["index", "--json"]);
    assert_eq!(seeded["branch"], "feature", "{seeded}");
    assert_eq!(seeded["parsed"], 0, "{seeded}");
    assert_eq!(seeded["unchanged"], 4, "{seeded}");
    assert_eq!(seeded["embedding"]["embedded"], 0, "{seeded}");

    write(
        root,
        "changed.py",
        "def shared_changed_fn():\n    return 'feature version'\n",
    );
    std::fs::remove_file(root.join("deleted.py")).unwrap();
    git(root, &["mv", "renamed.py", "moved.py"]);
    write(root, "added.py", "def only_on_feature_fn():\n    return 4\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "feature"]);
    let feature = ken_json(root, &["index", "--json"]);
    assert_eq!(feature["files"], 4, "{feature}");
    assert_eq!(feature["removed"], 2, "deleted.py and renamed.py: {feature}");
    // changed.py, added.py and moved.py (a new path) are parsed; same.py is not read.
    assert_eq!(feature["parsed"], 3, "{feature}");
    // moved.py's chunk has the content renamed.py had: its vector is re-used.
    assert_eq!(feature["embedding"]["embedded"], 2, "{feature}");
    let after_feature = embeddings(root);

    assert!(symbols(root, "only_on_feature_fn").contains(&"only_on_feature_fn".to_string()));
    assert!(!symbols(root, "only_on_main_fn").contains(&"only_on_main_fn".to_string()));
    assert_eq!(search(root, "moved_around_fn", 1)[0]["path"], "moved.py");

    // Each branch's totals, from an index that never saw another branch:
    // those of the shared index must match them on every switch.
    let alone = |branch: &str| {
        let copy = tempfile::tempdir().unwrap();
        git(copy.path(), &["clone", "-q", "-b", branch, root.to_str().unwrap(), "."]);
        ken_json(copy.path(), &["index", "--json"]);
        branch_totals(&ken_json(copy.path(), &["status", "--json"]))
    };
    let alone = [("main", alone("main")), ("feature", alone("feature"))];

    // Back and forth: nothing parsed, nothing embedded, no vector added.
    for (branch, present, missing) in [
        ("main", "only_on_main_fn", "only_on_feature_fn"),
        ("feature", "only_on_feature_fn", "only_on_main_fn"),
        ("main", "only_on_main_fn", "only_on_feature_fn"),
    ] {
        git(root, &["checkout", "-q", branch]);
        let r = ken_json(root, &["index", "--json"]);
        assert_eq!(r["branch"], branch, "{r}");
        assert_eq!(r["parsed"], 0, "{r}");
        assert_eq!(r["embedding"]["embedded"], 0, "{r}");
        assert_eq!(
            embeddings(root),
            after_feature,
            "the vector count did not grow on {branch}"
        );
        assert!(
            symbols(root, present).contains(&present.to_string()),
            "{present} on {branch}"
        );
        assert!(
            !symbols(root, missing).contains(&missing.to_string()),
            "{missing} not on {branch}"
        );
        let (_, totals) = alone.iter().find(|(b, _)| *b == branch).unwrap();
        let status = ken_json(root, &["status", "--json"]);
        assert_eq!(&branch_totals(&status), totals, "{branch}'s totals: {status}");
        let semantic = ken_json(
            root,
            &["search", "--json", "--mode", "semantic", "-k", "10", "return a value"],
        );
        assert!(
            semantic.as_array().unwrap().iter().all(|h| h["symbol"] != missing),
            "semantic search stays on {branch}: {semantic}"
        );
    }

    // The feature branch is deleted: health reports its catalog, repair drops
    // it with what only it used (added.py and the feature version of changed.py).
    git(root, &["branch", "-D", "feature"]);
    let health = ken(root, &["health", "--json"]);
    let report: Value = serde_json::from_slice(&health.stdout).unwrap();
    let finding = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "deleted_branches")
        .cloned()
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(finding["count"], 1, "{report}");
    let repaired = ken_json(root, &["health", "--repair", "--json"]);
    assert_eq!(repaired["healthy"], true, "{repaired}");
    let status = ken_json(root, &["status", "--json"]);
    assert_eq!(status["branches"].as_object().unwrap().len(), 1, "{status}");
    assert_eq!(embeddings(root), after_main, "feature-only vectors are gone");
    let health = ken_json(root, &["health", "--json"]);
    assert_eq!(health["healthy"], true, "{health}");
    assert!(symbols(root, "only_on_main_fn").contains(&"only_on_main_fn".to_string()));
}

#[test]
fn a_kill_during_indexing_or_embedding_loses_no_committed_work() {
    model();
    // No query adapter: its fit, a detached process started when an
    // embedding pass ends, would still be writing in `.ken/` when a trial
    // removes it. The kills are what this test is about.
    std::env::set_var("KEN_QUERY_ADAPTER", "0");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    git(root, &["init", "-q"]);
    for i in 0..150 {
        write(
            root,
            &format!("m{}/f{i}.py", i % 5),
            &format!("def handler_number_{i}(request):\n    \"\"\"Handles request kind {i}.\"\"\"\n    return request.get({i})\n"),
        );
    }
    git(root, &["add", "."]);
    git(root, &["commit", "-qm", "init"]);
    let mut resumed = 0;
    for kill_after_ms in [200u64, 700, 1500, 2500, 4000] {
        let mut child = spawn_silent(&ken_bin(), root, &["index", "-q"]);
        std::thread::sleep(Duration::from_millis(kill_after_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        if !root.join(".ken/index.db").exists() {
            continue;
        }
        // The index opens and is consistent (maybe stale or partly embedded).
        let health = ken(root, &["health", "--json"]);
        let report: Value = serde_json::from_slice(&health.stdout).unwrap_or_else(|e| {
            panic!(
                "after a kill at {kill_after_ms} ms `ken health --json` printed no report ({e}): {}{}",
                String::from_utf8_lossy(&health.stdout),
                String::from_utf8_lossy(&health.stderr)
            )
        });
        assert!(
            report["findings"]
                .as_array()
                .unwrap()
                .iter()
                .all(|f| f["severity"] != "error" || f["check"] == "vector_file"),
            "after a kill at {kill_after_ms} ms: {report}"
        );
        let (before, signatures_before) = vectors_by_side(root);
        let r = ken_json(root, &["index", "--json"]);
        assert_eq!(r["files"], 150, "{r}");
        let contents = r["embedding"]["contents"].as_i64().unwrap();
        // Only what was not committed before the kill is embedded again,
        // chunk vectors and signature vectors (every chunk here is a function).
        assert_eq!(
            r["embedding"]["embedded"].as_i64().unwrap(),
            contents - before,
            "after a kill at {kill_after_ms} ms: {r}"
        );
        assert_eq!(
            r["embedding"]["signatures_embedded"].as_i64().unwrap(),
            contents - signatures_before,
            "after a kill at {kill_after_ms} ms: {r}"
        );
        if before > 0 && before < contents {
            resumed += 1;
        }
        let health = ken_json(root, &["health", "--json"]);
        assert_eq!(health["healthy"], true, "{health}");
        assert_eq!(search(root, "handler_number_149", 1)[0]["path"], "m4/f149.py");
        std::fs::remove_dir_all(root.join(".ken")).unwrap();
    }
    eprintln!("{resumed} trials were killed during the embedding");
}
