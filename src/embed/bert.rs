//! ken's BERT pass, for a padded batch of chunks and a single query alike.
//!
//! Two encoder families run through it ([`Family`]): BERT (MiniLM, bge,
//! e5, gte) and MPNet, which is BERT's layers with a learned bias per
//! relative-position bucket added to every attention score, no token types,
//! and positions counted from after the padding id.
//!
//! Token rows are read straight from the mapped weights file; each layer
//! then runs on plain rows. Its linear layers go through [`Projection`]:
//! bf16 products where the CPU has AVX512-BF16 (1.6x the f32 pass on
//! batches, 2-3x on a query; vectors within 1e-4 in cosine), else f32
//! (ken's AVX2 kernel, or `gemm`), or half-float weights for a few rows (a
//! query), since `gemm` packs the weights on every call, most of the work
//! for ten rows.
//! Query, key and value are one product, and bias, residual, GELU and layer
//! norm are applied while a block of rows is in cache. Attention is one task
//! per (item, head) on one thread ([`Attention`]): both products, and a
//! softmax over the item's real keys, for its real query rows only. candle's
//! batched products split each small product over both cores, and a padding
//! mask plus candle's generic softmax took a quarter of a batch's time.
//!
//! GELU's erf is a branch-free rational function ([`erf`]). libm's, which
//! candle's own GELU calls per element, was ~16% of a batch's profile.
//!
//! candle's `BertModel` stays the reference: with f32 products the vectors
//! match its to 1e-6 in cosine (tests/semantic.rs checks), so stored chunk
//! vectors and queries stay comparable whichever pass made them.

use crate::embed::model::Pooling;
use crate::embed::projection::{OutputRows, Precision, Projection};
use anyhow::{anyhow, bail, Context, Result};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device};
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

struct Norm {
    gain: Vec<f32>,
    bias: Vec<f32>,
}

/// ken's pass over a padded batch of chunks or a single query: token rows
/// read from the mapped weights file, then each layer on plain rows.
pub struct Encoder {
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

struct Layer {
    /// The query (scaled by 1/√d), key and value projections side by side.
    qkv: Projection,
    attention_out: Projection,
    attention_norm: Norm,
    intermediate: Projection,
    output: Projection,
    output_norm: Norm,
}

/// A pass's buffers, reused across layers.
#[derive(Default)]
struct Scratch {
    qkv: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    inner: Vec<f32>,
}

impl Encoder {
    /// Loads the weights of `model.safetensors` in `dir` for `config`, the
    /// linear layers' products in `precision`. Only the architecture
    /// candle's BertModel also runs (absolute positions, exact GELU) is
    /// accepted, so the two agree.
    pub fn load(dir: &Path, model: &ModelConfig, precision: Precision) -> Result<Encoder> {
        let config = &model.bert;
        check_architecture(config)?;
        // SAFETY: the weights file is mapped read-only and not modified while mapped.
        let weights =
            unsafe { MmapedSafetensors::new(dir.join("model.safetensors")) }.context("mapping model.safetensors")?;
        let prefix = weights_prefix(|name| weights.get(name).is_ok())?;
        // Word embedding rows are read straight from the mapped file.
        let words = weights.get(&format!("{prefix}embeddings.word_embeddings.weight"))?;
        if DType::try_from(words.dtype()).ok() != Some(DType::F32) {
            bail!("ken's pass reads f32 word embeddings, not {:?}", words.dtype());
        }
        let load = |name: &str, len: usize| -> Result<Vec<f32>> {
            let full = format!("{prefix}{name}");
            let view = weights.get(&full).with_context(|| format!("reading {full}"))?;
            let values = if DType::try_from(view.dtype()).ok() == Some(DType::F32) {
                // Straight from the mapped bytes: one copy, not candle's two.
                view.data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .collect()
            } else {
                let tensor = weights.load(&full, &Device::Cpu)?;
                tensor.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?
            };
            if values.len() != len {
                bail!("{full} has {} values, not {len}", values.len());
            }
            Ok(values)
        };
        let (hidden, inter) = (config.hidden_size, config.intermediate_size);
        let dense = |name: &str, inputs: usize, outputs: usize, scale: f32| -> Result<(Vec<f32>, Vec<f32>)> {
            let mut weight = load(&format!("{name}.weight"), inputs * outputs)?;
            let mut bias = load(&format!("{name}.bias"), outputs)?;
            weight.iter_mut().chain(&mut bias).for_each(|v| *v *= scale);
            Ok((weight, bias))
        };
        let projection = |name: &str, inputs: usize, outputs: usize| -> Result<Projection> {
            let (weight, bias) = dense(name, inputs, outputs, 1.0)?;
            Ok(Projection::new(weight, bias, inputs, outputs, precision))
        };
        let norm = |name: &str| -> Result<Norm> {
            // Old checkpoints name the LayerNorm parameters gamma/beta.
            let gain = load(&format!("{name}.weight"), hidden).or_else(|_| load(&format!("{name}.gamma"), hidden))?;
            let bias = load(&format!("{name}.bias"), hidden).or_else(|_| load(&format!("{name}.beta"), hidden))?;
            Ok(Norm { gain, bias })
        };
        // Attention divides each score by √(head size); the query does it once instead.
        let score_scale = 1.0 / ((hidden / config.num_attention_heads) as f32).sqrt();
        let [query, key, value, attention_out, attention_norm] = model.attention_names();
        use rayon::prelude::*;
        // Both cores: converting and packing the weights is most of a load.
        let layers = (0..config.num_hidden_layers)
            .into_par_iter()
            .map(|i| {
                let at = format!("encoder.layer.{i}");
                let (mut weight, mut bias) = dense(&format!("{at}.{query}"), hidden, hidden, score_scale)?;
                for name in [key, value] {
                    let (w, b) = dense(&format!("{at}.{name}"), hidden, hidden, 1.0)?;
                    weight.extend(w);
                    bias.extend(b);
                }
                Ok(Layer {
                    qkv: Projection::new(weight, bias, hidden, 3 * hidden, precision),
                    attention_out: projection(&format!("{at}.{attention_out}"), hidden, hidden)?,
                    attention_norm: norm(&format!("{at}.{attention_norm}"))?,
                    intermediate: projection(&format!("{at}.intermediate.dense"), hidden, inter)?,
                    output: projection(&format!("{at}.output.dense"), inter, hidden)?,
                    output_norm: norm(&format!("{at}.output.LayerNorm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let positions = load(
            "embeddings.position_embeddings.weight",
            config.max_position_embeddings * hidden,
        )?;
        let (token_types, relative_bias) = match model.family {
            Family::Bert => (
                Some(load(
                    "embeddings.token_type_embeddings.weight",
                    config.type_vocab_size * hidden,
                )?),
                None,
            ),
            Family::Mpnet { buckets, .. } => {
                let table = load(
                    "encoder.relative_attention_bias.weight",
                    buckets * config.num_attention_heads,
                )?;
                (None, Some((table, buckets)))
            }
        };
        let embedding_norm = norm("embeddings.LayerNorm")?;
        Ok(Encoder {
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

    /// The last hidden states, `batch × len` rows of `hidden`, of a padded
    /// batch: token `ids` and `types`, `len` per item, each item's first
    /// `real_tokens[b]` real and the rest padding.
    pub fn forward(&self, ids: &[u32], types: &[u32], real_tokens: &[usize], len: usize) -> Result<Vec<f32>> {
        let most = self.positions.len() / self.hidden - self.first_position;
        if len == 0 || len > most {
            bail!("ken's pass takes 1 to {most} tokens an input, not {len}");
        }
        if ids.len() != real_tokens.len() * len || real_tokens.iter().any(|&n| n == 0 || n > len) {
            bail!(
                "{} token ids for {} items of {len}, {real_tokens:?} real",
                ids.len(),
                real_tokens.len()
            );
        }
        let mut x = Vec::with_capacity(ids.len() * self.hidden);
        for (item, ids) in ids.chunks_exact(len).enumerate() {
            self.embeddings(ids, types.get(item * len..).unwrap_or_default(), &mut x)?;
        }
        let relative_bias = self.relative_bias.as_ref().map(|(table, buckets)| {
            // (heads, len, len): the same bias in every layer.
            let pairs = relative_buckets(len, *buckets);
            (0..self.heads)
                .flat_map(|head| pairs.iter().map(move |&b| table[b as usize * self.heads + head]))
                .collect::<Vec<f32>>()
        });
        let attention = Attention {
            real_tokens,
            len,
            heads: self.heads,
            relative_bias: relative_bias.as_deref(),
        };
        let mut scratch = Scratch::default();
        // On one of rayon's threads, each step's parts go to the other
        // workers by stealing; from a thread outside the pool every step
        // was a hand-off and a sleep, half of a query's pass.
        rayon::scope(|_| {
            for layer in &self.layers {
                self.layer(layer, &mut x, &attention, &mut scratch);
            }
        });
        Ok(x)
    }

    /// The pooled, unit-length embedding of one tokenized input.
    pub fn embed(&self, ids: &[u32], type_ids: &[u32], pooling: Pooling) -> Result<Vec<f32>> {
        let rows = self.forward(ids, type_ids, &[ids.len()], ids.len())?;
        Ok(pool(&rows, self.hidden, &[ids.len()], ids.len(), pooling).remove(0))
    }

    /// The embedding rows of one input's tokens (positions from its first), appended to `x`.
    fn embeddings(&self, ids: &[u32], type_ids: &[u32], x: &mut Vec<f32>) -> Result<()> {
        let h = self.hidden;
        let words = self.weights.get(&self.word_embeddings)?;
        let bytes = words.data();
        let vocab = bytes.len() / (4 * h);
        for (pos, &id) in ids.iter().enumerate() {
            let id = id as usize;
            if id >= vocab {
                bail!("token id {id} is outside the vocabulary ({vocab})");
            }
            let word = &bytes[id * 4 * h..(id + 1) * 4 * h];
            let at = pos + self.first_position;
            let position = &self.positions[at * h..(at + 1) * h];
            let start = x.len();
            x.extend(
                word.chunks_exact(4)
                    .zip(position)
                    .map(|(w, p)| f32::from_le_bytes(w.try_into().expect("4 bytes")) + p),
            );
            let row = &mut x[start..];
            if let Some(types) = &self.token_types {
                let kind = type_ids.get(pos).copied().unwrap_or(0) as usize;
                let token_type = types
                    .get(kind * h..(kind + 1) * h)
                    .ok_or_else(|| anyhow!("token type {kind} is outside the model's types"))?;
                row.iter_mut().zip(token_type).for_each(|(v, t)| *v += t);
            }
            layer_norm(row, &self.embedding_norm, self.eps);
        }
        Ok(())
    }

    /// One layer over all rows of `x`, in place.
    fn layer(&self, layer: &Layer, x: &mut Vec<f32>, attention: &Attention, s: &mut Scratch) {
        let m = x.len() / self.hidden;
        let (hidden, eps) = (self.hidden, self.eps);
        let normalised = |norm| move |rows: &mut [f32]| normalise_rows(rows, hidden, norm, eps);
        layer.qkv.apply(x, m, None, |_| {}, &mut s.qkv);
        attention.context(&s.qkv, &mut s.context);
        let attended = normalised(&layer.attention_norm);
        layer
            .attention_out
            .apply(&s.context, m, Some(x), attended, &mut s.attended);
        layer.intermediate.apply(&s.attended, m, None, gelu_all, &mut s.inner);
        let output = normalised(&layer.output_norm);
        layer.output.apply(&s.inner, m, Some(&s.attended), output, x);
    }
}

/// [`layer_norm`] of each `hidden`-wide row.
fn normalise_rows(rows: &mut [f32], hidden: usize, norm: &Norm, eps: f32) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { normalise_rows_avx512(rows, hidden, norm, eps) };
    }
    rows.chunks_exact_mut(hidden).for_each(|row| layer_norm(row, norm, eps))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn normalise_rows_avx512(rows: &mut [f32], hidden: usize, norm: &Norm, eps: f32) {
    rows.chunks_exact_mut(hidden).for_each(|row| layer_norm(row, norm, eps))
}

#[inline(always)]
fn layer_norm(row: &mut [f32], norm: &Norm, eps: f32) {
    let n = row.len() as f32;
    let mean = lane_sum(row, |v| v) / n;
    let var = lane_sum(row, |v| (v - mean) * (v - mean)) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, g), b) in row.iter_mut().zip(&norm.gain).zip(&norm.bias) {
        *v = (*v - mean) * inv * g + b;
    }
}

/// The sum of `f` of each value, in 16 lanes the compiler vectorises (a
/// plain float sum keeps its order, one add at a time).
#[inline(always)]
fn lane_sum(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; 16];
    let whole = values.chunks_exact(16);
    let tail: f32 = whole.remainder().iter().map(|&v| f(v)).sum();
    for chunk in whole {
        lanes.iter_mut().zip(chunk).for_each(|(lane, &v)| *lane += f(v));
    }
    lanes.iter().sum::<f32>() + tail
}

/// What the weights' tensor names start with (`""`, `"bert."` or `"model."`),
/// given whether the file `has` a tensor of that name.
fn weights_prefix(has: impl Fn(&str) -> bool) -> Result<&'static str> {
    ["", "bert.", "mpnet.", "model."]
        .into_iter()
        .find(|p| has(&format!("{p}embeddings.word_embeddings.weight")))
        .ok_or_else(|| anyhow!("model.safetensors has no word embeddings"))
}

/// Refuses what ken's pass does not run (candle's BertModel then runs the model).
fn check_architecture(config: &Config) -> Result<()> {
    if config.hidden_act != HiddenAct::Gelu {
        bail!("ken's BERT pass supports GELU (erf) activations only");
    }
    if config.position_embedding_type != PositionEmbeddingType::Absolute {
        bail!("ken's BERT pass supports absolute position embeddings only");
    }
    if !config.hidden_size.is_multiple_of(config.num_attention_heads) {
        bail!("hidden size {} is not a multiple of the head count", config.hidden_size);
    }
    Ok(())
}

/// Each item's pooled, unit-length vector, from its `len` rows `hidden`
/// wide, the first `real_tokens[b]` of them real (padding at the end).
pub fn pool(rows: &[f32], hidden: usize, real_tokens: &[usize], len: usize, pooling: Pooling) -> Vec<Vec<f32>> {
    real_tokens
        .iter()
        .enumerate()
        .map(|(item, &real)| {
            let rows = &rows[item * len * hidden..][..real * hidden];
            let mut pooled = vec![0f32; hidden];
            match pooling {
                // The mean, whose 1/real the unit length cancels out.
                Pooling::Mean => {
                    for row in rows.chunks_exact(hidden) {
                        pooled.iter_mut().zip(row).for_each(|(p, v)| *p += v);
                    }
                }
                // The first token, `[CLS]`.
                Pooling::Cls => pooled.copy_from_slice(&rows[..hidden]),
            }
            let norm = pooled.iter().map(|v| v * v).sum::<f32>().sqrt();
            pooled.iter_mut().for_each(|v| *v /= norm);
            pooled
        })
        .collect()
}

/// Each item's count of real tokens, from its attention mask, `len` per
/// item: the padding must sit at the end, where [`Attention`] leaves it out.
pub fn real_tokens(mask: &[u32], len: usize) -> Result<Vec<usize>> {
    mask.chunks(len.max(1))
        .map(|row| {
            let real = row.iter().take_while(|&&m| m == 1).count();
            if real == 0 || row[real..].iter().any(|&m| m != 0) {
                bail!("ken's pass takes a mask of 1s then 0s (padding at the end), not {row:?}");
            }
            Ok(real)
        })
        .collect()
}

/// Self-attention of each item and head, `softmax(q·kᵀ + bias)·v` over the
/// item's first `real_tokens[b]` keys (padding sits at the end and gets
/// weight 0, and its query rows are left 0). One (item, head) a task, its two
/// products on one thread: candle's batched products split each small
/// product over both cores, thousands of times a batch, and kept every score
/// in memory (50 MB for 16 × 256 tokens).
struct Attention<'a> {
    real_tokens: &'a [usize],
    /// Tokens per item, padding included.
    len: usize,
    heads: usize,
    /// MPNet's bias, `(heads, len, len)`.
    relative_bias: Option<&'a [f32]>,
}

impl Attention<'_> {
    /// The context rows, `hidden` wide, of the query, key and value rows
    /// side by side in `qkv` (the query already scaled by 1/√d).
    fn context(&self, qkv: &[f32], context: &mut Vec<f32>) {
        use rayon::prelude::*;
        let (len, heads) = (self.len, self.heads);
        let hidden = qkv.len() / (self.real_tokens.len() * len * 3);
        let (head, qkv_width) = (hidden / heads, 3 * hidden);
        assert_eq!(qkv.len(), self.real_tokens.len() * len * qkv_width);
        assert!(self.real_tokens.iter().all(|&n| n > 0 && n <= len));
        assert!(self.relative_bias.is_none_or(|bias| bias.len() == heads * len * len));
        context.clear();
        context.resize(self.real_tokens.len() * len * hidden, 0.0);
        let out = OutputRows(context.as_mut_ptr());
        (0..self.real_tokens.len() * heads).into_par_iter().for_each_init(
            || vec![0.0f32; len * len],
            |scores, item_head| {
                let (item, h) = (item_head / heads, item_head % heads);
                let real = self.real_tokens[item];
                let scores = &mut scores[..real * len];
                let q = qkv[item * len * qkv_width + h * head..].as_ptr();
                // SAFETY: q, k and v are `real` rows `qkv_width` apart, `head`
                // wide, inside qkv; scores is real × len, its first `real`
                // columns written; this task alone writes its item's rows
                // and its head's columns of the context, which outlives it.
                unsafe {
                    let (k, v) = (q.add(hidden), q.add(2 * hidden));
                    product(
                        real,
                        real,
                        head,
                        (scores.as_mut_ptr(), len),
                        (q, qkv_width, 1),
                        (k, 1, qkv_width),
                    );
                    if let Some(bias) = self.relative_bias {
                        let bias = &bias[h * len * len..][..real * len];
                        for (row, bias) in scores.chunks_exact_mut(len).zip(bias.chunks_exact(len)) {
                            row[..real].iter_mut().zip(bias).for_each(|(s, b)| *s += b);
                        }
                    }
                    softmax_rows(scores, len, real);
                    let out = out.start().add(item * len * hidden + h * head);
                    product(
                        real,
                        head,
                        real,
                        (out, hidden),
                        (scores.as_ptr(), len, 1),
                        (v, qkv_width, 1),
                    );
                }
            },
        );
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

/// Whether AVX-512F twins of the loops below (sixteen floats at a time) can run here.
fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma");
    #[allow(unreachable_code)]
    false
}

/// Whether the AVX2/FMA versions of the loops below (eight floats at a
/// time) can run here.
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
    #[allow(unreachable_code)]
    false
}

/// [`gelu`] of every value, in place.
fn gelu_all(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { gelu_all_avx512(values) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { gelu_all_avx2(values) };
    }
    gelu_each(values)
}

#[inline(always)]
fn gelu_each(values: &mut [f32]) {
    values.iter_mut().for_each(|v| *v = gelu(*v));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_all_avx2(values: &mut [f32]) {
    gelu_each(values)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn gelu_all_avx512(values: &mut [f32]) {
    gelu_each(values)
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use crate::embed::projection::x86::sum;
    use std::arch::x86_64::*;

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
        assert_eq!(real_tokens(&[1, 1, 0, 1, 1, 1], 3).unwrap(), [2, 3]);
        assert!(real_tokens(&[0, 1, 1], 3).is_err());
        assert!(real_tokens(&[1, 0, 1], 3).is_err());
        assert!(real_tokens(&[0, 0], 2).is_err());
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
}
