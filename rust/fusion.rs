//! Recall's fusion rule (API.md section 6), the one implementation: the embedded engine's
//! `recall` runs it over its own candidates, and the PostgreSQL backend (Python) calls it
//! through the binding (`memini._core.fuse`) over the candidates its two SQL legs found.
//!
//! Input: each leg's hits (candidate key, score, source index); what the rule reads of a
//! candidate beyond its scores (id for ties, timeline neighbours, ranking fields, content
//! fingerprint) comes from a [`Candidates`] implementation. Output: the `k` best candidates
//! with their final score and each leg's score.

use std::collections::HashMap;

use crate::error::Result;
use crate::rank::Standing;
use crate::types::Micros;

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

/// What the rule reads of a candidate (keyed by a `u64` of the caller's choosing).
pub trait Candidates {
    /// The memory id (ties rank by id ascending).
    fn id(&self, key: u64) -> &str;
    /// The rows stored just before and just after it in its namespace (by `created_at`,
    /// then storage order), whether candidates or not.
    fn neighbours(&self, key: u64) -> [Option<u64>; 2];
    /// How much more the time-adjacent rows of source `source`'s namespace resemble each
    /// other than random pairs of its rows (mean cosine of neighbours minus that of random
    /// pairs; about 0 when the storage order is arbitrary): neighbour context is weighted
    /// by it ([`context_gate`]).
    fn coherence(&self, source: usize) -> f64;
    /// The ranking fields, None if unknown (quality 0).
    fn standing(&self, key: u64) -> Option<Standing>;
    /// A cheap hash of the content fingerprint (equal fingerprints, equal hashes).
    fn fingerprint_hash(&self, key: u64) -> u64;
    /// The content fingerprint, read only to tell apart two equal hashes.
    ///
    /// # Errors
    /// When the row cannot be read.
    fn fingerprint(&self, key: u64) -> Result<String>;
}

/// A fused candidate.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fused {
    /// The vector leg's score, None if it missed the candidate.
    pub vector: Option<f64>,
    /// The keyword leg's score, None if it missed the candidate.
    pub keyword: Option<f64>,
    /// Rank in each leg's pool (0-based).
    vrank: usize,
    krank: usize,
    /// The source the candidate was (last) found in.
    pub source: usize,
    /// The final score.
    pub score: f64,
}

/// The fusion's settings.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The fusion.
    pub fusion: Fusion,
    /// Weight of the best timeline neighbour's fused score (0 = none).
    pub context: f64,
    /// The keyword score at which the keyword leg counts half under [`Fusion::Convex`]
    /// ([`keyword_weight`]; 0 = always its full weight).
    pub keyword_half: f64,
    /// Rerank by `Memory.quality` at this instant (None = no rerank).
    pub quality_at: Option<Micros>,
    /// Keep only the best candidate per content fingerprint.
    pub dedup: bool,
    /// Results wanted.
    pub k: usize,
}

/// A leg's hits: (candidate key, score, source index).
pub type Hits = Vec<(u64, f64, usize)>;

/// Ranks a leg's hits best first (ties by id).
fn ranked<C: Candidates>(info: &C, mut hits: Hits) -> Hits {
    hits.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| info.id(a.0).cmp(info.id(b.0)))
    });
    hits
}

/// Min-max normalisation over a pool: `(s - min) / (max - min)`, all equal -> 1.
fn minmax(pool: &[(u64, f64, usize)]) -> impl Fn(f64) -> f64 {
    let lo = pool.iter().map(|h| h.1).fold(f64::INFINITY, f64::min);
    let hi = pool.iter().map(|h| h.1).fold(f64::NEG_INFINITY, f64::max);
    move |s| if hi > lo { (s - lo) / (hi - lo) } else { 1.0 }
}

/// The share of its weight the keyword leg keeps under [`Fusion::Convex`]:
/// `top / (top + half)`, `top` its best score; 1 when `half` is 0. A leg whose best row
/// matches only words present in nearly every row searched (a user's name in their own
/// facts: BM25 ~0.06) ranks its candidates by noise that min-max would spread over 0..1, so
/// it counts for little; a leg matching any word that tells rows apart (BM25 >= 1) keeps
/// nearly all of it. BM25 (length normalisation scaled down, `keyword::scope`) scores a word
/// found once, in a row of average length, in a fraction `p` of the rows about
/// `1.58 ln(1 / p)`: `half` = 0.2 is a word in about 88%.
#[must_use]
pub fn keyword_weight(top: f64, half: f64) -> f64 {
    if half > 0.0 {
        top.max(0.0) / (top.max(0.0) + half)
    } else {
        1.0
    }
}

/// Fuses both legs' hits; returns the `k` best (key, candidate), best first, ties by id.
///
/// One leg alone (the other skipped, or finding nothing) keeps its own scores: recall is
/// then that search.
///
/// # Errors
/// When a fingerprint needed by the dedup cannot be read.
pub fn fuse<C: Candidates>(
    info: &C,
    vhits: Hits,
    khits: Hits,
    rule: &Rule,
) -> Result<Vec<(u64, Fused)>> {
    let (vpool, kpool) = (ranked(info, vhits), ranked(info, khits));
    let mut cands: HashMap<u64, Fused> = HashMap::with_capacity(vpool.len() + kpool.len());
    for (rank, (key, s, src)) in vpool.iter().enumerate() {
        let c = cands.entry(*key).or_default();
        (c.vector, c.vrank, c.source) = (Some(*s), rank, *src);
    }
    for (rank, (key, s, src)) in kpool.iter().enumerate() {
        let c = cands.entry(*key).or_default();
        (c.keyword, c.krank, c.source) = (Some(*s), rank, *src);
    }
    let single = vpool.is_empty() || kpool.is_empty();
    let (vnorm, knorm) = (minmax(&vpool), minmax(&kpool));
    let kweight = keyword_weight(kpool.first().map_or(0.0, |h| h.1), rule.keyword_half);
    for c in cands.values_mut() {
        c.score = if single {
            c.vector.or(c.keyword).unwrap_or(0.0)
        } else {
            match rule.fusion {
                Fusion::Convex { alpha } => {
                    alpha * c.vector.map_or(0.0, &vnorm)
                        + (1.0 - alpha) * kweight * c.keyword.map_or(0.0, &knorm)
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
    if !single && rule.context > 0.0 {
        with_context(info, rule.context, &mut cands);
    }
    if let Some(now) = rule.quality_at {
        rerank(info, now, &mut cands);
    }
    let mut order: Vec<(u64, Fused)> = cands.into_iter().collect();
    order.sort_by(|a, b| {
        b.1.score
            .total_cmp(&a.1.score)
            .then_with(|| info.id(a.0).cmp(info.id(b.0)))
    });
    if rule.dedup {
        order = dedup(info, order, rule.k)?;
    }
    order.truncate(rule.k);
    Ok(order)
}

/// The coherence at which neighbour context gets its full weight.
const FULL_COHERENCE: f64 = 0.1;

/// The share of the neighbour weight a namespace of this coherence gets:
/// `min(1, coherence / 0.1)`, 0 when it is not positive. On LoCoMo's dev split
/// (`benches/bench_recall.py`) dialogue turns stored in order measure 0.07-0.16 (gate
/// 0.7-1), the same turns in a random order and facts stored as extracted -0.02-0.01
/// (gate 0-0.1).
#[must_use]
pub fn context_gate(coherence: f64) -> f64 {
    (coherence / FULL_COHERENCE).clamp(0.0, 1.0)
}

/// Adds `weight` times the best fused score among a candidate's two timeline neighbours that
/// are candidates too, times its namespace's [`context_gate`]. A conversation's turn is
/// understood with the turns around it: the question in one turn and its answer in the next
/// share the meaning, often not the words; rows whose storage order is arbitrary (facts)
/// gain nothing from their neighbours, and their namespace's coherence is about 0.
fn with_context<C: Candidates>(info: &C, weight: f64, cands: &mut HashMap<u64, Fused>) {
    let fused: HashMap<u64, f64> = cands.iter().map(|(r, c)| (*r, c.score)).collect();
    let mut gates: HashMap<usize, f64> = HashMap::new();
    for (key, c) in cands.iter_mut() {
        let gate = *gates
            .entry(c.source)
            .or_insert_with(|| context_gate(info.coherence(c.source)));
        if gate == 0.0 {
            continue;
        }
        let best = info
            .neighbours(*key)
            .into_iter()
            .flatten()
            .filter_map(|x| fused.get(&x).copied())
            .reduce(f64::max);
        if let Some(b) = best {
            c.score += gate * weight * b;
        }
    }
}

/// `score / best * (0.8 + 0.2 * quality / max_quality)`. Scores that can be negative (a
/// cosine or inner-product vector leg alone) are min-max normalised instead of divided by the
/// best; a max quality of 0 leaves the factor at 1.
fn rerank<C: Candidates>(info: &C, now: Micros, cands: &mut HashMap<u64, Fused>) {
    let quality = |key: u64| info.standing(key).map_or(0.0, |s| s.quality(now));
    let qs: Vec<(u64, f64)> = cands.keys().map(|r| (*r, quality(*r))).collect();
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
    for (key, q) in qs {
        let factor = if max_q > 0.0 {
            0.8 + 0.2 * q / max_q
        } else {
            1.0
        };
        if let Some(c) = cands.get_mut(&key) {
            c.score = norm(c.score) * factor;
        }
    }
}

/// The best candidate per content fingerprint, in order, stopping once `k` are kept.
/// Candidates are told apart by a hash of the fingerprint; two with the same hash are
/// compared by the full fingerprints.
fn dedup<C: Candidates>(info: &C, order: Vec<(u64, Fused)>, k: usize) -> Result<Vec<(u64, Fused)>> {
    let mut kept: Vec<(u64, Fused)> = Vec::with_capacity(k);
    let mut by_hash: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut fingerprints: HashMap<u64, String> = HashMap::new();
    let mut fp = |key: u64| -> Result<String> {
        if let Some(f) = fingerprints.get(&key) {
            return Ok(f.clone());
        }
        let f = info.fingerprint(key)?;
        fingerprints.insert(key, f.clone());
        Ok(f)
    };
    for (key, c) in order {
        if kept.len() >= k {
            break;
        }
        let same = by_hash.entry(info.fingerprint_hash(key)).or_default();
        let mut dup = false;
        for other in same.iter() {
            if fp(*other)? == fp(key)? {
                dup = true;
                break;
            }
        }
        if !dup {
            same.push(key);
            kept.push((key, c));
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::keyword_weight;

    #[test]
    fn a_keyword_leg_counts_by_its_best_score() {
        assert!((keyword_weight(0.2, 0.2) - 0.5).abs() < 1e-12);
        // a name in every row of the namespace (BM25 ~0.06) counts for little
        assert!(keyword_weight(0.06, 0.2) < 0.25);
        // one word that tells rows apart (a fifth of them: 1.58 ln 5 ~ 2.5) keeps nearly all
        assert!(keyword_weight(2.5, 0.2) > 0.92);
        assert!(keyword_weight(10.0, 0.2) > 0.98);
        // 0 = the bare convex formula; a non-positive best score counts nothing
        assert!((keyword_weight(0.04, 0.0) - 1.0).abs() < f64::EPSILON);
        assert!(keyword_weight(0.0, 0.2).abs() < f64::EPSILON);
        assert!(keyword_weight(-1.0, 0.2).abs() < f64::EPSILON);
    }
}
