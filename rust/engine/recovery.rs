//! Bringing the derived indexes up to the rows: on open (load the last checkpoint, replay the
//! changelog after it, or rebuild), and after a failed update (rebuild what it touched).

use std::collections::BTreeMap;
use std::path::Path;

use super::tx::doc_of;
use super::{FaultPoint, Inner, State};
use crate::columns::Columns;
use crate::error::{Error, Result};
use crate::keyword::{Doc, KeywordIndex};
use crate::rows::{RowStore, Snapshot};
use crate::types::Metric;
use crate::vector::{Tuning, VectorIndex};

/// Opens the vector index: loads the last checkpoint and replays newer changes, or rebuilds.
pub(super) fn open_vectors(
    dir: Option<&Path>,
    (dims, metric, tuning): (usize, Metric, Tuning),
    snap: &Snapshot,
    cols: &Columns,
    seq: u64,
) -> Result<(VectorIndex, u64)> {
    let mut vi = VectorIndex::new(dims, metric, tuning);
    // a checkpoint holds the graphs without the vectors the rows hold
    let rows = |keys: &[u64], out: &mut Vec<u8>| -> Result<Vec<Option<usize>>> {
        let rids: Vec<Option<u64>> = keys.iter().map(|k| cols.by_vkey.get(k).copied()).collect();
        let found: Vec<u64> = rids.iter().flatten().copied().collect();
        let mut lens = snap.vector_bytes(&found, out)?.into_iter();
        Ok(rids
            .iter()
            .map(|rid| rid.and_then(|_| lens.next().flatten()))
            .collect())
    };
    let loaded = dir.and_then(|d| vi.load(&d.join("vectors"), &rows));
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
            vi = vi.empty_like();
        }
    } else if !cols.by_vkey.is_empty() {
        log::info!("vector index: building from rows");
    }
    // add every vector the partitions lack (flat partitions always come from here)
    let mut missing: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
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
        vi.add(ns, vectors_of(snap, &keys)?)?;
    }
    Ok((vi, loaded.unwrap_or(0)))
}

/// `(vkey, vector)` of the listed `(vkey, rid)` rows that have one in the snapshot.
fn vectors_of(snap: &Snapshot, keys: &[(u64, u64)]) -> Result<Vec<(u64, Vec<f32>)>> {
    let rids: Vec<u64> = keys.iter().map(|(_, rid)| *rid).collect();
    Ok(keys
        .iter()
        .zip(snap.vectors(&rids)?)
        .filter_map(|((k, _), v)| v.map(|v| (*k, v)))
        .collect())
}

/// The keyword documents of `rids` as the rows have them (None for rows that are gone).
fn docs_of(snap: &Snapshot, cols: &Columns, rids: &[u64]) -> Result<Vec<(u64, Option<Doc>)>> {
    let present: Vec<u64> = rids
        .iter()
        .copied()
        .filter(|r| cols.rows.contains_key(r))
        .collect();
    let mut payloads = present.iter().zip(snap.payloads(&present)?);
    rids.iter()
        .map(|rid| match cols.rows.get(rid) {
            Some(c) => {
                let (_, p) = payloads
                    .next()
                    .ok_or_else(|| Error::Corruption("payload count".into()))?;
                Ok((*rid, Some(doc_of(c, &p))))
            }
            None => Ok((*rid, None)),
        })
        .collect()
}

/// Opens the keyword index and brings it up to date with the rows.
pub(super) fn open_keyword(
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
    for chunk in touched.chunks(4096) {
        for (rid, doc) in docs_of(snap, cols, chunk)? {
            kw.put(rid, doc, seq, false)?;
        }
    }
    kw.advance(seq);
    kw.commit()?;
    Ok(kw)
}

impl Inner {
    /// Rebuilds from the rows whatever failed updates left out of step (see
    /// [`super::Damage`]): the namespaces' vector partitions, the rows' keyword documents.
    /// On failure the damage stays recorded (searches of that index fail) and the error is
    /// returned for the writers of the group.
    pub(super) fn repair(
        &self,
        st: &mut State,
        rows: &RowStore,
        seq: u64,
    ) -> std::result::Result<(), String> {
        if st.vector_damage.is_none() && st.keyword_damage.is_none() {
            return Ok(());
        }
        let repaired = self
            .faults
            .check(FaultPoint::Repair)
            .and_then(|()| rows.snapshot())
            .and_then(|snap| {
                if let Some(d) = &st.vector_damage {
                    for ns in &d.keys {
                        let keys: Vec<(u64, u64)> =
                            st.cols.namespaces.get(ns).map_or_else(Vec::new, |n| {
                                n.ids
                                    .values()
                                    .filter_map(|rid| {
                                        st.cols.rows.get(rid)?.vkey.map(|k| (k, *rid))
                                    })
                                    .collect()
                            });
                        st.vectors.replace(ns, vectors_of(&snap, &keys)?)?;
                    }
                    log::info!(
                        "vector index: rebuilt {} namespaces from rows",
                        d.keys.len()
                    );
                }
                st.vector_damage = None;
                if let Some(d) = &st.keyword_damage {
                    let rids: Vec<u64> = d.keys.iter().copied().collect();
                    for (rid, doc) in docs_of(&snap, &st.cols, &rids)? {
                        st.keyword.put(rid, doc, seq, true)?;
                    }
                    st.keyword.advance(seq);
                    log::info!(
                        "keyword index: rewrote the documents of {} rows",
                        rids.len()
                    );
                }
                st.keyword_damage = None;
                Ok(())
            });
        repaired.map_err(|e| {
            let index = if st.vector_damage.is_some() {
                "vector"
            } else {
                "keyword"
            };
            log::error!("repairing the {index} index failed: {e}");
            format!(
                "the write is stored, but the {index} index could not be brought up to it \
                 ({e}); searches of that index fail until the next write or a reopen \
                 rebuilds it"
            )
        })
    }
}
