//! The rules of one write inside a commit group: how a row, its vector and its keyword
//! document change, what the changelog records, and the input checks every write shares.

use std::collections::HashSet;

use super::commit::{DocChange, Effects};
use super::{Counters, FaultPoint, Faults};
use crate::columns::{fingerprint_hash, pair_hash, tag_hash, Columns};
use crate::error::{Error, Result};
use crate::keyword::Doc;
use crate::limits;
use crate::rows::{split, Batch, Change, Col, Payload};
use crate::types::Memory;

/// How a write changes a row's vector.
pub(super) enum VecChange {
    Keep,
    Set(Vec<f32>),
    Remove,
}

/// The write transaction of one operation inside a commit group.
pub(super) struct Tx<'a> {
    pub(super) batch: &'a Batch,
    pub(super) counters: &'a mut Counters,
    pub(super) effects: &'a mut Effects,
    pub(super) cols: &'a Columns,
    pub(super) faults: &'a Faults,
}

pub(super) fn metadata_hashes(metadata: &str) -> Result<Vec<u64>> {
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

/// The keyword document of a row.
pub(super) fn doc_of(c: &Col, p: &Payload) -> Doc {
    Doc {
        namespace: c.namespace.clone(),
        text: doc_text(p),
        tags: c.tag_hashes.clone(),
        version: c.version,
    }
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
    pub(super) fn load(&self, ns: &str, id: &str) -> Result<(u64, Col)> {
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
    pub(super) fn write(
        &mut self,
        rid: u64,
        old: Option<&Col>,
        mut col: Col,
        payload: Option<&Payload>,
        vector: VecChange,
    ) -> Result<()> {
        self.faults.check(FaultPoint::Write)?;
        self.faults.panic_at(FaultPoint::WritePanic);
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
        let doc = match (payload, text_changed) {
            (Some(p), _) => Some(doc_of(&col, p)),
            (None, true) => Some(doc_of(&col, &self.batch.payload(rid)?)),
            (None, false) => None,
        };
        self.batch.put(rid, &col, payload)?;
        self.batch.log(
            self.counters.log_gen,
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
        if let Some(doc) = doc {
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
    pub(super) fn delete(&mut self, rid: u64, col: &Col) -> Result<()> {
        let seq = self.next_seq();
        self.batch.remove(rid, &col.id)?;
        self.batch.log(
            self.counters.log_gen,
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
    pub(super) fn rids_of(&self, ns: &str) -> Vec<u64> {
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
/// The stored halves of a memory, with the column fields derived from it (its metadata JSON
/// parsed once, here).
pub(super) fn build_row(m: Memory) -> Result<(Col, Payload)> {
    let meta_hashes = metadata_hashes(&m.metadata)?;
    let (mut col, payload) = split(m);
    col.tag_hashes = payload.tags.iter().map(|t| tag_hash(t)).collect();
    col.meta_hashes = meta_hashes;
    col.fingerprint_hash = fingerprint_hash(&payload.fingerprint);
    Ok((col, payload))
}

pub(super) fn validate_vector(v: &[f32], dims: usize) -> Result<()> {
    if v.len() != dims {
        return Err(Error::DimensionMismatch(format!(
            "vector has {} dims, store expects {dims} (embed it with the store's model; {}-d \
             vectors belong in a store of their own)",
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

pub(super) fn validate_memory(m: &Memory) -> Result<()> {
    if m.id.is_empty() {
        return Err(Error::invalid("memory id must be a non-empty string"));
    }
    limits::namespace(&m.namespace)?;
    if !m.importance.is_finite() || m.confidence.is_some_and(|c| !c.is_finite()) {
        return Err(Error::invalid(
            "importance and confidence must be finite numbers",
        ));
    }
    Ok(())
}
