//! HTTP embedding providers: OpenAI-compatible `/embeddings` (OpenAI, LM
//! Studio, vLLM, llama.cpp, TEI, Jina, Voyage, Mistral...) and Ollama's
//! `/api/embed`.
//!
//! Indexing: requests are batched and sent `concurrency` at a time, inputs
//! are cut to the model's context, every attempt has a timeout on its whole
//! duration (connecting to the last byte of the body), and 429/5xx/network
//! failures are retried with exponential backoff (honouring `Retry-After`)
//! within a total time per batch. A response body is read with a cap on its
//! size (from the batch size and the dimensions), so a provider streaming
//! without end costs a few megabytes, not the machine's memory.
//!
//! Searching: a query vector gets one attempt within a short budget
//! (`KEN_QUERY_EMBED_TIMEOUT_MS`), and a provider that has just failed is not
//! asked again for a back-off (the circuit breaker, [`Trip`]), so a search
//! answers lexically at once instead of waiting on a provider that is down.
//!
//! Vectors that are zero, NaN or infinite are rejected with a warning naming
//! the provider: they are not stored.
//!
//! The API key is read from an environment variable, sent only as a header,
//! and never appears in errors or logs.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::config::ProviderSettings;
use crate::embed::{Embedder, InputKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// `POST {base_url}/embeddings` with `{"model", "input": [...]}`.
    OpenAi,
    /// `POST {base_url}/api/embed` with `{"model", "input": [...]}`.
    Ollama,
}

/// Settings of an HTTP embedder. Stored in the index (without the key) so
/// searches embed queries the way chunks were embedded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    pub base_url: String,
    pub model: String,
    /// Requested output dimensions (OpenAI `dimensions`); learnt from the
    /// first response when unset.
    pub dimensions: Option<usize>,
    /// Name of the environment variable that holds the API key.
    pub api_key_env: Option<String>,
    pub batch_size: usize,
    pub concurrency: usize,
    /// Seconds one attempt may take, from connecting to the end of the body.
    pub timeout_secs: u64,
    pub retries: u32,
    /// Seconds all attempts for one batch may take together, waits between
    /// them included (0, in indexes made before it existed: 4 × `timeout_secs`).
    #[serde(default)]
    pub total_timeout_secs: u64,
    /// Inputs are cut to this many characters (about 4 per token).
    pub max_chars: usize,
}

impl ProviderConfig {
    /// The provider configured by `KEN_EMBED_*` environment variables, if
    /// `KEN_EMBED_PROVIDER` is `openai` or `ollama`.
    pub fn from_env() -> Result<Option<ProviderConfig>> {
        ProviderConfig::from_settings(&crate::config::settings().provider)
    }

    /// The provider `settings` describe, with the defaults of its kind.
    pub fn from_settings(settings: &ProviderSettings) -> Result<Option<ProviderConfig>> {
        let kind = match settings.kind.as_deref() {
            None => return Ok(None),
            Some("openai") => ProviderKind::OpenAi,
            Some("ollama") => ProviderKind::Ollama,
            Some(other) => bail!("KEN_EMBED_PROVIDER={other}: expected local, openai or ollama"),
        };
        let base_url = settings.url.clone().unwrap_or_else(|| match kind {
            ProviderKind::OpenAi => "https://api.openai.com/v1".to_string(),
            ProviderKind::Ollama => "http://127.0.0.1:11434".to_string(),
        });
        let model = settings
            .model
            .clone()
            .context("KEN_EMBED_MODEL must name the provider's embedding model")?;
        let api_key_env = settings.api_key_env.clone().or_else(|| match kind {
            ProviderKind::OpenAi => Some("OPENAI_API_KEY".to_string()),
            ProviderKind::Ollama => None,
        });
        let timeout_secs = settings.timeout_secs.unwrap_or(30).max(1);
        Ok(Some(ProviderConfig {
            kind,
            base_url,
            model,
            dimensions: settings.dimensions,
            api_key_env,
            batch_size: settings.batch.unwrap_or(32).max(1) as usize,
            concurrency: settings.concurrency.unwrap_or(2).max(1) as usize,
            timeout_secs,
            retries: settings.retries.unwrap_or(3) as u32,
            total_timeout_secs: settings
                .total_timeout_secs
                .unwrap_or(4 * timeout_secs)
                .max(timeout_secs),
            max_chars: settings.max_chars.unwrap_or(8000).max(16) as usize,
        }))
    }

    /// How long all attempts for one batch may take together.
    fn total_timeout(&self) -> Duration {
        let secs = match self.total_timeout_secs {
            0 => 4 * self.timeout_secs,
            n => n.max(self.timeout_secs),
        };
        Duration::from_secs(secs)
    }
}

/// How searches use a provider: settings of the searching process, read from
/// its environment (the index stores how chunks were embedded, not these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuerySettings {
    /// How long a search waits for its query vector before it answers
    /// lexically: `KEN_QUERY_EMBED_TIMEOUT_MS`, default 2000.
    pub timeout: Duration,
    /// How long searches skip a provider after it failed one, doubled on
    /// each failure in a row up to 16 times: `KEN_QUERY_EMBED_BACKOFF_SECS`,
    /// default 10 (0: always ask it).
    pub backoff: Duration,
}

impl QuerySettings {
    pub fn from_env() -> Result<QuerySettings> {
        let settings = &crate::config::settings().provider;
        Ok(QuerySettings {
            timeout: Duration::from_millis(settings.query_timeout_ms.unwrap_or(2000).max(1)),
            backoff: Duration::from_secs(settings.query_backoff_secs.unwrap_or(10)),
        })
    }
}

/// Dimensions assumed for the response cap before the first response tells.
const DIMENSIONS_BEFORE_KNOWN: usize = 8192;
/// Bytes a number may take in a response (`-0.012345678901234567,` is 22;
/// pretty-printed with indentation, about 40).
const BYTES_PER_NUMBER: usize = 48;
/// Bytes of a response besides its numbers: per vector, and in all.
const BYTES_PER_VECTOR: usize = 1024;
const RESPONSE_SLACK: usize = 1 << 20;
/// Bytes of an error response kept for its message.
const ERROR_BODY_CAP: usize = 64 * 1024;

pub struct HttpEmbedder {
    config: ProviderConfig,
    query: QuerySettings,
    id: String,
    client: reqwest::blocking::Client,
    api_key: Option<String>,
    dimensions: std::sync::OnceLock<usize>,
}

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq)]
enum Failure {
    /// No complete answer within this time.
    Timeout(Duration),
    /// No connection could be made.
    Connect,
    /// The connection failed otherwise, or broke off.
    Network,
    /// An HTTP error status, with the `Retry-After` wait and the start of the body.
    Status {
        status: u16,
        retry_after: Option<Duration>,
        text: String,
    },
    /// A response body larger than the cap (bytes).
    TooLarge(usize),
    /// An answer not in the API's format.
    Invalid(String),
}

impl Failure {
    fn of_send(e: &reqwest::Error, timeout: Duration) -> Failure {
        if e.is_timeout() {
            Failure::Timeout(timeout)
        } else if e.is_connect() {
            Failure::Connect
        } else {
            Failure::Network
        }
    }

    /// Whether trying again may help: rate limits, server and network errors.
    fn retryable(&self) -> bool {
        match self {
            Failure::Timeout(_) | Failure::Connect | Failure::Network => true,
            Failure::Status { status, .. } => *status == 429 || *status >= 500,
            Failure::TooLarge(_) | Failure::Invalid(_) => false,
        }
    }

    /// What the provider did, to follow its name.
    fn describe(&self) -> String {
        match self {
            Failure::Timeout(t) => format!("did not answer within {}", duration_text(*t)),
            Failure::Connect => "could not be reached (connection refused or failed)".to_string(),
            Failure::Network => "broke off the connection".to_string(),
            Failure::Status { status, text, .. } => {
                let reason = reqwest::StatusCode::from_u16(*status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("");
                format!("answered HTTP {status} {reason}: {text}")
            }
            Failure::TooLarge(cap) => format!(
                "sent a response larger than {:.1} MB, more than this batch's vectors can take; not read further",
                *cap as f64 / 1e6
            ),
            Failure::Invalid(what) => format!("sent an unexpected response: {what}"),
        }
    }
}

/// `2 s`, `2.5 s`, `500 ms`.
fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl HttpEmbedder {
    pub fn new(config: ProviderConfig) -> Result<HttpEmbedder> {
        crate::embed::http::install_crypto_provider();
        let query = QuerySettings::from_env()?;
        let api_key = match &config.api_key_env {
            Some(name) => std::env::var(name).ok().filter(|k| !k.is_empty()),
            None => None,
        };
        let client = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(config.timeout_secs.min(10)))
            .timeout(Duration::from_secs(config.timeout_secs))
            .build()
            .context("building the HTTP client")?;
        let kind = match config.kind {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Ollama => "ollama",
        };
        let text = crate::embed::text::CHUNK_TEXT_VERSION;
        let id = match config.dimensions {
            Some(d) => format!("{kind}:{}@{d}/text{text}", config.model),
            None => format!("{kind}:{}/text{text}", config.model),
        };
        let dimensions = std::sync::OnceLock::new();
        if let Some(d) = config.dimensions {
            let _ = dimensions.set(d);
        }
        Ok(HttpEmbedder {
            config,
            query,
            id,
            client,
            api_key,
            dimensions,
        })
    }

    fn endpoint(&self) -> String {
        let base = self.config.base_url.trim_end_matches('/');
        match self.config.kind {
            ProviderKind::OpenAi => format!("{base}/embeddings"),
            ProviderKind::Ollama => format!("{base}/api/embed"),
        }
    }

    /// The endpoint as messages show it: without a user name or password.
    fn shown_endpoint(&self) -> String {
        let endpoint = self.endpoint();
        match reqwest::Url::parse(&endpoint) {
            Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
                let _ = url.set_username("");
                let _ = url.set_password(None);
                url.to_string()
            }
            _ => endpoint,
        }
    }

    fn request_body(&self, inputs: &[String]) -> serde_json::Value {
        let mut body = json!({ "model": self.config.model, "input": inputs });
        if let (ProviderKind::OpenAi, Some(d)) = (self.config.kind, self.config.dimensions) {
            body["dimensions"] = json!(d);
        }
        body
    }

    /// A text cut to the provider's input size; never empty.
    fn cut(&self, text: &str) -> String {
        let mut end = text.len().min(self.config.max_chars);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let cut = text[..end].trim();
        // Providers reject empty input; a lone space embeds as "nothing".
        if cut.is_empty() {
            " ".to_string()
        } else {
            cut.to_string()
        }
    }

    /// The most bytes a response for `inputs` vectors may take.
    fn response_cap(&self, inputs: usize) -> usize {
        let dimensions = self
            .dimensions
            .get()
            .map_or(DIMENSIONS_BEFORE_KNOWN, |&d| (2 * d).max(1024));
        inputs.max(1) * (dimensions * BYTES_PER_NUMBER + BYTES_PER_VECTOR) + RESPONSE_SLACK
    }

    /// One request for `inputs`, over within `timeout`, body included: one
    /// vector per input (empty for a degenerate one, see [`Self::parse`]).
    fn attempt(&self, body: &serde_json::Value, inputs: usize, timeout: Duration) -> Result<Vec<Vec<f32>>, Failure> {
        let started = Instant::now();
        let mut req = self.client.post(self.endpoint()).json(body).timeout(timeout);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().map_err(|e| Failure::of_send(&e, timeout))?;
        let deadline = started + timeout;
        let status = resp.status();
        if !status.is_success() {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let mut text = read_capped(resp, ERROR_BODY_CAP, deadline, timeout)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            // A server echoing the request's key does not get it into ken's messages.
            if let Some(key) = &self.api_key {
                text = text.replace(key.as_str(), "[API key]");
            }
            let text = text.trim().chars().take(300).collect();
            return Err(Failure::Status {
                status: status.as_u16(),
                retry_after,
                text,
            });
        }
        let bytes = read_capped(resp, self.response_cap(inputs), deadline, timeout)?;
        let value = parse_json(&bytes).ok_or_else(|| Failure::Invalid("not JSON".to_string()))?;
        self.parse(&value, inputs)
            .map_err(|e| Failure::Invalid(format!("{e:#}")))
    }

    /// One request for one batch, retried on rate limits, server errors and
    /// network failures while the batch's total time lasts.
    fn request(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>> {
        let body = self.request_body(inputs);
        let endpoint = self.endpoint();
        let per_attempt = Duration::from_secs(self.config.timeout_secs);
        let total = self.config.total_timeout();
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            let left = total.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
            let failure = match self.attempt(&body, inputs.len(), per_attempt.min(left)) {
                Ok(vectors) => {
                    if Trip::last(&endpoint).is_some() {
                        Trip::clear(&endpoint);
                    }
                    let degenerate = vectors.iter().filter(|v| v.is_empty()).count();
                    if degenerate > 0 {
                        tracing::warn!(
                            "the embedding provider {} ({}) returned {degenerate} of {} vectors zero, NaN or \
                             infinite; they are not stored",
                            self.shown_endpoint(),
                            self.config.model,
                            vectors.len()
                        );
                    }
                    return Ok(vectors);
                }
                Err(failure) => failure,
            };
            let backoff = Duration::from_millis(500 * (1 << attempt.min(4)));
            let wait = match &failure {
                Failure::Status {
                    retry_after: Some(wait),
                    ..
                } => *wait,
                _ => backoff,
            }
            .min(Duration::from_secs(30));
            let out_of_time = started.elapsed() + wait >= total;
            if !failure.retryable() || attempt >= self.config.retries || out_of_time {
                if failure.retryable() {
                    // Unreachable or overloaded: searches skip it for a while too.
                    Trip::record(&endpoint, &failure.describe(), self.query.backoff);
                }
                return Err(anyhow!(
                    "the embedding provider {} {}",
                    self.shown_endpoint(),
                    failure.describe()
                )
                .context(format!(
                    "embedding with {} failed after {} attempt(s) in {}",
                    self.id,
                    attempt + 1,
                    duration_text(Duration::from_millis(started.elapsed().as_millis() as u64))
                )));
            }
            std::thread::sleep(wait);
            attempt += 1;
        }
    }

    /// One text embedded for a search that waits on it: a single attempt
    /// within the query budget, and none while the provider's breaker is
    /// open (it failed a moment ago).
    fn embed_for_search(&self, text: &str) -> Result<Vec<f32>> {
        let endpoint = self.endpoint();
        let shown = self.shown_endpoint();
        let trip = Trip::last(&endpoint);
        if let Some(trip) = &trip {
            let now = now_ms();
            if let Some(left) = trip.left(self.query.backoff, now) {
                let ago = match now.saturating_sub(trip.at_ms) / 1000 {
                    0 => "a moment ago".to_string(),
                    secs => format!("{} ago", duration_text(Duration::from_secs(secs))),
                };
                bail!(
                    "the embedding provider {shown} is skipped for {}: {ago} it {}",
                    duration_text(Duration::from_secs(left.as_secs().max(1))),
                    trip.reason
                );
            }
        }
        let body = self.request_body(&[self.cut(text)]);
        match self.attempt(&body, 1, self.query.timeout) {
            Ok(vectors) => {
                if trip.is_some() {
                    Trip::clear(&endpoint);
                }
                match vectors.into_iter().next() {
                    Some(v) if !v.is_empty() => Ok(v),
                    _ => bail!("the embedding provider {shown} returned a zero, NaN or infinite vector for the query"),
                }
            }
            Err(failure) => {
                Trip::record(&endpoint, &failure.describe(), self.query.backoff);
                bail!("the embedding provider {shown} {}", failure.describe())
            }
        }
    }

    /// The vectors of a response, unit length; a degenerate one (zero, NaN
    /// or infinite) is empty.
    fn parse(&self, value: &serde_json::Value, expected: usize) -> Result<Vec<Vec<f32>>> {
        let to_vec = |v: &serde_json::Value| -> Result<Vec<f32>> {
            v.as_array()
                .context("an embedding is not a list")?
                .iter()
                .map(|x| match x {
                    // NaN and infinities, which JSON cannot spell (see `parse_json`).
                    serde_json::Value::Null => Ok(f32::NAN),
                    _ => x.as_f64().map(|f| f as f32).context("an embedding has a non-number"),
                })
                .collect()
        };
        let mut vectors: Vec<Vec<f32>> = match self.config.kind {
            ProviderKind::OpenAi => {
                let mut data: Vec<&serde_json::Value> =
                    value["data"].as_array().context("no `data` list")?.iter().collect();
                data.sort_by_key(|d| d["index"].as_u64().unwrap_or(0));
                data.iter().map(|d| to_vec(&d["embedding"])).collect::<Result<_>>()?
            }
            ProviderKind::Ollama => value["embeddings"]
                .as_array()
                .context("no `embeddings` list")?
                .iter()
                .map(to_vec)
                .collect::<Result<_>>()?,
        };
        if vectors.len() != expected {
            bail!("{} vectors for {expected} inputs", vectors.len());
        }
        let dims = vectors.first().map_or(0, Vec::len);
        if dims == 0 || vectors.iter().any(|v| v.len() != dims) {
            bail!("vectors of unequal or zero length");
        }
        let known = *self.dimensions.get_or_init(|| dims);
        if known != dims {
            bail!("{dims}-dimensional vectors, expected {known}");
        }
        for v in &mut vectors {
            // In f64: a sum of f32 squares overflows for large values.
            let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
            if norm.is_finite() && norm > 0.0 && v.iter().all(|x| x.is_finite()) {
                v.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
            } else {
                v.clear();
            }
        }
        Ok(vectors)
    }
}

/// A response body, read in pieces: at most `cap` bytes, and over by
/// `deadline` (a provider dripping bytes is as stuck as a silent one).
fn read_capped(
    mut resp: reqwest::blocking::Response,
    cap: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<Vec<u8>, Failure> {
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(Failure::TooLarge(cap));
    }
    let mut body = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if Instant::now() >= deadline {
            return Err(Failure::Timeout(timeout));
        }
        match resp.read(&mut buf) {
            Ok(0) => return Ok(body),
            Ok(n) => {
                if body.len() + n > cap {
                    return Err(Failure::TooLarge(cap));
                }
                body.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) if Instant::now() >= deadline => return Err(Failure::Timeout(timeout)),
            Err(e) if is_timeout(&e) => return Err(Failure::Timeout(timeout)),
            Err(_) => return Err(Failure::Network),
        }
    }
}

/// Whether a read failed on reqwest's timeout (it wraps its error in an `io::Error`).
fn is_timeout(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<reqwest::Error>())
            .is_some_and(reqwest::Error::is_timeout)
}

/// A JSON response; one spelling NaN or infinities as bare words (Python's
/// `json.dumps` does) is read with those as `null`, which [`HttpEmbedder::parse`]
/// rejects as degenerate vectors rather than failing the whole batch.
fn parse_json(bytes: &[u8]) -> Option<serde_json::Value> {
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Some(value);
    }
    let text = std::str::from_utf8(bytes).ok()?;
    if !text.contains("NaN") && !text.contains("Infinity") {
        return None;
    }
    let cleaned = text
        .replace("-Infinity", "null")
        .replace("Infinity", "null")
        .replace("NaN", "null");
    serde_json::from_str(&cleaned).ok()
}

impl Embedder for HttpEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        self.dimensions.get().copied().unwrap_or(0)
    }

    fn preferred_batch(&self) -> usize {
        self.config.batch_size * self.config.concurrency
    }

    fn embed(&self, texts: &[&str], _kind: InputKind) -> Result<Vec<Vec<f32>>> {
        let inputs: Vec<String> = texts.iter().map(|t| self.cut(t)).collect();
        let batches: Vec<&[String]> = inputs.chunks(self.config.batch_size).collect();
        let mut out = Vec::with_capacity(texts.len());
        for group in batches.chunks(self.config.concurrency) {
            let group_results: Vec<Result<Vec<Vec<f32>>>> = std::thread::scope(|scope| {
                let handles: Vec<_> = group
                    .iter()
                    .map(|batch| scope.spawn(move || self.request(batch)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow!("an embedding request panicked")))
                    })
                    .collect()
            });
            // A failed group ends the call: the next ones would wait on the same provider.
            for r in group_results {
                out.extend(r?);
            }
        }
        Ok(out)
    }

    fn embed_now(&self, text: &str, _kind: InputKind) -> Result<Vec<f32>> {
        self.embed_for_search(text)
    }
}

/// The query path's circuit breaker, per endpoint: the last failure not
/// followed by a success. While it is recent (the back-off, doubled on each
/// failure in a row), searches do not ask the provider and answer lexically
/// at once. Kept in a small file of the per-user cache, so the next `ken
/// search` process knows too, and in memory when the file cannot be written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Trip {
    /// Failures in a row.
    failures: u32,
    /// When the last one happened (milliseconds since the Unix epoch).
    at_ms: u64,
    /// What the provider did (`did not answer within 2 s`).
    reason: String,
}

/// The back-off doubles up to this many times.
const MAX_BACKOFF_DOUBLINGS: u32 = 4;

impl Trip {
    fn backoff(&self, first: Duration) -> Duration {
        first * (1 << self.failures.saturating_sub(1).min(MAX_BACKOFF_DOUBLINGS))
    }

    /// How much longer searches skip the provider, at `now_ms`.
    fn left(&self, first: Duration, now_ms: u64) -> Option<Duration> {
        let until = self.at_ms.saturating_add(self.backoff(first).as_millis() as u64);
        (now_ms < until).then(|| Duration::from_millis(until - now_ms))
    }

    /// The trip after another failure at `now_ms`: one more in a row unless
    /// the last was long ago (twice its back-off).
    fn then_failed(previous: Option<&Trip>, reason: &str, first: Duration, now_ms: u64) -> Trip {
        let failures = match previous {
            Some(p) if now_ms.saturating_sub(p.at_ms) <= 2 * p.backoff(first).as_millis() as u64 => {
                p.failures.saturating_add(1)
            }
            _ => 1,
        };
        let reason: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(200)
            .collect();
        Trip {
            failures,
            at_ms: now_ms,
            reason,
        }
    }

    fn encode(&self) -> String {
        format!("{} {} {}\n", self.failures, self.at_ms, self.reason)
    }

    fn decode(text: &str) -> Option<Trip> {
        let mut parts = text.trim_end().splitn(3, ' ');
        Some(Trip {
            failures: parts.next()?.parse().ok()?,
            at_ms: parts.next()?.parse().ok()?,
            reason: parts.next().unwrap_or_default().to_string(),
        })
    }

    /// The file of `endpoint`'s trip: named by a hash of the URL, which it
    /// does not contain.
    fn file(endpoint: &str) -> PathBuf {
        let hash = crate::store::content_hash(endpoint.as_bytes()) as u64;
        crate::embed::model::cache_root()
            .join("providers")
            .join(format!("{hash:016x}.trip"))
    }

    fn memory() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, Trip>> {
        static TRIPS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Trip>>> =
            std::sync::OnceLock::new();
        TRIPS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `endpoint`'s last failure not followed by a success, if any.
    fn last(endpoint: &str) -> Option<Trip> {
        let on_disk = std::fs::read_to_string(Trip::file(endpoint))
            .ok()
            .and_then(|t| Trip::decode(&t));
        on_disk.or_else(|| Trip::memory().get(endpoint).cloned())
    }

    fn record(endpoint: &str, reason: &str, first: Duration) -> Trip {
        let trip = Trip::then_failed(Trip::last(endpoint).as_ref(), reason, first, now_ms());
        let path = Trip::file(endpoint);
        let written = path.parent().is_some_and(|dir| std::fs::create_dir_all(dir).is_ok()) && {
            let temp = path.with_extension(format!("{}.tmp", std::process::id()));
            std::fs::write(&temp, trip.encode()).is_ok() && std::fs::rename(&temp, &path).is_ok()
        };
        let mut memory = Trip::memory();
        if written {
            memory.remove(endpoint);
        } else {
            memory.insert(endpoint.to_string(), trip.clone());
        }
        trip
    }

    fn clear(endpoint: &str) {
        let _ = std::fs::remove_file(Trip::file(endpoint));
        Trip::memory().remove(endpoint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_backs_off_longer_on_failures_in_a_row() {
        let first = Duration::from_secs(10);
        let one = Trip::then_failed(None, "did not answer within 2 s", first, 1_000_000);
        assert_eq!(one.failures, 1);
        assert_eq!(one.left(first, 1_000_000), Some(Duration::from_secs(10)));
        assert_eq!(one.left(first, 1_004_000), Some(Duration::from_secs(6)));
        assert_eq!(one.left(first, 1_010_000), None, "tried again after the back-off");
        // It fails again when tried: twice the back-off.
        let two = Trip::then_failed(Some(&one), "could not be reached", first, 1_010_000);
        assert_eq!((two.failures, two.backoff(first)), (2, Duration::from_secs(20)));
        let mut trip = two;
        for _ in 0..10 {
            trip = Trip::then_failed(
                Some(&trip),
                "x",
                first,
                trip.at_ms + trip.backoff(first).as_millis() as u64,
            );
        }
        assert_eq!(trip.backoff(first), Duration::from_secs(160), "capped");
        // A failure long after the last starts over.
        let later = Trip::then_failed(Some(&one), "x", first, 1_000_000 + 3_600_000);
        assert_eq!(later.failures, 1);
        // Back-off 0: the breaker never opens.
        assert_eq!(one.left(Duration::ZERO, 1_000_000), None);
    }

    #[test]
    fn a_trip_survives_its_file_format() {
        let trip = Trip::then_failed(
            None,
            "answered HTTP 503 Service Unavailable:\nbusy",
            Duration::from_secs(1),
            42,
        );
        assert_eq!(trip.reason, "answered HTTP 503 Service Unavailable: busy");
        assert_eq!(Trip::decode(&trip.encode()), Some(trip));
        assert_eq!(Trip::decode("garbage"), None);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_text(Duration::from_millis(2000)), "2 s");
        assert_eq!(duration_text(Duration::from_millis(2500)), "2.5 s");
        assert_eq!(duration_text(Duration::from_millis(300)), "300 ms");
    }

    #[test]
    fn nan_and_infinities_spelled_as_words_are_read_as_null() {
        assert_eq!(
            parse_json(br#"{"data":[{"embedding":[NaN,-Infinity,1.0]}]}"#).unwrap(),
            json!({"data": [{"embedding": [null, null, 1.0]}]})
        );
        assert_eq!(parse_json(b"{\"data\": [1,"), None);
    }

    fn embedder() -> HttpEmbedder {
        HttpEmbedder::new(ProviderConfig {
            kind: ProviderKind::OpenAi,
            base_url: "http://user:pw@127.0.0.1:9/v1".to_string(),
            model: "m".to_string(),
            dimensions: None,
            api_key_env: None,
            batch_size: 32,
            concurrency: 1,
            timeout_secs: 30,
            retries: 3,
            total_timeout_secs: 0,
            max_chars: 100,
        })
        .unwrap()
    }

    #[test]
    fn degenerate_vectors_are_left_empty_and_the_others_made_unit_length() {
        let e = embedder();
        let value = json!({"data": [
            {"index": 0, "embedding": [3.0, 4.0]},
            {"index": 1, "embedding": [0.0, 0.0]},
            {"index": 2, "embedding": [null, 1.0]},
            {"index": 3, "embedding": [1e39, 1.0]},
        ]});
        let vectors = e.parse(&value, 4).unwrap();
        assert_eq!(vectors[0], vec![0.6, 0.8]);
        assert!(vectors[1..].iter().all(Vec::is_empty), "{vectors:?}");
        assert_eq!(e.dimensions(), 2);
    }

    #[test]
    fn the_response_cap_follows_the_batch_and_the_dimensions() {
        let e = embedder();
        let unknown = e.response_cap(32);
        assert!(unknown > 32 * 8192 * 20 && unknown < 20_000_000, "{unknown}");
        let _ = e.dimensions.set(256);
        assert!(e.response_cap(32) < unknown / 4);
        assert!(e.response_cap(1) > 2 * 256 * 25);
        assert_eq!(e.shown_endpoint(), "http://127.0.0.1:9/v1/embeddings");
        assert_eq!(e.config.total_timeout(), Duration::from_secs(120));
    }
}
