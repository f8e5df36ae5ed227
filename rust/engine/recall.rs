//! Recall: both search legs, their fusion, the quality rerank and the dedup, on one read view.
//!
//! Each source namespace runs the vector leg (`pool` nearest) and the keyword leg (`pool` best
//! BM25) under the filter, restricted to the source's tiers. Each leg's hits over all sources
//! form its pool: ranked by score (ties by id) for RRF, min-max normalised over the whole pool
//! for the convex fusion, so namespaces compete on one scale. Only the `k` results are read
//! from the row store.

use super::reads::materialize;
use super::search::{keyword_hits_many, vector_hits};
use super::tx::validate_vector;
use super::{Engine, State};
use crate::error::{Error, Result};
pub use crate::fusion::Fusion;
use crate::fusion::{fuse, Candidates, Rule};
use crate::limits;
use crate::rank::Standing;
use crate::rows::Snapshot;
use crate::types::{FilterSpec, Memory, Tier};

/// A namespace to search, and the tiers it may contribute (None = what the filter allows).
#[derive(Clone, Debug)]
pub struct Source {
    /// The namespace.
    pub namespace: String,
    /// Tiers taken from it, intersected with the filter's.
    pub tiers: Option<Vec<Tier>>,
}

/// What to recall.
#[derive(Clone, Debug)]
pub struct RecallQuery<'a> {
    /// Namespaces searched, in order (a repeated one counts once).
    pub sources: &'a [Source],
    /// The keyword leg's query; no word in it = no keyword leg.
    pub text: &'a str,
    /// The vector leg's query; None = no vector leg.
    pub vector: Option<&'a [f32]>,
    /// The filter every candidate passes.
    pub spec: &'a FilterSpec,
    /// Results wanted.
    pub k: usize,
    /// Candidates per leg and namespace.
    pub pool: usize,
    /// The fusion.
    pub fusion: Fusion,
    /// Neighbour context: when both legs ran, each candidate's fused score gains this times
    /// the best fused score of its timeline neighbours among the candidates (0 = none).
    pub context: f64,
    /// The keyword score at which the keyword leg counts half under convex fusion
    /// (`fusion::keyword_weight`; 0 = always its full weight).
    pub keyword_half: f64,
    /// Rerank by `Memory.quality` at `spec.now`.
    pub quality: bool,
    /// Keep only the best row per content fingerprint.
    pub dedup: bool,
}

/// `Store.recall`'s defaults (the one home: `memini.store` reads them from the core, and
/// the HTTP front answers a recall with them): convex fusion with this vector weight, ...
pub const DEFAULT_ALPHA: f64 = 0.4;
/// ... this neighbour context, ...
pub const DEFAULT_CONTEXT: f64 = 0.5;
/// ... this keyword score at which the keyword leg counts half, ...
pub const DEFAULT_KEYWORD_HALF: f64 = 0.2;
/// ... `rrf_k` when RRF is asked for without one, ...
pub const DEFAULT_RRF_K: f64 = 5.0;
/// ... and a pool of `max(5 * k, MIN_POOL)` candidates per leg and namespace.
pub const MIN_POOL: u64 = 50;

/// One recall result.
#[derive(Clone, Debug)]
pub struct Recalled {
    /// The row.
    pub memory: Memory,
    /// Final score, higher is better.
    pub score: f64,
    /// The vector leg's score, None if it missed the row.
    pub vector_score: Option<f64>,
    /// The keyword leg's score, None if it missed the row.
    pub keyword_score: Option<f64>,
    /// The namespace it was found in.
    pub via: String,
}

/// The tiers source `tiers` leaves of the filter's (`Some(empty)`: none).
fn restrict(spec: &FilterSpec, tiers: Option<&[Tier]>) -> FilterSpec {
    let mut s = spec.clone();
    if let Some(allowed) = tiers {
        s.tiers = if spec.tiers.is_empty() {
            allowed.to_vec()
        } else {
            spec.tiers
                .iter()
                .copied()
                .filter(|t| allowed.contains(t))
                .collect()
        };
    }
    s
}

impl Engine {
    /// Hybrid recall (API.md section 6): see the module docs.
    pub fn recall(&self, q: &RecallQuery<'_>) -> Result<Vec<Recalled>> {
        limits::k(q.k)?;
        limits::at_most(
            "pool",
            u64::try_from(q.pool).unwrap_or(u64::MAX),
            limits::MAX_POOL,
        )?;
        limits::query(q.text)?;
        if q.pool < q.k {
            return Err(Error::invalid(format!(
                "pool must be >= k, got pool={} and k={}",
                q.pool, q.k
            )));
        }
        match q.fusion {
            Fusion::Convex { alpha } if !(0.0..=1.0).contains(&alpha) => {
                return Err(Error::invalid(format!(
                    "alpha must be in [0, 1], got {alpha}"
                )))
            }
            Fusion::Rrf { k } if !(k > 0.0 && k.is_finite()) => {
                return Err(Error::invalid(format!("rrf_k must be > 0, got {k}")))
            }
            _ => {}
        }
        if !(q.context >= 0.0 && q.context.is_finite()) {
            return Err(Error::invalid(format!(
                "context must be a finite number >= 0, got {}",
                q.context
            )));
        }
        self.read(|inner, st, snap| {
            if let Some(v) = q.vector {
                validate_vector(v, inner.dims)?;
            }
            recall(st, snap, q)
        })
    }
}

fn recall(st: &State, snap: &Snapshot, q: &RecallQuery<'_>) -> Result<Vec<Recalled>> {
    // each namespace once, in order, with its filter (its tiers taken from the filter's);
    // a source whose tiers the filter excludes contributes nothing
    let mut seen: Vec<&str> = Vec::new();
    let mut searched: Vec<(usize, FilterSpec)> = Vec::new();
    for (i, src) in q.sources.iter().enumerate() {
        if seen.contains(&src.namespace.as_str()) {
            continue;
        }
        seen.push(&src.namespace);
        let spec = restrict(q.spec, src.tiers.as_deref());
        if src.tiers.is_none() || !spec.tiers.is_empty() {
            searched.push((i, spec));
        }
    }
    // the vector leg namespace by namespace (each has its own graph), on the calling thread:
    // fanning namespaces out to the worker pool measured slower on a loaded machine (each
    // call waits for its slowest worker), and callers get parallelism from their own threads
    let (mut vpool, mut kpool) = (Vec::new(), Vec::new());
    if let Some(query) = q.vector {
        for (i, spec) in &searched {
            let hits = vector_hits(st, &q.sources[*i].namespace, &[query], spec, q.pool)?;
            vpool.extend(hits.into_iter().flatten().map(|(r, s)| (r, s, *i)));
        }
    }
    // the keyword leg of every namespace in one pass over the keyword index
    if !q.text.trim().is_empty() {
        let sources: Vec<(&str, &FilterSpec)> = searched
            .iter()
            .map(|(i, spec)| (q.sources[*i].namespace.as_str(), spec))
            .collect();
        let hits = keyword_hits_many(st, &sources, q.text, q.pool)?;
        for ((i, _), h) in searched.iter().zip(hits) {
            kpool.extend(h.into_iter().map(|(r, s)| (r, s, *i)));
        }
    }
    // neighbour context weighs each namespace by its coherence: measured only when used
    let mut coherence = vec![0.0; q.sources.len()];
    if q.context > 0.0 && !vpool.is_empty() && !kpool.is_empty() {
        for (i, _) in &searched {
            if let Some(ns) = st.cols.namespaces.get(&q.sources[*i].namespace) {
                coherence[*i] = super::coherence::coherence(ns, snap)?;
            }
        }
    }
    let info = Rows {
        st,
        snap,
        coherence,
    };
    let rule = Rule {
        fusion: q.fusion,
        context: q.context,
        keyword_half: q.keyword_half,
        quality_at: q.quality.then_some(q.spec.now),
        dedup: q.dedup,
        k: q.k,
    };
    let order = fuse(&info, vpool, kpool, &rule)?;
    let rids: Vec<u64> = order.iter().map(|o| o.0).collect();
    Ok(materialize(st, snap, &rids)?
        .into_iter()
        .zip(order)
        .map(|(memory, (_, c))| Recalled {
            memory,
            score: c.score,
            vector_score: c.vector,
            keyword_score: c.keyword,
            via: q.sources[c.source].namespace.clone(),
        })
        .collect())
}

/// The engine's rows as fusion candidates (keyed by row id).
struct Rows<'a> {
    st: &'a State,
    snap: &'a Snapshot,
    /// Per source (index in the query's sources): its namespace's coherence.
    coherence: Vec<f64>,
}

impl Candidates for Rows<'_> {
    fn id(&self, key: u64) -> &str {
        self.st.cols.rows.get(&key).map_or("", |c| c.id.as_str())
    }

    fn neighbours(&self, key: u64) -> [Option<u64>; 2] {
        let Some(col) = self.st.cols.rows.get(&key) else {
            return [None, None];
        };
        self.st
            .cols
            .namespaces
            .get(&col.namespace)
            .map_or([None, None], |n| n.neighbours(col.created_at, key))
    }

    fn coherence(&self, source: usize) -> f64 {
        self.coherence.get(source).copied().unwrap_or(0.0)
    }

    fn standing(&self, key: u64) -> Option<Standing> {
        self.st.cols.rows.get(&key).map(|c| Standing {
            tier: c.tier,
            importance: c.importance,
            confidence: c.confidence,
            updated_at: Some(c.updated_at),
            last_accessed_at: Some(c.last_accessed_at),
            access_count: c.access_count,
        })
    }

    fn fingerprint_hash(&self, key: u64) -> u64 {
        self.st
            .cols
            .rows
            .get(&key)
            .map_or(0, |c| c.fingerprint_hash)
    }

    fn fingerprint(&self, key: u64) -> Result<String> {
        Ok(materialize(self.st, self.snap, &[key])?
            .remove(0)
            .fingerprint)
    }
}
