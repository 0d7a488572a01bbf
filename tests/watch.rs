//! `ken watch` on real folders and git repositories, driven as a real
//! process; concurrent writers and readers. Waits poll with deadlines (the
//! machine may be loaded), never fixed sleeps for correctness.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A running `ken watch --json`, its stderr event lines collected.
struct Watch {
    child: Child,
    events: Arc<Mutex<Vec<Value>>>,
}

impl Watch {
    /// Starts `ken watch`, not waiting for it to be ready.
    fn spawn(root: &Path, extra: &[&str]) -> Watch {
        let mut child = Command::new(ken_bin())
            .args(["watch", "--json", "--no-embed"])
            .args(extra)
            .current_dir(root)
            .env("KEN_SHARED_CACHE", "0")
            .env_remove("KEN_INDEX_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ken watch starts");
        let events = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(v);
                } else {
                    eprintln!("ken watch: {line}");
                }
            }
        });
        Watch { child, events }
    }

    fn start(root: &Path, extra: &[&str]) -> Watch {
        let w = Watch::spawn(root, extra);
        w.wait_for("the watcher to be ready", |e| e.iter().any(|v| v["event"] == "ready"));
        w
    }

    fn is_ready(&self) -> bool {
        self.events().iter().any(|v| v["event"] == "ready")
    }

    fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }

    fn updates(&self) -> Vec<Value> {
        self.events().into_iter().filter(|v| v["event"] == "update").collect()
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&[Value]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if pred(&self.events()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("timed out waiting for {what}; events: {:?}", self.events());
    }

    /// SIGINT, and the clean exit it must cause.
    fn interrupt(mut self) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "ken watch exits 0 on SIGINT: {status}");
                break;
            }
            assert!(Instant::now() < deadline, "ken watch did not stop on SIGINT");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.wait_for("the stopped event", |e| e.iter().any(|v| v["event"] == "stopped"));
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `ken search` until `pred` holds for the results (or fails after a deadline).
fn eventually(root: &Path, query: &str, what: &str, pred: impl Fn(&[Value]) -> bool) -> Duration {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    loop {
        let out = ken(root, &["search", "--json", "--mode", "lexical", "-k", "5", query]);
        if out.status.success() {
            let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
            if pred(&hits) {
                return started.elapsed();
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn found_in(path: &'static str) -> impl Fn(&[Value]) -> bool {
    move |hits| hits.first().is_some_and(|h| h["path"] == path)
}

/// No result defines `symbol` (other results may share some of its words).
fn absent(symbol: &'static str) -> impl Fn(&[Value]) -> bool {
    move |hits| !hits.iter().any(|h| h["symbol"] == symbol)
}

#[test]
fn the_watcher_picks_up_create_modify_rename_and_delete_and_ignores_excluded_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Not a git repository: branch "none" (the empty key).
    write(root, "src/first.py", "def first_watched_fn():\n    return 1\n");
    write(root, ".gitignore", "ignored_dir/\n");
    let watch = Watch::start(root, &[]);
    assert_eq!(search(root, "first_watched_fn", 1)[0]["path"], "src/first.py");

    write(root, "src/created.py", "def created_later_fn():\n    return 2\n");
    eventually(
        root,
        "created_later_fn",
        "a created file is found",
        found_in("src/created.py"),
    );

    write(root, "src/created.py", "def modified_now_fn():\n    return 3\n");
    eventually(
        root,
        "modified_now_fn",
        "a modified file is found",
        found_in("src/created.py"),
    );
    eventually(
        root,
        "created_later_fn",
        "the old content is gone",
        absent("created_later_fn"),
    );

    std::fs::rename(root.join("src/created.py"), root.join("src/renamed.py")).unwrap();
    eventually(
        root,
        "modified_now_fn",
        "a renamed file is found",
        found_in("src/renamed.py"),
    );

    // A new folder with files in it (and a file in it afterwards: it is watched).
    write(root, "pkg/sub/deep.py", "def deep_new_folder_fn():\n    pass\n");
    eventually(
        root,
        "deep_new_folder_fn",
        "a new folder is indexed",
        found_in("pkg/sub/deep.py"),
    );
    write(root, "pkg/sub/later.py", "def later_in_new_folder_fn():\n    pass\n");
    eventually(
        root,
        "later_in_new_folder_fn",
        "a new folder is watched",
        found_in("pkg/sub/later.py"),
    );

    std::fs::remove_file(root.join("src/renamed.py")).unwrap();
    eventually(
        root,
        "modified_now_fn",
        "a deleted file is gone",
        absent("modified_now_fn"),
    );
    std::fs::remove_dir_all(root.join("pkg")).unwrap();
    eventually(
        root,
        "deep_new_folder_fn",
        "a deleted folder is gone",
        absent("deep_new_folder_fn"),
    );

    // Excluded and ignored folders cause no update; a later real change is seen alone.
    watch.wait_for("the update of the deletion", |e| e.iter().any(|v| v["removed"] == 2));
    let before = watch.updates().len();
    write(root, "target/debug/out.rs", "fn build_output_fn() {}\n");
    write(root, "node_modules/dep/index.js", "function vendoredDepFn() {}\n");
    write(root, "ignored_dir/x.py", "def ignored_fn():\n    pass\n");
    write(root, ".ken/junk.txt", "junk\n");
    write(root, "src/marker.py", "def marker_after_ignored_fn():\n    pass\n");
    eventually(
        root,
        "marker_after_ignored_fn",
        "the marker is found",
        found_in("src/marker.py"),
    );
    for symbol in ["build_output_fn", "vendoredDepFn", "ignored_fn"] {
        assert!(absent(symbol)(&search(root, symbol, 5)), "{symbol} is not indexed");
    }
    let after = watch.updates();
    assert_eq!(
        after.len(),
        before + 1,
        "only the marker made an update: {:?}",
        &after[before..]
    );
    assert_eq!(after.last().unwrap()["scope"], "paths", "{:?}", watch.events());

    let status = ken_json(root, &["status", "--json"]);
    assert_eq!(status["freshness"]["branch"], "", "{status}");
    assert!(status["freshness"]["watcher_pid"].is_u64(), "{status}");
    assert_eq!(status["freshness"]["pending_changes"], 0, "{status}");
    watch.interrupt();
    let status = ken_json(root, &["status", "--json"]);
    assert!(status["freshness"]["watcher_pid"].is_null(), "{status}");
}

#[test]
fn a_checkout_of_200_files_is_one_update_and_search_follows_the_branch() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    git(root, &["init", "-q"]);
    for i in 0..200 {
        write(
            root,
            &format!("m{}/f{i}.py", i % 10),
            &format!("def main_fn_{i}():\n    return {i}\n"),
        );
    }
    git(root, &["add", "."]);
    git(root, &["commit", "-qm", "main"]);
    git(root, &["checkout", "-qb", "feature"]);
    for i in 0..200 {
        write(
            root,
            &format!("m{}/f{i}.py", i % 10),
            &format!("def feature_fn_{i}():\n    return {i}\n"),
        );
    }
    git(root, &["commit", "-qam", "feature"]);
    git(root, &["checkout", "-q", "main"]);

    let watch = Watch::start(root, &[]);
    let before = watch.updates().len();
    // A reader during the switches: every answer is all main or all feature.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (root, stop) = (root.to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            let mut answers = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let out = ken(&root, &["search", "--json", "--mode", "lexical", "-k", "20", "return"]);
                if !out.status.success() {
                    continue;
                }
                let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
                let main = hits
                    .iter()
                    .filter(|h| h["symbol"].as_str().unwrap_or("").starts_with("main_"))
                    .count();
                assert!(main == 0 || main == hits.len(), "a search mixed the branches: {hits:?}");
                answers += 1;
            }
            answers
        })
    };
    git(root, &["checkout", "-q", "feature"]);
    eventually(
        root,
        "feature_fn_199",
        "the feature branch is searchable",
        found_in("m9/f199.py"),
    );
    // Late events of the same checkout must not make more updates.
    std::thread::sleep(Duration::from_millis(800));
    let updates = watch.updates();
    let new: Vec<&Value> = updates[before..].iter().collect();
    assert_eq!(new.len(), 1, "one update for the checkout: {new:?}");
    assert_eq!(new[0]["branch"], "feature");
    assert_eq!(new[0]["parsed"], 200, "{:?}", new[0]);
    assert!(search(root, "main_fn_7", 3).is_empty(), "no main code on feature");

    // Back: main's catalog is still there (searchable at once), nothing is
    // parsed again, and search never mixes the branches.
    git(root, &["checkout", "-q", "main"]);
    eventually(root, "main_fn_199", "main is searchable again", found_in("m9/f199.py"));
    assert!(search(root, "feature_fn_7", 3).is_empty(), "no feature code on main");
    watch.wait_for("the update of main", |e| {
        e.iter()
            .any(|v| v["event"] == "update" && v["branch"] == "main" && v["update"].as_u64() > Some(1))
    });
    let back = watch.updates();
    let last = back.last().unwrap();
    assert_eq!(last["parsed"], 0, "known contents are not parsed again: {last}");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(reader.join().unwrap() > 0, "the reader got answers");
    let hits = ken_json(root, &["search", "--json", "--freshness", "main_fn_3"]);
    assert_eq!(hits["index"]["branch"], "main", "{hits}");
    assert_eq!(hits["index"]["indexed_branch"], "main", "{hits}");
    assert_eq!(hits["results"][0]["path"], "m3/f3.py", "{hits}");
    watch.interrupt();
}

/// A repository of `n` small Python files for the concurrency tests.
fn many_files(root: &Path, n: usize) {
    for i in 0..n {
        write(
            root,
            &format!("pkg{}/mod_{i}.py", i % 30),
            &format!("def function_{i}(x):\n    \"\"\"Marker token{i}marker.\"\"\"\n    return x + {i}\n"),
        );
    }
}

#[test]
fn an_edit_during_the_first_catch_up_is_not_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    git(root, &["init", "-q"]);
    many_files(root, 3000);
    // The largest file is read first: edits to it during the run's other
    // files land after it was read, before the run ends.
    let big: String = (0..400)
        .map(|i| format!("def filler_{i}():\n    return {i}\n"))
        .collect();
    write(root, "big.py", &big);
    let w = Watch::spawn(root, &[]);
    // Once the run has written big.py (it is in the first batch) and while
    // it goes on with the rest, edit big.py once: the run has read it already.
    while !w.is_ready() {
        let out = ken(root, &["search", "--json", "--mode", "lexical", "-k", "1", "filler_0"]);
        if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("big.py") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(root.join("big.py"))
        .unwrap();
    std::io::Write::write_all(&mut file, b"def appended_during_catch_up():\n    return 0\n").unwrap();
    drop(file);
    w.wait_for("the watcher to be ready", |e| e.iter().any(|v| v["event"] == "ready"));
    eventually(
        root,
        "appended_during_catch_up",
        "the edit made during the run is found",
        |hits| hits.first().is_some_and(|h| h["symbol"] == "appended_during_catch_up"),
    );
    drop(w);
}

#[test]
fn two_writers_cooperate_and_readers_search_while_a_writer_indexes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    many_files(root, 3000);
    let spawn_index = || {
        Command::new(ken_bin())
            .args(["index", "--no-embed", "--json"])
            .current_dir(root)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn_index(), spawn_index());
    // A reader meanwhile: every search either works or says there is no index yet.
    let mut searches = 0;
    let mut ok = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        let out = ken(root, &["search", "--json", "--mode", "lexical", "token2999marker"]);
        searches += 1;
        if out.status.success() {
            ok += 1;
            let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
            assert!(hits.len() <= 1, "{hits:?}");
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("no index") || err.contains("ken index"),
                "unexpected: {err}"
            );
        }
        if ok > 3 && searches > 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["files"], 3000, "{report}");
    }
    let health = ken_json(root, &["health", "--json"]);
    assert_eq!(health["healthy"], true, "{health}");
    assert_eq!(search(root, "token2999marker", 1)[0]["path"], "pkg29/mod_2999.py");

    // A watcher and a CLI index on the same repository: the CLI one waits its turn.
    let watch = Watch::start(root, &[]);
    write(root, "pkg0/new.py", "def cli_and_watcher_fn():\n    pass\n");
    let report = ken_json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(report["files"], 3001, "{report}");
    eventually(
        root,
        "cli_and_watcher_fn",
        "the new file is found",
        found_in("pkg0/new.py"),
    );
    watch.interrupt();
}

#[test]
fn the_polling_fallback_sees_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(root, "a.py", "def polled_first_fn():\n    pass\n");
    let watch = Watch::start(root, &["--poll"]);
    assert!(watch.events().iter().any(|v| v["backend"] == "poll"));
    write(root, "sub/b.py", "def polled_later_fn():\n    pass\n");
    eventually(
        root,
        "polled_later_fn",
        "a polled change is found",
        found_in("sub/b.py"),
    );
    watch.interrupt();
}

#[test]
fn broad_roots_are_refused_without_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(ken_bin())
        .args(["index", "--no-embed", "/"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow-broad-root"), "{err}");
    let out = Command::new(ken_bin())
        .args(["index", "--no-embed"])
        .current_dir(tmp.path())
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("home folder"));
}

#[test]
fn a_monorepo_subfolder_is_its_own_root() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    git(repo, &["init", "-q"]);
    write(
        repo,
        "services/api/handler.go",
        "package api\n\nfunc HandleApiRequest() {}\n",
    );
    write(repo, "services/web/app.ts", "export function renderWebPage() {}\n");
    git(repo, &["add", "."]);
    git(repo, &["commit", "-qm", "init"]);
    let sub = repo.join("services/api");
    let report = ken_json(&sub, &["index", "--no-embed", "--json"]);
    assert_eq!(report["files"], 1, "{report}");
    assert_eq!(report["branch"], "main", "{report}");
    assert_eq!(search(&sub, "HandleApiRequest", 1)[0]["path"], "handler.go");
    assert!(search(&sub, "renderWebPage", 3).is_empty());
}

#[test]
fn worktrees_and_detached_heads_are_detected() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    write(&repo, "lib.rs", "pub fn on_main_branch() {}\n");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "init"]);
    let wt = tmp.path().join("wt");
    git(&repo, &["worktree", "add", "-q", "-b", "side", wt.to_str().unwrap()]);
    write(&wt, "side.rs", "pub fn only_in_the_worktree() {}\n");
    let report = ken_json(&wt, &["index", "--no-embed", "--json"]);
    assert_eq!(report["branch"], "side", "{report}");
    assert_eq!(report["files"], 2, "{report}");
    let status = ken_json(&wt, &["status", "--json"]);
    assert_eq!(status["freshness"]["indexed_branch"], "side", "{status}");
    assert!(status["freshness"]["head_commit"].is_string(), "{status}");
    // The main checkout's index knows nothing of it.
    ken_ok(&repo, &["index", "--no-embed", "-q"]);
    assert!(search(&repo, "only_in_the_worktree", 3)
        .iter()
        .all(|h| h["symbol"] != "only_in_the_worktree"));
    // A detached HEAD has its own catalog key.
    git(&repo, &["checkout", "-q", "--detach"]);
    let report = ken_json(&repo, &["index", "--no-embed", "--json"]);
    assert_eq!(report["branch"], "@detached", "{report}");
    assert_eq!(report["parsed"], 0, "{report}");
}
