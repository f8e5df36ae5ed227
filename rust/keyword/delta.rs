//! The delta: the freshest writes, searchable before tantivy commits them.
//!
//! - A write enters its document here, analysed with the index's own analyzer, and a search
//!   scores it with tantivy's `Bm25Weight` over the combined statistics (see `stats`, the same
//!   field-norm quantisation), so its score is the one it will have once folded into tantivy.
//! - A document here supersedes the committed document of its row: the search skips the
//!   latter.
//! - The delta and the committed segments searched beside it change together: a reload swaps
//!   in the segments that now hold the folded documents and a delta without them, in one step
//!   under the delta's lock ([`Delta::split_after`]).

use std::collections::HashMap;
use std::time::Instant;

use tantivy::Searcher;

use super::analysis::analyzer;
use super::stats::Dropped;
use super::Doc;

/// An uncommitted document, analysed.
pub(super) struct DeltaDoc {
    pub(super) ns: String,
    pub(super) version: u64,
    pub(super) seq: u64,
    pub(super) tokens: u32,
    /// (term, frequency in the document)
    pub(super) terms: Vec<(String, u32)>,
}

/// The freshest writes, searchable before tantivy commits them, and the committed segments
/// searched beside them: the two change together (see `Shared::reload`).
pub(super) struct Delta {
    /// The committed segments searches see (published by `Shared::reload`, never taken from
    /// the reader directly).
    pub(super) searcher: Searcher,
    pub(super) docs: HashMap<u64, DeltaDoc>,
    /// term -> (rid -> term frequency)
    pub(super) postings: HashMap<String, HashMap<u64, u32>>,
    pub(super) tokens: u64,
    pub(super) oldest: Option<Instant>,
    /// Statistics of the documents in the segments tantivy dropped (see [`Dropped`]).
    pub(super) dropped: Dropped,
}

impl Delta {
    /// An empty delta beside the committed segments `searcher` sees.
    pub(super) fn new(searcher: Searcher) -> Self {
        Self {
            searcher,
            docs: HashMap::new(),
            postings: HashMap::new(),
            tokens: 0,
            oldest: None,
            dropped: Dropped::default(),
        }
    }

    /// Removes row `rid`'s document, if the delta holds one.
    pub(super) fn remove(&mut self, rid: u64) {
        if let Some(d) = self.docs.remove(&rid) {
            self.tokens -= u64::from(d.tokens);
            for (t, _) in d.terms {
                if let Some(p) = self.postings.get_mut(&t) {
                    p.remove(&rid);
                    if p.is_empty() {
                        self.postings.remove(&t);
                    }
                }
            }
        }
    }

    /// Analyses and enters row `rid`'s document, changed at changelog sequence `seq`,
    /// replacing the one the delta held.
    pub(super) fn insert(&mut self, rid: u64, doc: &Doc, seq: u64) {
        self.remove(rid);
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(&doc.text);
        let mut freqs: HashMap<String, u32> = HashMap::new();
        let mut tokens = 0u32;
        while stream.advance() {
            tokens += 1;
            *freqs.entry(stream.token().text.clone()).or_default() += 1;
        }
        let analysed = DeltaDoc {
            ns: doc.namespace.clone(),
            version: doc.version,
            seq,
            tokens,
            terms: freqs.into_iter().collect(),
        };
        self.enter(rid, analysed);
        self.oldest.get_or_insert_with(Instant::now);
    }

    /// Enters an analysed document (its row holds none in the delta).
    fn enter(&mut self, rid: u64, doc: DeltaDoc) {
        for (t, f) in &doc.terms {
            self.postings.entry(t.clone()).or_default().insert(rid, *f);
        }
        self.tokens += u64::from(doc.tokens);
        self.docs.insert(rid, doc);
    }

    /// Takes out what a fold up to changelog sequence `seq` leaves: the documents of later
    /// changes (those written while it committed, usually a few) and the dropped segments'
    /// statistics, in a new delta searching the same segments. Cheap enough to run under the
    /// delta's lock: the folded documents stay in `self`, freed after the lock is let go.
    pub(super) fn split_after(&mut self, seq: u64) -> Self {
        let mut rest = Self::new(self.searcher.clone());
        rest.dropped = std::mem::take(&mut self.dropped);
        for (rid, doc) in self.docs.iter().filter(|(_, d)| d.seq > seq) {
            let kept = DeltaDoc {
                ns: doc.ns.clone(),
                terms: doc.terms.clone(),
                ..*doc
            };
            rest.enter(*rid, kept);
        }
        if !rest.docs.is_empty() {
            rest.oldest = Some(Instant::now());
        }
        rest
    }
}
