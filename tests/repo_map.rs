//! `ken map`: the repository's most important files first (PageRank over
//! references), a focus that moves the rank, and a budget never exceeded.

mod common;

use std::path::Path;

use common::{ken, ken_json, ken_ok, write};
use ken::context::pack::count_tokens;
use serde_json::Value;

/// A store module used by every service, a helper used by one, and tests.
fn project(root: &Path) {
    write(
        root,
        "app/store.py",
        "class OrderStore:\n    def save_order(self, order):\n        return order\n\n    def load_order(self, key):\n        return key\n\n\ndef open_store(path):\n    return OrderStore()\n",
    );
    write(
        root,
        "app/billing.py",
        "from app.store import open_store\n\ndef charge_customer(order):\n    store = open_store('db')\n    store.save_order(order)\n    return format_receipt(order)\n\ndef format_receipt(order):\n    return str(order)\n",
    );
    write(
        root,
        "app/shipping.py",
        "from app.store import open_store\n\ndef ship_order(key):\n    store = open_store('db')\n    return store.load_order(key)\n",
    );
    write(
        root,
        "app/returns.py",
        "from app.store import open_store\n\ndef refund_order(key):\n    store = open_store('db')\n    order = store.load_order(key)\n    store.save_order(order)\n    return order\n",
    );
    write(
        root,
        "tools/report.py",
        "def render_weekly_report(rows):\n    return '\\n'.join(rows)\n\ndef summarize_rows(rows):\n    return len(rows)\n",
    );
    for i in 0..30 {
        write(
            root,
            &format!("legacy/module_{i}.py"),
            &format!("def legacy_handler_{i}(value):\n    \"\"\"Old handler {i}, kept for compatibility.\"\"\"\n    return value * {i} + len(str(value))\n"),
        );
    }
}

fn map(root: &Path, args: &[&str]) -> Value {
    let mut all = vec!["map", "--json"];
    all.extend(args);
    ken_json(root, &all)
}

fn files(map: &Value) -> Vec<String> {
    map["map"]["pieces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_most_referenced_file_comes_first_with_its_definitions() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let out = map(root, &[]);
    let listed = files(&out);
    assert_eq!(listed[0], "app/store.py", "{out}");
    let first = out["map"]["pieces"][0]["text"].as_str().unwrap();
    for signature in [
        "1: class OrderStore:",
        "2: def save_order(self, order):",
        "9: def open_store(path):",
    ] {
        assert!(first.lines().any(|l| l == signature), "{signature} in {first}");
    }
    // Files that nothing refers to come after the ones that are referred to.
    let legacy = listed
        .iter()
        .position(|p| p.starts_with("legacy/"))
        .unwrap_or(listed.len());
    let billing = listed.iter().position(|p| p == "app/billing.py").unwrap();
    assert!(billing < legacy, "{listed:?}");
    assert_eq!(out["files"], 35);
    // The text form shows the same first file.
    let text = ken_ok(root, &["map", "--budget", "500"]);
    assert!(text.starts_with("app/store.py:"), "{text}");
}

#[test]
fn a_focus_path_or_question_moves_its_files_up() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let unfocused = files(&map(root, &["--budget", "16000"]));
    let report_rank = unfocused.iter().position(|p| p == "tools/report.py").unwrap();
    assert!(report_rank > 0);
    let by_path = files(&map(root, &["--focus", "tools"]));
    assert_eq!(by_path[0], "tools/report.py", "{by_path:?}");
    let by_question = map(root, &["--focus", "render the weekly report"]);
    assert_eq!(files(&by_question)[0], "tools/report.py", "{by_question}");
    assert_eq!(by_question["focus"], "question render the weekly report");
    // A path outside the repository is not a path focus.
    let outside = map(root, &["--focus", "../.."]);
    assert!(outside["focus"].as_str().unwrap().starts_with("question"), "{outside}");
}

#[test]
fn the_map_never_exceeds_its_budget_and_says_what_it_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    for budget in [500usize, 700] {
        let out = map(root, &["--budget", &budget.to_string()]);
        // What an MCP client receives: the compact JSON of the whole result.
        let tokens = count_tokens(&serde_json::to_string(&out).unwrap());
        assert!(tokens <= budget, "{tokens} > {budget}");
        assert!(tokens * 10 >= budget * 6, "the budget is used: {tokens} of {budget}");
        let left = out["map"]["left_out"].as_str().unwrap();
        assert!(left.starts_with("left out: ") && left.contains("legacy/"), "{left}");
    }
    // When everything fits, nothing is said to be left out.
    let whole = map(root, &["--budget", "4000"]);
    assert_eq!(files(&whole).len(), 35);
    assert!(whole["map"].get("left_out").is_none(), "{whole}");
    for bad in ["100", "20000"] {
        let out = ken(root, &["map", "--budget", bad]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("between 500 and 16000"));
    }
}
