//! BM25 statistics: the committed segments, plus the delta, plus the dropped segments.
//!
//! - These statistics (document count, average length, document frequencies) are the whole
//!   index's; a search takes them over the namespaces it covers ([`super::scope`]).
//! - A row's score does not change when it is folded into tantivy: deleted documents stay in
//!   tantivy's statistics until a merge, exactly as the delta's additions do, and when tantivy
//!   drops a segment whose documents are all deleted its statistics are kept ([`Dropped`])
//!   until the reader picks up a merge (when scores change anyway).

use std::collections::HashMap;

use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::Field;
use tantivy::{Searcher, SegmentReader, Term};

use super::delta::Delta;
use super::kw_err;
use crate::error::Result;

/// The statistics of committed segments that tantivy dropped at a commit because all their
/// documents were deleted: until then they counted in the statistics, as every deleted
/// document does until a merge, and the scores keep counting them until the reader picks up
/// a merge (when scores change anyway). Without them, the fold that deletes the last
/// document of a segment would change every score.
#[derive(Default)]
pub(super) struct Dropped {
    /// Documents, deleted ones included.
    pub(super) docs: u64,
    /// Tokens of the text field.
    pub(super) tokens: u64,
    /// Text term -> number of documents holding it.
    pub(super) doc_freqs: HashMap<String, u64>,
    /// The same per namespace (for [`super::scope`]).
    pub(super) namespaces: HashMap<String, Counts>,
}

/// A set of documents' statistics: documents, and text term -> documents holding it.
#[derive(Default)]
pub(super) struct Counts {
    pub(super) docs: u64,
    pub(super) doc_freqs: HashMap<String, u64>,
}

impl Counts {
    fn merge(&mut self, other: Self) {
        self.docs += other.docs;
        for (term, n) in other.doc_freqs {
            *self.doc_freqs.entry(term).or_default() += n;
        }
    }
}

impl Dropped {
    /// Adds the statistics counted in `other`.
    pub(super) fn merge(&mut self, other: Self) {
        self.docs += other.docs;
        self.tokens += other.tokens;
        for (term, n) in other.doc_freqs {
            *self.doc_freqs.entry(term).or_default() += n;
        }
        for (ns, c) in other.namespaces {
            self.namespaces.entry(ns).or_default().merge(c);
        }
    }

    /// Adds the statistics of segment `seg` (all its documents, deleted ones included), its
    /// text in field `text` and its namespaces in field `ns`.
    pub(super) fn add(&mut self, seg: &SegmentReader, text: Field, ns: Field) -> Result<()> {
        for (name, c) in super::scope::per_namespace(seg, text, ns)? {
            self.namespaces.entry(name).or_default().merge(c);
        }
        let index = seg.inverted_index(text).map_err(|e| kw_err("segment", e))?;
        self.docs += u64::from(seg.max_doc());
        self.tokens += index.total_num_tokens();
        let mut terms = index.terms().stream().map_err(|e| kw_err("segment", e))?;
        while terms.advance() {
            let term = String::from_utf8_lossy(terms.key()).into_owned();
            *self.doc_freqs.entry(term).or_default() += u64::from(terms.value().doc_freq);
        }
        Ok(())
    }
}

/// BM25 statistics of the committed index plus the delta (and the dropped segments).
pub(super) struct Combined<'a> {
    pub(super) searcher: &'a Searcher,
    pub(super) delta: &'a Delta,
    /// The text field: the delta's tokens and terms are its.
    pub(super) text: Field,
}

impl Bm25StatisticsProvider for Combined<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let d = self.delta;
        let extra = if field == self.text {
            d.tokens + d.dropped.tokens
        } else {
            0
        };
        Ok(Bm25StatisticsProvider::total_num_tokens(self.searcher, field)? + extra)
    }
    fn total_num_docs(&self) -> tantivy::Result<u64> {
        let d = self.delta;
        Ok(Bm25StatisticsProvider::total_num_docs(self.searcher)?
            + d.docs.len() as u64
            + d.dropped.docs)
    }
    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let d = self.delta;
        let extra = match term.value().as_str() {
            Some(t) if term.field() == self.text => {
                d.postings.get(t).map_or(0, HashMap::len) as u64
                    + d.dropped.doc_freqs.get(t).copied().unwrap_or(0)
            }
            _ => 0,
        };
        Ok(self.searcher.doc_freq(term)? + extra)
    }
}
