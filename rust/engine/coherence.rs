//! A namespace's coherence: how much more its time-adjacent rows resemble each other than
//! random pairs of its rows, from the stored vectors. Recall weighs neighbour context by it
//! (`crate::fusion::context_gate`): dialogue turns stored in order resemble their neighbours
//! (LoCoMo dev conversations: 0.07-0.16), the same turns shuffled and facts stored in
//! whatever order they were extracted do not (-0.02-0.01).
//!
//! Measured on a sample: `PAIRS` adjacent pairs spread evenly along the timeline (their
//! mean cosine) against every pair of those pairs' first rows (the mean cosine of rows far
//! apart, from the sum of their unit vectors). Cached in the namespace and measured again
//! once its row count has moved by more than a sixteenth: a recall pays for it at most once
//! per such change (512 vector reads), and on no other recall.

use crate::columns::Namespace;
use crate::error::Result;
use crate::rows::Snapshot;

/// Adjacent pairs sampled along the timeline.
const PAIRS: usize = 256;

/// `ns`'s coherence, measured again when the cached one is stale.
pub(super) fn coherence(ns: &Namespace, snap: &Snapshot) -> Result<f64> {
    let n = ns.timeline.len();
    let mut cached = ns.coherence.lock();
    if let Some((at, c)) = *cached {
        if n.abs_diff(at) <= at / 16 {
            return Ok(c);
        }
    }
    let c = measure(ns, snap)?;
    *cached = Some((n, c));
    Ok(c)
}

/// Mean cosine of the sampled adjacent pairs minus that of far pairs; 0 below 8 rows (too
/// few to tell them apart).
fn measure(ns: &Namespace, snap: &Snapshot) -> Result<f64> {
    let n = ns.timeline.len();
    let mut rids = Vec::with_capacity(2 * PAIRS);
    let mut want = sample(n).into_iter().peekable();
    for (pos, (_, rid)) in ns.timeline.iter().enumerate() {
        while want.next_if_eq(&pos).is_some() {
            rids.push(*rid);
        }
        if want.peek().is_none() {
            break;
        }
    }
    Ok(of_sample(n, &snap.vectors(&rids)?))
}

/// The sampled timeline positions of a namespace of `n` rows, ascending: the rows of each
/// adjacent pair, `p_j` then `p_j + 1` (with a step of 1 a row is in two pairs and listed
/// twice); empty below 8 rows.
#[must_use]
pub fn sample(n: usize) -> Vec<usize> {
    if n < 8 {
        return Vec::new();
    }
    let step = ((n - 1) / PAIRS).max(1);
    (0..n - 1)
        .step_by(step)
        .take(PAIRS)
        .flat_map(|p| [p, p + 1])
        .collect()
}

/// The coherence of a namespace of `n` rows from the vectors at its [`sample`] positions, in
/// that order (None: a row without a vector). One rule for every backend: the PostgreSQL
/// store reads the sample with SQL and measures it here (`memini._core.coherence`).
#[must_use]
pub fn of_sample(n: usize, vectors: &[Option<Vec<f32>>]) -> f64 {
    if n < 8 {
        return 0.0;
    }
    let step = ((n - 1) / PAIRS).max(1);
    let firsts = vectors.len() / 2;
    let unit = |v: &Option<Vec<f32>>| -> Option<Vec<f64>> {
        let v: Vec<f64> = v.as_ref()?.iter().map(|x| f64::from(*x)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        (norm > 0.0).then(|| v.into_iter().map(|x| x / norm).collect())
    };
    let units: Vec<Option<Vec<f64>>> = vectors.iter().map(unit).collect();
    // near: the adjacent pairs' cosines; with a step of 1 every pair but the last joins two
    // first rows, and is left out of the far pairs below
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let (mut near, mut pairs, mut inner, mut inner_pairs) = (0.0, 0u32, 0.0, 0u32);
    for (j, pair) in units.chunks(2).enumerate() {
        if let [Some(a), Some(b)] = pair {
            let c = dot(a, b);
            (near, pairs) = (near + c, pairs + 1);
            if step == 1 && j + 1 < firsts {
                (inner, inner_pairs) = (inner + c, inner_pairs + 1);
            }
        }
    }
    // far: every other pair of the first rows (spread along the timeline), from the sum of
    // their unit vectors: |sum|^2 = count + 2 * (sum of their pairs' cosines)
    let rows: Vec<&Vec<f64>> = units.iter().step_by(2).flatten().collect();
    let mut sum = vec![0.0; rows.first().map_or(0, |r| r.len())];
    for u in &rows {
        for (s, x) in sum.iter_mut().zip(u.iter()) {
            *s += x;
        }
    }
    #[allow(clippy::cast_precision_loss, reason = "a sample's size")]
    let c = rows.len() as f64;
    let far_pairs = c * (c - 1.0) / 2.0 - f64::from(inner_pairs);
    if pairs == 0 || far_pairs < 1.0 {
        return 0.0;
    }
    let far = ((dot(&sum, &sum) - c) / 2.0 - inner) / far_pairs;
    near / f64::from(pairs) - far
}
