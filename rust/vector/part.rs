//! A namespace's partition: a flat array, or a graph with its exact vectors, overlay,
//! exact-match index and compact copy ([`Compact`], see `compact`).
//!
//! A graph stores its vectors in bfloat16 (see [`super::graph::SCALAR`]): it only navigates.
//! The partition keeps every live vector in f32 beside it ([`GraphPart::vectors`]), which
//! rescoring and exact scans read, so a score or an exact plan never sees a rounded vector.
//!
//! HNSW leaves a few nodes that no search reaches (measured on 96k real MiniLM vectors:
//! ~0.08%, most of them orphaned *after* their insert, as later inserts pruned the edges to
//! them; re-inserting fixes ~70%). So that every stored vector is still found by a query
//! equal to it, each graph partition also indexes its live vectors by a hash of their bits
//! ([`ExactIndex`]): a search adds the stored vectors equal to the query to its candidates.
//!
//! While a checkpoint saves a graph (outside the engine's state lock, so writers never wait
//! for it), nothing may change the graph: the partition is *frozen*, and its changes go to the
//! [`Overlay`] instead — added vectors into a flat array searched exactly beside the graph,
//! removed ones into a set of pending graves hidden from results. When the save is done the
//! partition thaws: the graves are buried and the added vectors drain into the graph in small
//! steps, searchable in the overlay until they are in. A frozen overlay holds at most
//! [`OVERLAY_MAX`] added vectors before writes wait for the thaw (see
//! [`super::VectorIndex::overlay_full`]).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use super::compact::Compact;
use super::exact::{Flat, Nearest};
use super::graph::{Graph, Permit, Slots};
use super::GRAVE;
use crate::columns::IdMap;
use crate::error::Result;
use crate::types::Metric;

/// The live vectors of a graph by a hash of their bits (see the module docs).
#[derive(Default)]
pub(super) struct ExactIndex {
    by_hash: BTreeSet<(u64, u64)>,
    hash_of: IdMap<u64>,
}

/// Hash of a vector's bits, with -0.0 read as 0.0 (they are equal): four independent
/// multiply-rotate lanes, folded (SipHash over 1.5 KB was ~6% of an open, which hashes every
/// vector; a collision only adds a candidate to a search, rescored exactly like the rest).
fn bits_hash(v: &[f32]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [1u64, 2, 3, 4];
    for (i, x) in v.iter().enumerate() {
        let lane = &mut lanes[i % 4];
        *lane = (*lane ^ u64::from((x + 0.0).to_bits()))
            .wrapping_mul(K)
            .rotate_left(31);
    }
    let mut h = v.len() as u64;
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(K).rotate_left(27);
    }
    h ^ (h >> 29)
}

impl ExactIndex {
    /// The index of `(hash, key)` pairs, each key once, built in one pass.
    fn from_hashes(pairs: Vec<(u64, u64)>) -> Self {
        let mut hash_of = IdMap::default();
        hash_of.reserve(pairs.len());
        hash_of.extend(pairs.iter().map(|(h, k)| (*k, *h)));
        Self {
            // sorted once, then built bottom-up (an insert each walks the tree)
            by_hash: pairs.into_iter().collect(),
            hash_of,
        }
    }

    pub(super) fn insert(&mut self, key: u64, v: &[f32]) {
        let h = bits_hash(v);
        self.by_hash.insert((h, key));
        self.hash_of.insert(key, h);
    }

    fn remove(&mut self, key: u64) {
        if let Some(h) = self.hash_of.remove(&key) {
            self.by_hash.remove(&(h, key));
        }
    }

    /// Keys whose vector hashes like `q` (equal vectors, and rarely a collision).
    fn candidates(&self, q: &[f32]) -> impl Iterator<Item = u64> + '_ {
        let h = bits_hash(q);
        self.by_hash.range((h, 0)..=(h, u64::MAX)).map(|(_, k)| *k)
    }

    pub(super) fn memory_usage(&self) -> usize {
        self.hash_of.len() * 48
    }

    /// Whether both index the same vectors (by the same hashes).
    #[cfg(test)]
    pub(super) fn same_as(&self, other: &Self) -> bool {
        self.by_hash == other.by_hash && self.hash_of == other.hash_of
    }
}

/// Added vectors a frozen graph's overlay holds before writes wait for its thaw. Every search
/// scans the overlay exactly, and a write to a frozen graph costs no insert, so without a
/// bound a bulk load fills it as fast as rows arrive: at 1M rows (384-d) a 3-4 s save let
/// ~50-60k vectors in, which writers then took into the graph for minutes while every search
/// scanned them (p50 14-20 ms instead of ~2 ms with ~20k left at the end of the load).
pub(super) const OVERLAY_MAX: usize = 4096;

/// Changes a graph takes while it is frozen (see the module docs).
pub(super) struct Overlay {
    pub(super) adds: Flat,
    pub(super) graves: HashSet<u64>,
}

/// A graph partition.
pub(super) struct GraphPart {
    pub(super) graph: Arc<Graph>,
    /// The exact vector of every live key (graph and overlay; see the module docs).
    pub(super) vectors: Flat,
    pub(super) overlay: Overlay,
    pub(super) exact: ExactIndex,
    /// The int8 copy of every live vector (graph and overlay), kept in step with both.
    pub(super) compact: Compact,
    /// A checkpoint is saving `graph`: no change may reach it.
    pub(super) frozen: bool,
}

#[allow(
    clippy::large_enum_variant,
    reason = "one per namespace; a box would add an indirection to every search"
)]
pub(super) enum Partition {
    Flat(Flat),
    Graph(GraphPart),
}

impl Partition {
    /// The exact vector of a live `key`.
    pub(super) fn get(&self, key: u64) -> Option<&[f32]> {
        match self {
            Self::Flat(f) => f.get(key),
            Self::Graph(g) => g.get(key),
        }
    }
}

/// The derived parts of a graph being loaded (exact matches, compact copy), built from its
/// vectors as they arrive, in slot order, each once: in bulk, each code row written into its
/// key-ordered place, the hashes sorted once at the end.
pub(super) struct Loading {
    /// Per slot, the row of its key in the compact copy (`u32::MAX` for a grave).
    row: Vec<u32>,
    compact: Compact,
    /// (hash, key) of every vector indexed.
    hashes: Vec<(u64, u64)>,
    vectors: Flat,
    /// The vector being indexed, as f32.
    buf: Vec<f32>,
}

impl Loading {
    /// For a graph whose slots hold `keys` (graves included).
    pub(super) fn new(dims: usize, metric: Metric, keys: &[u64]) -> Self {
        let mut live: Vec<(u64, u32)> = (0..)
            .zip(keys)
            .filter(|(_, k)| **k < GRAVE)
            .map(|(slot, k)| (*k, slot))
            .collect();
        live.sort_unstable();
        let mut row = vec![u32::MAX; keys.len()];
        for (i, (_, slot)) in (0..).zip(&live) {
            row[*slot as usize] = i;
        }
        Self {
            row,
            compact: Compact::with_keys(dims, metric, live.into_iter().map(|(k, _)| k).collect()),
            hashes: Vec::with_capacity(keys.len()),
            vectors: Flat::with_capacity(dims, keys.len()),
            buf: vec![0.0; dims],
        }
    }

    /// Indexes `v`, the vector of the live key in `slot`.
    pub(super) fn add(&mut self, slot: usize, key: u64, v: &[f32]) {
        self.hashes.push((bits_hash(v), key));
        self.compact.fill(self.row[slot] as usize, v);
        self.vectors.insert(key, v);
    }

    /// [`Loading::add`] of a vector as stored (little-endian f32).
    pub(super) fn add_stored(&mut self, slot: usize, key: u64, bytes: &[u8]) {
        let mut v = std::mem::take(&mut self.buf);
        for (x, b) in v.iter_mut().zip(bytes.chunks_exact(4)) {
            *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        self.add(slot, key, &v);
        self.buf = v;
    }

    /// The graph's partition, with what was indexed (keys never given are left out).
    pub(super) fn finish(mut self, graph: Graph) -> GraphPart {
        self.compact.settle();
        let mut part = GraphPart::new(graph, self.buf.len());
        part.exact = ExactIndex::from_hashes(self.hashes);
        part.compact = self.compact;
        part.vectors = self.vectors;
        part
    }
}

impl GraphPart {
    pub(super) fn new(graph: Graph, dims: usize) -> Self {
        let compact = Compact::new(dims, graph.metric);
        Self {
            graph: Arc::new(graph),
            vectors: Flat::new(dims),
            overlay: Overlay {
                adds: Flat::new(dims),
                graves: HashSet::new(),
            },
            exact: ExactIndex::default(),
            compact,
            frozen: false,
        }
    }

    /// Live vectors: the graph's, less pending graves, plus the overlay's.
    pub(super) fn live(&self) -> usize {
        self.graph.live() - self.overlay.graves.len() + self.overlay.adds.len()
    }

    /// Whether `key` is live in the graph or the overlay. (Not `vectors`: on open, until the
    /// replay buries them, the graph also holds keys whose rows were deleted or re-embedded
    /// after the checkpoint, which have no exact vector; see `layout`.)
    pub(super) fn contains(&self, key: u64) -> bool {
        self.overlay.adds.contains(key)
            || (self.graph.contains(key) && !self.overlay.graves.contains(&key))
    }

    /// Whether a key the graph returned is a live hit (not a grave, buried or pending).
    pub(super) fn is_hit(&self, key: u64) -> bool {
        key < GRAVE && !self.overlay.graves.contains(&key)
    }

    /// The exact vector of a live `key`.
    pub(super) fn get(&self, key: u64) -> Option<&[f32]> {
        self.vectors.get(key)
    }

    /// Indexes a vector the graph or the overlay holds (exact vectors, exact matches, compact
    /// copy).
    pub(super) fn index(&mut self, key: u64, v: &[f32]) {
        self.vectors.insert(key, v);
        self.exact.insert(key, v);
        self.compact.insert(key, v);
    }

    pub(super) fn remove(&mut self, key: u64, p: &Permit<'_>) -> Result<()> {
        self.vectors.remove(key);
        self.exact.remove(key);
        self.compact.remove(key);
        if self.overlay.adds.remove(key) {
            Ok(())
        } else if self.frozen {
            if self.graph.contains(key) {
                self.overlay.graves.insert(key);
            }
            Ok(())
        } else {
            self.graph.bury(key, p)
        }
    }

    /// Room for `more` added vectors and the pending ones [`GraphPart::add`] takes along.
    pub(super) fn reserve(&self, more: usize, p: &Permit<'_>) -> Result<()> {
        if self.frozen {
            return Ok(());
        }
        self.graph.reserve_more(more + self.taken_along(more), p)
    }

    /// How many pending overlay vectors a write adding `added` takes into the graph with it.
    fn taken_along(&self, added: usize) -> usize {
        self.overlay.adds.len().min(added)
    }

    pub(super) fn add(&mut self, items: &[(u64, Vec<f32>)], slots: &Slots) -> Result<()> {
        // in key order: the compact copy appends a key larger than all it holds
        let mut order: Vec<&(u64, Vec<f32>)> = items.iter().collect();
        order.sort_unstable_by_key(|(k, _)| *k);
        for (k, v) in order {
            self.index(*k, v);
        }
        if self.frozen {
            for (k, v) in items {
                self.overlay.adds.insert(*k, v);
            }
            return Ok(());
        }
        // as many vectors from the overlay go along (a bulk load drains it at its own pace,
        // a single write takes one more insert)
        let pending = self.next_drain(self.taken_along(items.len()));
        self.graph
            .reserve_more(items.len() + pending.len(), &slots.acquire())?;
        self.graph.add_all(items, slots)?;
        self.graph.add_all(&pending, slots)?;
        self.drained(&pending);
        Ok(())
    }

    /// The graph's candidates completed: graves dropped, the stored vectors equal to the
    /// query and the overlay's best passing `pass` added; each key once (an equal vector the
    /// graph found too, or one a drain has put in the graph but not yet out of the overlay,
    /// would otherwise count twice towards the `k` a caller checks for).
    pub(super) fn complete(
        &self,
        mut cands: Vec<u64>,
        nearest: Nearest<'_>,
        pass: impl Fn(u64) -> bool,
    ) -> Vec<u64> {
        if !self.overlay.graves.is_empty() {
            cands.retain(|k| !self.overlay.graves.contains(k));
        }
        cands.extend(self.exact.candidates(nearest.query()).filter(|k| pass(*k)));
        if !self.overlay.adds.is_empty() {
            let mut nearest = nearest;
            self.overlay.adds.scan(&mut nearest, pass);
            cands.extend(nearest.into_keys());
        }
        cands.sort_unstable();
        cands.dedup();
        cands
    }

    /// Ends a freeze: buries the pending graves. The overlay's vectors drain later.
    pub(super) fn thaw(&mut self, p: &Permit<'_>) -> Result<()> {
        self.frozen = false;
        for key in std::mem::take(&mut self.overlay.graves) {
            self.graph.bury(key, p)?;
        }
        Ok(())
    }

    /// Up to `budget` overlay vectors to move into the graph (see [`VectorIndex::drain`]).
    pub(super) fn next_drain(&self, budget: usize) -> Vec<(u64, Vec<f32>)> {
        if self.frozen {
            return Vec::new();
        }
        let keys = self.overlay.adds.keys();
        keys.iter()
            .take(budget)
            .filter_map(|k| self.overlay.adds.get(*k).map(|v| (*k, v.to_vec())))
            .collect()
    }

    /// Whether the graph takes `more` inserts without reserving (a reallocation).
    pub(super) fn has_room(&self, more: usize) -> bool {
        self.graph.has_room(more)
    }

    /// Inserts overlay vectors into the graph, which still holds them in the overlay too:
    /// searches may run meanwhile (a key found twice is scored once). Needs room for them.
    pub(super) fn insert_drained(&self, items: &[(u64, Vec<f32>)], slots: &Slots) -> Result<()> {
        self.graph.add_spread(items, slots)
    }

    /// Drops from the overlay the vectors [`GraphPart::insert_drained`] put in the graph.
    pub(super) fn drained(&mut self, items: &[(u64, Vec<f32>)]) {
        for (k, _) in items {
            self.overlay.adds.remove(*k);
        }
    }
}
