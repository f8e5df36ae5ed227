//! BM25 statistics of the live documents: the committed segments' alive documents, less
//! those a newer change in the delta shadows, plus the delta's.
//!
//! - These statistics (document count, average length, document frequencies) are the whole
//!   index's, across namespaces; a search takes them over the namespaces it covers
//!   ([`super::scope`]), counting the live documents the same way.
//! - They count each live row's current document once, and nothing else: not the deleted
//!   documents tantivy keeps counting until a merge purges them, not a committed document a
//!   newer change replaced or deleted. So a score depends on the live rows alone: not on
//!   whether a document was folded, merged, rewritten unchanged, or the store reopened.
//! - A document's length counts as its quantised field norm (what tantivy keeps of a
//!   committed document's length), wherever the document is.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tantivy::fieldnorm::FieldNormReader;
use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocId, DocSet, Searcher, SegmentReader, Term, TERMINATED};

use super::delta::Delta;
use super::kw_err;
use crate::error::Result;

/// A length as BM25 counts it: its quantised field norm.
pub(super) fn norm(tokens: u32) -> u64 {
    u64::from(FieldNormReader::id_to_fieldnorm(
        FieldNormReader::fieldnorm_to_id(tokens),
    ))
}

/// The summed field norms of the alive documents of `searcher`'s segments.
pub(super) fn alive_tokens(searcher: &Searcher, text: Field) -> Result<u64> {
    let mut total = 0;
    for seg in searcher.segment_readers() {
        let norms = seg
            .get_fieldnorms_reader(text)
            .map_err(|e| kw_err("field norms", e))?;
        total += seg
            .doc_ids_alive()
            .map(|d| u64::from(norms.fieldnorm(d)))
            .sum::<u64>();
    }
    Ok(total)
}

/// A committed document alive in the searched segments whose row has a newer change in the
/// delta (a new document, or a delete): it is no longer live.
#[derive(Clone, Copy)]
pub(super) struct Shadowed {
    /// Its segment's index in the searcher's segment readers.
    pub(super) seg: u32,
    pub(super) doc: DocId,
    /// Its field norm.
    pub(super) norm: u64,
}

/// The committed document of row `rid` alive in `searcher`'s segments, if any.
pub(super) fn committed_doc(
    searcher: &Searcher,
    (rid_field, text): (Field, Field),
    rid: u64,
) -> Result<Option<Shadowed>> {
    let term = Term::from_field_u64(rid_field, rid);
    for (i, seg) in (0u32..).zip(searcher.segment_readers()) {
        let index = seg
            .inverted_index(rid_field)
            .map_err(|e| kw_err("segment", e))?;
        let Some(mut postings) = index
            .read_postings(&term, IndexRecordOption::Basic)
            .map_err(|e| kw_err("segment", e))?
        else {
            continue;
        };
        let alive = seg.alive_bitset();
        while postings.doc() != TERMINATED {
            let doc = postings.doc();
            if alive.is_none_or(|a| a.is_alive(doc)) {
                let norms = seg
                    .get_fieldnorms_reader(text)
                    .map_err(|e| kw_err("field norms", e))?;
                return Ok(Some(Shadowed {
                    seg: i,
                    doc,
                    norm: u64::from(norms.fieldnorm(doc)),
                }));
            }
            postings.advance();
        }
    }
    Ok(None)
}

/// Alive documents of `seg` holding `term`.
fn alive_doc_freq(seg: &SegmentReader, term: &Term) -> tantivy::Result<u64> {
    let index = seg.inverted_index(term.field())?;
    let Some(alive) = seg.alive_bitset() else {
        return Ok(u64::from(index.doc_freq(term)?));
    };
    let Some(mut postings) = index.read_postings(term, IndexRecordOption::Basic)? else {
        return Ok(0);
    };
    let mut n = 0;
    while postings.doc() != TERMINATED {
        n += u64::from(alive.is_alive(postings.doc()));
        postings.advance();
    }
    Ok(n)
}

/// Shadowed documents (by segment, in order) holding `term`.
fn shadowed_doc_freq(
    searcher: &Searcher,
    shadowed: &BTreeMap<u32, BTreeSet<DocId>>,
    term: &Term,
) -> tantivy::Result<u64> {
    let mut n = 0;
    for (seg, docs) in shadowed {
        let index = searcher.segment_reader(*seg).inverted_index(term.field())?;
        let Some(mut postings) = index.read_postings(term, IndexRecordOption::Basic)? else {
            continue;
        };
        for &doc in docs {
            if postings.doc() <= doc && postings.seek(doc) == doc {
                n += 1;
            }
            if postings.doc() == TERMINATED {
                break;
            }
        }
    }
    Ok(n)
}

/// BM25 statistics of the live documents: the committed index's, less the shadowed, plus the
/// delta's.
pub(super) struct Combined<'a> {
    pub(super) searcher: &'a Searcher,
    pub(super) delta: &'a Delta,
    /// The text field: the delta's tokens and terms are its.
    pub(super) text: Field,
}

impl Bm25StatisticsProvider for Combined<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        if field != self.text {
            return Bm25StatisticsProvider::total_num_tokens(self.searcher, field);
        }
        let d = self.delta;
        let shadowed: u64 = d.shadowed.values().map(|s| s.norm).sum();
        Ok((d.committed_tokens + d.tokens).saturating_sub(shadowed))
    }
    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.delta.num_docs())
    }
    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let d = self.delta;
        let value = term.value();
        let Some(t) = value.as_str().filter(|_| term.field() == self.text) else {
            // namespace and tag terms score 0; tantivy's count holds deleted documents too
            return Ok(self.searcher.doc_freq(term)?.min(self.total_num_docs()?));
        };
        Ok(d.postings.get(t).map_or(0, HashMap::len) as u64 + self.live_committed(term)?)
    }
}

impl Combined<'_> {
    /// Live committed documents holding `term`: the alive ones, less the shadowed.
    pub(super) fn live_committed(&self, term: &Term) -> tantivy::Result<u64> {
        let mut n = 0;
        for seg in self.searcher.segment_readers() {
            n += alive_doc_freq(seg, term)?;
        }
        let shadowed = shadowed_doc_freq(self.searcher, &self.delta.shadowed_docs, term)?;
        Ok(n.saturating_sub(shadowed))
    }
}
