//! The read operations: each runs on one consistent view (the columns and a row-store
//! snapshot that matches them), filters in memory and reads payloads only for its results.

use std::fs;
use std::path::Path;

use super::{Engine, Inner, State};
use crate::columns::{fingerprint_hash, Namespace};
use crate::error::{Error, Result};
use crate::filter::{Predicate, Vouched};
use crate::limits;
use crate::rows::{to_memory, Col, Snapshot};
use crate::types::{FilterSpec, Memory, Metric, Micros, Scored, SortKey, Tier};
use crate::vector::Route;

impl Engine {
    /// Runs `f` with a consistent view: the columns and a row-store snapshot that matches them.
    pub(super) fn read<T>(
        &self,
        f: impl FnOnce(&Inner, &State, &Snapshot) -> Result<T>,
    ) -> Result<T> {
        let inner = self.inner()?;
        let rows = inner.rows.read();
        let state = inner.state.read();
        let snap = rows.snapshot()?;
        f(&inner, &state, &snap)
    }

    /// One row.
    pub fn get(&self, ns: &str, id: &str) -> Result<Memory> {
        self.read(|_, st, snap| {
            let rid = st
                .cols
                .rid(ns, id)
                .ok_or_else(|| Error::not_found(ns, id))?;
            Ok(materialize(st, snap, &[rid])?.remove(0))
        })
    }

    /// A row's vector (None for keyword-only rows).
    pub fn get_embedding(&self, ns: &str, id: &str) -> Result<Option<Vec<f32>>> {
        self.read(|_, st, snap| {
            let rid = st
                .cols
                .rid(ns, id)
                .ok_or_else(|| Error::not_found(ns, id))?;
            snap.vector(rid)
        })
    }

    /// Ids of `ns` starting with `prefix`, ascending.
    pub fn ids_by_prefix(&self, ns: &str, prefix: &str, limit: i64) -> Result<Vec<String>> {
        limits::limit("limit", limit)?;
        self.read(|_, st, _| {
            if prefix.is_empty() || limit <= 0 {
                return Ok(Vec::new());
            }
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(Vec::new());
            };
            Ok(n.ids
                .range::<str, _>((
                    std::ops::Bound::Included(prefix),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|(id, _)| id.starts_with(prefix))
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .map(|(id, _)| id.clone())
                .collect())
        })
    }

    /// Ids of `ns` whose `superseded_by == id`, ascending.
    pub fn predecessor_ids(&self, ns: &str, id: &str) -> Result<Vec<String>> {
        self.read(|_, st, _| {
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(Vec::new());
            };
            if n.superseded == 0 {
                return Ok(Vec::new());
            }
            Ok(n.ids
                .iter()
                .filter(|(_, rid)| {
                    st.cols
                        .rows
                        .get(rid)
                        .is_some_and(|c| c.superseded_by.as_deref() == Some(id))
                })
                .map(|(i, _)| i.clone())
                .collect())
        })
    }

    /// The newest live row (by created_at) of `ns` and `tier` with this content fingerprint.
    pub fn get_by_fingerprint(
        &self,
        ns: &str,
        tier: Tier,
        fingerprint: &str,
        now: Micros,
    ) -> Result<Memory> {
        self.read(|_, st, snap| {
            let missing = || {
                Error::NotFound(format!(
                    "memory not found: no live {} memory with that fingerprint in namespace {ns:?}",
                    tier.as_str()
                ))
            };
            if fingerprint.is_empty() {
                return Err(missing());
            }
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Err(missing());
            };
            let spec = FilterSpec {
                now,
                tiers: vec![tier],
                ..FilterSpec::default()
            };
            let pred = Predicate::new(&spec, n);
            let h = fingerprint_hash(fingerprint);
            let mut cands: Vec<(Micros, &str, u64)> = n
                .ids
                .iter()
                .filter_map(|(id, rid)| {
                    let c = st.cols.rows.get(rid)?;
                    (c.fingerprint_hash == h && pred.matches(*rid, c)).then_some((
                        c.created_at,
                        id.as_str(),
                        *rid,
                    ))
                })
                .collect();
            cands.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
            for (_, _, rid) in cands {
                let m = materialize(st, snap, &[rid])?.remove(0);
                if m.fingerprint == fingerprint {
                    return Ok(m);
                }
            }
            Err(missing())
        })
    }

    /// Rows with `expires_at <= now` across namespaces, by expiry then id; limit <= 0 = all.
    pub fn list_expired(&self, now: Micros, limit: i64) -> Result<Vec<Memory>> {
        limits::limit("limit", limit)?;
        self.read(|_, st, snap| {
            let mut cands: Vec<(Micros, &str, u64)> = st
                .cols
                .rows
                .iter()
                .filter_map(|(rid, c)| {
                    c.expires_at
                        .filter(|e| *e <= now)
                        .map(|e| (e, c.id.as_str(), *rid))
                })
                .collect();
            cands.sort_unstable();
            if limit > 0 {
                cands.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            }
            let rids: Vec<u64> = cands.into_iter().map(|c| c.2).collect();
            materialize(st, snap, &rids)
        })
    }

    /// Rows of `ns` passing the filter, ordered by its sort key (ties by id ascending).
    pub fn list(
        &self,
        ns: &str,
        spec: &FilterSpec,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<Memory>> {
        limits::limit("limit", limit)?;
        limits::limit("offset", offset)?;
        self.read(|_, st, snap| {
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(Vec::new());
            };
            let pred = Predicate::new(spec, n);
            let rids = matching(st, n, &pred);
            let key = spec.sort_key.unwrap_or(SortKey::CreatedAt);
            let mut items: Vec<(f64, i64, &str, u64)> = rids
                .into_iter()
                .filter_map(|rid| {
                    let c = st.cols.rows.get(&rid)?;
                    let (f, i) = match key {
                        SortKey::CreatedAt => (0.0, c.created_at),
                        SortKey::UpdatedAt => (0.0, c.updated_at),
                        SortKey::LastAccessedAt => (0.0, c.last_accessed_at),
                        SortKey::AccessCount => (0.0, c.access_count),
                        SortKey::Importance => (c.importance, 0),
                    };
                    Some((f, i, c.id.as_str(), rid))
                })
                .collect();
            let asc = spec.sort_asc;
            let cmp = |a: &(f64, i64, &str, u64), b: &(f64, i64, &str, u64)| {
                let primary = a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
                (if asc { primary } else { primary.reverse() }).then_with(|| a.2.cmp(b.2))
            };
            let skip = usize::try_from(offset.max(0)).unwrap_or(usize::MAX);
            let take = if limit > 0 {
                usize::try_from(limit).unwrap_or(usize::MAX)
            } else {
                usize::MAX
            };
            let end = skip.saturating_add(take).min(items.len());
            if skip >= items.len() {
                return Ok(Vec::new());
            }
            if end < items.len() {
                items.select_nth_unstable_by(end, cmp);
                items.truncate(end);
            }
            items.sort_unstable_by(cmp);
            let rids: Vec<u64> = items[skip..end].iter().map(|x| x.3).collect();
            materialize(st, snap, &rids)
        })
    }

    /// Number of rows of `ns` passing the filter.
    pub fn count(&self, ns: &str, spec: &FilterSpec) -> Result<usize> {
        self.read(|_, st, _| {
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(0);
            };
            let pred = Predicate::new(spec, n);
            if pred.is_trivial() {
                return Ok(n.ids.len());
            }
            Ok(matching(st, n, &pred).len())
        })
    }

    /// Every namespace holding a row, ascending.
    pub fn list_namespaces(&self) -> Result<Vec<String>> {
        self.read(|_, st, _| Ok(st.cols.namespaces.keys().cloned().collect()))
    }

    /// Per namespace with >= 1 live row: (namespace, live rows, newest live created_at).
    pub fn namespace_activity(&self, now: Micros) -> Result<Vec<(String, usize, Micros)>> {
        self.read(|_, st, _| {
            let spec = FilterSpec {
                now,
                ..FilterSpec::default()
            };
            Ok(st
                .cols
                .namespaces
                .iter()
                .filter_map(|(name, n)| {
                    let pred = Predicate::new(&spec, n);
                    let (count, newest) = n
                        .ids
                        .values()
                        .filter_map(|rid| st.cols.rows.get(rid).filter(|c| pred.matches(*rid, c)))
                        .fold((0usize, Micros::MIN), |(k, t), c| {
                            (k + 1, t.max(c.created_at))
                        });
                    (count > 0).then(|| (name.clone(), count, newest))
                })
                .collect())
        })
    }

    /// Live rows per tier across namespaces: a namespace whose rows are all live costs O(1)
    /// (its kept per-tier counts); only one holding expired, superseded or ended rows is
    /// walked.
    pub fn active_by_tier(&self, now: Micros) -> Result<Vec<(Tier, usize)>> {
        self.read(|_, st, _| {
            let spec = FilterSpec {
                now,
                ..FilterSpec::default()
            };
            let mut counts = [0usize; 4];
            for n in st.cols.namespaces.values() {
                if n.all_live(now) {
                    // every row live: the per-tier counts the columns keep (no row walk)
                    for (count, in_tier) in counts.iter_mut().zip(n.tiers) {
                        *count += in_tier;
                    }
                    continue;
                }
                let pred = Predicate::new(&spec, n);
                for rid in n.ids.values() {
                    if let Some(c) = st.cols.rows.get(rid).filter(|c| pred.matches(*rid, c)) {
                        counts[c.tier as usize] += 1;
                    }
                }
            }
            Ok(Tier::ALL
                .iter()
                .map(|t| (*t, counts[*t as usize]))
                .collect())
        })
    }

    /// Free-form statistics: (key, value) pairs of numbers, per namespace counts by tier.
    pub fn stats(&self) -> Result<Stats> {
        // before the state: the lock order (see the module docs of `engine`)
        let seq = self.inner()?.counters.lock().seq;
        // outside the read: it creates a small usearch index to ask
        let simd = crate::vector::simd(self.inner()?.metric)?;
        self.read(|inner, st, _| {
            let mut namespaces = Vec::new();
            for (name, n) in &st.cols.namespaces {
                namespaces.push((name.clone(), n.ids.len(), n.tiers, n.vectors));
            }
            let (graphs, flats) = st.vectors.partition_counts();
            Ok(Stats {
                rows: st.cols.rows.len(),
                namespaces,
                vector_graphs: graphs,
                vector_flat_partitions: flats,
                vector_memory_bytes: st.vectors.memory_usage(),
                vector_index_entries: st.vectors.total_len(),
                vector_pending: st.vectors.overlay_len(),
                vector_routes: st.vectors.routes(),
                checkpoints: inner.checkpoints.load(std::sync::atomic::Ordering::Relaxed),
                checkpoint_failures: inner.checkpoint_failures.get(),
                changes_since_checkpoint: seq.saturating_sub(st.vector_seq),
                keyword_docs: st.keyword.num_docs(),
                keyword_segments: st.keyword.num_segments(),
                keyword_merging: st.keyword.merging(),
                keyword_failures: st.keyword.failures(),
                bytes_on_disk: inner.dir.as_deref().map_or(0, dir_size),
                dims: inner.dims,
                metric: inner.metric,
                simd,
            })
        })
    }
}

/// Free-form statistics.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Total rows.
    pub rows: usize,
    /// (namespace, rows, rows per tier, rows with a vector)
    pub namespaces: Vec<(String, usize, [usize; 4], usize)>,
    /// Number of HNSW partitions.
    pub vector_graphs: usize,
    /// Number of flat partitions.
    pub vector_flat_partitions: usize,
    /// Memory of the vector partitions.
    pub vector_memory_bytes: usize,
    /// Vectors in the vector index (equals the rows with a vector when in step).
    pub vector_index_entries: usize,
    /// Vectors added while a checkpoint saved their graph, still on their way into it (in
    /// the background after the checkpoint; searched exactly meanwhile).
    pub vector_pending: usize,
    /// Vector searches so far per plan route (see [`Route`]).
    pub vector_routes: Vec<(Route, u64)>,
    /// Index checkpoints taken since the store was opened.
    pub checkpoints: u64,
    /// Background checkpoints that failed since the store was opened, and the last one's
    /// error (each is logged too; the next checkpoint retries, and nothing is lost).
    pub checkpoint_failures: (u64, Option<String>),
    /// Changes committed since the last vector checkpoint began: what the next open replays,
    /// and how far the next periodic checkpoint is (it starts at `CHECKPOINT_EVERY`).
    pub changes_since_checkpoint: u64,
    /// Background keyword folds that failed since the store was opened, and the last one's
    /// error (each is logged too; the changes stay searchable and the next fold retries).
    pub keyword_failures: (u64, Option<String>),
    /// Documents in the committed keyword index.
    pub keyword_docs: u64,
    /// Segments of the committed keyword index.
    pub keyword_segments: usize,
    /// The keyword index's segments are still to be merged once writes pause, or merging.
    pub keyword_merging: bool,
    /// Bytes of the store directory.
    pub bytes_on_disk: u64,
    /// Dims.
    pub dims: usize,
    /// Metric.
    pub metric: Metric,
    /// The SIMD kernels chosen at run time, as (component, kernel) (see [`crate::vector::simd`]).
    pub simd: Vec<(&'static str, String)>,
}

fn dir_size(p: &Path) -> u64 {
    fs::read_dir(p).map_or(0, |rd| {
        rd.filter_map(std::result::Result::ok)
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => dir_size(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    })
}

/// Rids of the namespace passing `pred` (from the smallest posting list when there is one).
pub(super) fn matching(st: &State, n: &Namespace, pred: &Predicate<'_>) -> Vec<u64> {
    matching_map(st, n, pred, |rid, _| Some(rid))
}

/// `f(rid, columns)` of every row of the namespace passing `pred` where it is Some, walking
/// the smallest posting list when the filter has one.
pub(super) fn matching_map<T>(
    st: &State,
    n: &Namespace,
    pred: &Predicate<'_>,
    f: impl Fn(u64, &Col) -> Option<T>,
) -> Vec<T> {
    let pass = |rid: u64, vouched: Vouched| {
        let c = st.cols.rows.get(&rid)?;
        if pred.matches_vouched(rid, c, vouched) {
            f(rid, c)
        } else {
            None
        }
    };
    match pred.candidates_vouched() {
        Some((c, vouched)) => c.into_iter().filter_map(|rid| pass(rid, vouched)).collect(),
        None => n
            .ids
            .values()
            .filter_map(|rid| pass(*rid, Vouched::Nothing))
            .collect(),
    }
}

/// Search hits: the full rows of `(rid, score)` pairs, in order.
pub(super) fn scored(st: &State, snap: &Snapshot, hits: Vec<(u64, f64)>) -> Result<Vec<Scored>> {
    let rids: Vec<u64> = hits.iter().map(|h| h.0).collect();
    Ok(materialize(st, snap, &rids)?
        .into_iter()
        .zip(hits)
        .map(|(memory, (_, score))| Scored { memory, score })
        .collect())
}

/// Full rows for `rids`, in order.
pub(super) fn materialize(st: &State, snap: &Snapshot, rids: &[u64]) -> Result<Vec<Memory>> {
    let payloads = snap.payloads(rids)?;
    rids.iter()
        .zip(payloads)
        .map(|(rid, p)| {
            let c = st
                .cols
                .rows
                .get(rid)
                .ok_or_else(|| Error::Corruption(format!("row {rid} missing from columns")))?;
            Ok(to_memory(c, p))
        })
        .collect()
}
