//! `ken bench serve`: a running MCP server's search latency, as its client
//! sees it, on an existing index.
//!
//! Each run starts `ken serve --no-service --no-watch` as a child and speaks
//! MCP to it over stdio. Cold starts: the time from the spawn to the first
//! `codebase_search` answer (hybrid asked; a server answers lexically while
//! its model loads), and to the first answer that used the model. Then, on
//! one server past its warm-up, each question once (new to it: a searcher
//! remembers its recent query vectors), with the server's CPU, page faults
//! and resident memory. The baseline, measured in the same run: the same
//! questions searched in this process, and with `--baseline-exe` another
//! build's server, measured first. The machines are shared and noisy, so the
//! ratios are what compare.
//!
//! With `--via-service`, each `ken serve --no-watch` attaches to the
//! repository's shared service, as a client's server does by default: one
//! session held open starts the service and keeps it warm, so the cold starts
//! measure a new session attaching to it, and the counters are the service's
//! (where the searches run). The service is left to close (idle 1 s) at the end.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::percentile;
use crate::search::{SearchMode, SearchRequest, Searcher};

/// How long one answer may take before the bench gives up on the server.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a cold server is asked again until its model answers.
const MODEL_POLL: Duration = Duration::from_millis(20);

pub struct ServeBenchOptions {
    pub root: PathBuf,
    pub index_dir: PathBuf,
    /// The questions asked (default: word queries made of the index's symbol names).
    pub questions: Option<Vec<String>>,
    /// Cold starts measured per executable.
    pub spawns: usize,
    /// Results asked per search (`limit`).
    pub limit: usize,
    /// The pause before each question, as an agent pauses between searches.
    pub pause: Duration,
    /// Another ken executable measured the same way, first.
    pub baseline: Option<PathBuf>,
    /// Through the repository's shared service, not `--no-service`.
    pub via_service: bool,
}

#[derive(Debug, Serialize)]
pub struct ServeBench {
    pub chunks: u64,
    pub questions: usize,
    pub limit: usize,
    pub pause_ms: u64,
    /// Measured through the shared service (`--via-service`).
    pub via_service: bool,
    /// The same questions searched in this process (one searcher, the model
    /// loaded, each question new to it).
    pub in_process: Percentiles,
    /// Those searches' p50 by phase (`search::SearchPhases`), in ms.
    pub in_process_phases_p50: Vec<(String, f64)>,
    /// This process's CPU time per question, when the OS says.
    pub in_process_cpu_ms_per_question: Option<f64>,
    pub baseline: Option<ServerRun>,
    pub this: ServerRun,
    pub ratios: Ratios,
}

#[derive(Debug, Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p95_ms: f64,
}

/// One executable's server, measured.
#[derive(Debug, Serialize)]
pub struct ServerRun {
    pub exe: String,
    /// Spawn to the first answer (initialize included), over the cold starts.
    pub spawn_to_first_answer: Percentiles,
    /// Cold starts whose first answer was lexical (the model still loading).
    pub first_answers_lexical: usize,
    /// Spawn to the first answer that used the model (the server warmed up).
    pub spawn_to_model_answer: Percentiles,
    /// Each question asked once of a warmed-up server: request written to
    /// answer read.
    pub questions: Percentiles,
    /// The server's CPU time (all its threads; the service's with
    /// `--via-service`) per question, when the OS says.
    pub server_cpu_ms_per_question: Option<f64>,
    /// The server's page faults per question, when the OS says.
    pub page_faults_per_question: Option<f64>,
    /// The server's resident memory after the questions, when the OS says.
    pub rss_mb: Option<f64>,
}

/// Below 1: faster.
#[derive(Debug, Serialize)]
pub struct Ratios {
    /// The server's question p50 over the in-process p50.
    pub server_over_in_process_p50: f64,
    /// This build's question p50 over the baseline build's.
    pub questions_p50_over_baseline: Option<f64>,
    pub spawn_to_first_answer_p50_over_baseline: Option<f64>,
    pub spawn_to_model_answer_p50_over_baseline: Option<f64>,
}

pub fn run(opts: &ServeBenchOptions) -> Result<ServeBench> {
    anyhow::ensure!(opts.spawns > 0, "--spawns must be at least 1");
    // A server that exits early is an error to report, not this process's
    // death by SIGPIPE (`ken` dies quietly on a closed pipe otherwise).
    // SAFETY: ignoring a signal has no memory preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    if let Some(exe) = &opts.baseline {
        anyhow::ensure!(exe.is_file(), "--baseline-exe {}: no such file", exe.display());
    }
    let questions = match &opts.questions {
        Some(questions) => questions.clone(),
        None => super::sampled_word_queries(&opts.root, &opts.index_dir)?,
    };
    anyhow::ensure!(!questions.is_empty(), "no questions to ask");
    let InProcess {
        chunks,
        latency: in_process,
        phases_p50: in_process_phases_p50,
        cpu_ms_per_question: in_process_cpu_ms_per_question,
    } = in_process(opts, &questions)?;
    let baseline = match &opts.baseline {
        Some(exe) => Some(measure_server(exe, opts, &questions)?),
        None => None,
    };
    let this = measure_server(
        &std::env::current_exe().context("the ken executable")?,
        opts,
        &questions,
    )?;
    let over = |of: fn(&ServerRun) -> f64| baseline.as_ref().map(|b| of(&this) / of(b));
    let ratios = Ratios {
        server_over_in_process_p50: this.questions.p50_ms / in_process.p50_ms,
        questions_p50_over_baseline: over(|r| r.questions.p50_ms),
        spawn_to_first_answer_p50_over_baseline: over(|r| r.spawn_to_first_answer.p50_ms),
        spawn_to_model_answer_p50_over_baseline: over(|r| r.spawn_to_model_answer.p50_ms),
    };
    Ok(ServeBench {
        chunks,
        questions: questions.len(),
        limit: opts.limit,
        pause_ms: opts.pause.as_millis() as u64,
        via_service: opts.via_service,
        in_process,
        in_process_phases_p50,
        in_process_cpu_ms_per_question,
        baseline,
        this,
        ratios,
    })
}

/// The questions searched in this process, measured.
struct InProcess {
    chunks: u64,
    latency: Percentiles,
    phases_p50: Vec<(String, f64)>,
    cpu_ms_per_question: Option<f64>,
}

/// The questions searched in this process, as a server's searcher runs them.
fn in_process(opts: &ServeBenchOptions, questions: &[String]) -> Result<InProcess> {
    let searcher = Searcher::open(&opts.root, &opts.index_dir)?;
    searcher.load_model().map_err(anyhow::Error::msg)?;
    let chunks = searcher.store().counted_chunks()? as u64;
    let request = |query: &str| SearchRequest {
        mode: SearchMode::Hybrid,
        limit: opts.limit,
        ..SearchRequest::new(query.to_string())
    };
    // The first search opens what a server's warm-up opens.
    searcher.search(&request("warm up"))?;
    let before = ProcessCounters::of(std::process::id());
    let mut ms = Vec::with_capacity(questions.len());
    let mut phases = Vec::with_capacity(questions.len());
    for question in questions {
        searcher.forget_query_vectors();
        std::thread::sleep(opts.pause);
        let started = Instant::now();
        searcher.search(&request(question))?;
        ms.push(started.elapsed().as_secs_f64() * 1e3);
        phases.push(searcher.last_phases());
    }
    if let Some(notice) = searcher.notice() {
        bail!("the in-process search did not run as asked: {notice}");
    }
    let cpu_ms = ProcessCounters::of(std::process::id())
        .zip(before)
        .map(|(a, b)| (a.cpu_ms - b.cpu_ms) / questions.len() as f64);
    Ok(InProcess {
        chunks,
        latency: percentiles(&mut ms),
        phases_p50: super::phase_p50s(&phases),
        cpu_ms_per_question: cpu_ms,
    })
}

fn measure_server(exe: &Path, opts: &ServeBenchOptions, questions: &[String]) -> Result<ServerRun> {
    eprintln!("ken bench serve: {}", exe.display());
    let mut first = Vec::new();
    let mut model = Vec::new();
    let mut first_answers_lexical = 0;
    // The session that starts the shared service and keeps it warm.
    let holder = match opts.via_service {
        true => {
            let mut holder = McpServer::start(exe, opts)?;
            holder.until_model_answers("warm up", opts.limit)?;
            Some(holder)
        }
        false => None,
    };
    for _ in 0..opts.spawns {
        let started = Instant::now();
        let mut server = McpServer::start(exe, opts)?;
        let lexical = server.search(&questions[0], opts.limit)?;
        first.push(started.elapsed().as_secs_f64() * 1e3);
        first_answers_lexical += usize::from(lexical);
        server.until_model_answers(&questions[0], opts.limit)?;
        model.push(started.elapsed().as_secs_f64() * 1e3);
        server.close();
    }
    let mut server = McpServer::start(exe, opts)?;
    server.until_model_answers("warm up", opts.limit)?;
    let counted = match opts.via_service {
        true => shared_service(exe, opts).context("the shared service's process was not found")?,
        false => server.pid(),
    };
    let before = ProcessCounters::of(counted);
    let mut ms = Vec::with_capacity(questions.len());
    for question in questions {
        std::thread::sleep(opts.pause);
        let started = Instant::now();
        if server.search(question, opts.limit)? {
            bail!("the warmed-up server answered {question:?} lexically");
        }
        ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let after = ProcessCounters::of(counted);
    server.close();
    if let Some(holder) = holder {
        holder.close();
        until_exited(counted);
    }
    let per_question = |of: fn(&ProcessCounters) -> f64| {
        let (b, a) = (before.as_ref()?, after.as_ref()?);
        Some((of(a) - of(b)) / questions.len() as f64)
    };
    Ok(ServerRun {
        exe: exe.display().to_string(),
        spawn_to_first_answer: percentiles(&mut first),
        first_answers_lexical,
        spawn_to_model_answer: percentiles(&mut model),
        questions: percentiles(&mut ms),
        server_cpu_ms_per_question: per_question(|c| c.cpu_ms),
        page_faults_per_question: per_question(|c| c.page_faults),
        rss_mb: after.map(|c| c.rss_mb),
    })
}

/// The pid of the shared service `exe` runs for this index: a process of
/// that executable whose arguments are `serve --service KEY` with this index
/// folder (Linux's /proc).
fn shared_service(exe: &Path, opts: &ServeBenchOptions) -> Option<u32> {
    let exe = exe.canonicalize().ok()?;
    let index_dir = opts.index_dir.canonicalize().unwrap_or_else(|_| opts.index_dir.clone());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let serves = args.windows(2).any(|w| w == [&b"serve"[..], &b"--service"[..]]);
        let same_index = args.windows(2).any(|w| {
            w[0] == b"--index-dir"
                && Path::new(std::str::from_utf8(w[1]).unwrap_or_default())
                    .canonicalize()
                    .is_ok_and(|dir| dir == index_dir)
        });
        let same_exe = std::fs::read_link(entry.path().join("exe")).is_ok_and(|e| e == exe);
        (serves && same_index && same_exe).then_some(pid)
    })
}

/// Waits for a shared service to close after its last session (it idles
/// 1 s), and ends it if it has not within 10 s.
fn until_exited(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            // SAFETY: kill has no memory preconditions; the pid is the service's.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn percentiles(ms: &mut [f64]) -> Percentiles {
    Percentiles {
        p50_ms: percentile(ms, 0.5),
        p95_ms: percentile(ms, 0.95),
    }
}

/// A `ken serve` child spoken to as an MCP client speaks: one JSON-RPC
/// message per line. Written here rather than with rmcp's client so the
/// measuring side adds no runtime of its own to what it measures.
struct McpServer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// stdout's lines, read on a thread so a silent server times out.
    lines: Receiver<String>,
    next_id: u64,
    /// The server's stderr, whose end an error quotes when it exits early.
    stderr: PathBuf,
}

impl McpServer {
    fn start(exe: &Path, opts: &ServeBenchOptions) -> Result<McpServer> {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let started = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr = std::env::temp_dir().join(format!("ken-bench-serve-{}-{started}.log", std::process::id()));
        let log = std::fs::File::create(&stderr).with_context(|| format!("creating {}", stderr.display()))?;
        let mut child = Command::new(exe)
            .arg("--root")
            .arg(&opts.root)
            .arg("--index-dir")
            .arg(&opts.index_dir)
            .args(match opts.via_service {
                true => &["serve", "--no-watch"][..],
                false => &["serve", "--no-service", "--no-watch"][..],
            })
            // A shared service closes 1 s after its last session.
            .env("KEN_SERVICE_IDLE_SECS", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let stdout = child.stdout.take().context("the server's stdout")?;
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = McpServer {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 1,
            stderr,
        };
        server.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "ken-bench", "version": env!("CARGO_PKG_VERSION")}}),
        )?;
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(server)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks `codebase_search` (hybrid); true when it answered lexically only.
    fn search(&mut self, query: &str, limit: usize) -> Result<bool> {
        let result = self.request(
            "tools/call",
            json!({"name": "codebase_search", "arguments": {"query": query, "limit": limit, "mode": "hybrid"}}),
        )?;
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        if result["isError"] == json!(true) {
            bail!("codebase_search failed: {text}");
        }
        let answer = match result.get("structuredContent") {
            Some(answer) => answer.clone(),
            None => serde_json::from_str(text).context("codebase_search's answer is not JSON")?,
        };
        Ok(answer["notice"]
            .as_str()
            .is_some_and(|n| n.contains("lexical results only")))
    }

    /// Asks `query` until an answer used the model.
    fn until_model_answers(&mut self, query: &str, limit: usize) -> Result<()> {
        let started = Instant::now();
        while self.search(query, limit)? {
            if started.elapsed() > ANSWER_TIMEOUT {
                bail!(
                    "the server answered lexically for {} s: is the index embedded?",
                    ANSWER_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(MODEL_POLL);
        }
        Ok(())
    }

    /// Sends a request and waits for its response's `result`.
    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        if self
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .is_err()
        {
            bail!("the server exited before answering {method}{}", self.last_words());
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let line = match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => bail!("no answer to {method} in {} s", ANSWER_TIMEOUT.as_secs()),
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("the server exited before answering {method}{}", self.last_words())
                }
            };
            let message: Value = serde_json::from_str(&line)
                .with_context(|| format!("the server wrote a line that is not JSON: {line}"))?;
            if message["id"] != json!(id) {
                continue; // a notification, or an answer to another request
            }
            if let Some(error) = message.get("error") {
                bail!("{method} failed: {error}");
            }
            return Ok(message["result"].clone());
        }
    }

    fn send(&mut self, message: &Value) -> Result<()> {
        let stdin = self.stdin.as_mut().context("the server's stdin is closed")?;
        // One write per message, as a client writes a line.
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .context("writing to the server")
    }

    /// Closes stdin (the server's cue to exit) and waits for the exit.
    fn close(mut self) {
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The end of what the server wrote on stderr, as `: ...`, if anything.
    fn last_words(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        match &lines[lines.len().saturating_sub(5)..] {
            [] => String::new(),
            last => format!(": {}", last.join(" / ")),
        }
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.stderr);
    }
}

/// A process's CPU time, page faults and resident memory (Linux's /proc).
struct ProcessCounters {
    cpu_ms: f64,
    page_faults: f64,
    rss_mb: f64,
}

impl ProcessCounters {
    fn of(pid: u32) -> Option<ProcessCounters> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The fields after the command's closing parenthesis, from the state (field 3).
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        // SAFETY: sysconf reads a constant of the system.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let rss_kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<f64>()
            .ok()?;
        Some(ProcessCounters {
            cpu_ms: (field(14)? + field(15)?) / ticks * 1e3,
            page_faults: field(10)? + field(12)?,
            rss_mb: rss_kb / 1024.0,
        })
    }
}
