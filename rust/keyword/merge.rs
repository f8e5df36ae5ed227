//! Segment merges: tantivy's log merge policy after commits, the idle merge once writes
//! pause, `compact`, and picking merged segments up.
//!
//! - Every search visits each segment, so once no write has come for [`IDLE_MERGE_AFTER`] the
//!   segments are merged into one, leaving out the largest while the others are small beside
//!   it (trickling writes rewrite the bulk of the index only once they add a quarter of it).
//! - A merge keeps the live documents (and so every score, see `stats`): the reader picks
//!   merged segments up with no delta to drop.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use tantivy::index::SegmentId;
use tantivy::{SegmentMeta, SegmentReader};

use super::writer::Writer;
use super::{kw_err, KeywordIndex, Shared};
use crate::error::Result;

/// Once no write has come for this long, the segments are merged into one (every search visits
/// each segment: at 99k rows, two segments of 58k and 41k documents searched ~15% slower than
/// one), leaving out the largest while the others hold under [`IDLE_MERGE_BULK`] of its
/// documents: trickling writes rewrite the bulk of the index only once they add that much.
pub(super) const IDLE_MERGE_AFTER: Duration = Duration::from_secs(2);
/// See [`IDLE_MERGE_AFTER`].
const IDLE_MERGE_BULK: f64 = 0.25;
/// How long after a commit the reader looks for merged segments to pick up.
const MERGE_WATCH: Duration = Duration::from_secs(300);

impl Shared {
    /// The segments the reader searches.
    fn searched_segments(&self) -> HashSet<SegmentId> {
        let searcher = self.delta.read().searcher.clone();
        let readers = searcher.segment_readers();
        readers.iter().map(SegmentReader::segment_id).collect()
    }

    /// Whether background merges changed the committed segments since the last reload.
    /// Merges follow commits, so only the minutes after one are watched (a file read a tick).
    pub(super) fn merged(&self) -> bool {
        if self.writer.lock().committed_at.elapsed() > MERGE_WATCH {
            return false;
        }
        let ours = self.searched_segments();
        self.index
            .searchable_segment_ids()
            .is_ok_and(|ids| ids.len() != ours.len() || ids.iter().any(|i| !ours.contains(i)))
    }

    /// The segments the idle merge takes (see [`IDLE_MERGE_AFTER`]), None when it has
    /// nothing to merge.
    pub(super) fn idle_merge_ids(&self) -> Result<Option<Vec<SegmentId>>> {
        let mut metas = self
            .index
            .searchable_segment_metas()
            .map_err(|e| kw_err("segments", e))?;
        metas.sort_by_key(|m| std::cmp::Reverse(m.num_docs()));
        let Some(largest) = metas.first().map(|m| f64::from(m.num_docs())) else {
            return Ok(None);
        };
        let rest: f64 = metas[1..].iter().map(|m| f64::from(m.num_docs())).sum();
        let skip = usize::from(rest < IDLE_MERGE_BULK * largest);
        let ids: Vec<SegmentId> = metas[skip..].iter().map(SegmentMeta::id).collect();
        Ok((ids.len() >= 2).then_some(ids))
    }

    /// Whether the idle merge has yet to run since the last commit (nothing written since).
    fn idle_merge_ahead(&self, w: &Writer) -> bool {
        !w.dirty && !w.idle_merged && self.pending.lock().changes.is_empty()
    }

    /// Whether the idle merge is due: ahead, and no write for [`IDLE_MERGE_AFTER`].
    fn idle_merge_due(&self, w: &Writer) -> bool {
        self.idle_merge_ahead(w) && w.committed_at.elapsed() >= IDLE_MERGE_AFTER
    }

    /// Starts the idle merge when due; it runs in the background and the reader picks its
    /// result up on a later tick.
    pub(super) fn merge_if_idle(&self) -> Result<()> {
        let mut w = self.writer.lock();
        if !self.idle_merge_due(&w) {
            return Ok(());
        }
        w.idle_merged = true;
        if let Some(ids) = self.idle_merge_ids()? {
            // a background merge may hold some of them: then this one fails and is not
            // retried before the next commit; the merge policy merges them anyway
            let merge = w.tantivy()?.merge(&ids);
            w.idle_merge = Some(merge);
        }
        Ok(())
    }

    /// Whether an idle merge is still to come (the index is clean but not merged yet), runs,
    /// or has merged segments the searches do not see yet. While a commit holds the writer
    /// (a fold, whose commit makes an idle merge due again), true.
    pub(super) fn idle_merging(&self) -> bool {
        let Some(mut w) = self.writer.try_lock() else {
            return true;
        };
        let running = w.idle_merge.as_mut().is_some_and(|f| {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            std::pin::Pin::new(f).poll(&mut cx).is_pending()
        });
        if !running {
            w.idle_merge = None;
        }
        let to_come =
            self.idle_merge_ahead(&w) && self.idle_merge_ids().is_ok_and(|ids| ids.is_some());
        drop(w);
        running || to_come || self.merged()
    }
}

impl KeywordIndex {
    /// Merges segments and purges deleted documents.
    pub fn compact(&self) -> Result<()> {
        self.commit()?;
        // a background merge may take some of the segments first: then merge what is left
        for attempt in 1.. {
            let ids = self
                .index
                .searchable_segment_ids()
                .map_err(|e| kw_err("segments", e))?;
            if ids.len() <= 1 {
                break;
            }
            let fut = self.shared.writer.lock().tantivy()?.merge(&ids);
            match fut.wait() {
                Ok(_) => break,
                Err(e) if attempt >= 10 => return Err(kw_err("merge", e)),
                Err(_) => {}
            }
        }
        self.shared.reload(None)
    }
}
