//! The built-in model's linear layers, `y = x · Wᵀ + b` over a query's few
//! token rows or a batch's thousands, with the weights packed once at load.
//!
//! Where the CPU has AVX512-BF16 the product runs in bfloat16: weights and
//! activations rounded to bf16 (8 bits of mantissa), each pair of products
//! summed into f32 by one `vdpbf16ps`, which does twice the work of an f32
//! FMA per instruction. No crate offers this (candle and `gemm` have no bf16
//! kernels on x86), so the kernel is here: an 8-row × 48-column tile kept
//! in 24 registers, the weights in 16-column panels of bf16 pairs, the
//! activations converted once per call. With AVX2 and FMA but no AVX-512
//! (Zen 3, most laptops) the product is f32 in the same shape: 6-row × 16-
//! column tiles against 8-column panels packed at load, the rows laid out
//! tile by tile (single-threaded 1.3-1.4x `gemm`'s kernel on a layer's
//! shapes, which packs the weights on every call and reached 45% of the FMA
//! peak). Elsewhere the product is f32 through `gemm` (its AVX-512 kernels
//! included), and a few rows (a query) go against half-float weights
//! (AVX2). Bias, a residual and a row
//! function (GELU, layer norm) are applied to each block of rows while it is
//! still in cache.

use rayon::prelude::*;

/// How a layer's products are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f32 throughout, the reference.
    F32,
    /// bf16 products summed in f32 (AVX512-BF16 only).
    Bf16,
}

impl Precision {
    /// bf16 where the CPU multiplies it natively, else f32.
    pub fn fastest() -> Precision {
        if bf16_supported() {
            Precision::Bf16
        } else {
            Precision::F32
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Precision> {
        match text {
            "f32" => Ok(Precision::F32),
            "bf16" if bf16_supported() => Ok(Precision::Bf16),
            "bf16" => anyhow::bail!("bf16 products need a CPU with AVX512-BF16; this one has none"),
            _ => anyhow::bail!("precision {text:?}: expected f32 or bf16"),
        }
    }
}

/// Whether this CPU runs the bf16 kernel.
pub fn bf16_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16");
    #[allow(unreachable_code)]
    false
}

/// Output columns per weight panel: one 512-bit vector of f32.
const LANES: usize = 16;
/// Output columns per f32 panel (AVX2): one 256-bit vector.
const F32_LANES: usize = 8;

/// A linear layer, `inputs` wide in and `outputs` wide out.
pub struct Projection {
    inputs: usize,
    outputs: usize,
    bias: Vec<f32>,
    weights: Weights,
}

enum Weights {
    /// PyTorch's layout: `outputs` rows of `inputs`; and the same as half
    /// floats where the CPU has AVX2/FMA/F16C, for a few rows (a query):
    /// `gemm` packs the weights on every call, most of the work for ten rows.
    F32 { weight: Vec<f32>, half: Option<Vec<u16>> },
    /// Panels of [`F32_LANES`] output columns, each input's eight
    /// weights side by side, for AVX2/FMA without AVX-512 (there `gemm`'s
    /// kernel reached 45% of the FMA peak on a layer's shapes); and the half
    /// floats for a few rows.
    F32Panels { panels: Vec<f32>, half: Vec<u16> },
    /// Panels of [`LANES`] output columns; in each, for every pair of inputs,
    /// the 16 columns' two weights as one `u32` (the even input in the low half).
    Bf16(Vec<u32>),
}

impl Projection {
    /// `weight` holds `outputs` rows of `inputs` (PyTorch's layout). bf16
    /// needs a CPU that runs it and `outputs` a multiple of 16; otherwise f32.
    pub fn new(weight: Vec<f32>, bias: Vec<f32>, inputs: usize, outputs: usize, precision: Precision) -> Projection {
        assert!(
            weight.len() == inputs * outputs && bias.len() == outputs,
            "weight and bias shapes"
        );
        let weights = if precision == Precision::Bf16 && bf16_supported() && outputs.is_multiple_of(LANES) {
            Weights::Bf16(pack_panels(&weight, inputs, outputs))
        } else if f32_panels_supported() && inputs.is_multiple_of(8) && outputs.is_multiple_of(F32_LANES) {
            Weights::F32Panels {
                panels: pack_f32_panels(&weight, inputs, outputs),
                half: half_floats(&weight),
            }
        } else {
            let half = (inputs.is_multiple_of(8) && half_supported()).then(|| half_floats(&weight));
            Weights::F32 { weight, half }
        };
        Projection {
            inputs,
            outputs,
            bias,
            weights,
        }
    }

    pub fn precision(&self) -> Precision {
        match self.weights {
            Weights::F32 { .. } | Weights::F32Panels { .. } => Precision::F32,
            Weights::Bf16(_) => Precision::Bf16,
        }
    }

    /// `out = x · Wᵀ + b (+ residual)` for the `m` rows of `x`, then `finish`
    /// on each block of finished rows (`outputs` apart); blocks run on all cores.
    pub fn apply(
        &self,
        x: &[f32],
        m: usize,
        residual: Option<&[f32]>,
        finish: impl Fn(&mut [f32]) + Sync,
        out: &mut Vec<f32>,
    ) {
        let (k, n) = (self.inputs, self.outputs);
        assert!(x.len() >= m * k && residual.is_none_or(|r| r.len() >= m * n));
        out.clear();
        out.resize(m * n, 0.0);
        if m == 0 {
            return;
        }
        // Blocks of rows small enough for the cache, at least two per core.
        let block = m
            .div_ceil(2 * rayon::current_num_threads())
            .next_multiple_of(8)
            .clamp(8, 64);
        match &self.weights {
            #[cfg(target_arch = "x86_64")]
            Weights::F32 { half: Some(half), .. } | Weights::F32Panels { half, .. } if m <= FEW_ROWS => {
                let rows = OutputRows(out.as_mut_ptr());
                // SAFETY: half weights exist only where the CPU has AVX2, FMA
                // and F16C; each part writes its own columns of `out`.
                column_parts(n.div_ceil(x86::COLS), x86::COLS).for_each(|part| unsafe {
                    x86::half_product(
                        x,
                        m,
                        k,
                        n,
                        half,
                        rows,
                        part.start * x86::COLS..(part.end * x86::COLS).min(n),
                    )
                });
            }
            // gemm packs and splits the whole product best itself.
            Weights::F32 { weight, .. } => product_f32(
                x,
                m,
                k,
                n,
                weight,
                out,
                gemm::Parallelism::Rayon(rayon::current_num_threads()),
            ),
            #[cfg(target_arch = "x86_64")]
            Weights::Bf16(panels) if m <= FEW_ROWS => bf16_by_columns(x, m, k, n, panels, out),
            Weights::Bf16(_) | Weights::F32Panels { .. } => {}
        }
        let by_rows = match &self.weights {
            Weights::Bf16(panels) if m > FEW_ROWS => Some(panels),
            _ => None,
        };
        let f32_by_rows = match &self.weights {
            Weights::F32Panels { panels, .. } if m > FEW_ROWS => Some(panels),
            _ => None,
        };
        out.par_chunks_mut(block * n).enumerate().for_each_init(
            <(Vec<u32>, Vec<f32>)>::default,
            |(pairs, packed), (i, out)| {
                let rows = out.len() / n;
                #[cfg(target_arch = "x86_64")]
                if let Some(panels) = by_rows {
                    let stride = k.div_ceil(2);
                    pairs.clear();
                    pairs.resize(rows * stride, 0u32);
                    // SAFETY: Bf16 weights exist only where the CPU runs AVX512-BF16.
                    unsafe {
                        x86::to_pairs(&x[i * block * k..][..rows * k], rows, k, pairs);
                        x86::product(
                            pairs,
                            rows,
                            stride,
                            panels,
                            n,
                            OutputRows(out.as_mut_ptr()),
                            0..n / LANES,
                        );
                    }
                }
                #[cfg(target_arch = "x86_64")]
                if let Some(panels) = f32_by_rows {
                    // SAFETY: these panels exist only where the CPU has AVX2 and FMA.
                    unsafe {
                        x86::f32_product(
                            &x[i * block * k..][..rows * k],
                            rows,
                            k,
                            panels,
                            n,
                            OutputRows(out.as_mut_ptr()),
                            packed,
                        );
                    }
                }
                for (row_at, row) in out.chunks_exact_mut(n).enumerate() {
                    row.iter_mut().zip(&self.bias).for_each(|(y, b)| *y += b);
                    if let Some(residual) = residual {
                        let at = (i * block + row_at) * n;
                        row.iter_mut().zip(&residual[at..at + n]).for_each(|(y, r)| *y += r);
                    }
                }
                finish(out);
            },
        );
    }
}

/// Up to this many rows (a query) are multiplied in one block, the columns
/// split between the cores: each weight is read from memory once, where
/// blocks of rows would each read them all. With f32 weights, these rows
/// take the half-float product.
const FEW_ROWS: usize = 64;

/// The bf16 product of a few rows, `out = x · Wᵀ`, the panels split
/// between the cores.
#[cfg(target_arch = "x86_64")]
fn bf16_by_columns(x: &[f32], m: usize, k: usize, n: usize, panels: &[u32], out: &mut [f32]) {
    let stride = k.div_ceil(2);
    let mut pairs = vec![0u32; m * stride];
    let rows = OutputRows(out.as_mut_ptr());
    // SAFETY: Bf16 weights exist only where the CPU runs AVX512-BF16; each
    // part writes its own panels' columns of `out`.
    unsafe { x86::to_pairs(x, m, k, &mut pairs) };
    column_parts(n / LANES, LANES).for_each(|panels_of| unsafe {
        x86::product(&pairs, m, stride, panels, n, rows, panels_of);
    });
}

/// The few rows' product split by columns: `units` (groups of
/// `unit_columns` columns a kernel takes together) in a few parts per
/// thread, so a thread whose core is busy for a while (with a search's
/// lexical side) leaves its parts to the others instead of holding up the
/// whole product.
#[cfg(target_arch = "x86_64")]
fn column_parts(units: usize, unit_columns: usize) -> impl IndexedParallelIterator<Item = std::ops::Range<usize>> {
    // A part of fewer columns costs more in rayon's hand-off than it saves.
    const MIN_PART_COLUMNS: usize = 16;
    let most = (units * unit_columns / MIN_PART_COLUMNS).max(1);
    let parts = (4 * rayon::current_num_threads()).min(most).min(units.max(1));
    (0..parts)
        .into_par_iter()
        .map(move |part| part * units / parts..(part + 1) * units / parts)
}

/// `weight` as half floats' bits (a few rows' products read them).
fn half_floats(weight: &[f32]) -> Vec<u16> {
    weight.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect()
}

/// Whether the half-float product for a few rows runs here.
fn half_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
    #[allow(unreachable_code)]
    false
}

/// Whether the AVX2 f32 panels serve the products of many rows: AVX2 and
/// FMA (and F16C, for the few rows of a query) without AVX-512, where
/// `gemm`'s AVX-512 kernels are the faster ones.
fn f32_panels_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    return half_supported() && !is_x86_feature_detected!("avx512f");
    #[allow(unreachable_code)]
    false
}

/// `weight` (`outputs` rows of `inputs`) as [`Weights::F32Panels`] panels.
fn pack_f32_panels(weight: &[f32], inputs: usize, outputs: usize) -> Vec<f32> {
    let mut panels = Vec::with_capacity(weight.len());
    for first in (0..outputs).step_by(F32_LANES) {
        for input in 0..inputs {
            panels.extend((first..first + F32_LANES).map(|output| weight[output * inputs + input]));
        }
    }
    panels
}

/// An output matrix shared by threads that fill disjoint parts of it.
#[derive(Clone, Copy)]
pub(crate) struct OutputRows(pub(crate) *mut f32);

impl OutputRows {
    pub(crate) fn start(self) -> *mut f32 {
        self.0
    }
}

// SAFETY: only used where threads write disjoint elements.
unsafe impl Send for OutputRows {}
unsafe impl Sync for OutputRows {}

/// `out = x · Wᵀ` in f32, `x` being `m × k` and `w` `n × k`.
fn product_f32(x: &[f32], m: usize, k: usize, n: usize, w: &[f32], out: &mut [f32], threads: gemm::Parallelism) {
    assert!(x.len() >= m * k && w.len() == n * k && out.len() >= m * n);
    // SAFETY: x is m × k and w n × k (both row-major), out m × n, apart.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            threads,
        )
    }
}

/// One bf16 value, rounded to nearest even.
fn bf16_bits(v: f32) -> u32 {
    u32::from(half::bf16::from_f32(v).to_bits())
}

/// A pair of inputs as the kernel reads it: the even one in the low half.
fn pair(even: f32, odd: f32) -> u32 {
    bf16_bits(even) | (bf16_bits(odd) << 16)
}

/// `weight` (`outputs` rows of `inputs`) as [`Weights::Bf16`] panels.
fn pack_panels(weight: &[f32], inputs: usize, outputs: usize) -> Vec<u32> {
    let stride = inputs.div_ceil(2);
    let mut rows = vec![0u32; outputs * stride];
    #[cfg(target_arch = "x86_64")]
    // SAFETY: bf16 weights are packed only where the CPU runs AVX512-BF16.
    unsafe {
        x86::to_pairs(weight, outputs, inputs, &mut rows)
    };
    let mut panels = Vec::with_capacity(rows.len());
    for panel in rows.chunks_exact(LANES * stride) {
        for p in 0..stride {
            panels.extend((0..LANES).map(|lane| panel[lane * stride + p]));
        }
    }
    panels
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::{pair, OutputRows, F32_LANES, LANES};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Input rows per tile of the half-float product.
    const HALF_ROWS: usize = 4;
    /// Weight rows per tile. 4 x 2 measured best of 1x8, 2x4, 2x6, 3x4, 4x2
    /// on Zen 3 (3x4 spills registers).
    pub(super) const COLS: usize = 2;

    /// `out = x · Wᵀ` for `m` rows of `k`, `columns` of the `n` outputs,
    /// against half-float weights (`n` rows of `k`).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn half_product(
        x: &[f32],
        m: usize,
        k: usize,
        n: usize,
        half: &[u16],
        out: OutputRows,
        columns: Range<usize>,
    ) {
        assert!(k.is_multiple_of(8) && x.len() >= m * k && half.len() == n * k && columns.end <= n);
        let (w, xp) = (half.as_ptr(), x.as_ptr());
        let mut j = columns.start;
        while j < columns.end {
            let cols = (columns.end - j).min(COLS);
            let wr: [*const u16; COLS] = std::array::from_fn(|c| w.add((j + c.min(cols - 1)) * k));
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(HALF_ROWS);
                // A short tile repeats its last row; those sums are dropped.
                let xr: [*const f32; HALF_ROWS] = std::array::from_fn(|r| xp.add((i + r.min(rows - 1)) * k));
                let mut acc = [[_mm256_setzero_ps(); COLS]; HALF_ROWS];
                for at in (0..k).step_by(8) {
                    let xv: [__m256; HALF_ROWS] = std::array::from_fn(|r| _mm256_loadu_ps(xr[r].add(at)));
                    for c in 0..COLS {
                        let wv = _mm256_cvtph_ps(_mm_loadu_si128(wr[c].add(at) as *const __m128i));
                        for r in 0..HALF_ROWS {
                            acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
                        }
                    }
                }
                for (r, row_acc) in acc.iter().enumerate().take(rows) {
                    for (c, a) in row_acc.iter().enumerate().take(cols) {
                        *out.start().add((i + r) * n + j + c) = sum(*a);
                    }
                }
                i += rows;
            }
            j += cols;
        }
    }

    /// Rows per f32 tile: 6 rows × 2 panels of accumulators, two weight
    /// vectors and a broadcast fill 15 of the 16 registers.
    const F32_ROWS: usize = 6;

    /// Inputs per pass over a block's tiles: two panels' weights for them
    /// (24 kB) stay in the first-level cache while every tile reads them
    /// (the feed-forward output's 1,536 inputs take four passes).
    const F32_DEPTH: usize = 384;

    /// `out = x · Wᵀ` for `m` rows of `k` floats against every panel of `n`
    /// columns (`out` is `m × n`), two panels by six rows at a time. The rows
    /// are first laid out tile by tile in `packed`, each input's six values
    /// side by side.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn f32_product(
        x: &[f32],
        m: usize,
        k: usize,
        panels: &[f32],
        n: usize,
        out: OutputRows,
        packed: &mut Vec<f32>,
    ) {
        let panel_count = n / F32_LANES;
        assert!(x.len() >= m * k && panels.len() == panel_count * k * F32_LANES);
        let tiles = m.div_ceil(F32_ROWS);
        packed.clear();
        packed.resize(tiles * k * F32_ROWS, 0.0);
        for tile in 0..tiles {
            let rows = (m - tile * F32_ROWS).min(F32_ROWS);
            let to = &mut packed[tile * k * F32_ROWS..][..k * F32_ROWS];
            for r in 0..F32_ROWS {
                // A short tile repeats its last row; those sums are dropped.
                let row = &x[(tile * F32_ROWS + r.min(rows - 1)) * k..][..k];
                for (p, &v) in row.iter().enumerate() {
                    to[p * F32_ROWS + r] = v;
                }
            }
        }
        for depth in (0..k).step_by(F32_DEPTH) {
            let inputs = depth..(depth + F32_DEPTH).min(k);
            let mut first = 0;
            while first < panel_count {
                let count = (panel_count - first).min(2);
                let w = panels.as_ptr().add(first * k * F32_LANES);
                let o = out.start().add(first * F32_LANES);
                for tile in 0..tiles {
                    let rows = (m - tile * F32_ROWS).min(F32_ROWS);
                    let (x, o) = (packed.as_ptr().add(tile * k * F32_ROWS), o.add(tile * F32_ROWS * n));
                    match count {
                        2 => f32_tile::<2>(x, rows, k, inputs.clone(), w, o, n),
                        _ => f32_tile::<1>(x, rows, k, inputs.clone(), w, o, n),
                    }
                }
                first += count;
            }
        }
    }

    /// One tile: up to [`F32_ROWS`] rows by `P` panels over `inputs`, added
    /// to the sums in `out` unless they are the first.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn f32_tile<const P: usize>(
        x: *const f32,
        rows: usize,
        k: usize,
        inputs: Range<usize>,
        w: *const f32,
        out: *mut f32,
        n: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); P]; F32_ROWS];
        if inputs.start > 0 {
            for (r, row) in acc.iter_mut().enumerate().take(rows) {
                for (panel, sums) in row.iter_mut().enumerate() {
                    *sums = _mm256_loadu_ps(out.add(r * n + panel * F32_LANES));
                }
            }
        }
        for p in inputs {
            let weights: [__m256; P] = std::array::from_fn(|panel| _mm256_loadu_ps(w.add((panel * k + p) * F32_LANES)));
            let x = x.add(p * F32_ROWS);
            for (r, row) in acc.iter_mut().enumerate() {
                let input = _mm256_broadcast_ss(&*x.add(r));
                for panel in 0..P {
                    row[panel] = _mm256_fmadd_ps(input, weights[panel], row[panel]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate().take(rows) {
            for (panel, sums) in row.iter().enumerate() {
                _mm256_storeu_ps(out.add(r * n + panel * F32_LANES), *sums);
            }
        }
    }

    /// Rows per tile.
    const ROWS: usize = 8;
    /// Panels per tile: 8 × 3 accumulators, 3 weight vectors and a broadcast
    /// fill 28 of the 32 registers.
    const PANELS: usize = 3;

    /// The sum of eight floats.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn sum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// `m` rows of `k` floats as bf16 pairs, `k.div_ceil(2)` a row.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn to_pairs(x: &[f32], m: usize, k: usize, pairs: &mut [u32]) {
        let stride = k.div_ceil(2);
        assert!(x.len() >= m * k && pairs.len() >= m * stride);
        let whole = k - k % 32;
        for r in 0..m {
            let (src, dst) = (x.as_ptr().add(r * k), pairs.as_mut_ptr().add(r * stride));
            for c in (0..whole).step_by(32) {
                // The second operand fills the low 16 values: x[c..c+16] first.
                let packed = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src.add(c + 16)), _mm512_loadu_ps(src.add(c)));
                _mm512_storeu_si512(
                    dst.add(c / 2) as *mut _,
                    std::mem::transmute::<__m512bh, __m512i>(packed),
                );
            }
            let row = &x[r * k..][..k];
            for p in whole / 2..stride {
                *dst.add(p) = pair(row[2 * p], row.get(2 * p + 1).copied().unwrap_or(0.0));
            }
        }
    }

    /// `out = x · Wᵀ` for `m` rows of bf16 pairs (`stride` apart) against
    /// `panels_of` the packed panels of `n` columns (`out` is `m × n`).
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn product(
        x: &[u32],
        m: usize,
        stride: usize,
        panels: &[u32],
        n: usize,
        out: OutputRows,
        panels_of: Range<usize>,
    ) {
        let panel_count = n / LANES;
        assert!(x.len() >= m * stride && panels.len() == panel_count * stride * LANES && panels_of.end <= panel_count);
        let mut first = panels_of.start;
        while first < panels_of.end {
            let count = (panels_of.end - first).min(PANELS);
            let w = panels.as_ptr().add(first * stride * LANES);
            let o = out.start().add(first * LANES);
            for row in (0..m).step_by(ROWS) {
                let rows = (m - row).min(ROWS);
                let (x, o) = (x.as_ptr().add(row * stride), o.add(row * n));
                match count {
                    3 => tile::<3>(x, rows, stride, w, o, n),
                    2 => tile::<2>(x, rows, stride, w, o, n),
                    _ => tile::<1>(x, rows, stride, w, o, n),
                }
            }
            first += count;
        }
    }

    /// One tile: up to [`ROWS`] rows by `P` panels, over every input pair.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn tile<const P: usize>(x: *const u32, rows: usize, stride: usize, w: *const u32, out: *mut f32, n: usize) {
        // A short tile repeats its last row; those sums are dropped.
        let x: [*const u32; ROWS] = std::array::from_fn(|r| x.add(r.min(rows - 1) * stride));
        let mut acc = [[_mm512_setzero_ps(); P]; ROWS];
        for p in 0..stride {
            let weights: [__m512bh; P] = std::array::from_fn(|panel| {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                    w.add((panel * stride + p) * LANES) as *const _
                ))
            });
            for r in 0..ROWS {
                let inputs = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(*x[r].add(p) as i32));
                for panel in 0..P {
                    acc[r][panel] = _mm512_dpbf16_ps(acc[r][panel], inputs, weights[panel]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate().take(rows) {
            for (panel, sums) in row.iter().enumerate() {
                _mm512_storeu_ps(out.add(r * n + panel * LANES), *sums);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(count: usize, seed: u32) -> Vec<f32> {
        let mut state = seed;
        (0..count)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// `x · Wᵀ + b + residual` in f64, then `finish`'s doubling.
    fn reference(x: &[f32], w: &[f32], b: &[f32], residual: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        (0..m * n)
            .map(|at| {
                let (i, j) = (at / n, at % n);
                let dot: f64 = (0..k).map(|c| f64::from(x[i * k + c]) * f64::from(w[j * k + c])).sum();
                2.0 * (dot + f64::from(b[j]) + f64::from(residual[at]))
            })
            .collect()
    }

    /// Shapes that cut tiles short on every side: rows not a multiple of 8,
    /// panels not a multiple of 3, an odd input width with a tail past 32.
    #[test]
    fn both_precisions_match_a_float64_product() {
        for (m, k, n) in [
            (1, 8, 16),
            (13, 37, 48),
            (70, 96, 80),
            (9, 384, 32),
            (7, 40, 13),
            (30, 64, 176),
            // Many rows: AVX2 panels where the CPU has no AVX-512, with a
            // short tile, an odd panel and a last pass of 8 inputs.
            (97, 384, 40),
            (130, 776, 24),
        ] {
            let (x, w, b, residual) = (numbers(m * k, 1), numbers(n * k, 2), numbers(n, 3), numbers(m * n, 4));
            let expected = reference(&x, &w, &b, &residual, m, k, n);
            let bf16 = bf16_supported() && n.is_multiple_of(LANES);
            for precision in [Precision::F32, Precision::Bf16] {
                if precision == Precision::Bf16 && !bf16 {
                    continue;
                }
                let projection = Projection::new(w.clone(), b.clone(), k, n, precision);
                assert_eq!(projection.precision(), precision);
                let mut out = Vec::new();
                projection.apply(
                    &x,
                    m,
                    Some(&residual),
                    |rows| rows.iter_mut().for_each(|v| *v *= 2.0),
                    &mut out,
                );
                assert_eq!(out.len(), m * n);
                // bf16 keeps 8 bits of each factor: ~2^-9 relative, summed over k.
                let tolerance = match precision {
                    // A few rows take half-float weights (11 bits) where the CPU has them.
                    Precision::F32 if m <= FEW_ROWS && half_supported() => 2e-3 * (k as f64).sqrt() / 4.0,
                    // A float sum's rounding grows as √k.
                    Precision::F32 => 1e-5 * (k as f64 / 384.0).sqrt().max(1.0),
                    Precision::Bf16 => 0.01 * (k as f64).sqrt() / 4.0,
                };
                for (at, (&ours, &exact)) in out.iter().zip(&expected).enumerate() {
                    assert!(
                        (f64::from(ours) - exact).abs() < tolerance,
                        "{precision:?} {m}x{k}x{n} at {at}: {ours} against {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn bf16_needs_whole_panels() {
        let projection = Projection::new(numbers(8 * 20, 5), numbers(20, 6), 8, 20, Precision::Bf16);
        assert_eq!(projection.precision(), Precision::F32);
    }
}
