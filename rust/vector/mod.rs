//! The vector index: one partition per namespace, derived from the row store.
//!
//! - A namespace with fewer than [`Tuning::graph_min`] vectors is a flat array scanned exactly.
//! - A larger one is a usearch HNSW graph (SIMD kernels) of bfloat16 vectors, with the exact
//!   f32 ones beside it (see `part`). Keys are the rows' vector keys
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
//! - A search gets a [`Plan`] from the engine (see `plan`): every row passes, an exact scan of
//!   the listed keys, or a predicate, which is a scan of the partition's compact int8 copy
//!   (see `compact`) when few enough rows pass, else HNSW over-fetched and filtered, else HNSW
//!   with the predicate inside, widened per call (a larger `count`, never the shared
//!   expansion setting) until k hits, else an exact scan. Final scores are recomputed in f64
//!   from the stored f32 vectors, so a score never depends on the kernel or the plan; every
//!   search returns exactly `min(k, passing vectors)` keys.
//! - usearch serves only as many concurrent calls as it reserved thread slots, and fails a call
//!   that finds none ("Reserve capacity ahead of insertions!"). Every call into a graph
//!   therefore takes a permit of the index's slots first: the graph's methods demand one, so
//!   no code path reaches usearch without it, whatever the number of threads calling. Graphs
//!   reserve [`thread_slots`] contexts. Structural changes (reserve, remove) happen under the
//!   engine's exclusive state lock.
//! - A checkpoint saves graphs outside that lock: it *freezes* them first, and changes made
//!   meanwhile wait in each partition's overlay (see `part`). A graph is saved without the
//!   vectors the rows hold, and loaded with them (see `layout`).
//! - The plan thresholds live in [`Tuning`], fixed in production and lowered by tests so
//!   every plan branch runs at a few thousand rows.

mod compact;
mod exact;
mod files;
mod graph;
mod layout;
mod part;
mod plan;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
pub use exact::Scorer;
pub use files::Snapshot;
pub use graph::thread_slots;
use graph::{Graph, Slots};
use part::{GraphPart, Partition};
pub use plan::{AllKeys, Plan, Route};

/// HNSW connectivity (M).
pub const CONNECTIVITY: usize = 16;
/// HNSW construction breadth.
pub const EXPANSION_ADD: usize = 128;
/// Default search breadth: the candidate count of every graph search (recall vs speed).
/// Graphs are created with usearch's own expansion at 1, so this per-call count alone
/// decides the breadth (usearch searches `max(expansion, count)` candidates).
pub const DEFAULT_BREADTH: usize = 64;
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
    /// A filter passing at most this many rows (estimated) is a scan of the compact copy,
    /// whatever its selectivity.
    pub compact_scan_max: usize,
    /// A filter too rare to over-fetch (see `overfetch_max`) passing at most this many rows
    /// is a compact scan too; a larger one is a filtered traversal.
    pub rare_scan_max: usize,
    /// An over-fetching graph search asks for at most this many candidates (x breadth / 64);
    /// a filter needing more is a compact scan or a filtered traversal.
    pub overfetch_max: usize,
}

/// Where the defaults come from: `rust/examples/crossover.rs` on 99k 384-d rows (pypi-100k),
/// one thread, QPS as a share of the unfiltered QPS measured in the same run (machine loaded,
/// two runs each):
///
/// | passing | compact scan | over-fetch | traversal |
/// |---|---|---|---|
/// | 5% (5k rows) | 2.0-3.1x | 0.18-0.24x | 0.04x |
/// | 10% (10k) | 1.0-1.2x | 0.42-0.48x | 0.12x |
/// | 15% (15k) | 0.43-0.78x | 0.48-1.15x | 0.17x |
/// | 20% (20k) | 0.52-0.58x | 0.56-0.69x | 0.22x |
/// | 30% (30k) | 0.32-0.36x | 0.47-0.58x | |
///
/// The compact scan's cost grows with the rows passing (memory-bound even when streamed),
/// over-fetch's with 1/selectivity: they cross near 18k rows, where the compact scan still
/// has recall 1.0 against over-fetch's ~0.97. Where over-fetch would need more than
/// `overfetch_max` candidates, the traversal is the alternative, and the compact scan beats
/// it up to ~50k rows.
impl Default for Tuning {
    fn default() -> Self {
        Self {
            graph_min: 2048,
            exact_max: 1024,
            compact_scan_max: 18_000,
            rare_scan_max: 32_768,
            overfetch_max: 512,
        }
    }
}

/// The rows' vectors of the vector keys asked, appended to the buffer as stored (little-endian
/// f32) one after another, in order; returns the length of each (None for a key no row
/// holds). A checkpointed graph is loaded with them (see `layout`), asked from several
/// threads at once.
pub type RowVectors<'a> = &'a (dyn Fn(&[u64], &mut Vec<u8>) -> Result<Vec<Option<usize>>> + Sync);

/// The SIMD kernels chosen at run time for the CPU this runs on, as (component, kernel):
/// the graphs' distances of `metric` (usearch, see [`graph::kernel`]), the compact
/// scan's (pulp, see [`compact::kernel`]) and the local embedder's (see
/// [`crate::embed::kernel`]). A wheel is built for the architecture's baseline
/// CPU and carries the faster kernels beside it; these name the ones picked.
pub fn simd(metric: crate::types::Metric) -> Result<Vec<(&'static str, String)>> {
    Ok(vec![
        ("vector_graph", graph::kernel(metric)?),
        ("compact_scan", compact::kernel()),
        // the local embedder's products run on AVX-512 BF16 where the CPU has it, else
        // through pulp like the rest of its kernels (rust/embed/kernels.rs)
        (
            "embedder",
            crate::embed::kernel().map_or_else(compact::kernel, str::to_owned),
        ),
    ])
}

/// A usearch failure while doing `context`.
fn usearch_err(context: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::vector(format!("vector index: {context}"), e)
}

/// The per-namespace vector partitions.
pub struct VectorIndex {
    dims: usize,
    metric: crate::types::Metric,
    tuning: Tuning,
    parts: HashMap<String, Partition>,
    slots: Arc<Slots>,
    /// Search breadth: the floor of every graph search's `count` (recall vs speed).
    breadth: AtomicUsize,
    /// Searches per [`Route`].
    routes: [AtomicU64; Route::ALL.len()],
    /// Between [`VectorIndex::freeze`] and [`VectorIndex::thaw`].
    frozen: bool,
}

impl VectorIndex {
    /// An empty index.
    #[must_use]
    pub fn new(dims: usize, metric: crate::types::Metric, tuning: Tuning) -> Self {
        Self {
            dims,
            metric,
            tuning,
            parts: HashMap::new(),
            slots: Arc::new(Slots::new(thread_slots())),
            breadth: AtomicUsize::new(DEFAULT_BREADTH),
            routes: Default::default(),
            frozen: false,
        }
    }

    /// An empty index with the same settings (dims, metric, tuning, breadth).
    #[must_use]
    pub fn empty_like(&self) -> Self {
        let vi = Self::new(self.dims, self.metric, self.tuning);
        vi.set_breadth(self.breadth.load(Ordering::Relaxed));
        vi
    }

    fn new_graph(&self, capacity: usize) -> Result<Graph> {
        Graph::create(
            self.dims,
            self.metric,
            graph::SCALAR,
            capacity,
            &self.slots.acquire(),
        )
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
            Some(Partition::Flat(f)) => f.len(),
            Some(Partition::Graph(g)) => g.live(),
        }
    }

    /// Whether a namespace's partition holds `key`.
    #[must_use]
    pub fn contains(&self, ns: &str, key: u64) -> bool {
        match self.parts.get(ns) {
            None => false,
            Some(Partition::Flat(f)) => f.contains(key),
            Some(Partition::Graph(g)) => g.contains(key),
        }
    }

    /// Removes `key` from the namespace's partition (absent keys are ignored).
    pub fn remove(&mut self, ns: &str, key: u64) -> Result<()> {
        let empty = match self.parts.get_mut(ns) {
            None => return Ok(()),
            Some(Partition::Flat(f)) => {
                f.remove(key);
                f.is_empty()
            }
            Some(Partition::Graph(g)) => {
                g.remove(key, &self.slots.acquire())?;
                g.live() == 0 && !g.frozen
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
            Some(Partition::Graph(g)) => g.reserve(more, &self.slots.acquire()),
            _ => Ok(()),
        }
    }

    /// Adds vectors to a namespace's partition, growing a flat array into a graph when it
    /// passes [`Tuning::graph_min`]; graph inserts run on the worker pool.
    pub fn add(&mut self, ns: &str, items: Vec<(u64, Vec<f32>)>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        match self.parts.get_mut(ns) {
            Some(Partition::Graph(g)) => return g.add(&items, &self.slots),
            Some(Partition::Flat(f)) if f.len() + items.len() < self.tuning.graph_min => {
                for (k, v) in &items {
                    f.insert(*k, v);
                }
                return Ok(());
            }
            None if items.len() < self.tuning.graph_min => {
                let mut f = exact::Flat::new(self.dims);
                for (k, v) in &items {
                    f.insert(*k, v);
                }
                self.parts.insert(ns.to_owned(), Partition::Flat(f));
                return Ok(());
            }
            _ => {}
        }
        // promote: move the flat vectors and the new ones into a fresh graph
        let mut all = match self.parts.remove(ns) {
            Some(Partition::Flat(mut f)) => f.drain(),
            _ => Vec::new(),
        };
        all.extend(items);
        // in key order: the compact copy's rows then follow the keys (see `compact`)
        all.sort_unstable_by_key(|(k, _)| *k);
        let g = self.new_graph(all.len())?;
        log::info!(
            "building vector graph for namespace {ns:?}: {} vectors",
            all.len()
        );
        g.add_all(&all, &self.slots)?;
        let mut part = GraphPart::new(g, self.dims);
        for (k, v) in &all {
            part.index(*k, v);
        }
        self.parts.insert(ns.to_owned(), Partition::Graph(part));
        Ok(())
    }

    /// The stored vectors of `keys` (None where absent), in order.
    fn vectors(&self, ns: &str, keys: &[u64]) -> Vec<Option<Vec<f32>>> {
        let part = self.parts.get(ns);
        keys.iter()
            .map(|k| part.and_then(|p| p.get(*k)).map(<[f32]>::to_vec))
            .collect()
    }

    /// Namespaces whose graph carries many tombstones, to rebuild in `compact`.
    #[must_use]
    pub fn worn_graphs(&self) -> Vec<String> {
        self.parts
            .iter()
            .filter_map(|(ns, p)| match p {
                Partition::Graph(g) if g.graph.removed() > g.graph.size() / 4 => Some(ns.clone()),
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

    /// Memory used by the graphs and flat arrays, bytes.
    #[must_use]
    pub fn memory_usage(&self) -> usize {
        self.parts
            .values()
            .map(|p| match p {
                Partition::Flat(f) => f.memory_usage(),
                Partition::Graph(g) => {
                    g.graph.memory_usage()
                        + g.vectors.memory_usage()
                        + g.overlay.adds.memory_usage()
                        + g.exact.memory_usage()
                        + g.compact.memory_usage()
                }
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

    /// Freezes every graph for a checkpoint and returns them as they are now; until
    /// [`VectorIndex::thaw`], changes to them wait in their overlays.
    pub fn freeze(&mut self) -> Result<Snapshot> {
        let snapshot = self.snapshot()?;
        self.frozen = true;
        for p in self.parts.values_mut() {
            if let Partition::Graph(g) = p {
                g.frozen = true;
            }
        }
        Ok(snapshot)
    }

    /// Ends a freeze: pending removals reach the graphs; added vectors drain with
    /// [`VectorIndex::drain`].
    pub fn thaw(&mut self) -> Result<()> {
        self.frozen = false;
        let p = self.slots.acquire();
        for part in self.parts.values_mut() {
            if let Partition::Graph(g) = part {
                g.thaw(&p)?;
            }
        }
        drop(p);
        self.parts
            .retain(|_, part| !matches!(part, Partition::Graph(g) if g.live() == 0));
        Ok(())
    }

    /// Whether a frozen graph's overlay is full ([`part::OVERLAY_MAX`]): writes wait for the
    /// thaw (see `engine::commit`).
    #[must_use]
    pub fn overlay_full(&self) -> bool {
        // checked before every write group: one flag outside checkpoints, whatever the
        // number of namespaces
        self.frozen
            && self.parts.values().any(
                |p| matches!(p, Partition::Graph(g) if g.overlay.adds.len() >= part::OVERLAY_MAX),
            )
    }

    /// Namespaces whose graph is frozen or has changes waiting in its overlay.
    #[must_use]
    pub fn unsettled(&self) -> Vec<String> {
        self.parts
            .iter()
            .filter_map(|(ns, p)| match p {
                Partition::Graph(g)
                    if g.frozen || !g.overlay.adds.is_empty() || !g.overlay.graves.is_empty() =>
                {
                    Some(ns.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// The next overlay vectors to move into their graph: up to `budget`, of one namespace;
    /// None when every overlay is empty (or frozen). A drain runs in three steps so that
    /// searches need not wait for its inserts: [`VectorIndex::insert_drained`] needs only
    /// shared access (writers excluded, e.g. under an upgradable lock), room reserved first
    /// (see [`VectorIndex::drain_has_room`]); [`VectorIndex::drained`] then needs exclusive
    /// access, briefly.
    #[must_use]
    pub fn next_drain(&self, budget: usize) -> Option<Drain> {
        self.parts.iter().find_map(|(ns, p)| match p {
            Partition::Graph(g) => {
                let items = g.next_drain(budget);
                (!items.is_empty()).then(|| Drain {
                    ns: ns.clone(),
                    items,
                })
            }
            Partition::Flat(_) => None,
        })
    }

    /// Whether the graph of `d` takes its vectors without reserving (which reallocates, and
    /// so needs exclusive access: [`VectorIndex::reserve`]).
    #[must_use]
    pub fn drain_has_room(&self, d: &Drain) -> bool {
        match self.parts.get(&d.ns) {
            Some(Partition::Graph(g)) => g.has_room(d.items.len()),
            _ => true,
        }
    }

    /// Inserts the vectors of `d` into their graph; they stay in the overlay until
    /// [`VectorIndex::drained`]. Runs beside searches: usearch takes concurrent inserts and
    /// searches, and a search that finds a key in both scores it once.
    pub fn insert_drained(&self, d: &Drain) -> Result<()> {
        match self.parts.get(&d.ns) {
            Some(Partition::Graph(g)) => g.insert_drained(&d.items, &self.slots),
            _ => Ok(()),
        }
    }

    /// Drops the vectors of `d` from the overlay, now that the graph holds them.
    pub fn drained(&mut self, d: &Drain) {
        if let Some(Partition::Graph(g)) = self.parts.get_mut(&d.ns) {
            g.drained(&d.items);
        }
    }

    /// Moves up to `budget` vectors from the overlays into their graphs, all steps at once;
    /// returns how many remain.
    pub fn drain(&mut self, budget: usize) -> Result<usize> {
        let mut budget = budget;
        while let Some(d) = self.next_drain(budget) {
            self.reserve(&d.ns, d.len())?;
            self.insert_drained(&d)?;
            self.drained(&d);
            budget -= d.len();
        }
        Ok(self.overlay_len())
    }

    /// Vectors waiting in overlays.
    #[must_use]
    pub fn overlay_len(&self) -> usize {
        self.parts
            .values()
            .map(|p| match p {
                Partition::Graph(g) => g.overlay.adds.len(),
                Partition::Flat(_) => 0,
            })
            .sum()
    }
}

/// Overlay vectors on their way into their graph (see [`VectorIndex::next_drain`]).
pub struct Drain {
    ns: String,
    items: Vec<(u64, Vec<f32>)>,
}

impl Drain {
    /// How many vectors (never none: [`VectorIndex::next_drain`] returns None instead).
    #[must_use]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Always false (see [`Drain::len`]).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The namespace whose graph takes them.
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.ns
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::cast_precision_loss,
        clippy::unwrap_used,
        reason = "tests: small integers made into floats"
    )]

    use super::*;
    use crate::types::Metric;

    const DIMS: usize = 4;

    fn v(i: u64) -> Vec<f32> {
        let x = i as f32;
        vec![x, (x * 0.37).sin(), (x * 0.11).cos(), x.sqrt()]
    }

    fn index(n: u64) -> VectorIndex {
        let tuning = Tuning {
            graph_min: 64,
            ..Tuning::default()
        };
        let mut vi = VectorIndex::new(DIMS, Metric::L2, tuning);
        vi.add("n", (0..n).map(|i| (i, v(i))).collect()).unwrap();
        vi
    }

    fn all(vi: &VectorIndex, q: u64, k: usize) -> Vec<u64> {
        // every key a test stores (up to 1,400): an exact fallback scans these, as it scans
        // the namespace's rows in the store
        let keys: Vec<u64> = (0..2000).filter(|key| vi.contains("n", *key)).collect();
        let all_keys = move || keys.clone();
        vi.search(
            "n",
            &v(q),
            k,
            &Plan::All {
                all_keys: &all_keys,
            },
        )
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect()
    }

    #[test]
    fn a_small_namespace_is_flat_and_a_large_one_a_graph() {
        assert_eq!(index(10).partition_counts(), (0, 1));
        assert_eq!(index(100).partition_counts(), (1, 0));
    }

    #[test]
    fn changes_to_a_frozen_graph_wait_in_its_overlay_and_are_searched_there() {
        let mut vi = index(200);
        let snapshot = vi.freeze().unwrap();
        vi.add("n", vec![(500, v(500))]).unwrap();
        vi.remove("n", 7).unwrap();
        // the graph itself is untouched: what the snapshot saves is the frozen state
        match vi.parts.get("n") {
            Some(Partition::Graph(g)) => {
                assert!(g.graph.contains(7) && !g.graph.contains(500));
                assert_eq!(g.overlay.adds.len(), 1);
            }
            _ => panic!("not a graph"),
        }
        assert_eq!(vi.len("n"), 200);
        assert!(vi.contains("n", 500) && !vi.contains("n", 7));
        assert_eq!(all(&vi, 500, 1), [500]);
        assert!(!all(&vi, 7, 200).contains(&7));
        assert_eq!(all(&vi, 3, 200).len(), 200);
        drop(snapshot);
        vi.thaw().unwrap();
        assert_eq!(vi.drain(1000).unwrap(), 0);
        match vi.parts.get("n") {
            Some(Partition::Graph(g)) => {
                assert!(!g.graph.contains(7) && g.graph.contains(500));
                assert!(g.overlay.adds.is_empty() && g.overlay.graves.is_empty());
            }
            _ => panic!("not a graph"),
        }
        assert_eq!(all(&vi, 500, 1), [500]);
        assert_eq!(all(&vi, 3, 500).len(), 200);
    }

    /// A frozen overlay is full at `OVERLAY_MAX` added vectors (writes then wait for the thaw),
    /// and not once thawed.
    #[test]
    fn a_frozen_overlay_is_full_at_its_bound_until_the_thaw() {
        let mut vi = index(200);
        let snapshot = vi.freeze().unwrap();
        let first = 1000;
        let bound = first + part::OVERLAY_MAX as u64;
        vi.add("n", (first..bound - 1).map(|k| (k, v(k))).collect())
            .unwrap();
        assert!(!vi.overlay_full());
        vi.add("n", vec![(bound - 1, v(bound - 1))]).unwrap();
        assert!(vi.overlay_full());
        drop(snapshot);
        vi.thaw().unwrap();
        assert!(!vi.overlay_full());
        assert_eq!(vi.overlay_len(), part::OVERLAY_MAX);
    }

    fn compact_len(vi: &VectorIndex) -> usize {
        match vi.parts.get("n") {
            Some(Partition::Graph(g)) => g.compact.len(),
            _ => panic!("not a graph"),
        }
    }

    #[test]
    fn the_compact_copy_holds_every_live_vector_through_a_freeze() {
        let mut vi = index(200);
        assert_eq!(compact_len(&vi), 200);
        let _snapshot = vi.freeze().unwrap();
        vi.add("n", (1000..1050).map(|i| (i, v(i))).collect())
            .unwrap();
        vi.remove("n", 7).unwrap();
        vi.remove("n", 1003).unwrap();
        assert_eq!((compact_len(&vi), vi.len("n")), (248, 248));
        vi.thaw().unwrap();
        vi.drain(16).unwrap();
        assert_eq!(compact_len(&vi), 248);
        assert_eq!(vi.drain(1000).unwrap(), 0);
        vi.rebuild(
            "n",
            &(0..1100)
                .filter(|k| vi.contains("n", *k))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!((compact_len(&vi), vi.len("n")), (248, 248));
    }

    #[test]
    fn searches_run_beside_a_drain_and_see_every_vector_once() {
        use parking_lot::{RwLock, RwLockUpgradableReadGuard};
        let mut vi = index(300);
        let _snapshot = vi.freeze().unwrap();
        vi.add("n", (1000..1400).map(|i| (i, v(i))).collect())
            .unwrap();
        vi.thaw().unwrap();
        let vi = RwLock::new(vi);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                loop {
                    let st = vi.upgradable_read();
                    let Some(step) = st.next_drain(8) else { break };
                    if !st.drain_has_room(&step) {
                        RwLockUpgradableReadGuard::upgrade(st)
                            .reserve("n", step.len())
                            .unwrap();
                        continue;
                    }
                    st.insert_drained(&step).unwrap();
                    RwLockUpgradableReadGuard::upgrade(st).drained(&step);
                }
                done.store(true, Ordering::Relaxed);
            });
            let mut searches = 0;
            while !done.load(Ordering::Relaxed) || searches < 20 {
                let q = 1000 + searches % 400;
                let st = vi.read();
                let found = all(&st, q, 20);
                assert_eq!(found[0], q, "a vector is its own nearest");
                let mut unique = found.clone();
                unique.sort_unstable();
                unique.dedup();
                assert_eq!(unique.len(), found.len(), "a key returned twice");
                searches += 1;
            }
        });
        let vi = vi.into_inner();
        assert_eq!(vi.overlay_len(), 0);
        assert_eq!(vi.len("n"), 700);
        assert_eq!(all(&vi, 1399, 1), [1399]);
    }

    #[test]
    fn a_write_into_a_thawed_graph_takes_as_many_pending_vectors_along() {
        let mut vi = index(100);
        let _snapshot = vi.freeze().unwrap();
        vi.add("n", (1000..1100).map(|i| (i, v(i))).collect())
            .unwrap();
        vi.thaw().unwrap();
        vi.add("n", (2000..2030).map(|i| (i, v(i))).collect())
            .unwrap();
        assert_eq!(vi.overlay_len(), 70);
        assert_eq!(vi.len("n"), 230);
        assert_eq!(all(&vi, 2029, 1), [2029]);
        assert_eq!(all(&vi, 1099, 1), [1099]);
    }

    #[test]
    fn a_drain_moves_a_bounded_number_of_vectors_per_step() {
        let mut vi = index(100);
        let _snapshot = vi.freeze().unwrap();
        vi.add("n", (1000..1100).map(|i| (i, v(i))).collect())
            .unwrap();
        vi.thaw().unwrap();
        assert_eq!(vi.drain(32).unwrap(), 68);
        assert_eq!(vi.drain(32).unwrap(), 36);
        assert_eq!(vi.len("n"), 200);
        assert_eq!(vi.drain(1000).unwrap(), 0);
        assert_eq!(all(&vi, 1050, 1), [1050]);
    }

    #[test]
    fn a_snapshot_refuses_undrained_changes() {
        let mut vi = index(100);
        let _snapshot = vi.freeze().unwrap();
        vi.add("n", vec![(1000, v(1000))]).unwrap();
        assert!(vi.snapshot().is_err());
    }

    #[test]
    fn removing_every_vector_of_a_frozen_graph_keeps_it_until_the_thaw() {
        let mut vi = index(100);
        let _snapshot = vi.freeze().unwrap();
        for i in 0..100 {
            vi.remove("n", i).unwrap();
        }
        assert_eq!(vi.len("n"), 0);
        assert_eq!(vi.partition_counts(), (1, 0));
        vi.thaw().unwrap();
        assert_eq!(vi.partition_counts(), (0, 0));
    }

    #[test]
    fn an_unfiltered_search_that_comes_up_short_scans_exactly() {
        let vi = index(300);
        // asking for every vector: the graph search may miss some; the answer may not
        assert_eq!(all(&vi, 0, 300).len(), 300);
    }
}
