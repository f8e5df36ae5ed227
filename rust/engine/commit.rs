//! The group commit: writers queue operations; one leader runs a group of them in one
//! transaction, commits once, applies the group's effects to the derived state and then
//! acknowledges each writer with its own outcome (see the module docs of `engine`).
//!
//! Lingering and handing the lead on: writers acknowledged together come back at slightly
//! different times. A leader that went on leading would run the first one back as a group
//! of one while the rest queue behind its fsync, and its own next write would always miss
//! the next group, so concurrent writers alternated between small groups. Instead a leader
//! runs one group and hands the lead to the first writer queued meanwhile, and a leader
//! that finds fewer writers queued than the largest of the last `RECENT` groups had waits
//! until that many are queued, or for as long as the last group took (at most
//! `MAX_LINGER`): no longer than if it had arrived during that group's commit. Writers that
//! stopped writing are forgotten after `RECENT` groups; a lone writer never waits. Measured
//! with 4 threads of single upserts into a new on-disk store (3 s, fdatasync counted with
//! perf, loaded 2-core machine): before, 1,480 writes in ~850 commits (1.7 per commit,
//! 490 writes/s); after, 2,720 writes in ~800 commits (3.4 per commit, 907 writes/s).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::tx::Tx;
use super::{panicked, Counters, Engine, FaultPoint, Inner, State};
use crate::error::{Error, Result};
use crate::keyword::{Doc, KeywordIndex, FOLD_DOCS};
use crate::rows::Col;
use crate::vector::VectorIndex;

/// Checkpoint the derived indexes after this many changes, so a crash costs a short replay.
pub(super) const CHECKPOINT_EVERY: u64 = 50_000;

/// What a committed group changes in the derived state, in commit order.
#[derive(Default)]
pub(super) struct Effects {
    pub(super) rows: Vec<(u64, Option<Col>)>,
    pub(super) vec_remove: Vec<(String, u64)>,
    pub(super) vec_add: Vec<(String, u64, Vec<f32>)>,
    pub(super) docs: Vec<DocChange>,
}

/// A keyword document change: the row, its new document (None = delete) and the sequence.
pub(super) struct DocChange {
    pub(super) rid: u64,
    pub(super) doc: Option<Doc>,
    pub(super) seq: u64,
}

/// The result of one queued write (its concrete type is known to the caller of `submit`).
type Out = Box<dyn std::any::Any + Send>;

type Op = Box<dyn FnOnce(&mut Tx<'_>) -> Result<Out> + Send>;

/// A queued operation and the slot its writer waits on.
type Job = (Op, Arc<Slot>);

/// What a queued writer is woken for: its outcome, or to lead the next group.
enum Wake {
    Done(Result<Out>),
    Lead,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    cv: Condvar,
}

#[derive(Default)]
struct SlotState {
    result: Option<Result<Out>>,
    /// The writer was given its outcome (it may have taken it already).
    answered: bool,
    lead: bool,
}

impl Slot {
    fn put(&self, r: Result<Out>) {
        let mut g = self.state.lock();
        g.result = Some(r);
        g.answered = true;
        self.cv.notify_all();
    }
    /// Gives the writer `r` unless it was given its outcome already.
    fn put_unanswered(&self, r: Result<Out>) {
        if !self.state.lock().answered {
            self.put(r);
        }
    }
    /// Hands the lead to this (queued, not yet run) writer.
    fn lead(&self) {
        self.state.lock().lead = true;
        self.cv.notify_all();
    }
    fn wait(&self) -> Wake {
        let mut g = self.state.lock();
        loop {
            if let Some(r) = g.result.take() {
                return Wake::Done(r);
            }
            if std::mem::take(&mut g.lead) {
                return Wake::Lead;
            }
            self.cv.wait(&mut g);
        }
    }
}

/// A group adding at least this many vectors updates the columns and the keyword index
/// while its graph inserts run (see `Inner::apply`); a smaller one does one after the other.
const CONCURRENT_APPLY_MIN: usize = 256;

/// The longest a leader waits for the writers of recent groups (see the module docs).
const MAX_LINGER: Duration = Duration::from_millis(5);
/// The longest a commit waits for a checkpoint to thaw a full overlay.
const MAX_STALL: Duration = Duration::from_secs(60);
/// How many recent groups a leader expects writers from.
const RECENT: usize = 8;

/// The write queue: jobs waiting for the next group, whether a leader is running groups, and
/// the sizes of the last `RECENT` groups and the duration of the last one (for lingering).
#[derive(Default)]
pub(super) struct Queue {
    jobs: Vec<Job>,
    leader: bool,
    recent: [usize; RECENT],
    groups: usize,
    last_took: Duration,
}

/// Waits until as many jobs are queued as the largest recent group had, for at most as long
/// as the last group took (and `MAX_LINGER`); returns at once when they had one writer.
fn linger(queued: &Condvar, q: &mut MutexGuard<'_, Queue>) {
    let want = q.recent.iter().copied().max().unwrap_or(0);
    if want <= 1 || q.jobs.is_empty() || q.jobs.len() >= want {
        return;
    }
    let deadline = Instant::now() + q.last_took.min(MAX_LINGER);
    while q.jobs.len() < want {
        if queued.wait_until(q, deadline).timed_out() {
            break;
        }
    }
}

impl Engine {
    /// Commit groups run since open: fewer than the writes when concurrent writes shared
    /// commits (see the module docs).
    ///
    /// # Errors
    /// `Closed` after close.
    pub fn write_groups(&self) -> Result<usize> {
        Ok(self.inner()?.queue.lock().groups)
    }

    /// Queues a write and waits for its durable result (see the module docs).
    pub(super) fn submit<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let op: Op = Box::new(move |tx: &mut Tx<'_>| op(tx).map(|v| Box::new(v) as Out));
        self.submit_op(op)?
            .downcast::<T>()
            .map(|b| *b)
            .map_err(|_| Error::storage("write queue", "result of an unexpected type"))
    }

    fn submit_op(&self, op: Op) -> Result<Out> {
        let inner = self.inner()?;
        if let Some(why) = inner.broken.lock().as_ref() {
            return Err(Error::Storage(format!(
                "the row store failed in the middle of a commit ({why}); reopen the store \
                 before writing again"
            )));
        }
        let slot = Arc::new(Slot::default());
        let mut q = inner.queue.lock();
        q.jobs.push((op, slot.clone()));
        let mut leading = !q.leader;
        if leading {
            q.leader = true;
        } else {
            inner.queued.notify_one();
        }
        drop(q);
        loop {
            if leading {
                inner.lead_one_group();
            }
            match slot.wait() {
                Wake::Done(r) => return r,
                Wake::Lead => leading = true,
            }
        }
    }
}

impl Inner {
    /// Waits while a checkpoint saves a graph whose overlay is full (see
    /// `vector::part::OVERLAY_MAX`): the save thaws it within seconds (~4 s at 1M rows), and
    /// the group's rows would only queue up in the overlay, searched exactly. After
    /// [`MAX_STALL`] the group goes on regardless.
    fn wait_for_overlay_room(&self) {
        let deadline = Instant::now() + MAX_STALL;
        let mut waiting = self.overlay_wait.lock();
        while self.state.read().vectors.overlay_full() {
            if self.thawed.wait_until(&mut waiting, deadline).timed_out() {
                break;
            }
        }
    }

    /// Leads one group: lingers for the writers of recent groups, runs every queued job,
    /// then hands the lead to the first writer queued meanwhile (or gives it up), so that
    /// this writer is free to queue its next write behind it.
    ///
    /// A panic in a write or while applying a committed group is caught where it happens
    /// (see `run_group` and `apply`). One anywhere else in the group still hands the lead
    /// on (else every later write would wait forever): the group's writers get an error,
    /// and as the rows may then hold what the columns and indexes do not, writes are
    /// refused until a reopen (as after a commit that may or may not have landed).
    fn lead_one_group(&self) {
        let mut q = self.queue.lock();
        linger(&self.queued, &mut q);
        let jobs = std::mem::take(&mut q.jobs);
        let writers = jobs.len();
        drop(q);
        let started = Instant::now();
        let slots: Vec<Arc<Slot>> = jobs.iter().map(|(_, s)| Arc::clone(s)).collect();
        let unrun = if writers == 0 {
            Vec::new()
        } else {
            catch_unwind(AssertUnwindSafe(|| self.run_group(jobs))).unwrap_or_else(|p| {
                let e = panicked("a commit group", &*p);
                *self.broken.lock() = Some(e.to_string());
                for s in slots {
                    s.put_unanswered(Err(e.clone()));
                }
                Vec::new()
            })
        };
        let took = started.elapsed();
        let mut q = self.queue.lock();
        if writers > 0 {
            let slot = q.groups % RECENT;
            (q.recent[slot], q.groups, q.last_took) = (writers, q.groups + 1, took);
        }
        // jobs a failed group never ran go first into the next one
        q.jobs.splice(0..0, unrun);
        match q.jobs.first() {
            Some((_, next)) => next.lead(),
            None => q.leader = false,
        }
    }

    /// Runs one commit group. Returns the jobs it did not run: those queued behind one that
    /// failed in the storage layer, which get their own outcome in the next group.
    fn run_group(&self, jobs: Vec<Job>) -> Vec<Job> {
        self.wait_for_overlay_room();
        let rows = self.rows.read();
        let mut counters = self.counters.lock();
        let saved = *counters;
        let batch = match rows.begin() {
            Ok(b) => b,
            Err(e) => {
                for (_, slot) in jobs {
                    slot.put(Err(e.clone()));
                }
                return Vec::new();
            }
        };
        let mut effects = Effects::default();
        let mut results = Vec::with_capacity(jobs.len());
        let mut failed: Option<Error> = None;
        let mut jobs = jobs.into_iter();
        {
            let st = self.state.read();
            for (op, slot) in jobs.by_ref() {
                let mut tx = Tx {
                    batch: &batch,
                    counters: &mut counters,
                    effects: &mut effects,
                    cols: &st.cols,
                    faults: &self.faults,
                };
                // a panicking write fails its group as a storage failure would: nothing of
                // the group is committed
                let r = catch_unwind(AssertUnwindSafe(|| op(&mut tx)))
                    .unwrap_or_else(|p| Err(panicked("a write", &*p)));
                if let Err(e) = &r {
                    if e.is_storage_fault() {
                        failed = Some(e.clone());
                    }
                }
                results.push((r, slot));
                if failed.is_some() {
                    break;
                }
            }
        }
        let unrun: Vec<Job> = jobs.collect();
        let mut st = self.state.write();
        // what the indexes will need is checked while the group can still be refused
        let ready = match failed {
            Some(e) => Err(e),
            None => prepare(&st, &effects)
                .and_then(|()| drop_covered_logs(&batch, &mut counters))
                .and_then(|()| batch.set_meta("counters", &*counters)),
        };
        let committed = match ready {
            Err(e) => Err((e, "nothing from it was stored")),
            // a commit can fail after its data reached the disk (a full disk cutting the last
            // write short): the row store says whether it landed
            Ok(()) => batch
                .commit()
                .or_else(|e| match landed(&rows, counters.seq) {
                    Some(true) => Ok(()),
                    Some(false) => Err((e, "nothing from it was stored")),
                    None => {
                        *self.broken.lock() = Some(e.to_string());
                        Err((
                            e,
                            "it may or may not be stored; reopen the store to find out",
                        ))
                    }
                }),
        };
        match committed {
            Ok(()) => {
                let applied = self.apply(&mut st, &rows, effects, counters.seq);
                let due = counters.seq.saturating_sub(st.vector_seq) >= CHECKPOINT_EVERY;
                drop(st);
                drop(counters);
                for (r, slot) in results {
                    slot.put(match (&applied, r) {
                        (Err(e), Ok(_)) => Err(Error::Storage(e.clone())),
                        (_, r) => r,
                    });
                }
                if due {
                    self.checkpointer.request();
                }
            }
            Err((e, outcome)) => {
                *counters = saved;
                drop(st);
                let prefix = format!("write failed, {outcome}");
                for (r, slot) in results {
                    slot.put(match r {
                        Err(
                            err @ (Error::NotFound(_)
                            | Error::Conflict(_)
                            | Error::InvalidArgument(_)
                            | Error::DimensionMismatch(_)
                            | Error::Interrupted),
                        ) => Err(err),
                        _ => Err(e.clone().within(&prefix)),
                    });
                }
            }
        }
        unrun
    }

    /// Merges a committed group's effects into the derived state. An index that fails (or
    /// panics) taking them is rebuilt from the rows (see `recovery`); the error returned,
    /// when even that fails, is what the group's writers are told.
    ///
    /// A bulk group's graph inserts run on the worker pool while this thread updates the
    /// columns and the keyword index: before, both waited for the inserts to end, one core
    /// idle meanwhile.
    fn apply(
        &self,
        st: &mut State,
        rows: &crate::rows::RowStore,
        effects: Effects,
        seq: u64,
    ) -> std::result::Result<(), String> {
        let Effects {
            rows: cols,
            vec_remove,
            vec_add,
            docs,
        } = effects;
        let namespaces: BTreeSet<String> = vec_remove
            .iter()
            .map(|(ns, _)| ns.clone())
            .chain(vec_add.iter().map(|(ns, _, _)| ns.clone()))
            .collect();
        let rids: BTreeSet<u64> = docs.iter().map(|d| d.rid).collect();
        let bulk = vec_add.len() >= CONCURRENT_APPLY_MIN;
        let State {
            cols: columns,
            vectors,
            keyword,
            ..
        } = st;
        let add_vectors = || {
            caught("applying a group to the vector index", || {
                self.faults.panic_at(FaultPoint::ApplyPanic);
                self.faults
                    .check(FaultPoint::VectorApply)
                    .and_then(|()| apply_vectors(vectors, &vec_remove, vec_add))
            })
        };
        let add_rest = || {
            for (rid, col) in cols {
                match col {
                    Some(c) => columns.put(rid, c),
                    None => columns.remove(rid),
                };
            }
            caught("applying a group to the keyword index", || {
                self.faults
                    .check(FaultPoint::KeywordApply)
                    .and_then(|()| apply_docs(keyword, docs, seq))
            })
        };
        let (added, indexed) = if bulk {
            match crate::pool::pool() {
                Ok(pool) => pool.install(|| rayon::join(add_vectors, add_rest)),
                Err(e) => (Err(e), add_rest()),
            }
        } else {
            (add_vectors(), add_rest())
        };
        if let Err(e) = added {
            st.vector_damage
                .get_or_insert_with(Default::default)
                .add(&e, namespaces);
        }
        if let Err(e) = indexed {
            st.keyword_damage
                .get_or_insert_with(Default::default)
                .add(&e, rids);
        }
        catch_unwind(AssertUnwindSafe(|| self.repair(st, rows, seq)))
            .unwrap_or_else(|p| Err(panicked("repairing an index", &*p).to_string()))
    }
}

/// Runs `f`, turning a panic into an error (the index it was updating is then rebuilt from
/// the rows, as after any failed update).
fn caught(doing: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(panicked(doing, &*p)))
}

/// Whether a commit that reported an error reached the row store anyway (its counters are
/// there): Some(answer), or None when the row store cannot say.
fn landed(rows: &crate::rows::RowStore, seq: u64) -> Option<bool> {
    let stored: Option<Counters> = rows.snapshot().ok()?.meta("counters").ok()?;
    Some(stored.is_some_and(|c| c.seq == seq))
}

/// Drops the changelog generations a checkpoint covered (see `Counters::drop_before`) in the
/// group's transaction. Measured: in a transaction of its own at the end of the checkpoint
/// (~1 ms of table drops for 50,000 changes, then an fsync), a writer's transaction waited
/// 12 and 18 ms for it in 2 of 8 runs of `bench_vector`'s writes across a checkpoint (100k
/// rows, loaded 2-core machine). Should the group fail, the restored counters keep it due.
fn drop_covered_logs(batch: &crate::rows::Batch, counters: &mut Counters) -> Result<()> {
    if counters.drop_before > 0 {
        batch.drop_logs_before(counters.drop_before)?;
        counters.drop_before = 0;
    }
    Ok(())
}

/// Room in the vector graphs for the group's inserts (a failed reservation refuses the
/// group before its commit, like any other invalid write).
fn prepare(st: &State, effects: &Effects) -> Result<()> {
    let mut adds: BTreeMap<&str, usize> = BTreeMap::new();
    for (ns, _, _) in &effects.vec_add {
        *adds.entry(ns.as_str()).or_default() += 1;
    }
    adds.into_iter()
        .try_for_each(|(ns, n)| st.vectors.reserve(ns, n))
}

fn apply_vectors(
    vectors: &mut VectorIndex,
    vec_remove: &[(String, u64)],
    vec_add: Vec<(String, u64, Vec<f32>)>,
) -> Result<()> {
    let removed: HashSet<u64> = vec_remove.iter().map(|(_, k)| *k).collect();
    for (ns, k) in vec_remove {
        vectors.remove(ns, *k)?;
    }
    let mut adds: BTreeMap<String, Vec<(u64, Vec<f32>)>> = BTreeMap::new();
    for (ns, k, v) in vec_add {
        if !removed.contains(&k) {
            adds.entry(ns).or_default().push((k, v));
        }
    }
    adds.into_iter()
        .try_for_each(|(ns, items)| vectors.add(&ns, items))
}

fn apply_docs(keyword: &KeywordIndex, docs: Vec<DocChange>, seq: u64) -> Result<()> {
    // a bulk group goes straight into tantivy with one commit; small ones through the delta
    let bulk = docs.len() >= FOLD_DOCS;
    for change in docs {
        keyword.put(change.rid, change.doc, change.seq, !bulk)?;
    }
    keyword.advance(seq);
    if bulk {
        keyword.commit()?;
    }
    Ok(())
}
