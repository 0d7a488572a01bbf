//! Context recall per token on swe-public (BENCHMARKS.md, "Context for a
//! question"): for each case, the base commit is checked out into a copy of
//! the eval's work tree, indexed, and `codebase_context` is asked the case's
//! query at several budgets; against it, codebase_search's results cut to
//! the same budget in rank order (each result as codebase_search serializes
//! it, counted with the same tokenizer). A case counts for files when every
//! gold file is in the pack, for hunks when every line of every gold hunk is.
//!
//! `cargo run --release --example context_eval -- --work /tmp/ken-q-eval \
//!     --cases /tmp/ken-eval/cases/swe-public.jsonl --git /tmp/ken-eval/git [--mode lexical]`
//!
//! The work folder holds `swe/<repo>` (copies of the eval's trees, without
//! `.git`); checkouts use a private git index there, so other runs of the
//! eval on the same git dirs are not disturbed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use ken::context::pack::count_tokens;
use ken::context::question::{context_for_question, QuestionRequest};
use ken::index::{self, IndexOptions};
use ken::search::{SearchHit, SearchMode, SearchRequest, Searcher};

const BUDGETS: [usize; 4] = [1_000, 2_000, 4_000, 8_000];

struct Case {
    id: String,
    repo_dir: String,
    commit: String,
    git_dir: String,
    query: String,
    /// path -> hunks (first, last line).
    hunks: BTreeMap<String, Vec<(usize, usize)>>,
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn read_cases(path: &Path) -> Result<Vec<Case>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        let mut hunks = BTreeMap::new();
        for r in v["relevant"].as_array().into_iter().flatten() {
            hunks.insert(r["path"].as_str().unwrap_or_default().to_string(), Vec::new());
        }
        if let Some(map) = v["meta"]["hunks"].as_object() {
            for (path, list) in map {
                if let Some(h) = hunks.get_mut(path) {
                    for pair in list.as_array().into_iter().flatten() {
                        let a = pair[0].as_u64().unwrap_or(0) as usize;
                        let b = pair[1].as_u64().unwrap_or(0) as usize;
                        h.push((a, b.max(a)));
                    }
                }
            }
        }
        out.push(Case {
            id: s("id"),
            repo_dir: s("repo_dir"),
            commit: s("commit"),
            git_dir: s("git_dir"),
            query: s("query"),
            hunks,
        });
    }
    Ok(out)
}

/// Checks `commit` out into `tree` with a private git index.
fn checkout(git_dir: &Path, tree: &Path, index_file: &Path, commit: &str) -> Result<()> {
    let git = |args: &[&str]| -> Result<()> {
        let status = Command::new("git")
            .arg("--git-dir")
            .arg(git_dir)
            .arg("--work-tree")
            .arg(tree)
            .args(args)
            .env("GIT_INDEX_FILE", index_file)
            .current_dir(tree)
            .status()?;
        if !status.success() {
            bail!("git {args:?} failed");
        }
        Ok(())
    };
    let first = !index_file.exists();
    git(&["read-tree", "-u", "--reset", commit])?;
    if first {
        git(&["clean", "-q", "-f", "-d", "-x", "-e", ".ken"])?;
    }
    Ok(())
}

/// Spans of files, by path.
type Spans = Vec<(String, usize, usize)>;

fn files_in(spans: &Spans, case: &Case) -> bool {
    case.hunks.keys().all(|p| spans.iter().any(|(q, _, _)| q == p))
}

fn hunks_in(spans: &Spans, case: &Case) -> bool {
    case.hunks.iter().all(|(p, hunks)| {
        hunks
            .iter()
            .all(|&(a, b)| (a..=b).all(|l| spans.iter().any(|(q, s, e)| q == p && *s <= l && l <= *e)))
    })
}

/// Whether a span shows a line of a gold hunk.
fn touches_hunk(case: &Case, path: &str, start: usize, end: usize) -> bool {
    case.hunks
        .get(path)
        .is_some_and(|hunks| hunks.iter().any(|&(a, b)| start <= b && a <= end))
}

fn parse_lines(lines: &str) -> (usize, usize) {
    let (a, b) = lines.split_once('-').unwrap_or((lines, lines));
    (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
}

/// A result as codebase_search serializes it.
fn search_hit_json(h: &SearchHit) -> String {
    serde_json::json!({
        "base": "project", "path": h.path, "start_line": h.start_line, "end_line": h.end_line,
        "kind": h.kind, "symbol": h.symbol, "language": h.language, "score": h.score,
        "code": h.content, "context": h.context,
    })
    .to_string()
}

#[derive(Default)]
struct Tally {
    files: usize,
    hunks: usize,
    used: Vec<usize>,
}

impl Tally {
    /// Counts one case; "11": its gold files and hunks are in `spans`.
    fn add(&mut self, spans: &Spans, case: &Case, used: usize) -> String {
        let (f, h) = (files_in(spans, case), hunks_in(spans, case));
        self.files += f as usize;
        self.hunks += h as usize;
        self.used.push(used);
        format!("{}{}", f as u8, h as u8)
    }
}

/// `--latency ROOT`: every case's query against the index of ROOT as it
/// is (no checkout), at each budget, after one call that loads the model
/// and the tokenizer: codebase_context's time in process.
fn latency(root: &Path, cases: &[Case], mode: SearchMode) -> Result<()> {
    let searcher = Searcher::open(root, &root.join(".ken"))?;
    let ask = |query: &str, budget: usize| {
        let req = QuestionRequest {
            query: query.to_string(),
            budget: Some(budget),
            mode,
            path_glob: None,
        };
        context_for_question(&searcher, &[], root, &req)
    };
    let warm = ask("warm up", 1_000)?;
    let mut times: HashMap<usize, Vec<f64>> = HashMap::new();
    for case in cases {
        for budget in BUDGETS {
            let started = Instant::now();
            let answer = ask(&case.query, budget)?;
            times
                .entry(budget)
                .or_default()
                .push(started.elapsed().as_secs_f64() * 1e3);
            if answer.notice.is_some() && warm.notice.is_none() {
                eprintln!("{}: {:?}", case.id, answer.notice);
            }
        }
    }
    println!(
        "mode {mode:?} on {} (notice of the first call: {:?})",
        root.display(),
        warm.notice
    );
    let mut all = Vec::new();
    for budget in BUDGETS {
        let t = times.get_mut(&budget).expect("timed");
        all.extend_from_slice(t);
        println!(
            "budget {budget}: p50 {:.1} ms, p95 {:.1} ms over {} queries",
            percentile(t, 0.5),
            percentile(t, 0.95),
            t.len()
        );
    }
    println!(
        "all: p50 {:.1} ms, p95 {:.1} ms",
        percentile(&mut all, 0.5),
        percentile(&mut all, 0.95)
    );
    Ok(())
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let work = PathBuf::from(arg(&args, "--work").unwrap_or("/tmp/ken-q-eval".into()));
    let cases_file = PathBuf::from(arg(&args, "--cases").unwrap_or("/tmp/ken-eval/cases/swe-public.jsonl".into()));
    let git_root = PathBuf::from(arg(&args, "--git").unwrap_or("/tmp/ken-eval/git".into()));
    let mode = match arg(&args, "--mode").as_deref() {
        Some("hybrid") => SearchMode::Hybrid,
        Some("semantic") => SearchMode::Semantic,
        _ => SearchMode::Lexical,
    };
    let only = arg(&args, "--only");
    let cases = read_cases(&cases_file)?;
    if let Some(root) = arg(&args, "--latency") {
        return latency(Path::new(&root), &cases, mode);
    }
    let mut context_tally: HashMap<usize, Tally> = HashMap::new();
    let mut search_tally: HashMap<usize, Tally> = HashMap::new();
    let (mut first_context, mut first_search) = (Vec::new(), Vec::new());
    let mut latencies = Vec::new();
    let mut n = 0;
    for case in &cases {
        if only.as_deref().is_some_and(|o| !case.id.contains(o)) {
            continue;
        }
        n += 1;
        let tree = work.join(&case.repo_dir);
        let name = Path::new(&case.git_dir).file_name().context("git dir")?;
        let git_dir = git_root.join(name);
        let index_file = work.join(format!("{}.gitindex", name.to_string_lossy()));
        checkout(&git_dir, &tree, &index_file, &case.commit)?;
        let index_dir = tree.join(".ken");
        index::index(&tree, &index_dir, &IndexOptions::default())?;
        if mode != SearchMode::Lexical {
            ken::index::semantic::embed_root(&tree, &index_dir, &Default::default())?;
        }
        let searcher = Searcher::open(&tree, &index_dir)?;
        let mut line = format!("{:<28}", case.id);
        for budget in BUDGETS.into_iter().chain([16_000]) {
            let req = QuestionRequest {
                query: case.query.clone(),
                budget: Some(budget),
                mode,
                path_glob: None,
            };
            let started = Instant::now();
            let answer = context_for_question(&searcher, &[], &tree, &req)?;
            latencies.push(started.elapsed().as_secs_f64() * 1e3);
            let total = count_tokens(&serde_json::to_string(&answer)?);
            assert!(total <= budget, "{}: {total} > {budget}", case.id);
            let spans: Spans = answer
                .pack
                .pieces
                .iter()
                .map(|p| {
                    let (a, b) = parse_lines(&p.lines);
                    (p.path.clone(), a, b)
                })
                .collect();
            if budget == 16_000 {
                // Tokens until the first piece that shows a gold hunk, in the pack's order.
                let mut used = 0;
                for p in &answer.pack.pieces {
                    used += count_tokens(&serde_json::to_string(p)?) + 1;
                    let (a, b) = parse_lines(&p.lines);
                    if touches_hunk(case, &p.path, a, b) {
                        first_context.push(used as f64);
                        break;
                    }
                }
                continue;
            }
            let mark = context_tally.entry(budget).or_default().add(&spans, case, total);
            line.push_str(&format!(" c{budget}:{mark}"));
        }
        // codebase_search, cut to each budget in rank order.
        let search = SearchRequest {
            limit: 100,
            mode,
            ..SearchRequest::new(case.query.clone())
        };
        let hits = searcher.search(&search)?;
        let costs: Vec<usize> = hits.iter().map(|h| count_tokens(&search_hit_json(h)) + 1).collect();
        let frame = count_tokens(r#"{"results":[],"index":{}}"#);
        for budget in BUDGETS {
            let mut used = frame;
            let mut spans = Spans::new();
            for (h, cost) in hits.iter().zip(&costs) {
                if used + cost > budget {
                    break;
                }
                used += cost;
                spans.push((h.path.clone(), h.start_line as usize, h.end_line as usize));
            }
            let mark = search_tally.entry(budget).or_default().add(&spans, case, used);
            line.push_str(&format!(" s{budget}:{mark}"));
        }
        let mut used = frame;
        for (h, cost) in hits.iter().zip(&costs) {
            used += cost;
            if touches_hunk(case, &h.path, h.start_line as usize, h.end_line as usize) {
                first_search.push(used as f64);
                break;
            }
        }
        eprintln!("{line}");
    }
    println!("cases: {n}, mode: {mode:?}");
    println!("| budget | context: gold files | context: gold hunks | search cut: gold files | search cut: gold hunks | context tokens used (mean) |");
    println!("|---|---|---|---|---|---|");
    for budget in BUDGETS {
        let c = &context_tally[&budget];
        let s = &search_tally[&budget];
        let share = |k: usize| format!("{:.3} ({k}/{n})", k as f64 / n as f64);
        println!(
            "| {budget} | {} | {} | {} | {} | {:.0} |",
            share(c.files),
            share(c.hunks),
            share(s.files),
            share(s.hunks),
            c.used.iter().sum::<usize>() as f64 / c.used.len().max(1) as f64
        );
    }
    let (fc, fs) = (first_context.len(), first_search.len());
    println!(
        "median tokens until the first gold hunk: context {:.0} (found in {fc}/{n} at 16000), search {:.0} (found in {fs}/{n} in 100 results)",
        percentile(&mut first_context, 0.5),
        percentile(&mut first_search, 0.5)
    );
    println!(
        "codebase_context latency in process: p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms over {} calls",
        percentile(&mut latencies, 0.5),
        percentile(&mut latencies, 0.95),
        percentile(&mut latencies, 1.0),
        latencies.len()
    );
    Ok(())
}
