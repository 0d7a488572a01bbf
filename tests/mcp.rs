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
