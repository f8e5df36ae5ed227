//! The search: the tantivy query, and one walk over the delta and the committed segments.
//!
//! - The namespace is a required, zero-scored term (left out when the namespaces searched hold
//!   most of the index, where `accept` checks it), so tenants never match each other's rows.
//!   A filter's rare tags become required, zero-scored terms too: tantivy intersects posting
//!   lists instead of scoring every document that matches the words. Scores never depend on
//!   required terms.
//! - Every document's row id and version come from fast fields; the callback drops documents
//!   that are deleted, stale (an older version of a row), superseded by the delta or rejected
//!   by the filter inside the top-k loop, so they never take a result slot.
//! - The delta's documents are scored here with tantivy's own `Bm25Weight` over the combined
//!   statistics and merged into the same heaps; equal scores rank by row id wherever the
//!   documents are.

use std::collections::HashMap;

use tantivy::fieldnorm::FieldNormReader;
use tantivy::query::{
    Bm25Weight, BooleanQuery, ConstScoreQuery, EnableScoring, Occur, Query, TermQuery,
};
use tantivy::schema::IndexRecordOption;
use tantivy::Term;

use super::analysis;
use super::heaps::{Heaps, Hit};
use super::scope::Scoped;
use super::stats::Combined;
use super::{kw_err, KeywordIndex};
use crate::error::Result;

impl KeywordIndex {
    /// The tantivy query of [`Self::search_many`]: the words OR-ed, and the required,
    /// zero-scored tag and namespace terms.
    fn query(
        &self,
        terms: &[(String, Term)],
        namespaces: &[&str],
        dominant: bool,
        tags: &[u64],
    ) -> Box<dyn Query> {
        let f = self.shared.fields;
        let words: Box<dyn Query> = Box::new(BooleanQuery::new(
            terms
                .iter()
                .map(|(_, t)| {
                    let q: Box<dyn Query> =
                        Box::new(TermQuery::new(t.clone(), IndexRecordOption::WithFreqs));
                    (Occur::Should, q)
                })
                .collect(),
        ));
        let required = |q: Box<dyn Query>| -> (Occur, Box<dyn Query>) {
            (Occur::Must, Box::new(ConstScoreQuery::new(q, 0.0)))
        };
        let term =
            |t: Term| -> Box<dyn Query> { Box::new(TermQuery::new(t, IndexRecordOption::Basic)) };
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = tags
            .iter()
            .map(|h| required(term(Term::from_field_u64(f.tag, *h))))
            .collect();
        if !dominant {
            let name = |ns: &&str| term(Term::from_field_text(f.ns, ns));
            clauses.push(required(match namespaces {
                [one] => name(one),
                many => Box::new(BooleanQuery::new(
                    many.iter().map(|ns| (Occur::Should, name(ns))).collect(),
                )),
            }));
        }
        if clauses.is_empty() {
            words
        } else {
            clauses.push((Occur::Must, words));
            Box::new(BooleanQuery::new(clauses))
        }
    }

    /// BM25 top-`k` rows of `namespace` for `query` among the documents `accept(rid, version)`
    /// keeps (it must check the namespace), under the namespace's statistics; best first, ties
    /// by row id. [`Self::search_many`] of one namespace.
    pub fn search(
        &self,
        namespace: &str,
        query: &str,
        k: usize,
        dominant: bool,
        tags: &[u64],
        accept: &dyn Fn(u64, u64) -> bool,
    ) -> Result<Vec<(u64, f64)>> {
        let group = |rid: u64, ver: u64| accept(rid, ver).then_some(0);
        Ok(self
            .search_many(&[namespace], query, k, dominant, tags, &group, false)?
            .remove(0))
    }

    /// BM25 top-`k` rows of each of `namespaces` for `query`, in one pass over the postings:
    /// `accept(rid, version)` names the namespace (its index in `namespaces`) whose results a
    /// document may join, or None to drop it (it must check the namespace). Per namespace, best
    /// first, ties by row id, scored with the statistics of all the namespaces searched
    /// (`scope`): what one search per namespace under those statistics would return, for the
    /// query analysis, the weights and the posting walk paid once. (With
    /// and without the namespace terms, tantivy sums a document's term scores in a different
    /// order: its f32 score may differ in the last bit.)
    ///
    /// `dominant`: the namespaces hold most of the index. Then the required namespace terms
    /// are left out: they would disable tantivy's block-max WAND pruning for the whole query,
    /// while the few other tenants' documents they keep out are dropped by `accept` anyway.
    /// `tags`: tag hashes every hit must carry, given when they pass few rows (the
    /// intersection is then cheaper than scoring every matching document); `accept` still
    /// applies the whole filter. Required terms score 0, so scores never depend on them.
    /// `optimistic` (one namespace only): `accept` keeps almost every document (the filter
    /// passes every row, and a document the index still holds for a row deleted or changed
    /// since its last commit is rare). It is then asked only of the final hits, not of each
    /// document entering the heap (a row lookup each, ~40 a query); when one of them fails,
    /// the walk runs again asking it of every document. The hits are the same either way: the
    /// best `k` of all documents, when `accept` keeps them all, are the best `k` it keeps.
    #[allow(
        clippy::too_many_arguments,
        reason = "the query and how its documents are kept, each its own argument"
    )]
    pub fn search_many(
        &self,
        namespaces: &[&str],
        query: &str,
        k: usize,
        dominant: bool,
        tags: &[u64],
        accept: &dyn Fn(u64, u64) -> Option<usize>,
        optimistic: bool,
    ) -> Result<Vec<Vec<(u64, f64)>>> {
        let terms = analysis::terms(self.shared.fields.text, query);
        if terms.is_empty() || k == 0 || namespaces.is_empty() {
            return Ok(vec![Vec::new(); namespaces.len()]);
        }
        let f = self.shared.fields;
        let query = self.query(&terms, namespaces, dominant, tags);
        let delta = self.shared.delta.read();
        let searcher = delta.searcher.clone();
        let all = Combined {
            searcher: &searcher,
            delta: &delta,
            text: f.text,
        };
        let stats = Scoped::new(all, f.ns, namespaces, &terms)?;
        let mut heaps = Heaps::new(namespaces.len(), k);

        // the delta: scored here with tantivy's BM25 weights over the combined statistics
        let mut delta_scores: HashMap<u64, f32> = HashMap::new();
        for (text, term) in &terms {
            let Some(posting) = delta.postings.get(text) else {
                continue;
            };
            let weight = Bm25Weight::for_terms(&stats, std::slice::from_ref(term))
                .map_err(|e| kw_err("bm25", e))?;
            for (rid, tf) in posting {
                let d = &delta.docs[rid];
                if namespaces.contains(&d.ns.as_str()) {
                    *delta_scores.entry(*rid).or_default() +=
                        weight.score(FieldNormReader::fieldnorm_to_id(d.tokens), *tf);
                }
            }
        }
        for (rid, score) in delta_scores {
            let version = delta.docs[&rid].version;
            if let Some(g) = accept(rid, version) {
                heaps.push(g, Hit(score, rid, version));
            }
        }

        // committed segments: documents of rows in the delta are superseded by it
        let weight = query
            .weight(EnableScoring::enabled_from_statistics_provider(
                &stats, &searcher,
            ))
            .map_err(|e| kw_err("query", e))?;
        // `check`: ask `accept` of each document entering a heap (else put it in the first)
        let walk = |mut heaps: Heaps, check: bool| -> Result<Heaps> {
            for seg in searcher.segment_readers() {
                let (rids, vers) = self.shared.columns(seg)?;
                let alive = seg.alive_bitset();
                let start = heaps.threshold();
                let mut cb = |doc: u32, score: f32| -> f32 {
                    if alive.is_some_and(|a| !a.is_alive(doc)) {
                        return heaps.threshold();
                    }
                    let Some(rid) = rids.first(doc) else {
                        return heaps.threshold();
                    };
                    if !heaps.admits(score, rid) || delta.docs.contains_key(&rid) {
                        return heaps.threshold();
                    }
                    let Some(ver) = vers.first(doc) else {
                        return heaps.threshold();
                    };
                    let group = if check { accept(rid, ver) } else { Some(0) };
                    if let Some(g) = group {
                        heaps.push(g, Hit(score, rid, ver));
                    }
                    heaps.threshold()
                };
                weight
                    .for_each_pruning(start, seg, &mut cb)
                    .map_err(|e| kw_err("search", e))?;
            }
            Ok(heaps)
        };
        if optimistic && namespaces.len() == 1 {
            let found = walk(heaps.clone(), false)?;
            if found
                .each
                .iter()
                .flatten()
                .all(|h| accept(h.1, h.2).is_some())
            {
                return Ok(found.into_hits());
            }
        }
        Ok(walk(heaps, true)?.into_hits())
    }
}
