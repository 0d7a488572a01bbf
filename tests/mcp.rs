//! `ken serve` driven by a real MCP client: the official Python SDK
//! (`pip install mcp`, done by .ci/run) running tests/mcp_client.py.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

#[test]
fn the_python_sdk_client_passes_every_check() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let retry = "def jittered_backoff_delays(base, attempts):\n    for attempt in range(attempts):\n        yield base * 2 ** attempt\n    return None\n";
    write(root, "src/retry.py", retry);
    write(root, "tools/retry_copy.py", retry);
    // A git history for change_impact: `scale` is changed, a test calls it.
    write(root, "src/scale.py", "def scale(x):\n    return x * 2\n");
    write(
        root,
        "tests/test_scale.py",
        "from src.scale import scale\n\n\ndef test_scale():\n    assert scale(2) == 4\n",
    );
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "."]);
    git(root, &["commit", "-qm", "init"]);
    write(root, "src/scale.py", "def scale(x):\n    return x + x\n");
    ken_ok(root, &["index", "-q"]);
    run_python_client("mcp_client.py", &[&ken_bin(), root]);
}

#[test]
fn closing_stdin_ends_the_server_cleanly_and_stdout_holds_only_json_rpc() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let mut child = Command::new(ken_bin())
        .args(["--root", root.to_str().unwrap(), "serve"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
        writeln!(stdin, "{init}").unwrap();
        writeln!(stdin, r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#).unwrap();
        writeln!(stdin, "this is not json").unwrap();
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"codebase_search","arguments":{{"query":"render_template"}}}}}}"#
        )
        .unwrap();
    }
    drop(child.stdin.take());
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
    }
    assert!(
        stdout.contains("render_template"),
        "the search after a bad line was answered: {stdout}"
    );
}

/// A `ken serve` process spoken to in raw JSON-RPC lines.
struct RawServer {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
    /// The answer to `initialize`.
    init: serde_json::Value,
}

impl RawServer {
    fn start(root: &std::path::Path) -> RawServer {
        let mut cmd = Command::new(ken_bin());
        cmd.args(["--root", root.to_str().unwrap(), "serve"]);
        RawServer::spawn(cmd)
    }

    /// `ken serve` as `cmd` says (arguments, working directory), initialised.
    fn spawn(mut cmd: Command) -> RawServer {
        RawServer::spawn_raw(&mut cmd).initialised()
    }

    /// `ken serve` as `cmd` says, not initialised yet.
    fn spawn_raw(cmd: &mut Command) -> RawServer {
        use std::io::BufRead;
        // The user's own settings file never changes what a test sees.
        if !cmd.get_envs().any(|(k, _)| k == "KEN_CONFIG") {
            cmd.env("KEN_CONFIG", "/nonexistent/ken-test-settings.toml");
        }
        // Its shared service ends with it, as a server of its own did.
        if !cmd.get_envs().any(|(k, _)| k == "KEN_SERVICE_IDLE_SECS") {
            cmd.env("KEN_SERVICE_IDLE_SECS", "0");
        }
        let mut child = cmd
            .env("KEN_SHARED_CACHE", "0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let line = line.unwrap();
                let value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        RawServer {
            child,
            lines,
            init: serde_json::Value::Null,
        }
    }

    fn initialised(self) -> RawServer {
        let mut server = self;
        server.send(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        );
        server.init = server.wait_for(|m| m["id"] == 1)["result"].clone();
        server.send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    /// The tool call's result (`result`, or the JSON-RPC `error`).
    fn call_and_wait(&mut self, id: u64, tool: &str, args: serde_json::Value) -> serde_json::Value {
        self.call(id, tool, args, serde_json::json!({}));
        self.wait_for(|m| m["id"] == id)
    }

    /// Closes stdin and waits for the server to exit (within 20 s).
    fn close(mut self) {
        drop(self.child.stdin.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the server exits when stdin closes"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn send(&mut self, message: serde_json::Value) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn call(&mut self, id: u64, tool: &str, args: serde_json::Value, meta: serde_json::Value) {
        self.send(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args, "_meta": meta}}));
    }

    /// The first message matching `pred` (others are dropped), within 60 s.
    fn wait_for(&mut self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let message = self.lines.recv_timeout(left).expect("the server answers in time");
            if pred(&message) {
                return message;
            }
        }
    }

    fn status(&mut self, id: u64) -> serde_json::Value {
        self.call(id, "index_status", serde_json::json!({}), serde_json::json!({}));
        self.wait_for(|m| m["id"] == id)["result"]["structuredContent"].clone()
    }
}

#[test]
fn index_codebase_reports_progress_and_stops_when_cancelled() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    const FILES: u64 = 6000;
    for i in 0..FILES {
        write(
            root,
            &format!("pkg{}/mod_{i}.py", i % 50),
            &format!("def handler_{i}(request):\n    return request.value + {i}\n"),
        );
    }
    let mut server = RawServer::start(root);
    // The server's watcher builds the first index; the forced run below is
    // then the only one (a search during the first waits for it instead).
    for id in 10_000.. {
        let status = server.status(id);
        if status["files"] == FILES && status["index_run_in_progress"] == false {
            break;
        }
        assert!(id < 12_000, "the first index was never built: {status}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    server.call(
        2,
        "index_codebase",
        serde_json::json!({"force": true}),
        serde_json::json!({"progressToken": "run"}),
    );
    let first = server.wait_for(|m| m["method"] == "notifications/progress");
    assert_eq!(first["params"]["progressToken"], "run");
    assert_eq!(first["params"]["total"], FILES as f64, "{first}");
    let during = server.status(3);
    assert_eq!(during["index_run_in_progress"], true, "{during}");
    server.call(
        4,
        "codebase_search",
        serde_json::json!({"query": "handler"}),
        serde_json::json!({}),
    );
    let partial = server.wait_for(|m| m["id"] == 4);
    let notice = partial["result"]["structuredContent"]["notice"]
        .as_str()
        .unwrap_or_default();
    assert!(notice.contains("partial"), "a search during a run says so: {partial}");
    server.send(
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "test"}}),
    );
    // The run stops after its current batch; the server keeps answering.
    let mut id = 10;
    let stopped = loop {
        id += 1;
        let status = server.status(id);
        if status["index_run_in_progress"] == false {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let files = stopped["files"].as_u64().unwrap();
    assert!(files < FILES, "cancelled early, keeping committed batches: {stopped}");
    // The next run continues from what was committed.
    server.call(99, "index_codebase", serde_json::json!({}), serde_json::json!({}));
    let done = server.wait_for(|m| m["id"] == 99);
    let report = &done["result"]["structuredContent"];
    assert_eq!(report["files"], FILES, "{done}");
    assert_eq!(
        report["parsed"].as_u64().unwrap() + report["unchanged"].as_u64().unwrap(),
        FILES
    );
    drop(server.child.stdin.take());
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn the_opencode_and_claude_code_configs_name_real_tools() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read_json = |rel: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(repo.join(rel)).unwrap()).unwrap()
    };
    assert_eq!(
        read_json(".opencode/opencode.json")["mcp"]["ken"]["command"],
        serde_json::json!(["ken", "serve"])
    );
    assert_eq!(
        read_json(".mcp.json")["mcpServers"]["ken"]["args"],
        serde_json::json!(["serve"])
    );
    let tools: Vec<String> = ken::serve::tool_definitions()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    // The folder's README names every tool there is.
    let readme = std::fs::read_to_string(repo.join(".opencode/README.md")).unwrap();
    for tool in &tools {
        assert!(
            readme.contains(&format!("`{tool}`")),
            ".opencode/README.md misses {tool}"
        );
    }
    for command in ["search", "find", "call-graph", "index", "status"] {
        let text = std::fs::read_to_string(repo.join(format!(".opencode/command/{command}.md"))).unwrap();
        assert!(text.starts_with("---\ndescription: "), "{command}.md has a description");
        let named: Vec<&String> = tools.iter().filter(|t| text.contains(&format!("`{t}`"))).collect();
        assert!(!named.is_empty(), "{command}.md names a ken tool");
    }
}

/// A git repository with code at the top and under `src/`: `helpers.py` at
/// the top defines `frobnicate_ledger_totals`.
fn git_repo_with_subfolder(root: &std::path::Path) {
    git(root, &["init", "-q", "-b", "main"]);
    write(
        root,
        "helpers.py",
        "def frobnicate_ledger_totals(entries):\n    return sum(e.amount for e in entries)\n",
    );
    write(
        root,
        "src/app.py",
        "from helpers import frobnicate_ledger_totals\n\ndef report(entries):\n    return frobnicate_ledger_totals(entries)\n",
    );
    write_unrelated(root, "src/util", 20);
    git(root, &["add", "."]);
    git(
        root,
        &[
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    );
}

fn result_paths(answer: &serde_json::Value) -> Vec<String> {
    answer["result"]["structuredContent"]["results"]
        .as_array()
        .map(|r| r.iter().map(|h| h["path"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn a_server_started_in_a_subfolder_serves_the_whole_indexed_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    git_repo_with_subfolder(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let mut cmd = Command::new(ken_bin());
    cmd.arg("serve").current_dir(root.join("src"));
    let mut server = RawServer::spawn(cmd);
    let answer = server.call_and_wait(
        2,
        "codebase_search",
        serde_json::json!({"query": "frobnicate_ledger_totals"}),
    );
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let paths = result_paths(&answer);
    assert_eq!(paths.first().map(String::as_str), Some("helpers.py"), "{answer}");
    assert!(paths.iter().any(|p| p == "src/app.py"), "{paths:?}");
    server.close();
    assert!(!root.join("src/.ken").exists(), "no second index in the subfolder");
}

#[test]
fn a_server_in_a_fresh_repository_indexes_its_top_and_answers_the_first_search() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    git_repo_with_subfolder(root);
    // No index yet: the server's watcher builds it, at the work tree's top.
    let mut cmd = Command::new(ken_bin());
    cmd.arg("serve").current_dir(root.join("src"));
    let mut server = RawServer::spawn(cmd);
    let answer = server.call_and_wait(
        2,
        "codebase_search",
        serde_json::json!({"query": "frobnicate_ledger_totals"}),
    );
    assert_eq!(
        answer["result"]["isError"], false,
        "the first search is not an error: {answer}"
    );
    let paths = result_paths(&answer);
    assert_eq!(
        paths.first().map(String::as_str),
        Some("helpers.py"),
        "it waited for the first lexical commit: {answer}"
    );
    server.close();
    assert!(root.join(".ken/index.db").exists());
    assert!(!root.join("src/.ken").exists(), "no index in the subfolder");
}

#[test]
fn invalid_json_rpc_gets_a_prompt_error_with_an_id_member() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let mut cmd = Command::new(ken_bin());
    cmd.args(["--root", root.to_str().unwrap(), "serve", "--tools", "all"]);
    let mut server = RawServer::spawn(cmd);
    assert!(
        server.init["capabilities"]["prompts"].is_object() && server.init["capabilities"]["tools"].is_object(),
        "every capability served is declared: {}",
        server.init
    );
    let started = std::time::Instant::now();
    {
        use std::io::Write;
        let stdin = server.child.stdin.as_mut().unwrap();
        writeln!(stdin, "this is not json").unwrap();
    }
    let parse_error = server.wait_for(|m| m["error"]["code"] == -32700);
    assert!(
        parse_error.as_object().unwrap().contains_key("id") && parse_error["id"].is_null(),
        "{parse_error}"
    );
    server.send(serde_json::json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"arguments": {}}}));
    let no_name = server.wait_for(|m| m["id"] == 5);
    assert_eq!(no_name["error"]["code"], -32602, "{no_name}");
    server.send(serde_json::json!([{"jsonrpc": "2.0", "id": 6, "method": "ping"}]));
    let batch = server.wait_for(|m| m["error"]["code"] == -32600);
    assert!(batch["id"].is_null(), "{batch}");
    // An unknown argument is an error the agent reads, at once, also under load.
    for id in 10..40 {
        server.call(
            id,
            "codebase_search",
            serde_json::json!({"query": "render_template"}),
            serde_json::json!({}),
        );
    }
    let unknown = server.call_and_wait(7, "index_logs", serde_json::json!({"limit": 5, "verbosity": "high"}));
    assert_eq!(unknown["result"]["isError"], true, "{unknown}");
    let text = unknown["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("verbosity") && text.contains("limit"), "{text}");
    let zero = server.call_and_wait(8, "codebase_search", serde_json::json!({"query": "x", "limit": 0}));
    assert_eq!(
        zero["result"]["isError"], true,
        "limit 0 is an error, not one result: {zero}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let fine = server.call_and_wait(9, "codebase_search", serde_json::json!({"query": "render_template"}));
    assert_eq!(fine["result"]["isError"], false, "{fine}");
    server.close();
}

/// Characters of name, description and input schema per exposed tool: what
/// an agent's every turn carries.
fn listed_tools(server: &mut RawServer, id: u64) -> Vec<(String, usize)> {
    server.send(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
    let listed = server.wait_for(|m| m["id"] == id);
    listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let size = t["name"].as_str().unwrap().len()
                + t["description"].as_str().unwrap_or_default().len()
                + t["inputSchema"].to_string().len();
            (t["name"].as_str().unwrap().to_string(), size)
        })
        .collect()
}

#[test]
fn the_default_tool_set_is_lean_and_the_surface_is_chosen_by_flag_or_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let serve = |extra: &[&str]| {
        let mut cmd = Command::new(ken_bin());
        cmd.args(["--root", root.to_str().unwrap(), "serve"]).args(extra);
        RawServer::spawn(cmd)
    };
    let mut default = serve(&[]);
    let tools = listed_tools(&mut default, 2);
    let names: Vec<&str> = tools.iter().map(|(n, _)| n.as_str()).collect();
    for needed in [
        "codebase_search",
        "codebase_peek",
        "find_similar",
        "call_graph",
        "call_graph_path",
        "symbol_context",
        "change_impact",
        "index_status",
    ] {
        assert!(names.contains(&needed), "{needed} is served by default: {names:?}");
    }
    for admin in [
        "index_logs",
        "index_metrics",
        "index_health_check",
        "add_knowledge_base",
    ] {
        assert!(!names.contains(&admin), "{admin} is a preset away: {names:?}");
    }
    let total: usize = tools.iter().map(|(_, n)| n).sum();
    assert!(
        // 11 tools: search, context for a question or an edit, impact, map, graph, index.
        total < 7500,
        "the default tools cost {total} characters a turn: {tools:?}"
    );
    let hidden = default.call_and_wait(3, "index_logs", serde_json::json!({}));
    assert_eq!(
        hidden["error"]["code"], -32602,
        "a tool not served is not callable: {hidden}"
    );
    default.close();

    let mut all = serve(&["--tools", "all"]);
    assert_eq!(listed_tools(&mut all, 2).len(), 17);
    all.close();
    let mut some = serve(&["--tools", "search,kb,-find_similar"]);
    let names: Vec<String> = listed_tools(&mut some, 2).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "add_knowledge_base",
            "codebase_context",
            "codebase_peek",
            "codebase_search",
            "list_knowledge_bases",
            "remove_knowledge_base"
        ]
    );
    some.close();

    // The settings file chooses when no flag does; a bad one is a clear error.
    let settings = root.join("settings.toml");
    std::fs::write(&settings, "[serve]\ntools = [\"search\"]\n").unwrap();
    let mut cmd = Command::new(ken_bin());
    cmd.args(["--root", root.to_str().unwrap(), "serve"]);
    let mut from_settings = RawServer::spawn_raw(cmd.env("KEN_CONFIG", &settings)).initialised();
    assert_eq!(listed_tools(&mut from_settings, 2).len(), 4);
    from_settings.close();
    std::fs::write(&settings, "[serve]\ntool = [\"search\"]\n").unwrap();
    let out = Command::new(ken_bin())
        .args(["--root", root.to_str().unwrap(), "serve", "--list-tools"])
        .env("KEN_CONFIG", &settings)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("settings.toml"),
        "{out:?}"
    );
    let out = Command::new(ken_bin())
        .args(["serve", "--tools", "search,frobnicate", "--list-tools"])
        .env("KEN_CONFIG", "/nonexistent/ken.toml")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("frobnicate"), "{out:?}");
}

fn embedded_contents(root: &std::path::Path) -> u64 {
    let status = ken_json(root, &["status", "--json"]);
    status["embedded_contents"]
        .as_u64()
        .or_else(|| status["embeddings"].as_u64())
        .unwrap_or_else(|| panic!("no embedding count in {status}"))
}

#[test]
fn a_server_respects_no_embed_and_a_short_lived_one_starts_no_embedding() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    write_unrelated(root, "pkg", 40);
    // A health check's server: started, listed, closed within a second; the
    // index it builds is lexical, and it loads no model.
    let mut cmd = Command::new(ken_bin());
    cmd.args(["--root", root.to_str().unwrap(), "serve"]);
    let mut check = RawServer::spawn(cmd);
    listed_tools(&mut check, 2);
    let answer = check.call_and_wait(3, "codebase_search", serde_json::json!({"query": "render_template"}));
    assert!(!result_paths(&answer).is_empty(), "{answer}");
    std::thread::sleep(std::time::Duration::from_millis(800));
    check.close();
    assert_eq!(embedded_contents(root), 0, "a short-lived server embedded nothing");

    // The user's --no-embed stands for a server that lives on.
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let mut cmd = Command::new(ken_bin());
    cmd.args(["--root", root.to_str().unwrap(), "serve"]);
    let server = RawServer::spawn(cmd);
    std::thread::sleep(std::time::Duration::from_secs(8));
    server.close();
    assert_eq!(
        embedded_contents(root),
        0,
        "an index built with --no-embed stays lexical"
    );
}

/// A server loads the query model on another thread as it starts: a hybrid
/// search before it is ready answers at once with the lexical results and
/// says so; once it is ready, answers use the vectors.
#[test]
fn a_hybrid_search_before_the_model_is_loaded_answers_lexically_and_says_so() {
    ken::embed::model::fetch(&ken::embed::model::MINILM).expect("the built-in model (run `ken model fetch`)");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "-q"]);
    let query = "check whether a token has expired";
    let lexical: Vec<String> = ken_json(root, &["search", "--json", "--mode", "lexical", "-k", "5", query])
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("{}:{}", h["path"].as_str().unwrap(), h["start_line"]))
        .collect();
    let mut cmd = Command::new(ken_bin());
    cmd.args(["--root", root.to_str().unwrap(), "serve", "--no-watch"]);
    let mut server = RawServer::spawn(cmd);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (mut early, mut id) = (0, 2);
    loop {
        let answer = server.call_and_wait(
            id,
            "codebase_search",
            serde_json::json!({"query": query, "limit": 5, "explain": true}),
        );
        let out = &answer["result"]["structuredContent"];
        let results = out["results"].as_array().unwrap();
        let loading = out["notice"].as_str().is_some_and(|n| n.contains("still loading"));
        if loading {
            early += 1;
            let found: Vec<String> = results
                .iter()
                .map(|h| format!("{}:{}", h["path"].as_str().unwrap(), h["start_line"]))
                .collect();
            assert_eq!(found, lexical, "while the model loads, the lexical answer: {out}");
            assert!(results.iter().all(|h| h["explain"].get("cosine").is_none()), "{out}");
        } else {
            assert!(
                results.iter().any(|h| h["explain"]["cosine"].is_number()),
                "once loaded, the vectors take part: {out}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the model never finished loading");
        id += 1;
    }
    // The first search comes ~20 ms after the start; loading MiniLM takes 100+ ms.
    assert!(early >= 1, "the first search did not wait for the model");
    eprintln!("{early} answers came before the model was ready");
    server.close();
}

#[test]
fn codebase_search_and_context_say_when_nothing_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    payments_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let mut server = RawServer::start(root);
    let search = |server: &mut RawServer, id: u64, tool: &str, query: &str| {
        let answer = server.call_and_wait(id, tool, serde_json::json!({"query": query, "mode": "lexical"}));
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        answer["result"]["structuredContent"]["confidence"].clone()
    };
    let off = search(
        &mut server,
        2,
        "codebase_search",
        "oauth2 token refresh for kubernetes ingress",
    );
    assert_eq!(off["level"], "low", "{off}");
    assert!(off["note"].as_str().unwrap().starts_with("no strong match"), "{off}");
    let real = search(
        &mut server,
        3,
        "codebase_search",
        "retry a declined card payment with backoff",
    );
    assert_ne!(real["level"], "low", "{real}");
    assert!(real.get("note").is_none(), "a match carries no note: {real}");
    let context = search(
        &mut server,
        4,
        "codebase_context",
        "oauth2 token refresh for kubernetes ingress",
    );
    assert_eq!(context["level"], "low", "{context}");
    server.close();
}

/// The sample project under `dir/repo`, indexed with the built-in model, and
/// a file of three questions about it.
fn embedded_sample_with_questions(dir: &Path) -> (PathBuf, PathBuf) {
    ken::embed::model::fetch(&ken::embed::model::MINILM).expect("the built-in model (run `ken model fetch`)");
    let root = dir.join("repo");
    std::fs::create_dir_all(&root).unwrap();
    sample_project(&root);
    ken_ok(&root, &["index", "-q"]);
    let questions = dir.join("questions.txt");
    std::fs::write(
        &questions,
        "check whether a token has expired\nwhere is the template rendered\nhow are settings loaded\n",
    )
    .unwrap();
    (root, questions)
}

/// `ken bench serve` of two cold starts, the questions asked back to back,
/// with `extra` arguments: its report.
fn bench_serve(root: &Path, questions: &Path, extra: &[&str]) -> serde_json::Value {
    let questions = questions.to_str().unwrap();
    let args = [
        "bench",
        "serve",
        "--questions",
        questions,
        "--spawns",
        "2",
        "--pause-ms",
        "0",
    ];
    let out = ken(root, &[&args[..], extra].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the report is JSON")
}

/// The command lines of the `ken serve` processes (sessions and services)
/// running for `root`.
fn servers_serving(root: &Path) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(" serve ") && c.contains(root.to_str().unwrap()))
        .collect()
}

/// `ken bench serve` measures real servers over stdio, beside the same
/// questions in process, and leaves no server behind.
#[test]
fn bench_serve_times_a_real_server_beside_the_same_questions_in_process() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, questions) = embedded_sample_with_questions(tmp.path());
    let bin = ken_bin();
    let report = bench_serve(&root, &questions, &["--baseline-exe", bin.to_str().unwrap()]);
    assert_eq!(report["questions"], 3);
    for run in [&report["this"], &report["baseline"]] {
        let first = run["spawn_to_first_answer"]["p50_ms"].as_f64().unwrap();
        let model = run["spawn_to_model_answer"]["p50_ms"].as_f64().unwrap();
        assert!(first > 0.0 && model >= first, "{run}");
        assert!(run["first_answers_lexical"].as_u64().unwrap() <= 2, "{run}");
        assert!(run["questions"]["p50_ms"].as_f64().unwrap() > 0.0, "{run}");
        assert!(
            run["rss_mb"].as_f64().unwrap() > 1.0,
            "the server's memory is read: {run}"
        );
        assert!(run["server_cpu_ms_per_question"].as_f64().is_some(), "{run}");
    }
    let in_process = report["in_process"]["p50_ms"].as_f64().unwrap();
    let server = report["this"]["questions"]["p50_ms"].as_f64().unwrap();
    let ratio = report["ratios"]["server_over_in_process_p50"].as_f64().unwrap();
    assert!((ratio - server / in_process).abs() < 1e-9, "{report}");
    assert!(report["ratios"]["questions_p50_over_baseline"].as_f64().is_some());
    // The in-process searches by phase: the lexical side, with the query's
    // embedding beside it, takes time, and no part of it exceeds it.
    let phases = report["in_process_phases_p50"].as_array().unwrap();
    let phase = |name: &str| -> f64 {
        phases
            .iter()
            .find(|p| p[0].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {phases:?}"))[1]
            .as_f64()
            .unwrap()
    };
    let lexical = phase("lexical side");
    assert!(lexical > 0.0, "{phases:?}");
    for part in ["inside it, BM25", "beside it, the query embedding"] {
        assert!(phase(part) > 0.0 && phase(part) <= lexical, "{part}: {phases:?}");
    }
    // Every server it started has exited.
    let left = servers_serving(&root);
    assert!(left.is_empty(), "servers left running: {left:?}");
    // A baseline that is not there is said before anything runs.
    let missing = tmp.path().join("no-such-ken");
    let out = ken(&root, &["bench", "serve", "--baseline-exe", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-ken") && stderr.contains("no such file"),
        "{stderr}"
    );
    // A baseline that is no server: what it said on stderr is in the error.
    let broken = tmp.path().join("broken-ken");
    std::fs::write(&broken, "#!/bin/sh\necho 'this build cannot serve' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let args = [
        "bench",
        "serve",
        "--questions",
        questions.to_str().unwrap(),
        "--spawns",
        "1",
    ];
    let out = ken(
        &root,
        &[&args[..], &["--baseline-exe", broken.to_str().unwrap()]].concat(),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("exited before answering initialize") && stderr.contains("this build cannot serve"),
        "{stderr}"
    );
}

/// `ken bench serve --via-service` measures the default path: sessions
/// attach to a warm shared service, whose own counters are read, and the
/// service is gone when the bench ends.
#[test]
fn bench_serve_via_service_attaches_to_a_warm_shared_service_and_leaves_none() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, questions) = embedded_sample_with_questions(tmp.path());
    let report = bench_serve(&root, &questions, &["--via-service"]);
    assert_eq!(report["via_service"], true);
    let run = &report["this"];
    // Each measured session attached to a service whose model was loaded.
    assert_eq!(run["first_answers_lexical"], 0, "{run}");
    assert!(run["questions"]["p50_ms"].as_f64().unwrap() > 0.0, "{run}");
    // The counters are the service's: it holds the index and the model.
    assert!(run["server_cpu_ms_per_question"].as_f64().is_some(), "{run}");
    assert!(run["rss_mb"].as_f64().unwrap() > 50.0, "{run}");
    let left = servers_serving(&root);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// The threads a tool call runs on stay parked while an agent pauses: a
/// new thread after every pause longer than tokio's default keep-alive
/// (10 s) can start late on a busy machine.
#[test]
fn a_server_keeps_its_threads_across_an_agents_pause() {
    ken::embed::model::fetch(&ken::embed::model::MINILM).expect("the built-in model (run `ken model fetch`)");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "-q"]);
    let mut cmd = Command::new(ken_bin());
    cmd.args(["--root", root.to_str().unwrap(), "serve", "--no-watch", "--no-service"]);
    let mut server = RawServer::spawn(cmd);
    let pid = server.child.id();
    let threads = || std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count();
    let search = |server: &mut RawServer, id: u64| {
        let answer = server.call_and_wait(
            id,
            "codebase_search",
            serde_json::json!({"query": "check whether a token has expired"}),
        );
        answer["result"]["structuredContent"]["notice"]
            .as_str()
            .is_some_and(|n| n.contains("still loading"))
    };
    // Past the model's load and the warm-up, whose threads end.
    let mut id = 2;
    while search(&mut server, id) {
        id += 1;
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Until no thread has started or ended for 2 s (a loaded machine runs
    // the background warm-up late), then one more call before the pause.
    let settled_by = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut last = (threads(), std::time::Instant::now());
    while last.1.elapsed() < std::time::Duration::from_secs(2) && std::time::Instant::now() < settled_by {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = threads();
        if now != last.0 {
            last = (now, std::time::Instant::now());
        }
    }
    search(&mut server, id + 1);
    let before = threads();
    std::thread::sleep(std::time::Duration::from_secs(12));
    assert_eq!(threads(), before, "a thread ended during the pause");
    assert!(!search(&mut server, id + 2));
    server.close();
}
