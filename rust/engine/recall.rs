//! Recall: both search legs, their fusion, the quality rerank and the dedup, on one read view.
//!
//! Each source namespace runs the vector leg (`pool` nearest) and the keyword leg (`pool` best
//! BM25) under the filter, restricted to the source's tiers. Each leg's hits over all sources
//! form its pool: ranked by score (ties by id) for RRF, min-max normalised over the whole pool
//! for the convex fusion, so namespaces compete on one scale. Only the `k` results are read
//! from the row store.

use std::collections::HashMap;

use super::reads::materialize;
use super::search::{keyword_hits_many, vector_hits};
use super::tx::validate_vector;
use super::{Engine, State};
use crate::error::{Error, Result};
use crate::rank::Standing;
use crate::rows::Snapshot;
use crate::types::{FilterSpec, Memory, Tier};

/// How the two legs' scores combine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fusion {
    /// `alpha * minmax(vector) + (1 - alpha) * minmax(keyword)`, a missed leg counting 0.
    Convex {
        /// Weight of the vector leg, in [0, 1].
        alpha: f64,
    },
    /// `sum over legs of 1 / (k + rank)`, rank 0-based.
    Rrf {
        /// The rank offset, > 0.
        k: f64,
    },
}

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
    /// Rerank by `Memory.quality` at `spec.now`.
    pub quality: bool,
    /// Keep only the best row per content fingerprint.
    pub dedup: bool,
}

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

/// A candidate found by either leg.
#[derive(Clone, Copy, Default)]
struct Cand {
    vector: Option<f64>,
    keyword: Option<f64>,
    /// Rank in each leg's pool (0-based).
    vrank: usize,
    krank: usize,
    source: usize,
    score: f64,
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

/// Ranks a leg's hits best first (ties by id) and returns (rid, score, rank).
fn ranked(st: &State, mut hits: Vec<(u64, f64, usize)>) -> Vec<(u64, f64, usize)> {
    let id = |rid: &u64| st.cols.rows.get(rid).map_or("", |c| c.id.as_str());
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| id(&a.0).cmp(id(&b.0))));
    hits
}

/// Min-max normalisation over a pool: `(s - min) / (max - min)`, all equal -> 1.
fn minmax(pool: &[(u64, f64, usize)]) -> impl Fn(f64) -> f64 {
    let lo = pool.iter().map(|h| h.1).fold(f64::INFINITY, f64::min);
    let hi = pool.iter().map(|h| h.1).fold(f64::NEG_INFINITY, f64::max);
    move |s| if hi > lo { (s - lo) / (hi - lo) } else { 1.0 }
}

impl Engine {
    /// Hybrid recall (API.md section 6): see the module docs.
    pub fn recall(&self, q: &RecallQuery<'_>) -> Result<Vec<Recalled>> {
        if q.k < 1 {
            return Err(Error::invalid("k must be >= 1"));
        }
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
    let (vpool, kpool) = (ranked(st, vpool), ranked(st, kpool));

    let mut cands: HashMap<u64, Cand> = HashMap::with_capacity(vpool.len() + kpool.len());
    for (rank, (rid, s, src)) in vpool.iter().enumerate() {
        let c = cands.entry(*rid).or_default();
        (c.vector, c.vrank, c.source) = (Some(*s), rank, *src);
    }
    for (rank, (rid, s, src)) in kpool.iter().enumerate() {
        let c = cands.entry(*rid).or_default();
        (c.keyword, c.krank, c.source) = (Some(*s), rank, *src);
    }

    // fusion; one leg alone (the other skipped, or finding nothing) keeps its own scores:
    // recall is then that search
    let single = vpool.is_empty() || kpool.is_empty();
    let (vnorm, knorm) = (minmax(&vpool), minmax(&kpool));
    for c in cands.values_mut() {
        c.score = if single {
            c.vector.or(c.keyword).unwrap_or(0.0)
        } else {
            match q.fusion {
                Fusion::Convex { alpha } => {
                    alpha * c.vector.map_or(0.0, &vnorm)
                        + (1.0 - alpha) * c.keyword.map_or(0.0, &knorm)
                }
                Fusion::Rrf { k } => {
                    let term = |rank: usize| {
                        #[allow(clippy::cast_precision_loss, reason = "a rank")]
                        let r = rank as f64;
                        1.0 / (k + r)
                    };
                    c.vector.map_or(0.0, |_| term(c.vrank))
                        + c.keyword.map_or(0.0, |_| term(c.krank))
                }
            }
        };
    }
    if !single && q.context > 0.0 {
        with_context(st, q.context, &mut cands);
    }
    if q.quality {
        rerank(st, q.spec.now, &mut cands);
    }

    let id = |rid: &u64| st.cols.rows.get(rid).map_or("", |c| c.id.as_str());
    let mut order: Vec<(u64, Cand)> = cands.into_iter().collect();
    order.sort_by(|a, b| {
        b.1.score
            .total_cmp(&a.1.score)
            .then_with(|| id(&a.0).cmp(id(&b.0)))
    });
    if q.dedup {
        order = dedup(st, snap, order, q.k)?;
    }
    order.truncate(q.k);
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

/// Adds `weight` times the best fused score among a candidate's two timeline neighbours (the
/// rows of its namespace stored just before and just after it) that are candidates too. A
/// conversation's turn is understood with the turns around it: the question in one turn and
/// its answer in the next share the meaning, often not the words.
fn with_context(st: &State, weight: f64, cands: &mut HashMap<u64, Cand>) {
    let fused: HashMap<u64, f64> = cands.iter().map(|(r, c)| (*r, c.score)).collect();
    for (rid, c) in cands.iter_mut() {
        let Some(col) = st.cols.rows.get(rid) else {
            continue;
        };
        let Some(n) = st.cols.namespaces.get(&col.namespace) else {
            continue;
        };
        let best = n
            .neighbours(col.created_at, *rid)
            .into_iter()
            .flatten()
            .filter_map(|x| fused.get(&x).copied())
            .reduce(f64::max);
        if let Some(b) = best {
            c.score += weight * b;
        }
    }
}

/// `score / best * (0.8 + 0.2 * quality / max_quality)`. Scores that can be negative (a
/// cosine or inner-product vector leg alone) are min-max normalised instead of divided by the
/// best; a max quality of 0 leaves the factor at 1.
fn rerank(st: &State, now: i64, cands: &mut HashMap<u64, Cand>) {
    let quality = |rid: &u64| {
        st.cols.rows.get(rid).map_or(0.0, |c| {
            Standing {
                tier: c.tier,
                importance: c.importance,
                confidence: c.confidence,
                updated_at: Some(c.updated_at),
                last_accessed_at: Some(c.last_accessed_at),
                access_count: c.access_count,
            }
            .quality(now)
        })
    };
    let qs: Vec<(u64, f64)> = cands.keys().map(|r| (*r, quality(r))).collect();
    let max_q = qs.iter().map(|q| q.1).fold(0.0, f64::max);
    let lo = cands
        .values()
        .map(|c| c.score)
        .fold(f64::INFINITY, f64::min);
    let hi = cands
        .values()
        .map(|c| c.score)
        .fold(f64::NEG_INFINITY, f64::max);
    let norm = |s: f64| {
        if lo >= 0.0 && hi > 0.0 {
            s / hi
        } else if hi > lo {
            (s - lo) / (hi - lo)
        } else {
            1.0
        }
    };
    for (rid, q) in qs {
        let factor = if max_q > 0.0 {
            0.8 + 0.2 * q / max_q
        } else {
            1.0
        };
        if let Some(c) = cands.get_mut(&rid) {
            c.score = norm(c.score) * factor;
        }
    }
}

/// The best row per content fingerprint (`normalize_content`'s SHA-256, stored with each row),
/// in order, stopping once `k` are kept. Rows are told apart by a hash of the fingerprint; two
/// with the same hash are compared by the full fingerprints.
fn dedup(
    st: &State,
    snap: &Snapshot,
    order: Vec<(u64, Cand)>,
    k: usize,
) -> Result<Vec<(u64, Cand)>> {
    let mut kept: Vec<(u64, Cand)> = Vec::with_capacity(k);
    let mut by_hash: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut fingerprints: HashMap<u64, String> = HashMap::new();
    let mut fp = |rid: u64| -> Result<String> {
        if let Some(f) = fingerprints.get(&rid) {
            return Ok(f.clone());
        }
        let f = materialize(st, snap, &[rid])?.remove(0).fingerprint;
        fingerprints.insert(rid, f.clone());
        Ok(f)
    };
    for (rid, c) in order {
        if kept.len() >= k {
            break;
        }
        let h = st.cols.rows.get(&rid).map_or(0, |c| c.fingerprint_hash);
        let same = by_hash.entry(h).or_default();
        let mut dup = false;
        for other in same.iter() {
            if fp(*other)? == fp(rid)? {
                dup = true;
                break;
            }
        }
        if !dup {
            same.push(rid);
            kept.push((rid, c));
        }
    }
    Ok(kept)
}
