//! The engine: ties the row store, the filter columns and both indexes together.
//!
//! Locking and write ordering (what must stay true):
//! - `gate` guards the open store. Every call holds it shared for its whole duration;
//!   `close` takes it exclusively, so it waits for in-flight calls and nothing runs after it.
//! - Writes go through one queue (group commit). The first writer to find no leader becomes
//!   the leader: it takes every queued operation, runs each against the open write transaction
//!   (which already holds the group's earlier operations), commits once (fsync), then applies
//!   the group's effects to the columns and both indexes in commit order, and only then
//!   acknowledges every writer. An operation validates before it writes anything, so a
//!   rejected one (`ConflictError`, `NotFoundError`) leaves no trace and fails alone.
//! - The commit and the apply happen under the exclusive `state` lock; readers hold it shared
//!   while they plan, search and read payloads, so a reader sees a row store snapshot that
//!   matches the columns exactly (read-your-writes, and no row vanishes mid-search).
//! - Lock order: gate -> rows -> state. `rows` is taken exclusively only by `compact`.

use std::collections::HashSet;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::columns::{fingerprint_hash, pair_hash, tag_hash, Columns};
use crate::error::{Error, Result};
use crate::filter::Predicate;
use crate::keyword::{Doc, KeywordIndex, FOLD_DOCS};
use crate::rows::{to_memory, Batch, Change, Col, Payload, RowStore, Snapshot};
use crate::types::{
    now_micros, FilterSpec, Memory, MemoryPatch, Metric, Micros, NewMemory, Scored, SortKey, Tier,
};
use crate::vector::{Plan, VectorIndex, EXACT_MAX};

/// Checkpoint the derived indexes after this many changes, so a crash costs a short replay.
const CHECKPOINT_EVERY: u64 = 50_000;

/// Settings of [`Engine::open`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Vector dimensions (required for a new store).
    pub dims: Option<usize>,
    /// Metric (default l2 for a new store).
    pub metric: Option<Metric>,
}

/// Counters persisted in the row store's meta table.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct Counters {
    next_rid: u64,
    seq: u64,
    next_vkey: u64,
}

/// Derived, in-memory state; changed only by the commit leader under the exclusive lock.
struct State {
    cols: Columns,
    vectors: VectorIndex,
    keyword: KeywordIndex,
    /// Changelog sequence of the last vector checkpoint.
    vector_seq: u64,
}

/// What a committed group changes in the derived state, in commit order.
#[derive(Default)]
struct Effects {
    rows: Vec<(u64, Option<Col>)>,
    vec_remove: Vec<(String, u64)>,
    vec_add: Vec<(String, u64, Vec<f32>)>,
    docs: Vec<DocChange>,
}

/// A keyword document change: the row, its new document (None = delete) and the sequence.
struct DocChange {
    rid: u64,
    doc: Option<Doc>,
    seq: u64,
}

/// How a write changes a row's vector.
enum VecChange {
    Keep,
    Set(Vec<f32>),
    Remove,
}

/// The result of one queued write (its concrete type is known to the caller of `submit`).
type Out = Box<dyn std::any::Any + Send>;

type Op = Box<dyn FnOnce(&mut Tx<'_>) -> Result<Out> + Send>;

#[derive(Default)]
struct Slot {
    result: Mutex<Option<Result<Out>>>,
    cv: Condvar,
}

impl Slot {
    fn put(&self, r: Result<Out>) {
        *self.result.lock() = Some(r);
        self.cv.notify_all();
    }
    fn wait(&self) -> Result<Out> {
        let mut g = self.result.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.cv.wait(&mut g);
        }
    }
}

#[derive(Default)]
struct Queue {
    jobs: Vec<(Op, Arc<Slot>)>,
    leader: bool,
}

/// An open store.
struct Inner {
    dir: Option<PathBuf>,
    _lock: Option<File>,
    dims: usize,
    metric: Metric,
    rows: RwLock<RowStore>,
    state: RwLock<State>,
    queue: Mutex<Queue>,
    counters: Mutex<Counters>,
}

/// The memory store core. Thread-safe; every method takes `&self`.
pub struct Engine {
    gate: RwLock<Option<Inner>>,
    pid: u32,
}

/// The write transaction of one operation inside a commit group.
struct Tx<'a> {
    batch: &'a Batch,
    counters: &'a mut Counters,
    effects: &'a mut Effects,
    cols: &'a Columns,
}

fn take_lock(dir: &Path) -> Result<File> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))?;
    // flock (not fcntl): a second open in the same process conflicts too; dies with the process.
    if file.try_lock().is_err() {
        return Err(Error::Locked(format!(
            "store directory {} is in use by another open Store (this process or another); \
             close that Store first, or route work through the process that owns it",
            dir.display()
        )));
    }
    Ok(file)
}

fn metadata_hashes(metadata: &str) -> Result<Vec<u64>> {
    let v: serde_json::Value = serde_json::from_str(metadata)
        .map_err(|e| Error::invalid(format!("metadata is not valid JSON: {e}")))?;
    let serde_json::Value::Object(map) = v else {
        return Err(Error::invalid(
            "metadata must be a JSON object (a dict with str keys)",
        ));
    };
    Ok(map
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|s| pair_hash(k, s)))
        .collect())
}

fn doc_text(p: &Payload) -> String {
    let mut t = String::with_capacity(p.content.len() + p.summary.len() + 16);
    t.push_str(&p.content);
    t.push('\n');
    t.push_str(&p.summary);
    for tag in &p.tags {
        t.push('\n');
        t.push_str(tag);
    }
    t
}

impl Tx<'_> {
    /// The row `id` in `ns`, as of this transaction.
    fn load(&self, ns: &str, id: &str) -> Result<(u64, Col)> {
        let rid = self
            .batch
            .rid(id)?
            .ok_or_else(|| Error::not_found(ns, id))?;
        let col = self
            .batch
            .col(rid)?
            .ok_or_else(|| Error::Corruption(format!("row {rid} has no column record")))?;
        if col.namespace != ns {
            return Err(Error::not_found(ns, id));
        }
        Ok((rid, col))
    }

    fn next_seq(&mut self) -> u64 {
        self.counters.seq += 1;
        self.counters.seq
    }

    /// Writes row `rid`. `old` is its previous record (None = insert). `payload` is given
    /// when text or payload fields changed.
    fn write(
        &mut self,
        rid: u64,
        old: Option<&Col>,
        mut col: Col,
        payload: Option<&Payload>,
        vector: VecChange,
    ) -> Result<()> {
        let seq = self.next_seq();
        let moved = old.is_some_and(|o| o.namespace != col.namespace);
        let text_changed = payload.is_some() || moved || old.is_none();
        col.version = if text_changed {
            seq
        } else {
            old.map_or(seq, |o| o.version)
        };
        let old_vkey = old.and_then(|o| o.vkey);
        // re-upserting the same vector keeps its key: no graph insert, no grave
        let vector = match vector {
            VecChange::Set(v) if !moved && old_vkey.is_some() => {
                let same = self.batch.vector(rid)?.is_some_and(|o| {
                    o.iter()
                        .map(|x| x.to_bits())
                        .eq(v.iter().map(|x| x.to_bits()))
                });
                if same {
                    VecChange::Keep
                } else {
                    VecChange::Set(v)
                }
            }
            other => other,
        };
        let unchanged = matches!(vector, VecChange::Keep) && !moved;
        let new_vector = match vector {
            VecChange::Set(v) => Some(v),
            // a moved row's vector is re-added to its new partition under a new key
            VecChange::Keep if moved && old_vkey.is_some() => self.batch.vector(rid)?,
            VecChange::Keep | VecChange::Remove => None,
        };
        let removed = if unchanged {
            col.vkey = old_vkey;
            None
        } else {
            col.vkey = None;
            if let Some(v) = &new_vector {
                self.batch.put_vector(rid, Some(v))?;
                col.vkey = Some(self.counters.next_vkey);
                self.counters.next_vkey += 1;
            } else if old_vkey.is_some() {
                self.batch.put_vector(rid, None)?;
            }
            old_vkey
        };
        let text = match (payload, text_changed) {
            (Some(p), _) => Some(doc_text(p)),
            (None, true) => Some(doc_text(&self.batch.payload(rid)?)),
            (None, false) => None,
        };
        self.batch.put(rid, &col, payload)?;
        self.batch.log(
            seq,
            Change {
                rid,
                removed_vkey: removed,
            },
        )?;
        if let (Some(o), Some(k)) = (old, removed) {
            self.effects.vec_remove.push((o.namespace.clone(), k));
        }
        if let (Some(v), Some(k)) = (new_vector, col.vkey) {
            self.effects.vec_add.push((col.namespace.clone(), k, v));
        }
        if let Some(text) = text {
            let doc = Doc {
                namespace: col.namespace.clone(),
                text,
                tags: col.tag_hashes.clone(),
                version: col.version,
            };
            self.effects.docs.push(DocChange {
                rid,
                doc: Some(doc),
                seq,
            });
        }
        self.effects.rows.push((rid, Some(col)));
        Ok(())
    }

    /// Deletes row `rid` (whose record is `col`).
    fn delete(&mut self, rid: u64, col: &Col) -> Result<()> {
        let seq = self.next_seq();
        self.batch.remove(rid, &col.id)?;
        self.batch.log(
            seq,
            Change {
                rid,
                removed_vkey: col.vkey,
            },
        )?;
        if let Some(k) = col.vkey {
            self.effects.vec_remove.push((col.namespace.clone(), k));
        }
        self.effects.docs.push(DocChange {
            rid,
            doc: None,
            seq,
        });
        self.effects.rows.push((rid, None));
        Ok(())
    }

    /// Rids of `ns` as of this transaction: committed rows plus those this group wrote.
    fn rids_of(&self, ns: &str) -> Vec<u64> {
        let mut set: HashSet<u64> = self
            .cols
            .namespaces
            .get(ns)
            .map(|n| n.ids.values().copied().collect())
            .unwrap_or_default();
        for (rid, col) in &self.effects.rows {
            match col {
                Some(c) if c.namespace == ns => set.insert(*rid),
                _ => false,
            };
        }
        let mut v: Vec<u64> = set.into_iter().collect();
        v.sort_unstable();
        v
    }
}

fn build_row(m: &Memory) -> Result<(Col, Payload)> {
    let col = Col {
        id: m.id.clone(),
        namespace: m.namespace.clone(),
        tier: m.tier,
        level: m.level,
        tag_hashes: m.tags.iter().map(|t| tag_hash(t)).collect(),
        meta_hashes: metadata_hashes(&m.metadata)?,
        created_at: m.created_at,
        updated_at: m.updated_at,
        last_accessed_at: m.last_accessed_at,
        access_count: m.access_count,
        importance: m.importance,
        expires_at: m.expires_at,
        superseded_by: m.superseded_by.clone(),
        valid_from: m.valid_from,
        valid_to: m.valid_to,
        confidence: m.confidence,
        fingerprint_hash: fingerprint_hash(&m.fingerprint),
        vkey: None,
        version: 0,
    };
    let payload = Payload {
        content: m.content.clone(),
        summary: m.summary.clone(),
        metadata: m.metadata.clone(),
        tags: m.tags.clone(),
        linked_memory_ids: m.linked_memory_ids.clone(),
        fingerprint: m.fingerprint.clone(),
    };
    Ok((col, payload))
}

fn validate_vector(v: &[f32], dims: usize) -> Result<()> {
    if v.len() != dims {
        return Err(Error::DimensionMismatch(format!(
            "vector has {} dims, store expects {dims} (open the store with dims={} or re-embed)",
            v.len(),
            v.len()
        )));
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err(Error::invalid(
            "vector contains NaN or infinity (embed again; only finite values can be stored)",
        ));
    }
    Ok(())
}

fn validate_memory(m: &Memory) -> Result<()> {
    if m.id.is_empty() {
        return Err(Error::invalid("memory id must be a non-empty string"));
    }
    if m.namespace.is_empty() {
        return Err(Error::invalid(
            "memory namespace must be a non-empty string",
        ));
    }
    if !m.importance.is_finite() || m.confidence.is_some_and(|c| !c.is_finite()) {
        return Err(Error::invalid(
            "importance and confidence must be finite numbers",
        ));
    }
    Ok(())
}

/// Merges the effect lists of a committed group into the derived state.
fn apply(state: &mut State, effects: Effects, seq: u64) {
    for (rid, col) in effects.rows {
        match col {
            Some(c) => {
                state.cols.put(rid, c);
            }
            None => {
                state.cols.remove(rid);
            }
        }
    }
    let removed: HashSet<u64> = effects.vec_remove.iter().map(|(_, k)| *k).collect();
    for (ns, k) in &effects.vec_remove {
        if let Err(e) = state.vectors.remove(ns, *k) {
            log::error!("{e}");
        }
    }
    let mut adds: std::collections::BTreeMap<String, Vec<(u64, Vec<f32>)>> =
        std::collections::BTreeMap::new();
    for (ns, k, v) in effects.vec_add {
        if !removed.contains(&k) {
            adds.entry(ns).or_default().push((k, v));
        }
    }
    for (ns, items) in adds {
        if let Err(e) = state.vectors.add(&ns, items) {
            log::error!("{e}");
        }
    }
    // a bulk group goes straight into tantivy with one commit; small ones through the delta
    let bulk = effects.docs.len() >= FOLD_DOCS;
    for change in effects.docs {
        if let Err(e) = state.keyword.put(change.rid, change.doc, change.seq, !bulk) {
            log::error!("{e}");
        }
    }
    state.keyword.advance(seq);
    if bulk {
        if let Err(e) = state.keyword.commit() {
            log::error!("{e}");
        }
    }
}

impl Engine {
    /// Opens (or creates) a store. `dir = None` is an in-memory store.
    pub fn open(dir: Option<&Path>, options: &Options) -> Result<Self> {
        if options.dims == Some(0) {
            return Err(Error::invalid("dims must be >= 1"));
        }
        let lock = match dir {
            Some(d) => {
                fs::create_dir_all(d)?;
                Some(take_lock(d)?)
            }
            None => None,
        };
        let rows = RowStore::open(dir.map(|d| d.join("rows.redb")).as_deref())?;
        let snap = rows.snapshot()?;
        let stored_dims: Option<u64> = snap.meta("dims")?;
        let stored_metric: Option<String> = snap.meta("metric")?;
        let (dims, metric) = match (stored_dims, stored_metric) {
            (Some(d), Some(m)) => {
                let d = usize::try_from(d)
                    .map_err(|_| Error::Corruption("stored dims out of range".into()))?;
                let m = Metric::parse(&m)?;
                if options.dims.is_some_and(|x| x != d) || options.metric.is_some_and(|x| x != m) {
                    return Err(Error::DimensionMismatch(format!(
                        "store was created with dims={d}, metric={}; opened with dims={}, metric={} \
                         (pass dims=None and metric=None to use the stored values, or use a new directory)",
                        m.as_str(),
                        options.dims.map_or("None".into(), |x| x.to_string()),
                        options.metric.map_or("None", Metric::as_str),
                    )));
                }
                (d, m)
            }
            _ => {
                let d = options.dims.ok_or_else(|| {
                    Error::invalid(
                        "dims is required to create a new store (e.g. Store.open(path, dims=384))",
                    )
                })?;
                let m = options.metric.unwrap_or(Metric::L2);
                let b = rows.begin()?;
                b.set_meta("dims", &(d as u64))?;
                b.set_meta("metric", &m.as_str().to_owned())?;
                b.commit()?;
                (d, m)
            }
        };
        let snap = rows.snapshot()?;
        let counters: Counters = snap.meta("counters")?.unwrap_or_default();
        let cols = Columns::load(snap.cols()?);
        log::info!(
            "loaded {} rows in {} namespaces",
            cols.rows.len(),
            cols.namespaces.len()
        );
        let vectors = open_vectors(dir, dims, metric, &snap, &cols, counters.seq)?;
        let keyword = open_keyword(dir, &snap, &cols, counters.seq)?;
        drop(snap);
        let state = State {
            cols,
            vectors: vectors.0,
            keyword,
            vector_seq: vectors.1,
        };
        Ok(Self {
            gate: RwLock::new(Some(Inner {
                dir: dir.map(Path::to_path_buf),
                _lock: lock,
                dims,
                metric,
                rows: RwLock::new(rows),
                state: RwLock::new(state),
                queue: Mutex::new(Queue::default()),
                counters: Mutex::new(counters),
            })),
            pid: std::process::id(),
        })
    }

    fn inner(&self) -> Result<parking_lot::MappedRwLockReadGuard<'_, Inner>> {
        if std::process::id() != self.pid {
            return Err(Error::Closed);
        }
        RwLockReadGuard::try_map(self.gate.read(), Option::as_ref).map_err(|_| Error::Closed)
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

    /// Checkpoints the indexes and closes; waits for in-flight calls. Idempotent. In a forked
    /// child it does nothing (the parent owns the store and its lock).
    pub fn close(&self) -> Result<()> {
        if std::process::id() != self.pid {
            return Ok(());
        }
        let inner = self.gate.write().take();
        match inner {
            Some(inner) => inner.checkpoint(),
            None => Ok(()),
        }
    }

    /// Queues a write and waits for its durable result (see the module docs).
    fn submit<T: Send + 'static>(
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
        let slot = Arc::new(Slot::default());
        let mut q = inner.queue.lock();
        q.jobs.push((op, slot.clone()));
        if !q.leader {
            q.leader = true;
            loop {
                let jobs = std::mem::take(&mut q.jobs);
                if jobs.is_empty() {
                    q.leader = false;
                    break;
                }
                drop(q);
                inner.run_group(jobs);
                q = inner.queue.lock();
            }
        }
        drop(q);
        slot.wait()
    }

    /// Inserts or replaces memories atomically; returns, per row, whether it was an insert.
    pub fn upsert_many(&self, memories: Vec<NewMemory>) -> Result<Vec<bool>> {
        let dims = self.dims()?;
        for m in &memories {
            validate_memory(&m.memory)?;
            metadata_hashes(&m.memory.metadata)?;
            if let Some(v) = &m.embedding {
                validate_vector(v, dims)?;
            }
        }
        self.submit(move |tx: &mut Tx<'_>| {
            // validate the whole batch before writing any of it
            let mut seen: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
            for m in &memories {
                let (id, ns) = (m.memory.id.as_str(), m.memory.namespace.as_str());
                let owner = match seen.get(id) {
                    Some(o) => Some((*o).to_owned()),
                    None => match tx.batch.rid(id)? {
                        Some(rid) => tx.batch.col(rid)?.map(|c| c.namespace),
                        None => None,
                    },
                };
                if owner.is_some_and(|o| o != ns) {
                    return Err(Error::Conflict(format!(
                        "memory id {id:?} already exists in a different namespace (ids are unique across namespaces; use a new id)"
                    )));
                }
                seen.insert(id, ns);
            }
            let now = now_micros();
            let mut inserted = Vec::with_capacity(memories.len());
            for m in memories {
                let old = match tx.batch.rid(&m.memory.id)? {
                    Some(rid) => tx.batch.col(rid)?.map(|c| (rid, c)),
                    None => None,
                };
                let mut mem = m.memory;
                mem.created_at = match &old {
                    Some((_, c)) => c.created_at,
                    None if m.has_created_at => mem.created_at,
                    None => now,
                };
                if !m.has_updated_at {
                    mem.updated_at = now;
                }
                if !m.has_last_accessed_at {
                    mem.last_accessed_at = now;
                }
                let (col, payload) = build_row(&mem)?;
                let vector = match m.embedding {
                    Some(v) if !v.is_empty() => VecChange::Set(v),
                    _ => VecChange::Remove,
                };
                inserted.push(old.is_none());
                let rid = match &old {
                    Some((rid, _)) => *rid,
                    None => {
                        tx.counters.next_rid += 1;
                        tx.counters.next_rid
                    }
                };
                tx.write(rid, old.as_ref().map(|(_, c)| c), col, Some(&payload), vector)?;
            }
            Ok(inserted)
        })
    }

    /// Partial update; returns the stored row.
    pub fn update(&self, ns: &str, id: &str, patch: MemoryPatch) -> Result<Memory> {
        let dims = self.dims()?;
        if let Some(Some(v)) = &patch.embedding {
            validate_vector(v, dims)?;
        }
        if let Some(m) = &patch.metadata {
            metadata_hashes(m)?;
        }
        if patch.importance.is_some_and(|x| !x.is_finite())
            || patch
                .confidence
                .is_some_and(|c| c.is_some_and(|x| !x.is_finite()))
        {
            return Err(Error::invalid(
                "importance and confidence must be finite numbers",
            ));
        }
        let (ns, id) = (ns.to_owned(), id.to_owned());
        self.submit(move |tx: &mut Tx<'_>| {
            let (rid, old) = tx.load(&ns, &id)?;
            let p = tx.batch.payload(rid)?;
            let mut m = to_memory(&old, p);
            let payload_changed = patch.content.is_some()
                || patch.summary.is_some()
                || patch.metadata.is_some()
                || patch.tags.is_some()
                || patch.linked_memory_ids.is_some();
            if let Some((c, fp)) = patch.content {
                m.content = c;
                m.fingerprint = fp;
            }
            if let Some(x) = patch.tier {
                m.tier = x;
            }
            if let Some(x) = patch.level {
                m.level = x;
            }
            if let Some(x) = patch.summary {
                m.summary = x;
            }
            if let Some(x) = patch.metadata {
                m.metadata = x;
            }
            if let Some(x) = patch.tags {
                m.tags = x;
            }
            if let Some(x) = patch.importance {
                m.importance = x;
            }
            m.updated_at = patch.updated_at.unwrap_or_else(now_micros);
            if let Some(x) = patch.last_accessed_at {
                m.last_accessed_at = x;
            }
            if let Some(x) = patch.access_count {
                m.access_count = x;
            }
            if let Some(x) = patch.expires_at {
                m.expires_at = x;
            }
            if let Some(x) = patch.superseded_by {
                m.superseded_by = x;
            }
            if let Some(x) = patch.valid_from {
                m.valid_from = x;
            }
            if let Some(x) = patch.valid_to {
                m.valid_to = x;
            }
            if let Some(x) = patch.confidence {
                m.confidence = x;
            }
            if let Some(x) = patch.linked_memory_ids {
                m.linked_memory_ids = x;
            }
            let (col, payload) = build_row(&m)?;
            let vector = match patch.embedding {
                None => VecChange::Keep,
                Some(Some(v)) if !v.is_empty() => VecChange::Set(v),
                Some(_) => VecChange::Remove,
            };
            tx.write(
                rid,
                Some(&old),
                col,
                payload_changed.then_some(&payload),
                vector,
            )?;
            Ok(m)
        })
    }

    /// Applies `f` to the column record of one row (no payload change); `NotFound` if absent.
    fn modify(
        &self,
        ns: &str,
        id: &str,
        f: impl FnOnce(&mut Col) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        let (ns, id) = (ns.to_owned(), id.to_owned());
        self.submit(move |tx: &mut Tx<'_>| {
            let (rid, old) = tx.load(&ns, &id)?;
            let mut col = old.clone();
            f(&mut col)?;
            tx.write(rid, Some(&old), col, None, VecChange::Keep)?;
            Ok(())
        })
    }

    /// Deletes a row; returns it.
    pub fn delete(&self, ns: &str, id: &str) -> Result<Memory> {
        self.delete_where(ns, id, None)
    }

    /// Deletes a row only if it expires at or before `cutoff`; returns it.
    pub fn delete_if_expired_before(&self, ns: &str, id: &str, cutoff: Micros) -> Result<Memory> {
        self.delete_where(ns, id, Some(cutoff))
    }

    fn delete_where(&self, ns: &str, id: &str, cutoff: Option<Micros>) -> Result<Memory> {
        let (ns, id) = (ns.to_owned(), id.to_owned());
        self.submit(move |tx: &mut Tx<'_>| {
            let (rid, col) = tx.load(&ns, &id)?;
            if let Some(c) = cutoff {
                if col.expires_at.is_none_or(|e| e > c) {
                    return Err(Error::NotFound(format!(
                        "memory not found: id {id:?} in namespace {ns:?} does not expire at or before the cutoff"
                    )));
                }
            }
            let m = to_memory(&col, tx.batch.payload(rid)?);
            tx.delete(rid, &col)?;
            Ok(m)
        })
    }

    /// Tombstones a row; stamps `valid_to = now` unless set.
    pub fn set_superseded(&self, ns: &str, id: &str, by: &str, now: Micros) -> Result<()> {
        let by = by.to_owned();
        self.modify(ns, id, move |c| {
            c.superseded_by = Some(by);
            c.valid_to.get_or_insert(now);
            Ok(())
        })
    }

    /// Clears `superseded_by` and `valid_to`.
    pub fn restore(&self, ns: &str, id: &str) -> Result<()> {
        self.modify(ns, id, |c| {
            c.superseded_by = None;
            c.valid_to = None;
            Ok(())
        })
    }

    /// Changes tier and expiry.
    pub fn retier(&self, ns: &str, id: &str, tier: Tier, expires_at: Option<Micros>) -> Result<()> {
        self.modify(ns, id, move |c| {
            c.tier = tier;
            c.expires_at = expires_at;
            Ok(())
        })
    }

    /// Sets the confidence; refuses a row whose validity ended.
    pub fn set_confidence(&self, ns: &str, id: &str, confidence: f64, now: Micros) -> Result<()> {
        if !confidence.is_finite() {
            return Err(Error::invalid("confidence must be a finite number"));
        }
        let (n, i) = (ns.to_owned(), id.to_owned());
        self.modify(ns, id, move |c| {
            if c.valid_to.is_some_and(|v| v <= now) {
                return Err(Error::NotFound(format!(
                    "memory not found: id {i:?} in namespace {n:?} is no longer valid (its valid_to has passed)"
                )));
            }
            c.confidence = Some(confidence);
            c.updated_at = now;
            Ok(())
        })
    }

    /// Marks a row contradicted (metadata keys, confidence, valid_to, updated_at).
    pub fn mark_contradicted(
        &self,
        ns: &str,
        id: &str,
        by: &str,
        confidence: f64,
        now: Micros,
    ) -> Result<()> {
        if !confidence.is_finite() {
            return Err(Error::invalid("confidence must be a finite number"));
        }
        let (ns, id, by) = (ns.to_owned(), id.to_owned(), by.to_owned());
        self.submit(move |tx: &mut Tx<'_>| {
            let (rid, old) = tx.load(&ns, &id)?;
            let mut p = tx.batch.payload(rid)?;
            let mut meta: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&p.metadata)
                    .map_err(|e| Error::Corruption(format!("stored metadata: {e}")))?;
            meta.insert("contradicted_by".into(), serde_json::Value::String(by));
            let prev = old
                .confidence
                .and_then(serde_json::Number::from_f64)
                .map_or(serde_json::Value::Null, serde_json::Value::Number);
            meta.insert("contradicted_prev_confidence".into(), prev);
            p.metadata = serde_json::to_string(&meta).map_err(|e| Error::storage("metadata", e))?;
            let mut col = old.clone();
            col.meta_hashes = metadata_hashes(&p.metadata)?;
            col.confidence = Some(confidence);
            col.valid_to.get_or_insert(now);
            col.updated_at = now;
            tx.write(rid, Some(&old), col, Some(&p), VecChange::Keep)?;
            Ok(())
        })
    }

    /// access_count += 1 and last_accessed_at = `at` on the listed rows of `ns`; `new_expiry`
    /// replaces `expires_at` on rows that already expire. Missing ids are ignored.
    pub fn reinforce(
        &self,
        ns: &str,
        ids: Vec<String>,
        at: Micros,
        new_expiry: Option<Micros>,
    ) -> Result<()> {
        let ns = ns.to_owned();
        // one access per call and row, however often the id is listed
        let mut ids = ids;
        ids.sort_unstable();
        ids.dedup();
        self.submit(move |tx: &mut Tx<'_>| {
            for id in ids {
                let Ok((rid, old)) = tx.load(&ns, &id) else {
                    continue;
                };
                let mut col = old.clone();
                col.access_count = col.access_count.saturating_add(1);
                col.last_accessed_at = at;
                if let (Some(e), Some(_)) = (new_expiry, col.expires_at) {
                    col.expires_at = Some(e);
                }
                tx.write(rid, Some(&old), col, None, VecChange::Keep)?;
            }
            Ok(())
        })
    }

    /// Deletes up to `limit` (<= 0: all) rows with `expires_at <= now` across namespaces,
    /// each through the `delete_if_expired_before` rule; returns the tiers of the rows deleted.
    pub fn sweep_expired(&self, now: Micros, limit: i64) -> Result<Vec<Tier>> {
        self.submit(move |tx: &mut Tx<'_>| {
            let mut cands: Vec<(Micros, &str, u64)> = Vec::new();
            for ns in tx.cols.namespaces.values() {
                if !ns.expiries.any_at_or_before(now) {
                    continue;
                }
                for rid in ns.ids.values() {
                    if let Some(c) = tx.cols.rows.get(rid) {
                        if let Some(e) = c.expires_at.filter(|e| *e <= now) {
                            cands.push((e, c.id.as_str(), *rid));
                        }
                    }
                }
            }
            cands.sort_unstable();
            if limit > 0 {
                cands.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            }
            let rids: Vec<u64> = cands.iter().map(|c| c.2).collect();
            let mut tiers = Vec::new();
            for rid in rids {
                let Some(col) = tx.batch.col(rid)? else {
                    continue;
                };
                if col.expires_at.is_some_and(|e| e <= now) {
                    tx.delete(rid, &col)?;
                    tiers.push(col.tier);
                }
            }
            Ok(tiers)
        })
    }

    /// Deletes every row of a namespace; returns the tiers of the rows deleted.
    pub fn delete_namespace(&self, ns: &str) -> Result<Vec<Tier>> {
        let ns = ns.to_owned();
        self.submit(move |tx: &mut Tx<'_>| {
            let mut tiers = Vec::new();
            for rid in tx.rids_of(&ns) {
                let Some(col) = tx.batch.col(rid)? else {
                    continue;
                };
                if col.namespace == ns {
                    tx.delete(rid, &col)?;
                    tiers.push(col.tier);
                }
            }
            Ok(tiers)
        })
    }

    /// Moves the listed rows from one namespace to another; returns rows moved.
    pub fn reassign(&self, from: &str, ids: Vec<String>, to: &str) -> Result<usize> {
        if from == to {
            self.ping()?;
            return Ok(0);
        }
        if to.is_empty() {
            return Err(Error::invalid(
                "target namespace must be a non-empty string",
            ));
        }
        let (from, to) = (from.to_owned(), to.to_owned());
        self.submit(move |tx: &mut Tx<'_>| {
            let mut n = 0;
            for id in ids {
                let Ok((rid, old)) = tx.load(&from, &id) else {
                    continue;
                };
                let mut col = old.clone();
                col.namespace.clone_from(&to);
                tx.write(rid, Some(&old), col, None, VecChange::Keep)?;
                n += 1;
            }
            Ok(n)
        })
    }

    /// The embedding model name ("" until set).
    pub fn embed_model(&self) -> Result<String> {
        let inner = self.inner()?;
        let rows = inner.rows.read();
        Ok(rows
            .snapshot()?
            .meta::<String>("embed_model")?
            .unwrap_or_default())
    }

    /// Sets the embedding model name.
    pub fn set_embed_model(&self, model: &str) -> Result<()> {
        let model = model.to_owned();
        self.submit(move |tx: &mut Tx<'_>| {
            tx.batch.set_meta("embed_model", &model)?;
            Ok(())
        })
    }

    // ---------------------------------------------------------------- reads

    /// Runs `f` with a consistent view: the columns and a row-store snapshot that matches them.
    fn read<T>(&self, f: impl FnOnce(&Inner, &State, &Snapshot) -> Result<T>) -> Result<T> {
        let inner = self.inner()?;
        let rows = inner.rows.read();
        let state = inner.state.read();
        let snap = rows.snapshot()?;
        f(&inner, &state, &snap)
    }

    /// One row.
    pub fn get(&self, ns: &str, id: &str) -> Result<Memory> {
        self.read(|_, st, snap| {
            let rid = st
                .cols
                .rid(ns, id)
                .ok_or_else(|| Error::not_found(ns, id))?;
            Ok(materialize(st, snap, &[rid])?.remove(0))
        })
    }

    /// A row's vector (None for keyword-only rows).
    pub fn get_embedding(&self, ns: &str, id: &str) -> Result<Option<Vec<f32>>> {
        self.read(|_, st, snap| {
            let rid = st
                .cols
                .rid(ns, id)
                .ok_or_else(|| Error::not_found(ns, id))?;
            snap.vector(rid)
        })
    }

    /// Ids of `ns` starting with `prefix`, ascending.
    pub fn ids_by_prefix(&self, ns: &str, prefix: &str, limit: i64) -> Result<Vec<String>> {
        self.read(|_, st, _| {
            if prefix.is_empty() || limit <= 0 {
                return Ok(Vec::new());
            }
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(Vec::new());
            };
            Ok(n.ids
                .range::<str, _>((
                    std::ops::Bound::Included(prefix),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|(id, _)| id.starts_with(prefix))
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .map(|(id, _)| id.clone())
                .collect())
        })
    }

    /// Ids of `ns` whose `superseded_by == id`, ascending.
    pub fn predecessor_ids(&self, ns: &str, id: &str) -> Result<Vec<String>> {
        self.read(|_, st, _| {
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(Vec::new());
            };
            if n.superseded == 0 {
                return Ok(Vec::new());
            }
            Ok(n.ids
                .iter()
                .filter(|(_, rid)| {
                    st.cols
                        .rows
                        .get(rid)
                        .is_some_and(|c| c.superseded_by.as_deref() == Some(id))
                })
                .map(|(i, _)| i.clone())
                .collect())
        })
    }

    /// The newest live row (by created_at) of `ns` and `tier` with this content fingerprint.
    pub fn get_by_fingerprint(
        &self,
        ns: &str,
        tier: Tier,
        fingerprint: &str,
        now: Micros,
    ) -> Result<Memory> {
        self.read(|_, st, snap| {
            let missing = || {
                Error::NotFound(format!(
                    "memory not found: no live {} memory with that fingerprint in namespace {ns:?}",
                    tier.as_str()
                ))
            };
            if fingerprint.is_empty() {
                return Err(missing());
            }
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Err(missing());
            };
            let spec = FilterSpec {
                now,
                tiers: vec![tier],
                ..FilterSpec::default()
            };
            let pred = Predicate::new(&spec, n);
            let h = fingerprint_hash(fingerprint);
            let mut cands: Vec<(Micros, &str, u64)> = n
                .ids
                .iter()
                .filter_map(|(id, rid)| {
                    let c = st.cols.rows.get(rid)?;
                    (c.fingerprint_hash == h && pred.matches(*rid, c)).then_some((
                        c.created_at,
                        id.as_str(),
                        *rid,
                    ))
                })
                .collect();
            cands.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
            for (_, _, rid) in cands {
                let m = materialize(st, snap, &[rid])?.remove(0);
                if m.fingerprint == fingerprint {
                    return Ok(m);
                }
            }
            Err(missing())
        })
    }

    /// Rows with `expires_at <= now` across namespaces, by expiry then id; limit <= 0 = all.
    pub fn list_expired(&self, now: Micros, limit: i64) -> Result<Vec<Memory>> {
        self.read(|_, st, snap| {
            let mut cands: Vec<(Micros, &str, u64)> = st
                .cols
                .rows
                .iter()
                .filter_map(|(rid, c)| {
                    c.expires_at
                        .filter(|e| *e <= now)
                        .map(|e| (e, c.id.as_str(), *rid))
                })
                .collect();
            cands.sort_unstable();
            if limit > 0 {
                cands.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            }
            let rids: Vec<u64> = cands.into_iter().map(|c| c.2).collect();
            materialize(st, snap, &rids)
        })
    }

    /// Rows of `ns` passing the filter, ordered by its sort key (ties by id ascending).
    pub fn list(
        &self,
        ns: &str,
        spec: &FilterSpec,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<Memory>> {
        self.read(|_, st, snap| {
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(Vec::new());
            };
            let pred = Predicate::new(spec, n);
            let rids = matching(st, n, &pred);
            let key = spec.sort_key.unwrap_or(SortKey::CreatedAt);
            let mut items: Vec<(f64, i64, &str, u64)> = rids
                .into_iter()
                .filter_map(|rid| {
                    let c = st.cols.rows.get(&rid)?;
                    let (f, i) = match key {
                        SortKey::CreatedAt => (0.0, c.created_at),
                        SortKey::UpdatedAt => (0.0, c.updated_at),
                        SortKey::LastAccessedAt => (0.0, c.last_accessed_at),
                        SortKey::AccessCount => (0.0, c.access_count),
                        SortKey::Importance => (c.importance, 0),
                    };
                    Some((f, i, c.id.as_str(), rid))
                })
                .collect();
            let asc = spec.sort_asc;
            let cmp = |a: &(f64, i64, &str, u64), b: &(f64, i64, &str, u64)| {
                let primary = a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
                (if asc { primary } else { primary.reverse() }).then_with(|| a.2.cmp(b.2))
            };
            let skip = usize::try_from(offset.max(0)).unwrap_or(usize::MAX);
            let take = if limit > 0 {
                usize::try_from(limit).unwrap_or(usize::MAX)
            } else {
                usize::MAX
            };
            let end = skip.saturating_add(take).min(items.len());
            if skip >= items.len() {
                return Ok(Vec::new());
            }
            if end < items.len() {
                items.select_nth_unstable_by(end, cmp);
                items.truncate(end);
            }
            items.sort_unstable_by(cmp);
            let rids: Vec<u64> = items[skip..end].iter().map(|x| x.3).collect();
            materialize(st, snap, &rids)
        })
    }

    /// Number of rows of `ns` passing the filter.
    pub fn count(&self, ns: &str, spec: &FilterSpec) -> Result<usize> {
        self.read(|_, st, _| {
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(0);
            };
            let pred = Predicate::new(spec, n);
            if pred.is_trivial() {
                return Ok(n.ids.len());
            }
            Ok(matching(st, n, &pred).len())
        })
    }

    /// Every namespace holding a row, ascending.
    pub fn list_namespaces(&self) -> Result<Vec<String>> {
        self.read(|_, st, _| Ok(st.cols.namespaces.keys().cloned().collect()))
    }

    /// Per namespace with >= 1 live row: (namespace, live rows, newest live created_at).
    pub fn namespace_activity(&self, now: Micros) -> Result<Vec<(String, usize, Micros)>> {
        self.read(|_, st, _| {
            let spec = FilterSpec {
                now,
                ..FilterSpec::default()
            };
            Ok(st
                .cols
                .namespaces
                .iter()
                .filter_map(|(name, n)| {
                    let pred = Predicate::new(&spec, n);
                    let (count, newest) = n
                        .ids
                        .values()
                        .filter_map(|rid| st.cols.rows.get(rid).filter(|c| pred.matches(*rid, c)))
                        .fold((0usize, Micros::MIN), |(k, t), c| {
                            (k + 1, t.max(c.created_at))
                        });
                    (count > 0).then(|| (name.clone(), count, newest))
                })
                .collect())
        })
    }

    /// Live rows per tier across namespaces.
    pub fn active_by_tier(&self, now: Micros) -> Result<Vec<(Tier, usize)>> {
        self.read(|_, st, _| {
            let spec = FilterSpec {
                now,
                ..FilterSpec::default()
            };
            let mut counts = [0usize; 4];
            for n in st.cols.namespaces.values() {
                let pred = Predicate::new(&spec, n);
                for rid in n.ids.values() {
                    if let Some(c) = st.cols.rows.get(rid).filter(|c| pred.matches(*rid, c)) {
                        counts[c.tier as usize] += 1;
                    }
                }
            }
            Ok(Tier::ALL
                .iter()
                .map(|t| (*t, counts[*t as usize]))
                .collect())
        })
    }

    /// Free-form statistics: (key, value) pairs of numbers, per namespace counts by tier.
    pub fn stats(&self) -> Result<Stats> {
        self.read(|inner, st, _| {
            let mut namespaces = Vec::new();
            for (name, n) in &st.cols.namespaces {
                let mut by_tier = [0usize; 4];
                for rid in n.ids.values() {
                    if let Some(c) = st.cols.rows.get(rid) {
                        by_tier[c.tier as usize] += 1;
                    }
                }
                namespaces.push((name.clone(), n.ids.len(), by_tier, n.vectors));
            }
            let (graphs, flats) = st.vectors.partition_counts();
            Ok(Stats {
                rows: st.cols.rows.len(),
                namespaces,
                vector_graphs: graphs,
                vector_flat_partitions: flats,
                vector_memory_bytes: st.vectors.memory_usage(),
                vector_index_entries: st.vectors.total_len(),
                keyword_docs: st.keyword.num_docs(),
                keyword_segments: st.keyword.num_segments(),
                bytes_on_disk: inner.dir.as_deref().map_or(0, dir_size),
                dims: inner.dims,
                metric: inner.metric,
            })
        })
    }

    /// Vector search: best `k` rows of `ns` passing the filter.
    pub fn vector_search(
        &self,
        ns: &str,
        query: &[f32],
        spec: &FilterSpec,
        k: usize,
    ) -> Result<Vec<Scored>> {
        Ok(self.vector_search_many(ns, &[query], spec, k)?.remove(0))
    }

    /// Vector search of several queries, spread over threads.
    pub fn vector_search_many(
        &self,
        ns: &str,
        queries: &[&[f32]],
        spec: &FilterSpec,
        k: usize,
    ) -> Result<Vec<Vec<Scored>>> {
        if k < 1 {
            return Err(Error::invalid("k must be >= 1"));
        }
        self.read(|inner, st, snap| {
            for q in queries {
                validate_vector(q, inner.dims)?;
            }
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(vec![Vec::new(); queries.len()]);
            };
            let pred = Predicate::new(spec, n);
            let k = k.min(n.vectors); // never allocate for more hits than rows
            let pred_fn = |vkey: u64| -> bool {
                st.cols
                    .by_vkey
                    .get(&vkey)
                    .is_some_and(|rid| st.cols.rows.get(rid).is_some_and(|c| pred.matches(*rid, c)))
            };
            let all_keys = || matching_map(st, n, &pred, |_, c| c.vkey);
            let plan = if pred.is_trivial() {
                Plan::All
            } else if pred.candidate_count() <= EXACT_MAX {
                Plan::Keys(all_keys())
            } else {
                Plan::Predicate {
                    pred: &pred_fn,
                    all_keys: &all_keys,
                    selectivity: selectivity(st, n, &pred),
                }
            };
            let run = |q: &&[f32]| -> Result<Vec<Scored>> {
                let hits = st.vectors.search(ns, q, k, &plan)?;
                let rids: Vec<u64> = hits
                    .iter()
                    .filter_map(|(vk, _)| st.cols.by_vkey.get(vk).copied())
                    .collect();
                let mems = materialize(st, snap, &rids)?;
                Ok(mems
                    .into_iter()
                    .zip(hits)
                    .map(|(memory, (_, score))| Scored { memory, score })
                    .collect())
            };
            if queries.len() > 1 {
                queries.par_iter().map(run).collect()
            } else {
                queries.iter().map(run).collect()
            }
        })
    }

    /// Keyword (BM25) search: best `k` rows of `ns` passing the filter.
    pub fn keyword_search(
        &self,
        ns: &str,
        query: &str,
        spec: &FilterSpec,
        k: usize,
    ) -> Result<Vec<Scored>> {
        if k < 1 {
            return Err(Error::invalid("k must be >= 1"));
        }
        self.read(|_, st, snap| {
            let Some(n) = st.cols.namespaces.get(ns) else {
                return Ok(Vec::new());
            };
            let pred = Predicate::new(spec, n);
            let k = k.min(n.ids.len()); // never allocate for more hits than rows

            // a namespace holding every row needs no per-document namespace check
            let sole = n.ids.len() == st.cols.rows.len();
            let accept = |rid: u64, ver: u64| {
                st.cols.rows.get(&rid).is_some_and(|c| {
                    c.version == ver && (sole || c.namespace == ns) && pred.matches(rid, c)
                })
            };
            let dominant = 2 * n.ids.len() >= st.cols.rows.len();
            // tags passing under a tenth of the namespace: let tantivy intersect their postings
            let tags = if pred.tags().is_empty() || 10 * pred.candidate_count() >= n.ids.len() {
                &[][..]
            } else {
                pred.tags()
            };
            let hits = st.keyword.search(ns, query, k, dominant, tags, &accept)?;
            let rids: Vec<u64> = hits.iter().map(|h| h.0).collect();
            let mems = materialize(st, snap, &rids)?;
            Ok(mems
                .into_iter()
                .zip(hits)
                .map(|(memory, (_, score))| Scored { memory, score })
                .collect())
        })
    }

    /// Writes a consistent copy of the store into the new directory `dest`.
    pub fn backup(&self, dest: &Path) -> Result<()> {
        let inner = self.inner()?;
        if dest.exists() {
            return Err(Error::invalid(format!(
                "backup target {} already exists (choose a new directory)",
                dest.display()
            )));
        }
        fs::create_dir_all(dest)?;
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
        inner.checkpoint_now(true)?;
        let mut rows = inner.rows.write();
        log::info!("compacting row store");
        rows.compact()
    }
}

/// Free-form statistics.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Total rows.
    pub rows: usize,
    /// (namespace, rows, rows per tier, rows with a vector)
    pub namespaces: Vec<(String, usize, [usize; 4], usize)>,
    /// Number of HNSW partitions.
    pub vector_graphs: usize,
    /// Number of flat partitions.
    pub vector_flat_partitions: usize,
    /// Memory of the vector partitions.
    pub vector_memory_bytes: usize,
    /// Vectors in the vector index (equals the rows with a vector when in step).
    pub vector_index_entries: usize,
    /// Documents in the committed keyword index.
    pub keyword_docs: u64,
    /// Segments of the committed keyword index.
    pub keyword_segments: usize,
    /// Bytes of the store directory.
    pub bytes_on_disk: u64,
    /// Dims.
    pub dims: usize,
    /// Metric.
    pub metric: Metric,
}

fn dir_size(p: &Path) -> u64 {
    fs::read_dir(p).map_or(0, |rd| {
        rd.filter_map(std::result::Result::ok)
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => dir_size(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    })
}

/// Estimated share of the namespace's rows passing `pred`: from the posting list when the
/// filter has one, else from a sample of rows spread over the namespace.
fn selectivity(st: &State, n: &crate::columns::Namespace, pred: &Predicate<'_>) -> f64 {
    const SAMPLE: usize = 256;
    let total = n.ids.len().max(1);
    let bound = pred.candidate_count();
    #[allow(clippy::cast_precision_loss, reason = "a ratio of row counts")]
    let posting = bound as f64 / total as f64;
    if bound < total {
        return posting;
    }
    // no posting list: test the first rows (cheap; id order is unrelated to most filters)
    let (mut seen, mut passed) = (0usize, 0usize);
    for rid in n.ids.values().take(SAMPLE) {
        seen += 1;
        passed += usize::from(st.cols.rows.get(rid).is_some_and(|c| pred.matches(*rid, c)));
    }
    #[allow(clippy::cast_precision_loss, reason = "a ratio of row counts")]
    let sampled = (passed as f64 + 0.5) / (seen as f64 + 1.0);
    sampled
}

/// Rids of the namespace passing `pred` (from the smallest posting list when there is one).
fn matching(st: &State, n: &crate::columns::Namespace, pred: &Predicate<'_>) -> Vec<u64> {
    matching_map(st, n, pred, |rid, _| Some(rid))
}

/// `f(rid, columns)` of every row of the namespace passing `pred` where it is Some, walking
/// the smallest posting list when the filter has one.
fn matching_map<T>(
    st: &State,
    n: &crate::columns::Namespace,
    pred: &Predicate<'_>,
    f: impl Fn(u64, &Col) -> Option<T>,
) -> Vec<T> {
    let pass = |rid: u64| {
        let c = st.cols.rows.get(&rid)?;
        if pred.matches(rid, c) {
            f(rid, c)
        } else {
            None
        }
    };
    match pred.candidates() {
        Some(c) => c.into_iter().filter_map(pass).collect(),
        None => n.ids.values().copied().filter_map(pass).collect(),
    }
}

/// Full rows for `rids`, in order.
fn materialize(st: &State, snap: &Snapshot, rids: &[u64]) -> Result<Vec<Memory>> {
    let payloads = snap.payloads(rids)?;
    rids.iter()
        .zip(payloads)
        .map(|(rid, p)| {
            let c = st
                .cols
                .rows
                .get(rid)
                .ok_or_else(|| Error::Corruption(format!("row {rid} missing from columns")))?;
            Ok(to_memory(c, p))
        })
        .collect()
}

impl Inner {
    /// Runs one commit group (see the module docs).
    fn run_group(&self, jobs: Vec<(Op, Arc<Slot>)>) {
        let rows = self.rows.read();
        let mut counters = self.counters.lock();
        let saved = *counters;
        let batch = match rows.begin() {
            Ok(b) => b,
            Err(e) => {
                let msg = e.to_string();
                for (_, slot) in jobs {
                    slot.put(Err(Error::Storage(msg.clone())));
                }
                return;
            }
        };
        let mut effects = Effects::default();
        let mut results = Vec::with_capacity(jobs.len());
        let mut failed: Option<String> = None;
        {
            let st = self.state.read();
            for (op, slot) in jobs {
                if failed.is_some() {
                    results.push((Err(Error::Storage(String::new())), slot));
                    continue;
                }
                let mut tx = Tx {
                    batch: &batch,
                    counters: &mut counters,
                    effects: &mut effects,
                    cols: &st.cols,
                };
                let r = op(&mut tx);
                if let Err(Error::Storage(m) | Error::Corruption(m)) = &r {
                    failed = Some(m.clone());
                }
                results.push((r, slot));
            }
        }
        let commit = match failed {
            Some(m) => Err(Error::Storage(m)),
            None => batch.set_meta("counters", &*counters).map(|()| batch),
        };
        let mut st = self.state.write();
        let committed = commit.and_then(Batch::commit);
        match committed {
            Ok(()) => {
                apply(&mut st, effects, counters.seq);
                let due = counters.seq.saturating_sub(st.vector_seq) >= CHECKPOINT_EVERY;
                drop(st);
                drop(counters);
                for (r, slot) in results {
                    slot.put(r);
                }
                if due {
                    if let Err(e) = self.checkpoint_locked(&rows, true) {
                        log::error!("index checkpoint failed: {e}");
                    }
                }
            }
            Err(e) => {
                *counters = saved;
                drop(st);
                let msg = e.to_string();
                for (r, slot) in results {
                    slot.put(match r {
                        Err(
                            err @ (Error::NotFound(_)
                            | Error::Conflict(_)
                            | Error::InvalidArgument(_)
                            | Error::DimensionMismatch(_)),
                        ) => Err(err),
                        _ => Err(Error::Storage(format!(
                            "write failed, nothing from it was stored: {msg}"
                        ))),
                    });
                }
            }
        }
    }

    /// Writes both derived indexes' checkpoints and drops changelog entries they cover.
    /// Unless `force`, does nothing when both indexes already reflect every change (a
    /// read-only session closes without rewriting the graph files).
    fn checkpoint_locked(&self, rows: &RowStore, force: bool) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        // counters before state: the commit leader takes them in that order
        let seq = self.counters.lock().seq;
        let st = self.state.read();
        if !force && st.vector_seq == seq && st.keyword.committed_seq() == seq {
            return Ok(());
        }
        st.keyword.commit()?;
        st.vectors.checkpoint(&dir.join("vectors"), seq)?;
        drop(st);
        self.state.write().vector_seq = seq;
        let b = rows.begin()?;
        b.truncate_log(seq)?;
        b.commit()
    }

    fn checkpoint_now(&self, force: bool) -> Result<()> {
        let rows = self.rows.read();
        self.checkpoint_locked(&rows, force)
    }

    fn checkpoint(self) -> Result<()> {
        let r = self.checkpoint_now(false);
        drop(self);
        r
    }
}

/// Opens the vector index: loads the last checkpoint and replays newer changes, or rebuilds.
fn open_vectors(
    dir: Option<&Path>,
    dims: usize,
    metric: Metric,
    snap: &Snapshot,
    cols: &Columns,
    seq: u64,
) -> Result<(VectorIndex, u64)> {
    let mut vi = VectorIndex::new(dims, metric);
    let loaded = dir.and_then(|d| vi.load(&d.join("vectors")));
    if let Some(from) = loaded {
        let changes = snap.changes_after(from)?;
        let complete = from == seq || changes.first().is_some_and(|(s, _)| *s == from + 1);
        if complete {
            for (_, ch) in &changes {
                if let Some(k) = ch.removed_vkey {
                    for ns in cols.namespaces.keys() {
                        if vi.contains(ns, k) {
                            vi.remove(ns, k)?;
                        }
                    }
                }
            }
            if !changes.is_empty() {
                log::info!("vector index: replayed {} changes", changes.len());
            }
        } else {
            log::warn!("vector index checkpoint is older than the changelog; rebuilding from rows");
            vi = VectorIndex::new(dims, metric);
        }
    } else if !cols.by_vkey.is_empty() {
        log::info!("vector index: building from rows");
    }
    // add every vector the partitions lack (flat partitions always come from here)
    let mut missing: std::collections::BTreeMap<&str, Vec<(u64, u64)>> =
        std::collections::BTreeMap::new();
    for (rid, c) in &cols.rows {
        if let Some(k) = c.vkey {
            if !vi.contains(&c.namespace, k) {
                missing
                    .entry(c.namespace.as_str())
                    .or_default()
                    .push((k, *rid));
            }
        }
    }
    for (ns, keys) in missing {
        let rids: Vec<u64> = keys.iter().map(|(_, rid)| *rid).collect();
        let items = keys
            .iter()
            .zip(snap.vectors(&rids)?)
            .filter_map(|((k, _), v)| v.map(|v| (*k, v)))
            .collect();
        vi.add(ns, items)?;
    }
    Ok((vi, loaded.unwrap_or(0)))
}

/// Opens the keyword index and brings it up to date with the rows.
fn open_keyword(
    dir: Option<&Path>,
    snap: &Snapshot,
    cols: &Columns,
    seq: u64,
) -> Result<KeywordIndex> {
    let (kw, fresh) = KeywordIndex::open(dir.map(|d| d.join("keyword")).as_deref())?;
    let from = kw.committed_seq();
    let changes = if fresh {
        Vec::new()
    } else {
        snap.changes_after(from)?
    };
    let complete = !fresh && (from == seq || changes.first().is_some_and(|(s, _)| *s == from + 1));
    let touched: Vec<u64> = if complete {
        let mut t: Vec<u64> = changes.iter().map(|(_, c)| c.rid).collect();
        t.sort_unstable();
        t.dedup();
        t
    } else {
        if !cols.rows.is_empty() {
            log::info!("keyword index: building from {} rows", cols.rows.len());
        }
        let mut t: Vec<u64> = cols.rows.keys().copied().collect();
        t.sort_unstable();
        t
    };
    if !touched.is_empty() {
        for chunk in touched.chunks(4096) {
            let present: Vec<u64> = chunk
                .iter()
                .copied()
                .filter(|r| cols.rows.contains_key(r))
                .collect();
            let payloads = snap.payloads(&present)?;
            let mut it = present.iter().zip(payloads);
            for rid in chunk {
                match cols.rows.get(rid) {
                    Some(c) => {
                        let (_, p) = it
                            .next()
                            .ok_or_else(|| Error::Corruption("payload count".into()))?;
                        kw.put(
                            *rid,
                            Some(Doc {
                                namespace: c.namespace.clone(),
                                text: doc_text(&p),
                                tags: c.tag_hashes.clone(),
                                version: c.version,
                            }),
                            seq,
                            false,
                        )?;
                    }
                    None => kw.put(*rid, None, seq, false)?,
                }
            }
        }
    }
    kw.advance(seq);
    kw.commit()?;
    Ok(kw)
}

impl Drop for Engine {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // a forked child must not touch the parent's files or lock
            if let Some(inner) = self.gate.get_mut().take() {
                std::mem::forget(inner);
            }
            return;
        }
        if let Err(e) = self.close() {
            log::error!("closing the store: {e}");
        }
    }
}
