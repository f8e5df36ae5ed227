//! The write operations: each builds one closure that the group commit runs inside a
//! transaction (see `commit` and `tx`); input that can be checked without the rows is checked
//! before the write is queued.

use std::collections::HashMap;

use super::tx::{build_row, metadata_hashes, validate_memory, validate_vector, Tx, VecChange};
use super::Engine;
use crate::error::{check_every, uninterrupted, Error, Interrupt, Result};
use crate::limits;
use crate::rows::{to_memory, Col};
use crate::types::{now_micros, Memory, MemoryPatch, Micros, NewMemory, Tier};

impl Engine {
    /// Inserts or replaces memories atomically; returns, per row, whether it was an insert.
    pub fn upsert_many(&self, memories: Vec<NewMemory>) -> Result<Vec<bool>> {
        self.upsert_many_interruptible(memories, &uninterrupted())
    }

    /// [`Self::upsert_many`], asking `interrupt` between chunks of rows until the commit: once
    /// it stops the call, nothing of the batch is stored (the group it joined fails, and its
    /// other writers are told nothing of theirs was stored either). After the commit, the
    /// call runs to its end (the rows are stored).
    pub fn upsert_many_interruptible(
        &self,
        memories: Vec<NewMemory>,
        interrupt: &Interrupt,
    ) -> Result<Vec<bool>> {
        let dims = self.dims()?;
        // checked and split into stored halves before the write joins a group
        let rows = memories
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                check_every(interrupt, i)?;
                validate_memory(&m.memory)?;
                if let Some(v) = &m.embedding {
                    validate_vector(v, dims)?;
                }
                let (col, payload) = build_row(m.memory)?;
                Ok((col, payload, m.unstamped, m.embedding))
            })
            .collect::<Result<Vec<_>>>()?;
        let interrupt = interrupt.clone();
        self.submit(move |tx: &mut Tx<'_>| {
            // validate the whole batch before writing any of it
            let mut seen: HashMap<&str, &str> = HashMap::new();
            for (i, (col, ..)) in rows.iter().enumerate() {
                check_every(&interrupt, i)?;
                let (id, ns) = (col.id.as_str(), col.namespace.as_str());
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
            let mut inserted = Vec::with_capacity(rows.len());
            for (i, (mut col, payload, unstamped, embedding)) in rows.into_iter().enumerate() {
                check_every(&interrupt, i)?;
                let old = match tx.batch.rid(&col.id)? {
                    Some(rid) => tx.batch.col(rid)?.map(|c| (rid, c)),
                    None => None,
                };
                col.created_at = match &old {
                    Some((_, c)) => c.created_at,
                    None if unstamped.created_at => now,
                    None => col.created_at,
                };
                if unstamped.updated_at {
                    col.updated_at = now;
                }
                if unstamped.last_accessed_at {
                    col.last_accessed_at = now;
                }
                let vector = match embedding {
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
            let mut m = to_memory(&old, tx.batch.payload(rid)?);
            let payload_changed = patch.touches_payload();
            let stamped = patch.updated_at.is_some();
            let vector = match &patch.embedding {
                None => VecChange::Keep,
                Some(Some(v)) if !v.is_empty() => VecChange::Set(v.clone()),
                Some(_) => VecChange::Remove,
            };
            m.apply(patch);
            if !stamped {
                m.updated_at = now_micros();
            }
            let (col, payload) = build_row(m.clone())?;
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
        let rows = ids.into_iter().map(|id| (ns.to_owned(), id)).collect();
        self.reinforce_rows(rows, at, new_expiry)
    }

    /// `reinforce` of (namespace, id) pairs across namespaces, in one atomic, durable batch.
    pub fn reinforce_rows(
        &self,
        rows: Vec<(String, String)>,
        at: Micros,
        new_expiry: Option<Micros>,
    ) -> Result<()> {
        // one access per call and row, however often it is listed
        let mut rows = rows;
        rows.sort_unstable();
        rows.dedup();
        self.submit(move |tx: &mut Tx<'_>| {
            for (ns, id) in rows {
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
        limits::limit("limit", limit)?;
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
        limits::namespace(to)?;
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

    /// A store setting kept with the rows (None until set): e.g. the embedding model, or the
    /// marker that the store has a `meta.sqlite3` beside it.
    pub fn setting(&self, key: &str) -> Result<Option<String>> {
        let inner = self.inner()?;
        let rows = inner.rows.read();
        rows.snapshot()?.meta::<String>(&setting_key(key))
    }

    /// Sets a store setting, durably.
    pub fn set_setting(&self, key: &str, value: &str) -> Result<()> {
        let (key, value) = (setting_key(key), value.to_owned());
        self.submit(move |tx: &mut Tx<'_>| tx.batch.set_meta(&key, &value))
    }

    /// The embedding model name ("" until set).
    pub fn embed_model(&self) -> Result<String> {
        Ok(self.setting("embed_model")?.unwrap_or_default())
    }

    /// Sets the embedding model name.
    pub fn set_embed_model(&self, model: &str) -> Result<()> {
        self.set_setting("embed_model", model)
    }
}

/// The meta-table key of a setting: the embedding model keeps the key stores already have;
/// other settings live under `setting.` so they never collide with the engine's own keys
/// (dims, metric, counters, format).
fn setting_key(key: &str) -> String {
    if key == "embed_model" {
        key.to_owned()
    } else {
        format!("setting.{key}")
    }
}
