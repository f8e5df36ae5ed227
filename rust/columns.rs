//! In-memory filter columns: one [`Col`] per row plus per-namespace indexes, rebuilt from the
//! row store's `cols` table on open and kept in step with every commit (in commit order).
//!
//! Invariants:
//! - `rows`, `Namespace::ids`, the tag/metadata postings, the liveness counters and `by_vkey`
//!   always describe exactly the committed rows;
//! - tags and metadata pairs are stored as 64-bit hashes (never copied strings);
//! - a namespace entry exists iff it holds at least one row.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use crate::rows::Col;
use crate::types::Micros;

/// Hasher for keys that are already well-distributed integers (rids, vector keys, hashes).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = mix(n);
    }
}

/// A `HashMap` keyed by integers.
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fnv(seed: u64, parts: &[&str]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed;
    for part in parts {
        for b in part.as_bytes() {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        // length-delimit the parts so ("ab", "c") != ("a", "bc")
        h = (h ^ part.len() as u64).wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// Stable hash of a tag (persisted in the row store: never change it).
#[must_use]
pub fn tag_hash(tag: &str) -> u64 {
    fnv(1, &[tag])
}

/// Stable hash of a top-level metadata pair whose value is a string (persisted).
#[must_use]
pub fn pair_hash(key: &str, value: &str) -> u64 {
    fnv(2, &[key, value])
}

/// Stable hash of a content fingerprint (persisted).
#[must_use]
pub fn fingerprint_hash(fp: &str) -> u64 {
    fnv(3, &[fp])
}

/// Multiset of instants with O(log n) earliest lookup.
#[derive(Default, Debug)]
pub struct Instants(BTreeMap<Micros, usize>);

impl Instants {
    fn add(&mut self, t: Option<Micros>) {
        if let Some(t) = t {
            *self.0.entry(t).or_default() += 1;
        }
    }
    fn remove(&mut self, t: Option<Micros>) {
        if let Some(t) = t {
            if let Some(n) = self.0.get_mut(&t) {
                *n -= 1;
                if *n == 0 {
                    self.0.remove(&t);
                }
            }
        }
    }
    /// Whether any instant is `<= t`.
    #[must_use]
    pub fn any_at_or_before(&self, t: Micros) -> bool {
        self.0.keys().next().is_some_and(|first| *first <= t)
    }
}

/// Per-namespace indexes over the rows.
#[derive(Default, Debug)]
pub struct Namespace {
    /// Memory id -> rid, ordered by id.
    pub ids: BTreeMap<String, u64>,
    /// Tag hash -> rids carrying it.
    pub tags: IdMap<BTreeSet<u64>>,
    /// Metadata pair hash -> rids carrying it.
    pub meta: IdMap<BTreeSet<u64>>,
    /// Rows with `superseded_by` set.
    pub superseded: usize,
    /// Expiry instants of the rows.
    pub expiries: Instants,
    /// `valid_to` instants of the rows.
    pub valid_tos: Instants,
    /// Rows with a vector.
    pub vectors: usize,
}

impl Namespace {
    /// Whether every row is live at `now` under the default rule (fast path for searches).
    #[must_use]
    pub fn all_live(&self, now: Micros) -> bool {
        self.superseded == 0
            && !self.expiries.any_at_or_before(now)
            && !self.valid_tos.any_at_or_before(now)
    }

    fn add(&mut self, rid: u64, col: &Col) {
        self.ids.insert(col.id.clone(), rid);
        for h in &col.tag_hashes {
            self.tags.entry(*h).or_default().insert(rid);
        }
        for h in &col.meta_hashes {
            self.meta.entry(*h).or_default().insert(rid);
        }
        self.superseded += usize::from(col.superseded_by.is_some());
        self.expiries.add(col.expires_at);
        self.valid_tos.add(col.valid_to);
        self.vectors += usize::from(col.vkey.is_some());
    }

    fn remove(&mut self, rid: u64, col: &Col) {
        self.ids.remove(&col.id);
        for (map, hashes) in [
            (&mut self.tags, &col.tag_hashes),
            (&mut self.meta, &col.meta_hashes),
        ] {
            for h in hashes {
                if let Some(set) = map.get_mut(h) {
                    set.remove(&rid);
                    if set.is_empty() {
                        map.remove(h);
                    }
                }
            }
        }
        self.superseded -= usize::from(col.superseded_by.is_some());
        self.expiries.remove(col.expires_at);
        self.valid_tos.remove(col.valid_to);
        self.vectors -= usize::from(col.vkey.is_some());
    }
}

/// All rows' columns.
#[derive(Default, Debug)]
pub struct Columns {
    /// rid -> column record.
    pub rows: IdMap<Col>,
    /// Namespace name -> its indexes (ordered by name).
    pub namespaces: BTreeMap<String, Namespace>,
    /// Vector key -> rid, for the rows that have a vector.
    pub by_vkey: IdMap<u64>,
}

impl Columns {
    /// Builds the columns from every row's record.
    #[must_use]
    pub fn load(records: Vec<(u64, Col)>) -> Self {
        let mut c = Self::default();
        c.rows.reserve(records.len());
        for (rid, col) in records {
            c.put(rid, col);
        }
        c
    }

    /// Inserts or replaces the row `rid`; returns the previous record.
    pub fn put(&mut self, rid: u64, col: Col) -> Option<Col> {
        let old = self.remove(rid);
        self.namespaces
            .entry(col.namespace.clone())
            .or_default()
            .add(rid, &col);
        if let Some(k) = col.vkey {
            self.by_vkey.insert(k, rid);
        }
        self.rows.insert(rid, col);
        old
    }

    /// Removes the row `rid`; returns its record.
    pub fn remove(&mut self, rid: u64) -> Option<Col> {
        let old = self.rows.remove(&rid)?;
        if let Some(ns) = self.namespaces.get_mut(&old.namespace) {
            ns.remove(rid, &old);
            if ns.ids.is_empty() {
                self.namespaces.remove(&old.namespace);
            }
        }
        if let Some(k) = old.vkey {
            self.by_vkey.remove(&k);
        }
        Some(old)
    }

    /// The rid of `id` in `namespace`.
    #[must_use]
    pub fn rid(&self, namespace: &str, id: &str) -> Option<u64> {
        self.namespaces.get(namespace)?.ids.get(id).copied()
    }
}
