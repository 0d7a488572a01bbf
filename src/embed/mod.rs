//! Embedders: text in, unit-length vectors out.
//!
//! The built-in default runs all-MiniLM-L6-v2 in-process on the CPU (pure
//! Rust, no runtime to install). Vectors are stored once per distinct
//! chunk content and embedder id, so the id names everything that changes a
//! vector: the model, the token budget and the chunk text recipe. The
//! products' precision (bf16 where the CPU has AVX512-BF16, else f32) moves
//! a vector by under 1e-4 in cosine and is not part of it.

pub mod adapter;
pub mod bert;
pub mod http;
pub mod lora;
pub mod model;
pub mod projection;
pub mod provider;
pub mod text;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::BertModel;
use tokenizers::{PaddingDirection, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::embed::bert::{pool, real_tokens, Encoder, Family, ModelConfig};
use crate::embed::model::{ModelSettings, ModelSpec};
use crate::embed::projection::Precision;
use crate::embed::provider::{HttpEmbedder, ProviderConfig};

/// Whether a text is a document (a chunk) or a search query; some models
/// embed the two differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Document,
    Query,
}

pub trait Embedder: Send + Sync {
    /// Identifies the vectors this embedder makes (model and settings);
    /// vectors of different ids are never compared.
    fn id(&self) -> &str;
    fn dimensions(&self) -> usize;
    /// One L2-normalised vector per text, in order. An empty vector stands
    /// for a text the embedder could not embed (a provider's zero, NaN or
    /// infinite answer): it is not stored.
    fn embed(&self, texts: &[&str], kind: InputKind) -> Result<Vec<Vec<f32>>>;
    /// The vector of one text a search is waiting on (a query, a snippet to
    /// find similar code to). A remote embedder makes one attempt within its
    /// query budget and fails at once while its provider is known to be
    /// down, so the search goes on without it; a local one just embeds.
    fn embed_now(&self, text: &str, kind: InputKind) -> Result<Vec<f32>> {
        self.embed(&[text], kind)?
            .into_iter()
            .next()
            .filter(|v| !v.is_empty())
            .context("the embedder returned no vector")
    }
    /// How much BM25 weighs against this embedder's vectors in hybrid
    /// fusion, unless `KEN_FUSION_WEIGHTS` says: a stronger model's
    /// similarities deserve more trust (the eval chose each model's).
    fn lexical_weight(&self) -> f64 {
        1.0
    }
    /// How many texts to pass per [`Embedder::embed`] call.
    fn preferred_batch(&self) -> usize {
        16
    }
}

pub use crate::config::DEFAULT_MAX_TOKENS;

/// A BERT or MPNet sentence embedder (mean or CLS pooling) run on the CPU.
pub struct LocalBert {
    id: String,
    dir: PathBuf,
    config: ModelConfig,
    settings: ModelSettings,
    /// ken's pass, for batches and queries alike; loaded on first use.
    pass: OnceLock<std::result::Result<Encoder, String>>,
    /// candle's own BertModel: for a model ken's passes do not run, and the
    /// reference they are checked and benchmarked against.
    candle_pass: OnceLock<std::result::Result<BertModel, String>>,
    /// The pass's products: bf16 where the CPU runs it.
    precision: Precision,
    tokenizer: Tokenizer,
    dimensions: usize,
    lexical_weight: f64,
}

impl LocalBert {
    /// A built-in model, from its cache (see [`model::fetch`]).
    pub fn builtin(spec: &ModelSpec, max_tokens: usize) -> Result<LocalBert> {
        let dir = model::locate(spec)?;
        LocalBert::load(spec, &dir, max_tokens)
    }

    /// The built-in model `KEN_MODEL` chooses (all-MiniLM-L6-v2 by default).
    pub fn chosen_model(max_tokens: usize) -> Result<LocalBert> {
        LocalBert::builtin(model::chosen()?, max_tokens)
    }

    /// The local model that makes vectors of embedder id `id`
    /// (`name[+settings]/budget/textN`), at that token budget; its settings
    /// are its folder's and the environment's now, so the caller compares ids.
    pub fn for_id(id: &str) -> Result<LocalBert> {
        let mut parts = id.split('/');
        let name = parts.next().unwrap_or_default();
        let spec = model::named(name.split('+').next().unwrap_or_default())?;
        let max_tokens = parts.next().and_then(|t| t.parse().ok()).unwrap_or(DEFAULT_MAX_TOKENS);
        LocalBert::builtin(spec, max_tokens)
    }

    pub fn load(spec: &ModelSpec, dir: &Path, max_tokens: usize) -> Result<LocalBert> {
        LocalBert::load_with(spec, dir, max_tokens, ModelSettings::of(spec, dir)?)
    }

    /// The model in `dir` run with `settings` (its pooling and prompts).
    pub fn load_with(spec: &ModelSpec, dir: &Path, max_tokens: usize, settings: ModelSettings) -> Result<LocalBert> {
        let config = ModelConfig::parse(
            &std::fs::read_to_string(dir.join("config.json")).context("reading the model's config.json")?,
        )
        .context("parsing the model's config.json")?;
        let mut tokenizer =
            Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| anyhow!("loading tokenizer.json: {e}"))?;
        // The shipped tokenizer truncates and pads to 128; use our budget and pad per batch.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| anyhow!("configuring truncation: {e}"))?;
        // Keep the model's own pad token (MPNet's is 1, BERT's 0).
        let padding = tokenizer.get_padding().cloned().unwrap_or_default();
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            // Positions count from the first token, and `[CLS]` is the first.
            direction: PaddingDirection::Right,
            pad_to_multiple_of: None,
            ..padding
        }));
        let local = LocalBert {
            id: format!(
                "{}{}/{max_tokens}/text{}",
                spec.name,
                settings.tag(),
                crate::embed::text::CHUNK_TEXT_VERSION
            ),
            dir: dir.to_path_buf(),
            pass: OnceLock::new(),
            candle_pass: OnceLock::new(),
            precision: Precision::fastest(),
            tokenizer,
            dimensions: config.bert.hidden_size,
            lexical_weight: spec.lexical_weight,
            config,
            settings,
        };
        Ok(local)
    }

    /// This model with its pass's products in `precision` (f32, the
    /// reference, or bf16 where the CPU runs it).
    pub fn with_precision(mut self, precision: Precision) -> LocalBert {
        self.precision = precision;
        self.pass = OnceLock::new();
        self
    }

    fn weights(&self) -> std::result::Result<VarBuilder<'static>, String> {
        // SAFETY: the weights file is mapped read-only and not modified while mapped.
        unsafe { VarBuilder::from_mmaped_safetensors(&[self.dir.join("model.safetensors")], DType::F32, &Device::Cpu) }
            .map_err(|e| format!("loading model.safetensors: {e}"))
    }

    fn encoder(&self) -> Result<&Encoder> {
        self.pass
            .get_or_init(|| Encoder::load(&self.dir, &self.config, self.precision).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("{e}"))
    }

    fn candle_model(&self) -> Result<&BertModel> {
        self.candle_pass
            .get_or_init(|| {
                if !self.runs_on_candle() {
                    return Err(format!("candle has no {:?} model", self.config.family));
                }
                BertModel::load(self.weights()?, &self.config.bert).map_err(|e| format!("building the BERT model: {e}"))
            })
            .as_ref()
            .map_err(|e| anyhow!("{e}"))
    }

    /// Token counts of texts, as the model will see them (after truncation).
    pub fn token_counts(&self, texts: &[&str]) -> Result<Vec<usize>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| anyhow!("tokenizing: {e}"))?;
        Ok(encodings
            .iter()
            .map(|e| e.get_attention_mask().iter().filter(|&&m| m == 1).count())
            .collect())
    }
}

impl Embedder for LocalBert {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn lexical_weight(&self) -> f64 {
        self.lexical_weight
    }

    fn embed(&self, texts: &[&str], kind: InputKind) -> Result<Vec<Vec<f32>>> {
        let prompt = match kind {
            InputKind::Query => &self.settings.query_prompt,
            InputKind::Document => &self.settings.document_prompt,
        };
        let prompted: Vec<String>;
        let texts = if prompt.is_empty() {
            texts
        } else {
            prompted = texts.iter().map(|t| format!("{prompt}{t}")).collect();
            &prompted.iter().map(String::as_str).collect::<Vec<_>>()
        };
        if let ([text], InputKind::Query) = (texts, kind) {
            // One input, unpadded, straight through ken's pass.
            if let Ok(pass) = self.encoder() {
                let encoding = self
                    .tokenizer
                    .encode(*text, true)
                    .map_err(|e| anyhow!("tokenizing: {e}"))?;
                return Ok(vec![pass.embed(
                    encoding.get_ids(),
                    encoding.get_type_ids(),
                    self.settings.pooling,
                )?]);
            }
        }
        self.embed_batch(texts)
    }
}

impl LocalBert {
    /// The pass over a padded batch, what chunks go through: ken's, or
    /// candle's for a model ken's does not run.
    pub fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        match self.encoder() {
            Ok(encoder) => self.pooled(texts, |ids, types, _, real, len| encoder.forward(ids, types, real, len)),
            Err(_) => self.embed_batch_with_candle(texts),
        }
    }

    /// Whether candle's BertModel runs this model (not MPNet).
    pub fn runs_on_candle(&self) -> bool {
        self.config.family == Family::Bert
    }

    /// candle's BertModel over the same batch.
    pub fn embed_batch_with_candle(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let model = self.candle_model()?;
        self.pooled(texts, |ids, types, mask, real, len| {
            let tensor = |values: &[u32]| Tensor::from_slice(values, (real.len(), len), &Device::Cpu);
            let hidden = model.forward(&tensor(ids)?, &tensor(types)?, Some(&tensor(mask)?))?;
            Ok(hidden.flatten_all()?.to_vec1::<f32>()?)
        })
    }

    /// The texts tokenized and padded to one batch, run through `forward`
    /// (ids, types, mask, real tokens per item, tokens per item → hidden
    /// rows), pooled and made unit length.
    fn pooled(
        &self,
        texts: &[&str],
        forward: impl Fn(&[u32], &[u32], &[u32], &[usize], usize) -> Result<Vec<f32>>,
    ) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| anyhow!("tokenizing: {e}"))?;
        let len = encodings[0].get_ids().len();
        let (mut ids, mut types, mut mask) = (Vec::new(), Vec::new(), Vec::new());
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            types.extend_from_slice(e.get_type_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let real = real_tokens(&mask, len)?;
        let hidden = forward(&ids, &types, &mask, &real, len)?;
        Ok(pool(&hidden, self.dimensions, &real, len, self.settings.pooling))
    }
}

/// Cosine similarity of two unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The embedder chosen by the environment: an HTTP provider when
/// `KEN_EMBED_PROVIDER` names one, else the built-in model (fetched if
/// needed). Returns it with the provider settings to store in the index.
pub fn configured_embedder() -> Result<(Box<dyn Embedder>, String)> {
    match ProviderConfig::from_env()? {
        Some(config) => {
            let stored = serde_json::to_string(&config)?;
            Ok((Box::new(HttpEmbedder::new(config)?), stored))
        }
        None => {
            let spec = crate::embed::model::chosen()?;
            crate::embed::model::fetch(spec)?;
            let embedder = LocalBert::builtin(spec, crate::config::settings().embed_max_tokens)?;
            Ok((Box::new(embedder), LOCAL_PROVIDER.to_string()))
        }
    }
}

/// The embedder that made an index's vectors (`model` is its id,
/// `provider` the stored settings), to embed queries the same way.
pub fn embedder_for_index(model: &str, provider: Option<&str>) -> Result<Box<dyn Embedder>> {
    match provider {
        Some(json) if json != LOCAL_PROVIDER => {
            let config: ProviderConfig =
                serde_json::from_str(json).context("the index's embedding provider settings")?;
            Ok(Box::new(HttpEmbedder::new(config)?))
        }
        _ => {
            let embedder = LocalBert::for_id(model)?;
            if embedder.id() != model {
                anyhow::bail!(
                    "the index's vectors were made by {model}, not {}; run `ken index` to re-embed",
                    embedder.id()
                );
            }
            Ok(Box::new(embedder))
        }
    }
}

const LOCAL_PROVIDER: &str = "local";
