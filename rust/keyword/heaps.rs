//! The top-k of each namespace searched together, and the pruning threshold they allow.
//!
//! - Best first, equal scores ranked by row id, wherever the documents are (delta or
//!   segments): a heap evicts the larger row id of a tie.
//! - The threshold handed to tantivy's block-max WAND is just below the lowest k-th score of
//!   the heaps, so a document tied with a heap's worst hit still reaches it.

use std::collections::BinaryHeap;

/// A heap entry (score, rid, document version) ordered so that `BinaryHeap` is a min-heap on
/// score (ties: the larger rid is evicted first; the version is carried along, not compared).
#[derive(Clone, Copy)]
pub(super) struct Hit(pub(super) f32, pub(super) u64, pub(super) u64);
impl PartialEq for Hit {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for Hit {}
impl PartialOrd for Hit {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Hit {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
    }
}

/// One top-k heap per namespace searched together, and the pruning threshold they allow:
/// tantivy offers only documents scoring above it, so it is the lowest k-th score of the
/// heaps (just below, so that a tie with it still reaches the heap, which keeps the lower
/// rid), or no threshold while any heap has room.
#[derive(Clone)]
pub(super) struct Heaps {
    /// One heap per namespace, in the order searched.
    pub(super) each: Vec<BinaryHeap<Hit>>,
    k: usize,
    threshold: f32,
}

impl Heaps {
    /// `n` empty heaps of `k` hits each.
    pub(super) fn new(n: usize, k: usize) -> Self {
        Self {
            each: (0..n).map(|_| BinaryHeap::with_capacity(k + 1)).collect(),
            k,
            threshold: f32::MIN,
        }
    }

    /// The score a document must beat to enter some heap.
    pub(super) fn threshold(&self) -> f32 {
        self.threshold
    }

    /// Whether a document scoring `score` with row id `rid` would enter some heap: asked
    /// before the row's filter, because at the threshold tantivy offers every document tied
    /// with a heap's worst hit (short texts tie often), and only the lower rids enter.
    pub(super) fn admits(&self, score: f32, rid: u64) -> bool {
        let hit = Hit(score, rid, 0);
        self.each
            .iter()
            .any(|h| h.len() < self.k || h.peek().is_some_and(|worst| hit < *worst))
    }

    /// Offers `hit` to heap `group`, evicting its worst hit when full.
    pub(super) fn push(&mut self, group: usize, hit: Hit) {
        let heap = &mut self.each[group];
        heap.push(hit);
        if heap.len() > self.k {
            heap.pop();
        }
        if heap.len() >= self.k {
            self.threshold = self
                .each
                .iter()
                .map(|h| match h.peek() {
                    Some(top) if h.len() >= self.k => top.0.next_down(),
                    _ => f32::MIN,
                })
                .fold(f32::INFINITY, f32::min);
        }
    }

    /// Each heap's hits, best first, ties by row id.
    pub(super) fn into_hits(self) -> Vec<Vec<(u64, f64)>> {
        self.each
            .into_iter()
            .map(|heap| {
                let mut hits: Vec<(u64, f64)> =
                    heap.into_iter().map(|h| (h.1, f64::from(h.0))).collect();
                hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                hits
            })
            .collect()
    }
}
