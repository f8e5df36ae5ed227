//! Search planning: which plan a vector search runs for its filter (every row passes, an
//! exact scan of the passing keys, or the graph with the predicate), and the keyword search
//! with the filter inside tantivy's top-k loop.

use rayon::prelude::*;

use super::reads::{matching_map, scored};
use super::tx::validate_vector;
use super::{Engine, State};
use crate::columns::Namespace;
use crate::error::Result;
use crate::filter::Predicate;
use crate::limits;
use crate::pool::pool;
use crate::types::{FilterSpec, Scored};
use crate::vector::Plan;

impl Engine {
    pub fn vector_search(
        &self,
        ns: &str,
        query: &[f32],
        spec: &FilterSpec,
        k: usize,
    ) -> Result<Vec<Scored>> {
        Ok(self.vector_search_many(ns, &[query], spec, k)?.remove(0))
    }

    /// Vector search of several queries, spread over threads.
    pub fn vector_search_many(
        &self,
        ns: &str,
        queries: &[&[f32]],
        spec: &FilterSpec,
        k: usize,
    ) -> Result<Vec<Vec<Scored>>> {
        limits::k(k)?;
        limits::at_most(
            "number of query vectors",
            u64::try_from(queries.len()).unwrap_or(u64::MAX),
            limits::MAX_QUERIES,
        )?;
        self.read(|inner, st, snap| {
            for q in queries {
                validate_vector(q, inner.dims)?;
            }
            vector_hits(st, ns, queries, spec, k)?
                .into_iter()
                .map(|hits| scored(st, snap, hits))
                .collect()
        })
    }

    /// Keyword (BM25) search: best `k` rows of `ns` passing the filter.
    pub fn keyword_search(
        &self,
        ns: &str,
        query: &str,
        spec: &FilterSpec,
        k: usize,
    ) -> Result<Vec<Scored>> {
        limits::k(k)?;
        limits::query(query)?;
        self.read(|_, st, snap| scored(st, snap, keyword_hits(st, ns, query, spec, k)?))
    }
}

/// The vector leg: for each query, the best `k` (row id, score) of `ns` passing `spec`
/// (queries already validated), spread over threads when there are several.
pub(super) fn vector_hits(
    st: &State,
    ns: &str,
    queries: &[&[f32]],
    spec: &FilterSpec,
    k: usize,
) -> Result<Vec<Vec<(u64, f64)>>> {
    let vectors = st.vectors()?;
    let Some(n) = st.cols.namespaces.get(ns) else {
        return Ok(vec![Vec::new(); queries.len()]);
    };
    let pred = Predicate::new(spec, n);
    let k = k.min(n.vectors); // never allocate for more hits than rows
    let pred_fn = |vkey: u64| -> bool {
        st.cols
            .by_vkey
            .get(&vkey)
            .is_some_and(|rid| st.cols.rows.get(rid).is_some_and(|c| pred.matches(*rid, c)))
    };
    // ascending, as a compact scan walks them (see `vector::compact`)
    let all_keys = || match pred.exact_vector_keys() {
        Some(keys) => keys,
        None => {
            let mut keys = matching_map(st, n, &pred, |_, c| c.vkey);
            keys.sort_unstable();
            keys
        }
    };
    let plan = if pred.is_trivial() {
        Plan::All {
            all_keys: &all_keys,
        }
    } else if pred.candidate_count() <= vectors.tuning().exact_max {
        Plan::Keys(all_keys())
    } else {
        Plan::Predicate {
            pred: &pred_fn,
            all_keys: &all_keys,
            selectivity: selectivity(st, n, &pred),
        }
    };
    let run = |q: &&[f32]| -> Result<Vec<(u64, f64)>> {
        let hits = vectors.search(ns, q, k, &plan)?;
        Ok(hits
            .into_iter()
            .filter_map(|(vk, score)| Some((*st.cols.by_vkey.get(&vk)?, score)))
            .collect())
    };
    if queries.len() > 1 {
        pool()?.install(|| queries.par_iter().map(run).collect())
    } else {
        queries.iter().map(run).collect()
    }
}

/// The keyword leg: the BM25 best `k` (row id, score) of `ns` passing `spec`.
pub(super) fn keyword_hits(
    st: &State,
    ns: &str,
    query: &str,
    spec: &FilterSpec,
    k: usize,
) -> Result<Vec<(u64, f64)>> {
    Ok(keyword_hits_many(st, &[(ns, spec)], query, k)?.remove(0))
}

/// The keyword leg of several namespaces, each under its own filter, in one pass over the
/// keyword index (see `KeywordIndex::search_many`): per `(namespace, filter)`, the BM25 best
/// `k` (row id, score) passing it, as `keyword_hits` of each alone would return.
pub(super) fn keyword_hits_many(
    st: &State,
    sources: &[(&str, &FilterSpec)],
    query: &str,
    k: usize,
) -> Result<Vec<Vec<(u64, f64)>>> {
    let keyword = st.keyword()?;
    // the namespaces that exist, searched together; the others find nothing
    let mut slots = Vec::with_capacity(sources.len());
    let (mut names, mut preds): (Vec<&str>, Vec<Predicate<'_>>) = (Vec::new(), Vec::new());
    for (ns, spec) in sources {
        slots.push(st.cols.namespaces.get(*ns).map(|n| {
            names.push(ns);
            preds.push(Predicate::new(spec, n));
            names.len() - 1
        }));
    }
    let sizes: Vec<usize> = names
        .iter()
        .map(|ns| st.cols.namespaces[*ns].ids.len())
        .collect();
    let rows: usize = sizes.iter().sum();
    let k = k.min(sizes.iter().copied().max().unwrap_or(0)); // never allocate for more hits than rows

    // a namespace holding every row needs no per-document namespace check
    let sole = names.len() == 1 && rows == st.cols.rows.len();
    let accept = |rid: u64, ver: u64| -> Option<usize> {
        let c = st.cols.rows.get(&rid).filter(|c| c.version == ver)?;
        let g = if sole {
            0
        } else {
            names.iter().position(|ns| *ns == c.namespace)?
        };
        preds[g].matches(rid, c).then_some(g)
    };
    let dominant = 2 * rows >= st.cols.rows.len();
    // tags passing under a tenth of the namespaces: let tantivy intersect their postings
    let candidates: usize = preds.iter().map(Predicate::candidate_count).sum();
    let tags = match preds.first() {
        Some(p)
            if !p.tags().is_empty()
                && 10 * candidates < rows
                && preds.iter().all(|q| q.tags() == p.tags()) =>
        {
            p.tags()
        }
        _ => &[][..],
    };
    // a filter every row passes rejects only documents of rows changed since the index's
    // last commit, when the query's documents are all of the namespace
    let optimistic = names.len() == 1 && preds[0].is_trivial() && (sole || !dominant);
    let mut found = keyword
        .search_many(&names, query, k, dominant, tags, &accept, optimistic)?
        .into_iter();
    let mut hits: Vec<Vec<(u64, f64)>> = Vec::with_capacity(sources.len());
    for slot in slots {
        hits.push(match slot {
            Some(_) => found.next().unwrap_or_default(),
            None => Vec::new(),
        });
    }
    Ok(hits)
}

/// Estimated share of the namespace's rows passing `pred`: from the posting list when the
/// filter has one, else from a sample of rows spread over the namespace.
fn selectivity(st: &State, n: &Namespace, pred: &Predicate<'_>) -> f64 {
    const SAMPLE: usize = 256;
    let total = n.ids.len().max(1);
    let bound = pred.candidate_count();
    #[allow(clippy::cast_precision_loss, reason = "a ratio of row counts")]
    let posting = bound as f64 / total as f64;
    if bound < total {
        return posting;
    }
    // no posting list: test the first rows (cheap; id order is unrelated to most filters)
    let (mut seen, mut passed) = (0usize, 0usize);
    for rid in n.ids.values().take(SAMPLE) {
        seen += 1;
        passed += usize::from(st.cols.rows.get(rid).is_some_and(|c| pred.matches(*rid, c)));
    }
    #[allow(clippy::cast_precision_loss, reason = "a ratio of row counts")]
    let sampled = (passed as f64 + 0.5) / (seen as f64 + 1.0);
    sampled
}
