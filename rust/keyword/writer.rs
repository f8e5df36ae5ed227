//! The changes bound for tantivy: queued, then buffered in its writer until a commit.
//!
//! - A write never waits for a commit: it queues its change in [`Pending`], which the fold
//!   hands to the writer before it commits (the delta makes the change searchable meanwhile).
//! - The queue holds the latest change per row only, so a document replaced or deleted before
//!   its fold never reaches tantivy's statistics.
//! - The writer's `seq` is the newest changelog sequence buffered; `committed`, the one the
//!   last commit recorded in its payload.

use std::collections::HashMap;
use std::time::Instant;

use tantivy::schema::Field;
use tantivy::{FutureResult, IndexWriter, SegmentMeta, TantivyDocument, Term};

use super::{kw_err, kw_fail};
use crate::error::Result;

/// The tantivy writer and the state of what it buffers.
pub(super) struct Writer {
    /// The tantivy writer; taken at close, to wait for its merges.
    pub(super) inner: Option<IndexWriter<TantivyDocument>>,
    /// Buffered changes not yet committed.
    pub(super) dirty: bool,
    /// Changelog sequence of the newest buffered change.
    pub(super) seq: u64,
    /// Changelog sequence the last commit reflects.
    pub(super) committed: u64,
    /// When the last commit happened, and whether an idle merge followed it.
    pub(super) committed_at: Instant,
    pub(super) idle_merged: bool,
    /// The idle merge started last, until it completes.
    pub(super) idle_merge: Option<FutureResult<Option<SegmentMeta>>>,
}

impl Writer {
    /// A writer whose last commit reflects changelog sequence `committed`; `fresh`: every
    /// document was deleted (the index is new or rebuilt), to commit.
    pub(super) fn new(inner: IndexWriter<TantivyDocument>, committed: u64, fresh: bool) -> Self {
        Self {
            inner: Some(inner),
            dirty: fresh,
            seq: committed,
            committed,
            committed_at: Instant::now(),
            idle_merged: false,
            idle_merge: None,
        }
    }

    /// The tantivy writer, unless the index is closed.
    pub(super) fn tantivy(&mut self) -> Result<&mut IndexWriter<TantivyDocument>> {
        self.inner
            .as_mut()
            .ok_or_else(|| kw_fail("write", "the index is closed"))
    }

    /// Buffers one change: (rid, new document or None = delete) at changelog sequence `seq`.
    pub(super) fn apply(&mut self, rid_field: Field, change: Change, seq: u64) -> Result<()> {
        let (rid, doc) = change;
        let w = self.tantivy()?;
        w.delete_term(Term::from_field_u64(rid_field, rid));
        if let Some(td) = doc {
            w.add_document(td).map_err(|e| kw_err("add", e))?;
        }
        self.advance(seq);
        self.dirty = true;
        Ok(())
    }

    /// Notes that the changes up to `seq` are buffered.
    pub(super) fn advance(&mut self, seq: u64) {
        if seq > self.seq {
            self.seq = seq;
            self.dirty = true;
        }
    }
}

/// A document change for tantivy: the row id and its new document (None = delete).
pub(super) type Change = (u64, Option<TantivyDocument>);

/// Searchable changes not yet handed to the tantivy writer. The writer is busy for the whole
/// of a commit (tens to hundreds of ms); queueing here means a write, which holds the store's
/// state lock, never waits for one (the delta already makes the change visible). The fold
/// hands the queue to the writer before it commits.
///
/// The queue holds one change per row, its latest: a document replaced or deleted before its
/// fold never reaches tantivy, whose statistics would count it (as a deleted document) after
/// the fold while the delta no longer does before it.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) changes: Vec<(Change, u64)>,
    /// rid -> its change's index in `changes`.
    pub(super) at: HashMap<u64, usize>,
    /// Newest changelog sequence reflected (changes and [`KeywordIndex::advance`]).
    pub(super) seq: u64,
}

impl Pending {
    /// Queues row `rid`'s change, replacing the one queued before it (each change deletes
    /// the row's committed document first, so only the latest matters).
    pub(super) fn push(&mut self, change: Change, seq: u64) {
        self.seq = self.seq.max(seq);
        match self.at.get(&change.0) {
            Some(&i) => self.changes[i] = (change, seq),
            None => {
                self.at.insert(change.0, self.changes.len());
                self.changes.push((change, seq));
            }
        }
    }
}
