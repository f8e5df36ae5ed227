//! The engine: ties the row store, the filter columns and both indexes together.
//!
//! One file per job: [`open`] (open, close, the directory lock), [`commit`] (the group
//! commit and applying its effects), [`tx`] (the rules of a write inside a group), [`writes`]
//! and [`reads`] (the public operations), [`search`] (search planning), [`recall`] (hybrid
//! recall: both legs, fusion, rerank, dedup), [`checkpoint`]
//! (checkpoints, backup, compaction) and [`recovery`] (bringing the derived indexes up to the
//! rows on open, and repairing them after a failed update).
//!
//! What must stay true:
//! - `gate` guards the open store. Every call holds it shared for its whole duration;
//!   `close` takes it exclusively, so it waits for in-flight calls and nothing runs after it.
//! - Writes go through one queue (group commit). The first writer to find no leader becomes
//!   the leader: it takes every queued operation, runs each against the open write transaction
//!   (which already holds the group's earlier operations), checks what the derived indexes
//!   need (room in the graphs), commits once (fsync), then applies the group's effects to the
//!   columns and both indexes in commit order, and only then acknowledges every writer. An
//!   operation validates before it writes anything, so a rejected one (`ConflictError`,
//!   `NotFoundError`) leaves no trace and fails alone. A leader runs one group, then hands
//!   the lead to a queued writer; it waits a little for the writers of recent groups first
//!   (see `commit`).
//! - No acknowledged write is invisible to search: when applying to an index fails after the
//!   commit, the leader rebuilds that index from the rows before acknowledging; if that fails
//!   too, the writers get the error and the index is marked damaged, refusing searches until a
//!   later repair (the next write group, or a reopen) succeeds.
//! - The commit and the apply happen under the exclusive `state` lock; readers hold it shared
//!   while they plan, search and read payloads, so a reader sees a row store snapshot that
//!   matches the columns exactly (read-your-writes, and no row vanishes mid-search).
//!
//! - Checkpoints run on their own thread (see `checkpoint`), never on a writer's.
//!
//! Lock order: `gate` -> `checkpointing` -> `rows` -> `counters` -> `state`. `rows` is taken
//! exclusively only by `compact`; `queue` is never held while any of the others is taken.

mod checkpoint;
pub(crate) mod coherence;
mod commit;
mod open;
mod reads;
mod recall;
mod recovery;
mod search;
mod tx;
mod writes;

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};
use serde::{Deserialize, Serialize};

use crate::columns::Columns;
use crate::error::{Error, Failures, Result};
use crate::keyword::KeywordIndex;
use crate::rows::RowStore;
use crate::types::Metric;
use crate::vector::{Tuning, VectorIndex};

pub use reads::Stats;
pub use recall::{Fusion, RecallQuery, Recalled, Source};
/// `Store.recall`'s defaults.
pub mod recall_defaults {
    pub use super::recall::{
        DEFAULT_ALPHA, DEFAULT_CONTEXT, DEFAULT_KEYWORD_HALF, DEFAULT_RRF_K, MIN_POOL,
    };
}

/// Settings of [`Engine::open`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Vector dimensions (required for a new store).
    pub dims: Option<usize>,
    /// Metric (default l2 for a new store).
    pub metric: Option<Metric>,
    /// Search-plan thresholds; tests lower them to reach every plan with few rows.
    pub tuning: Tuning,
    /// Remove the derived indexes (once the directory is locked) so that they are rebuilt
    /// from the rows (`memini check --repair`).
    pub rebuild_indexes: bool,
}

/// Counters persisted in the row store's meta table.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct Counters {
    next_rid: u64,
    seq: u64,
    next_vkey: u64,
    /// The changelog generation writes go to (derived from the tables on open).
    #[serde(skip)]
    log_gen: u64,
    /// Changelog generations older than this are held by both indexes (a checkpoint covered
    /// them): the next write group drops them in its own transaction (0: none to drop).
    #[serde(skip)]
    drop_before: u64,
}

/// Derived, in-memory state; changed only by the commit leader under the exclusive lock.
struct State {
    cols: Columns,
    vectors: VectorIndex,
    keyword: KeywordIndex,
    /// Changelog sequence of the last vector checkpoint.
    vector_seq: u64,
    /// Namespaces whose vectors are out of step with the rows (searches fail meanwhile).
    vector_damage: Option<Damage<String>>,
    /// Rows whose keyword documents are out of step with the rows (searches fail meanwhile).
    keyword_damage: Option<Damage<u64>>,
}

/// What a failed index update left to repair, and why.
#[derive(Default)]
struct Damage<T> {
    why: String,
    keys: std::collections::BTreeSet<T>,
}

impl<T: Ord> Damage<T> {
    fn add(&mut self, e: &Error, keys: impl IntoIterator<Item = T>) {
        log::warn!("index update failed ({e}); rebuilding it from the rows");
        self.why = e.to_string();
        self.keys.extend(keys);
    }
}

impl State {
    fn vectors(&self) -> Result<&VectorIndex> {
        match &self.vector_damage {
            None => Ok(&self.vectors),
            Some(d) => Err(damaged("vector", &d.why)),
        }
    }

    fn keyword(&self) -> Result<&KeywordIndex> {
        match &self.keyword_damage {
            None => Ok(&self.keyword),
            Some(d) => Err(damaged("keyword", &d.why)),
        }
    }
}

fn damaged(index: &str, why: &str) -> Error {
    Error::Storage(format!(
        "the {index} index is out of step with the stored rows after a failed update ({why}); \
         every write is stored, and the next write or a reopen of the store rebuilds it"
    ))
}

/// Places where a test can make the engine fail as a full disk or a failed allocation would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    /// Applying a committed group's changes to the vector index.
    VectorApply,
    /// Applying a committed group's changes to the keyword index.
    KeywordApply,
    /// Rebuilding an index from the rows after a failed apply.
    Repair,
    /// Writing a row inside a group's transaction (as a failing disk would).
    Write,
    /// Saving the indexes at a checkpoint.
    Checkpoint,
    /// A write panics inside its group, before the commit (as a bug in it would).
    WritePanic,
    /// The commit leader panics applying a committed group to the vector index (as a bug
    /// in it would).
    ApplyPanic,
}

/// Armed failpoints: how many more passes through each point fail.
#[derive(Default)]
struct Faults([AtomicU32; 7]);

impl Faults {
    fn arm(&self, point: FaultPoint, times: u32) {
        self.0[point as usize].store(times, Ordering::SeqCst);
    }

    /// Fails (once per armed pass) at `point`.
    fn check(&self, point: FaultPoint) -> Result<()> {
        let hit = self.0[point as usize]
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if hit {
            Err(Error::Storage(format!("injected fault at {point:?}")))
        } else {
            Ok(())
        }
    }

    /// Panics (once per armed pass) at `point`.
    fn panic_at(&self, point: FaultPoint) {
        if let Err(e) = self.check(point) {
            panic!("{e}");
        }
    }
}

/// A panic caught while `doing` something, as the error its writers get.
fn panicked(doing: &str, payload: &(dyn std::any::Any + Send)) -> Error {
    let why = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    log::error!("{doing} panicked: {why}");
    Error::Storage(format!("{doing} panicked ({why})"))
}

/// An open store.
struct Inner {
    dir: Option<PathBuf>,
    dims: usize,
    metric: Metric,
    rows: RwLock<RowStore>,
    state: RwLock<State>,
    queue: Mutex<commit::Queue>,
    /// Signalled when a write joins the queue (a lingering leader waits on it).
    queued: Condvar,
    counters: Mutex<Counters>,
    faults: Faults,
    /// Set when a commit failed and the row store could not say whether it landed: the
    /// in-memory state may be behind the rows, so writes are refused until a reopen.
    broken: Mutex<Option<String>>,
    checkpointer: checkpoint::Checkpointer,
    /// Checkpoints taken since open.
    checkpoints: std::sync::atomic::AtomicU64,
    /// Background checkpoints that failed, and the last one's error (nobody awaits them, so
    /// `stats` is where a failure shows; the rows hold every change, the next one retries).
    checkpoint_failures: Failures,
    /// Held by whoever takes a checkpoint, a backup or a compaction: one at a time.
    checkpointing: Mutex<()>,
    /// Signalled when a checkpoint thaws the graphs; a commit leader that found a frozen
    /// overlay full waits on it, holding `overlay_wait` (see `commit`).
    thawed: Condvar,
    overlay_wait: Mutex<()>,
    /// The directory's lock. Last: fields drop in order, so it is released only once the
    /// row store's file and the indexes are (else the next owner finds the row store open).
    _lock: Option<File>,
}

/// The memory store core. Thread-safe; every method takes `&self`.
pub struct Engine {
    gate: RwLock<Option<Arc<Inner>>>,
    pid: u32,
}

impl Engine {
    fn inner(&self) -> Result<parking_lot::MappedRwLockReadGuard<'_, Inner>> {
        if std::process::id() != self.pid {
            return Err(Error::Closed);
        }
        RwLockReadGuard::try_map(self.gate.read(), Option::as_deref).map_err(|_| Error::Closed)
    }

    /// Vector dimensions.
    pub fn dims(&self) -> Result<usize> {
        Ok(self.inner()?.dims)
    }

    /// Metric.
    pub fn metric(&self) -> Result<Metric> {
        Ok(self.inner()?.metric)
    }

    /// Sets the HNSW search breadth (candidates per graph search; recall vs speed).
    pub fn set_search_breadth(&self, breadth: usize) -> Result<()> {
        let inner = self.inner()?;
        inner.state.read().vectors.set_breadth(breadth);
        Ok(())
    }

    /// Fails when closed.
    pub fn ping(&self) -> Result<()> {
        self.inner().map(|_| ())
    }

    /// For tests: the next `times` passes through `point` fail with a storage error.
    pub fn inject_fault(&self, point: FaultPoint, times: u32) -> Result<()> {
        self.inner()?.faults.arm(point, times);
        Ok(())
    }
}
