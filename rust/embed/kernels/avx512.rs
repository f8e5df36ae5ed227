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
    __m256bh, __m512, __m512bh, _mm512_cvtneps_pbh, _mm512_dpbf16_ps, _mm512_set1_epi32,
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
        for (p, panel) in w.w.chunks_exact(pairs * NR).enumerate() {
            let col = p * NR;
            let bias: &[f32; NR] = w.bias[col..col + NR].try_into().unwrap_or(&[0.0; NR]);
            for (b, xs) in xb.chunks(MR * pairs).enumerate() {
                let m = xs.len() / pairs;
                let acc = match m {
                    8 => block::<8>(xs, panel),
                    7 => block::<7>(xs, panel),
                    6 => block::<6>(xs, panel),
                    5 => block::<5>(xs, panel),
                    4 => block::<4>(xs, panel),
                    3 => block::<3>(xs, panel),
                    2 => block::<2>(xs, panel),
                    _ => block::<1>(xs, panel),
                };
                for (r, acc) in acc.iter().enumerate().take(m) {
                    store(acc, bias, out, (first + b * MR + r) * n + col, epilogue);
                }
            }
        }
    }
}

/// The row `x` rounded to bfloat16 (to nearest, as [`bf16_pair`]) into row `r` of `block`, a
/// block of `m` rows laid out pair by pair (pair `i` of row `r` at `i * m + r`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
fn to_bf16(x: &[f32], block: &mut [u32], r: usize, m: usize) {
    let x16 = x.chunks_exact(16);
    let tail = x16.remainder();
    for (c, x) in x16.enumerate() {
        let x: [f32; 16] = x.try_into().unwrap_or([0.0; 16]);
        // SAFETY: 16 f32s are the 16 lanes of one vector, and 16 bfloat16s are 8 pairs
        let got: [u32; 8] = unsafe {
            std::mem::transmute::<__m256bh, [u32; 8]>(_mm512_cvtneps_pbh(std::mem::transmute::<
                [f32; 16],
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
        let w: [u32; NR] = w.try_into().unwrap_or([0; NR]);
        // SAFETY: 16 bfloat16 pairs are the 64 bytes of one vector of 32 bfloat16s
        let w: __m512bh = unsafe { std::mem::transmute(w) };
        for r in 0..M {
            #[allow(clippy::cast_possible_wrap, reason = "the pair's bits, as they are")]
            let pair = _mm512_set1_epi32(x[r] as i32);
            // SAFETY: as above, one vector's bits
            let pair: __m512bh = unsafe { std::mem::transmute(pair) };
            acc[r] = _mm512_dpbf16_ps(acc[r], pair, w);
        }
    }
    let mut sums = [[0f32; NR]; MR];
    for (s, a) in sums.iter_mut().zip(acc) {
        // SAFETY: 16 f32 lanes are 16 f32s
        *s = unsafe { std::mem::transmute::<__m512, [f32; NR]>(a) };
    }
    sums
}
