//! BM25 statistics over the namespaces a search covers: their document count and each query
//! word's document frequency among their documents (the average document length stays the
//! index's). A word in nearly every row of the namespaces searched (a user's name in their
//! own facts) then weighs nearly nothing there, however rare it is in the rest of the index;
//! and no tenant's rows move another tenant's scores.
//!
//! Counted as the corpus-wide statistics are (`stats`): committed documents, deleted ones
//! included until a merge, plus the delta's, plus the dropped segments' (counted per
//! namespace when tantivy drops them), so a row's score still does not change when it is
//! folded. When the namespaces hold every document the corpus-wide statistics are used as
//! they are.

use std::collections::HashMap;

use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocSet, SegmentReader, Term, TERMINATED};

use super::kw_err;
use super::stats::{Combined, Counts};
use crate::error::Result;

/// The statistics of a search over some namespaces.
pub(super) struct Scoped<'a> {
    all: Combined<'a>,
    /// None: the namespaces hold every document (the corpus-wide statistics apply).
    scope: Option<Scope>,
}

struct Scope {
    docs: u64,
    tokens: u64,
    /// The query's text terms -> documents of the namespaces holding them.
    doc_freqs: HashMap<Term, u64>,
}

impl<'a> Scoped<'a> {
    /// The statistics of `namespaces` (their names in field `ns`) for the text terms `terms`.
    pub(super) fn new(
        all: Combined<'a>,
        ns: Field,
        namespaces: &[&str],
        terms: &[(String, Term)],
    ) -> Result<Self> {
        let names: Vec<Term> = namespaces
            .iter()
            .map(|n| Term::from_field_text(ns, n))
            .collect();
        let in_scope = |d: &str| namespaces.contains(&d);
        let dropped: Vec<&Counts> = namespaces
            .iter()
            .filter_map(|n| all.delta.dropped.namespaces.get(*n))
            .collect();
        let mut docs = all.delta.docs.values().filter(|d| in_scope(&d.ns)).count() as u64
            + dropped.iter().map(|c| c.docs).sum::<u64>();
        for name in &names {
            docs += all
                .searcher
                .doc_freq(name)
                .map_err(|e| kw_err("stats", e))?;
        }
        let total = Bm25StatisticsProvider::total_num_docs(&all).map_err(|e| kw_err("stats", e))?;
        if docs == 0 || docs >= total {
            return Ok(Self { all, scope: None });
        }
        let mut doc_freqs = HashMap::with_capacity(terms.len());
        for (text, term) in terms {
            let delta = all.delta.postings.get(text).map_or(0, |p| {
                p.keys()
                    .filter(|rid| all.delta.docs.get(rid).is_some_and(|d| in_scope(&d.ns)))
                    .count() as u64
            });
            let gone: u64 = dropped.iter().filter_map(|c| c.doc_freqs.get(text)).sum();
            doc_freqs.insert(term.clone(), delta + gone + all.joint_docs(term, &names)?);
        }
        let tokens = Bm25StatisticsProvider::total_num_tokens(&all, all.text)
            .map_err(|e| kw_err("stats", e))?;
        // the index's average length: its tokens scaled to the namespaces' share of documents
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a token count, far below 2^53"
        )]
        let tokens = (tokens as f64 * docs as f64 / total as f64).round() as u64;
        Ok(Self {
            all,
            scope: Some(Scope {
                docs,
                tokens,
                doc_freqs,
            }),
        })
    }
}

impl Combined<'_> {
    /// Committed documents (deleted ones included) holding `term` and one of `names`.
    fn joint_docs(&self, term: &Term, names: &[Term]) -> Result<u64> {
        let mut n = 0u64;
        for seg in self.searcher.segment_readers() {
            let words = seg
                .inverted_index(self.text)
                .map_err(|e| kw_err("stats", e))?;
            let spaces = seg
                .inverted_index(names[0].field())
                .map_err(|e| kw_err("stats", e))?;
            for name in names {
                let postings = |index: &tantivy::InvertedIndexReader, t: &Term| {
                    index
                        .read_postings(t, IndexRecordOption::Basic)
                        .map_err(|e| kw_err("stats", e))
                };
                let (Some(mut a), Some(mut b)) =
                    (postings(&words, term)?, postings(&spaces, name)?)
                else {
                    continue;
                };
                if b.doc_freq() < a.doc_freq() {
                    std::mem::swap(&mut a, &mut b);
                }
                // walk the shorter list, seeking each of its documents in the longer
                let mut doc = a.doc();
                while doc != TERMINATED {
                    let other = b.seek(doc);
                    if other == TERMINATED {
                        break;
                    }
                    if other == doc {
                        n += 1;
                        doc = a.advance();
                    } else {
                        doc = a.seek(other);
                    }
                }
            }
        }
        Ok(n)
    }
}

impl Bm25StatisticsProvider for Scoped<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        match &self.scope {
            Some(s) if field == self.all.text => Ok(s.tokens),
            _ => Bm25StatisticsProvider::total_num_tokens(&self.all, field),
        }
    }
    fn total_num_docs(&self) -> tantivy::Result<u64> {
        match &self.scope {
            Some(s) => Ok(s.docs),
            None => Bm25StatisticsProvider::total_num_docs(&self.all),
        }
    }
    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        match self.scope.as_ref().and_then(|s| s.doc_freqs.get(term)) {
            Some(n) => Ok(*n),
            None => self.all.doc_freq(term),
        }
    }
}

/// The statistics of segment `seg` per namespace (all its documents, deleted ones included):
/// its text in field `text`, its namespaces in field `ns`.
pub(super) fn per_namespace(
    seg: &SegmentReader,
    text: Field,
    ns: Field,
) -> Result<HashMap<String, Counts>> {
    // each document's namespace (an index into `names`)
    let mut names: Vec<String> = Vec::new();
    let mut of_doc: Vec<Option<usize>> = vec![None; seg.max_doc() as usize];
    let spaces = seg.inverted_index(ns).map_err(|e| kw_err("segment", e))?;
    let mut terms = spaces.terms().stream().map_err(|e| kw_err("segment", e))?;
    while terms.advance() {
        let mut postings = spaces
            .read_postings_from_terminfo(terms.value(), IndexRecordOption::Basic)
            .map_err(|e| kw_err("segment", e))?;
        names.push(String::from_utf8_lossy(terms.key()).into_owned());
        let mut doc = postings.doc();
        while doc != TERMINATED {
            of_doc[doc as usize] = Some(names.len() - 1);
            doc = postings.advance();
        }
    }
    let mut counts: Vec<Counts> = names.iter().map(|_| Counts::default()).collect();
    for n in of_doc.iter().flatten() {
        counts[*n].docs += 1;
    }
    let words = seg.inverted_index(text).map_err(|e| kw_err("segment", e))?;
    let mut terms = words.terms().stream().map_err(|e| kw_err("segment", e))?;
    while terms.advance() {
        let term = String::from_utf8_lossy(terms.key()).into_owned();
        let mut postings = words
            .read_postings_from_terminfo(terms.value(), IndexRecordOption::Basic)
            .map_err(|e| kw_err("segment", e))?;
        let mut doc = postings.doc();
        while doc != TERMINATED {
            if let Some(n) = of_doc[doc as usize] {
                *counts[n].doc_freqs.entry(term.clone()).or_default() += 1;
            }
            doc = postings.advance();
        }
    }
    Ok(names.into_iter().zip(counts).collect())
}
