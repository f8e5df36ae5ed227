//! The compact copy of a graph partition's vectors: one int8 code per dimension, contiguous,
//! scanned for filters passing too many rows to fetch one by one from the graph and too few
//! for the graph to find their nearest quickly (see `plan`).
//!
//! It is derived, like the graph: built from the full vectors when a partition is created or
//! loaded (an open fills it in bulk as the vectors stream into the graph, see
//! [`Compact::with_keys`]), changed with the partition on every add and remove (frozen or
//! not: it is never saved, so a checkpoint never waits for it), and never the source of a
//! score: a scan only *selects* candidates, a few times `k`, which are then rescored exactly
//! in f64 from the full vectors.
//!
//! Each vector is stored as `round(v / s)` with `s = max|v_i| / 127` (codes in -127..=127),
//! plus two f32 per row folding the metric, so that the selection distance is
//! `add - mul * dot(codes, query codes)` for all three metrics:
//! l2: `|v|^2 - 2 s_v s_q dot`; ip: `-s_v s_q dot`; cos: `-s_v / |v| * dot` (the query's
//! scale and norm are the same for every row and drop out).
//! The int8 dot product is a plain loop of widened products summed in i32 lanes, which the
//! compiler turns into SIMD multiply-adds. The scan runs inside `pulp`'s runtime dispatch, so
//! that loop is compiled for the best instruction set the CPU has (AVX2 on x86-64 v3: ~9 ns
//! per 384-d row, against ~65-95 ns at the SSE2 baseline a portable build targets); no target
//! flags at build time.
//!
//! A filter's rows are scattered over the copy (a 10% filter reads one row in ten), so the
//! scan is bound by memory latency, not arithmetic. Three things keep it streaming (measured
//! on 99k rows, a 10% tag, same run: 0.22x -> 1.0-1.2x the unfiltered QPS): the rows are
//! kept in key order and the keys come sorted (from the vector-key posting lists,
//! `columns::KeySet`), so slots are found by one forward walk instead of a hash lookup per
//! key, and rows are read in address order; and the scan prefetches the rows [`AHEAD`] of
//! the one it scores (the CPU's own lookahead covers about one row; see `exact::prefetch`).

use super::exact::prefetch;
use crate::types::Metric;

/// Lanes of the int8 dot product (one 256-bit register of i16 products per step).
const LANES: usize = 32;

/// Int8 codes of `v` into `codes` (as long), and their scale (`v ~= codes * scale`).
fn quantize(v: &[f32], codes: &mut [i8]) -> f32 {
    let max = lanes(v, |m, x| m.max(x.abs()), f32::max);
    let scale = if max > 0.0 && max.is_finite() {
        max / 127.0
    } else {
        0.0
    };
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    // rounded half away from zero by the truncating cast (`f32::round` is a libm call per
    // element on baseline x86-64: ~10% of an open, which builds the copy)
    #[allow(
        clippy::cast_possible_truncation,
        reason = "clamped to -127..=127 first, truncated toward zero on purpose"
    )]
    for (c, x) in codes.iter_mut().zip(v) {
        let y = x * inv;
        *c = (y + 0.5f32.copysign(y)).clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// `step` folded over `v` in eight independent lanes (which the compiler keeps in one SIMD
/// register; a single running value is a chain of dependent steps), the lanes then merged
/// with `merge`.
fn lanes(v: &[f32], step: impl Fn(f32, f32) -> f32, merge: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder().iter().fold(0.0, |a, x| step(a, *x));
    for c in chunks {
        for i in 0..8 {
            acc[i] = step(acc[i], c[i]);
        }
    }
    acc.into_iter().fold(tail, merge)
}

/// The codes of `v` into `codes` (as long), and its (mul, add) of the selection distance.
fn encode(metric: Metric, v: &[f32], codes: &mut [i8]) -> (f32, f32) {
    let scale = quantize(v, codes);
    let norm2 = lanes(v, |a, x| a + x * x, |a, b| a + b);
    match metric {
        Metric::L2 => (2.0 * scale, norm2),
        Metric::Ip => (scale, 0.0),
        Metric::Cos if norm2 > 0.0 => (scale / norm2.sqrt(), 0.0),
        Metric::Cos => (0.0, 0.0),
    }
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

/// Removed rows kept in place (see [`Compact::remove`]) before the arrays are rewritten.
const DEAD_MIN: usize = 1024;

/// The int8 copy of a partition's live vectors (see the module docs).
pub(super) struct Compact {
    dims: usize,
    metric: Metric,
    /// Every row's key, ascending: a scan finds the rows of its keys by walking forward.
    keys: Vec<u64>,
    /// False for a removed row, kept until enough pile up (removing in place would move
    /// every later row).
    alive: Vec<bool>,
    dead: usize,
    codes: Vec<i8>,
    /// Per row: (mul, add) of the selection distance `add - mul * q_scale * dot`.
    fold: Vec<(f32, f32)>,
}

impl Compact {
    pub(super) fn new(dims: usize, metric: Metric) -> Self {
        Self {
            dims,
            metric,
            keys: Vec::new(),
            alive: Vec::new(),
            dead: 0,
            codes: Vec::new(),
            fold: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.keys.len() - self.dead
    }

    /// A copy with a row for each of `keys` (ascending), every one dead until
    /// [`Compact::fill`]ed; [`Compact::settle`] then drops the rows never filled. A loaded
    /// graph's vectors arrive in slot order, which follows key order only roughly: each is
    /// written into its place, and no row moves.
    pub(super) fn with_keys(dims: usize, metric: Metric, keys: Vec<u64>) -> Self {
        debug_assert!(keys.is_sorted());
        let n = keys.len();
        Self {
            dims,
            metric,
            keys,
            alive: vec![false; n],
            dead: n,
            codes: vec![0; n * dims],
            fold: vec![(0.0, 0.0); n],
        }
    }

    /// Writes the vector of row `row` of a copy made [`Compact::with_keys`].
    pub(super) fn fill(&mut self, row: usize, v: &[f32]) {
        let d = self.dims;
        self.fold[row] = encode(self.metric, v, &mut self.codes[row * d..(row + 1) * d]);
        if !std::mem::replace(&mut self.alive[row], true) {
            self.dead -= 1;
        }
    }

    /// Drops the rows never filled (see [`Compact::with_keys`]).
    pub(super) fn settle(&mut self) {
        if self.dead > 0 {
            self.sweep();
        }
    }

    /// Inserts or replaces the vector of `key`. Keys arrive mostly ascending (vector keys are
    /// allocated so); an older key is put in its place, moving the rows after it.
    pub(super) fn insert(&mut self, key: u64, v: &[f32]) {
        let mut codes = vec![0; self.dims];
        let fold = encode(self.metric, v, &mut codes);
        let d = self.dims;
        if self.keys.last().is_none_or(|last| *last < key) {
            self.keys.push(key);
            self.alive.push(true);
            self.codes.extend_from_slice(&codes);
            self.fold.push(fold);
            return;
        }
        match self.keys.binary_search(&key) {
            Ok(i) => {
                self.codes[i * d..(i + 1) * d].copy_from_slice(&codes);
                self.fold[i] = fold;
                if !self.alive[i] {
                    self.alive[i] = true;
                    self.dead -= 1;
                }
            }
            Err(i) => {
                self.keys.insert(i, key);
                self.alive.insert(i, true);
                self.codes.splice(i * d..i * d, codes);
                self.fold.insert(i, fold);
            }
        }
    }

    /// Removes `key` (absent keys are ignored): marks its row dead, and rewrites the arrays
    /// without their dead rows once those are a quarter of them.
    pub(super) fn remove(&mut self, key: u64) {
        let Ok(i) = self.keys.binary_search(&key) else {
            return;
        };
        if !std::mem::replace(&mut self.alive[i], false) {
            return;
        }
        self.dead += 1;
        if self.dead >= DEAD_MIN.max(self.keys.len() / 4) {
            self.sweep();
        }
    }

    /// Rewrites the arrays without their dead rows.
    fn sweep(&mut self) {
        let d = self.dims;
        let mut to = 0;
        for from in 0..self.keys.len() {
            if self.alive[from] {
                self.keys[to] = self.keys[from];
                self.fold[to] = self.fold[from];
                self.codes.copy_within(from * d..(from + 1) * d, to * d);
                to += 1;
            }
        }
        self.keys.truncate(to);
        self.fold.truncate(to);
        self.codes.truncate(to * d);
        self.alive = vec![true; to];
        self.dead = 0;
    }

    /// The live rows of `keys` (ascending), walking the copy's keys forward: each step
    /// gallops over the rows between two listed keys.
    fn slots(&self, keys: &[u64]) -> Vec<u32> {
        let mut slots = Vec::with_capacity(keys.len());
        let mut from = 0;
        for &key in keys {
            let rest = &self.keys[from..];
            let mut bound = 1;
            while bound < rest.len() && rest[bound] < key {
                bound *= 2;
            }
            let i = from + rest[..(bound + 1).min(rest.len())].partition_point(|k| *k < key);
            if i < self.keys.len() && self.keys[i] == key && self.alive[i] {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "a partition holds fewer than 2^32 vectors"
                )]
                slots.push(i as u32);
            }
            from = i;
        }
        slots
    }

    /// The `keep` keys nearest `query` among `keys` by the int8 distance, unordered; keys the
    /// copy lacks are skipped. Listed ascending, `keys` are found in one forward walk and
    /// their rows read in address order.
    pub(super) fn nearest(&self, query: &[f32], keys: &[u64], keep: usize) -> Vec<u64> {
        let mut q = vec![0; self.dims];
        let q_scale = match self.metric {
            Metric::Cos => {
                quantize(query, &mut q);
                1.0
            }
            Metric::L2 | Metric::Ip => quantize(query, &mut q),
        };
        let slots = if keys.is_sorted() {
            self.slots(keys)
        } else {
            let mut sorted = keys.to_vec();
            sorted.sort_unstable();
            self.slots(&sorted)
        };
        let mut scored = pulp::Arch::new().dispatch(Scan {
            copy: self,
            q: &q,
            q_scale,
            slots: &slots,
        });
        // selecting once beats a bounded heap's branch per row at the sizes scanned here
        let by = |a: &(f32, u32), b: &(f32, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
        if scored.len() > keep {
            scored.select_nth_unstable_by(keep, by);
            scored.truncate(keep);
        }
        scored
            .into_iter()
            .map(|(_, i)| self.keys[i as usize])
            .collect()
    }

    pub(super) fn memory_usage(&self) -> usize {
        // codes + fold + key + alive
        self.keys.len() * (self.dims + 8 + 8 + 1)
    }

    /// Each live row: key, codes, fold (ascending keys).
    #[cfg(test)]
    pub(super) fn rows(&self) -> Vec<(u64, &[i8], (f32, f32))> {
        (0..self.keys.len())
            .filter(|i| self.alive[*i])
            .map(|i| {
                let codes = &self.codes[i * self.dims..(i + 1) * self.dims];
                (self.keys[i], codes, self.fold[i])
            })
            .collect()
    }
}

/// One scan of [`Compact::nearest`]: (distance, slot) of every listed slot.
struct Scan<'a> {
    copy: &'a Compact,
    q: &'a [i8],
    q_scale: f32,
    slots: &'a [u32],
}

/// Rows ahead of the one scored whose codes a scan asks the CPU to load: the rows of a filter
/// are scattered over the copy, and the CPU's own lookahead covers about one row.
const AHEAD: usize = 8;

/// The instruction set the scan runs on, as `pulp` detected it at run time: "v4"
/// (x86-64-v4, AVX-512, when pulp is built with it), "v3" (x86-64-v3: AVX2 and FMA), "neon",
/// or "scalar" (no SIMD the scan uses, e.g. an x86-64 CPU without AVX2).
pub(super) fn kernel() -> String {
    let arch = format!("{:?}", pulp::Arch::new());
    arch.split('(').next().unwrap_or(&arch).to_lowercase()
}

impl pulp::WithSimd for Scan<'_> {
    type Output = Vec<(f32, u32)>;

    #[allow(
        clippy::inline_always,
        reason = "pulp's dispatch: inlined into its target-feature function"
    )]
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let c = self.copy;
        let d = c.dims;
        let row = |i: u32| &c.codes[i as usize * d..(i as usize + 1) * d];
        let mut scored = Vec::with_capacity(self.slots.len());
        for (j, &i) in self.slots.iter().enumerate() {
            if let Some(&next) = self.slots.get(j + AHEAD) {
                prefetch(row(next));
            }
            let (mul, add) = c.fold[i as usize];
            #[allow(clippy::cast_precision_loss, reason = "|dot| < 2^24 for dims < 1040")]
            let dot = dot(row(i), self.q) as f32;
            scored.push((add - mul * self.q_scale * dot, i));
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
    fn keys_out_of_order_and_dead_rows_keep_the_copy_sorted_and_searchable() {
        let mut c = Compact::new(8, Metric::L2);
        // ascending, then older keys between them (moved into place)
        for i in (0..6000).map(|i| i * 2).chain([7, 1, 3001]) {
            c.insert(i, &v(i, 8));
        }
        assert!(c.keys.is_sorted() && c.len() == 6003);
        // removals past a quarter of the rows rewrite the arrays without the dead ones
        for i in (0..12_000).step_by(4) {
            c.remove(i);
        }
        c.remove(4); // again: ignored
        assert_eq!(c.len(), 6003 - 3000);
        assert!(c.dead < DEAD_MIN.max(c.keys.len() / 4) && c.keys.is_sorted());
        let live: Vec<u64> = (0..12_000)
            .filter(|i| i % 4 == 2)
            .chain([1, 7, 3001])
            .collect();
        // listed out of order or with removed keys: the live listed keys only
        let mut asked = live.clone();
        asked.extend([0, 8, 12]);
        for i in [2, 1, 7, 3001, 11_998] {
            assert_eq!(c.nearest(&v(i, 8), &asked, 1), [i]);
        }
        assert_eq!(c.nearest(&v(5, 8), &asked, 10_000).len(), live.len());
        // a removed key put back revives its row
        c.insert(8, &v(8, 8));
        assert_eq!(c.nearest(&v(8, 8), &[6, 8, 10], 1), [8]);
    }

    #[test]
    fn a_copy_filled_in_any_order_is_the_copy_inserted_in_key_order() {
        let keys: Vec<u64> = (0..3000).map(|i| i * 3).collect();
        let mut inserted = Compact::new(16, Metric::Cos);
        for k in keys.iter().filter(|k| !k.is_multiple_of(7)) {
            inserted.insert(*k, &v(*k, 16));
        }
        let mut filled = Compact::with_keys(16, Metric::Cos, keys.clone());
        // slots follow keys roughly: in blocks, backwards within each; every 7th never comes
        for block in keys.chunks(64).enumerate().map(|(i, b)| (i, b.len())) {
            for j in (0..block.1).rev() {
                let row = block.0 * 64 + j;
                if !keys[row].is_multiple_of(7) {
                    filled.fill(row, &v(keys[row], 16));
                }
            }
        }
        filled.settle();
        assert_eq!(filled.rows(), inserted.rows());
        assert_eq!(filled.len(), inserted.len());
        assert_eq!(filled.nearest(&v(9, 16), &keys, 1), [9]);
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
