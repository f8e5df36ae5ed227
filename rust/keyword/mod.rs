//! The keyword index: tantivy BM25 over content + summary + tags, derived from the row store.
//!
//! One file per job:
//!
//! - `analysis`: the one analyzer of documents and queries, and a query's terms;
//! - `schema`: the tantivy fields and the document of a row;
//! - `open`: opening an index, checked whole, or rebuilding it;
//! - `writer`: changes queued for, and buffered in, the tantivy writer;
//! - `delta`: the uncommitted documents, searchable at once;
//! - `stats`: BM25 statistics of the live documents, across segments and delta;
//! - `scope`: those statistics over the namespaces a search covers;
//! - `heaps`: the top-k of each namespace and the pruning threshold;
//! - `search`: the query, and the walk over delta and segments;
//! - `fold`: the background thread folding the delta in, and reloads;
//! - `merge`: segment merges (idle and `compact`) and picking them up.
//!
//! What must stay true across them:
//!
//! - Read-your-writes without a commit per write (a tantivy commit + reload costs ~12 ms):
//!   every write is queued for the tantivy writer (the latest change per row) AND entered in
//!   the delta. A search scores the delta's documents with the same BM25 weights over combined
//!   statistics, so a row's score does not change when the background thread folds it into
//!   tantivy, and a write never waits for a commit in progress.
//! - Tenants never match each other's rows: the namespace is a required, zero-scored term, or
//!   the caller's `accept` checks it. Deleted, stale (an older version of a row) and rejected
//!   documents are dropped inside the top-k loop, so they never take a result slot.
//! - The commit payload records the changelog sequence the index reflects.
//! - Lock order: `reloading`, then `delta`; `writer`, then `pending`; `delta`, then `pending`;
//!   never `delta` while `writer` is held (see [`Shared`]).

mod analysis;
mod delta;
mod fold;
mod heaps;
mod merge;
mod open;
mod schema;
mod scope;
mod search;
mod stats;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, RwLock};
use tantivy::index::SegmentId;
use tantivy::{Index, IndexReader};

use crate::error::{Error, Failures, Result};
use delta::Delta;
use fold::Columns;
pub use fold::FOLD_DOCS;
use schema::Fields;
use writer::{Pending, Writer};

/// A tantivy failure (an I/O one included) while doing `context`.
fn kw_err(context: &str, e: impl Into<tantivy::TantivyError>) -> Error {
    Error::keyword(format!("keyword index: {context}"), e)
}

/// A keyword index failure with no tantivy error beneath it.
fn kw_fail(context: &str, why: impl std::fmt::Display) -> Error {
    Error::storage(&format!("keyword index: {context}"), why)
}

/// A document to index: the row's namespace, text, tag hashes and version.
pub struct Doc {
    /// Namespace.
    pub namespace: String,
    /// Content, summary and tags, joined.
    pub text: String,
    /// Hashes of the row's tags.
    pub tags: Vec<u64>,
    /// The row's doc version.
    pub version: u64,
}

/// What the index's handles and its fold thread share.
struct Shared {
    fields: Fields,
    index: Index,
    /// Reloaded only by [`Shared::reload`], under `reloading`; searches use the searcher it
    /// publishes in the delta.
    reader: IndexReader,
    /// Held across a reload (one at a time); `delta` is locked inside it, never the reverse.
    reloading: Mutex<()>,
    /// Fast-field columns per segment, opened once rather than on every search.
    columns: Mutex<HashMap<SegmentId, Columns>>,
    writer: Mutex<Writer>,
    /// Locked after `writer` when both are held.
    pending: Mutex<Pending>,
    /// Locked before `pending` when both are held; never while `writer` is.
    delta: RwLock<Delta>,
    stop: Mutex<bool>,
    wake: Condvar,
    /// Background folds, reloads and merges that failed, and the last one's error (the
    /// changes stay in the delta, searched, and the next tick retries).
    failures: Failures,
    /// Test hook: how many more background ticks fail.
    #[cfg(test)]
    fail_ticks: std::sync::atomic::AtomicU32,
}

/// The tantivy index with its writer, reader, delta and folding thread.
pub struct KeywordIndex {
    index: Index,
    shared: Arc<Shared>,
    folder: Option<JoinHandle<()>>,
}

impl KeywordIndex {
    /// The changelog sequence the committed index reflects.
    #[must_use]
    pub fn committed_seq(&self) -> u64 {
        self.shared.writer.lock().committed
    }

    /// Replaces (doc = Some) or deletes (None) the document of row `rid`; `seq` is the
    /// changelog sequence of the change. With `searchable`, the change is visible to the
    /// next search at once (via the delta); bulk loads pass false and `commit` at the end.
    pub fn put(&self, rid: u64, doc: Option<Doc>, seq: u64, searchable: bool) -> Result<()> {
        let f = self.shared.fields;
        let td = doc.as_ref().map(|d| f.document(rid, d));
        if !searchable {
            // a bulk load goes straight to the writer (after what is queued) and commits
            let mut w = self.shared.writer.lock();
            self.shared.flush_pending(&mut w)?;
            w.apply(f.rid, (rid, td), seq)?;
            drop(w);
            self.shared.delta.write().remove(rid);
            return Ok(());
        }
        // the delta is locked before the change is queued: a fold that takes the change from
        // the queue finds its document in the delta, and drops it after the commit (were the
        // document entered after that, it would stay in the delta, counted twice)
        let mut delta = self.shared.delta.write();
        delta.change(rid, doc, seq)?;
        self.shared.pending.lock().push((rid, td), seq);
        if delta.docs.len() >= FOLD_DOCS {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    /// Notes that every change up to `seq` is reflected (even when none touched text).
    pub fn advance(&self, seq: u64) {
        let mut p = self.shared.pending.lock();
        p.seq = p.seq.max(seq);
    }

    /// Commits buffered changes (if any) and reloads the reader.
    pub fn commit(&self) -> Result<()> {
        self.shared.fold()
    }

    /// A handle that commits from another thread, without the engine's state lock.
    #[must_use]
    pub fn committer(&self) -> Committer {
        Committer(Arc::clone(&self.shared))
    }

    /// Number of live documents: the committed ones alive and not replaced or deleted since,
    /// plus the uncommitted ones in the delta (one per row holding text).
    #[must_use]
    pub fn num_docs(&self) -> u64 {
        self.shared.delta.read().num_docs()
    }

    /// Number of committed segments a search visits (merges bring it down when writes pause).
    #[must_use]
    pub fn num_segments(&self) -> usize {
        self.shared.delta.read().searcher.segment_readers().len()
    }

    /// Background folds that failed since the index was opened, and the last one's error.
    #[must_use]
    pub fn failures(&self) -> (u64, Option<String>) {
        self.shared.failures.get()
    }

    /// Whether the merge that follows writes (see `merge::IDLE_MERGE_AFTER`) is still to come,
    /// runs or has segments searches do not see yet: searches are at their fastest once it is
    /// false.
    #[must_use]
    pub fn merging(&self) -> bool {
        self.shared.idle_merging()
    }
}

/// Commits the index from a thread that does not hold it (the checkpointer).
pub struct Committer(Arc<Shared>);

impl Committer {
    /// Commits buffered and queued changes (if any) and reloads the reader.
    pub fn commit(&self) -> Result<()> {
        self.0.fold()
    }

    /// The changelog sequence the committed index reflects.
    #[must_use]
    pub fn committed_seq(&self) -> u64 {
        self.0.writer.lock().committed
    }
}

impl Drop for KeywordIndex {
    /// Stops the fold thread and waits for tantivy's merges: nothing touches the index
    /// directory after the index is dropped (the store's close returns only then).
    fn drop(&mut self) {
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.folder.take() {
            if t.join().is_err() {
                log::error!("keyword index: the fold thread panicked");
            }
        }
        if let Some(w) = self.shared.writer.lock().inner.take() {
            if let Err(e) = w.wait_merging_threads() {
                log::error!("keyword index: waiting for merges: {e}");
            }
        }
    }
}
