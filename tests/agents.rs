//! The real agent clients driven against `ken serve`: OpenCode and Claude Code,
//! pinned in tests/clients/package.json and installed by .ci/run with
//! `npm ci --prefix tests/clients`. No real model is involved: for OpenCode,
//! tests/clients/fake_llm.py plays an OpenAI-compatible model on 127.0.0.1
//! with a fixed script (call ken's search tool, then quote its result).
//!
//! Each client runs with a temporary HOME and XDG dirs and with the settings
//! that keep it off the network (no models.dev catalogue, no update check,
//! no plugin install, no telemetry): CI reaches only the package registries.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// A client's executable from tests/clients/node_modules, or a failure that says how to install it.
fn client_bin(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients/node_modules/.bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run `npm ci --prefix tests/clients` (as .ci/run does) to install the pinned agent clients",
        path.display()
    );
    path
}

/// Kills `child`'s whole process group (it was started as a group leader), then reaps it.
fn kill_group(child: &mut Child) {
    // SAFETY: kill(2) on a process group this test started; errors (already gone) are ignored.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.wait();
}

/// A child process in a process group of its own, killed with all it started when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        kill_group(&mut self.0);
    }
}

/// Everything read from a pipe so far, filled by a thread.
#[derive(Clone)]
struct Capture {
    text: Arc<Mutex<Vec<u8>>>,
    done: Arc<Mutex<Option<mpsc::Receiver<()>>>>,
}

impl Capture {
    fn of(mut pipe: impl Read + Send + 'static) -> Capture {
        let text = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = text.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
            let _ = tx.send(());
        });
        Capture {
            text,
            done: Arc::new(Mutex::new(Some(rx))),
        }
    }

    /// The text, after waiting (boundedly) for the pipe to close.
    fn finish(&self) -> String {
        if let Some(rx) = self.done.lock().unwrap().take() {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
        self.text()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` (stdin closed) for at most `limit`; on a time-out the process
/// group is killed and the test fails with what the command printed.
fn run_bounded(mut cmd: Command, limit: Duration, what: &str, context: impl Fn() -> String) -> Finished {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let stdout = Capture::of(child.stdout.take().unwrap());
    let stderr = Capture::of(child.stderr.take().unwrap());
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever it left running (its MCP servers) goes too.
    kill_group(&mut child);
    let (out, err) = (stdout.finish(), stderr.finish());
    let Some(status) = status else {
        panic!(
            "{what} did not finish within {limit:?}\nstdout: {out}\nstderr: {err}\n{}",
            context()
        );
    };
    Finished {
        status,
        stdout: out,
        stderr: err,
    }
}

/// Text without ANSI colour sequences.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// tests/clients/fake_llm.py, listening on 127.0.0.1; killed when dropped.
struct FakeLlm {
    port: u16,
    log: PathBuf,
    _process: Guard,
}

impl FakeLlm {
    fn start(log: &Path, query: &str, model: &str) -> FakeLlm {
        use std::os::unix::process::CommandExt;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/fake_llm.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(log)
            .arg(query)
            .arg(model)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("python3 runs tests/clients/fake_llm.py");
        let stdout = child.stdout.take().unwrap();
        let process = Guard(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let first = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the fake model prints its port within 20 s");
        let port = first
            .and_then(|line| line.ok())
            .and_then(|line| line.trim().parse().ok())
            .expect("the fake model's first line is its port");
        FakeLlm {
            port,
            log: log.to_path_buf(),
            _process: process,
        }
    }

    /// Every request logged so far.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn summary(&self) -> String {
        let mut out = String::from("requests the fake model received:\n");
        for r in self.requests() {
            let body = &r["body"];
            let tools: Vec<&str> = body["tools"]
                .as_array()
                .map(|t| t.iter().filter_map(|t| t["function"]["name"].as_str()).collect())
                .unwrap_or_default();
            let roles: Vec<&str> = body["messages"]
                .as_array()
                .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
                .unwrap_or_default();
            out += &format!(
                "  {} {} -> {} ({}); tools {tools:?}; roles {roles:?}\n",
                r["method"].as_str().unwrap_or(""),
                r["path"].as_str().unwrap_or(""),
                r["reply"].as_str().unwrap_or(""),
                r["text"].as_str().unwrap_or("")
            );
        }
        out
    }
}

/// The names of the tools a chat request offered.
fn offered_tools(request: &Value) -> Vec<String> {
    request["body"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The text of the `tool` messages (tool results) in a chat request.
fn tool_results(request: &Value) -> Vec<String> {
    request["body"]["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| match &m["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A home and XDG dirs of their own under `home`, and nothing of this
/// process's environment but PATH and the locale.
fn isolated(cmd: &mut Command, home: &Path) {
    cmd.env_clear();
    for name in ["PATH", "LANG", "LC_ALL"] {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("TMPDIR", std::env::temp_dir())
        .env("NO_COLOR", "1")
        .env("TERM", "dumb");
}

/// OpenCode in `repo`, offline: no models.dev catalogue (the provider is
/// declared in opencode.json), no update check, no default plugins, no LSP
/// downloads, no sharing.
fn opencode(repo: &Path, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(client_bin("opencode"));
    isolated(&mut cmd, home);
    cmd.args(args)
        .current_dir(repo)
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .env("OPENCODE_DISABLE_CLAUDE_CODE", "1")
        .env("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1");
    cmd
}

/// OpenCode installs `@opencode-ai/plugin` from the npm registry into each
/// config dir unless that dir already has node_modules and lists the package
/// in package.json and package-lock.json; these stand in for it (the tests
/// load no plugins), so OpenCode never reaches for the network.
fn opencode_home(home: &Path) {
    let config = home.join(".config/opencode");
    std::fs::create_dir_all(config.join("node_modules")).unwrap();
    let deps = json!({"@opencode-ai/plugin": "*"});
    std::fs::write(config.join("package.json"), json!({"dependencies": deps}).to_string()).unwrap();
    std::fs::write(
        config.join("package-lock.json"),
        json!({"lockfileVersion": 3, "packages": {"": {"dependencies": deps}}}).to_string(),
    )
    .unwrap();
}

/// The tail of OpenCode's own log files, for failure messages.
fn opencode_logs(home: &Path) -> String {
    let dir = home.join(".local/share/opencode/log");
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            text += &std::fs::read_to_string(entry.path()).unwrap_or_default();
        }
    }
    let start = text.len().saturating_sub(6000);
    let start = (start..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("opencode log ({}):\n{}", dir.display(), &text[start..])
}

/// A git repository with a few source files, one defining a distinctive
/// function, indexed without embeddings (lexical search needs no model).
fn indexed_repo(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    sample_project(root);
    write(
        root,
        "src/billing/ledger.py",
        r#"from decimal import Decimal


def reconcile_quarterly_ledger(entries, statement):
    """Match each ledger entry against the bank statement for the quarter."""
    unmatched = []
    for entry in entries:
        if Decimal(entry.amount) not in statement.amounts:
            unmatched.append(entry)
    return unmatched
"#,
    );
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "initial"]);
    ken_ok(root, &["index", "--no-embed", "-q"]);
}

const MODEL: &str = "fake-model";

#[test]
fn opencode_calls_ken_and_the_result_reaches_the_model() {
    client_bin("opencode");
    let tmp = tempfile::tempdir().unwrap();
    let tmp_path = tmp.path().canonicalize().unwrap();
    let repo = tmp_path.join("repo");
    let home = tmp_path.join("home");
    indexed_repo(&repo);
    opencode_home(&home);
    let llm = FakeLlm::start(&tmp_path.join("llm.jsonl"), "reconcile quarterly ledger", MODEL);
    let config = json!({
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake model",
                "options": {"baseURL": format!("http://127.0.0.1:{}/v1", llm.port), "apiKey": "dummy"},
                "models": {MODEL: {"name": "Fake model", "tool_call": true}}
            }
        },
        "model": format!("fake/{MODEL}"),
        "small_model": format!("fake/{MODEL}"),
        "share": "disabled",
        "autoupdate": false,
        "mcp": {"ken": {"type": "local", "command": [ken_bin(), "serve"], "enabled": true}}
    });
    std::fs::write(
        repo.join("opencode.json"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();
    let context = || format!("{}\n{}", llm.summary(), opencode_logs(&home));

    // `opencode mcp list` starts ken and reports it connected.
    let listed = run_bounded(
        opencode(&repo, &home, &["mcp", "list"]),
        Duration::from_secs(45),
        "opencode mcp list",
        context,
    );
    let listing = plain(&format!("{}\n{}", listed.stdout, listed.stderr));
    assert!(
        listed.status.success(),
        "opencode mcp list failed ({}):\n{listing}\n{}",
        listed.status,
        context()
    );
    assert!(
        listing
            .lines()
            .any(|l| l.contains("ken") && l.contains("connected") && !l.contains("failed")),
        "opencode mcp list reports ken connected:\n{listing}\n{}",
        context()
    );

    // `opencode run`: the model calls ken's search tool, and ken's result comes back to it.
    let run = run_bounded(
        opencode(
            &repo,
            &home,
            &[
                "run",
                "--model",
                &format!("fake/{MODEL}"),
                "Where is the quarterly ledger reconciled? Use ken's codebase search.",
            ],
        ),
        Duration::from_secs(60),
        "opencode run",
        context,
    );
    let run_out = plain(&run.stdout);
    assert!(
        run.status.success(),
        "opencode run failed ({}):\nstdout: {run_out}\nstderr: {}\n{}",
        run.status,
        run.stderr,
        context()
    );
    let requests = llm.requests();
    let asked = requests
        .iter()
        .position(|r| r["reply"] == "tool")
        .unwrap_or_else(|| panic!("no request offered ken's search tool\n{}", context()));
    let tool = offered_tools(&requests[asked])
        .into_iter()
        .find(|name| name.ends_with("codebase_search"))
        .unwrap();
    assert!(tool.starts_with("ken"), "the tool is ken's (named {tool})");
    let answered = requests[asked + 1..]
        .iter()
        .find(|r| !tool_results(r).is_empty())
        .unwrap_or_else(|| panic!("no later request carried the tool result\n{}", context()));
    let result = tool_results(answered).join("\n");
    assert!(
        result.contains("src/billing/ledger.py") && result.contains("reconcile_quarterly_ledger"),
        "ken's result, as the model received it, names the function and its file:\n{result}\n{}",
        context()
    );
    let final_text = answered["text"].as_str().unwrap();
    assert!(final_text.starts_with("KEN-RESULT: "), "{final_text}");
    let first_line = final_text.lines().next().unwrap().trim();
    assert!(
        run_out.contains(first_line),
        "opencode run printed the model's final answer ({first_line:?}):\nstdout: {run_out}\nstderr: {}",
        run.stderr
    );

    // ken's MCP prompts are OpenCode commands (`/ken:search`, ...), as `opencode serve` lists them.
    let commands = opencode_commands(&repo, &home, &context);
    let mcp_commands: Vec<&str> = commands
        .iter()
        .filter(|c| c["source"] == "mcp")
        .filter_map(|c| c["name"].as_str())
        .collect();
    for prompt in ["search", "find", "call-graph", "index", "status"] {
        let name = format!("ken:{prompt}");
        assert!(
            mcp_commands.contains(&name.as_str()),
            "ken's prompt {prompt:?} is the OpenCode command {name:?}; MCP commands listed: {mcp_commands:?}\n{}",
            opencode_logs(&home)
        );
    }
}

/// The commands of `opencode serve` (GET /command), once its MCP servers
/// have been asked for their prompts (polled for up to 20 s).
fn opencode_commands(repo: &Path, home: &Path, context: &dyn Fn() -> String) -> Vec<Value> {
    use std::os::unix::process::CommandExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let port_arg = port.to_string();
    let mut cmd = opencode(repo, home, &["serve", "--hostname", "127.0.0.1", "--port", &port_arg]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("opencode serve starts");
    let stdout = Capture::of(child.stdout.take().unwrap());
    let stderr = Capture::of(child.stderr.take().unwrap());
    let mut server = Guard(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = loop {
        let out = stdout.text();
        if let Some(at) = out.find("listening on http://") {
            let rest = &out[at + "listening on ".len()..];
            break rest
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches('/')
                .to_string();
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "opencode serve exited ({status}):\nstdout: {out}\nstderr: {}\n{}",
                stderr.text(),
                context()
            );
        }
        assert!(
            Instant::now() < deadline,
            "opencode serve did not listen within 30 s:\nstdout: {out}\nstderr: {}\n{}",
            stderr.text(),
            context()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // reqwest is built without a TLS provider of its own (as in src/http.rs).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = Vec::new();
    while Instant::now() < deadline {
        let listed = client
            .get(format!("{url}/command"))
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json::<Value>());
        if let Ok(Value::Array(commands)) = listed {
            let has_mcp = commands.iter().any(|c| c["source"] == "mcp");
            last = commands;
            if has_mcp {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    kill_group(&mut server.0);
    assert!(
        !last.is_empty(),
        "GET {url}/command answered no command list\nstderr: {}",
        stderr.finish()
    );
    last
}

#[test]
fn claude_code_reports_ken_connected_from_the_projects_mcp_json() {
    client_bin("claude");
    let tmp = tempfile::tempdir().unwrap();
    let tmp_path = tmp.path().canonicalize().unwrap();
    let repo = tmp_path.join("repo");
    let home = tmp_path.join("home");
    indexed_repo(&repo);
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        repo.join(".mcp.json"),
        serde_json::to_string_pretty(&json!({"mcpServers": {"ken": {"command": ken_bin(), "args": ["serve"]}}}))
            .unwrap(),
    )
    .unwrap();
    // The project is trusted and its .mcp.json server approved, as the
    // trust dialog and the approval prompt would record them.
    std::fs::write(
        home.join(".claude.json"),
        serde_json::to_string_pretty(&json!({
            "hasCompletedOnboarding": true,
            "projects": {repo.to_str().unwrap(): {
                "hasTrustDialogAccepted": true,
                "enabledMcpjsonServers": ["ken"],
                "disabledMcpjsonServers": []
            }}
        }))
        .unwrap(),
    )
    .unwrap();
    let mut cmd = Command::new(client_bin("claude"));
    isolated(&mut cmd, &home);
    cmd.args(["mcp", "list"])
        .current_dir(&repo)
        // No telemetry, error reports, update checks or other calls home;
        // `mcp list` needs no API key, and any API call would go nowhere.
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9");
    let listed = run_bounded(cmd, Duration::from_secs(45), "claude mcp list", String::new);
    let listing = plain(&format!("{}\n{}", listed.stdout, listed.stderr));
    assert!(
        listed.status.success(),
        "claude mcp list failed ({}):\n{listing}",
        listed.status
    );
    let line = listing
        .lines()
        .find(|l| l.trim_start().starts_with("ken:"))
        .unwrap_or_else(|| panic!("claude mcp list lists ken:\n{listing}"));
    assert!(
        line.contains("Connected") && line.contains(ken_bin().to_str().unwrap()),
        "claude mcp list reports ken, started from .mcp.json, connected:\n{listing}"
    );
}
