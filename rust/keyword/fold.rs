//! The fold: the background thread that commits the delta into tantivy, and reloads.
//!
//! - A fold hands the queued changes to the writer, commits them with the changelog sequence
//!   they reach as the commit payload, reloads the reader and drops the folded documents from
//!   the delta, on a size/time threshold ([`FOLD_DOCS`], [`FOLD_AGE`]) or when asked.
//! - A reload swaps the searched segments and the delta together, under the delta's lock held
//!   only for the swap: the new segments are opened and their alive documents' lengths summed
//!   before it, so writes and searches never wait for them.
//! - A failed tick is counted in `failures` (not only logged); the changes stay in the delta,
//!   searched, and the next tick retries.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tantivy::columnar::Column;
use tantivy::index::SegmentId;
use tantivy::SegmentReader;

use super::stats::alive_tokens;
use super::writer::Writer;
use super::{kw_err, Shared};
use crate::error::Result;

/// Fold the delta into tantivy when it holds this many documents...
pub const FOLD_DOCS: usize = 4096;
/// ...or when its oldest change is this old.
const FOLD_AGE: Duration = Duration::from_secs(1);

/// The `rid` and `ver` fast-field columns of one segment.
pub(super) type Columns = (Column<u64>, Column<u64>);

impl Shared {
    /// Hands the queued changes to the writer, in order.
    pub(super) fn flush_pending(&self, w: &mut Writer) -> Result<()> {
        let p = std::mem::take(&mut *self.pending.lock());
        for (change, seq) in p.changes {
            w.apply(self.fields.rid, change, seq)?;
        }
        w.advance(p.seq);
        Ok(())
    }

    /// Commits buffered and queued changes (if any), reloads the reader and drops the folded
    /// delta.
    pub(super) fn fold(&self) -> Result<()> {
        let seq = {
            let mut w = self.writer.lock();
            self.flush_pending(&mut w)?;
            if !w.dirty {
                return Ok(());
            }
            let seq = w.seq;
            let mut prepared = w
                .tantivy()?
                .prepare_commit()
                .map_err(|e| kw_err("commit", e))?;
            prepared.set_payload(&seq.to_string());
            prepared.commit().map_err(|e| kw_err("commit", e))?;
            w.dirty = false;
            w.committed = seq;
            w.committed_at = Instant::now();
            w.idle_merged = false;
            seq
        };
        self.reload(Some(seq))
    }

    /// Reloads the reader and publishes its segments to searches together with the delta
    /// without the changes up to changelog sequence `folded` (None: a merge, the documents are
    /// the same); forgets the columns of segments no longer searched.
    ///
    /// Opening the new segments and summing their alive documents' lengths happen before the
    /// delta is locked, so writes (which put their documents in the delta) and searches never
    /// wait for them: the lock is held only to swap (and to find the few committed documents
    /// the delta's later changes shadow). Done under the lock, reloads held a single write for
    /// 64-137 ms in each of 4 runs of `bench_vector`'s writes across a checkpoint (100k rows,
    /// loaded 2-core machine; the median write took 4 ms); done before it, no write waited for
    /// one in 4 runs alternated with those. Removing the folded documents one by one under the
    /// lock still held a write for 8-19 ms at a fold of ~2,000 documents (quiet machine,
    /// median write 0.45 ms): the delta is now swapped for one holding only the later
    /// documents ([`super::delta::Delta::split_after`]).
    pub(super) fn reload(&self, folded: Option<u64>) -> Result<()> {
        let _one = self.reloading.lock();
        self.reader.reload().map_err(|e| kw_err("reload", e))?;
        let after = self.reader.searcher();
        let tokens = alive_tokens(&after, self.fields.text)?;
        let live: HashSet<SegmentId> = after
            .segment_readers()
            .iter()
            .map(SegmentReader::segment_id)
            .collect();
        let mut delta = self.delta.write();
        let old = folded.map(|seq| {
            let rest = delta.split_after(seq);
            std::mem::replace(&mut *delta, rest)
        });
        let swapped = delta.searching(after, tokens);
        drop(delta);
        // the folded documents (thousands of allocations) are freed with no lock held
        drop(old);
        self.columns.lock().retain(|id, _| live.contains(id));
        swapped
    }

    /// The `rid` and `ver` columns of a segment.
    pub(super) fn columns(&self, seg: &SegmentReader) -> Result<Columns> {
        if let Some(c) = self.columns.lock().get(&seg.segment_id()) {
            return Ok(c.clone());
        }
        let ff = seg.fast_fields();
        let c = (
            ff.u64("rid").map_err(|e| kw_err("fast field", e))?,
            ff.u64("ver").map_err(|e| kw_err("fast field", e))?,
        );
        self.columns.lock().insert(seg.segment_id(), c.clone());
        Ok(c)
    }

    /// Whether the delta is large or old enough to fold.
    fn fold_due(&self) -> bool {
        let d = self.delta.read();
        d.docs.len() >= FOLD_DOCS || d.oldest.is_some_and(|t| t.elapsed() >= FOLD_AGE)
    }

    /// The fold thread: a tick every 200 ms, or when a write fills the delta, until stopped.
    pub(super) fn run_folder(&self) {
        let mut stop = self.stop.lock();
        while !*stop {
            self.wake.wait_for(&mut stop, Duration::from_millis(200));
            if *stop {
                break;
            }
            drop(stop);
            if let Err(e) = self.tick() {
                self.failures.record("the keyword fold thread", &e);
            }
            stop = self.stop.lock();
        }
    }

    /// One pass of the fold thread: folds the delta when due, else picks up merged segments,
    /// else starts the idle merge when due.
    fn tick(&self) -> Result<()> {
        #[cfg(test)]
        if self
            .fail_ticks
            .fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| n.checked_sub(1),
            )
            .is_ok()
        {
            return Err(super::kw_fail("fold", "injected fault"));
        }
        if self.fold_due() {
            self.fold()
        } else if self.merged() {
            // merged segments hold the same documents: no delta to drop
            self.reload(None)
        } else {
            self.merge_if_idle()
        }
    }
}
