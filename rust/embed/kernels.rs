//! The forward pass's arithmetic: a packed matrix product with fused epilogues (bias, GELU,
//! residual), LayerNorm, attention for one sequence, mean pooling.
//!
//! Every kernel is plain Rust over fixed-width arrays, run through `pulp::Arch::dispatch`, which
//! enters a function compiled for the best instruction set the CPU has (AVX2+FMA on x86-64,
//! NEON on aarch64) and inlines the kernel there (`WithSimd::with_simd` and everything it
//! calls are `#[inline(always)]`), so the compiler vectorises it for that set. (A closure
//! would not do: its body is compiled apart, for the baseline set, where `mul_add` is a
//! library call.)
//! Weights are stored as bfloat16 (half the memory traffic of f32, which bounds a short
//! text's forward pass); every product and sum is accumulated in f32.

#![allow(
    clippy::inline_always,
    reason = "the kernels must be inlined into pulp's target-feature function to be vectorised"
)]
#![allow(
    clippy::many_single_char_names,
    reason = "arithmetic in the notation of its formulas"
)]

use half::bf16;

#[cfg(target_arch = "x86_64")]
mod avx512;

/// Outputs per packed panel: two 8-wide f32 vectors (AVX2), four on NEON, one 16-wide
/// (AVX-512).
const NR: usize = 16;
/// Rows (tokens) sharing one pass over a panel in the portable kernel: with a pair's two
/// widened halves, as many as AVX2's 16 registers hold without spilling.
const MR: usize = 3;

/// A linear layer `y = x W^T + b` with `W` (`n x k`, PyTorch's layout) repacked at load into
/// panels of [`NR`] outputs: panel `p` holds, for each pair of inputs `2i, 2i+1`, the weights
/// of outputs `p*NR .. p*NR+NR` contiguously, each output's two weights as one bfloat16 pair
/// (input `2i` in the low half), so one pass over the inputs reads the panel front to back and
/// a pair is the operand of AVX-512's bfloat16 dot product.
pub struct Packed {
    n: usize,
    k: usize,
    w: Vec<u32>,
    bias: Vec<f32>,
}

/// What happens to `x W^T + b` before it is stored.
#[derive(Clone, Copy)]
pub enum Epilogue<'a> {
    /// Stored as is.
    None,
    /// GELU (erf form), as BERT's feed-forward.
    Gelu,
    /// `residual` (the same shape as the output) added.
    Residual(&'a [f32]),
}

/// Two bfloat16s (rounded to nearest) as one pair, `lo` in the low half.
fn bf16_pair(lo: f32, hi: f32) -> u32 {
    u32::from(bf16::from_f32(lo).to_bits()) | u32::from(bf16::from_f32(hi).to_bits()) << 16
}

impl Packed {
    /// Packs `weight` (`n x k`, row-major) scaled by `scale`, and `bias` (`n`) scaled likewise.
    ///
    /// # Panics
    /// If the shapes disagree, `n` is not a multiple of 16 or `k` is odd (BERT's widths all
    /// are multiples of 16).
    #[must_use]
    pub fn new(weight: &[f32], bias: &[f32], n: usize, k: usize, scale: f32) -> Self {
        assert!(
            weight.len() == n * k && bias.len() == n && n.is_multiple_of(NR) && k.is_multiple_of(2)
        );
        let mut w = Vec::with_capacity(n * k / 2);
        for p in 0..n / NR {
            for i in (0..k).step_by(2) {
                for j in 0..NR {
                    let at = (p * NR + j) * k + i;
                    w.push(bf16_pair(weight[at] * scale, weight[at + 1] * scale));
                }
            }
        }
        let bias = bias.iter().map(|b| b * scale).collect();
        Self { n, k, w, bias }
    }

    /// The products of `parts` (all over the same inputs) as one: their outputs side by side.
    #[must_use]
    pub fn concat(parts: &[Self]) -> Self {
        let k = parts.first().map_or(0, |p| p.k);
        assert!(parts.iter().all(|p| p.k == k));
        Self {
            n: parts.iter().map(|p| p.n).sum(),
            k,
            w: parts.iter().flat_map(|p| p.w.iter().copied()).collect(),
            bias: parts.iter().flat_map(|p| p.bias.iter().copied()).collect(),
        }
    }

    /// Output width.
    #[must_use]
    pub fn n(&self) -> usize {
        self.n
    }

    /// `out = epilogue(x W^T + b)` for `x` of `rows x k` and `out` of `rows x n`: on
    /// AVX-512 BF16 when the CPU has it (see [`kernel`]), else on pulp's best set.
    pub fn apply(&self, x: &[f32], out: &mut [f32], epilogue: Epilogue<'_>) {
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            avx512::apply(self, x, out, epilogue);
            return;
        }
        self.apply_portable(x, out, epilogue);
    }

    /// [`Packed::apply`] on the portable kernel: f32 products of the widened weights.
    fn apply_portable(&self, x: &[f32], out: &mut [f32], epilogue: Epilogue<'_>) {
        pulp::Arch::new().dispatch(Apply {
            w: self,
            x,
            out,
            epilogue,
        });
    }
}

/// The kernel the local embedder's products run on: "avx512bf16" (AVX-512's bfloat16 dot
/// product, activations rounded to bfloat16 too) or pulp's instruction set ("v3", "neon",
/// "scalar", as [`crate::vector`]'s compact scan names it).
#[must_use]
pub fn kernel() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return Some("avx512bf16");
    }
    None
}

/// `acc + bias`, through `epilogue`, into `out[at..at + NR]`.
#[inline(always)]
fn store(acc: &[f32; NR], bias: &[f32; NR], out: &mut [f32], at: usize, epilogue: Epilogue<'_>) {
    let dst: &mut [f32; NR] = (&mut out[at..at + NR])
        .try_into()
        .unwrap_or_else(|_| unreachable!("an output row holds every panel"));
    match epilogue {
        Epilogue::None => {
            for j in 0..NR {
                dst[j] = acc[j] + bias[j];
            }
        }
        Epilogue::Gelu => {
            for j in 0..NR {
                dst[j] = gelu(acc[j] + bias[j]);
            }
        }
        Epilogue::Residual(res) => {
            let res = &res[at..at + NR];
            for j in 0..NR {
                dst[j] = acc[j] + bias[j] + res[j];
            }
        }
    }
}

struct Apply<'a> {
    w: &'a Packed,
    x: &'a [f32],
    out: &'a mut [f32],
    epilogue: Epilogue<'a>,
}

impl pulp::WithSimd for Apply<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Self {
            w: packed,
            x,
            out,
            epilogue,
        } = self;
        let (n, k) = (packed.n, packed.k);
        let rows = x.len() / k;
        debug_assert_eq!(out.len(), rows * n);
        for (p, panel) in packed.w.chunks_exact(k / 2 * NR).enumerate() {
            let col = p * NR;
            let bias: &[f32; NR] = packed.bias[col..col + NR].try_into().unwrap_or(&[0.0; NR]);
            let mut r0 = 0;
            while r0 < rows {
                let m = (rows - r0).min(MR);
                let acc = match m {
                    3 => block::<3>(x, r0, k, panel),
                    2 => block::<2>(x, r0, k, panel),
                    _ => block::<1>(x, r0, k, panel),
                };
                for (r, acc) in acc.iter().enumerate().take(m) {
                    store(acc, bias, out, (r0 + r) * n + col, epilogue);
                }
                r0 += m;
            }
        }
    }
}

/// `M` rows of `x` (from `r0`) against one panel: `M x NR` sums. (Rows past `M` are zero.)
#[inline(always)]
fn block<const M: usize>(x: &[f32], r0: usize, k: usize, panel: &[u32]) -> [[f32; NR]; MR] {
    let mut acc = [[0f32; NR]; MR];
    let rows: [&[f32]; M] = std::array::from_fn(|r| &x[(r0 + r) * k..(r0 + r + 1) * k]);
    for (i, w) in panel.chunks_exact(NR).enumerate() {
        // a bfloat16 is the top half of an f32
        let lo: [f32; NR] = std::array::from_fn(|j| f32::from_bits(w[j] << 16));
        let hi: [f32; NR] = std::array::from_fn(|j| f32::from_bits(w[j] & 0xffff_0000));
        for r in 0..M {
            let (x0, x1) = (rows[r][2 * i], rows[r][2 * i + 1]);
            for j in 0..NR {
                acc[r][j] = x1.mul_add(hi[j], x0.mul_add(lo[j], acc[r][j]));
            }
        }
    }
    acc
}

/// `e^x` for `x <= 0` (what GELU's erf and the softmax need), to a few units in the last place:
/// `2^n * e^r` with `|r| <= ln2/2` and a degree-6 Taylor polynomial.
#[inline(always)]
fn exp_neg(x: f32) -> f32 {
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = n.mul_add(-0.693_145_75, x);
    let r = n.mul_add(-1.428_606_8e-6, r);
    let mut p: f32 = 1.0 / 720.0;
    p = p.mul_add(r, 1.0 / 120.0);
    p = p.mul_add(r, 1.0 / 24.0);
    p = p.mul_add(r, 1.0 / 6.0);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "n is an integer in [-126, 0]"
    )]
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// `erf(x)` to within 1.5e-7 (Abramowitz and Stegun 7.1.26), without branches.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / 0.327_591_1f32.mul_add(a, 1.0);
    let mut p = 1.061_405_4f32;
    p = p.mul_add(t, -1.453_152);
    p = p.mul_add(t, 1.421_413_8);
    p = p.mul_add(t, -0.284_496_74);
    p = p.mul_add(t, 0.254_829_6);
    let y = 1.0 - p * t * exp_neg(-a * a);
    y.copysign(x)
}

/// GELU, erf form: `x/2 * (1 + erf(x / sqrt 2))`.
#[inline(always)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The sum of `a[i] * b[i]` over equal-length slices, in 8 partial sums.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for j in 0..8 {
            acc[j] = x[j].mul_add(y[j], acc[j]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The sum of `a`, in 8 partial sums.
#[inline(always)]
fn sum(a: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let a8 = a.chunks_exact(8);
    let tail: f32 = a8.remainder().iter().sum();
    for x in a8 {
        for j in 0..8 {
            acc[j] += x[j];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The largest of `a` (NEG_INFINITY if empty), in 8 partial maxima.
#[inline(always)]
fn max(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let a8 = a.chunks_exact(8);
    let tail = a8
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    for x in a8 {
        for j in 0..8 {
            // a comparison, not f32::max, so that it vectorises (no NaN here)
            acc[j] = if x[j] > acc[j] { x[j] } else { acc[j] };
        }
    }
    acc.iter().fold(tail, |m, &x| m.max(x))
}

/// LayerNorm of every `gamma.len()`-wide row of `x`, in place.
pub fn layer_norm(x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    pulp::Arch::new().dispatch(LayerNorm {
        x,
        gamma,
        beta,
        eps,
    });
}

struct LayerNorm<'a> {
    x: &'a mut [f32],
    gamma: &'a [f32],
    beta: &'a [f32],
    eps: f32,
}

impl pulp::WithSimd for LayerNorm<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Self {
            x,
            gamma,
            beta,
            eps,
        } = self;
        let width = gamma.len();
        #[allow(clippy::cast_precision_loss, reason = "a hidden width is small")]
        let inv = 1.0 / width as f32;
        for row in x.chunks_exact_mut(width) {
            let mean = sum(row) * inv;
            for v in row.iter_mut() {
                *v -= mean;
            }
            let var = dot(row, row) * inv;
            let scale = 1.0 / (var + eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
                *v = (*v * scale).mul_add(*g, *b);
            }
        }
    }
}

/// Multi-head self-attention of one sequence: `qkv` is `len x 3*width` (queries, already
/// scaled by 1/sqrt(head width), then keys, then values), `out` is `len x width`. Every
/// position of the sequence is a real token (sequences are never padded).
///
/// Per head, two small f32 products in register blocks ([`small_product`]): the scores
/// `Q K^T` against the head's keys transposed (their columns padded with zeros to a multiple
/// of [`COLS`]), a softmax per row, then `P V`. The head width must be a multiple of
/// [`COLS`].
pub fn attention(qkv: &[f32], out: &mut [f32], width: usize, heads: usize) {
    pulp::Arch::new().dispatch(Attention {
        qkv,
        out,
        width,
        heads,
    });
}

struct Attention<'a> {
    qkv: &'a [f32],
    out: &'a mut [f32],
    width: usize,
    heads: usize,
}

impl pulp::WithSimd for Attention<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Self {
            qkv,
            out,
            width,
            heads,
        } = self;
        let hw = width / heads;
        let len = out.len() / width;
        // columns of the scores and of the transposed keys, padded to whole blocks
        let cols = len.next_multiple_of(COLS);
        let stride = 3 * width;
        // every head's keys transposed (`width x cols`), each token's keys read in one pass
        let mut keys = vec![0f32; width * cols];
        for (j, key) in qkv.chunks_exact(stride).enumerate() {
            for (d, &v) in key[width..2 * width].iter().enumerate() {
                keys[d * cols + j] = v;
            }
        }
        let mut scores = vec![0f32; len * cols];
        for h in 0..heads {
            let queries = Strided {
                x: &qkv[h * hw..],
                stride,
            };
            let keys_t = Strided {
                x: &keys[h * hw * cols..],
                stride: cols,
            };
            small_product(queries, keys_t, (len, hw, cols), &mut scores, cols);
            for row in scores.chunks_exact_mut(cols) {
                let row = &mut row[..len];
                let max = max(row);
                for s in row.iter_mut() {
                    *s = exp_neg(*s - max);
                }
                let total = sum(row);
                for s in row.iter_mut() {
                    *s /= total;
                }
            }
            let probs = Strided {
                x: &scores,
                stride: cols,
            };
            let values = Strided {
                x: &qkv[2 * width + h * hw..],
                stride,
            };
            small_product(probs, values, (len, len, hw), &mut out[h * hw..], width);
        }
    }
}

/// Columns of a register block of [`small_product`] (two AVX2 vectors, one AVX-512's).
const COLS: usize = 16;
/// Rows of a register block of [`small_product`]: with [`COLS`], as many sums as AVX2's
/// registers hold beside the operands.
const ROWS: usize = 4;

/// A matrix in row-major order with rows `stride` apart (only the first columns used).
#[derive(Clone, Copy)]
struct Strided<'a> {
    x: &'a [f32],
    stride: usize,
}

/// The product `a b` for `a` of `m x k` and `b` of `k x n`, `n` a multiple of [`COLS`], into
/// `c` (rows `c_stride` apart), in register blocks of [`ROWS`] x [`COLS`] sums. Each sum adds
/// its `k` products in order, so a row's result does not depend on its block.
#[inline(always)]
fn small_product(
    a: Strided<'_>,
    b: Strided<'_>,
    (m, k, n): (usize, usize, usize),
    c: &mut [f32],
    c_stride: usize,
) {
    for col in (0..n).step_by(COLS) {
        let mut r0 = 0;
        while r0 < m {
            let rows = (m - r0).min(ROWS);
            match rows {
                4 => small_block::<4>(a, b, k, r0, col, c, c_stride),
                3 => small_block::<3>(a, b, k, r0, col, c, c_stride),
                2 => small_block::<2>(a, b, k, r0, col, c, c_stride),
                _ => small_block::<1>(a, b, k, r0, col, c, c_stride),
            }
            r0 += rows;
        }
    }
}

/// Rows `r0 .. r0 + M` and columns `col .. col + COLS` of [`small_product`].
#[inline(always)]
fn small_block<const M: usize>(
    a: Strided<'_>,
    b: Strided<'_>,
    k: usize,
    r0: usize,
    col: usize,
    c: &mut [f32],
    c_stride: usize,
) {
    let rows: [&[f32]; M] = std::array::from_fn(|r| &a.x[(r0 + r) * a.stride..][..k]);
    let mut acc = [[0f32; COLS]; M];
    for (i, b_row) in b.x.chunks(b.stride).take(k).enumerate() {
        let bs: &[f32; COLS] = b_row[col..col + COLS]
            .try_into()
            .unwrap_or_else(|_| unreachable!("a block has COLS columns"));
        for (acc, row) in acc.iter_mut().zip(rows) {
            let x = row[i];
            for j in 0..COLS {
                acc[j] = x.mul_add(bs[j], acc[j]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        c[(r0 + r) * c_stride + col..][..COLS].copy_from_slice(acc);
    }
}

/// The unit-length mean of the `width`-wide rows of `x`, into `out`.
pub fn mean_pool_normalised(x: &[f32], out: &mut [f32]) {
    let width = out.len();
    out.fill(0.0);
    for row in x.chunks_exact(width) {
        for (o, v) in out.iter_mut().zip(row) {
            *o += v;
        }
    }
    // the mean's scale cancels in the normalisation
    let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
    for o in out.iter_mut() {
        *o /= norm;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_and_exp_are_accurate() {
        for i in -800..=800 {
            let x = f64::from(i) / 100.0;
            #[allow(clippy::cast_possible_truncation, reason = "test values")]
            let xf = x as f32;
            let exp = f64::from(exp_neg(-xf.abs()));
            let want = (-x.abs()).exp();
            assert!(
                (exp - want).abs() <= 1e-6 * want,
                "exp({x}) = {exp}, want {want}"
            );
            // erf is not in std: compare against its Taylor series
            if x.abs() <= 3.0 {
                let want = erf64(x);
                let got = f64::from(erf(xf));
                assert!((got - want).abs() < 1e-6, "erf({x}) = {got}, want {want}");
            }
        }
    }

    #[test]
    fn packed_product_matches_the_plain_one() {
        let (n, k, rows) = (32, 24, 7);
        #[allow(clippy::cast_precision_loss, reason = "test values")]
        let weight: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
            .collect();
        #[allow(clippy::cast_precision_loss, reason = "test values")]
        let bias: Vec<f32> = (0..n).map(|i| i as f32 / 4.0).collect();
        #[allow(clippy::cast_precision_loss, reason = "test values")]
        let x: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
            .collect();
        let packed = Packed::new(&weight, &bias, n, k, 1.0);
        let mut out = vec![0f32; rows * n];
        packed.apply(&x, &mut out, Epilogue::None);
        let mut portable = vec![0f32; rows * n];
        packed.apply_portable(&x, &mut portable, Epilogue::None);
        for r in 0..rows {
            for o in 0..n {
                let want: f32 = (0..k)
                    .map(|i| x[r * k + i] * weight[o * k + i])
                    .sum::<f32>()
                    + bias[o];
                // the weights and inputs are multiples of 1/8 and 1/4: exact in bfloat16
                assert!((out[r * n + o] - want).abs() < 1e-4, "{r} {o}");
                assert!((portable[r * n + o] - want).abs() < 1e-4, "{r} {o}");
            }
        }
    }

    /// Both kernels, on inputs that bfloat16 rounds, with every epilogue and a row count
    /// that leaves partial blocks (of the portable kernel's 4 rows and AVX-512's 8 and 96).
    #[test]
    fn the_kernels_agree_with_f32_arithmetic() {
        let (n, k, rows) = (48, 64, 101);
        let wave = |i: usize, f: f64| {
            #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
            let v = ((i as f64) * f).sin() as f32;
            v
        };
        let weight: Vec<f32> = (0..n * k).map(|i| wave(i, 0.37) / 8.0).collect();
        let bias: Vec<f32> = (0..n).map(|i| wave(i, 1.3)).collect();
        let x: Vec<f32> = (0..rows * k).map(|i| wave(i, 0.11) * 2.0).collect();
        let res: Vec<f32> = (0..rows * n).map(|i| wave(i, 0.7)).collect();
        let packed = Packed::new(&weight, &bias, n, k, 0.5);
        let plain = |r: usize, o: usize| -> f32 {
            (0..k)
                .map(|i| x[r * k + i] * weight[o * k + i] * 0.5)
                .sum::<f32>()
                + bias[o] * 0.5
        };
        for epilogue in [Epilogue::None, Epilogue::Gelu, Epilogue::Residual(&res)] {
            let mut kernels = vec![("portable", vec![0f32; rows * n])];
            packed.apply_portable(&x, &mut kernels[0].1, epilogue);
            #[cfg(target_arch = "x86_64")]
            if avx512::available() {
                let mut out = vec![0f32; rows * n];
                avx512::apply(&packed, &x, &mut out, epilogue);
                kernels.push(("avx512bf16", out));
            }
            for (name, out) in &kernels {
                for r in 0..rows {
                    for o in 0..n {
                        let v = plain(r, o);
                        let want = match epilogue {
                            Epilogue::None => v,
                            Epilogue::Gelu => {
                                let v = f64::from(v);
                                #[allow(clippy::cast_possible_truncation)]
                                let g = (0.5 * v * (1.0 + erf64(v / 2f64.sqrt()))) as f32;
                                g
                            }
                            Epilogue::Residual(res) => v + res[r * n + o],
                        };
                        // bfloat16 keeps 8 bits: a sum of 64 products of |x| <= 2, |w| <= 1/16
                        let got = out[r * n + o];
                        assert!((got - want).abs() < 2e-2, "{name} {r} {o}: {got} vs {want}");
                    }
                }
            }
        }
    }

    /// Attention against plain f64 arithmetic, at lengths that leave partial register blocks
    /// (of rows and of padded key columns) and with two heads.
    #[test]
    fn attention_matches_plain_arithmetic() {
        let (width, heads) = (64, 2);
        let hw = width / heads;
        for len in [1, 3, 16, 17, 41] {
            #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
            let qkv: Vec<f32> = (0..len * 3 * width)
                .map(|i| ((i as f64) * 0.37).sin() as f32)
                .collect();
            let mut out = vec![f32::NAN; len * width];
            attention(&qkv, &mut out, width, heads);
            let at = |t: usize, part: usize, h: usize, d: usize| {
                f64::from(qkv[t * 3 * width + part * width + h * hw + d])
            };
            for h in 0..heads {
                for i in 0..len {
                    let scores: Vec<f64> = (0..len)
                        .map(|j| (0..hw).map(|d| at(i, 0, h, d) * at(j, 1, h, d)).sum())
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = exps.iter().sum();
                    for d in 0..hw {
                        let want: f64 = (0..len).map(|j| exps[j] / total * at(j, 2, h, d)).sum();
                        let got = f64::from(out[i * width + h * hw + d]);
                        assert!((got - want).abs() < 1e-5, "len {len} head {h} row {i} {d}");
                    }
                }
            }
        }
    }

    /// erf by its Taylor series (exact enough for |x| <= 3).
    fn erf64(x: f64) -> f64 {
        let mut term = x;
        let mut s = x;
        for n in 1..60 {
            term *= -x * x / f64::from(n);
            s += term / f64::from(2 * n + 1);
        }
        s * 2.0 / std::f64::consts::PI.sqrt()
    }
}
