//! Exact vector arithmetic: the f64 scorer every result is ranked by, the fast f32 distance
//! exact scans pick candidates with, and [`Flat`], a contiguous array of vectors by key.

use std::collections::{BinaryHeap, HashMap};

use crate::types::Metric;

/// f64 score of the metric against one query: l2 -> 1/(1+dist), cos -> cosine, ip -> inner
/// product. Sums run in four lanes (exact f64 products; the compiler vectorises them).
pub struct Scorer {
    metric: Metric,
    q: Vec<f64>,
    q_norm: f64,
}

impl Scorer {
    /// A scorer of `query` under `metric`.
    #[must_use]
    pub fn new(metric: Metric, query: &[f32]) -> Self {
        let q: Vec<f64> = query.iter().map(|x| f64::from(*x)).collect();
        let q_norm = sum4(q.iter().map(|x| x * x)).sqrt();
        Self { metric, q, q_norm }
    }

    /// The score of `v`.
    #[must_use]
    pub fn score(&self, v: &[f32]) -> f64 {
        match self.metric {
            Metric::L2 => 1.0 / (1.0 + sums(&self.q, v, |a, b| ((a - b) * (a - b), 0.0)).0.sqrt()),
            Metric::Ip => sums(&self.q, v, |a, b| (a * b, 0.0)).0,
            Metric::Cos => {
                let (dot, norm) = sums(&self.q, v, |a, b| (a * b, b * b));
                let norm = norm.sqrt();
                if norm == 0.0 || self.q_norm == 0.0 {
                    0.0
                } else {
                    dot / (self.q_norm * norm)
                }
            }
        }
    }
}

/// Sum in four interleaved lanes (a fixed order: equal inputs give equal sums).
fn sum4(xs: impl Iterator<Item = f64>) -> f64 {
    let mut lanes = [0f64; 4];
    for (i, x) in xs.enumerate() {
        lanes[i % 4] += x;
    }
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
}

/// The two sums of `f(q[i], v[i])` over a query and a vector, in one pass, each in the lanes
/// and order of [`sum4`] (element i into lane i % 4): the same bits as two `sum4` passes, in
/// straight-line chunks of four that the compiler vectorises (a rescoring of 18 candidates
/// of 384 dims took ~3% of a vector search with two passes of `sum4`).
fn sums(query: &[f64], v: &[f32], f: impl Fn(f64, f64) -> (f64, f64)) -> (f64, f64) {
    let (mut first, mut second) = ([0f64; 4], [0f64; 4]);
    let mut add = |lane: usize, a: f64, b: f32| {
        let (x, y) = f(a, f64::from(b));
        first[lane] += x;
        second[lane] += y;
    };
    let (qc, vc) = (query.chunks_exact(4), v.chunks_exact(4));
    let (qr, vr) = (qc.remainder(), vc.remainder());
    for (a, b) in qc.zip(vc) {
        for lane in 0..4 {
            add(lane, a[lane], b[lane]);
        }
    }
    for (lane, (a, b)) in qr.iter().zip(vr).enumerate() {
        add(lane, *a, *b);
    }
    let total = |l: [f64; 4]| (l[0] + l[1]) + (l[2] + l[3]);
    (total(first), total(second))
}

/// Fast f32 "distance" used only to pick candidates (smaller = better).
fn fast_distance(metric: Metric, q: &[f32], q_norm: f32, v: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut norm = [0f32; 8];
    let (qc, vc) = (q.chunks_exact(8), v.chunks_exact(8));
    let (qr, vr) = (qc.remainder(), vc.remainder());
    match metric {
        Metric::L2 => {
            for (a, b) in qc.zip(vc) {
                for i in 0..8 {
                    let d = a[i] - b[i];
                    acc[i] += d * d;
                }
            }
            let tail: f32 = qr.iter().zip(vr).map(|(a, b)| (a - b) * (a - b)).sum();
            acc.iter().sum::<f32>() + tail
        }
        Metric::Ip | Metric::Cos => {
            for (a, b) in qc.zip(vc) {
                for i in 0..8 {
                    acc[i] += a[i] * b[i];
                    norm[i] += b[i] * b[i];
                }
            }
            let dot = acc.iter().sum::<f32>() + qr.iter().zip(vr).map(|(a, b)| a * b).sum::<f32>();
            if metric == Metric::Ip {
                -dot
            } else {
                let nv = (norm.iter().sum::<f32>() + vr.iter().map(|b| b * b).sum::<f32>()).sqrt();
                if nv == 0.0 || q_norm == 0.0 {
                    1.0
                } else {
                    1.0 - dot / (nv * q_norm)
                }
            }
        }
    }
}

/// A candidate: (distance, key), ordered by distance, then key.
#[derive(PartialEq)]
struct Cand(f32, u64);
impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Cand {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
    }
}

/// The nearest candidates of an exact scan: a bounded max-heap on distance (ties: the
/// larger key is evicted, so equal inputs keep equal keys).
pub(super) struct Nearest<'q> {
    metric: Metric,
    query: &'q [f32],
    q_norm: f32,
    keep: usize,
    heap: BinaryHeap<Cand>,
}

impl<'q> Nearest<'q> {
    pub(super) fn new(metric: Metric, query: &'q [f32], keep: usize) -> Self {
        Self {
            metric,
            query,
            q_norm: query.iter().map(|x| x * x).sum::<f32>().sqrt(),
            keep,
            heap: BinaryHeap::with_capacity(keep + 1),
        }
    }

    pub(super) fn offer(&mut self, key: u64, v: &[f32]) {
        let d = fast_distance(self.metric, self.query, self.q_norm, v);
        if self.heap.len() < self.keep {
            self.heap.push(Cand(d, key));
        } else if self.heap.peek().is_some_and(|w| d < w.0) {
            self.heap.pop();
            self.heap.push(Cand(d, key));
        }
    }

    /// The query.
    pub(super) fn query(&self) -> &'q [f32] {
        self.query
    }

    /// The kept keys, unordered.
    pub(super) fn into_keys(self) -> Vec<u64> {
        self.heap.into_iter().map(|c| c.1).collect()
    }
}

/// Asks the CPU to load `data` into its caches, every 64-byte line of it: a hint, which reads
/// nothing and cannot fault (the one `unsafe` of the vector index). Scattered vectors
/// prefetched together arrive in about the time of one (the memory system serves many misses
/// at once); read one after another, each waits for its own.
#[allow(
    clippy::inline_always,
    reason = "inlined into the dispatched scans and the rescoring loop"
)]
#[inline(always)]
pub(super) fn prefetch<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let (start, len) = (data.as_ptr().cast::<u8>(), std::mem::size_of_val(data));
        for at in (0..len).step_by(64) {
            #[allow(unsafe_code, reason = "a prefetch hint: no memory is read or written")]
            // SAFETY: `_mm_prefetch` needs only SSE (baseline on x86-64) and a pointer, which
            // it never dereferences architecturally; this one is in bounds anyway.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    start.add(at).cast::<i8>(),
                );
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Vectors by key in one contiguous array (a small namespace, a graph partition's exact
/// vectors, or the changes a graph takes while a checkpoint saves it).
#[derive(Default)]
pub(super) struct Flat {
    dims: usize,
    keys: Vec<u64>,
    data: Vec<f32>,
    pos: HashMap<u64, usize>,
}

impl Flat {
    pub(super) fn new(dims: usize) -> Self {
        Self {
            dims,
            ..Self::default()
        }
    }

    /// Room for `n` vectors.
    pub(super) fn with_capacity(dims: usize, n: usize) -> Self {
        let mut f = Self::new(dims);
        f.keys.reserve(n);
        f.data.reserve(n * dims);
        f.pos.reserve(n);
        f
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub(super) fn contains(&self, key: u64) -> bool {
        self.pos.contains_key(&key)
    }

    pub(super) fn get(&self, key: u64) -> Option<&[f32]> {
        let i = *self.pos.get(&key)?;
        Some(&self.data[i * self.dims..(i + 1) * self.dims])
    }

    pub(super) fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// Inserts or replaces the vector of `key`.
    pub(super) fn insert(&mut self, key: u64, v: &[f32]) {
        if let Some(i) = self.pos.get(&key) {
            self.data[i * self.dims..(i + 1) * self.dims].copy_from_slice(v);
        } else {
            self.pos.insert(key, self.keys.len());
            self.keys.push(key);
            self.data.extend_from_slice(v);
        }
    }

    /// Removes `key`; whether it was there.
    pub(super) fn remove(&mut self, key: u64) -> bool {
        let Some(i) = self.pos.remove(&key) else {
            return false;
        };
        let last = self.keys.len() - 1;
        self.keys.swap_remove(i);
        let d = self.dims;
        if i != last {
            self.data.copy_within(last * d..(last + 1) * d, i * d);
            self.pos.insert(self.keys[i], i);
        }
        self.data.truncate(last * d);
        true
    }

    /// Every (key, vector), in insertion order (moved out).
    pub(super) fn drain(&mut self) -> Vec<(u64, Vec<f32>)> {
        let items = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, self.data[i * self.dims..(i + 1) * self.dims].to_vec()))
            .collect();
        let dims = self.dims;
        *self = Self::new(dims);
        items
    }

    /// Offers every key passing `pass` to `nearest`.
    pub(super) fn scan(&self, nearest: &mut Nearest<'_>, pass: impl Fn(u64) -> bool) {
        for (i, key) in self.keys.iter().enumerate() {
            if pass(*key) {
                nearest.offer(*key, &self.data[i * self.dims..(i + 1) * self.dims]);
            }
        }
    }

    pub(super) fn memory_usage(&self) -> usize {
        self.data.len() * 4 + self.keys.len() * 24
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::float_cmp, reason = "the sums must agree to the bit")]

    use super::*;

    /// `sums` adds in `sum4`'s lanes and order: scores are the bits two `sum4` passes give,
    /// for every metric and lengths that leave a remainder.
    #[test]
    fn one_pass_sums_equal_two_sum4_passes_bit_for_bit() {
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            #[allow(clippy::cast_precision_loss, reason = "a test value")]
            let x = (s >> 11) as f32 / (1u64 << 53) as f32;
            x - 0.5
        };
        for dims in [1, 3, 4, 7, 384, 385] {
            let q: Vec<f32> = (0..dims).map(|_| next()).collect();
            let v: Vec<f32> = (0..dims).map(|_| next()).collect();
            let pairs = || {
                q.iter()
                    .zip(&v)
                    .map(|(a, b)| (f64::from(*a), f64::from(*b)))
            };
            let dot = sum4(pairs().map(|(a, b)| a * b));
            let (qn, vn) = (
                sum4(pairs().map(|(a, _)| a * a)).sqrt(),
                sum4(pairs().map(|(_, b)| b * b)).sqrt(),
            );
            let l2 = 1.0 / (1.0 + sum4(pairs().map(|(a, b)| (a - b) * (a - b))).sqrt());
            assert_eq!(Scorer::new(Metric::Ip, &q).score(&v), dot, "{dims}");
            assert_eq!(
                Scorer::new(Metric::Cos, &q).score(&v),
                dot / (qn * vn),
                "{dims}"
            );
            assert_eq!(Scorer::new(Metric::L2, &q).score(&v), l2, "{dims}");
        }
    }
}
