//! ken's BERT passes: one for a batch of chunks (candle's tensors, as
//! candle_transformers' BertModel runs them, with a faster GELU), and one for
//! a single short input, the search query.
//!
//! Two encoder families run through them ([`Family`]): BERT (MiniLM, bge,
//! e5, gte) and MPNet, which is BERT's layers with a learned bias per
//! relative-position bucket added to every attention score, no token types,
//! and positions counted from after the padding id.
//!
//! Both compute GELU's erf as a branch-free rational function ([`erf`]).
//! libm's, which candle's own GELU calls per element, was ~16% of a batch's
//! profile; replacing it made batches 1.15x and query passes 1.3x faster.
//! The batch pass's attention is one operation per (item, head) on one
//! thread ([`Attention`]): both products, and a softmax over the item's real
//! keys (AVX2), not a padding mask added to the scores and candle's generic
//! softmax (a quarter of a batch's time) nor candle's batched products, which
//! split each small product over both cores. Its matrix products run on
//! AVX-512 where the CPU has it (the `gemm` crate's `x86-v4` kernels, chosen
//! at run time).
//!
//! candle runs every matrix product through a general GEMM that packs the
//! weight matrix on each call. For a batch of chunks that cost is shared by
//! thousands of token rows; for a query of ten tokens it is most of the work.
//! This pass multiplies the few token rows straight against the weights
//! (AVX2/FMA, two threads), kept as half floats so they take half the memory
//! traffic and stay in L3 between queries: 0.4x candle's time here
//! (BENCHMARKS.md). Its vectors match candle's to 1e-6 in cosine
//! (tests/semantic.rs checks), so queries and stored chunk vectors stay
//! comparable.

use crate::embed::model::Pooling;
use anyhow::{anyhow, bail, Context, Result};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{CpuStorage, CustomOp1, CustomOp3, DType, Device, Layout, Module, Shape, Tensor, D};
use candle_nn::{embedding, linear, Embedding, LayerNorm, Linear, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct, PositionEmbeddingType};
use std::path::Path;

/// The encoder families these passes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Bert,
    /// `buckets` relative-position buckets (T5's scheme, both directions);
    /// real tokens take positions from `padding_id + 1` on.
    Mpnet {
        buckets: usize,
        padding_id: usize,
    },
}

/// MPNet's relative positions beyond this distance share the last bucket.
const MPNET_MAX_DISTANCE: usize = 128;

/// A model's `config.json`: the fields candle's BERT reads, and the family.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub bert: Config,
    pub family: Family,
}

impl ModelConfig {
    pub fn parse(text: &str) -> Result<ModelConfig> {
        let mut value: serde_json::Value = serde_json::from_str(text)?;
        let number = |key: &str, default: u64| value.get(key).and_then(|v| v.as_u64()).unwrap_or(default) as usize;
        let family = match value.get("model_type").and_then(|v| v.as_str()) {
            Some("mpnet") => Family::Mpnet {
                buckets: number("relative_attention_num_buckets", 32),
                padding_id: number("pad_token_id", 1),
            },
            Some("bert") | None => Family::Bert,
            Some(other) => bail!("ken runs BERT and MPNet models, not {other:?}"),
        };
        if let Family::Mpnet { buckets, .. } = family {
            // Both directions, each with exact and logarithmic buckets.
            if buckets < 4 || buckets % 2 != 0 {
                bail!("relative_attention_num_buckets must be an even number of at least 4, not {buckets}");
            }
        }
        if let (Family::Mpnet { .. }, Some(fields)) = (family, value.as_object_mut()) {
            // MPNet has no token types; candle's config still wants the count.
            fields.entry("type_vocab_size").or_insert(0.into());
        }
        Ok(ModelConfig {
            bert: serde_json::from_value(value)?,
            family,
        })
    }

    /// Position id of the first token.
    fn first_position(&self) -> usize {
        match self.family {
            Family::Bert => 0,
            Family::Mpnet { padding_id, .. } => padding_id + 1,
        }
    }

    /// Tensor names, under `encoder.layer.N.`, of a layer's attention:
    /// query, key, value, output projection, and its LayerNorm.
    fn attention_names(&self) -> [&'static str; 5] {
        match self.family {
            Family::Bert => [
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
                "attention.output.LayerNorm",
            ],
            Family::Mpnet { .. } => [
                "attention.attn.q",
                "attention.attn.k",
                "attention.attn.v",
                "attention.attn.o",
                "attention.LayerNorm",
            ],
        }
    }
}

/// MPNet's bucket of the key at `relative` positions from the query (T5's
/// bidirectional scheme, computed in f32 as PyTorch does): exact up to a
/// quarter of the buckets, logarithmic up to [`MPNET_MAX_DISTANCE`].
fn relative_bucket(relative: i64, buckets: usize) -> usize {
    let half = (buckets / 2) as i64;
    let n = -relative;
    let side = if n < 0 { half } else { 0 };
    let n = n.abs();
    let exact = half / 2;
    let offset = if n < exact {
        n
    } else {
        let scale = (n as f32 / exact as f32).ln() / (MPNET_MAX_DISTANCE as f32 / exact as f32).ln();
        (exact + (scale * (half - exact) as f32) as i64).min(half - 1)
    };
    (side + offset) as usize
}

/// The bucket of every (query, key) pair of `len` tokens, row by row.
fn relative_buckets(len: usize, buckets: usize) -> Vec<u32> {
    (0..len)
        .flat_map(|q| (0..len).map(move |k| relative_bucket(k as i64 - q as i64, buckets) as u32))
        .collect()
}

/// Inputs up to this many tokens take this pass; longer ones amortise
/// candle's packing and go through it instead.
pub const MAX_QUERY_TOKENS: usize = 64;

/// One linear layer, weight stored as PyTorch does: `out` rows of `inp`.
struct Dense {
    /// Half floats: half the memory traffic, and all layers (21 MB for
    /// MiniLM) stay in a 32 MB L3 cache between queries.
    weight: Vec<u16>,
    bias: Vec<f32>,
    inp: usize,
    out: usize,
}

struct Norm {
    gain: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    query: Dense,
    key: Dense,
    value: Dense,
    attention_out: Dense,
    attention_norm: Norm,
    intermediate: Dense,
    output: Dense,
    output_norm: Norm,
}

pub struct QueryEncoder {
    weights: MmapedSafetensors,
    /// Tensor name of the word embeddings, read row by row from the mapped file.
    word_embeddings: String,
    positions: Vec<f32>,
    first_position: usize,
    /// BERT's token type rows; MPNet has none.
    token_types: Option<Vec<f32>>,
    /// MPNet's attention bias, `buckets x heads`, shared by all layers.
    relative_bias: Option<(Vec<f32>, usize)>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
    eps: f32,
}

impl QueryEncoder {
    /// Loads the weights of `model.safetensors` in `dir` for `config`.
    /// Only the architecture candle's BertModel also runs (absolute
    /// positions, exact GELU) is accepted, so the two passes agree.
    pub fn load(dir: &Path, model: &ModelConfig) -> Result<QueryEncoder> {
        let config = &model.bert;
        check_architecture(config)?;
        // SAFETY: the weights file is mapped read-only and not modified while mapped.
        let weights =
            unsafe { MmapedSafetensors::new(dir.join("model.safetensors")) }.context("mapping model.safetensors")?;
        let prefix = weights_prefix(|name| weights.get(name).is_ok())?;
        // Word embedding rows are read straight from the mapped file.
        let words = weights.get(&format!("{prefix}embeddings.word_embeddings.weight"))?;
        if DType::try_from(words.dtype()).ok() != Some(DType::F32) {
            bail!("the query pass reads f32 word embeddings, not {:?}", words.dtype());
        }
        let load = |name: &str| -> Result<Vec<f32>> {
            let full = format!("{prefix}{name}");
            let tensor = weights
                .load(&full, &Device::Cpu)
                .with_context(|| format!("reading {full}"))?;
            Ok(tensor.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
        };
        let hidden = config.hidden_size;
        let dense = |name: &str, inp: usize, out: usize| -> Result<Dense> {
            let weight = load(&format!("{name}.weight"))?;
            let bias = load(&format!("{name}.bias"))?;
            if weight.len() != inp * out || bias.len() != out {
                bail!("{name} has an unexpected shape");
            }
            let weight = weight.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
            Ok(Dense { weight, bias, inp, out })
        };
        let norm = |name: &str| -> Result<Norm> {
            // Old checkpoints name the LayerNorm parameters gamma/beta.
            let gain = load(&format!("{name}.weight")).or_else(|_| load(&format!("{name}.gamma")))?;
            let bias = load(&format!("{name}.bias")).or_else(|_| load(&format!("{name}.beta")))?;
            Ok(Norm { gain, bias })
        };
        let inter = config.intermediate_size;
        let [query, key, value, attention_out, attention_norm] = model.attention_names();
        let layers = (0..config.num_hidden_layers)
            .map(|i| {
                let at = format!("encoder.layer.{i}");
                Ok(Layer {
                    query: dense(&format!("{at}.{query}"), hidden, hidden)?,
                    key: dense(&format!("{at}.{key}"), hidden, hidden)?,
                    value: dense(&format!("{at}.{value}"), hidden, hidden)?,
                    attention_out: dense(&format!("{at}.{attention_out}"), hidden, hidden)?,
                    attention_norm: norm(&format!("{at}.{attention_norm}"))?,
                    intermediate: dense(&format!("{at}.intermediate.dense"), hidden, inter)?,
                    output: dense(&format!("{at}.output.dense"), inter, hidden)?,
                    output_norm: norm(&format!("{at}.output.LayerNorm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let positions = load("embeddings.position_embeddings.weight")?;
        let (token_types, relative_bias) = match model.family {
            Family::Bert => (Some(load("embeddings.token_type_embeddings.weight")?), None),
            Family::Mpnet { buckets, .. } => {
                let table = load("encoder.relative_attention_bias.weight")?;
                if table.len() != buckets * config.num_attention_heads {
                    bail!("encoder.relative_attention_bias has an unexpected shape");
                }
                (None, Some((table, buckets)))
            }
        };
        let embedding_norm = norm("embeddings.LayerNorm")?;
        Ok(QueryEncoder {
            word_embeddings: format!("{prefix}embeddings.word_embeddings.weight"),
            weights,
            positions,
            first_position: model.first_position(),
            token_types,
            relative_bias,
            embedding_norm,
            layers,
            hidden,
            heads: config.num_attention_heads,
            eps: config.layer_norm_eps as f32,
        })
    }

    /// The pooled, unit-length embedding of one tokenized input.
    pub fn embed(&self, ids: &[u32], type_ids: &[u32], pooling: Pooling) -> Result<Vec<f32>> {
        let h = self.hidden;
        let m = ids.len();
        let most = self.positions.len() / h - self.first_position;
        if m == 0 || m > most {
            bail!("the query pass takes 1 to {most} tokens, not {m}");
        }
        let mut x = self.embeddings(ids, type_ids)?;
        let mut scratch = Scratch::default();
        if let Some((_, buckets)) = &self.relative_bias {
            // Every layer and head reads the same buckets.
            scratch.buckets = relative_buckets(m, *buckets);
        }
        for layer in &self.layers {
            self.layer(layer, &mut x, m, &mut scratch);
        }
        let mut pooled = vec![0f32; h];
        match pooling {
            // The mean, whose 1/m the unit length cancels out.
            Pooling::Mean => {
                for row in x.chunks_exact(h) {
                    pooled.iter_mut().zip(row).for_each(|(p, v)| *p += v);
                }
            }
            Pooling::Cls => pooled.copy_from_slice(&x[..h]),
        }
        let norm = pooled.iter().map(|v| v * v).sum::<f32>().sqrt();
        pooled.iter_mut().for_each(|v| *v /= norm);
        Ok(pooled)
    }

    fn embeddings(&self, ids: &[u32], type_ids: &[u32]) -> Result<Vec<f32>> {
        let h = self.hidden;
        let words = self.weights.get(&self.word_embeddings)?;
        let bytes = words.data();
        let vocab = bytes.len() / (4 * h);
        let mut x = vec![0f32; ids.len() * h];
        for (pos, (row, &id)) in x.chunks_exact_mut(h).zip(ids).enumerate() {
            let id = id as usize;
            if id >= vocab {
                bail!("token id {id} is outside the vocabulary ({vocab})");
            }
            let word = &bytes[id * 4 * h..(id + 1) * 4 * h];
            let at = pos + self.first_position;
            let position = &self.positions[at * h..(at + 1) * h];
            for (i, value) in row.iter_mut().enumerate() {
                let w = f32::from_le_bytes(word[4 * i..4 * i + 4].try_into().expect("4 bytes"));
                *value = w + position[i];
            }
            if let Some(types) = &self.token_types {
                let kind = type_ids.get(pos).copied().unwrap_or(0) as usize;
                let token_type = types
                    .get(kind * h..(kind + 1) * h)
                    .ok_or_else(|| anyhow!("token type {kind} is outside the model's types"))?;
                row.iter_mut().zip(token_type).for_each(|(v, t)| *v += t);
            }
            layer_norm(row, &self.embedding_norm, self.eps);
        }
        Ok(x)
    }

    fn layer(&self, layer: &Layer, x: &mut [f32], m: usize, s: &mut Scratch) {
        let h = self.hidden;
        dense(x, m, &layer.query, &mut s.q);
        dense(x, m, &layer.key, &mut s.k);
        dense(x, m, &layer.value, &mut s.v);
        self.attention(m, s);
        dense(&s.context, m, &layer.attention_out, &mut s.attended);
        for (a, r) in s.attended.chunks_exact_mut(h).zip(x.chunks_exact(h)) {
            a.iter_mut().zip(r).for_each(|(a, r)| *a += r);
            layer_norm(a, &layer.attention_norm, self.eps);
        }
        dense(&s.attended, m, &layer.intermediate, &mut s.inner);
        s.inner.iter_mut().for_each(|v| *v = gelu(*v));
        dense(&s.inner, m, &layer.output, &mut s.q);
        for ((out, a), dst) in
            s.q.chunks_exact_mut(h)
                .zip(s.attended.chunks_exact(h))
                .zip(x.chunks_exact_mut(h))
        {
            out.iter_mut().zip(a).for_each(|(o, a)| *o += a);
            layer_norm(out, &layer.output_norm, self.eps);
            dst.copy_from_slice(out);
        }
    }

    /// Scaled dot-product self-attention over all `m` tokens (one unpadded input).
    fn attention(&self, m: usize, s: &mut Scratch) {
        let h = self.hidden;
        let d = h / self.heads;
        let scale = 1.0 / (d as f32).sqrt();
        s.context.clear();
        s.context.resize(m * h, 0.0);
        s.scores.resize(m, 0.0);
        for head in 0..self.heads {
            let cols = head * d..(head + 1) * d;
            for i in 0..m {
                let q = &s.q[i * h..][cols.clone()];
                for (j, score) in s.scores.iter_mut().enumerate() {
                    let k = &s.k[j * h..][cols.clone()];
                    *score = q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale;
                    if let Some((table, _)) = &self.relative_bias {
                        *score += table[s.buckets[i * m + j] as usize * self.heads + head];
                    }
                }
                let max = s.scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut total = 0.0;
                s.scores.iter_mut().for_each(|v| {
                    *v = (*v - max).exp();
                    total += *v;
                });
                let out = &mut s.context[i * h..][cols.clone()];
                for (j, p) in s.scores.iter().enumerate() {
                    let v = &s.v[j * h..][cols.clone()];
                    out.iter_mut().zip(v).for_each(|(o, v)| *o += p / total * v);
                }
            }
        }
    }
}

/// Buffers reused across layers.
#[derive(Default)]
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    scores: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    inner: Vec<f32>,
    /// MPNet's relative-position bucket of each (query, key) pair.
    buckets: Vec<u32>,
}

fn layer_norm(row: &mut [f32], norm: &Norm, eps: f32) {
    let n = row.len() as f32;
    let mean = row.iter().sum::<f32>() / n;
    let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, g), b) in row.iter_mut().zip(&norm.gain).zip(&norm.bias) {
        *v = (*v - mean) * inv * g + b;
    }
}

/// What the weights' tensor names start with (`""`, `"bert."` or `"model."`),
/// given whether the file `has` a tensor of that name.
fn weights_prefix(has: impl Fn(&str) -> bool) -> Result<&'static str> {
    ["", "bert.", "mpnet.", "model."]
        .into_iter()
        .find(|p| has(&format!("{p}embeddings.word_embeddings.weight")))
        .ok_or_else(|| anyhow!("model.safetensors has no word embeddings"))
}

/// Refuses what these passes do not run (candle's BertModel then runs the model).
fn check_architecture(config: &Config) -> Result<()> {
    if config.hidden_act != HiddenAct::Gelu {
        bail!("ken's BERT passes support GELU (erf) activations only");
    }
    if config.position_embedding_type != PositionEmbeddingType::Absolute {
        bail!("ken's BERT passes support absolute position embeddings only");
    }
    if !config.hidden_size.is_multiple_of(config.num_attention_heads) {
        bail!("hidden size {} is not a multiple of the head count", config.hidden_size);
    }
    Ok(())
}

/// The pass over a padded batch of chunks: candle's tensor operations, in
/// the order candle_transformers' BertModel applies them, with [`gelu`].
pub struct BatchEncoder {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    first_position: usize,
    token_type_embeddings: Option<Embedding>,
    /// MPNet's `buckets x heads` attention bias, and the bucket count.
    relative_bias: Option<(Embedding, usize)>,
    embedding_norm: LayerNorm,
    layers: Vec<BatchLayer>,
    heads: usize,
}

struct BatchLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

impl BatchEncoder {
    pub fn load(vb: VarBuilder, model: &ModelConfig) -> Result<BatchEncoder> {
        let config = &model.bert;
        check_architecture(config)?;
        let vb = match weights_prefix(|name| vb.contains_tensor(name))? {
            "" => vb,
            prefix => vb.pp(prefix.trim_end_matches('.')),
        };
        let (hidden, inter, eps) = (config.hidden_size, config.intermediate_size, config.layer_norm_eps);
        let norm = |vb: VarBuilder| candle_nn::layer_norm(hidden, eps, vb);
        // Attention divides each score by √(head size); the query does it once instead.
        let score_scale = 1.0 / ((hidden / config.num_attention_heads) as f64).sqrt();
        let e = vb.pp("embeddings");
        let [query, key, value, attention_out, attention_norm] = model.attention_names();
        let layers = (0..config.num_hidden_layers)
            .map(|i| {
                let l = vb.pp(format!("encoder.layer.{i}"));
                Ok(BatchLayer {
                    query: scaled(linear(hidden, hidden, l.pp(query))?, score_scale)?,
                    key: linear(hidden, hidden, l.pp(key))?,
                    value: linear(hidden, hidden, l.pp(value))?,
                    attention_out: linear(hidden, hidden, l.pp(attention_out))?,
                    attention_norm: norm(l.pp(attention_norm))?,
                    intermediate: linear(hidden, inter, l.pp("intermediate.dense"))?,
                    output: linear(inter, hidden, l.pp("output.dense"))?,
                    output_norm: norm(l.pp("output.LayerNorm"))?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(BatchEncoder {
            word_embeddings: embedding(config.vocab_size, hidden, e.pp("word_embeddings"))?,
            position_embeddings: embedding(config.max_position_embeddings, hidden, e.pp("position_embeddings"))?,
            first_position: model.first_position(),
            token_type_embeddings: match model.family {
                Family::Bert => Some(embedding(
                    config.type_vocab_size,
                    hidden,
                    e.pp("token_type_embeddings"),
                )?),
                Family::Mpnet { .. } => None,
            },
            relative_bias: match model.family {
                Family::Bert => None,
                Family::Mpnet { buckets, .. } => Some((
                    embedding(
                        buckets,
                        config.num_attention_heads,
                        vb.pp("encoder.relative_attention_bias"),
                    )?,
                    buckets,
                )),
            },
            embedding_norm: norm(e.pp("LayerNorm"))?,
            layers,
            heads: config.num_attention_heads,
        })
    }

    /// The last hidden states, `(batch, tokens, hidden)`, of token `ids`
    /// with their `types` and attention `mask` (1 for a real token, 0 for padding).
    pub fn forward(&self, ids: &Tensor, types: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (_, len) = ids.dims2()?;
        let first = self.first_position as u32;
        // Padding sits at the end, masked out, so real tokens count from `first`.
        let positions = Tensor::arange(first, first + len as u32, ids.device())?;
        let mut x = self
            .word_embeddings
            .forward(ids)?
            .broadcast_add(&self.position_embeddings.forward(&positions)?)?;
        if let Some(token_types) = &self.token_type_embeddings {
            x = (x + token_types.forward(types)?)?;
        }
        let mut x = self.embedding_norm.forward(&x)?;
        let real_tokens = real_tokens(&mask.to_vec2::<u32>()?)?;
        let relative_bias = match &self.relative_bias {
            Some((table, buckets)) => {
                // (heads, len, len): the same bias in every layer.
                let pairs = Tensor::from_vec(relative_buckets(len, *buckets), (len, len), ids.device())?;
                Some(
                    table
                        .forward(&pairs)?
                        .permute((2, 0, 1))?
                        .flatten_all()?
                        .to_vec1::<f32>()?,
                )
            }
            None => None,
        };
        let attention = Attention {
            real_tokens: &real_tokens,
            relative_bias: relative_bias.as_deref(),
        };
        for layer in &self.layers {
            x = self.layer(layer, &x, &attention)?;
        }
        Ok(x)
    }

    fn layer(&self, layer: &BatchLayer, x: &Tensor, attention: &Attention) -> Result<Tensor> {
        let (batch, len, hidden) = x.dims3()?;
        let head = hidden / self.heads;
        let by_head = |t: Tensor| t.reshape((batch, len, self.heads, head))?.transpose(1, 2)?.contiguous();
        let query = by_head(layer.query.forward(x)?)?;
        let key = by_head(layer.key.forward(x)?)?;
        let value = by_head(layer.value.forward(x)?)?;
        let context = query
            .apply_op3_no_bwd(&key, &value, attention)?
            .transpose(1, 2)?
            .contiguous()?
            .flatten_from(D::Minus2)?;
        let attended = layer
            .attention_norm
            .forward(&(layer.attention_out.forward(&context)? + x)?)?;
        let inner = layer.intermediate.forward(&attended)?.apply_op1_no_bwd(&Gelu)?;
        Ok(layer
            .output_norm
            .forward(&(layer.output.forward(&inner)? + &attended)?)?)
    }
}

/// Each item's count of real tokens, from its attention mask: the padding
/// must sit at the end, where [`Attention`] leaves it out.
fn real_tokens(mask: &[Vec<u32>]) -> Result<Vec<usize>> {
    mask.iter()
        .map(|row| {
            let real = row.iter().take_while(|&&m| m == 1).count();
            if real == 0 || row[real..].iter().any(|&m| m != 0) {
                bail!("the batch pass takes a mask of 1s then 0s (padding at the end), not {row:?}");
            }
            Ok(real)
        })
        .collect()
}

/// A linear layer whose outputs are multiplied by `by`.
fn scaled(layer: Linear, by: f64) -> candle_core::Result<Linear> {
    let bias = layer.bias().map(|b| b.affine(by, 0.0)).transpose()?;
    Ok(Linear::new(layer.weight().affine(by, 0.0)?, bias))
}

/// Self-attention of each item and head, `softmax(q·kᵀ + bias)·v` over the
/// item's first `real_tokens[b]` keys (padding sits at the end and gets
/// weight 0): q (already scaled by 1/√d), k and v `(batch, heads, len, head)`,
/// the context the same shape. One (item, head) a task, its two products on
/// one thread: candle's batched products split each small product over both
/// cores, thousands of times a batch, and kept every score in memory (50 MB
/// for 16 × 256 tokens).
struct Attention<'a> {
    real_tokens: &'a [usize],
    /// MPNet's bias, `(heads, len, len)`.
    relative_bias: Option<&'a [f32]>,
}

impl CustomOp3 for Attention<'_> {
    fn name(&self) -> &'static str {
        "attention-over-real-keys"
    }

    fn cpu_fwd(
        &self,
        query: &CpuStorage,
        query_layout: &Layout,
        key: &CpuStorage,
        key_layout: &Layout,
        value: &CpuStorage,
        value_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        fn contiguous<'s>(storage: &'s CpuStorage, layout: &Layout, shape: &Shape) -> candle_core::Result<&'s [f32]> {
            match (storage, layout.contiguous_offsets()) {
                (CpuStorage::F32(values), Some((start, end))) if layout.shape() == shape => Ok(&values[start..end]),
                _ => candle_core::bail!("attention: contiguous f32 inputs of one shape only"),
            }
        }
        let shape = query_layout.shape();
        let (q, k, v) = (
            contiguous(query, query_layout, shape)?,
            contiguous(key, key_layout, shape)?,
            contiguous(value, value_layout, shape)?,
        );
        let (batch, heads, len, head) = shape.dims4()?;
        if self.real_tokens.len() != batch || self.real_tokens.iter().any(|&n| n == 0 || n > len) {
            candle_core::bail!("attention: {batch} items, real token counts {:?}", self.real_tokens);
        }
        if self.relative_bias.is_some_and(|bias| bias.len() != heads * len * len) {
            candle_core::bail!("attention: the relative bias is not {heads} x {len} x {len}");
        }
        use rayon::prelude::*;
        let per_head = len * head;
        let mut out = vec![0.0f32; q.len()];
        out.par_chunks_mut(per_head).enumerate().for_each_init(
            || vec![0.0f32; len * len],
            |scores, (item_head, out)| {
                let real = self.real_tokens[item_head / heads];
                let at = item_head * per_head;
                let (q, k, v) = (&q[at..at + per_head], &k[at..at + per_head], &v[at..at + per_head]);
                // SAFETY: scores is len x len, its first `real` columns
                // written; q and k are len x head, rows head apart.
                unsafe {
                    product(
                        len,
                        real,
                        head,
                        (scores.as_mut_ptr(), len),
                        (q.as_ptr(), head, 1),
                        (k.as_ptr(), 1, head),
                    )
                };
                if let Some(bias) = self.relative_bias {
                    let bias = &bias[(item_head % heads) * len * len..][..len * len];
                    for (row, bias) in scores.chunks_exact_mut(len).zip(bias.chunks_exact(len)) {
                        row[..real].iter_mut().zip(bias).for_each(|(s, b)| *s += b);
                    }
                }
                softmax_rows(scores, len, real);
                // SAFETY: out is len x head; scores' first `real` columns, v's first `real` rows.
                unsafe {
                    product(
                        len,
                        head,
                        real,
                        (out.as_mut_ptr(), head),
                        (scores.as_ptr(), len, 1),
                        (v.as_ptr(), head, 1),
                    )
                };
            },
        );
        Ok((CpuStorage::F32(out), shape.clone()))
    }
}

/// `out = a · b` on this thread: `out` is `m × n` (its start, rows apart),
/// `a` is `m × k` and `b` is `k × n` (their starts, rows apart, columns apart).
///
/// SAFETY: each matrix lies within its allocation, and `out` overlaps neither.
unsafe fn product(
    m: usize,
    n: usize,
    k: usize,
    out: (*mut f32, usize),
    a: (*const f32, usize, usize),
    b: (*const f32, usize, usize),
) {
    let (o, o_rows) = out;
    let ((a, a_rows, a_cols), (b, b_rows, b_cols)) = (a, b);
    gemm::gemm(
        m,
        n,
        k,
        o,
        1,
        o_rows as isize,
        false,
        a,
        a_cols as isize,
        a_rows as isize,
        b,
        b_cols as isize,
        b_rows as isize,
        0.0,
        1.0,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

/// Each row of `keys` scores, in place: softmax over its first `real`.
fn softmax_rows(scores: &mut [f32], keys: usize, real: usize) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { avx2::softmax_rows(scores, keys, real) };
    }
    portable_softmax_rows(scores, keys, real)
}

/// [`softmax_rows`] on any CPU.
fn portable_softmax_rows(scores: &mut [f32], keys: usize, real: usize) {
    for row in scores.chunks_exact_mut(keys) {
        let row = &mut row[..real];
        let max = row.iter().fold(f32::MIN, |m, &v| m.max(v));
        row.iter_mut().for_each(|v| *v = exp(*v - max));
        let inverse = 1.0 / row.iter().sum::<f32>();
        row.iter_mut().for_each(|v| *v *= inverse);
    }
}

/// Cephes' expf: e^x = 2^n · e^r, r on [-ln2/2, ln2/2], e^r a polynomial.
const EXP_POLYNOMIAL: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];
/// ln 2 in two parts, so r = x - n·ln2 keeps its low bits.
const LN2_HIGH: f32 = 0.693_359_4;
const LN2_LOW: f32 = -2.121_944_4e-4;
/// 1.5·2²³: a float plus this is rounded to an integer, which its low bits hold.
const ROUND: f32 = 12_582_912.0;
/// Below this e^x is under f32's smallest normal; softmax takes it as 0.
const EXP_FLOOR: f32 = -87.0;

/// e^x for x ≤ 0, within 2 ulp of libm's; the portable twin of `avx2::exp`.
fn exp(x: f32) -> f32 {
    let x = x.max(EXP_FLOOR);
    let rounded = x * std::f32::consts::LOG2_E + ROUND;
    let n = rounded - ROUND;
    let r = x - n * LN2_HIGH - n * LN2_LOW;
    let p = EXP_POLYNOMIAL.iter().fold(0.0, |acc, &c| acc * r + c);
    let y = p * r * r + r + 1.0;
    let two_to_n = (rounded.to_bits() as i32 - ROUND.to_bits() as i32 + 127) << 23;
    f32::from_bits(two_to_n as u32) * y
}

/// Whether the AVX2/FMA versions of the loops below (eight floats at a
/// time) can run here.
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
    #[allow(unreachable_code)]
    false
}

/// [`gelu`] as a candle operation, on contiguous f32 tensors on the CPU.
struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "gelu-erf-rational"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(values), Some((start, end))) = (storage, layout.contiguous_offsets()) else {
            candle_core::bail!("gelu: contiguous f32 input only");
        };
        use rayon::prelude::*;
        let input = &values[start..end];
        let mut out = vec![0.0f32; input.len()];
        // Both cores: a batch's activations are millions of values.
        out.par_chunks_mut(1 << 14)
            .zip(input.par_chunks(1 << 14))
            .for_each(|(out, input)| {
                #[cfg(target_arch = "x86_64")]
                if has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { gelu_all_avx2(input, out) };
                }
                gelu_all(input, out)
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

#[inline(always)]
fn gelu_all(input: &[f32], out: &mut [f32]) {
    out.iter_mut().zip(input).for_each(|(o, &v)| *o = gelu(v));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_all_avx2(input: &[f32], out: &mut [f32]) {
    gelu_all(input, out)
}

/// GELU with erf: the activation MiniLM was trained with.
#[inline(always)]
fn gelu(v: f32) -> f32 {
    (erf(v * std::f32::consts::FRAC_1_SQRT_2) + 1.0) * 0.5 * v
}

/// erf as a rational function of x on [-4, 4] (Eigen's float erf; beyond
/// ±4 erf is ±1 in f32), within 1e-6 of libm's `erff`: no branches, so the
/// loop over a layer's activations vectorises.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const ALPHA: [f32; 7] = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906e-4,
        -2.954_6e-3,
        -1.609_603_3e-2,
    ];
    const BETA: [f32; 5] = [
        -1.456_607_2e-5,
        -2.133_740_6e-4,
        -1.682_827e-3,
        -7.373_329e-3,
        -1.426_474e-2,
    ];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = ALPHA.iter().fold(0.0, |acc, &a| acc * x2 + a) * x;
    let q = BETA.iter().fold(0.0, |acc, &b| acc * x2 + b);
    p / q
}

/// `y = x · Wᵀ + b` for `m` rows of `x`, the output columns split between
/// two threads (the other core is free once the lexical side is done).
fn dense(x: &[f32], m: usize, d: &Dense, y: &mut Vec<f32>) {
    y.clear();
    y.resize(m * d.out, 0.0);
    #[cfg(target_arch = "x86_64")]
    if d.inp.is_multiple_of(8)
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
    {
        let half = (d.out / 2).next_multiple_of(avx2::COLS).min(d.out);
        let out = OutputRows(y.as_mut_ptr());
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); the two
        // calls write disjoint columns of `y`, which outlives both.
        rayon::join(
            || unsafe { avx2::dense(x, m, d, out, 0..half) },
            || unsafe { avx2::dense(x, m, d, out, half..d.out) },
        );
        return;
    }
    dense_scalar(x, d, y);
}

/// The portable product, for CPUs without AVX2/FMA/F16C.
fn dense_scalar(x: &[f32], d: &Dense, y: &mut [f32]) {
    for (xr, yr) in x.chunks_exact(d.inp).zip(y.chunks_exact_mut(d.out)) {
        for ((yv, wr), b) in yr.iter_mut().zip(d.weight.chunks_exact(d.inp)).zip(&d.bias) {
            *yv = xr
                .iter()
                .zip(wr)
                .map(|(a, &w)| a * half::f16::from_bits(w).to_f32())
                .sum::<f32>()
                + b;
        }
    }
}

/// The output matrix, shared by the threads that fill disjoint columns of it.
#[derive(Clone, Copy)]
struct OutputRows(*mut f32);
// SAFETY: only used by `dense`, whose threads write disjoint elements.
unsafe impl Send for OutputRows {}
unsafe impl Sync for OutputRows {}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Dense, OutputRows};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Input rows per tile.
    const ROWS: usize = 4;
    /// Weight rows per tile. 4 x 2 measured best of 1x8, 2x4, 2x6, 3x4, 4x2
    /// on Zen 3 (3x4 spills registers).
    pub const COLS: usize = 2;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dense(x: &[f32], m: usize, d: &Dense, y: OutputRows, columns: Range<usize>) {
        let n = d.inp;
        assert!(n.is_multiple_of(8) && x.len() >= m * n && d.weight.len() == n * d.out && columns.end <= d.out);
        let w = d.weight.as_ptr();
        let xp = x.as_ptr();
        let mut j = columns.start;
        while j < columns.end {
            let cols = (columns.end - j).min(COLS);
            let wr: [*const u16; COLS] = std::array::from_fn(|c| w.add((j + c.min(cols - 1)) * n));
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(ROWS);
                // A short tile repeats its last row; those sums are dropped.
                let xr: [*const f32; ROWS] = std::array::from_fn(|r| xp.add((i + r.min(rows - 1)) * n));
                let mut acc = [[_mm256_setzero_ps(); COLS]; ROWS];
                let mut k = 0;
                while k < n {
                    let xv: [__m256; ROWS] = std::array::from_fn(|r| _mm256_loadu_ps(xr[r].add(k)));
                    for c in 0..COLS {
                        let wv = _mm256_cvtph_ps(_mm_loadu_si128(wr[c].add(k) as *const __m128i));
                        for r in 0..ROWS {
                            acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
                        }
                    }
                    k += 8;
                }
                for (r, row_acc) in acc.iter().enumerate().take(rows) {
                    for (c, a) in row_acc.iter().enumerate().take(cols) {
                        *y.0.add((i + r) * d.out + j + c) = sum(*a) + d.bias[j + c];
                    }
                }
                i += rows;
            }
            j += cols;
        }
    }

    /// [`super::softmax_rows`], eight keys at a time.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn softmax_rows(scores: &mut [f32], keys: usize, real: usize) {
        assert!(real <= keys && scores.len().is_multiple_of(keys));
        let whole = real - real % 8;
        for row in scores.chunks_exact_mut(keys) {
            let (r, o) = (row.as_ptr(), row.as_mut_ptr());
            let mut maxima = _mm256_set1_ps(f32::MIN);
            for i in (0..whole).step_by(8) {
                maxima = _mm256_max_ps(maxima, _mm256_loadu_ps(r.add(i)));
            }
            let max = row[whole..real].iter().fold(max(maxima), |m, &v| m.max(v));
            let mut sums = _mm256_setzero_ps();
            for i in (0..whole).step_by(8) {
                let e = exp(_mm256_sub_ps(_mm256_loadu_ps(r.add(i)), _mm256_set1_ps(max)));
                _mm256_storeu_ps(o.add(i), e);
                sums = _mm256_add_ps(sums, e);
            }
            let mut total = sum(sums);
            for v in &mut row[whole..real] {
                *v = super::exp(*v - max);
                total += *v;
            }
            let inverse = 1.0 / total;
            row[..real].iter_mut().for_each(|v| *v *= inverse);
        }
    }

    /// [`super::exp`] on eight floats.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp(x: __m256) -> __m256 {
        use super::{EXP_FLOOR, EXP_POLYNOMIAL, LN2_HIGH, LN2_LOW, ROUND};
        let x = _mm256_max_ps(x, _mm256_set1_ps(EXP_FLOOR));
        let rounded = _mm256_fmadd_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E), _mm256_set1_ps(ROUND));
        let n = _mm256_sub_ps(rounded, _mm256_set1_ps(ROUND));
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HIGH), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LOW), r);
        let p = EXP_POLYNOMIAL.iter().fold(_mm256_setzero_ps(), |acc, &c| {
            _mm256_fmadd_ps(acc, r, _mm256_set1_ps(c))
        });
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
        let exponent = _mm256_sub_epi32(_mm256_castps_si256(rounded), _mm256_set1_epi32(ROUND.to_bits() as i32));
        let two_to_n = _mm256_slli_epi32(_mm256_add_epi32(exponent, _mm256_set1_epi32(127)), 23);
        _mm256_mul_ps(_mm256_castsi256_ps(two_to_n), y)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn max(v: __m256) -> f32 {
        let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
        _mm_cvtss_f32(m)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn sum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT_FIELDS: &str = r#""vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "max_position_embeddings": 16, "initializer_range": 0.02,
        "layer_norm_eps": 1e-5, "pad_token_id": 1"#;

    #[test]
    fn a_config_names_its_family_and_odd_ones_are_refused() {
        let bert = ModelConfig::parse(&format!(r#"{{{BERT_FIELDS}, "type_vocab_size": 2}}"#)).unwrap();
        assert_eq!(bert.family, Family::Bert);
        assert_eq!(bert.first_position(), 0);
        let mpnet = ModelConfig::parse(&format!(
            r#"{{{BERT_FIELDS}, "model_type": "mpnet", "relative_attention_num_buckets": 32}}"#
        ))
        .unwrap();
        assert_eq!(
            mpnet.family,
            Family::Mpnet {
                buckets: 32,
                padding_id: 1
            }
        );
        assert_eq!(mpnet.first_position(), 2);
        for bad in [
            format!(r#"{{{BERT_FIELDS}, "model_type": "xlm-roberta", "type_vocab_size": 1}}"#),
            format!(r#"{{{BERT_FIELDS}, "model_type": "mpnet", "relative_attention_num_buckets": 0}}"#),
            format!(r#"{{{BERT_FIELDS}, "model_type": "mpnet", "relative_attention_num_buckets": 7}}"#),
            "not json".to_string(),
        ] {
            assert!(ModelConfig::parse(&bad).is_err(), "{bad}");
        }
    }

    /// T5's bidirectional buckets with 32 buckets and distance 128, as
    /// Hugging Face's MPNet computes them.
    #[test]
    fn relative_positions_fall_in_t5_buckets() {
        let cases = [
            (0, 0),
            (-1, 1),
            (-7, 7),
            (-8, 8),
            (-11, 8),
            (-12, 9),
            (-16, 10),
            (-32, 12),
            (-64, 14),
            (-127, 15),
            (-500, 15),
            (1, 17),
            (7, 23),
            (8, 24),
            (500, 31),
        ];
        for (relative, bucket) in cases {
            assert_eq!(relative_bucket(relative, 32), bucket, "relative position {relative}");
        }
        assert_eq!(relative_buckets(2, 32), vec![0, 17, 1, 0]);
    }

    #[test]
    fn erf_matches_libm() {
        let worst = (-6000..=6000)
            .map(|i| i as f32 / 1000.0)
            .map(|x| (erf(x) - candle_core::cpu::erf::erf_f32(x)).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-6, "erf is {worst} from libm's");
    }

    #[test]
    fn padding_must_sit_at_the_end_of_a_mask() {
        assert_eq!(real_tokens(&[vec![1, 1, 0], vec![1, 1, 1]]).unwrap(), [2, 3]);
        assert!(real_tokens(&[vec![0, 1, 1]]).is_err());
        assert!(real_tokens(&[vec![1, 0, 1]]).is_err());
        assert!(real_tokens(&[vec![0, 0]]).is_err());
    }

    #[test]
    fn exp_matches_libm_and_is_zero_below_the_floor() {
        for i in 0..=87_000 {
            let x = -(i as f32) / 1000.0;
            let (ours, libm) = (exp(x), x.exp());
            assert!((ours - libm).abs() <= 3e-7 * libm, "e^{x}: {ours} against {libm}");
        }
        assert!(exp(-1e4) < 2e-38 && exp(f32::MIN) < 2e-38);
    }

    /// Rows whose real keys end mid-vector; scores far apart (one dominates).
    #[test]
    fn softmax_weighs_only_the_real_keys_and_the_vector_one_agrees() {
        let (keys, real, rows) = (37, 29, 3);
        let scores: Vec<f32> = (0..keys * rows)
            .map(|i| ((i * 7919) % 101) as f32 / 9.0 - 5.0)
            .collect();
        let mut portable = scores.clone();
        portable_softmax_rows(&mut portable, keys, real);
        for (out, row) in portable.chunks_exact(keys).zip(scores.chunks_exact(keys)) {
            assert!((out[..real].iter().sum::<f32>() - 1.0).abs() < 1e-6);
            // The padded keys are left alone (the context product reads only the real ones).
            assert_eq!(out[real..], row[real..]);
            let max = row[..real].iter().fold(f32::MIN, |m, &v| m.max(v));
            let total: f64 = row[..real].iter().map(|&v| f64::from(v - max).exp()).sum();
            for (&w, &v) in out.iter().zip(row).take(real) {
                let expected = f64::from(v - max).exp() / total;
                assert!((f64::from(w) - expected).abs() < 1e-6, "{w} against {expected}");
            }
        }
        let mut dispatched = scores.clone();
        softmax_rows(&mut dispatched, keys, real);
        for (a, b) in dispatched.iter().zip(&portable) {
            assert!((a - b).abs() < 1e-7, "{a} against {b}");
        }
    }

    /// Odd shapes: tiles cut short on both rows and columns.
    #[test]
    fn the_vector_product_equals_the_portable_one() {
        let (inp, out) = (40, 13);
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        let d = Dense {
            weight: (0..inp * out).map(|_| half::f16::from_f32(next()).to_bits()).collect(),
            bias: (0..out).map(|_| next()).collect(),
            inp,
            out,
        };
        for m in [1, 3, 4, 7] {
            let x: Vec<f32> = (0..m * inp).map(|_| next()).collect();
            let mut fast = Vec::new();
            dense(&x, m, &d, &mut fast);
            let mut portable = vec![0.0; m * out];
            dense_scalar(&x, &d, &mut portable);
            assert_eq!(fast.len(), portable.len());
            for (a, b) in fast.iter().zip(&portable) {
                assert!((a - b).abs() < 1e-5, "m={m}: {a} vs {b}");
            }
        }
    }
}
