//! usearch graphs behind thread slots: [`Graph`] is the only way into a usearch index, and
//! every method that calls usearch demands a [`Permit`] (see the module docs of `vector`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};
use rayon::prelude::*;
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use super::{usearch_err, CONNECTIVITY, EXPANSION_ADD, GRAVE};
use crate::error::Result;
use crate::pool::pool;
use crate::types::Metric;

/// Vectors a worker inserts per task (see [`Graph::add_spread`]).
const CHUNK: usize = 4;

/// The scalar a graph stores its vectors in: bfloat16, f32's range at half its bytes. A graph
/// only navigates (every result is rescored from the partition's exact f32 vectors, see
/// `part`), and a search's cost is reading the vectors of the nodes it visits: on 99k 384-d
/// MiniLM rows (raw usearch, M = 16, one thread) a bf16 graph searched in 0.65x the time of an
/// f32 one at the same recall@10 (0.952 vs 0.954 at breadth 48, 0.967 vs 0.969 at 64) and
/// built in 0.56x. A graph loaded from an older checkpoint keeps the f32 it was saved in.
pub(super) const SCALAR: ScalarKind = ScalarKind::BF16;

/// A vector as a graph of [`SCALAR`] stores it: bfloat16 rounded to nearest even, as usearch
/// casts the f32 vectors it is given, little-endian.
pub(super) fn graph_bytes(v: impl IntoIterator<Item = f32>, out: &mut Vec<u8>) {
    out.extend(
        v.into_iter()
            .flat_map(|x| half::bf16::from_f32(x).to_bits().to_le_bytes()),
    );
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
pub(super) struct Slots {
    free: Mutex<usize>,
    cv: Condvar,
}

/// Proof that the holder may make one call into usearch at a time.
pub(super) struct Permit<'a>(&'a Slots);

impl Slots {
    pub(super) fn new(n: usize) -> Self {
        Self {
            free: Mutex::new(n),
            cv: Condvar::new(),
        }
    }
    /// Waits for a free slot.
    pub(super) fn acquire(&self) -> Permit<'_> {
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

/// A graph search's keys with usearch's distances to the query (smaller is nearer), nearest
/// first.
pub(super) type Hits = Vec<(u64, f32)>;

fn hits(m: usearch::ffi::Matches) -> Hits {
    m.keys.into_iter().zip(m.distances).collect()
}

/// usearch's options for a graph of `dims` and `metric` storing `scalar`.
fn options(dims: usize, metric: Metric, scalar: ScalarKind) -> IndexOptions {
    IndexOptions {
        dimensions: dims,
        metric: match metric {
            Metric::L2 => MetricKind::L2sq,
            Metric::Cos => MetricKind::Cos,
            Metric::Ip => MetricKind::IP,
        },
        quantization: scalar,
        connectivity: CONNECTIVITY,
        expansion_add: EXPANSION_ADD,
        expansion_search: 1,
        multi: false,
    }
}

/// The distance kernel usearch chose at run time for a graph of `metric` over [`SCALAR`],
/// as usearch names it: the best this CPU runs among those compiled in (e.g. "haswell" for
/// AVX2, "skylake" or later names for AVX-512, "neon" on ARM, "serial" without any).
pub(super) fn kernel(metric: Metric) -> Result<String> {
    let index = Index::new(&options(8, metric, SCALAR)).map_err(|e| usearch_err("create", e))?;
    Ok(index.hardware_acceleration())
}

/// Graph partition: a usearch index reachable only through methods that demand a [`Permit`].
pub(super) struct Graph {
    index: Index,
    /// The metric it was created with.
    pub(super) metric: Metric,
    /// Graves: removed vectors kept as routing nodes under `GRAVE | key`.
    removed: AtomicUsize,
    /// usearch's `memory_usage` (a walk of every node) with the (size, capacity) it was
    /// taken at: `stats()` asks for it on every call.
    usage: Mutex<(usize, usize, usize)>,
}

impl Graph {
    /// An empty graph storing its vectors as `scalar` ([`SCALAR`]; f32 in tests of old
    /// checkpoints).
    pub(super) fn create(
        dims: usize,
        metric: Metric,
        scalar: ScalarKind,
        capacity: usize,
        p: &Permit<'_>,
    ) -> Result<Self> {
        let index =
            Index::new(&options(dims, metric, scalar)).map_err(|e| usearch_err("create", e))?;
        let g = Self {
            index,
            metric,
            removed: AtomicUsize::new(0),
            usage: Mutex::new((usize::MAX, 0, 0)),
        };
        g.reserve(capacity.max(64), p)?;
        Ok(g)
    }

    pub(super) fn live(&self) -> usize {
        self.index.size() - self.removed()
    }

    pub(super) fn contains(&self, key: u64) -> bool {
        self.index.contains(key)
    }

    pub(super) fn reserve(&self, capacity: usize, _: &Permit<'_>) -> Result<()> {
        self.index
            .reserve_capacity_and_threads(capacity, thread_slots())
            .map_err(|e| usearch_err("reserve", e))
    }

    /// Whether `more` inserts fit without a reallocation.
    pub(super) fn has_room(&self, more: usize) -> bool {
        self.index.size() + more <= self.index.capacity()
    }

    /// Room for `more` inserts without a reallocation during them.
    pub(super) fn reserve_more(&self, more: usize, p: &Permit<'_>) -> Result<()> {
        if !self.has_room(more) {
            let need = self.index.size() + more;
            self.reserve(need.max(self.index.capacity() * 2), p)?;
        }
        Ok(())
    }

    pub(super) fn add(&self, key: u64, v: &[f32], _: &Permit<'_>) -> Result<()> {
        if self.index.contains(key) {
            return Ok(());
        }
        self.index.add(key, v).map_err(|e| usearch_err("add", e))
    }

    /// The `count` nearest live keys to `q` with usearch's distances, nearest first.
    pub(super) fn search(&self, q: &[f32], count: usize, _: &Permit<'_>) -> Result<Hits> {
        let m = if self.removed() == 0 {
            self.index.search(q, count)
        } else {
            self.index.filtered_search(q, count, |key: u64| key < GRAVE)
        };
        Ok(hits(m.map_err(|e| usearch_err("search", e))?))
    }

    /// The `count` nearest keys passing `pred`, as [`Graph::search`].
    pub(super) fn filtered_search(
        &self,
        q: &[f32],
        count: usize,
        pred: impl Fn(u64) -> bool,
        _: &Permit<'_>,
    ) -> Result<Hits> {
        self.index
            .filtered_search(q, count, pred)
            .map(hits)
            .map_err(|e| usearch_err("filtered search", e))
    }

    /// Copies the vector of `key` into `buf` as the graph holds it (rounded, in a bf16 graph;
    /// exact vectors live in the partition, see `part`); false when absent.
    pub(super) fn get(&self, key: u64, buf: &mut [f32], _: &Permit<'_>) -> bool {
        matches!(self.index.get(key, buf), Ok(n) if n > 0)
    }

    /// Turns `key` into a grave (see the module docs).
    pub(super) fn bury(&self, key: u64, _: &Permit<'_>) -> Result<()> {
        if self.index.contains(key) {
            self.index
                .rename(key, GRAVE | key)
                .map_err(|e| usearch_err("remove", e))?;
            self.removed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    pub(super) fn save(&self, path: &str, _: &Permit<'_>) -> Result<()> {
        self.index.save(path).map_err(|e| usearch_err("save", e))
    }

    /// Loads a file usearch saved (checkpoint format 1).
    pub(super) fn load(&mut self, path: &str, removed: usize, p: &Permit<'_>) -> Result<()> {
        self.index.load(path).map_err(|e| usearch_err("load", e))?;
        self.loaded(removed, p)
    }

    /// Loads an index in usearch's file layout from memory.
    #[cfg(any(test, not(unix)))]
    pub(super) fn load_buffer(&mut self, buf: &[u8], removed: usize, p: &Permit<'_>) -> Result<()> {
        self.index
            .load_from_buffer(buf)
            .map_err(|e| usearch_err("load", e))?;
        self.loaded(removed, p)
    }

    fn loaded(&mut self, removed: usize, p: &Permit<'_>) -> Result<()> {
        self.removed.store(removed, Ordering::Relaxed);
        self.reserve(self.index.size().max(64), p)
    }

    /// Adds items on the worker pool (from `PARALLEL_MIN` items; fewer in this thread).
    pub(super) fn add_all(&self, items: &[(u64, Vec<f32>)], slots: &Slots) -> Result<()> {
        const PARALLEL_MIN: usize = 256;
        if items.len() > 10_000 {
            log::info!("adding {} vectors to a graph", items.len());
        }
        if items.len() >= PARALLEL_MIN {
            self.add_spread(items, slots)
        } else {
            self.add_chunk(items, slots)
        }
    }

    /// Adds items on the worker pool, however few: [`CHUNK`] per task, one permit each.
    ///
    /// Chunks are small: an insert into a 100k-vector 384-d graph costs ~1 ms of one core, and
    /// the last worker busy with a chunk keeps the call waiting while the others idle (with
    /// 64-item chunks, up to 64 ms of a ~500 ms 1000-row batch on 2 cores). A permit and a
    /// rayon task per 4 inserts cost microseconds.
    pub(super) fn add_spread(&self, items: &[(u64, Vec<f32>)], slots: &Slots) -> Result<()> {
        pool()?.install(|| {
            items
                .par_chunks(CHUNK)
                .try_for_each(|chunk| self.add_chunk(chunk, slots))
        })
    }

    fn add_chunk(&self, items: &[(u64, Vec<f32>)], slots: &Slots) -> Result<()> {
        let p = slots.acquire();
        items.iter().try_for_each(|(k, v)| self.add(*k, v, &p))
    }
}

impl Graph {
    /// Graves in the graph.
    pub(super) fn removed(&self) -> usize {
        self.removed.load(Ordering::Relaxed)
    }

    pub(super) fn size(&self) -> usize {
        self.index.size()
    }

    pub(super) fn memory_usage(&self) -> usize {
        let (size, capacity) = (self.index.size(), self.index.capacity());
        let mut usage = self.usage.lock();
        if (usage.0, usage.1) != (size, capacity) {
            *usage = (size, capacity, self.index.memory_usage());
        }
        usage.2
    }
}
