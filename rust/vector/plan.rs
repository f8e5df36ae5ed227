//! Search planning inside a partition: which route a search takes for its [`Plan`], and the
//! exact rescoring every route ends with.

use std::sync::atomic::Ordering;

use super::exact::{prefetch, Nearest, Scorer};
use super::graph::Hits;
use super::part::{GraphPart, Partition};
use super::{VectorIndex, DEFAULT_BREADTH};
use crate::error::Result;

/// An over-fetching search asks for this many times the candidates expected to hold `k`
/// passing hits; when fewer pass (~4% of searches at 1.75), a filtered traversal follows.
/// Measured on 99k rows with a 10% filter (k = 10), QPS vs unfiltered and recall@10 on one
/// graph: 1.3 -> recall 0.949; 1.5 -> 0.49x, 0.958 (0.950 on another build of the graph);
/// 1.75 -> 0.46x, 0.966 (the unfiltered recall at the default breadth); 2.0 -> 0.40x, 0.970.
const OVERFETCH: f64 = 1.75;
/// Candidates an exact scan keeps beyond `k` for the f64 rescoring (its f32 distances may
/// order near-ties differently).
const RESCORE_MARGIN: usize = 8;
/// How far beyond the k-th candidate's distance a graph search's candidate is still rescored,
/// relative to that distance (at least 1): its exact twins and f32 near-ties. A graph's
/// distances come from its bf16 vectors (see `graph::SCALAR`), which may misorder candidates
/// closer than ~2^-7 (cosine); rescoring all of those too was measured (99k MiniLM rows, k =
/// 10): recall@10 0.9655 instead of 0.9653 at breadth 64, 0.9524 instead of 0.9522 at 48, for
/// ~25 us a query more (~6%).
const TIE: f32 = 1e-4;
/// A compact scan keeps this many times `k` (plus the margin) by its int8 distance for the
/// exact rescoring: int8 codes misorder close candidates more than the f32 kernels do.
const COMPACT_KEEP: usize = 4;

/// Every passing key, listed only when a search needs an exact scan of them.
pub type AllKeys<'a> = &'a (dyn Fn() -> Vec<u64> + Sync);

/// How a search selects its candidates (decided by the engine from the filter).
pub enum Plan<'a> {
    /// Every vector of the namespace passes.
    All {
        /// Every key (for the exact fallback).
        all_keys: AllKeys<'a>,
    },
    /// Exactly these keys pass.
    Keys(Vec<u64>),
    /// A key passes when the predicate says so.
    Predicate {
        /// The predicate over vector keys.
        pred: &'a (dyn Fn(u64) -> bool + Sync),
        /// Every passing key (for the exact fallback).
        all_keys: AllKeys<'a>,
        /// Estimated share of the namespace's vectors that pass (0..=1): with the partition's
        /// size, it picks the compact scan, the over-fetch or the traversal.
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
    /// A scan of the compact copy over the rows a filter passes (see `compact`).
    CompactScan,
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
        Route::CompactScan,
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
            Route::CompactScan => "compact_scan",
            Route::Traversal => "traversal",
            Route::Fallback => "fallback",
        }
    }
}

/// The candidate count of an unfiltered search expected to hold `want` passing hits
/// ([`OVERFETCH`] times `want / selectivity`) at the recall of an unfiltered search of
/// `breadth` (at least `breadth / sqrt(selectivity)`: the passing neighbours lie deeper in the
/// unfiltered ranking, where a search of `breadth` misses more; with `breadth` alone, recall@10
/// was 0.945-0.949 at 20-50% on 99k rows), or None when that exceeds `cap` (a filtered search
/// or a compact scan is cheaper).
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "small counts; the result is bounded by `cap`"
)]
fn overfetch(want: usize, breadth: usize, selectivity: f64, cap: usize) -> Option<usize> {
    let s = selectivity.max(1e-6);
    let count = (want as f64 * OVERFETCH / s)
        .max(breadth as f64 / s.sqrt())
        .ceil();
    (count <= cap as f64).then_some(count as usize)
}

/// The keys of a graph search's candidates (nearest first) that the f64 rescoring needs: the
/// first `k` and every later one within [`TIE`] of the k-th's distance. A fixed margin of 8
/// beyond `k` fetched and scored ~7 vectors a search for nothing (3.5% of an unfiltered search
/// at breadth 48 on 99k 384-d rows); this rescores 10.7 on average there (k = 10; all of them
/// when the k-th has many equal twins).
fn rescored(hits: Hits, k: usize) -> Vec<u64> {
    let bound = match hits.get(k.saturating_sub(1)) {
        Some(&(_, kth)) => kth + TIE * kth.abs().max(1.0),
        None => f32::INFINITY,
    };
    hits.into_iter()
        .enumerate()
        .take_while(|(i, (_, d))| *i < k || *d <= bound)
        .map(|(_, (key, _))| key)
        .collect()
}

impl VectorIndex {
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

    /// The best `k` keys for `query` under `plan`, with f64 scores, best first
    /// (ties by key, so equal inputs give equal outputs). Returns exactly
    /// `min(k, passing vectors)` keys: a graph search that comes up short falls back to an
    /// exact scan.
    pub fn search(
        &self,
        ns: &str,
        query: &[f32],
        k: usize,
        plan: &Plan<'_>,
    ) -> Result<Vec<(u64, f64)>> {
        let cands = match self.parts.get(ns) {
            None => return Ok(Vec::new()),
            Some(Partition::Flat(f)) => {
                self.took(Route::Flat);
                let mut nearest = self.nearest(query, k);
                match plan {
                    Plan::All { .. } => f.scan(&mut nearest, |_| true),
                    Plan::Keys(keys) => {
                        for key in keys {
                            if let Some(v) = f.get(*key) {
                                nearest.offer(*key, v);
                            }
                        }
                    }
                    Plan::Predicate { pred, .. } => f.scan(&mut nearest, pred),
                }
                nearest.into_keys()
            }
            Some(Partition::Graph(g)) => self.graph_candidates(g, query, k, plan)?,
        };
        Ok(self.rescore(ns, query, k, &cands))
    }

    fn nearest<'q>(&self, query: &'q [f32], k: usize) -> Nearest<'q> {
        Nearest::new(self.metric, query, k + RESCORE_MARGIN)
    }

    /// The candidates of a graph partition's search (a few more than `k`), overlay included.
    fn graph_candidates(
        &self,
        g: &GraphPart,
        query: &[f32],
        k: usize,
        plan: &Plan<'_>,
    ) -> Result<Vec<u64>> {
        let breadth = self.breadth.load(Ordering::Relaxed);
        match plan {
            Plan::Keys(keys) => {
                self.took(Route::Keys);
                Ok(self.graph_scan(g, query, k, keys))
            }
            Plan::All { all_keys } => {
                self.took(Route::Graph);
                let count = k.max(breadth).min(g.graph.live().max(1));
                let found = {
                    let p = self.slots.acquire();
                    if g.overlay.graves.is_empty() {
                        g.graph.search(query, count, &p)?
                    } else {
                        g.graph
                            .filtered_search(query, count, |key| g.is_hit(key), &p)?
                    }
                };
                let found = g.complete(rescored(found, k), self.nearest(query, k), |_| true);
                if found.len() < k.min(g.live()) {
                    self.took(Route::Fallback);
                    return Ok(self.graph_scan(g, query, k, &all_keys()));
                }
                Ok(found)
            }
            Plan::Predicate {
                pred,
                all_keys,
                selectivity,
            } => {
                // Few enough passing rows: scan them in the compact copy (its cost grows with
                // the rows passing, a graph search's with 1/selectivity; see `Tuning`).
                #[allow(clippy::cast_precision_loss, reason = "an estimate of a row count")]
                let passing = *selectivity * g.live() as f64;
                let compact_scan = |limit: usize| {
                    #[allow(clippy::cast_precision_loss, reason = "a row-count threshold")]
                    let few = passing <= limit as f64;
                    few.then(|| {
                        self.took(Route::CompactScan);
                        let keep = COMPACT_KEEP * k + RESCORE_MARGIN;
                        g.compact.nearest(query, &all_keys(), keep)
                    })
                };
                if let Some(found) = compact_scan(self.tuning.compact_scan_max) {
                    return Ok(found);
                }
                // A common filter: over-fetch an unfiltered search and keep the passing hits
                // (cheaper than a filtered traversal, which visits ~1/selectivity more nodes).
                let mut found = Vec::new();
                // the filtered traversal below starts at the breadth (a rare filter) or, after
                // an unlucky over-fetch, at k (the over-fetch's hits join its candidates)
                let mut count = k.max(breadth);
                let cap = (self.tuning.overfetch_max * breadth.max(k)) / DEFAULT_BREADTH;
                if let Some(fetch) = overfetch(k, breadth, *selectivity, cap) {
                    let fetch = fetch.max(breadth).min(g.graph.live().max(1));
                    found = g.graph.search(query, fetch, &self.slots.acquire())?;
                    found.retain(|(key, _)| pred(*key));
                    if found.len() >= k {
                        self.took(Route::Overfetch);
                        return Ok(g.complete(rescored(found, k), self.nearest(query, k), pred));
                    }
                    count = k;
                } else if let Some(found) = compact_scan(self.tuning.rare_scan_max) {
                    // too rare to over-fetch: the traversal would visit ~1/selectivity nodes
                    return Ok(found);
                }
                // A filtered traversal, widened until it finds k hits.
                self.took(Route::Traversal);
                let keys = loop {
                    let keys =
                        g.graph
                            .filtered_search(query, count, pred, &self.slots.acquire())?;
                    if keys.len() >= k {
                        break keys;
                    }
                    if count >= 16 * breadth.max(k) || count >= g.graph.size() {
                        self.took(Route::Fallback);
                        return Ok(self.graph_scan(g, query, k, &all_keys()));
                    }
                    count *= 4;
                };
                // the over-fetch's passing hits join (`complete` keeps each key once)
                let mut keys = rescored(keys, k);
                keys.extend(found.into_iter().map(|(key, _)| key));
                Ok(g.complete(keys, self.nearest(query, k), pred))
            }
        }
    }

    /// Exact scan of some keys of a graph partition (overlay included): the best `k + margin`.
    fn graph_scan(&self, g: &GraphPart, query: &[f32], k: usize, keys: &[u64]) -> Vec<u64> {
        let mut nearest = self.nearest(query, k);
        for key in keys {
            if let Some(v) = g.get(*key) {
                nearest.offer(*key, v);
            }
        }
        nearest.into_keys()
    }

    /// f64 scores of the candidates, best `k` first.
    fn rescore(&self, ns: &str, query: &[f32], k: usize, cands: &[u64]) -> Vec<(u64, f64)> {
        let Some(part) = self.parts.get(ns) else {
            return Vec::new();
        };
        let found: Vec<(u64, &[f32])> = cands
            .iter()
            .filter_map(|k| Some((*k, part.get(*k)?)))
            .collect();
        // the vectors lie scattered and cold: fetch them all at once, not one after the other
        for (_, v) in &found {
            prefetch(v);
        }
        let by_f64 = Scorer::new(self.metric, query);
        let mut scored: Vec<(u64, f64)> = found
            .into_iter()
            .map(|(k, v)| (k, by_f64.score(v)))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.dedup_by_key(|s| s.0);
        scored.truncate(k);
        scored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rescoring_takes_k_candidates_and_the_near_ties_of_the_kth() {
        let hits = |ds: &[f32]| -> Hits { (0u64..).zip(ds.iter().copied()).collect() };
        // beyond the k-th: a twin (equal distance) and a near tie are rescored, the rest not
        let found = rescored(hits(&[0.1, 0.2, 0.3, 0.3, 0.300_01, 0.31, 0.4]), 3);
        assert_eq!(found, [0, 1, 2, 3, 4]);
        // the tolerance is relative to large distances (l2), absolute below 1
        assert_eq!(
            rescored(hits(&[500.0, 1000.0, 1000.05, 1000.2]), 2),
            [0, 1, 2]
        );
        // fewer hits than k: all of them
        assert_eq!(rescored(hits(&[0.5, 0.6]), 3), [0, 1]);
        assert!(rescored(Vec::new(), 3).is_empty());
    }
}
