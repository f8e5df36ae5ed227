//! The delta: the freshest writes, searchable before tantivy commits them.
//!
//! - A write enters its document here, analysed with the index's own analyzer, and a search
//!   scores it with tantivy's `Bm25Weight` over the combined statistics (see `stats`, the same
//!   field-norm quantisation), so its score is the one it will have once folded into tantivy.
//! - A document here supersedes the committed document of its row: the search skips the
//!   latter, and the statistics leave it out ([`Delta::shadowed`]), as they do the committed
//!   document of a row deleted here.
//! - The delta and the committed segments searched beside it change together: a reload swaps
//!   in the segments that now hold the folded documents and a delta without them, in one step
//!   under the delta's lock ([`Delta::split_after`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use parking_lot::Mutex;
use tantivy::schema::Field;
use tantivy::{DocId, Searcher};

use super::analysis::analyzer;
use super::stats::{committed_doc, norm, Shadowed};
use super::Doc;
use crate::error::Result;

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
    /// Summed field norms of `docs` (see `stats`).
    pub(super) tokens: u64,
    pub(super) oldest: Option<Instant>,
    /// Summed field norms of the alive documents of the searched segments.
    pub(super) committed_tokens: u64,
    /// Per namespace met by a search: the summed field norms of its documents alive in the
    /// searched segments (shadowed ones included), cleared when they change (see `scope`).
    pub(super) namespace_tokens: Mutex<HashMap<String, u64>>,
    /// The rows changed here (a new document or a delete), at their latest sequence.
    changed: HashMap<u64, u64>,
    /// The committed documents, alive in the searched segments, of rows in `changed`: no
    /// longer live, left out of the statistics.
    pub(super) shadowed: HashMap<u64, Shadowed>,
    /// The shadowed documents by segment (its index in the searcher), in order.
    pub(super) shadowed_docs: BTreeMap<u32, BTreeSet<DocId>>,
    /// The `rid` and `text` fields.
    fields: (Field, Field),
}

impl Delta {
    /// An empty delta beside the committed segments `searcher` sees, whose alive documents'
    /// field norms sum to `committed_tokens`; `fields`: the `rid` and `text` fields.
    pub(super) fn new(searcher: Searcher, committed_tokens: u64, fields: (Field, Field)) -> Self {
        Self {
            searcher,
            docs: HashMap::new(),
            postings: HashMap::new(),
            tokens: 0,
            oldest: None,
            committed_tokens,
            namespace_tokens: Mutex::new(HashMap::new()),
            changed: HashMap::new(),
            shadowed: HashMap::new(),
            shadowed_docs: BTreeMap::new(),
            fields,
        }
    }

    /// Live documents: the committed ones alive and not shadowed, and the delta's.
    pub(super) fn num_docs(&self) -> u64 {
        (self.searcher.num_docs() + self.docs.len() as u64)
            .saturating_sub(self.shadowed.len() as u64)
    }

    /// Notes a change of row `rid` at changelog sequence `seq` (its committed document, if
    /// alive in the searched segments, is shadowed from now on) and enters its new document
    /// (None: a delete).
    pub(super) fn change(&mut self, rid: u64, doc: Option<Doc>, seq: u64) -> Result<()> {
        let at = self.changed.entry(rid).or_default();
        *at = (*at).max(seq);
        if !self.shadowed.contains_key(&rid) {
            self.shadow(rid)?;
        }
        match doc {
            Some(d) => self.insert(rid, d, seq),
            None => self.remove(rid),
        }
        Ok(())
    }

    /// Finds again the committed documents the changed rows shadow, once the searched
    /// segments changed (a fold, a merge): `searcher`, whose alive documents' field norms sum
    /// to `committed_tokens`.
    pub(super) fn searching(&mut self, searcher: Searcher, committed_tokens: u64) -> Result<()> {
        self.searcher = searcher;
        self.committed_tokens = committed_tokens;
        self.namespace_tokens.get_mut().clear();
        self.shadowed.clear();
        self.shadowed_docs.clear();
        let rids: Vec<u64> = self.changed.keys().copied().collect();
        rids.into_iter().try_for_each(|rid| self.shadow(rid))
    }

    /// Shadows the committed document of row `rid`, if one is alive in the searched segments.
    fn shadow(&mut self, rid: u64) -> Result<()> {
        if let Some(s) = committed_doc(&self.searcher, self.fields, rid)? {
            self.shadowed.insert(rid, s);
            self.shadowed_docs.entry(s.seg).or_default().insert(s.doc);
        }
        Ok(())
    }

    /// Removes row `rid`'s document, if the delta holds one.
    pub(super) fn remove(&mut self, rid: u64) {
        if let Some(d) = self.docs.remove(&rid) {
            self.tokens -= norm(d.tokens);
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
    pub(super) fn insert(&mut self, rid: u64, doc: Doc, seq: u64) {
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
            ns: doc.namespace,
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
        self.tokens += norm(doc.tokens);
        self.docs.insert(rid, doc);
    }

    /// Takes out what a fold up to changelog sequence `seq` leaves: the documents and row
    /// changes of later changes (those written while it committed, usually a few), in a new
    /// delta searching the same segments (the caller then swaps in the new ones, see
    /// [`Self::searching`]). Cheap enough to run under the delta's lock: the folded documents
    /// stay in `self`, freed after the lock is let go.
    pub(super) fn split_after(&mut self, seq: u64) -> Self {
        let mut rest = Self::new(self.searcher.clone(), self.committed_tokens, self.fields);
        rest.changed = self
            .changed
            .iter()
            .filter(|(_, s)| **s > seq)
            .map(|(r, s)| (*r, *s))
            .collect();
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
