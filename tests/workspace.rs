//! Workspaces: several real git repositories listed in a `ken.toml`,
//! indexed, searched and call-graphed together by real `ken` processes (and
//! one real MCP client, the official Python SDK).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A git repository at `dir` with these files, committed.
fn repo(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        write(dir, path, text);
    }
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "init"]);
}

fn stderr_of(dir: &Path, args: &[&str]) -> String {
    let out = ken(dir, args);
    assert!(!out.status.success(), "ken {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const GO_LIB: &[(&str, &str)] = &[
    ("go.mod", "module example.com/lib\n\ngo 1.21\n"),
    (
        "util/backoff.go",
        "package util\n\n// Backoff is the delay before a retry attempt.\nfunc Backoff(attempt int) int {\n\treturn attempt * 2\n}\n",
    ),
];
const GO_SERVICE: &[(&str, &str)] = &[
    ("go.mod", "module example.com/service\n\ngo 1.21\n"),
    (
        "main.go",
        "package main\n\nimport \"example.com/lib/util\"\n\n// retryRequest waits a backoff delay, then retries.\nfunc retryRequest() int {\n\treturn util.Backoff(3)\n}\n\nfunc main() {\n\tretryRequest()\n}\n",
    ),
];

/// `<tmp>/ws/ken.toml` with `service` and `lib` (Go) as members, indexed.
fn go_workspace(tmp: &Path) -> PathBuf {
    let ws = tmp.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    repo(&tmp.join("lib"), GO_LIB);
    repo(&tmp.join("service"), GO_SERVICE);
    ken_ok(&ws, &["workspace", "add", "../service"]);
    ken_ok(&ws, &["workspace", "add", "../lib"]);
    ken_ok(&ws, &["index", "--no-embed", "-q"]);
    ws
}

#[test]
fn members_are_added_listed_and_removed_with_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    repo(&tmp.path().join("lib"), GO_LIB);
    repo(&tmp.path().join("service"), GO_SERVICE);
    assert!(stderr_of(&ws, &["workspace", "list"]).contains("no workspace"));

    let added = ken_ok(&ws, &["workspace", "add", "../service"]);
    assert!(added.contains("not indexed yet"), "{added}");
    ken_ok(&ws, &["workspace", "add", "../lib", "--name", "core"]);
    let file = std::fs::read_to_string(ws.join("ken.toml")).unwrap();
    assert!(
        file.contains("[workspace]") && file.contains("\"../service\""),
        "{file}"
    );
    assert!(file.contains("name = \"core\""), "{file}");

    let missing = stderr_of(&ws, &["workspace", "add", "../nowhere"]);
    assert!(missing.contains("no such folder"), "{missing}");
    let twice = stderr_of(&ws, &["workspace", "add", "../lib"]);
    assert!(twice.contains("already the member `core`"), "{twice}");
    std::fs::create_dir_all(tmp.path().join("other/lib")).unwrap();
    let same_name = stderr_of(&ws, &["workspace", "add", "../other/lib", "--name", "service"]);
    assert!(same_name.contains("named `service` exists already"), "{same_name}");

    let listed = ken_json(&ws, &["workspace", "list", "--json"]);
    let states: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("service", "not indexed"), ("core", "not indexed")]);
    // Searching before indexing says which command builds the indexes.
    let unindexed = stderr_of(&ws, &["search", "backoff"]);
    assert!(unindexed.contains("`ken index` in the workspace folder"), "{unindexed}");

    ken_ok(&ws, &["index", "--no-embed", "-q"]);
    let listed = ken_json(&ws, &["workspace", "list", "--json"]);
    for member in listed.as_array().unwrap() {
        assert_eq!(member["state"], "indexed", "{member}");
        assert!(member["chunks"].as_u64().unwrap() >= 1, "{member}");
    }
    let text = ken_ok(&ws, &["workspace", "list"]);
    assert!(text.contains("core") && text.contains("chunks"), "{text}");

    let removed = ken_ok(&ws, &["workspace", "remove", "core"]);
    assert!(removed.contains("removed `core`"), "{removed}");
    assert!(tmp.path().join("lib/.ken").is_dir(), "the member's index is kept");
    let gone = stderr_of(&ws, &["workspace", "remove", "core"]);
    assert!(gone.contains("no member `core`") && gone.contains("service"), "{gone}");
    // By path too.
    ken_ok(&ws, &["workspace", "remove", "../service"]);
    assert!(ken_json(&ws, &["workspace", "list", "--json"])
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn a_broken_workspace_file_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "ken.toml", "[workspace]\nmembers = [\"a\", \"a\"]\n");
    let twice = stderr_of(tmp.path(), &["search", "x"]);
    assert!(twice.contains("ken.toml") && twice.contains("same member"), "{twice}");
    write(tmp.path(), "ken.toml", "[workspace]\nmembers = 3\n");
    let bad = stderr_of(tmp.path(), &["search", "x"]);
    assert!(bad.contains("not a valid workspace file"), "{bad}");
}

#[test]
fn search_spans_the_members_names_each_and_filters_by_member() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = go_workspace(tmp.path());
    let query = ["search", "--json", "--mode", "lexical", "backoff retry delay"];
    let hits = ken_json(&ws, &query);
    let hits = hits.as_array().unwrap();
    let members: Vec<&str> = hits.iter().map(|h| h["member"].as_str().unwrap()).collect();
    assert!(members.contains(&"service") && members.contains(&"lib"), "{hits:#?}");
    let backoff = hits.iter().find(|h| h["path"] == "util/backoff.go").unwrap();
    assert_eq!(backoff["member"], "lib");
    // Deterministic: the same list again.
    assert_eq!(&ken_json(&ws, &query).as_array().unwrap()[..], hits);

    let only = ken_json(&ws, &[&query[..], &["--member", "lib"]].concat());
    let only = only.as_array().unwrap();
    assert!(
        !only.is_empty() && only.iter().all(|h| h["member"] == "lib"),
        "{only:#?}"
    );
    let both = ken_json(&ws, &[&query[..], &["--member", "lib", "--member", "service"]].concat());
    assert_eq!(both.as_array().unwrap().len(), hits.len());
    let unknown = stderr_of(&ws, &["search", "backoff", "--member", "nope"]);
    assert!(
        unknown.contains("no member `nope`") && unknown.contains("service, lib"),
        "{unknown}"
    );

    let text = ken_ok(&ws, &["search", "--mode", "lexical", "backoff retry delay"]);
    assert!(text.contains("[lib] util/backoff.go"), "{text}");
    assert!(text.contains("[service] main.go"), "{text}");
    // --workspace names the file from anywhere.
    let inside = ken_json(
        tmp.path(),
        &[&["--workspace", ws.join("ken.toml").to_str().unwrap()][..], &query[..]].concat(),
    );
    assert_eq!(inside.as_array().unwrap().len(), hits.len());
}

#[test]
fn a_repository_without_a_workspace_answers_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("lib");
    repo(&lib, GO_LIB);
    ken_ok(&lib, &["index", "--no-embed", "-q"]);
    let hits = search(&lib, "backoff", 5);
    assert!(!hits.is_empty());
    for hit in &hits {
        let mut keys: Vec<&str> = hit.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "base",
                "end_line",
                "kind",
                "language",
                "path",
                "score",
                "snippet",
                "start_line",
                "symbol"
            ]
        );
        assert_eq!(hit["base"], "project");
    }
    let text = ken_ok(&lib, &["search", "backoff"]);
    assert!(text.contains("util/backoff.go:") && !text.contains("[lib]"), "{text}");
    let graph = ken_json(&lib, &["callgraph", "Backoff", "--json"]);
    assert!(graph["symbol"].get("member").is_none(), "{graph}");
    let member = stderr_of(&lib, &["search", "backoff", "--member", "lib"]);
    assert!(member.contains("--member needs a workspace"), "{member}");
    // --root names one repository even below a workspace file.
    write(tmp.path(), "ken.toml", "[workspace]\nmembers = [\"nowhere\"]\n");
    let rooted = ken_json(&lib, &["--root", lib.to_str().unwrap(), "search", "--json", "backoff"]);
    assert!(rooted.as_array().unwrap()[0].get("member").is_none());
}

/// A library and an app calling it through an import, in one language.
struct Pair {
    lib: &'static [(&'static str, &'static str)],
    app: &'static [(&'static str, &'static str)],
    callee: &'static str,
    caller: &'static str,
}

const PAIRS: &[(&str, Pair)] = &[
    (
        "go",
        Pair {
            lib: GO_LIB,
            app: GO_SERVICE,
            callee: "Backoff",
            caller: "retryRequest",
        },
    ),
    (
        "python",
        Pair {
            lib: &[
                ("mylib/__init__.py", ""),
                ("mylib/util.py", "def backoff_delay(attempt):\n    return attempt * 2\n"),
            ],
            app: &[
                ("app/__init__.py", ""),
                (
                    "app/client.py",
                    "from mylib.util import backoff_delay\n\n\ndef retry_request():\n    return backoff_delay(3)\n",
                ),
            ],
            callee: "backoff_delay",
            caller: "retry_request",
        },
    ),
    (
        "rust",
        Pair {
            lib: &[
                ("Cargo.toml", "[package]\nname = \"rs-lib\"\nversion = \"0.1.0\"\n"),
                ("src/lib.rs", "pub mod util;\n"),
                ("src/util.rs", "pub fn backoff_delay(attempt: u32) -> u32 {\n    attempt * 2\n}\n"),
            ],
            app: &[
                ("Cargo.toml", "[package]\nname = \"rs-app\"\nversion = \"0.1.0\"\n"),
                (
                    "src/main.rs",
                    "use rs_lib::util::backoff_delay;\n\nfn retry_request() -> u32 {\n    backoff_delay(3)\n}\n\nfn main() {\n    retry_request();\n}\n",
                ),
            ],
            callee: "backoff_delay",
            caller: "retry_request",
        },
    ),
    (
        "javascript",
        Pair {
            lib: &[
                ("package.json", "{\"name\": \"@acme/retry\", \"version\": \"1.0.0\"}\n"),
                ("index.js", "export function backoffDelay(attempt) {\n  return attempt * 2;\n}\n"),
            ],
            app: &[
                ("package.json", "{\"name\": \"app\", \"version\": \"1.0.0\"}\n"),
                (
                    "src/client.js",
                    "import { backoffDelay } from \"@acme/retry\";\n\nexport function retryRequest() {\n  return backoffDelay(3);\n}\n",
                ),
            ],
            callee: "backoffDelay",
            caller: "retryRequest",
        },
    ),
];

/// The (from member, from name, to member, to name, confidence) of a call graph's edges.
fn edges(graph: &Value) -> Vec<(String, String, String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    graph["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                s(&e["from"]["member"]),
                s(&e["from"]["name"]),
                s(&e["to"]["member"]),
                s(&e["to"]["name"]),
                s(&e["confidence"]),
            )
        })
        .collect()
}

#[test]
fn calls_link_into_the_member_that_provides_the_imported_module() {
    for (language, pair) in PAIRS {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        repo(&tmp.path().join("app"), pair.app);
        repo(&tmp.path().join("lib"), pair.lib);
        ken_ok(&ws, &["workspace", "add", "../app"]);
        ken_ok(&ws, &["workspace", "add", "../lib"]);
        ken_ok(&ws, &["index", "--no-embed", "-q"]);
        let expected = (
            "app".to_string(),
            pair.caller.to_string(),
            "lib".to_string(),
            pair.callee.to_string(),
            "import".to_string(),
        );
        let callers = ken_json(&ws, &["callgraph", pair.callee, "--json"]);
        assert_eq!(callers["symbol"]["member"], "lib", "{language}: {callers}");
        assert_eq!(
            edges(&callers),
            std::slice::from_ref(&expected),
            "{language}: {callers}"
        );
        let callees = ken_json(&ws, &["callgraph", pair.caller, "--callees", "--json"]);
        assert_eq!(edges(&callees), [expected], "{language}: {callees}");
        let tree = ken_ok(&ws, &["callgraph", pair.callee]);
        assert!(
            tree.contains(&format!("{} function  [app]", pair.caller)),
            "{language}: {tree}"
        );
        // Each member alone: the import leads outside the repository, to nothing.
        let alone = ken_json(&tmp.path().join("lib"), &["callgraph", pair.callee, "--json"]);
        assert!(edges(&alone).is_empty(), "{language}: {alone}");
    }
}

#[test]
fn an_import_no_member_provides_links_nowhere() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    repo(&tmp.path().join("lib"), GO_LIB);
    let other = GO_SERVICE[1]
        .1
        .replace("example.com/lib/util", "example.com/other/util");
    repo(&tmp.path().join("service"), &[GO_SERVICE[0], ("main.go", &other)]);
    ken_ok(&ws, &["workspace", "add", "../service"]);
    ken_ok(&ws, &["workspace", "add", "../lib"]);
    ken_ok(&ws, &["index", "--no-embed", "-q"]);
    let callers = ken_json(&ws, &["callgraph", "Backoff", "--json"]);
    assert!(edges(&callers).is_empty(), "{callers}");
    // A name defined in two members is ambiguous until a member is named.
    repo(&tmp.path().join("lib2"), GO_LIB);
    ken_ok(&ws, &["workspace", "add", "../lib2"]);
    ken_ok(&ws, &["index", "--no-embed", "-q"]);
    let two = stderr_of(&ws, &["callgraph", "Backoff"]);
    assert!(
        two.contains("lib: util/backoff.go:4") && two.contains("--member"),
        "{two}"
    );
    ken_ok(&ws, &["callgraph", "Backoff", "--member", "lib2"]);
}

#[test]
fn an_mcp_client_searches_the_members_together() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = go_workspace(tmp.path());
    let lone = tmp.path().join("lone");
    repo(&lone, GO_LIB);
    ken_ok(&lone, &["index", "--no-embed", "-q"]);
    run_python_client("mcp_workspace_client.py", &[&ken_bin(), &ws, &lone]);
}
