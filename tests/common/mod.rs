//! Helpers for tests that drive the real `ken` binary on real folders.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub fn ken_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ken"))
}

/// Runs `ken ARGS` in `dir`, returning the output (whatever the exit status).
pub fn ken(dir: &Path, args: &[&str]) -> Output {
    ken_env(dir, args, &[])
}

/// [`ken`] with these environment variables set too.
pub fn ken_env(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new(ken_bin());
    cmd.args(args)
        .current_dir(dir)
        .env_remove("KEN_INDEX_DIR")
        .env_remove("KEN_GRAMMARS_DIR")
        // Tests count what they embed; the per-user vector cache would hide that.
        .env("KEN_SHARED_CACHE", "0")
        .env("NO_COLOR", "1");
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd.output().expect("ken runs")
}

/// Runs `ken ARGS` in `dir` and fails the test unless it exits 0.
pub fn ken_ok(dir: &Path, args: &[&str]) -> String {
    let out = ken(dir, args);
    assert!(
        out.status.success(),
        "ken {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

pub fn ken_json(dir: &Path, args: &[&str]) -> Value {
    let out = ken_ok(dir, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ken {args:?} printed invalid JSON ({e}): {out}"))
}

/// `ken search --json -k K QUERY` results.
pub fn search(dir: &Path, query: &str, k: usize) -> Vec<Value> {
    search_with(dir, &[], query, k)
}

/// The same with `--explain`: each result says how its score was made.
pub fn search_explained(dir: &Path, query: &str, k: usize) -> Vec<Value> {
    search_with(dir, &["--explain"], query, k)
}

fn search_with(dir: &Path, flags: &[&str], query: &str, k: usize) -> Vec<Value> {
    let k = k.to_string();
    let mut args = vec!["search", "--json"];
    args.extend_from_slice(flags);
    args.extend(["-k", &k, query]);
    ken_json(dir, &args).as_array().expect("a JSON list").clone()
}

/// `ken search --json --mode MODE -k K QUERY`: each result's path and score.
pub fn paths_and_scores(dir: &Path, mode: &str, k: usize, query: &str) -> Vec<(String, f64)> {
    let k = k.to_string();
    let hits = ken_json(dir, &["search", "--json", "--mode", mode, "-k", &k, query]);
    hits.as_array()
        .expect("a JSON list")
        .iter()
        .map(|h| (h["path"].as_str().unwrap().to_string(), h["score"].as_f64().unwrap()))
        .collect()
}

/// Copies a fixture folder, without its `edges.txt` (the expected graph).
pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "edges.txt" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

pub fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `count` small unrelated Python files under `dir`, so that a test's own
/// words are rare ones (BM25 gives words found in most chunks no weight).
pub fn write_unrelated(root: &Path, dir: &str, count: usize) {
    for n in 0..count {
        write(
            root,
            &format!("{dir}/util_{n}.py"),
            &format!("def helper_{n}(items):\n    return sorted(items)\n"),
        );
    }
}

pub fn git(dir: &Path, args: &[&str]) {
    git_with_env(dir, args, &[]);
}

/// [`git`] with environment variables set (`GIT_COMMITTER_DATE` for a fixed commit id).
pub fn git_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn paths(results: &[Value]) -> Vec<String> {
    results
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect()
}

/// A small multi-language project.
pub fn sample_project(root: &Path) {
    write(
        root,
        "src/auth/jwt.py",
        r#"import time


class TokenValidator:
    """Validates JSON web tokens."""

    def __init__(self, secret):
        self.secret = secret

    def check_expiry(self, claims):
        """Reject tokens whose exp claim lies in the past."""
        return claims["exp"] > time.time()


def parse_config(path):
    with open(path) as f:
        return f.read()
"#,
    );
    write(
        root,
        "src/server/main.go",
        r#"package main

import "fmt"

// Server answers HTTP requests.
type Server struct {
	port int
}

// Start listens on the configured port.
func (s *Server) Start() error {
	fmt.Println("listening", s.port)
	return nil
}

func main() {
	cfg := parseConfig("app.toml")
	_ = cfg
}
"#,
    );
    write(
        root,
        "src/lib.rs",
        r#"//! Library root.

/// Configuration loaded from disk.
pub struct AppConfig {
    pub name: String,
}

impl AppConfig {
    /// Reads the configuration file and parses it.
    pub fn load(path: &str) -> std::io::Result<AppConfig> {
        let name = std::fs::read_to_string(path)?;
        Ok(AppConfig { name })
    }
}

pub fn render_template(name: &str) -> String {
    format!("hello {name}")
}
"#,
    );
    write(
        root,
        "web/app.ts",
        r#"import { api } from "./api";

export interface User {
  id: number;
  name: string;
}

export class UserStore {
  private users: User[] = [];

  add(user: User): void {
    this.users.push(user);
  }

  findByName(name: string): User | undefined {
    return this.users.find((u) => u.name === name);
  }
}

export const fetchUsers = async () => api.get("/users");
"#,
    );
    write(
        root,
        "docs/guide.md",
        "# Guide\n\nHow to deploy.\n\n## Install\n\nRun the installer.\n\n## Configure\n\nEdit app.toml.\n",
    );
    write(root, "notes.txt", "Plain text notes about the deployment pipeline.\n");
}

/// `score` = `fused` × every factor, as `--explain` lists them (scores are rounded to 1e-6).
pub fn assert_explained(hit: &Value) {
    let e = &hit["explain"];
    let product: f64 = e["factors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["factor"].as_f64().unwrap())
        .product();
    let score = hit["score"].as_f64().unwrap();
    assert!((e["fused"].as_f64().unwrap() * product - score).abs() < 1e-5, "{hit}");
    let lexical = e["lexical"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&lexical), "{hit}");
}

/// Runs a Python MCP client script of `tests/` (the official SDK) with
/// `args` and `env`, asserts it succeeded and returns what it printed.
pub fn python_client(script: &str, args: &[&Path], env: &[(&str, String)]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(script);
    let out = Command::new("python3")
        .arg(&script)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// [`python_client`] for a script that says whether it passed every check it makes.
pub fn run_python_client(script: &str, args: &[&Path]) {
    let stdout = python_client(script, args, &[]);
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

/// `bin ARGS` started in `dir` with output discarded and the vector cache
/// off, for tests that kill it midway.
pub fn spawn_silent(bin: &Path, dir: &Path, args: &[&str]) -> std::process::Child {
    Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env("KEN_SHARED_CACHE", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("ken runs")
}

/// A small payments service: retries with backoff, a ledger, refunds, plus
/// unrelated helpers so that its own words are rare. It knows nothing of
/// OAuth, Kubernetes or ingress.
pub fn payments_project(root: &Path) {
    write(
        root,
        "payments/retry.py",
        "def retry_failed_payment(payment, attempts=5):\n    \"\"\"Retry a declined card payment with exponential backoff.\"\"\"\n    delay = 1.0\n    for attempt in range(attempts):\n        if charge_card(payment):\n            return True\n        sleep_backoff(delay)\n        delay *= 2\n    return False\n",
    );
    write(
        root,
        "payments/ledger.py",
        "def frobnicate_ledger_totals(entries):\n    \"\"\"Sum the ledger entries per currency.\"\"\"\n    totals = {}\n    for e in entries:\n        totals[e.currency] = totals.get(e.currency, 0) + e.amount\n    return totals\n",
    );
    write(
        root,
        "payments/refund.py",
        "def refund_partial_order(order, amount):\n    \"\"\"Refund part of an order to the customer's card.\"\"\"\n    if amount > order.paid:\n        raise ValueError('refund exceeds payment')\n    return issue_card_credit(order.card, amount)\n",
    );
    write_unrelated(root, "payments/util", 20);
}
