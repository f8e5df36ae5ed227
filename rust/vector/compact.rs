//! The compact copy of a graph partition's vectors: one int8 code per dimension, contiguous,
//! scanned for filters passing too many rows to fetch one by one from the graph and too few
//! for the graph to find their nearest quickly (see `plan`).
//!
//! It is derived, like the graph: built from the full vectors when a partition is created or
//! loaded (an open takes it from the graph's own vectors), changed with the partition on every
//! add and remove (frozen or not: it is never saved, so a checkpoint never waits for it), and
//! never the source of a score: a scan only *selects* candidates, a few times `k`, which are
//! then rescored exactly in f64 from the full vectors.
//!
//! Each vector is stored as `round(v / s)` with `s = max|v_i| / 127` (codes in -127..=127),
//! plus two f32 per row folding the metric, so that the selection distance is
//! `add - mul * dot(codes, query codes)` for all three metrics:
//! l2: `|v|^2 - 2 s_v s_q dot`; ip: `-s_v s_q dot`; cos: `-s_v / |v| * dot` (the query's
//! scale and norm are the same for every row and drop out).
//! The int8 dot product is a plain loop of widened products summed in i32 lanes, which the
//! compiler turns into SIMD multiply-adds. The scan runs inside `pulp`'s runtime dispatch, so
//! that loop is compiled for the best instruction set the CPU has (AVX2 on x86-64 v3: ~9 ns
//! per 384-d row, against ~65-95 ns at the SSE2 baseline a portable build targets); no
//! `unsafe` here, no target flags at build time.

use crate::columns::IdMap;
use crate::types::Metric;

/// Lanes of the int8 dot product (one 256-bit register of i16 products per step).
const LANES: usize = 32;

/// Int8 codes of `v` and their scale (`v ~= codes * scale`).
fn quantize(v: &[f32], codes: &mut Vec<i8>) -> f32 {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 && max.is_finite() {
        max / 127.0
    } else {
        0.0
    };
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    #[allow(
        clippy::cast_possible_truncation,
        reason = "rounded and clamped to -127..=127 first"
    )]
    codes.extend(
        v.iter()
            .map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8),
    );
    scale
}

/// Dot product of two code vectors of equal length (inlined into the dispatched scan).
#[allow(
    clippy::inline_always,
    reason = "compiled for the dispatched instruction set only when inlined there"
)]
#[inline(always)]
fn dot(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: i32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..LANES {
            acc[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    acc.iter().sum::<i32>() + tail
}

/// The int8 copy of a partition's live vectors (see the module docs).
pub(super) struct Compact {
    dims: usize,
    metric: Metric,
    keys: Vec<u64>,
    codes: Vec<i8>,
    /// Per row: (mul, add) of the selection distance `add - mul * q_scale * dot`.
    fold: Vec<(f32, f32)>,
    slot: IdMap<u32>,
}

impl Compact {
    pub(super) fn new(dims: usize, metric: Metric) -> Self {
        Self {
            dims,
            metric,
            keys: Vec::new(),
            codes: Vec::new(),
            fold: Vec::new(),
            slot: IdMap::default(),
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Inserts or replaces the vector of `key`.
    pub(super) fn insert(&mut self, key: u64, v: &[f32]) {
        let mut codes = Vec::with_capacity(self.dims);
        let scale = quantize(v, &mut codes);
        let norm2: f32 = v.iter().map(|x| x * x).sum();
        let fold = match self.metric {
            Metric::L2 => (2.0 * scale, norm2),
            Metric::Ip => (scale, 0.0),
            Metric::Cos if norm2 > 0.0 => (scale / norm2.sqrt(), 0.0),
            Metric::Cos => (0.0, 0.0),
        };
        let d = self.dims;
        if let Some(&i) = self.slot.get(&key) {
            let i = i as usize;
            self.codes[i * d..(i + 1) * d].copy_from_slice(&codes);
            self.fold[i] = fold;
        } else {
            let i = u32::try_from(self.keys.len()).unwrap_or(u32::MAX);
            self.slot.insert(key, i);
            self.keys.push(key);
            self.codes.extend_from_slice(&codes);
            self.fold.push(fold);
        }
    }

    /// Removes `key` (absent keys are ignored).
    pub(super) fn remove(&mut self, key: u64) {
        let Some(i) = self.slot.remove(&key) else {
            return;
        };
        let (i, last, d) = (i as usize, self.keys.len() - 1, self.dims);
        self.keys.swap_remove(i);
        self.fold.swap_remove(i);
        if i != last {
            self.codes.copy_within(last * d..(last + 1) * d, i * d);
            #[allow(
                clippy::cast_possible_truncation,
                reason = "slots fit u32 (see insert)"
            )]
            self.slot.insert(self.keys[i], i as u32);
        }
        self.codes.truncate(last * d);
    }

    /// The `keep` keys nearest `query` among `keys` by the int8 distance, unordered; keys the
    /// copy lacks are skipped.
    pub(super) fn nearest(&self, query: &[f32], keys: &[u64], keep: usize) -> Vec<u64> {
        let mut q = Vec::with_capacity(self.dims);
        let q_scale = match self.metric {
            Metric::Cos => {
                quantize(query, &mut q);
                1.0
            }
            Metric::L2 | Metric::Ip => quantize(query, &mut q),
        };
        let mut scored = pulp::Arch::new().dispatch(Scan {
            copy: self,
            q: &q,
            q_scale,
            keys,
        });
        // selecting once beats a bounded heap's branch per row at the sizes scanned here
        let by = |a: &(f32, u64), b: &(f32, u64)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
        if scored.len() > keep {
            scored.select_nth_unstable_by(keep, by);
            scored.truncate(keep);
        }
        scored.into_iter().map(|(_, k)| k).collect()
    }

    pub(super) fn memory_usage(&self) -> usize {
        // codes + fold + key + the slot map's entry (key, slot, control byte, load factor)
        self.keys.len() * (self.dims + 8 + 8 + 16)
    }
}

/// One scan of [`Compact::nearest`]: (distance, key) of every listed key the copy holds.
struct Scan<'a> {
    copy: &'a Compact,
    q: &'a [i8],
    q_scale: f32,
    keys: &'a [u64],
}

impl pulp::WithSimd for Scan<'_> {
    type Output = Vec<(f32, u64)>;

    #[allow(
        clippy::inline_always,
        reason = "pulp's dispatch: inlined into its target-feature function"
    )]
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let c = self.copy;
        let d = c.dims;
        // the slots first, in a loop of independent lookups the CPU overlaps; looked up
        // between dot products, each lookup's cache miss stalled the scan (measured: x3-x8)
        let slots: Vec<usize> = self
            .keys
            .iter()
            .filter_map(|k| c.slot.get(k).map(|i| *i as usize))
            .collect();
        let mut scored = Vec::with_capacity(slots.len());
        for i in slots {
            let (mul, add) = c.fold[i];
            #[allow(clippy::cast_precision_loss, reason = "|dot| < 2^24 for dims < 1040")]
            let dot = dot(&c.codes[i * d..(i + 1) * d], self.q) as f32;
            scored.push((add - mul * self.q_scale * dot, c.keys[i]));
        }
        scored
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap,
        clippy::needless_for_each,
        reason = "tests: small integers as floats and codes"
    )]

    use super::*;

    /// A pseudo-random vector in [-1, 1)^dims (splitmix64 of row and dimension).
    fn v(i: u64, dims: usize) -> Vec<f32> {
        (0..dims as u64)
            .map(|j| {
                let mut z = (i << 20 | j).wrapping_add(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
            })
            .collect()
    }

    #[test]
    fn the_dot_product_is_exact_on_codes() {
        for dims in [1, 15, 16, 17, 384] {
            let a: Vec<i8> = (0..dims).map(|i| (i % 255) as i8).collect();
            let b: Vec<i8> = (0..dims).map(|i| (127 - (i % 200)) as i8).collect();
            let want: i32 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| i32::from(*x) * i32::from(*y))
                .sum();
            assert_eq!(dot(&a, &b), want, "dims {dims}");
        }
    }

    #[test]
    fn removes_and_replacements_keep_slots_in_step() {
        let mut c = Compact::new(8, Metric::L2);
        for i in 0..50 {
            c.insert(i, &v(i, 8));
        }
        for i in (0..50).step_by(3) {
            c.remove(i);
        }
        c.insert(1, &v(1000, 8));
        let all: Vec<u64> = (0..60).collect();
        for i in (0..50).filter(|i| i % 3 != 0 && *i != 1) {
            assert_eq!(c.nearest(&v(i, 8), &all, 1), [i]);
        }
        assert_eq!(c.nearest(&v(1000, 8), &all, 1), [1]);
        assert_eq!(c.len(), 50 - 17);
    }

    #[test]
    fn every_metric_finds_a_vector_by_itself() {
        for metric in [Metric::L2, Metric::Cos, Metric::Ip] {
            let mut c = Compact::new(32, metric);
            for i in 0..200 {
                let mut x = v(i, 32);
                if metric == Metric::Ip {
                    // inner product: the query itself is nearest when every norm is equal
                    let n = x.iter().map(|a| a * a).sum::<f32>().sqrt();
                    x.iter_mut().for_each(|a| *a /= n);
                }
                c.insert(i, &x);
            }
            let keys: Vec<u64> = (0..200).collect();
            for i in (0..200).step_by(7) {
                let mut q = v(i, 32);
                if metric == Metric::Cos {
                    q.iter_mut().for_each(|a| *a *= 3.0);
                }
                assert!(c.nearest(&q, &keys, 3).contains(&i), "{metric:?} {i}");
            }
        }
    }
}
