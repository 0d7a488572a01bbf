//! End-to-end tests of the `ken` command line on real folders, git
//! repositories and SQLite indexes.

mod common;

use std::time::Duration;

use common::*;
use rusqlite::OptionalExtension;
use serde_json::Value;

#[test]
fn indexes_a_git_repo_and_finds_definitions() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    write(root, ".gitignore", "ignored/\n");
    write(root, "ignored/secret.py", "def parse_config_ignored():\n    pass\n");
    git(root, &["init", "-q"]);

    let report = ken_json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(report["files"], 6, "{report}");
    assert!(report["chunks"].as_u64().unwrap() >= 12, "{report}");
    for lang in ["python", "go", "rust", "typescript", "markdown", "text"] {
        assert_eq!(report["languages"][lang], 1, "{lang} in {report}");
    }
    assert_eq!(report["branch"], "main");

    let hits = search(root, "check_expiry", 5);
    assert_eq!(hits[0]["path"], "src/auth/jwt.py");
    assert_eq!(hits[0]["kind"], "method");
    assert_eq!(hits[0]["symbol"], "check_expiry");
    assert_eq!(hits[0]["language"], "python");
    assert_eq!(hits[0]["start_line"], 10);
    assert!(hits[0]["end_line"].as_u64().unwrap() >= 12);
    assert!(hits[0]["snippet"].as_str().unwrap().contains("def check_expiry"));
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0);

    // A natural-language question reaches the method by its doc words. The
    // tiny methods of the class are one chunk (too few words alone); the
    // identifier search above narrowed that chunk to the method it named.
    let hits = search(root, "where is the token expiry checked?", 3);
    assert_eq!(hits[0]["symbol"], "__init__, check_expiry", "{hits:?}");
    assert_eq!(
        (hits[0]["start_line"].as_u64(), hits[0]["end_line"].as_u64()),
        (Some(7), Some(14))
    );

    // Ignored files are not indexed; the index never shows up in git status.
    assert!(search(root, "parse_config_ignored", 10)
        .iter()
        .all(|h| h["path"] != "ignored/secret.py"));
    let exclude = std::fs::read_to_string(root.join(".git/info/exclude")).unwrap();
    assert!(exclude.lines().any(|l| l == ".ken/"));
    let status = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&status.stdout).contains(".ken"));
}

#[test]
fn an_identifier_query_ranks_its_definition_first() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    // Many mentions elsewhere must not outrank the one definition.
    for i in 0..8 {
        let calls = "    cfg = parse_config(path)\n    parse_config(other)\n".repeat(5);
        write(
            root,
            &format!("callers/use_{i}.py"),
            &format!("def use_{i}(path, other):\n{calls}"),
        );
    }
    ken_ok(root, &["index", "--no-embed", "-q"]);
    for query in ["parse_config", "parseConfig", "ParseConfig"] {
        let hits = search(root, query, 5);
        assert_eq!(hits[0]["symbol"], "parse_config", "{query}: {hits:?}");
        assert_eq!(hits[0]["path"], "src/auth/jwt.py", "{query}");
    }
    let hits = search(root, "UserStore", 3);
    assert_eq!(
        (hits[0]["kind"].as_str(), hits[0]["symbol"].as_str()),
        (Some("class"), Some("UserStore"))
    );
}

#[test]
fn a_type_with_several_impl_blocks_is_found_at_its_definition() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "src/lib.rs",
        r#"/// Settings of one search, built step by step.
pub struct QueryPlan {
    limit: usize,
    fuzzy: bool,
}

impl Default for QueryPlan {
    fn default() -> QueryPlan {
        QueryPlan { limit: 10, fuzzy: false }
    }
}

impl QueryPlan {
    pub fn limit(&mut self, limit: usize) -> &mut QueryPlan {
        self.limit = limit;
        self
    }

    pub fn fuzzy(&mut self, yes: bool) -> &mut QueryPlan {
        self.fuzzy = yes;
        self
    }
}

impl std::fmt::Display for QueryPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "limit {} fuzzy {}", self.limit, self.fuzzy)
    }
}
"#,
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    // Each bare `impl QueryPlan {` line used to be a one-line chunk named
    // QueryPlan, and all three ranked above the struct.
    let hits = search(root, "QueryPlan", 10);
    assert_eq!(
        (hits[0]["kind"].as_str(), hits[0]["start_line"].as_u64()),
        (Some("struct"), Some(1)),
        "{hits:?}"
    );
    assert!(
        hits.iter().all(|h| h["start_line"] != h["end_line"]),
        "no one-line chunks: {hits:?}"
    );
    // The impl line opens its first method's chunk.
    let limit = hits
        .iter()
        .find(|h| h["symbol"] == "limit, fuzzy")
        .expect("the builder methods");
    assert_eq!(limit["start_line"], 13, "{limit:?}");
}

/// The first result for `query`, in lexical and in hybrid mode (which must
/// agree: the index has no vectors, and a lone identifier is answered by its
/// definitions), as `path:line-line kind symbol`.
fn first_hit(root: &std::path::Path, query: &str) -> String {
    let firsts: Vec<String> = ["lexical", "hybrid"]
        .iter()
        .map(|mode| {
            let hits = ken_json(root, &["search", "--json", "--mode", mode, "-k", "3", query]);
            let hit = &hits[0];
            format!(
                "{}:{}-{} {} {}",
                hit["path"].as_str().unwrap(),
                hit["start_line"],
                hit["end_line"],
                hit["kind"].as_str().unwrap(),
                hit["symbol"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(firsts[0], firsts[1], "{query}: lexical, then hybrid");
    firsts[0].clone()
}

/// The explained factors of the hit of `query` at `path:start_line`.
fn factor_reasons(root: &std::path::Path, query: &str, at: (&str, u64)) -> Vec<String> {
    let hits = ken_json(
        root,
        &["search", "--json", "--explain", "--mode", "lexical", "-k", "10", query],
    );
    let hit = hits
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["path"] == at.0 && h["start_line"] == at.1)
        .unwrap_or_else(|| panic!("{query}: no hit at {at:?} in {hits}"));
    hit["explain"]["factors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["reason"].as_str().unwrap().to_string())
        .collect()
}

/// (a) An identifier typed exactly finds the definition spelled so, before a
/// shorter one of another case (which used to win on BM25's length).
#[test]
fn an_identifier_typed_exactly_finds_that_spelling_before_a_case_variant() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "server/conn.go",
        r#"package server

import (
	"bufio"
	"fmt"
	"sort"
)

// conn is one client connection.
type conn struct {
	w      *bufio.Writer
	status int
	header map[string]string
}

// writeHeader sends the status line, then every header field in name
// order, then the blank line that ends the header.
func (c *conn) writeHeader() error {
	fmt.Fprintf(c.w, "HTTP/1.1 %d %s\r\n", c.status, statusText(c.status))
	keys := make([]string, 0, len(c.header))
	for k := range c.header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(c.w, "%s: %s\r\n", k, c.header[k])
	}
	_, err := c.w.WriteString("\r\n")
	return err
}
"#,
    );
    write(
        root,
        "server/response.go",
        r#"package server

// Response is what a handler answers.
type Response struct {
	status int
	body   []byte
}

// WriteHeader records the status code to send.
func (r *Response) WriteHeader(code int) { r.status = code }
"#,
    );
    write(
        root,
        "src/provision.ts",
        r#"export interface ProvisionOptions {
  region: string;
  retries: number;
}

/** What a provisioned environment holds. */
export class ProvisionContext {
  constructor(readonly region: string) {}
}

/** Creates the environment: asks each region in turn until one answers. */
export async function provisionContext(options: ProvisionOptions): Promise<ProvisionContext> {
  let attempt = 0;
  while (attempt < options.retries) {
    try {
      await reserve(options.region);
      return new ProvisionContext(options.region);
    } catch (err) {
      attempt += 1;
    }
  }
  throw new Error(`no region answered after ${attempt} attempts`);
}

async function reserve(region: string): Promise<void> {
  if (!region) throw new Error("no region");
}
"#,
    );
    write(
        root,
        "src/limits.rs",
        r#"/// The deepest nesting a document may have.
pub const MAX_DEPTH: usize = 64;

/// The nesting depth allowed for `kind`: lists nest less deeply than
/// objects, and a document of unknown kind gets the default.
pub fn max_depth(kind: &str) -> usize {
    match kind {
        "list" => MAX_DEPTH / 2,
        "object" => MAX_DEPTH,
        _ => {
            let fallback = MAX_DEPTH / 4;
            fallback.max(8)
        }
    }
}
"#,
    );
    write(
        root,
        "src/ready.rs",
        "/// The stream is closed for writing.\npub const WRITE_CLOSED: u8 = 0b1000;\n",
    );
    // Tests: one defines a name only it spells so, one a name source defines too.
    write(
        root,
        "tests/stream.rs",
        r#"/// A stream shut for writing refuses writes.
#[test]
fn write_closed() {
    let mut stream = Stream::new();
    stream.shutdown_write();
    assert!(stream.write(b"x").is_err());
}

fn max_depth() -> usize {
    max_depth_of("list")
}
"#,
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    for (query, first) in [
        ("write_closed", "tests/stream.rs:1-7 function write_closed"),
        ("WRITE_CLOSED", "src/ready.rs:1-2 constant WRITE_CLOSED"),
        ("writeHeader", "server/conn.go:16-30 method writeHeader"),
        ("WriteHeader", "server/response.go:9-10 method WriteHeader"),
        ("provisionContext", "src/provision.ts:11-23 function provisionContext"),
        ("ProvisionContext", "src/provision.ts:6-7 class ProvisionContext"),
        ("max_depth", "src/limits.rs:4-15 function max_depth"),
        ("MAX_DEPTH", "src/limits.rs:1-2 constant MAX_DEPTH"),
    ] {
        assert_eq!(first_hit(root, query), first, "{query}");
    }
    // The other spelling is still a result, and says why it comes later.
    let reasons = factor_reasons(root, "writeHeader", ("server/response.go", 9));
    assert!(
        reasons.iter().any(|r| r.starts_with("spelled otherwise than typed")),
        "{reasons:?}"
    );
    // A question writes names as prose does: every definition counts the same.
    let reasons = factor_reasons(
        root,
        "where does the response record its WriteHeader code",
        ("server/conn.go", 16),
    );
    assert!(
        reasons.contains(&"defines the identifier".to_string()) && !reasons.iter().any(|r| r.starts_with("spelled")),
        "{reasons:?}"
    );
}

/// (b) A type's name finds the declaration that defines it: before its impl
/// blocks (`unsafe impl Send for Pool {}` is one short line), and, when a
/// long declaration is split into several chunks, the part that declares it
/// (not a doc comment alone, not the fields after it).
#[test]
fn a_type_name_finds_its_declaration_before_impls_and_other_parts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "src/pool.rs",
        r#"use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fixed set of connections shared by the worker threads: each worker
/// takes one, uses it and gives it back; when none is free it waits.
/// Connections are opened lazily, on first use, and closed on drop.
pub struct Pool {
    slots: Vec<UnsafeCell<Option<Connection>>>,
    free: AtomicUsize,
    address: String,
}

unsafe impl Send for Pool {}

unsafe impl Sync for Pool {}

/// Closes every open connection.
impl Drop for Pool {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            slot.get_mut().take();
        }
    }
}

/// Taking and returning connections.
impl Pool {
    pub fn new(address: &str, size: usize) -> Pool {
        Pool {
            slots: (0..size).map(|_| UnsafeCell::new(None)).collect(),
            free: AtomicUsize::new(size),
            address: address.to_string(),
        }
    }

    pub fn available(&self) -> usize {
        self.free.load(Ordering::Acquire)
    }
}

pub struct Connection;
"#,
    );
    // Go: a doc comment and seventy fields, cut in two chunks; the first
    // holds only the comment.
    let doc: String = (0..30)
        .map(|i| format!("// Setting{i}: how the server treats this option, and its default value.\n"))
        .collect();
    let fields: String = (0..70).map(|i| format!("\tSetting{i} int\n")).collect();
    let go = format!(
        "package config\n\n// Options configures the server.\n{doc}type Options struct {{\n{fields}}}\n\n\
         func useOptions(o Options) int {{ return o.Setting1 }}\n"
    );
    write(root, "config/options.go", &go);
    // TypeScript: a class whose header (doc comment and fields) is cut in
    // two; the second part, the fields, names RendererHook fifteen times.
    let doc: String = (0..40)
        .map(|i| format!(" * Line {i} of the documentation: what setting {i} does to a frame.\n"))
        .collect();
    let fields: String = (0..45)
        .map(|i| format!("  public setting{i} = {i};\n"))
        .chain((0..15).map(|i| format!("  public rendererHook{i}?: RendererHook;\n")))
        .collect();
    let ts = format!(
        "/**\n{doc} */\nexport class Renderer {{\n{fields}\n  render(): void {{\n    this.setting1 += 1;\n  }}\n}}\n\n\
         export function makeRenderer(): Renderer {{\n  return new Renderer();\n}}\n"
    );
    write(root, "web/renderer.ts", &ts);
    ken_ok(root, &["index", "--no-embed", "-q"]);

    assert_eq!(first_hit(root, "Pool"), "src/pool.rs:4-11 struct Pool");
    let reasons = factor_reasons(root, "Pool", ("src/pool.rs", 13));
    assert!(
        reasons.iter().any(|r| r.starts_with("an impl of the type")),
        "{reasons:?}"
    );
    let declared_at = |text: &str, line: &str| text.lines().position(|l| l.starts_with(line)).unwrap() as u64 + 1;
    for (query, path, text, line, kind) in [
        ("Options", "config/options.go", &go, "type Options struct", "struct"),
        ("Renderer", "web/renderer.ts", &ts, "export class Renderer", "class"),
    ] {
        let hits = ken_json(root, &["search", "--json", "--mode", "lexical", "-k", "10", query]);
        let at = declared_at(text, line);
        let first = &hits[0];
        assert_eq!(
            (first["path"].as_str(), first["kind"].as_str()),
            (Some(path), Some(kind))
        );
        assert!(
            first["start_line"].as_u64().unwrap() <= at && at <= first["end_line"].as_u64().unwrap(),
            "{query}: line {at} is not in {first}"
        );
        // Hybrid agrees.
        let first = first_hit(root, query);
        assert!(first.starts_with(&format!("{path}:")), "{first}");
    }
    // Both declarations were cut in parts (else this test tests nothing).
    let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    for name in ["Options", "Renderer"] {
        let parts: i64 = conn
            .query_row("SELECT count(*) FROM chunk_symbols WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(parts >= 2, "{name}: {parts} part(s)");
    }
}

/// (c) A snake_case function is found before a CamelCase type of the same
/// words, and the type before the function: a case mismatch like any other.
#[test]
fn a_snake_case_function_and_a_camel_case_type_of_the_same_words_are_each_found_by_their_spelling() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "src/harness.rs",
        r#"use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// What polling a task's future came to.
enum PollFuture {
    Complete,
    Notified,
    Done,
}

/// Polls the task's future once, catching a panic, and stores its output
/// when it is ready; a task woken while it ran is polled again later.
fn poll_future<T: Future>(future: Pin<&mut T>, cx: &mut Context<'_>) -> Poll<T::Output> {
    let guard = Guard::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.poll(cx)));
    guard.disarm();
    match result {
        Ok(Poll::Ready(output)) => Poll::Ready(output),
        Ok(Poll::Pending) => Poll::Pending,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

struct Guard;
"#,
    );
    write(
        root,
        "web/options.ts",
        r#"/** Options of one parse. */
export interface ParseOptions {
  strict: boolean;
}

/** Reads the options from the command line: every `--flag` is a boolean,
 *  unknown flags are errors unless lenient. */
export function parse_options(argv: string[], lenient = false): ParseOptions {
  const options: ParseOptions = { strict: false };
  for (const arg of argv) {
    if (arg === "--strict") {
      options.strict = true;
    } else if (!lenient) {
      throw new Error(`unknown flag ${arg}`);
    }
  }
  return options;
}
"#,
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    for (query, first) in [
        ("poll_future", "src/harness.rs:12-23 function poll_future"),
        ("PollFuture", "src/harness.rs:5-10 enum PollFuture"),
        ("parse_options", "web/options.ts:6-18 function parse_options"),
        ("ParseOptions", "web/options.ts:1-4 interface ParseOptions"),
    ] {
        assert_eq!(first_hit(root, query), first, "{query}");
    }
    // Typed in neither spelling, both are definitions of it as before.
    let reasons = factor_reasons(root, "pollFuture", ("src/harness.rs", 12));
    assert!(
        reasons.contains(&"defines the identifier".to_string()) && !reasons.iter().any(|r| r.starts_with("spelled")),
        "{reasons:?}"
    );
}

#[test]
fn a_named_identifier_narrows_a_packed_chunk_to_all_its_overloads() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "src/Parser.java",
        r#"package org.example;

public class Parser {
    private TagSet tagSet;
    private int maxDepth;

    public int maxDepth() {
        return maxDepth;
    }

    public Parser tagSet(TagSet tagSet) {
        this.tagSet = tagSet;
        return this;
    }

    public TagSet tagSet() {
        return tagSet;
    }

    public String namespace() {
        return "html";
    }
}
"#,
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = search(root, "tagSet", 3);
    assert_eq!(hits[0]["path"], "src/Parser.java", "{hits:?}");
    // The getter and the setter are packed with their neighbours; the
    // answer is both overloads (11-18), not the first alone (11-14).
    assert_eq!(
        (hits[0]["start_line"].as_u64(), hits[0]["end_line"].as_u64()),
        (Some(11), Some(18)),
        "{hits:?}"
    );
    assert_eq!(hits[0]["symbol"], "tagSet");
    let snippet = hits[0]["snippet"].as_str().unwrap();
    assert!(
        !snippet.contains("maxDepth") && !snippet.contains("namespace"),
        "{snippet}"
    );
    // Two names the query says: both definitions, and the lines between.
    let hits = search(root, "tagSet maxDepth", 3);
    assert_eq!(
        (hits[0]["start_line"].as_u64(), hits[0]["end_line"].as_u64()),
        (Some(7), Some(18)),
        "{hits:?}"
    );
    assert_eq!(hits[0]["symbol"], "tagSet, maxDepth");
}

#[test]
fn identical_code_in_several_files_ranks_once_with_its_copies_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let retry = "def retry_with_backoff(call, attempts):\n    delay = 0.1\n    for attempt in range(attempts):\n        try:\n            return call()\n        except OSError:\n            time.sleep(delay)\n            delay *= 2\n    raise TimeoutError(attempts)\n";
    for path in ["app/net.py", "tools/net_copy.py", "scripts/net_old.py"] {
        write(root, path, &format!("import time\n\n\n{retry}"));
    }
    write(
        root,
        "app/other.py",
        "def retry_later(queue, job):\n    queue.push(job, delay=5)\n    return job\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = search(root, "retry with backoff attempts", 5);
    let copies_of = |hit: &Value| -> Vec<String> {
        hit["copies"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| format!("{}:{}-{}", c["path"].as_str().unwrap(), c["start_line"], c["end_line"]))
                    .collect()
            })
            .unwrap_or_default()
    };
    let retries: Vec<&Value> = hits.iter().filter(|h| h["symbol"] == "retry_with_backoff").collect();
    assert_eq!(retries.len(), 1, "one result for the three copies: {hits:?}");
    let mut copies = copies_of(retries[0]);
    copies.sort();
    let mut expected: Vec<String> = ["app/net.py", "tools/net_copy.py", "scripts/net_old.py"]
        .iter()
        .filter(|p| **p != retries[0]["path"].as_str().unwrap())
        .map(|p| format!("{p}:4-12"))
        .collect();
    expected.sort();
    assert_eq!(copies, expected, "{hits:?}");
    // The slots the copies left go to other code.
    assert!(hits.iter().any(|h| h["symbol"] == "retry_later"), "{hits:?}");
    // The terminal output says where the copies are.
    let text = ken_ok(root, &["search", "-k", "3", "retry with backoff attempts"]);
    assert!(text.contains("the same code at "), "{text}");
}

#[test]
fn a_shorter_list_is_the_start_of_the_default_one() {
    // Sixty chunks that share a few of the question's words outrank, by
    // BM25, the one that quotes its `abs:href`; the rerank's ×3 lifts that
    // one first, but only from a pool deep enough to hold it.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for i in 0..60 {
        write(
            root,
            &format!("links_{i}.py"),
            &format!(
                "def handler_{i}(doc, base):\n    \"\"\"Walk the relative links of a page.\"\"\"\n    return [join(base, link) for link in doc.links]\n"
            ),
        );
    }
    for i in 0..300 {
        write(
            root,
            &format!("other_{i}.py"),
            &format!("def other_{i}(x):\n    \"\"\"Count the href items of a queue number {i}.\"\"\"\n    return abs(len(x))\n"),
        );
    }
    write(
        root,
        "attrs.py",
        "def attribute_value(node, key):\n    step_0 = prepare(value, 0)\n    step_1 = prepare(value, 1)\n    step_2 = prepare(value, 2)\n    step_3 = prepare(value, 3)\n    if key.startswith(\"abs:href\"):\n        return node.absolute(key)\n    return node.get(key)\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let query = "Where are relative links resolved into absolute URLs, e.g. for abs:href?";
    let listed = |k: usize| -> Vec<String> {
        paths_and_scores(root, "lexical", k, query)
            .into_iter()
            .map(|(path, _)| path)
            .collect()
    };
    let default = listed(10);
    assert_eq!(default[0], "attrs.py", "{default:?}");
    for k in [1, 3, 5] {
        assert_eq!(listed(k), default[..k], "-k {k} against the default ten");
    }
}

#[test]
fn a_longer_list_keeps_the_default_lists_scores() {
    // `split_word` is found by its definition; by BM25 it lies below the
    // 120 chunks that call it, outside the default list's pool but inside
    // a longer list's. It must score as the default list scores it.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for i in 0..120 {
        write(
            root,
            &format!("wrap_{i}.py"),
            &format!(
                "def layout_{i}(text, width):\n    \"\"\"Split each long line of the text to fit the wrap width.\"\"\"\n    return [split_word(line, width) for line in text.lines() if long_line(line, width)]\n"
            ),
        );
    }
    write_unrelated(root, "other", 300);
    write(
        root,
        "words.py",
        "def split_word(word, width):\n    return [word[i:i + width] for i in range(0, len(word), width)]\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let query = "Where does split_word cut a long line of text to fit the wrap width?";
    let default = paths_and_scores(root, "lexical", 10, query);
    assert_eq!(default[0].0, "words.py", "{default:?}");
    assert_eq!(
        paths_and_scores(root, "lexical", 40, query)[..10],
        default[..],
        "the first ten of -k 40 against the default list"
    );
}

#[test]
fn tests_and_docs_folders_rank_after_source_unless_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "src/retry.py",
        "def backoff_delay(attempt):\n    \"\"\"Delay before the next retry.\"\"\"\n    return min(30, 2 ** attempt)\n",
    );
    // The test and the docs example say the query's words more often than the source.
    let mentions = "    # retry backoff delay: the retry waits for the backoff delay\n".repeat(6);
    write(
        root,
        "tests/test_retry.py",
        &format!("def test_retry_backoff_delay():\n{mentions}    assert backoff_delay(1) == 2\n"),
    );
    write(
        root,
        "docs/examples/retry_demo.py",
        &format!("def demo_retry_backoff_delay():\n{mentions}    print(backoff_delay(3))\n"),
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = search(root, "retry backoff delay", 5);
    assert_eq!(hits[0]["path"], "src/retry.py", "{hits:?}");
    // Asking for tests lifts the demotion.
    let hits = search(root, "test retry backoff delay", 5);
    assert_eq!(hits[0]["path"], "tests/test_retry.py", "{hits:?}");
}

/// Whether a hit's explanation says it quotes the query's code.
fn quotes_code(hit: &Value) -> bool {
    hit["explain"]["factors"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["reason"].as_str().unwrap().starts_with("quotes"))
}

#[test]
fn code_quoted_in_a_question_finds_the_lines_that_say_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "pkg/sessions.py",
        "def request(self, method, url):\n    method = builtin_str(method)\n    return self.send(method, url)\n",
    );
    // Says the question's words more often, but never the quoted line.
    let mentions = "    # the method name: a builtin_str method, a method problem\n".repeat(4);
    write(
        root,
        "pkg/models.py",
        &format!("def prepare_method(self, method):\n{mentions}    self.method = builtin_str(self.method).upper()\n"),
    );
    write(
        root,
        "tests/test_sessions.py",
        "def test_method():\n    method = builtin_str(method)\n    assert method\n",
    );
    write(root, "pkg/compat.py", "builtin_str = str\n");
    write_unrelated(root, "pkg", 40);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    // Unquoted, the words win over the line (`compat.py` defines the name).
    let hits = paths(&search(root, "builtin_str method problem", 3));
    let models = hits
        .iter()
        .position(|h| h == "pkg/models.py")
        .expect("models.py listed");
    let sessions = hits.iter().position(|h| h == "pkg/sessions.py");
    assert!(sessions.is_none_or(|s| models < s), "{hits:?}");
    let hits = paths(&search(root, "method = builtin_str(method) problem", 3));
    assert_eq!(hits[0], "pkg/sessions.py", "{hits:?}");
    // A file or module the question names.
    let hits = paths(&search(root, "builtin_str method problem in pkg/compat.py", 3));
    assert_eq!(hits[0], "pkg/compat.py", "{hits:?}");
    let hits = paths(&search(root, "pkg.compat.builtin_str method problem", 3));
    assert_eq!(hits[0], "pkg/compat.py", "{hits:?}");
}

#[test]
fn code_quoted_in_a_comment_or_a_doctest_is_not_the_code() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // The package docstring shows the call the question quotes, and says its words.
    write(
        root,
        "httpkit/__init__.py",
        r#""""
The httpkit library: sending HTTP requests, always with the right
content length.

Usage:

    >>> import httpkit
    >>> r = httpkit.get('https://example.org')
    >>> r.status_code
    200
"""
# httpkit.get and friends live in the api module.
from .api import get, post
"#,
    );
    write(
        root,
        "httpkit/models.py",
        "class PreparedRequest:\n    def prepare_content_length(self, body):\n        if body is not None:\n            self.headers[\"Content-Length\"] = str(len(body))\n        elif self.method not in (\"GET\", \"HEAD\"):\n            self.headers[\"Content-Length\"] = \"0\"\n",
    );
    write(
        root,
        "httpkit/redirects.py",
        "def follow(url):\n    resp = httpkit.get(url)\n    return resp.headers[\"Location\"]\n",
    );
    write_unrelated(root, "httpkit", 30);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let explained = |query: &str| search_explained(root, query, 5);
    let hits = explained("httpkit.get is ALWAYS sending content length");
    assert_eq!(hits[0]["path"], "httpkit/models.py", "{hits:?}");
    let package = hits
        .iter()
        .find(|h| h["path"] == "httpkit/__init__.py")
        .expect("the package");
    assert!(!quotes_code(package), "{package:?}");
    // A line of code that makes the call does quote it.
    let hits = explained("httpkit.get loses the Location header");
    assert_eq!(hits[0]["path"], "httpkit/redirects.py", "{hits:?}");
    assert!(quotes_code(&hits[0]), "{hits:?}");
}

#[test]
fn code_quoted_in_a_question_is_not_quoted_by_an_import_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Files that import the quoted class: their import blocks say it verbatim.
    for name in ["Scheduler", "Pools", "Timers"] {
        write(
            root,
            &format!("src/main/java/kit/{name}.java"),
            &format!(
                "package kit;\n\nimport java.util.concurrent.ThreadPoolExecutor;\nimport java.util.List;\n\npublic class {name} {{\n    public List<String> names() {{\n        return List.of(\"{name}\");\n    }}\n}}\n"
            ),
        );
    }
    write(
        root,
        "src/main/java/kit/Workers.java",
        "package kit;\n\npublic class Workers {\n    /** Changes how many workers the pool keeps when it resizes. */\n    public void resize(Pool pool, int workers) {\n        pool.executor().setCorePoolSize(workers);\n        pool.executor().setMaximumPoolSize(workers);\n    }\n}\n",
    );
    write(
        root,
        "src/main/java/kit/Pool.java",
        "package kit;\n\npublic class Pool {\n    public Object make(int workers) {\n        return new java.util.concurrent.ThreadPoolExecutor(workers, workers, 0L, null, null);\n    }\n}\n",
    );
    write_unrelated(root, "src/main/java/kit", 20);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = search_explained(
        root,
        "java.util.concurrent.ThreadPoolExecutor pool size does not change when workers resize",
        10,
    );
    let quoting: Vec<&str> = hits
        .iter()
        .filter(|h| quotes_code(h))
        .map(|h| h["path"].as_str().unwrap())
        .collect();
    // Code that constructs it quotes it; an import of it does not.
    assert_eq!(quoting, ["src/main/java/kit/Pool.java"], "{hits:?}");
    // The import blocks rank by their words alone, after the code asked for.
    let first: Vec<&str> = hits[..2].iter().map(|h| h["path"].as_str().unwrap()).collect();
    assert_eq!(
        first,
        ["src/main/java/kit/Pool.java", "src/main/java/kit/Workers.java"],
        "{hits:?}"
    );
}

#[test]
fn a_question_finds_the_code_that_does_it_before_a_type_that_shares_its_words() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "src/retry.rs",
        "pub struct RetryPolicy {\n    pub attempts: u32,\n    pub retry_delay_ms: u64,\n}\n\npub fn backoff(policy: &RetryPolicy, attempt: u32) -> u64 {\n    let delay = policy.retry_delay_ms * 2u64.pow(attempt);\n    delay.min(60_000)\n}\n",
    );
    write_unrelated(root, "src", 20);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let first = |query: &str| {
        let hit = search_explained(root, query, 3)[0].clone();
        assert_explained(&hit);
        (
            hit["kind"].as_str().unwrap().to_string(),
            hit["symbol"].as_str().unwrap().to_string(),
        )
    };
    // The struct says more of the question's words (BM25 ranks it first), but
    // the question asks what code does.
    assert_eq!(
        first("how long to wait between retry attempts"),
        ("function".into(), "backoff".into())
    );
    // A name still finds the type, and so does a question the type answers
    // much better: the demotion is mild.
    assert_eq!(first("RetryPolicy"), ("struct".into(), "RetryPolicy".into()));
    assert_eq!(
        first("the struct that says how long to wait between retry attempts"),
        ("struct".into(), "RetryPolicy".into())
    );
}

/// A header a question names ("Cache-Control") is not the identifier of an
/// accessor named after it: the code that reads the header answers.
#[test]
fn a_header_named_in_a_question_is_not_an_identifier_it_asks_for() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "web/response.py",
        "class Response:\n    def cache_control(self):\n        return self.headers.get(CACHE_CONTROL)\n",
    );
    write(
        root,
        "web/compress.py",
        "def should_compress(status, headers):\n    # Responses marked no-transform stay as they are.\n    if 'no-transform' in headers.get(CACHE_CONTROL, ''):\n        return False\n    return status not in NO_BODY\n",
    );
    write_unrelated(root, "web/util", 20);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let question = "Where does the compression skip responses whose Cache-Control header says no-transform?";
    let hits = search_explained(root, question, 3);
    assert_eq!(hits[0]["symbol"], "should_compress", "{hits:#?}");
    // Asked for alone, the name is still the accessor's.
    assert_eq!(search(root, "Cache-Control", 1)[0]["symbol"], "cache_control");
}

#[test]
fn tiny_definitions_packed_together_weigh_less_in_a_question_asked_as_one() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Two tiny accessors, packed into one chunk; a function with a helper
    // nested in it is one definition, not a pack.
    write(
        root,
        "net/accessors.py",
        "def connect_timeout(settings):\n    return settings[\"connect timeout\"]\n\n\ndef read_timeout(settings):\n    return settings[\"read timeout\"]\n",
    );
    write(
        root,
        "net/timeouts.py",
        "def timeouts(settings):\n    def read(key):\n        return settings[key + \" timeout\"]\n\n    return read(\"connect\"), read(\"read\")\n",
    );
    write_unrelated(root, "util", 20);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let packed_factor = |query: &str, path: &str| -> bool {
        let hits = search_explained(root, query, 5);
        let hit = hits
            .iter()
            .find(|h| h["path"] == path)
            .unwrap_or_else(|| panic!("{path}: {hits:#?}"));
        let factors = hit["explain"]["factors"].as_array().cloned().unwrap_or_default();
        factors
            .iter()
            .any(|f| f["reason"] == "tiny definitions packed, for a question")
    };
    // The pack has more of the words (BM25), so it comes first but for a
    // question asked as one.
    let question = "Where is the connect timeout read from the settings?";
    assert_eq!(
        paths(&search(root, question, 2)),
        ["net/timeouts.py", "net/accessors.py"]
    );
    assert!(packed_factor(question, "net/accessors.py"));
    assert!(!packed_factor(question, "net/timeouts.py"));
    // A doc comment or an issue title is often about one of them.
    let statement = "connect timeout read from the settings";
    assert_eq!(
        paths(&search(root, statement, 2)),
        ["net/accessors.py", "net/timeouts.py"]
    );
    assert!(!packed_factor(statement, "net/accessors.py"));
    // A question that names one of them asks for it.
    assert!(!packed_factor(
        "where is connect_timeout read from the settings?",
        "net/accessors.py"
    ));
}

#[test]
fn a_definition_whose_name_the_question_says_ranks_first() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Twins with the same terms in every column, so BM25 ties and the path
    // decides; only the names differ: questions leave out `get`, not `set`.
    write(root, "a_paint.py", "def set_color(self):\n    return self._shade\n");
    write(root, "z_paint.py", "def get_color(self):\n    return self._shade\n");
    write_unrelated(root, "util", 20);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = paths(&search(root, "the color of the brush", 2));
    assert_eq!(hits, ["z_paint.py", "a_paint.py"]);
    // A lone word is an identifier: exact names decide, not said words.
    let hits = paths(&search(root, "color", 2));
    assert_eq!(hits, ["a_paint.py", "z_paint.py"]);
}

#[test]
fn changelogs_and_config_files_rank_after_source_unless_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "src/retry.py",
        "def next_wait(attempt):\n    \"\"\"The retry backoff delay before the next attempt.\"\"\"\n    return min(30, 2 ** attempt)\n",
    );
    // Unrelated code, so the query's words are rare (BM25 gives words in most files no weight).
    for i in 0..12 {
        write(
            root,
            &format!("src/view_{i}.py"),
            &format!("def handler_{i}(request):\n    \"\"\"Parse the body and render page {i}.\"\"\"\n    return render(request)\n"),
        );
    }
    // Release notes and a config file say the words more often than the source.
    let notes = "- retry backoff delay is capped; retry backoff delay fixed\n".repeat(4);
    write(root, "CHANGELOG.md", &format!("# Changelog\n\n## 2.1\n\n{notes}"));
    write(
        root,
        "settings.yaml",
        &"retry:\n  backoff_delay: 3  # retry backoff delay\n".repeat(4),
    );
    // A page's front matter is prose too, though not a section of it.
    write(
        root,
        "site/retry.md",
        "---\ntitle: Retry backoff delay\ndescription: The retry backoff delay, and how the retry backoff delay grows.\n---\n\n# Waiting\n\nSee below.\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = search(root, "retry backoff delay", 5);
    assert_eq!(hits[0]["path"], "src/retry.py", "{hits:?}");
    let hits = search(root, "changelog retry backoff delay", 5);
    assert_eq!(hits[0]["path"], "CHANGELOG.md", "{hits:?}");
    let hits = search(root, "retry backoff delay yaml setting", 5);
    assert_eq!(hits[0]["path"], "settings.yaml", "{hits:?}");
}

#[test]
fn examples_tools_and_regression_suites_rank_after_source_unless_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(
        root,
        "src/frames.c",
        "/* Turns the frames of a sprite sheet into textures. */\nint load_all(struct sheet *s, int count, int flags)\n{\n\tint i;\n\tfor (i = 0; i < count; i++)\n\t\tload_frame(s, i, flags);\n\treturn count;\n}\n",
    );
    for i in 0..12 {
        write(
            root,
            &format!("src/view_{i}.c"),
            &format!("/* Draws page {i}. */\nint draw_{i}(void)\n{{\n\treturn render({i});\n}}\n"),
        );
    }
    // An example, a tool and a tmux-style `regress/` suite say the words more
    // often: without their factors each would outrank the source.
    let said = |times: usize| "sprite sheet frames textures ".repeat(times);
    write(
        root,
        "examples/sheet.c",
        &format!("/* {} */\nint example_sheet(void)\n{{\n\treturn 0;\n}}\n", said(2)),
    );
    write(
        root,
        "tools/sheet.sh",
        &format!("#!/bin/sh\n# {}\necho frames\n", said(3)),
    );
    write(root, "regress/sheet.sh", &format!("#!/bin/sh\n# {}\nexit 0\n", said(3)));
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = search(root, "sprite sheet frames textures", 5);
    assert_eq!(hits[0]["path"], "src/frames.c", "{hits:?}");
    let hits = search(root, "example of sprite sheet frames textures", 5);
    assert_eq!(hits[0]["path"], "examples/sheet.c", "{hits:?}");
    let hits = search(root, "test of sprite sheet frames textures", 5);
    assert_eq!(
        hits[0]["path"], "src/frames.c",
        "a test asked for is still softened: {hits:?}"
    );
}

#[test]
fn filters_by_path_language_and_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let all = search(root, "config", 20);
    assert!(paths(&all).iter().any(|p| p.ends_with(".py")) && paths(&all).iter().any(|p| p.ends_with(".rs")));

    let rust = ken_json(root, &["search", "--json", "--lang", "rust", "config"]);
    assert!(!rust.as_array().unwrap().is_empty());
    assert!(rust.as_array().unwrap().iter().all(|h| h["language"] == "rust"));

    let under_src = ken_json(root, &["search", "--json", "--path", "src/auth", "config"]);
    assert!(!under_src.as_array().unwrap().is_empty());
    assert!(paths(under_src.as_array().unwrap())
        .iter()
        .all(|p| p.starts_with("src/auth/")));

    let globbed = ken_json(root, &["search", "--json", "--path", "*.go", "config"]);
    assert!(paths(globbed.as_array().unwrap()).iter().all(|p| p.ends_with(".go")));

    let methods = ken_json(root, &["search", "--json", "--kind", "method", "config"]);
    let methods = methods.as_array().unwrap();
    assert!(!methods.is_empty());
    assert!(methods.iter().all(|h| h["kind"] == "method"));

    let bad = ken(root, &["search", "--path", "src/[", "x"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--path"));
}

#[test]
fn reindex_touches_only_changed_files_and_drops_deleted_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let first = ken_json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(first["parsed"], 6);

    // Files written just now are re-read once (mtime may tick again); settle that.
    std::thread::sleep(Duration::from_millis(2100));
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let again = ken_json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(
        (again["parsed"].as_u64(), again["unchanged"].as_u64()),
        (Some(0), Some(6)),
        "{again}"
    );

    write(root, "src/lib.rs", "pub fn brand_new_function_xyzzy() {}\n");
    write(root, "src/extra.py", "def freshly_added_plugh():\n    return 1\n");
    std::fs::remove_file(root.join("notes.txt")).unwrap();
    let third = ken_json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(third["parsed"], 2, "{third}");
    assert_eq!(third["removed"], 1, "{third}");
    assert_eq!(third["unchanged"], 4, "{third}");
    assert_eq!(third["files"], 6, "{third}");

    assert_eq!(search(root, "brand_new_function_xyzzy", 3)[0]["path"], "src/lib.rs");
    assert_eq!(search(root, "freshly_added_plugh", 3)[0]["path"], "src/extra.py");
    assert!(search(root, "render_template", 10)
        .iter()
        .all(|h| h["symbol"] != "render_template"));
    assert!(search(root, "deployment pipeline", 10)
        .iter()
        .all(|h| h["path"] != "notes.txt"));
}

#[test]
fn bad_files_are_skipped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(root, "good.py", "def good():\n    return 1\n");
    std::fs::write(root.join("image.dat2"), b"\x89PNG\r\n\x1a\n\0\0\0binary").unwrap();
    std::fs::write(root.join("latin1.py"), b"def caf\xe9():\n    pass\n").unwrap();
    let huge = std::fs::File::create(root.join("huge.py")).unwrap();
    huge.set_len(50 * 1024 * 1024).unwrap();
    write(root, "bundle.js", &format!("var a={};\n", "1+".repeat(6000)));
    write(
        root,
        "gen.go",
        "// Code generated by protoc-gen-go. DO NOT EDIT.\npackage x\n",
    );
    std::fs::create_dir(root.join("loop")).unwrap();
    std::os::unix::fs::symlink(root.join("loop"), root.join("loop/again")).unwrap();
    std::os::unix::fs::symlink(root.join("a-link"), root.join("b-link")).unwrap();
    std::os::unix::fs::symlink(root.join("b-link"), root.join("a-link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("outside")).unwrap();

    let report = ken_json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(report["files"], 1, "{report}");
    let skipped = &report["skipped"];
    assert_eq!(skipped["binary"], 1, "{report}");
    assert_eq!(skipped["invalid_utf8"], 1, "{report}");
    assert_eq!(skipped["too_large"], 1, "{report}");
    assert_eq!(skipped["minified"], 1, "{report}");
    assert_eq!(skipped["generated"], 1, "{report}");
    assert_eq!(skipped["symlink"], 4, "{report}");
    assert!(search(root, "root", 10).iter().all(|h| h["path"] != "outside"));
    assert_eq!(search(root, "good", 1)[0]["path"], "good.py");
}

#[test]
fn hostile_queries_are_plain_text() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    for query in [
        "\"unbalanced",
        "AND OR NOT",
        "config AND",
        "*",
        "-config",
        "NEAR(config user, 2)",
        "col:config",
        "^start",
        "a\"b\"c",
        "{}[]()",
        "'; DROP TABLE chunks; --",
        "\u{1F600} émoji ünïcode",
    ] {
        // `--` ends the options, as for any command line, so a query may start with `-`.
        let out = ken(root, &["search", "--json", "--", query]);
        assert!(
            out.status.success(),
            "{query}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v.is_array(), "{query}");
    }
    let hits = search(root, "user -config", 5);
    assert!(!hits.is_empty(), "`-config` still searches for config");
}

#[test]
fn missing_paths_and_missing_indexes_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let out = ken(tmp.path(), &["index", "--no-embed", "/definitely/not/here"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such directory"));

    let out = ken(tmp.path(), &["search", "anything"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ken index"));
    assert!(out.stdout.is_empty());

    let out = ken(tmp.path(), &["search", "--max-per-file", "0", "anything"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--max-per-file") && stderr.contains("at least 1"),
        "{stderr}"
    );

    // No results asked for is a mistake, not "no results".
    for args in [
        &["search", "-k", "0", "anything"][..],
        &["similar", "--limit", "0", "fn f() {}"],
    ] {
        let out = ken(tmp.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--limit") && stderr.contains("at least 1"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn works_from_subdirectories_and_with_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    sample_project(&root);
    let elsewhere = tempfile::tempdir().unwrap();
    ken_ok(elsewhere.path(), &["--root", root.to_str().unwrap(), "index", "-q"]);
    let hits = ken_json(
        elsewhere.path(),
        &["--root", root.to_str().unwrap(), "search", "--json", "render_template"],
    );
    assert_eq!(hits[0]["path"], "src/lib.rs");
    // From inside the repo, the index above is found.
    let hits = search(&root.join("src/auth"), "render_template", 3);
    assert_eq!(hits[0]["path"], "src/lib.rs");
    let status = ken_json(&root, &["status", "--json"]);
    assert_eq!(status["files"], 6);
    assert_eq!(status["branch"], "");
    assert!(status["index_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn a_stale_chunk_total_does_not_turn_common_words_into_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for i in 0..40 {
        write(
            root,
            &format!("pkg/mod_{i}.py"),
            &format!("def function_{i}(x):\n    \"\"\"Marker token{i}marker.\"\"\"\n    return x + {i}\n"),
        );
    }
    ken_ok(root, &["index", "--no-embed", "-q"]);
    assert_eq!(search(root, "token17marker", 10).len(), 1);
    // What a reader sees while a writer commits batches: the total stored at
    // the end of the last run lags behind the chunks (and term counts) since.
    {
        let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'chunk_count'", [])
            .unwrap();
    }
    let hits = search(root, "token17marker", 10);
    assert_eq!(hits.len(), 1, "only the chunk with the rare term: {hits:?}");
    assert_eq!(hits[0]["path"], "pkg/mod_17.py");
}

#[test]
fn a_chunk_with_only_the_commoner_words_of_a_query_is_still_found() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // "cache" and "evict" are each in 10% of the chunks, "quota" in one.
    for i in 0..40 {
        let words = match i % 10 {
            0 => "cache",
            1 => "evict",
            _ => "other",
        };
        write(
            root,
            &format!("pkg/mod_{i}.py"),
            &format!("def function_{i}(x):\n    return x.{words}_{i}\n"),
        );
    }
    write(root, "pkg/quota.py", "def check_quota(user):\n    return user.quota\n");
    write(
        root,
        "pkg/lru.py",
        "def lru_cache_evict(entries):\n    return entries.pop()\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = search(root, "cache evict quota", 5);
    let paths: Vec<&str> = hits.iter().filter_map(|h| h["path"].as_str()).collect();
    assert_eq!(
        paths.first(),
        Some(&"pkg/lru.py"),
        "the chunk with both common words first: {paths:?}"
    );
    assert!(paths.contains(&"pkg/quota.py"), "{paths:?}");
}

#[test]
fn common_term_counts_are_stored_kept_current_and_optional() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let module = |i: usize| {
        format!(
            "def handler_{i}(request):\n    \"\"\"Shared helper {i}.\"\"\"\n    return request.shared_value + {i}\n"
        )
    };
    for i in 0..150 {
        write(root, &format!("pkg/mod_{i}.py"), &module(i));
    }
    write(
        root,
        "pkg/special.py",
        "def special_case(request):\n    return request.shared_value * 2\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let db = root.join(".ken/index.db");
    let counts = || {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let stored: Option<i64> = conn
            .query_row("SELECT df FROM common_terms WHERE term = 'share'", [], |r| r.get(0))
            .optional()
            .unwrap();
        let counted: i64 = conn
            .query_row("SELECT doc FROM chunks_vocab WHERE term = 'share'", [], |r| r.get(0))
            .unwrap();
        (stored, counted)
    };
    let (stored, counted) = counts();
    assert!(counted >= 151, "every chunk has the word: {counted}");
    assert_eq!(
        stored,
        Some(counted),
        "the common term's count is stored as FTS5 counts it"
    );

    let query = "special shared value";
    let with_counts = search(root, query, 10);
    assert_eq!(with_counts[0]["path"], "pkg/special.py");
    // An index written before the counts were stored answers the same.
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("DROP TABLE common_terms; DELETE FROM meta WHERE key = 'common_terms_chunks';")
            .unwrap();
    }
    assert_eq!(search(root, query, 10), with_counts);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    assert_eq!(counts().0, Some(counted), "the next run stores them again");

    for i in 150..200 {
        write(root, &format!("pkg/mod_{i}.py"), &module(i));
    }
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let (stored, counted) = counts();
    assert!(counted >= 201);
    assert_eq!(stored, Some(counted), "a run that changed files recounts");
}

#[test]
fn an_index_of_another_schema_or_a_corrupt_one_is_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let db = root.join(".ken/index.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'", [])
            .unwrap();
    }
    let out = ken(root, &["search", "config"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("schema version 999"));
    let out = ken(root, &["index", "--no-embed"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("rebuilding"));
    assert_eq!(search(root, "render_template", 1)[0]["path"], "src/lib.rs");

    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(root.join(format!(".ken/index.db{suffix}")));
    }
    std::fs::write(&db, b"this is not a database, just garbage bytes".repeat(200)).unwrap();
    let out = ken(root, &["search", "config"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ken index"));
    ken_ok(root, &["index", "--no-embed", "-q"]);
    assert_eq!(search(root, "render_template", 1)[0]["path"], "src/lib.rs");
}

#[test]
fn an_interrupted_index_leaves_a_usable_index_and_the_next_run_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for i in 0..3000 {
        write(
            root,
            &format!("pkg{}/mod_{i}.py", i % 30),
            &format!("def function_{i}(x):\n    \"\"\"Unique marker token{i}marker.\"\"\"\n    return x + {i}\n\n\nclass Thing{i}:\n    def run(self):\n        return {i}\n"),
        );
    }
    let clean = ken_json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(clean["files"], 3000);
    let expected_chunks = clean["chunks"].clone();
    for kill_after_ms in [60u64, 150, 300, 600] {
        let _ = std::fs::remove_dir_all(root.join(".ken"));
        let mut child = std::process::Command::new(ken_bin())
            .args(["index", "--no-embed", "-q"])
            .current_dir(root)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(kill_after_ms));
        let _ = child.kill();
        let _ = child.wait();
        // Whatever was committed is readable and consistent.
        if root.join(".ken/index.db").exists() {
            let out = ken(root, &["status", "--json"]);
            if out.status.success() {
                let status: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert!(status["files"].as_u64().unwrap() <= 3000);
            }
        }
        let report = ken_json(root, &["index", "--no-embed", "--json"]);
        assert_eq!(report["files"], 3000, "after a kill at {kill_after_ms} ms: {report}");
        assert_eq!(
            report["chunks"], expected_chunks,
            "after a kill at {kill_after_ms} ms: {report}"
        );
        let hits = search(root, "token2999marker", 1);
        assert_eq!(hits[0]["path"], "pkg29/mod_2999.py");
    }
}

#[test]
fn changed_chunking_rules_re_chunk_every_file() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    sample_project(&root);
    ken_ok(&root, &["index", "--no-embed", "-q"]);
    // A copy of the grammar queries with Python's class pattern removed.
    let grammars = tmp.path().join("grammars");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("native-grammars");
    for entry in std::fs::read_dir(&src).unwrap().flatten() {
        let lang = entry.file_name();
        std::fs::create_dir_all(grammars.join(&lang)).unwrap();
        let query = std::fs::read_to_string(entry.path().join("chunks.scm")).unwrap();
        let query = if lang == "python" {
            "(function_definition name: (identifier) @name) @definition.function\n".to_string()
        } else {
            query
        };
        std::fs::write(grammars.join(&lang).join("chunks.scm"), query).unwrap();
    }
    let out = std::process::Command::new(ken_bin())
        .args(["index", "--no-embed", "--json"])
        .current_dir(&root)
        .env("KEN_GRAMMARS_DIR", &grammars)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("chunking rules changed"));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["parsed"], 6, "{report}");
    let hits = search(&root, "TokenValidator", 3);
    assert!(
        hits.iter().all(|h| h["kind"] != "class"),
        "no class chunks under the edited rules: {hits:?}"
    );
}

#[test]
fn kenignore_and_default_excludes_keep_files_out() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    write(root, ".kenignore", "docs/\n*.txt\n");
    write(root, "node_modules/lib/index.js", "function vendoredThing() {}\n");
    write(root, "target/debug/build.rs", "fn built_output() {}\n");
    let report = ken_json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(report["files"], 4, "{report}");
    assert!(report["languages"].get("markdown").is_none(), "{report}");
    assert!(search(root, "vendoredThing", 5).is_empty());
    // Opting in to vendored folders indexes them.
    let report = ken_json(root, &["index", "--no-embed", "--no-default-excludes", "--json"]);
    assert_eq!(report["files"], 6, "{report}");
    assert_eq!(search(root, "vendoredThing", 1)[0]["path"], "node_modules/lib/index.js");
}

#[test]
fn health_finds_inconsistencies_repairs_them_and_reports_stale_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let report = ken_json(root, &["health", "--json"]);
    assert_eq!(report["healthy"], true, "{report}");
    assert!(report["findings"].as_array().unwrap().is_empty(), "{report}");

    // Damage: a file version disappears under its chunks and catalog entry.
    {
        let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
        // Damage that ken's own writes (foreign keys on) can never cause.
        conn.execute_batch("PRAGMA foreign_keys = OFF; DELETE FROM files WHERE path = 'src/lib.rs';")
            .unwrap();
    }
    write(root, "notes.txt", "changed notes\n");
    let out = ken(root, &["health", "--json"]);
    assert_eq!(out.status.code(), Some(1), "unhealthy exits 1");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    assert!(checks.contains(&"chunks_without_files"), "{report}");
    assert!(checks.contains(&"catalog_without_files"), "{report}");
    assert!(checks.contains(&"files_changed_since_indexing"), "{report}");

    let out = ken(root, &["health", "--repair", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let report = ken_json(root, &["health", "--json"]);
    assert_eq!(report["healthy"], true, "{report}");
    // Re-indexing brings back what the repair dropped.
    ken_ok(root, &["index", "--no-embed", "-q"]);
    assert_eq!(search(root, "render_template", 1)[0]["path"], "src/lib.rs");
}

#[test]
fn knowledge_bases_are_searched_with_the_project_and_removed_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    let docs = tmp.path().join("handbook");
    sample_project(&project);
    write(
        &docs,
        "deploy.md",
        "# Deploying\n\nRotate the frobnicator signing keys every quarter.\n",
    );
    ken_ok(&project, &["index", "--no-embed", "-q"]);
    let added = ken_ok(&project, &["kb", "add", docs.to_str().unwrap(), "--no-embed"]);
    assert!(added.contains("`handbook`") && added.contains("1 files"), "{added}");
    assert!(
        !docs.join(".ken").exists(),
        "nothing is written into the knowledge base's folder"
    );
    let hits = search(&project, "frobnicator signing keys", 5);
    assert_eq!(hits[0]["base"], "handbook", "{hits:?}");
    assert_eq!(hits[0]["path"], "deploy.md");
    let project_hits = search(&project, "render_template", 3);
    assert_eq!(project_hits[0]["base"], "project");
    for refused in ["/", "/etc"] {
        let out = ken(&project, &["kb", "add", refused]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("refusing"), "{refused}");
    }
    let listed = ken_json(&project, &["kb", "list", "--json"]);
    assert_eq!(listed[0]["name"], "handbook");
    ken_ok(&project, &["kb", "remove", "handbook"]);
    assert!(search(&project, "frobnicator signing keys", 5)
        .iter()
        .all(|h| h["base"] == "project"));
    assert!(docs.join("deploy.md").exists());
}

#[test]
fn explain_says_how_each_score_was_made() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    write(
        root,
        "tests/test_jwt.py",
        "from auth.jwt import parse_config\n\ndef test_parse_config():\n    assert parse_config('x')\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let hits = search_explained(root, "parse_config", 5);
    for hit in &hits {
        assert_explained(hit);
        // Lexical only: no vector side to explain.
        assert!(hit["explain"].get("semantic").is_none(), "{hit}");
    }
    let reasons = |hit: &Value| -> Vec<String> {
        hit["explain"]["factors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["reason"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(hits[0]["symbol"], "parse_config");
    assert_eq!(reasons(&hits[0]), ["defines the identifier"]);
    assert!(hits[0]["explain"]["bm25"].as_f64().unwrap() > 0.0);
    let test_hit = hits
        .iter()
        .find(|h| h["path"] == "tests/test_jwt.py")
        .expect("the test mentions parse_config");
    assert!(reasons(test_hit).contains(&"test code".to_string()), "{test_hit}");
    // A question whose answers share a file: the later ones say so.
    let hits = search_explained(root, "token secret claims expiry config path", 10);
    hits.iter().for_each(assert_explained);
    let mut seen = std::collections::HashSet::new();
    let mut repeats = 0;
    for hit in &hits {
        let repeated = !seen.insert(hit["path"].as_str().unwrap().to_string());
        let said = reasons(hit).iter().any(|r| r.contains("of its file listed above"));
        assert_eq!(repeated, said, "{hit}");
        repeats += usize::from(repeated);
    }
    assert!(repeats > 0, "{hits:?}");
    // Without --explain, no explanation.
    let plain = search(root, "parse_config", 3);
    assert!(plain.iter().all(|h| h.get("explain").is_none()));
    let text = ken_ok(root, &["search", "--explain", "-k", "1", "parse_config"]);
    assert!(
        text.contains("bm25 ") && text.contains("× 3 defines the identifier"),
        "{text}"
    );
}

/// `KEN_MODEL_DIR=` (set, empty) is unset: the model is looked for in the
/// cache, never in the working directory, where a fetch would write it.
#[test]
fn an_empty_model_folder_variable_is_unset() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = ken_env(
        &work,
        &["model", "path"],
        &[
            ("KEN_MODEL_DIR", String::new()),
            ("KEN_CACHE_DIR", cache.display().to_string()),
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = cache.join("models").join("all-MiniLM-L6-v2");
    assert!(stderr.contains(&expected.display().to_string()), "{stderr}");
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);
}

/// `ken search --json --confidence` on the payments fixture, lexical.
fn confidence_of(root: &std::path::Path, query: &str) -> Value {
    let out = ken_json(root, &["search", "--json", "--confidence", "--mode", "lexical", query]);
    assert!(out["results"].is_array(), "{out}");
    out["confidence"].clone()
}

#[test]
fn a_searcher_counts_the_terms_anew_for_each_search() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    payments_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let searcher = ken::search::Searcher::open(root, &root.join(".ken")).unwrap();
    let req = ken::search::SearchRequest {
        mode: ken::search::SearchMode::Lexical,
        ..ken::search::SearchRequest::new("where is the kubernetes ingress for the ledger")
    };
    let note = || searcher.search_rated(&req).unwrap().1.note.unwrap_or_default();
    let before = note();
    assert!(before.contains("`kubernetes`"), "{before}");
    // The index gains the word; the same searcher's next search knows it
    // (a search remembers the counts it read only while it runs).
    write(
        root,
        "deploy/ingress.py",
        "def kubernetes_ingress(ledger):\n    return 'kubernetes ingress for the ledger'\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let after = note();
    assert!(!after.contains("`kubernetes`"), "{after}");
}

#[test]
fn a_long_lived_searcher_ranks_as_a_new_one_after_the_index_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    payments_project(root);
    let card = |extra: &str| {
        format!("def charge_card(payment):\n    \"\"\"Charge the card of a payment.\"\"\"\n    {extra}return gateway.charge(payment.card)\n")
    };
    write(root, "payments/zz_charge.py", &card(""));
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let req = ken::search::SearchRequest {
        mode: ken::search::SearchMode::Lexical,
        ..ken::search::SearchRequest::new("charge the card of a payment")
    };
    let ranked = |searcher: &ken::search::Searcher| -> Vec<(String, u32, f64)> {
        let hits = searcher.search(&req).unwrap();
        hits.iter().map(|h| (h.path.clone(), h.start_line, h.score)).collect()
    };
    let searcher = ken::search::Searcher::open(root, &root.join(".ken")).unwrap();
    let first = ranked(&searcher);
    assert!(first.len() >= 3, "{first:?}");
    // The second search ranks with the row lengths it keeps: the same ranking.
    assert_eq!(ranked(&searcher), first);
    // Every file goes, then comes back, one of them longer: the new chunks
    // take the freed rowids, which the kept lengths must not describe.
    std::fs::remove_dir_all(root.join("payments")).unwrap();
    ken_ok(root, &["index", "--no-embed", "-q"]);
    payments_project(root);
    write(
        root,
        "payments/zz_charge.py",
        &card(&"audit.log(payment)\n    ".repeat(40)),
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let after = ranked(&searcher);
    assert_ne!(after, first, "the longer chunk scores lower");
    let fresh = ken::search::Searcher::open(root, &root.join(".ken")).unwrap();
    assert_eq!(after, ranked(&fresh));
    assert_eq!(ranked(&searcher), after);
}

#[test]
fn a_search_ranks_with_the_term_counts_of_its_index_never_older_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // `ledger` in a fifth of the chunks: a term whose count is stored, and matched.
    for i in 0..100 {
        write(
            root,
            &format!("books/entry_{i}.py"),
            &format!("def post_{i}(ledger):\n    return ledger.append({i})\n"),
        );
    }
    for i in 0..400 {
        write(
            root,
            &format!("misc/util_{i}.py"),
            &format!("def helper_{i}(value):\n    return value * {i}\n"),
        );
    }
    write(
        root,
        "books/audit.py",
        "def audit(ledger, auditor):\n    return auditor.check(ledger)\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let index = root.join(".ken/index.db");
    let db = rusqlite::Connection::open(&index).unwrap();
    let stored: Option<i64> = db
        .query_row("SELECT df FROM common_terms WHERE term = 'ledger'", [], |r| r.get(0))
        .optional()
        .unwrap();
    assert!(stored.is_some_and(|df| df >= 100), "{stored:?}");
    let req = ken::search::SearchRequest {
        mode: ken::search::SearchMode::Lexical,
        ..ken::search::SearchRequest::new("audit the ledger")
    };
    // FTS5's own bm25() counts every term itself: the reference.
    let ranked = |stock: bool| -> Vec<(String, f64)> {
        let searcher = ken::search::Searcher::open(root, &root.join(".ken")).unwrap();
        searcher.rank_with_stock_bm25(stock);
        let hits = searcher.search(&req).unwrap();
        hits.iter().map(|h| (h.path.clone(), h.score)).collect()
    };
    assert!(ranked(false).len() >= 10);
    assert_eq!(ranked(false), ranked(true));
    // Counts the index has moved past (a watcher's small runs recount only
    // after a 5% drift): the search counts the terms itself.
    db.execute_batch(
        "UPDATE common_terms SET df = df + 10 WHERE term = 'ledger';
         UPDATE meta SET value = value + 1 WHERE key = 'lexical_generation';",
    )
    .unwrap();
    assert_eq!(ranked(false), ranked(true));
}

/// Words no chunk has that only word the question (common English words)
/// do not flag it; a topic's words still do.
#[test]
fn a_question_put_in_words_the_code_lacks_is_not_flagged_for_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    payments_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let worded = confidence_of(
        root,
        "how is a declined card payment tried again several times with a longer delay each round",
    );
    assert_ne!(worded["level"], "low", "{worded}");
    // Nor do values given as examples (they start with a digit).
    let valued = confidence_of(
        root,
        "how is a declined card payment retried with backoff up to 5x, 250ms apart",
    );
    assert_ne!(valued["level"], "low", "{valued}");
    // The topic's own words, absent, still flag it (and are named), the
    // common ones beside them are not named.
    let off = confidence_of(
        root,
        "how is a declined card payment tried again through the kubernetes ingress",
    );
    assert_eq!(off["level"], "low", "{off}");
    let note = off["note"].as_str().unwrap_or_default();
    assert!(note.contains("`kubernetes`") && !note.contains("`again`"), "{note}");
}

#[test]
fn a_question_the_repository_cannot_answer_is_flagged_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    payments_project(root);
    ken_ok(root, &["index", "--no-embed", "-q"]);

    let off = confidence_of(root, "where is the oauth2 token refreshed for the kubernetes ingress");
    assert_eq!(off["level"], "low", "{off}");
    let note = off["note"].as_str().unwrap_or_default();
    assert!(note.starts_with("no strong match"), "{note}");
    assert!(note.contains("`kubernetes`") && note.contains("`oauth2`"), "{note}");

    // A name that is defined nowhere is flagged; one that is, is a match.
    let missing = confidence_of(root, "refreshKubernetesToken");
    assert_eq!(missing["level"], "low", "{missing}");
    let defined = confidence_of(root, "frobnicate_ledger_totals");
    assert_eq!(defined["level"], "high", "{defined}");
    assert!(defined.get("note").is_none(), "{defined}");

    // A question whose answer is in the repository is not flagged.
    let real = confidence_of(root, "how is a declined card payment retried with backoff");
    assert_ne!(real["level"], "low", "{real}");
    assert!(
        real["score"].as_f64().unwrap() > off["score"].as_f64().unwrap(),
        "{real} vs {off}"
    );

    // Text output says it before the results; the default JSON stays a list.
    let text = ken_ok(
        root,
        &[
            "search",
            "--mode",
            "lexical",
            "oauth2 kubernetes ingress for the ledger",
        ],
    );
    assert!(text.starts_with("no strong match"), "{text}");
    let plain = ken_json(
        root,
        &[
            "search",
            "--json",
            "--mode",
            "lexical",
            "oauth2 kubernetes ingress for the ledger",
        ],
    );
    assert!(plain.is_array(), "{plain}");
}

#[test]
fn a_bad_setting_stops_ken_at_once_and_names_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    for (name, value) in [
        ("KEN_FUSION", "sum"),
        ("KEN_EMBED_MAX_TOKENS", "4096"),
        ("KEN_EMBED_BATCH", "many"),
    ] {
        let out = common::ken_env(dir.path(), &["status"], &[(name, value.to_string())]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}={value}: {err}");
        assert!(err.contains(name), "{name}={value}: {err}");
    }
    // A misspelled setting is a warning naming the one meant; ken goes on.
    let out = common::ken_env(
        dir.path(),
        &["model", "list"],
        &[("KEN_FUSION_WEIGHT", "1,1".to_string())],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("did you mean KEN_FUSION_WEIGHTS"), "{err}");
}
