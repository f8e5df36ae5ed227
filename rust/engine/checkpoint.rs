//! Checkpoints (both derived indexes written with the changelog sequence they reflect, and
//! the changelog they cover dropped), backups and compaction.
//!
//! A checkpoint runs off the write path: the commit leader only asks for one; a background
//! thread takes it. It holds the state lock just long enough to freeze the vector graphs at a
//! sequence, saves them and commits the keyword index with no lock held (writes meanwhile go
//! to the graphs' overlays), then thaws the graphs and drains the overlays into them in small
//! steps. The changelog generations it covered are dropped by the next write group, in its
//! transaction. `checkpointing` makes checkpoints, backups and compactions take turns.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};

use super::commit::CHECKPOINT_EVERY;
use super::{Engine, FaultPoint, Inner};
use crate::error::{Error, Result};
use crate::pool::pool;

/// Overlay vectors moved into their graphs per step of a drain and worker thread, inserted on
/// the worker pool (a few ms of graph inserts: a writer waits at most that long behind the
/// drain; searches do not wait).
const DRAIN_STEP: usize = 4;

/// The background thread that takes checkpoints when the commit leader asks.
#[derive(Default)]
pub(super) struct Checkpointer {
    flags: Mutex<Flags>,
    wake: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Flags {
    due: bool,
    stop: bool,
}

impl Checkpointer {
    /// Starts the thread for `inner` (stores on disk only).
    pub(super) fn start(inner: &Arc<Inner>) -> Result<()> {
        if inner.dir.is_none() {
            return Ok(());
        }
        let owner = Arc::clone(inner);
        let handle = std::thread::Builder::new()
            .name("memini-checkpoint".into())
            .spawn(move || owner.checkpointer.run(&owner))
            .map_err(|e| Error::io("checkpoint thread", e))?;
        *inner.checkpointer.thread.lock() = Some(handle);
        Ok(())
    }

    /// Asks for a checkpoint (returns at once).
    pub(super) fn request(&self) {
        self.flags.lock().due = true;
        self.wake.notify_one();
    }

    /// Whether the thread is asked to stop: a drain it runs ends early (see
    /// [`Reason::Close`]).
    fn stopping(&self) -> bool {
        self.flags.lock().stop
    }

    /// Stops the thread, after the checkpoint it may be taking (its drain cut short).
    pub(super) fn stop(&self) {
        self.flags.lock().stop = true;
        self.wake.notify_one();
        if let Some(t) = self.thread.lock().take() {
            if t.join().is_err() {
                log::error!("the checkpoint thread panicked");
            }
        }
    }

    fn run(&self, inner: &Inner) {
        let mut flags = self.flags.lock();
        loop {
            while !flags.due && !flags.stop {
                self.wake.wait(&mut flags);
            }
            if flags.stop {
                return;
            }
            flags.due = false;
            drop(flags);
            if let Err(e) = inner.checkpoint(Reason::Due) {
                // the rows hold every change: a later checkpoint (or the next open) catches up
                inner
                    .checkpoint_failures
                    .record("index checkpoint failed", &e);
            }
            flags = self.flags.lock();
        }
    }
}

impl Engine {
    /// Writes a consistent copy of the store into the new directory `dest`.
    pub fn backup(&self, dest: &Path) -> Result<()> {
        let inner = self.inner()?;
        if dest.exists() {
            return Err(Error::invalid(format!(
                "backup target {} already exists (choose a new directory)",
                dest.display()
            )));
        }
        let _turn = inner.checkpointing.lock();
        // the caller's path: a directory it cannot create is its input's fault, not the store's
        fs::create_dir_all(dest).map_err(|e| {
            Error::invalid(format!(
                "cannot create the backup directory {}: {e} (choose a path this process can write)",
                dest.display()
            ))
        })?;
        let rows = inner.rows.read();
        let seq = inner.counters.lock().seq;
        let st = inner.state.read();
        rows.backup_to(&dest.join("rows.redb"))?;
        st.vectors.checkpoint(&dest.join("vectors"), seq)?;
        Ok(())
    }

    /// Rebuilds worn vector graphs, merges keyword segments and reclaims row-store pages.
    pub fn compact(&self) -> Result<()> {
        let inner = self.inner()?;
        let turn = inner.checkpointing.lock();
        {
            let _rows = inner.rows.read();
            let mut st = inner.state.write();
            for ns in st.vectors.worn_graphs() {
                log::info!("compacting vector graph of namespace {ns:?}");
                let keys: Vec<u64> = st
                    .cols
                    .namespaces
                    .get(&ns)
                    .map(|n| {
                        n.ids
                            .values()
                            .filter_map(|r| st.cols.rows.get(r).and_then(|c| c.vkey))
                            .collect()
                    })
                    .unwrap_or_default();
                st.vectors.rebuild(&ns, &keys)?;
            }
            st.keyword.compact()?;
        }
        inner.checkpoint_in_turn(&turn, Reason::Force)?;
        inner.drop_covered_logs()?;
        let mut rows = inner.rows.write();
        log::info!("compacting row store");
        rows.compact()
    }
}

/// Why a checkpoint is taken, which decides whether it is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reason {
    /// The commit leader asked: needed while [`CHECKPOINT_EVERY`] changes are not covered
    /// (requests made while one was running are met by it).
    Due,
    /// Closing: needed unless both indexes reflect every change and no vector waits in an
    /// overlay (a read-only session closes without rewriting the graph files). The checkpoint
    /// thread's drain is cut short, and the close drains what is left on every pool thread
    /// before it saves: a 1M-row bulk load ended with ~20k vectors pending, and close waited
    /// 167 s for the thread's small steps (51 s since, most of it those inserts).
    Close,
    /// Compaction: always.
    Force,
}

impl Inner {
    /// Takes a checkpoint if `why` needs one (see the module docs).
    pub(super) fn checkpoint(&self, why: Reason) -> Result<()> {
        let turn = self.checkpointing.lock();
        self.faults.check(FaultPoint::Checkpoint)?;
        self.checkpoint_in_turn(&turn, why)
    }

    /// Drops the changelog generations a checkpoint covered that no write group has dropped
    /// yet (see `commit::drop_covered_logs`): at close, or before a compaction, when no group
    /// may come after.
    pub(super) fn drop_covered_logs(&self) -> Result<()> {
        let rows = self.rows.read();
        let mut counters = self.counters.lock();
        if counters.drop_before > 0 {
            let b = rows.begin()?;
            b.drop_logs_before(counters.drop_before)?;
            b.commit()?;
            counters.drop_before = 0;
        }
        Ok(())
    }

    fn checkpoint_in_turn(&self, _turn: &MutexGuard<'_, ()>, why: Reason) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let _rows = self.rows.read();
        let (seq, gen, graphs, keyword) = {
            // counters before state: the commit leader takes them in that order
            let mut counters = self.counters.lock();
            let mut st = self.state.write();
            let seq = counters.seq;
            let needed = match why {
                Reason::Due => seq.saturating_sub(st.vector_seq) >= CHECKPOINT_EVERY,
                Reason::Close => {
                    st.vector_seq != seq
                        || st.keyword.committed_seq() != seq
                        || st.vectors.overlay_len() > 0
                }
                Reason::Force => true,
            };
            if !needed {
                return Ok(());
            }
            if st.vector_damage.is_some() || st.keyword_damage.is_some() {
                // the rows and the changelog stay the truth: the next open replays or rebuilds
                log::warn!("an index is out of step with the rows; skipping its checkpoint");
                return Ok(());
            }
            if why == Reason::Close {
                // nothing else runs: the vectors still pending go into their graphs on every
                // thread at once, and the saved graphs hold them (else the next open adds them)
                st.vectors.drain(usize::MAX)?;
            }
            let graphs = st.vectors.freeze()?;
            // changes from here on go to a new changelog generation
            counters.log_gen += 1;
            (seq, counters.log_gen, graphs, st.keyword.committer())
        };
        // no lock held: writes go on, and changes to the frozen graphs wait in overlays
        let started = Instant::now();
        let saved = keyword
            .commit()
            .and_then(|()| graphs.write(&dir.join("vectors"), seq));
        drop(graphs);
        log::info!(
            "checkpoint at change {seq} ({why:?}): indexes saved in {:.1?}",
            started.elapsed()
        );
        self.thaw(saved.is_ok().then_some(seq))?;
        saved?;
        if keyword.committed_seq() >= seq {
            // both indexes hold every change of the older generations: the next write group
            // drops them (a transaction here would make the writers wait for it)
            let mut counters = self.counters.lock();
            counters.drop_before = counters.drop_before.max(gen);
        }
        self.checkpoints
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Ends a freeze (recording `saved` as the vector checkpoint's sequence) and drains the
    /// overlays into the graphs, a few vectors per step. A step inserts under the upgradable
    /// lock (searches go on, writers wait at most one step) and takes the exclusive lock only
    /// to reserve room or to drop the moved vectors from the overlay. A failure marks the
    /// vector index damaged (repaired from the rows by the next write).
    fn thaw(&self, saved: Option<u64>) -> Result<()> {
        let mut st = self.state.write();
        if let Some(seq) = saved {
            st.vector_seq = seq;
        }
        let thawed = st.vectors.thaw();
        drop(st);
        let waiting = self.overlay_wait.lock();
        self.thawed.notify_all();
        drop(waiting);
        thawed
            .and_then(|()| self.drain_overlays())
            .inspect_err(|e| {
                let mut st = self.state.write();
                let namespaces = st.vectors.unsettled();
                st.vector_damage
                    .get_or_insert_with(Default::default)
                    .add(e, namespaces);
            })
    }

    fn drain_overlays(&self) -> Result<()> {
        let started = Instant::now();
        let budget = DRAIN_STEP * pool()?.current_num_threads();
        let mut moved = 0;
        loop {
            let mut st = self.state.upgradable_read();
            let step = st.vectors.next_drain(budget);
            let Some(step) = step.filter(|_| !self.checkpointer.stopping()) else {
                if moved > 0 {
                    log::info!(
                        "checkpoint: {moved} vectors drained into their graphs in {:.1?}, {} left",
                        started.elapsed(),
                        st.vectors.overlay_len()
                    );
                }
                return Ok(());
            };
            moved += step.len();
            if !st.vectors.drain_has_room(&step) {
                let w = RwLockUpgradableReadGuard::upgrade(st);
                w.vectors.reserve(step.namespace(), step.len())?;
                st = RwLockWriteGuard::downgrade_to_upgradable(w);
            }
            st.vectors.insert_drained(&step)?;
            RwLockUpgradableReadGuard::upgrade(st)
                .vectors
                .drained(&step);
            std::thread::yield_now();
        }
    }
}
