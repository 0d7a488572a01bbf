//! `ken serve` attaches to one shared service per repository: real clients
//! (the Python SDK, raw JSON-RPC), real git repositories, real processes.
//! Each test gives its services a private runtime folder (`XDG_RUNTIME_DIR`).

mod common;

use std::io::{BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::*;

/// A repository on `main` with a `feature` branch that adds `feature_only.py`.
fn two_branch_repo(root: &Path) {
    write(
        root,
        "billing.py",
        "def compute_invoice_total(lines):\n    return sum(l.amount for l in lines)\n",
    );
    write_unrelated(root, "pkg", 20);
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "."]);
    git(root, &["commit", "-qm", "init"]);
    git(root, &["checkout", "-qb", "feature"]);
    write(
        root,
        "feature_only.py",
        "def reconcile_ledger_feature_branch(ledger):\n    return ledger.balance()\n",
    );
    git(root, &["add", "."]);
    git(root, &["commit", "-qm", "feature"]);
    git(root, &["checkout", "-q", "main"]);
}

/// The environment of every `ken serve` of a test: services in `run`, idle for `idle` seconds.
fn service_env(run: &Path, idle: u64) -> Vec<(&'static str, String)> {
    vec![
        ("XDG_RUNTIME_DIR", run.display().to_string()),
        ("KEN_SERVICE_IDLE_SECS", idle.to_string()),
        ("KEN_CONFIG", "/nonexistent/ken-test-settings.toml".to_string()),
        ("KEN_SHARED_CACHE", "0".to_string()),
        ("NO_COLOR", "1".to_string()),
    ]
}

/// A test's temp folder with a repository in `repo` and a runtime folder `run`.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&run).unwrap();
    let root = root.canonicalize().unwrap();
    (tmp, root, run)
}

/// Live `ken serve --service` processes serving `root`.
fn service_pids(root: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let (Ok(cmdline), Ok(stat)) = (
            std::fs::read(entry.path().join("cmdline")),
            std::fs::read_to_string(entry.path().join("stat")),
        ) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if !zombie && args.contains(&&b"--service"[..]) && args.contains(&root.as_os_str().as_encoded_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

fn wait_until(what: &str, seconds: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {seconds} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The service sockets in the runtime folder.
fn sockets(run: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(run.join("ken"))
        .map(|dir| {
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "sock"))
                .collect()
        })
        .unwrap_or_default()
}

/// A `ken serve` spoken to in raw JSON-RPC lines.
struct Client {
    child: Child,
    lines: Receiver<Value>,
    next_id: u64,
}

impl Client {
    fn start(root: &Path, env: &[(&str, String)], extra: &[&str]) -> Client {
        let mut child = Command::new(ken_bin())
            .args(["--root", root.to_str().unwrap(), "serve"])
            .args(extra)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let mut client = Client {
            child,
            lines,
            next_id: 1,
        };
        let init = client.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        );
        assert!(init["result"]["serverInfo"]["name"] == "ken", "{init}");
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self.lines.recv_timeout(left).expect("ken serve answers in time");
            if message["id"] == id {
                return message;
            }
        }
    }

    fn tool(&mut self, name: &str, args: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": name, "arguments": args}));
        assert_eq!(answer["result"]["isError"], false, "{name}: {answer}");
        answer["result"]["structuredContent"].clone()
    }

    fn tool_names(&mut self) -> Vec<String> {
        let listed = self.request("tools/list", json!({}));
        let tools = listed["result"]["tools"].as_array().unwrap();
        tools.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    }

    /// The service's pid and sessions, from index_status.
    fn service(&mut self) -> (u64, u64) {
        let status = self.tool("index_status", json!({}));
        let service = &status["service"];
        (service["pid"].as_u64().unwrap(), service["sessions"].as_u64().unwrap())
    }

    /// Closes stdin; the exit status of `ken serve`.
    fn close(mut self) -> std::process::ExitStatus {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "ken serve exits when stdin closes");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Lines of a log that report a lock as a problem (warnings and errors).
fn lock_troubles(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| (l.contains("WARN") || l.contains("ERROR")) && l.to_lowercase().contains("lock"))
        .map(String::from)
        .collect()
}

#[test]
fn three_clients_share_one_service_through_an_edit_and_a_branch_switch() {
    ken::embed::model::fetch(&ken::embed::model::MINILM).expect("the built-in model (run `ken model fetch`)");
    let (_tmp, root, run) = setup();
    two_branch_repo(&root);
    ken_ok(&root, &["index", "-q"]);
    let stdout = python_client("service_clients.py", &[&ken_bin(), &root], &service_env(&run, 1));
    let found: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let results = found["results"].as_object().unwrap();
    assert_eq!(results.len(), 3, "{found}");
    let pid = results["0"]["first_status"]["service"]["pid"].clone();
    assert!(pid.is_u64(), "index_status names the service: {found}");
    for (n, client) in results {
        assert_eq!(client["first_status"]["service"]["pid"], pid, "client {n}: {found}");
        assert_eq!(client["last_status"]["service"]["pid"], pid, "client {n}: {found}");
        assert_eq!(
            client["last_status"]["service"]["sessions"], 3,
            "client {n}: one service, three sessions: {found}"
        );
        // One process watches and embeds this repository.
        assert_eq!(client["services"], json!([pid]), "client {n}: {found}");
    }
    assert_eq!(found["lock_answers"], json!([]), "{found}");
    let service_log = std::fs::read_dir(run.join("ken"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .expect("the service's log");
    for log in [service_log, root.join(".ken/ken.log")] {
        assert_eq!(lock_troubles(&log), Vec::<String>::new(), "{}", log.display());
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !text.contains("another process is embedding"),
            "one embedder: {}",
            log.display()
        );
    }
    // Idle for a second after the last session: the service exits and takes its socket with it.
    wait_until("the idle service exits", 30, || service_pids(&root).is_empty());
    assert_eq!(sockets(&run), Vec::<PathBuf>::new());
}

#[test]
fn a_killed_service_and_a_stale_socket_are_recovered_by_the_next_client() {
    let (_tmp, root, run) = setup();
    two_branch_repo(&root);
    ken_ok(&root, &["index", "--no-embed", "-q"]);
    let env = service_env(&run, 0);
    let mut first = Client::start(&root, &env, &[]);
    let (killed, _) = first.service();
    let socket = sockets(&run).pop().expect("the service's socket");
    let status = Command::new("kill").args(["-9", &killed.to_string()]).status().unwrap();
    assert!(status.success());
    // The client of a crashed service is told so, not left hanging.
    let deadline = Instant::now() + Duration::from_secs(20);
    let exited = loop {
        if let Some(status) = first.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "ken serve ends when its service dies");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!exited.success());
    assert!(socket.exists(), "SIGKILL leaves the socket behind");

    let mut second = Client::start(&root, &env, &[]);
    let (recovered, sessions) = second.service();
    assert_ne!(recovered, killed);
    assert_eq!(sessions, 1);
    let found = second.tool("codebase_search", json!({"query": "compute_invoice_total"}));
    assert_eq!(found["results"][0]["path"], "billing.py", "{found}");
    assert!(second.close().success());
    wait_until("the idle service exits", 30, || service_pids(&root).is_empty());

    // A socket file nobody listens on (a service killed mid-exit, a reboot).
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let mut third = Client::start(&root, &env, &[]);
    let (fresh, _) = third.service();
    assert!(fresh != killed && fresh != recovered);
    assert_eq!(service_pids(&root), [fresh as u32]);
    assert!(third.close().success());
}

#[test]
fn sessions_keep_their_own_tools_and_other_settings_get_their_own_service() {
    let (_tmp, root, run) = setup();
    two_branch_repo(&root);
    ken_ok(&root, &["index", "--no-embed", "-q"]);
    let env = service_env(&run, 0);
    let mut all = Client::start(&root, &env, &["--tools", "all"]);
    let mut search = Client::start(&root, &env, &["--tools", "search"]);
    assert_eq!(all.tool_names().len(), 17);
    let few = search.tool_names();
    assert!(few.len() == 4 && !few.contains(&"index_status".to_string()), "{few:?}");
    let (pid, sessions) = all.service();
    assert_eq!(sessions, 2, "two clients, one service");
    let status = ken_env(&root, &["status", "--json"], &env);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        status["service"],
        json!({"pid": pid, "sessions": 2}),
        "ken status says who serves"
    );
    // A setting that changes answers gets a service of its own, never the other's.
    let mut rrf_env = env.clone();
    rrf_env.push(("KEN_FUSION", "rrf".to_string()));
    let mut rrf = Client::start(&root, &rrf_env, &["--tools", "all"]);
    let (rrf_pid, rrf_sessions) = rrf.service();
    assert!(rrf_pid != pid && rrf_sessions == 1);
    let mut pids = service_pids(&root);
    pids.sort();
    let mut expected = vec![pid as u32, rrf_pid as u32];
    expected.sort();
    assert_eq!(pids, expected);
    // --no-service serves in its own process, as before.
    let mut alone = Client::start(&root, &env, &["--no-service", "--tools", "all"]);
    let status = alone.tool("index_status", json!({}));
    assert!(status.get("service").is_none(), "{status}");
    for client in [all, search, rrf, alone] {
        assert!(client.close().success());
    }
    wait_until("idle services exit", 30, || service_pids(&root).is_empty());
}

#[test]
fn the_socket_and_its_folder_are_owner_only_and_an_open_folder_is_refused() {
    let (_tmp, root, run) = setup();
    two_branch_repo(&root);
    ken_ok(&root, &["index", "--no-embed", "-q"]);
    let env = service_env(&run, 0);
    let client = Client::start(&root, &env, &[]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&run.join("ken")), 0o700);
    let socket = sockets(&run).pop().unwrap();
    assert_eq!(mode(&socket), 0o600);
    assert!(client.close().success());
    wait_until("the idle service exits", 30, || service_pids(&root).is_empty());

    std::fs::set_permissions(run.join("ken"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = Command::new(ken_bin())
        .args(["--root", root.to_str().unwrap(), "serve"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "stdout carries JSON-RPC only");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("chmod 700"), "{said}");
    assert!(service_pids(&root).is_empty(), "no service in an open folder");
}
