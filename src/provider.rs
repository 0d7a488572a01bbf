//! HTTP embedding providers: OpenAI-compatible `/embeddings` (OpenAI, LM
//! Studio, vLLM, llama.cpp, TEI, Jina, Voyage, Mistral...) and Ollama's
//! `/api/embed`.
//!
//! Requests are batched and sent `concurrency` at a time, inputs are cut to
//! the model's context, every request has a timeout, and 429/5xx/network
//! failures are retried with exponential backoff (honouring `Retry-After`).
//! The API key is read from an environment variable, sent only as a header,
//! and never appears in errors or logs.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

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
    pub timeout_secs: u64,
    pub retries: u32,
    /// Inputs are cut to this many characters (about 4 per token).
    pub max_chars: usize,
}

impl ProviderConfig {
    /// The provider configured by `KEN_EMBED_*` environment variables, if
    /// `KEN_EMBED_PROVIDER` is `openai` or `ollama`.
    pub fn from_env() -> Result<Option<ProviderConfig>> {
        let var = crate::setting;
        let kind = match var("KEN_EMBED_PROVIDER").as_deref() {
            None | Some("local") | Some("builtin") => return Ok(None),
            Some("openai") => ProviderKind::OpenAi,
            Some("ollama") => ProviderKind::Ollama,
            Some(other) => bail!("KEN_EMBED_PROVIDER={other}: expected local, openai or ollama"),
        };
        let number = |name: &str, default: u64| -> Result<u64> {
            match var(name) {
                Some(v) => v.parse().with_context(|| format!("{name}={v} is not a number")),
                None => Ok(default),
            }
        };
        let base_url = var("KEN_EMBED_URL").unwrap_or_else(|| match kind {
            ProviderKind::OpenAi => "https://api.openai.com/v1".to_string(),
            ProviderKind::Ollama => "http://127.0.0.1:11434".to_string(),
        });
        let model = var("KEN_EMBED_MODEL").context("KEN_EMBED_MODEL must name the provider's embedding model")?;
        let api_key_env = var("KEN_EMBED_API_KEY_ENV").or_else(|| match kind {
            ProviderKind::OpenAi => Some("OPENAI_API_KEY".to_string()),
            ProviderKind::Ollama => None,
        });
        Ok(Some(ProviderConfig {
            kind,
            base_url,
            model,
            dimensions: var("KEN_EMBED_DIMENSIONS").map(|v| v.parse()).transpose()?,
            api_key_env,
            batch_size: number("KEN_EMBED_BATCH", 32)?.max(1) as usize,
            concurrency: number("KEN_EMBED_CONCURRENCY", 2)?.max(1) as usize,
            timeout_secs: number("KEN_EMBED_TIMEOUT", 30)?.max(1),
            retries: number("KEN_EMBED_RETRIES", 3)? as u32,
            max_chars: number("KEN_EMBED_MAX_CHARS", 8000)?.max(16) as usize,
        }))
    }
}

pub struct HttpEmbedder {
    config: ProviderConfig,
    id: String,
    client: reqwest::blocking::Client,
    api_key: Option<String>,
    dimensions: std::sync::OnceLock<usize>,
}

impl HttpEmbedder {
    pub fn new(config: ProviderConfig) -> Result<HttpEmbedder> {
        crate::http::install_crypto_provider();
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
        let text = crate::semantic::CHUNK_TEXT_VERSION;
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

    /// One request for one batch, retried on rate limits, server errors and
    /// network failures.
    fn request(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut body = json!({ "model": self.config.model, "input": inputs });
        if let (ProviderKind::OpenAi, Some(d)) = (self.config.kind, self.config.dimensions) {
            body["dimensions"] = json!(d);
        }
        let url = self.endpoint();
        let mut attempt = 0u32;
        loop {
            let mut req = self.client.post(&url).json(&body);
            if let Some(key) = &self.api_key {
                req = req.bearer_auth(key);
            }
            let (retryable, error, wait) = match req.send() {
                Ok(resp) if resp.status().is_success() => {
                    let value: serde_json::Value = resp
                        .json()
                        .with_context(|| format!("{url}: the response is not JSON"))?;
                    return self
                        .parse(&value, inputs.len())
                        .with_context(|| format!("{url}: unexpected response"));
                }
                Ok(resp) => {
                    let status = resp.status();
                    let wait = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let text: String = resp.text().unwrap_or_default().chars().take(300).collect();
                    let retryable = status.as_u16() == 429 || status.is_server_error();
                    (retryable, anyhow!("{url}: HTTP {status}: {text}"), wait)
                }
                Err(e) => {
                    let what = if e.is_timeout() {
                        format!("no answer within {} s", self.config.timeout_secs)
                    } else if e.is_connect() {
                        "cannot connect".to_string()
                    } else {
                        "request failed".to_string()
                    };
                    (true, anyhow!("{url}: {what}"), None)
                }
            };
            if !retryable || attempt >= self.config.retries {
                return Err(error.context(format!(
                    "embedding with {} failed after {} attempt(s)",
                    self.id,
                    attempt + 1
                )));
            }
            let backoff = Duration::from_millis(500 * (1 << attempt.min(4)));
            std::thread::sleep(wait.unwrap_or(backoff).min(Duration::from_secs(30)));
            attempt += 1;
        }
    }

    fn parse(&self, value: &serde_json::Value, expected: usize) -> Result<Vec<Vec<f32>>> {
        let to_vec = |v: &serde_json::Value| -> Result<Vec<f32>> {
            v.as_array()
                .context("an embedding is not a list")?
                .iter()
                .map(|x| x.as_f64().map(|f| f as f32).context("an embedding has a non-number"))
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
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                v.iter_mut().for_each(|x| *x /= norm);
            }
        }
        Ok(vectors)
    }
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
        let inputs: Vec<String> = texts
            .iter()
            .map(|t| {
                let mut end = t.len().min(self.config.max_chars);
                while !t.is_char_boundary(end) {
                    end -= 1;
                }
                let cut = t[..end].trim();
                // Providers reject empty input; a lone space embeds as "nothing".
                if cut.is_empty() {
                    " ".to_string()
                } else {
                    cut.to_string()
                }
            })
            .collect();
        let batches: Vec<&[String]> = inputs.chunks(self.config.batch_size).collect();
        let mut results: Vec<Result<Vec<Vec<f32>>>> = Vec::with_capacity(batches.len());
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
            results.extend(group_results);
        }
        let mut out = Vec::with_capacity(texts.len());
        for r in results {
            out.extend(r?);
        }
        Ok(out)
    }
}
