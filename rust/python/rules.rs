//! The core's ranking rules for a backend written in Python (the PostgreSQL store), so each
//! rule keeps one implementation: `memini._core.fuse` (recall's fusion, `crate::fusion`),
//! `memini._core.coherence_sample`/`coherence` (a namespace's coherence, which weighs its
//! neighbour context, `crate::engine::coherence`) and `memini._core.vector_scores` (the exact
//! f64 vector score, `crate::vector::Scorer`).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

use super::convert;
use super::errors::{run, to_py};
use crate::fusion::{fuse as fuse_rule, Candidates, Rule};
use crate::rank::Standing;
use crate::types::{Metric, Micros};
use crate::vector::Scorer;
use crate::{Error, Result};

/// The rows the legs' hits point into, as columns: id, tier, importance, confidence,
/// updated_at, last_accessed_at, access_count, fingerprint, and the row's place in its
/// namespace's timeline (seq) with those of its previous and next rows (None: unknown).
/// A row found by both legs may be there twice: the first row of an id is its candidate.
pub type PyRows = (
    Vec<String>,
    Vec<String>,
    Vec<f64>,
    Vec<Option<f64>>,
    Vec<Micros>,
    Vec<Micros>,
    Vec<i64>,
    Vec<String>,
    Vec<i64>,
    Vec<Option<i64>>,
    Vec<Option<i64>>,
);

/// A fused result: (candidate index, score, vector score, keyword score, source index).
pub type PyFused = (u64, f64, Option<f64>, Option<f64>, usize);

struct Listed {
    ids: Vec<String>,
    standings: Vec<Standing>,
    neighbours: Vec<[Option<u64>; 2]>,
    fingerprints: Vec<String>,
    coherence: Vec<f64>,
}

fn at(key: u64) -> usize {
    usize::try_from(key).unwrap_or(usize::MAX)
}

impl Candidates for Listed {
    fn id(&self, key: u64) -> &str {
        &self.ids[at(key)]
    }
    fn neighbours(&self, key: u64) -> [Option<u64>; 2] {
        self.neighbours[at(key)]
    }
    fn coherence(&self, source: usize) -> f64 {
        self.coherence.get(source).copied().unwrap_or(0.0)
    }
    fn standing(&self, key: u64) -> Option<Standing> {
        Some(self.standings[at(key)])
    }
    fn fingerprint_hash(&self, key: u64) -> u64 {
        let mut h = DefaultHasher::new();
        self.fingerprints[at(key)].hash(&mut h);
        h.finish()
    }
    fn fingerprint(&self, key: u64) -> Result<String> {
        Ok(self.fingerprints[at(key)].clone())
    }
}

/// Fuses two legs' hits ((row index, score, source index), any order) over the `rows`
/// they point into with the embedded recall's rule; returns the `k` best as (row index of
/// the candidate's first row, score, vector score, keyword score, source index), best
/// first. A row's neighbours are the candidates at its previous and next seq.
/// `coherence[i]` is source `i`'s namespace's coherence (missing: 0, no neighbour context).
#[pyfunction]
#[pyo3(signature = (rows, vector, keyword, fusion, fusion_param, context, coherence, quality, now, dedup, k))]
#[allow(
    clippy::too_many_arguments,
    reason = "recall's settings, checked by the facade"
)]
pub fn fuse(
    py: Python<'_>,
    rows: PyRows,
    vector: Vec<(u64, f64, usize)>,
    keyword: Vec<(u64, f64, usize)>,
    fusion: &str,
    fusion_param: f64,
    context: f64,
    coherence: Vec<f64>,
    quality: bool,
    now: Micros,
    dedup: bool,
    k: usize,
) -> PyResult<Vec<PyFused>> {
    let (
        ids,
        tiers,
        importance,
        confidence,
        updated,
        accessed,
        count,
        fingerprints,
        seq,
        prev,
        next,
    ) = rows;
    let n = ids.len();
    let lengths = [
        tiers.len(),
        importance.len(),
        confidence.len(),
        updated.len(),
        accessed.len(),
        count.len(),
        fingerprints.len(),
        seq.len(),
        prev.len(),
        next.len(),
    ];
    if lengths.iter().any(|&len| len != n) {
        return Err(to_py(
            py,
            Error::invalid(format!(
                "fuse: the row columns differ in length ({n} ids, then {lengths:?})"
            )),
        ));
    }
    if vector.iter().chain(&keyword).any(|h| at(h.0) >= n) {
        return Err(to_py(
            py,
            Error::invalid(format!(
                "fuse: a row index is out of range (there are {n} rows)"
            )),
        ));
    }
    let fusion = convert::fusion(py, fusion, fusion_param)?;
    // one candidate per id (its first row), and the candidates by seq for the neighbours
    let mut first: HashMap<&str, u64> = HashMap::with_capacity(n);
    let canon: Vec<u64> = (0..n)
        .map(|r| {
            *first
                .entry(ids[r].as_str())
                .or_insert(u64::try_from(r).unwrap_or(u64::MAX))
        })
        .collect();
    let remap = |hits: Vec<(u64, f64, usize)>| -> Vec<(u64, f64, usize)> {
        hits.into_iter()
            .map(|(r, s, src)| (canon[at(r)], s, src))
            .collect()
    };
    let (vector, keyword) = (remap(vector), remap(keyword));
    let at_seq: HashMap<i64, u64> = vector
        .iter()
        .chain(&keyword)
        .map(|h| (seq[at(h.0)], h.0))
        .collect();
    let mut standings = Vec::with_capacity(n);
    for r in 0..n {
        standings.push(Standing {
            tier: convert::tier(py, &tiers[r])?,
            importance: importance[r],
            confidence: confidence[r],
            updated_at: Some(updated[r]),
            last_accessed_at: Some(accessed[r]),
            access_count: count[r],
        });
    }
    let near = |s: Option<i64>| s.and_then(|s| at_seq.get(&s).copied());
    let info = Listed {
        neighbours: prev
            .iter()
            .zip(&next)
            .map(|(p, x)| [near(*p), near(*x)])
            .collect(),
        ids,
        standings,
        fingerprints,
        coherence,
    };
    let rule = Rule {
        fusion,
        context,
        keyword_half: 0.0,
        quality_at: quality.then_some(now),
        dedup,
        k,
    };
    let order = run(py, || fuse_rule(&info, vector, keyword, &rule))?;
    Ok(order
        .into_iter()
        .map(|(key, c)| (key, c.score, c.vector, c.keyword, c.source))
        .collect())
}

/// The API's score of each row of `vectors` (2-D float32) for `query` under `metric`
/// ("l2": 1/(1+distance), "cos": cosine, "ip": inner product), exactly as the embedded
/// store computes it (f64, a fixed summation order).
#[pyfunction]
pub fn vector_scores(
    py: Python<'_>,
    metric: &str,
    query: PyReadonlyArray1<'_, f32>,
    vectors: PyReadonlyArray2<'_, f32>,
) -> PyResult<Vec<f64>> {
    let metric = match metric {
        "l2" => Metric::L2,
        "cos" => Metric::Cos,
        "ip" => Metric::Ip,
        other => {
            return Err(to_py(
                py,
                Error::invalid(format!("unknown metric {other:?} (use l2, cos or ip)")),
            ))
        }
    };
    let q = query.as_slice()?;
    let vs = vectors.as_array();
    if vs.ncols() != q.len() {
        return Err(to_py(
            py,
            Error::DimensionMismatch(format!(
                "vectors have {} dims, the query {}",
                vs.ncols(),
                q.len()
            )),
        ));
    }
    let scorer = Scorer::new(metric, q);
    Ok(vs
        .rows()
        .into_iter()
        .map(|row| match row.as_slice() {
            Some(r) => scorer.score(r),
            None => scorer.score(&row.to_vec()),
        })
        .collect())
}

/// The timeline positions (0-based, ascending, a position may repeat) whose vectors measure
/// the coherence of a namespace of `n` rows.
#[pyfunction]
#[must_use]
pub fn coherence_sample(n: usize) -> Vec<usize> {
    crate::engine::coherence::sample(n)
}

/// The coherence of a namespace of `n` rows from the vectors at its `coherence_sample`
/// positions, in that order (None: a row without a vector).
#[pyfunction]
pub fn coherence(
    py: Python<'_>,
    n: usize,
    vectors: Vec<Option<PyReadonlyArray1<'_, f32>>>,
) -> PyResult<f64> {
    let want = crate::engine::coherence::sample(n).len();
    if vectors.len() != want {
        return Err(to_py(
            py,
            Error::invalid(format!(
                "coherence: {} vectors given for a sample of {want} positions",
                vectors.len()
            )),
        ));
    }
    let owned: Vec<Option<Vec<f32>>> = vectors
        .iter()
        .map(|v| v.as_ref().map(|a| a.as_array().to_vec()))
        .collect();
    Ok(py.detach(|| crate::engine::coherence::of_sample(n, &owned)))
}
