//! `ken bench watch`: freshness under a running `ken watch`, on a generated
//! git repository: edit → searchable latency, a branch switch of 100
//! differing files → consistent results, and the watcher's CPU at idle.
//! Baseline in the same run: a plain `ken index` that finds nothing changed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::bench::percentile;
use crate::index::{self, IndexOptions};
use crate::search::{SearchMode, SearchRequest, Searcher};
use crate::store;

pub struct WatchBenchOptions {
    /// Files of the generated repository.
    pub files: usize,
    pub edits: usize,
    /// Files that differ between the two branches.
    pub differing: usize,
    pub idle_seconds: u64,
    pub debounce_ms: u64,
    /// Let the watcher embed (the switch then also counts vectors computed).
    pub embed: bool,
}

#[derive(Debug, Serialize)]
pub struct WatchBench {
    pub files: usize,
    pub debounce_ms: u64,
    pub cold_index_seconds: f64,
    /// Baseline: `ken index` finding nothing changed (walk + stat of every file).
    pub no_change_index_seconds: f64,
    /// Edit (write of one file) → the new text is found by a search.
    pub edit_to_searchable_ms: Distribution,
    /// `git checkout` of a branch with `differing` files changed → every
    /// search sees exactly that branch (the checkout's own time included).
    pub switch_seconds: f64,
    pub switch_back_seconds: f64,
    pub git_checkout_seconds: f64,
    pub switch_vs_no_change_index: f64,
    /// Watcher updates the two switches caused (one each is the goal).
    pub switch_updates: u64,
    /// Vectors added by switching back to a branch seen before (0 is the goal).
    pub embeddings_added_on_return: i64,
    pub idle_seconds: u64,
    /// CPU time of the watcher process during the idle period.
    pub idle_cpu_seconds: f64,
    pub idle_cpu_share: f64,
    pub backend: String,
}

#[derive(Debug, Serialize)]
pub struct Distribution {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
}

impl Distribution {
    fn of(mut v: Vec<f64>) -> Distribution {
        Distribution {
            n: v.len(),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            p50: percentile(&mut v, 0.5),
            p90: percentile(&mut v, 0.9),
            max: v.iter().copied().fold(0.0, f64::max),
        }
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("git")
        .args(["-c", "user.email=bench@example.com", "-c", "user.name=bench"])
        .args(args)
        .current_dir(dir)
        .output()
        .context("running git")?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn source(i: usize, variant: &str) -> String {
    format!("def function_{i}_{variant}(x):\n    \"\"\"Step {i} of the pipeline.\"\"\"\n    return x * {i}\n")
}

/// A running `ken watch --json` with its event lines.
struct WatchProcess {
    child: Child,
    events: Arc<Mutex<Vec<Value>>>,
}

impl WatchProcess {
    fn wait_for(&self, timeout: Duration, pred: impl Fn(&[Value]) -> bool) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if pred(&self.events.lock().unwrap_or_else(|e| e.into_inner())) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("the watcher did not report in time")
    }

    fn updates(&self) -> u64 {
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.iter().filter(|v| v["event"] == "update").count() as u64
    }

    fn cpu_seconds(&self) -> Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Ok(ticks / hz)
    }
}

impl Drop for WatchProcess {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

/// Searches until `pred` holds for the symbols found (or 30 s pass).
fn until(root: &Path, query: &str, pred: impl Fn(&[String]) -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut req = SearchRequest::new(query);
    req.mode = SearchMode::Lexical;
    req.limit = 5;
    while Instant::now() < deadline {
        if let Ok(searcher) = Searcher::open(root, &store::index_dir_for(root)) {
            let symbols: Vec<String> = searcher.search(&req)?.into_iter().filter_map(|h| h.symbol).collect();
            if pred(&symbols) {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("`{query}` did not reach the expected results in 30 s")
}

pub fn run(opts: &WatchBenchOptions) -> Result<WatchBench> {
    let tmp = std::env::temp_dir().join(format!("ken-bench-watch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let result = run_in(&tmp, opts);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

/// A generated repository in `root`: `opts.files` files on `main`, the
/// first `opts.differing` of them changed on `other`.
fn make_repository(root: &Path, opts: &WatchBenchOptions) -> Result<()> {
    for i in 0..opts.files {
        let p = root.join(path_of(i));
        std::fs::create_dir_all(p.parent().context("a parent")?)?;
        std::fs::write(&p, source(i, "main"))?;
    }
    git(root, &["init", "-q", "-b", "main"])?;
    git(root, &["add", "."])?;
    git(root, &["commit", "-qm", "main"])?;
    git(root, &["checkout", "-qb", "other"])?;
    for i in 0..opts.differing.min(opts.files) {
        std::fs::write(root.join(path_of(i)), source(i, "other"))?;
    }
    git(root, &["commit", "-qam", "other"])?;
    git(root, &["checkout", "-q", "main"])?;
    Ok(())
}

/// The generated file number `i`.
fn path_of(i: usize) -> PathBuf {
    PathBuf::from(format!("d{}/m{i}.py", i % 500))
}

/// `ken watch` on `root`, its JSON events collected as they come.
fn start_watcher(root: &Path, opts: &WatchBenchOptions) -> Result<WatchProcess> {
    eprintln!("ken bench watch: starting the watcher");
    let exe = std::env::current_exe().context("the ken executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(["watch", "--json", "--debounce-ms", &opts.debounce_ms.to_string()])
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if !opts.embed {
        cmd.arg("--no-embed");
    }
    let mut child = cmd.spawn().context("starting ken watch")?;
    let events = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().context("the watcher's stderr")?;
    let sink = events.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(v);
            }
        }
    });
    Ok(WatchProcess { child, events })
}

fn run_in(root: &Path, opts: &WatchBenchOptions) -> Result<WatchBench> {
    eprintln!("ken bench watch: generating {} files in {}", opts.files, root.display());
    make_repository(root, opts)?;
    let index_dir = store::index_dir_for(root);
    let started = Instant::now();
    index::index(root, &index_dir, &IndexOptions::default())?;
    let cold_index_seconds = started.elapsed().as_secs_f64();
    // Age the files past the "modified within 2 s" window, so the baseline reads nothing.
    std::thread::sleep(Duration::from_millis(2100));
    index::index(root, &index_dir, &IndexOptions::default())?;
    let started = Instant::now();
    index::index(root, &index_dir, &IndexOptions::default())?;
    let no_change_index_seconds = started.elapsed().as_secs_f64();

    let watch = start_watcher(root, opts)?;
    watch.wait_for(Duration::from_secs(300), |e| e.iter().any(|v| v["event"] == "ready"))?;
    if opts.embed {
        watch.wait_for(Duration::from_secs(3600), |e| {
            e.iter().any(|v| v["event"] == "embedded" && v["finished"] == true)
        })?;
    }
    let backend = {
        let events = watch.events.lock().unwrap_or_else(|e| e.into_inner());
        let ready = events.iter().find(|v| v["event"] == "ready");
        ready.map_or("?".into(), |v| v["backend"].as_str().unwrap_or("?").to_string())
    };

    eprintln!("ken bench watch: {} edits", opts.edits);
    let mut latencies = Vec::new();
    for e in 0..opts.edits {
        let i = (e * 7919) % opts.files;
        let symbol = format!("edited_marker_{e}_fn");
        let text = format!("def {symbol}(x):\n    return x\n");
        let started = Instant::now();
        std::fs::write(root.join(path_of(i)), text)?;
        until(root, &symbol, |s| s.contains(&symbol))?;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(150));
    }
    // Commit the edits so the checkouts below are clean.
    git(root, &["commit", "-qam", "edits"])?;
    std::thread::sleep(Duration::from_millis(500));

    let embeddings = |root: &Path| -> Result<i64> {
        let s = store::Store::open_for_read(&store::index_dir_for(root))?;
        Ok(s.all_vector_count()? as i64)
    };
    let switch = |branch: &str, present: &str, absent: &str| -> Result<(f64, f64)> {
        let started = Instant::now();
        git(root, &["checkout", "-q", branch])?;
        let git_seconds = started.elapsed().as_secs_f64();
        until(root, present, |s| s.iter().any(|x| x == present))?;
        until(root, absent, |s| !s.iter().any(|x| x == absent))?;
        Ok((started.elapsed().as_secs_f64(), git_seconds))
    };
    eprintln!("ken bench watch: branch switches");
    let updates_before = watch.updates();
    let last = opts.differing.min(opts.files) - 1;
    let (other_present, main_present) = (format!("function_{last}_other"), format!("function_{last}_main"));
    let (switch_seconds, git_checkout_seconds) = switch("other", &other_present, &main_present)?;
    if opts.embed {
        std::thread::sleep(Duration::from_secs(2));
        watch.wait_for(Duration::from_secs(600), |e| {
            e.iter()
                .rev()
                .find(|v| v["event"] == "embedded")
                .is_some_and(|v| v["finished"] == true)
        })?;
    }
    let vectors_before_return = embeddings(root)?;
    let (switch_back_seconds, _) = switch("main", &main_present, &other_present)?;
    std::thread::sleep(Duration::from_millis(1500));
    let embeddings_added_on_return = embeddings(root)? - vectors_before_return;
    let switch_updates = watch.updates() - updates_before;

    eprintln!("ken bench watch: {} s idle", opts.idle_seconds);
    std::thread::sleep(Duration::from_secs(1));
    let cpu_before = watch.cpu_seconds()?;
    std::thread::sleep(Duration::from_secs(opts.idle_seconds));
    let idle_cpu_seconds = watch.cpu_seconds()? - cpu_before;

    Ok(WatchBench {
        files: opts.files,
        debounce_ms: opts.debounce_ms,
        cold_index_seconds,
        no_change_index_seconds,
        edit_to_searchable_ms: Distribution::of(latencies),
        switch_seconds,
        switch_back_seconds,
        git_checkout_seconds,
        switch_vs_no_change_index: switch_seconds / no_change_index_seconds.max(1e-9),
        switch_updates,
        embeddings_added_on_return,
        idle_seconds: opts.idle_seconds,
        idle_cpu_seconds,
        idle_cpu_share: idle_cpu_seconds / opts.idle_seconds.max(1) as f64,
        backend,
    })
}
