//! The vector index: one partition per namespace, derived from the row store.
//!
//! - A namespace with fewer than [`Tuning::graph_min`] vectors is a flat array scanned exactly.
//! - A larger one is a usearch HNSW graph (SIMD kernels). Keys are the rows' vector keys
//!   (`Col::vkey`), allocated monotonically and never reused, because usearch misbehaves when
//!   a removed key is added again.
//! - Nothing is ever removed from a graph either: usearch hands the slot of a removed key to
//!   the next insert and rewires that node in place, the code path of its remove/re-add bugs
//!   (#396, #727, #753, #769). A removed vector is renamed to a *grave* key (`GRAVE | key`)
//!   instead: it keeps routing searches but never comes back as a hit. `compact()` rebuilds
//!   graphs full of graves.
//! - HNSW is approximate: neighbour pruning can leave a few nodes with no incoming edge
//!   (measured: ~0.06% of 99k 384-d vectors, ~0.2% of 4-d ones, the same in raw usearch),
//!   which only a filtered search with few candidates (an exact scan) returns.
//! - A search gets a [`Plan`] from the engine: no predicate (every row passes), an exact scan
//!   of the listed keys, or HNSW with the predicate inside the traversal, widened per call
//!   (a larger `count`, never the shared expansion setting) until k hits, else an exact scan.
//! - Final scores are recomputed in f64 from the stored f32 vectors, so a score never depends
//!   on the kernel or the plan.
//! - usearch serves only as many concurrent calls as it reserved thread slots, and fails a call
//!   that finds none ("Reserve capacity ahead of insertions!"). Every call into a graph
//!   therefore takes a [`Permit`] of [`Slots`] first: [`Graph`]'s methods demand one, so no
//!   code path can reach usearch without it, whatever the number of threads calling. Graphs
//!   reserve [`thread_slots`] contexts. Structural changes (reserve, remove, save, compact)
//!   happen under the engine's exclusive state lock.
//! - The plan thresholds live in [`Tuning`], fixed in production and lowered by tests so
//!   every plan branch runs at a few thousand rows.

use std::collections::{BinaryHeap, HashMap};
use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::error::{Error, Result};
use crate::pool::pool;
use crate::types::Metric;

/// HNSW connectivity (M).
pub const CONNECTIVITY: usize = 16;
/// HNSW construction breadth.
pub const EXPANSION_ADD: usize = 128;
/// Default search breadth: the candidate count of every graph search (recall vs speed).
/// Graphs are created with usearch's own expansion at 1, so this per-call count alone
/// decides the breadth (usearch searches `max(expansion, count)` candidates).
pub const DEFAULT_BREADTH: usize = 64;
/// An over-fetching search asks for this many times the candidates expected to hold `k`
/// passing hits; when fewer pass (~4% of searches at 1.75), a filtered traversal follows.
/// Measured on 99k rows with a 10% filter (k = 10), QPS vs unfiltered and recall@10 on one
/// graph: 1.3 -> recall 0.949; 1.5 -> 0.49x, 0.958 (0.950 on another build of the graph);
/// 1.75 -> 0.46x, 0.966 (the unfiltered recall at the default breadth); 2.0 -> 0.40x, 0.970.
const OVERFETCH: f64 = 1.75;
/// Candidates rescored in f64 beyond `k` (the fast kernels may order near-ties differently).
const RESCORE_MARGIN: usize = 8;
/// Keys at or above this mark removed vectors (graves); live keys are always below it.
const GRAVE: u64 = 1 << 63;
/// Where the search plans switch; [`Tuning::default`] is what the store runs with.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// Below this many vectors a namespace is a flat array (exact scans beat a graph there).
    pub graph_min: usize,
    /// A filtered search whose candidates (posting-list bound) number at most this is an exact
    /// scan of them.
    pub exact_max: usize,
    /// A filter too selective to over-fetch, passing at most this many rows, is an exact scan;
    /// a rarer-but-larger one is a filtered traversal.
    pub exact_scan_max: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            graph_min: 2048,
            exact_max: 1024,
            exact_scan_max: 16_384,
        }
    }
}

/// usearch thread contexts reserved per graph, and permits of [`Slots`]: twice the cores,
/// at least 32 (Python threads search beside the worker pool), at most 256 (each context
/// holds a visited-set of the graph's size).
#[must_use]
pub fn thread_slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        (2 * cores).clamp(32, 256)
    })
}

/// A counting semaphore bounding concurrent calls into usearch.
pub struct Slots {
    free: Mutex<usize>,
    cv: Condvar,
}

/// Proof that the holder may make one call into usearch at a time.
pub struct Permit<'a>(&'a Slots);

impl Slots {
    fn new(n: usize) -> Self {
        Self {
            free: Mutex::new(n),
            cv: Condvar::new(),
        }
    }
    /// Waits for a free slot.
    pub fn acquire(&self) -> Permit<'_> {
        let mut free = self.free.lock();
        while *free == 0 {
            self.cv.wait(&mut free);
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock() += 1;
        self.0.cv.notify_one();
    }
}

/// How a search selects its candidates (decided by the engine from the filter).
pub enum Plan<'a> {
    /// Every vector of the namespace passes.
    All,
    /// Exactly these keys pass.
    Keys(Vec<u64>),
    /// A key passes when the predicate says so; `all_keys` lists every key that passes, for
    /// the exact fallback, computed only if needed.
    Predicate {
        /// The predicate over vector keys.
        pred: &'a (dyn Fn(u64) -> bool + Sync),
        /// Every passing key (for the exact fallback).
        all_keys: &'a (dyn Fn() -> Vec<u64> + Sync),
        /// Estimated share of the namespace's vectors that pass (0..=1).
        selectivity: f64,
    },
}

/// The routes a search can take, counted per index (`Stats::vector_routes`): what the
/// planner chose, observable in production and asserted by the tests of each branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// An exact scan of a flat partition.
    Flat,
    /// An unfiltered graph search.
    Graph,
    /// An exact scan of the few keys a filter's posting list allows.
    Keys,
    /// An over-fetched unfiltered graph search, passing hits kept.
    Overfetch,
    /// An exact scan of the rows a rare filter passes.
    RareScan,
    /// A graph traversal with the filter inside.
    Traversal,
    /// An exact scan after a graph search came up short.
    Fallback,
}

impl Route {
    /// Every route, in counter order.
    pub const ALL: [Route; 7] = [
        Route::Flat,
        Route::Graph,
        Route::Keys,
        Route::Overfetch,
        Route::RareScan,
        Route::Traversal,
        Route::Fallback,
    ];

    /// The route's name in statistics.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Flat => "flat",
            Route::Graph => "graph",
            Route::Keys => "keys",
            Route::Overfetch => "overfetch",
            Route::RareScan => "rare_scan",
            Route::Traversal => "traversal",
            Route::Fallback => "fallback",
        }
    }
}

/// The candidate count of an unfiltered search expected to hold `want` passing hits
/// ([`OVERFETCH`] times `want / selectivity`), or None when that exceeds `cap` (a filtered
/// search is cheaper).
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "small counts; the result is bounded by `cap`"
)]
fn overfetch(want: usize, selectivity: f64, cap: usize) -> Option<usize> {
    let count = (want as f64 * OVERFETCH / selectivity.max(1e-6)).ceil();
    (count <= cap as f64).then_some(count as usize)
}

/// f64 score of the metric against one query: l2 -> 1/(1+dist), cos -> cosine, ip -> inner
/// product. Sums run in four lanes (exact f64 products; the compiler vectorises them).
struct Scorer {
    metric: Metric,
    q: Vec<f64>,
    q_norm: f64,
}

impl Scorer {
    fn new(metric: Metric, query: &[f32]) -> Self {
        let q: Vec<f64> = query.iter().map(|x| f64::from(*x)).collect();
        let q_norm = sum4(q.iter().map(|x| x * x)).sqrt();
        Self { metric, q, q_norm }
    }

    fn score(&self, v: &[f32]) -> f64 {
        let pairs = || self.q.iter().zip(v).map(|(a, b)| (*a, f64::from(*b)));
        match self.metric {
            Metric::L2 => 1.0 / (1.0 + sum4(pairs().map(|(a, b)| (a - b) * (a - b))).sqrt()),
            Metric::Ip => sum4(pairs().map(|(a, b)| a * b)),
            Metric::Cos => {
                let dot = sum4(pairs().map(|(a, b)| a * b));
                let norm = sum4(pairs().map(|(_, b)| b * b)).sqrt();
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
struct Nearest<'q> {
    metric: Metric,
    query: &'q [f32],
    q_norm: f32,
    keep: usize,
    heap: BinaryHeap<Cand>,
}

impl<'q> Nearest<'q> {
    fn new(metric: Metric, query: &'q [f32], keep: usize) -> Self {
        Self {
            metric,
            query,
            q_norm: query.iter().map(|x| x * x).sum::<f32>().sqrt(),
            keep,
            heap: BinaryHeap::with_capacity(keep + 1),
        }
    }

    fn offer(&mut self, key: u64, v: &[f32]) {
        let d = fast_distance(self.metric, self.query, self.q_norm, v);
        if self.heap.len() < self.keep {
            self.heap.push(Cand(d, key));
        } else if self.heap.peek().is_some_and(|w| d < w.0) {
            self.heap.pop();
            self.heap.push(Cand(d, key));
        }
    }

    /// The kept keys, unordered.
    fn into_keys(self) -> Vec<u64> {
        self.heap.into_iter().map(|c| c.1).collect()
    }
}

/// Flat partition: contiguous vectors, exact scans.
#[derive(Default)]
struct Flat {
    keys: Vec<u64>,
    data: Vec<f32>,
    pos: HashMap<u64, usize>,
}

/// Graph partition: a usearch index reachable only through methods that demand a [`Permit`].
struct Graph {
    index: Index,
    /// Graves: removed vectors kept as routing nodes under `GRAVE | key`.
    removed: usize,
}

impl Graph {
    fn create(dims: usize, metric: Metric, capacity: usize, p: &Permit<'_>) -> Result<Self> {
        let options = IndexOptions {
            dimensions: dims,
            metric: match metric {
                Metric::L2 => MetricKind::L2sq,
                Metric::Cos => MetricKind::Cos,
                Metric::Ip => MetricKind::IP,
            },
            quantization: ScalarKind::F32,
            connectivity: CONNECTIVITY,
            expansion_add: EXPANSION_ADD,
            expansion_search: 1,
            multi: false,
        };
        let index = Index::new(&options).map_err(|e| usearch_err("create", e))?;
        let g = Self { index, removed: 0 };
        g.reserve(capacity.max(64), p)?;
        Ok(g)
    }

    fn live(&self) -> usize {
        self.index.size() - self.removed
    }

    fn contains(&self, key: u64) -> bool {
        self.index.contains(key)
    }

    fn reserve(&self, capacity: usize, _: &Permit<'_>) -> Result<()> {
        self.index
            .reserve_capacity_and_threads(capacity, thread_slots())
            .map_err(|e| usearch_err("reserve", e))
    }

    /// Room for `more` inserts without a reallocation during them.
    fn reserve_more(&self, more: usize, p: &Permit<'_>) -> Result<()> {
        let need = self.index.size() + more;
        if need > self.index.capacity() {
            self.reserve(need.max(self.index.capacity() * 2), p)?;
        }
        Ok(())
    }

    fn add(&self, key: u64, v: &[f32], _: &Permit<'_>) -> Result<()> {
        if self.index.contains(key) {
            return Ok(());
        }
        self.index.add(key, v).map_err(|e| usearch_err("add", e))
    }

    fn search(&self, q: &[f32], count: usize, _: &Permit<'_>) -> Result<Vec<u64>> {
        let m = if self.removed == 0 {
            self.index.search(q, count)
        } else {
            self.index.filtered_search(q, count, |key: u64| key < GRAVE)
        };
        Ok(m.map_err(|e| usearch_err("search", e))?.keys)
    }

    fn filtered_search(
        &self,
        q: &[f32],
        count: usize,
        pred: impl Fn(u64) -> bool,
        _: &Permit<'_>,
    ) -> Result<Vec<u64>> {
        self.index
            .filtered_search(q, count, pred)
            .map(|m| m.keys)
            .map_err(|e| usearch_err("filtered search", e))
    }

    /// Copies the vector of `key` into `buf`; false when absent.
    fn get(&self, key: u64, buf: &mut [f32], _: &Permit<'_>) -> bool {
        matches!(self.index.get(key, buf), Ok(n) if n > 0)
    }

    /// Turns `key` into a grave (see the module docs).
    fn bury(&mut self, key: u64, _: &Permit<'_>) -> Result<()> {
        if self.index.contains(key) {
            self.index
                .rename(key, GRAVE | key)
                .map_err(|e| usearch_err("remove", e))?;
            self.removed += 1;
        }
        Ok(())
    }

    fn save(&self, path: &str, _: &Permit<'_>) -> Result<()> {
        self.index.save(path).map_err(|e| usearch_err("save", e))
    }

    fn load(&mut self, path: &str, removed: usize, p: &Permit<'_>) -> Result<()> {
        self.index.load(path).map_err(|e| usearch_err("load", e))?;
        self.removed = removed;
        self.reserve(self.index.size().max(64), p)
    }

    /// Adds items on the worker pool, one permit per chunk.
    fn add_all(&self, items: &[(u64, Vec<f32>)], slots: &Slots) -> Result<()> {
        const CHUNK: usize = 64;
        if items.len() > 10_000 {
            log::info!("adding {} vectors to a graph", items.len());
        }
        let add_chunk = |chunk: &[(u64, Vec<f32>)]| {
            let p = slots.acquire();
            chunk.iter().try_for_each(|(k, v)| self.add(*k, v, &p))
        };
        if items.len() >= 4 * CHUNK {
            pool()?.install(|| items.par_chunks(CHUNK).try_for_each(add_chunk))
        } else {
            add_chunk(items)
        }
    }
}

enum Partition {
    Flat(Flat),
    Graph(Graph),
}

/// What a checkpoint wrote, beside the graph files.
#[derive(Serialize, Deserialize)]
struct Manifest {
    seq: u64,
    dims: usize,
    graphs: Vec<GraphFile>,
}

#[derive(Serialize, Deserialize)]
struct GraphFile {
    namespace: String,
    file: String,
    crc32: u32,
    /// Graves in the graph. Required: a checkpoint from before graves existed may hold
    /// unreachable nodes (see the module docs), so it is rebuilt rather than loaded.
    removed: usize,
}

/// The per-namespace vector partitions.
pub struct VectorIndex {
    dims: usize,
    metric: Metric,
    tuning: Tuning,
    parts: HashMap<String, Partition>,
    slots: Slots,
    /// Search breadth: the floor of every graph search's `count` (recall vs speed).
    breadth: AtomicUsize,
    /// Searches per [`Route`].
    routes: [AtomicU64; Route::ALL.len()],
}

/// CRC-32 of a file, read in 1 MiB chunks (a graph file can be gigabytes).
fn file_crc32(path: &Path) -> std::io::Result<u32> {
    let mut f = fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf)? {
            0 => return Ok(hasher.finalize()),
            n => hasher.update(&buf[..n]),
        }
    }
}

fn usearch_err(context: &str, e: impl std::fmt::Display) -> Error {
    Error::storage(&format!("vector index: {context}"), e)
}

impl VectorIndex {
    /// An empty index.
    #[must_use]
    pub fn new(dims: usize, metric: Metric, tuning: Tuning) -> Self {
        Self {
            dims,
            metric,
            tuning,
            parts: HashMap::new(),
            slots: Slots::new(thread_slots()),
            breadth: AtomicUsize::new(DEFAULT_BREADTH),
            routes: Default::default(),
        }
    }

    fn took(&self, route: Route) {
        self.routes[route as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Searches so far per route.
    #[must_use]
    pub fn routes(&self) -> Vec<(Route, u64)> {
        Route::ALL
            .iter()
            .map(|r| (*r, self.routes[*r as usize].load(Ordering::Relaxed)))
            .collect()
    }

    /// An empty index with the same settings (dims, metric, tuning, breadth).
    #[must_use]
    pub fn empty_like(&self) -> Self {
        let vi = Self::new(self.dims, self.metric, self.tuning);
        vi.set_breadth(self.breadth.load(Ordering::Relaxed));
        vi
    }

    fn new_graph(&self, capacity: usize) -> Result<Graph> {
        Graph::create(self.dims, self.metric, capacity, &self.slots.acquire())
    }

    /// The plan thresholds.
    #[must_use]
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Sets the search breadth (the floor of each graph search's candidate count).
    pub fn set_breadth(&self, breadth: usize) {
        self.breadth.store(breadth.max(1), Ordering::Relaxed);
    }

    /// Number of live vectors in a namespace's partition.
    #[must_use]
    pub fn len(&self, ns: &str) -> usize {
        match self.parts.get(ns) {
            None => 0,
            Some(Partition::Flat(f)) => f.keys.len(),
            Some(Partition::Graph(g)) => g.live(),
        }
    }

    /// Whether a namespace's partition holds `key`.
    #[must_use]
    pub fn contains(&self, ns: &str, key: u64) -> bool {
        match self.parts.get(ns) {
            None => false,
            Some(Partition::Flat(f)) => f.pos.contains_key(&key),
            Some(Partition::Graph(g)) => g.contains(key),
        }
    }

    /// Removes `key` from the namespace's partition (absent keys are ignored).
    pub fn remove(&mut self, ns: &str, key: u64) -> Result<()> {
        let empty = match self.parts.get_mut(ns) {
            None => return Ok(()),
            Some(Partition::Flat(f)) => {
                if let Some(i) = f.pos.remove(&key) {
                    let last = f.keys.len() - 1;
                    f.keys.swap_remove(i);
                    let d = self.dims;
                    if i != last {
                        f.data.copy_within(last * d..(last + 1) * d, i * d);
                        f.pos.insert(f.keys[i], i);
                    }
                    f.data.truncate(last * d);
                }
                f.keys.is_empty()
            }
            Some(Partition::Graph(g)) => {
                g.bury(key, &self.slots.acquire())?;
                g.live() == 0
            }
        };
        if empty {
            self.parts.remove(ns);
        }
        Ok(())
    }

    /// Room for `more` inserts into the namespace's graph (if it has one), so that adding
    /// them allocates nothing: called before a commit, where a failure still rejects the write.
    pub fn reserve(&self, ns: &str, more: usize) -> Result<()> {
        match self.parts.get(ns) {
            Some(Partition::Graph(g)) => g.reserve_more(more, &self.slots.acquire()),
            _ => Ok(()),
        }
    }

    /// Adds vectors to a namespace's partition, growing a flat array into a graph when it
    /// passes [`Tuning::graph_min`]; graph inserts run on the worker pool.
    pub fn add(&mut self, ns: &str, items: Vec<(u64, Vec<f32>)>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let current = self.len(ns);
        let is_flat = !matches!(self.parts.get(ns), Some(Partition::Graph(_)));
        if is_flat && current + items.len() >= self.tuning.graph_min {
            // promote: move the flat vectors and the new ones into a fresh graph
            let mut all = match self.parts.remove(ns) {
                Some(Partition::Flat(f)) => f
                    .keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| (*k, f.data[i * self.dims..(i + 1) * self.dims].to_vec()))
                    .collect(),
                _ => Vec::new(),
            };
            all.extend(items);
            let g = self.new_graph(all.len())?;
            log::info!(
                "building vector graph for namespace {ns:?}: {} vectors",
                all.len()
            );
            g.add_all(&all, &self.slots)?;
            self.parts.insert(ns.to_owned(), Partition::Graph(g));
            return Ok(());
        }
        match self
            .parts
            .entry(ns.to_owned())
            .or_insert_with(|| Partition::Flat(Flat::default()))
        {
            Partition::Flat(f) => {
                for (k, v) in items {
                    if let Some(i) = f.pos.get(&k) {
                        f.data[i * self.dims..(i + 1) * self.dims].copy_from_slice(&v);
                    } else {
                        f.pos.insert(k, f.keys.len());
                        f.keys.push(k);
                        f.data.extend_from_slice(&v);
                    }
                }
            }
            Partition::Graph(g) => {
                g.reserve_more(items.len(), &self.slots.acquire())?;
                g.add_all(&items, &self.slots)?;
            }
        }
        Ok(())
    }

    /// The stored vectors of `keys` (None where absent), in order.
    fn vectors(&self, ns: &str, keys: &[u64]) -> Vec<Option<Vec<f32>>> {
        match self.parts.get(ns) {
            None => vec![None; keys.len()],
            Some(Partition::Flat(f)) => keys
                .iter()
                .map(|k| {
                    f.pos
                        .get(k)
                        .map(|i| f.data[i * self.dims..(i + 1) * self.dims].to_vec())
                })
                .collect(),
            Some(Partition::Graph(g)) => {
                let p = self.slots.acquire();
                keys.iter()
                    .map(|k| {
                        let mut buf = vec![0f32; self.dims];
                        g.get(*k, &mut buf, &p).then_some(buf)
                    })
                    .collect()
            }
        }
    }

    /// The best `k` keys for `query` under `plan`, with f64 scores, best first
    /// (ties by key, so equal inputs give equal outputs).
    pub fn search(
        &self,
        ns: &str,
        query: &[f32],
        k: usize,
        plan: &Plan<'_>,
    ) -> Result<Vec<(u64, f64)>> {
        let Some(part) = self.parts.get(ns) else {
            return Ok(Vec::new());
        };
        let breadth = self.breadth.load(Ordering::Relaxed);
        let cands: Vec<u64> = match (part, plan) {
            (Partition::Flat(f), plan) => {
                self.took(Route::Flat);
                match plan {
                    Plan::All => self.scan(f, query, k, f.keys.iter().copied()),
                    Plan::Keys(keys) => self.scan(f, query, k, keys.iter().copied()),
                    Plan::Predicate { pred, .. } => {
                        self.scan(f, query, k, f.keys.iter().copied().filter(|key| pred(*key)))
                    }
                }
            }
            (Partition::Graph(g), Plan::Keys(keys)) => {
                self.took(Route::Keys);
                self.graph_scan(g, query, k, keys)
            }
            (Partition::Graph(g), Plan::All) => {
                self.took(Route::Graph);
                let count = k.max(breadth).min(g.live());
                g.search(query, count, &self.slots.acquire())?
            }
            (
                Partition::Graph(g),
                Plan::Predicate {
                    pred,
                    all_keys,
                    selectivity,
                },
            ) => {
                // A common filter: over-fetch an unfiltered search and keep the passing hits
                // (cheaper than a filtered traversal, which visits ~1/selectivity more nodes).
                let mut found = Vec::new();
                // the filtered traversal below starts at the breadth (a rare filter) or, after
                // an unlucky over-fetch, at k (the over-fetch's hits join its candidates)
                let mut count = k.max(breadth);
                if let Some(fetch) = overfetch(k, *selectivity, 8 * breadth.max(k)) {
                    let fetch = fetch.max(breadth).min(g.live());
                    found = g.search(query, fetch, &self.slots.acquire())?;
                    found.retain(|key| pred(*key));
                    if found.len() >= k {
                        self.took(Route::Overfetch);
                        found.truncate(k + RESCORE_MARGIN);
                        return Ok(self.rescore(ns, query, k, &found));
                    }
                    count = k;
                } else {
                    // A rarer filter over few enough rows: scanning them exactly beats the
                    // traversal (at 1M rows a 1% filter took ~40 ms in the traversal, with
                    // recall 0.92).
                    #[allow(clippy::cast_precision_loss, reason = "an estimate of a row count")]
                    let passing = *selectivity * g.live() as f64;
                    #[allow(clippy::cast_precision_loss, reason = "a row-count threshold")]
                    if passing <= self.tuning.exact_scan_max as f64 {
                        self.took(Route::RareScan);
                        let keys = self.graph_scan(g, query, k, &all_keys());
                        return Ok(self.rescore(ns, query, k, &keys));
                    }
                }
                // A filtered traversal, widened until it finds k hits.
                self.took(Route::Traversal);
                let mut keys = loop {
                    let keys = g.filtered_search(query, count, pred, &self.slots.acquire())?;
                    if keys.len() >= k {
                        break keys;
                    }
                    if count >= 16 * breadth.max(k) || count >= g.index.size() {
                        self.took(Route::Fallback);
                        break self.graph_scan(g, query, k, &all_keys());
                    }
                    count *= 4;
                };
                keys.truncate(k + RESCORE_MARGIN);
                found.retain(|key| !keys.contains(key));
                keys.extend(found);
                return Ok(self.rescore(ns, query, k, &keys));
            }
        };
        Ok(self.rescore(ns, query, k, &cands[..cands.len().min(k + RESCORE_MARGIN)]))
    }

    /// Exact scan of a flat partition: the best `k + margin` of `keys`.
    fn scan(&self, f: &Flat, query: &[f32], k: usize, keys: impl Iterator<Item = u64>) -> Vec<u64> {
        let mut nearest = Nearest::new(self.metric, query, k + RESCORE_MARGIN);
        for key in keys {
            if let Some(i) = f.pos.get(&key) {
                nearest.offer(key, &f.data[i * self.dims..(i + 1) * self.dims]);
            }
        }
        nearest.into_keys()
    }

    /// Exact scan of some keys of a graph: the best `k + margin`.
    fn graph_scan(&self, g: &Graph, query: &[f32], k: usize, keys: &[u64]) -> Vec<u64> {
        let mut nearest = Nearest::new(self.metric, query, k + RESCORE_MARGIN);
        let mut buf = vec![0f32; self.dims];
        let p = self.slots.acquire();
        for key in keys {
            if g.get(*key, &mut buf, &p) {
                nearest.offer(*key, &buf);
            }
        }
        nearest.into_keys()
    }

    /// f64 scores of the candidates (a few more than `k`), best `k` first.
    fn rescore(&self, ns: &str, query: &[f32], k: usize, cands: &[u64]) -> Vec<(u64, f64)> {
        let by_f64 = Scorer::new(self.metric, query);
        let mut scored: Vec<(u64, f64)> = cands
            .iter()
            .zip(self.vectors(ns, cands))
            .filter_map(|(key, v)| v.map(|v| (*key, by_f64.score(&v))))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(k);
        scored
    }

    /// Namespaces whose graph carries many tombstones, to rebuild in `compact`.
    #[must_use]
    pub fn worn_graphs(&self) -> Vec<String> {
        self.parts
            .iter()
            .filter_map(|(ns, p)| match p {
                Partition::Graph(g) if g.removed > g.index.size() / 4 => Some(ns.clone()),
                _ => None,
            })
            .collect()
    }

    /// Rebuilds a namespace's partition from its live keys (drops tombstones).
    pub fn rebuild(&mut self, ns: &str, keys: &[u64]) -> Result<()> {
        let items: Vec<(u64, Vec<f32>)> = keys
            .iter()
            .zip(self.vectors(ns, keys))
            .filter_map(|(k, v)| v.map(|v| (*k, v)))
            .collect();
        self.replace(ns, items)
    }

    /// Replaces a namespace's partition with exactly `items` (a repair from the rows).
    pub fn replace(&mut self, ns: &str, items: Vec<(u64, Vec<f32>)>) -> Result<()> {
        self.parts.remove(ns);
        self.add(ns, items)
    }

    /// Namespaces that have a partition.
    #[must_use]
    pub fn namespaces(&self) -> Vec<String> {
        self.parts.keys().cloned().collect()
    }

    /// Memory used by the graphs and flat arrays, bytes.
    #[must_use]
    pub fn memory_usage(&self) -> usize {
        self.parts
            .values()
            .map(|p| match p {
                Partition::Flat(f) => f.data.len() * 4 + f.keys.len() * 24,
                Partition::Graph(g) => g.index.memory_usage(),
            })
            .sum()
    }

    /// Number of vectors in all partitions.
    #[must_use]
    pub fn total_len(&self) -> usize {
        self.parts.keys().map(|ns| self.len(ns)).sum()
    }

    /// Number of graph partitions and of flat ones.
    #[must_use]
    pub fn partition_counts(&self) -> (usize, usize) {
        let graphs = self
            .parts
            .values()
            .filter(|p| matches!(p, Partition::Graph(_)))
            .count();
        (graphs, self.parts.len() - graphs)
    }

    /// Writes the graphs into `dir` (temp file, fsync, rename) with a manifest naming the
    /// changelog sequence they reflect. Flat partitions are not written: they reload from rows.
    pub fn checkpoint(&self, dir: &Path, seq: u64) -> Result<()> {
        fs::create_dir_all(dir)?;
        let mut graphs = Vec::new();
        for (i, (ns, p)) in self.parts.iter().enumerate() {
            let Partition::Graph(g) = p else { continue };
            let file = format!("g{seq}-{i}.usearch");
            let tmp = dir.join(format!("{file}.tmp"));
            let tmp_str = tmp
                .to_str()
                .ok_or_else(|| Error::invalid("store path is not UTF-8"))?;
            g.save(tmp_str, &self.slots.acquire())?;
            let crc32 = file_crc32(&tmp)?;
            fs::File::open(&tmp)?.sync_all()?;
            fs::rename(&tmp, dir.join(&file))?;
            graphs.push(GraphFile {
                namespace: ns.clone(),
                file,
                crc32,
                removed: g.removed,
            });
        }
        let manifest = Manifest {
            seq,
            dims: self.dims,
            graphs,
        };
        let tmp = dir.join("manifest.json.tmp");
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(&manifest).map_err(|e| Error::storage("manifest", e))?)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join("manifest.json"))?;
        // remove graph files no longer named by the manifest
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.ends_with(".usearch") && !manifest.graphs.iter().any(|g| g.file == name) {
                let _ = fs::remove_file(dir.join(name));
            }
        }
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Loads the graphs of the last checkpoint in `dir`; returns the sequence they reflect, or
    /// None when there is no usable checkpoint (missing, other dims, or a corrupt file).
    pub fn load(&mut self, dir: &Path) -> Option<u64> {
        let bytes = fs::read(dir.join("manifest.json")).ok()?;
        let manifest: Manifest = match serde_json::from_slice(&bytes) {
            Ok(m) => m,
            Err(e) => {
                log::warn!("vector index manifest is damaged ({e}); rebuilding from rows");
                return None;
            }
        };
        if manifest.dims != self.dims {
            return None;
        }
        for gf in &manifest.graphs {
            let path = dir.join(&gf.file);
            let ok = file_crc32(&path).is_ok_and(|crc| crc == gf.crc32);
            if !ok {
                log::warn!(
                    "vector graph {} is missing or corrupt; rebuilding from rows",
                    gf.file
                );
                self.parts.clear();
                return None;
            }
            let loaded = self.new_graph(0).and_then(|mut g| {
                let path = path
                    .to_str()
                    .ok_or_else(|| Error::invalid("path is not UTF-8"))?;
                g.load(path, gf.removed, &self.slots.acquire())?;
                Ok(g)
            });
            match loaded {
                Ok(g) => self.parts.insert(gf.namespace.clone(), Partition::Graph(g)),
                Err(e) => {
                    log::warn!("vector graph {}: {e}; rebuilding from rows", gf.file);
                    self.parts.clear();
                    return None;
                }
            };
        }
        Some(manifest.seq)
    }
}
