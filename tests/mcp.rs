//! `ken serve` driven by a real MCP client: the official Python SDK
//! (`pip install mcp`, done by .ci/run) running tests/mcp_client.py.

mod common;

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
    ken_ok(root, &["index", "-q"]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(ken_bin())
        .arg(root)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
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
}

impl RawServer {
    fn start(root: &std::path::Path) -> RawServer {
        use std::io::BufRead;
        let mut child = Command::new(ken_bin())
            .args(["--root", root.to_str().unwrap(), "serve"])
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
        let mut server = RawServer { child, lines };
        server.send(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        );
        server.wait_for(|m| m["id"] == 1);
        server.send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
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
    let tools: Vec<String> = ken::mcp::tool_definitions()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    for command in ["search", "find", "call-graph", "index", "status"] {
        let text = std::fs::read_to_string(repo.join(format!(".opencode/command/{command}.md"))).unwrap();
        assert!(text.starts_with("---\ndescription: "), "{command}.md has a description");
        let named: Vec<&String> = tools.iter().filter(|t| text.contains(&format!("`{t}`"))).collect();
        assert!(!named.is_empty(), "{command}.md names a ken tool");
    }
}
