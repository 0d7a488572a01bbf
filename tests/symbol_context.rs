//! `ken context --symbol` (the `symbol_context` tool): on the graph fixtures
//! of five languages, committed to a real git repository in two commits (the
//! second edits the symbol and adds a test that calls it), the exact callers,
//! tests, callees and commits; the budget never exceeded by the whole
//! answer; ambiguous and unknown names; the locations-only mode.

mod common;

use std::path::Path;

use common::{copy_dir, git, ken, ken_json, write};
use ken::context::pack::count_tokens;
use serde_json::Value;

fn fixture(lang: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/graph")
        .join(lang)
}

/// A change made in the second commit: `old` replaced by `new` in `path`
/// (same number of lines), and new files.
struct Change<'a> {
    edit: (&'a str, &'a str, &'a str),
    added: &'a [(&'a str, &'a str)],
}

/// The fixture of `lang` in a git repository of two commits, indexed.
fn project(lang: &str, change: &Change) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    copy_dir(&fixture(lang), dir);
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", &format!("Add the {lang} fixture")]);
    let (path, old, new) = change.edit;
    let text = std::fs::read_to_string(dir.join(path)).unwrap();
    assert!(text.contains(old), "{path} holds {old:?}");
    std::fs::write(dir.join(path), text.replacen(old, new, 1)).unwrap();
    for (path, text) in change.added {
        write(dir, path, text);
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "Tune it and test it"]);
    common::ken_ok(dir, &["index", "--no-embed", "-q"]);
    tmp
}

fn context(dir: &Path, spec: &str, budget: usize) -> (Value, usize) {
    let out = ken(
        dir,
        &["context", "--symbol", spec, "--json", "--budget", &budget.to_string()],
    );
    assert!(
        out.status.success(),
        "ken context --symbol {spec}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let tokens = count_tokens(text.trim_end());
    (serde_json::from_str(&text).unwrap(), tokens)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn labels(out: &Value, role: &str) -> Vec<String> {
    out["pack"]["pieces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["role"] == role)
        .map(|p| p["label"].as_str().unwrap().to_string())
        .collect()
}

struct Expected<'a> {
    spec: &'a str,
    name: &'a str,
    path: &'a str,
    signature: &'a str,
    /// The doc, or empty for none.
    doc: &'a str,
    callers: &'a [&'a str],
    tests: &'a [&'a str],
    callees: &'a [&'a str],
    body_has: &'a str,
}

/// Checks one language: the full answer at the default budget, then the budgets.
fn check(lang: &str, change: Change, e: Expected) {
    let tmp = project(lang, &change);
    let dir = tmp.path();
    let (out, tokens) = context(dir, e.spec, 3000);
    assert!(tokens <= 3000, "{lang}: {tokens} tokens");
    let sym = &out["symbol"];
    assert_eq!(sym["name"], e.name, "{lang}: {out:#}");
    assert_eq!(sym["path"], e.path, "{lang}: {out:#}");
    assert_eq!(sym["signature"], e.signature, "{lang}: {out:#}");
    assert_eq!(sym["doc"].as_str().unwrap_or_default(), e.doc, "{lang}: {out:#}");
    assert_eq!(strings(&out["callers"]), e.callers, "{lang} callers: {out:#}");
    assert_eq!(strings(&out["tests"]), e.tests, "{lang} tests: {out:#}");
    let mut callees = labels(&out, "callee");
    callees.sort();
    assert_eq!(callees, e.callees, "{lang} callees: {out:#}");
    let pieces = out["pack"]["pieces"].as_array().unwrap();
    assert_eq!(pieces[0]["role"], "body", "{lang}: the body comes first: {out:#}");
    assert!(
        pieces[0]["text"].as_str().unwrap().contains(e.body_has),
        "{lang}: {out:#}"
    );
    // One piece per caller and test site (neighbouring sites may share one).
    assert!(
        labels(&out, "caller").len() <= e.callers.len() && labels(&out, "caller").is_empty() == e.callers.is_empty()
    );
    assert!(
        !labels(&out, "test").is_empty(),
        "{lang}: the test's call site: {out:#}"
    );
    assert!(
        out["pack"].get("left_out").is_none(),
        "{lang}: everything fits 3000 tokens"
    );
    // Both commits changed its lines: newest first.
    let commits: Vec<&str> = out["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["summary"].as_str().unwrap())
        .collect();
    assert_eq!(
        commits,
        ["Tune it and test it", format!("Add the {lang} fixture").as_str()],
        "{lang}"
    );
    let c = &out["commits"][0];
    assert_eq!(c["author"], "t");
    assert_eq!(c["id"].as_str().unwrap().len(), 10);
    assert_eq!(c["date"].as_str().unwrap().len(), 10);
    assert!(out.get("note").is_none(), "{lang}: {out:#}");

    for budget in [500, 1000, 3000] {
        let (small, tokens) = context(dir, e.spec, budget);
        assert!(
            tokens <= budget,
            "{lang}: {tokens} tokens over a budget of {budget}: {small}"
        );
        assert_eq!(small["symbol"]["name"], e.name);
        assert_eq!(small["pack"]["pieces"][0]["role"], "body", "{lang} at {budget}");
    }

    // Locations only: where it is defined, nothing else.
    let located = ken_json(dir, &["context", "--symbol", e.spec, "--locations", "--json"]);
    let locations = strings(&located["locations"]);
    assert!(
        locations
            .iter()
            .any(|l| l.starts_with(&format!("{}:", e.path)) && l.ends_with(e.name)),
        "{lang}: {locations:?}"
    );
    assert!(located.get("pack").is_none() && located.get("symbol").is_none());
}

#[test]
fn python() {
    check(
        "python",
        Change {
            edit: ("app.py", "    return user\n", "    return user  # saved\n"),
            added: &[(
                "tests/test_app.py",
                "from app import make\n\n\ndef test_make():\n    assert make(\"a\")\n",
            )],
        },
        Expected {
            spec: "make",
            name: "make",
            path: "app.py",
            signature: "def make(name):",
            doc: "",
            callers: &["app.py:14 run"],
            tests: &["tests/test_app.py:5 test_make"],
            callees: &["class User", "method Base.save"],
            body_has: "return user  # saved",
        },
    );
}

#[test]
fn typescript() {
    check(
        "typescript",
        Change {
            edit: ("src/shapes.ts", "  return x * x;", "  return x ** 2;"),
            added: &[(
                "src/shapes.test.ts",
                "import { square } from \"./shapes\";\n\nfunction testSquare() {\n  return square(2) === 4;\n}\n",
            )],
        },
        Expected {
            spec: "square",
            name: "square",
            path: "src/shapes.ts",
            signature: "export function square(x: number): number {",
            doc: "",
            callers: &[
                "src/shapes.ts:9 Circle.area",
                "src/main.ts:6 Square.area",
                "src/main.ts:17 main",
            ],
            tests: &["src/shapes.test.ts:4 testSquare"],
            callees: &[],
            body_has: "x ** 2",
        },
    );
}

#[test]
fn go() {
    check(
        "go",
        Change {
            edit: ("util/strings.go", "\treturn join(split(s))", "\treturn join(split(s)) // reversed"),
            added: &[(
                "util/strings_test.go",
                "package util\n\nimport \"testing\"\n\nfunc TestReverse(t *testing.T) {\n\tif Reverse(\"ab\") != \"ba\" {\n\t\tt.Fail()\n\t}\n}\n",
            )],
        },
        Expected {
            spec: "Reverse",
            name: "Reverse",
            path: "util/strings.go",
            signature: "func Reverse(s string) string {",
            doc: "// Reverse reverses a string.",
            callers: &["util/buffer.go:12 Buffer.Add", "cmd/main.go:28 main"],
            tests: &["util/strings_test.go:6 TestReverse"],
            callees: &["function join", "function split"],
            body_has: "// reversed",
        },
    );
}

#[test]
fn rust() {
    check(
        "rust",
        Change {
            edit: (
                "src/store.rs",
                "    key.to_lowercase()\n}\n",
                "    key.trim().to_lowercase()\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn normalizes() {\n        let got = normalize(\" A\");\n        assert_eq!(got, \"a\");\n    }\n}\n",
            ),
            added: &[],
        },
        Expected {
            spec: "src/store.rs:26",
            name: "normalize",
            path: "src/store.rs",
            signature: "pub fn normalize(key: &str) -> String {",
            doc: "",
            callers: &[
                "src/store.rs:15 Memory.insert",
                "src/store.rs:21 Memory.get",
                "src/main.rs:11 build",
                "src/main.rs:19 main",
            ],
            // Same file first; the other calls it inside `assert_eq!(...)`.
            tests: &["src/store.rs:36 tests.normalizes", "src/checks.rs:10 tests.keys_are_normalized"],
            callees: &[],
            body_has: "key.trim().to_lowercase()",
        },
    );
}

#[test]
fn java() {
    check(
        "java",
        Change {
            edit: (
                "com/acme/model/Animal.java",
                "        return prefix + describe();",
                "        return prefix + \" \" + describe();",
            ),
            added: &[(
                "com/acme/model/AnimalTest.java",
                "package com.acme.model;\n\nclass AnimalTest {\n    void testDescribe(Animal a) {\n        a.describe(\"x\");\n    }\n}\n",
            )],
        },
        Expected {
            spec: "Animal.describe",
            name: "Animal.describe",
            path: "com/acme/model/Animal.java",
            // Overloads stand together (as in call_graph); the last one is shown.
            signature: "public String describe(String prefix) {",
            doc: "",
            callers: &["com/acme/model/Animal.java:11 Animal.describe", "com/acme/app/Main.java:9 Main.main"],
            tests: &["com/acme/model/AnimalTest.java:5 AnimalTest.testDescribe"],
            callees: &["method Animal.describe"],
            body_has: "prefix + \" \" + describe()",
        },
    );
}

#[test]
fn ambiguous_unknown_and_bad_budgets_are_clear() {
    let tmp = project(
        "rust",
        &Change {
            edit: (
                "src/store.rs",
                "    key.to_lowercase()",
                "    key.trim().to_lowercase()",
            ),
            added: &[],
        },
    );
    let dir = tmp.path();
    // Two definitions of `normalize`: the candidates, as call_graph lists them (exit 2).
    let out = ken(dir, &["context", "--symbol", "normalize"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`normalize` names 2 definitions"), "{err}");
    assert!(err.contains("src/main.rs:") && err.contains("src/store.rs:26"), "{err}");
    let out = ken(dir, &["context", "--symbol", "normalize", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"], "ambiguous");
    assert_eq!(v["candidates"].as_array().unwrap().len(), 2);
    // Locations need no single definition: both are listed.
    let located = ken_json(dir, &["context", "--symbol", "normalize", "--locations", "--json"]);
    assert_eq!(strings(&located["locations"]).len(), 2, "{located}");

    // Unknown: a clear error with the close names the graph has.
    let out = ken(dir, &["context", "--symbol", "Memroy"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no definition `Memroy` on this branch; close names: Memory (src/store.rs:5)"),
        "{err}"
    );
    let out = ken(dir, &["context", "--symbol", "NORMALIZE"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("close names: normalize (src/main.rs:"), "{err}");
    let out = ken(dir, &["context", "--symbol", "zzzqqq"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no definition `zzzqqq`") && err.contains("codebase_search"),
        "{err}"
    );

    // Budgets outside 500..16000 are refused.
    let out = ken(dir, &["context", "--symbol", "Memory", "--budget", "100"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("between 500 and 16000"));
    // A question and a symbol at once, or neither, is refused.
    let out = ken(dir, &["context", "how are keys stored", "--symbol", "Memory"]);
    assert!(!out.status.success());
    let out = ken(dir, &["context"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("give a QUERY or --symbol NAME"));
}

#[test]
fn outside_git_there_are_no_commits_and_the_note_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture("python"), tmp.path());
    common::ken_ok(tmp.path(), &["index", "--no-embed", "-q"]);
    let (out, tokens) = context(tmp.path(), "helper", 500);
    assert!(tokens <= 500);
    assert!(out.get("commits").is_none());
    assert_eq!(out["note"], "not a git repository: no commits");
    assert_eq!(strings(&out["callers"]), ["app.py:15 run"]);
}

/// Many callers and a long body: the whole answer still fits, the body is
/// cut to its head, callers give way, and what was left out is named.
#[test]
fn a_crowded_symbol_stays_within_small_budgets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let body: String = (0..300)
        .map(|i| format!("    total = total + compute_value_{i}(items, \"label {i}\")\n"))
        .collect();
    write(
        dir,
        "lib/core.py",
        &format!("def crowded(items):\n    total = 0\n{body}    return total\n"),
    );
    for f in 0..30 {
        let calls: String = (0..10)
            .map(|i| {
                format!("def caller_{f}_{i}(x):\n    y = x + {i}\n    return crowded([y, \"value {f} {i}\"])\n\n\n")
            })
            .collect();
        write(
            dir,
            &format!("app/use_{f}.py"),
            &format!("from lib.core import crowded\n\n\n{calls}"),
        );
    }
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    // A commit of fixed dates, so a fixed id: at the smallest budget a few
    // tokens of the commit line decide whether a caller fits beside the body.
    let date = "2026-01-02T03:04:05Z";
    common::git_with_env(
        dir,
        &["commit", "-q", "-m", "crowded"],
        &[("GIT_AUTHOR_DATE", date), ("GIT_COMMITTER_DATE", date)],
    );
    common::ken_ok(dir, &["index", "--no-embed", "-q"]);
    for budget in [500, 1000, 3000, 16000] {
        let (out, tokens) = context(dir, "crowded", budget);
        assert!(tokens <= budget, "{tokens} tokens over a budget of {budget}");
        assert!(
            tokens * 10 >= budget * 7,
            "most of the budget is used: {tokens} of {budget}"
        );
        let body = &out["pack"]["pieces"][0];
        assert_eq!(body["role"], "body");
        // The body's head comes first; its rest is left out, and said so.
        assert_eq!(body["lines"] == "1-303", budget == 16000, "{out}");
        if budget < 16000 {
            let left_out = out["pack"]["left_out"].as_str().unwrap();
            assert!(
                left_out.starts_with("left out: ")
                    && left_out.contains("the body's lines ")
                    && left_out.contains("-303 (lib/core.py)"),
                "{out}"
            );
            let beside = if budget == 500 { 1 } else { 2 };
            assert!(
                labels(&out, "caller").len() >= beside,
                "callers beside the body at {budget}: {out}"
            );
        }
        let callers = strings(&out["callers"]);
        assert!(callers.last().unwrap().starts_with('…'), "{callers:?}");
        let more: usize = callers.last().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        assert_eq!(callers.len() - 1 + more, 300, "every caller counted: {callers:?}");
    }
}

/// A function's unit tests (their file named after its module, or their name
/// after it) come before tests that reach it through other code, though
/// those come first by path (`codebase_context` ranks its tests by the same
/// `context::test_affinity`); a test that calls it twice is listed once.
#[test]
fn unit_tests_of_the_symbol_come_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "pkg/stats.py",
        "def bin_edges(values, bins):\n    step = (max(values) - min(values)) / bins\n    return [min(values) + i * step for i in range(bins + 1)]\n",
    );
    write(
        dir,
        "pkg/plots.py",
        "from pkg.stats import bin_edges\n\n\ndef histogram(values):\n    return bin_edges(values, 10)\n",
    );
    write(
        dir,
        "tests/test_aaa_plots.py",
        "from pkg.stats import bin_edges\n\n\ndef test_histogram_draws():\n    assert len(bin_edges([1, 2, 3], 2)) == 3\n",
    );
    write(
        dir,
        "tests/test_stats.py",
        "from pkg.stats import bin_edges\n\n\ndef test_int_bins():\n    assert bin_edges([0, 4], 4)[1] == 1\n    assert bin_edges([0, 4], 2)[1] == 2\n",
    );
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "stats"]);
    ken_json(dir, &["index", "--no-embed", "--json"]);
    let (out, _) = context(dir, "bin_edges", 3000);
    assert_eq!(
        strings(&out["tests"]),
        [
            "tests/test_stats.py:5 test_int_bins",
            "tests/test_aaa_plots.py:5 test_histogram_draws"
        ],
        "{out:#}"
    );
}
