//! The packed product on AVX-512 BF16 (`vdpbf16ps`: 16 sums, each of two bfloat16 products,
//! per instruction, twice the multiply-adds of an f32 FMA on the same vector width): the
//! activations are rounded to bfloat16 as the weights are, and every sum stays f32. Measured
//! against sentence-transformers (f32), rounding the activations too moves no checked vector
//! below cosine 0.9999.
//!
//! pulp has no bfloat16 operations, so this is `std::arch` behind a run-time check of the
//! CPU's features: the one place the embedder uses `unsafe`.

#![allow(
    unsafe_code,
    reason = "AVX-512 BF16 intrinsics behind a run-time feature check (pulp has none)"
)]

use std::arch::x86_64::{
    __m256bh, __m512, __m512bh, __m512i, _mm512_cvtneps_pbh, _mm512_dpbf16_ps, _mm512_set1_epi32,
    _mm512_setzero_ps,
};

use super::{bf16_pair, store, Epilogue, Packed, NR};

/// Rows (tokens) sharing one pass over a panel: one accumulator register each, enough of
/// them to cover the dot product's latency.
const MR: usize = 8;

/// Whether this CPU runs [`apply`].
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512bf16")
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("fma")
}

/// `out = epilogue(x W^T + b)`, as [`Packed::apply`].
///
/// # Panics
/// If the CPU lacks the features (callers check [`available`] first).
pub(super) fn apply(w: &Packed, x: &[f32], out: &mut [f32], epilogue: Epilogue<'_>) {
    assert!(available(), "AVX-512 BF16 is not available on this CPU");
    // SAFETY: the CPU has every feature `product` is compiled for (asserted above).
    unsafe { product(w, x, out, epilogue) }
}

/// Rows whose bfloat16 inputs are made at once and then stay in the core's cache while every
/// panel passes over them (a multiple of [`MR`]).
const MC: usize = 96;

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
fn product(w: &Packed, x: &[f32], out: &mut [f32], epilogue: Epilogue<'_>) {
    let (n, k) = (w.n, w.k);
    let pairs = k / 2;
    let rows = x.len() / k;
    debug_assert_eq!(out.len(), rows * n);
    let mut xb = vec![0u32; rows.min(MC) * pairs];
    for first in (0..rows).step_by(MC) {
        let mc = (rows - first).min(MC);
        let xb = &mut xb[..mc * pairs];
        // `xb` in blocks of MR rows (fewer in the last), each block input pair by input pair:
        // the rows' pairs `i` side by side, as the block's pass reads them
        for (b, block) in xb.chunks_mut(MR * pairs).enumerate() {
            let m = block.len() / pairs;
            for r in 0..m {
                let row = first + b * MR + r;
                to_bf16(&x[row * k..(row + 1) * k], block, r, m);
            }
        }
        // panels two at a time (each pair broadcast once for both), the odd one last alone
        let panels = w.w.chunks_exact(2 * pairs * NR);
        let odd = panels.remainder();
        for (p, two) in panels.enumerate() {
            let (a, b) = two.split_at(pairs * NR);
            let col = 2 * p * NR;
            let (bias_a, bias_b) = (bias(w, col), bias(w, col + NR));
            for (bl, xs) in xb.chunks(MR * pairs).enumerate() {
                let m = xs.len() / pairs;
                let (acc_a, acc_b) = match m {
                    8 => block2::<8>(xs, a, b),
                    7 => block2::<7>(xs, a, b),
                    6 => block2::<6>(xs, a, b),
                    5 => block2::<5>(xs, a, b),
                    4 => block2::<4>(xs, a, b),
                    3 => block2::<3>(xs, a, b),
                    2 => block2::<2>(xs, a, b),
                    _ => block2::<1>(xs, a, b),
                };
                for r in 0..m {
                    let at = (first + bl * MR + r) * n + col;
                    store(&acc_a[r], bias_a, out, at, epilogue);
                    store(&acc_b[r], bias_b, out, at + NR, epilogue);
                }
            }
        }
        if !odd.is_empty() {
            let col = n - NR;
            let bias = bias(w, col);
            for (bl, xs) in xb.chunks(MR * pairs).enumerate() {
                let m = xs.len() / pairs;
                let acc = match m {
                    8 => block::<8>(xs, odd),
                    7 => block::<7>(xs, odd),
                    6 => block::<6>(xs, odd),
                    5 => block::<5>(xs, odd),
                    4 => block::<4>(xs, odd),
                    3 => block::<3>(xs, odd),
                    2 => block::<2>(xs, odd),
                    _ => block::<1>(xs, odd),
                };
                for (r, acc) in acc.iter().enumerate().take(m) {
                    store(acc, bias, out, (first + bl * MR + r) * n + col, epilogue);
                }
            }
        }
    }
}

/// The biases of the panel of outputs from `col`.
fn bias(w: &Packed, col: usize) -> &[f32; NR] {
    w.bias[col..col + NR]
        .try_into()
        .unwrap_or_else(|_| unreachable!("a panel has NR outputs"))
}

/// The row `x` rounded to bfloat16 (to nearest, as [`bf16_pair`]) into row `r` of `block`, a
/// block of `m` rows laid out pair by pair (pair `i` of row `r` at `i * m + r`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
fn to_bf16(x: &[f32], block: &mut [u32], r: usize, m: usize) {
    let x16 = x.chunks_exact(16);
    let tail = x16.remainder();
    for (c, x) in x16.enumerate() {
        let x: [f32; NR] = x.try_into().unwrap_or([0.0; NR]);
        // SAFETY: 16 f32s are the 16 lanes of one vector, and 16 bfloat16s are 8 pairs
        let got = unsafe {
            std::mem::transmute::<__m256bh, [u32; 8]>(_mm512_cvtneps_pbh(std::mem::transmute::<
                [f32; NR],
                __m512,
            >(x)))
        };
        for (t, pair) in got.into_iter().enumerate() {
            block[(c * 8 + t) * m + r] = pair;
        }
    }
    let done = (x.len() - tail.len()) / 2;
    for (t, p) in tail.chunks_exact(2).enumerate() {
        block[(done + t) * m + r] = bf16_pair(p[0], p[1]);
    }
}

/// The `M` rows of `xs` (bfloat16 pairs laid out as [`to_bf16`] makes them) against one
/// panel: `M x NR` sums.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
#[inline]
fn block<const M: usize>(xs: &[u32], panel: &[u32]) -> [[f32; NR]; MR] {
    let mut acc = [_mm512_setzero_ps(); M];
    for (w, x) in panel.chunks_exact(NR).zip(xs.chunks_exact(M)) {
        let w = pairs16(w);
        for r in 0..M {
            acc[r] = _mm512_dpbf16_ps(acc[r], broadcast(x[r]), w);
        }
    }
    let mut sums = [[0f32; NR]; MR];
    for (s, a) in sums.iter_mut().zip(acc) {
        *s = lanes(a);
    }
    sums
}

/// [`block`] against two panels at once: each pair of `xs` broadcast once for both.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
#[inline]
fn block2<const M: usize>(xs: &[u32], a: &[u32], b: &[u32]) -> ([[f32; NR]; MR], [[f32; NR]; MR]) {
    let mut acc_a = [_mm512_setzero_ps(); M];
    let mut acc_b = [_mm512_setzero_ps(); M];
    for ((wa, wb), x) in a
        .chunks_exact(NR)
        .zip(b.chunks_exact(NR))
        .zip(xs.chunks_exact(M))
    {
        let (wa, wb) = (pairs16(wa), pairs16(wb));
        for r in 0..M {
            let pair = broadcast(x[r]);
            acc_a[r] = _mm512_dpbf16_ps(acc_a[r], pair, wa);
            acc_b[r] = _mm512_dpbf16_ps(acc_b[r], pair, wb);
        }
    }
    let (mut sums_a, mut sums_b) = ([[0f32; NR]; MR], [[0f32; NR]; MR]);
    for r in 0..M {
        sums_a[r] = lanes(acc_a[r]);
        sums_b[r] = lanes(acc_b[r]);
    }
    (sums_a, sums_b)
}

/// The 16 bfloat16 pairs of `w` (a panel's row) as one vector.
#[inline(always)]
fn pairs16(w: &[u32]) -> __m512bh {
    let w: [u32; NR] = w.try_into().unwrap_or([0; NR]);
    // SAFETY: 16 pairs of bfloat16s are the 64 bytes of a vector of 32 bfloat16s
    unsafe { std::mem::transmute::<[u32; NR], __m512bh>(w) }
}

/// One bfloat16 pair in every lane.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
#[inline]
fn broadcast(pair: u32) -> __m512bh {
    #[allow(clippy::cast_possible_wrap, reason = "the pair's bits, as they are")]
    let v = _mm512_set1_epi32(pair as i32);
    // SAFETY: a vector's 64 bytes, as 32 bfloat16s
    unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
}

/// The 16 lanes of `v`.
#[inline(always)]
fn lanes(v: __m512) -> [f32; NR] {
    // SAFETY: 16 f32 lanes are 16 f32s
    unsafe { std::mem::transmute::<__m512, [f32; NR]>(v) }
}
