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

/// Keys per chunk of a [`KeySet`] after a split (a chunk holds up to twice as many).
const CHUNK: usize = 512;

/// A set of keys as sorted chunks of up to 1,024: iterated in order at memory speed (a
/// `BTreeSet`'s nodes cost a cache miss per ~11 keys: ~20% of a 15% filter's compact scan),
/// changed in place within a chunk (appending, the common case, touches the last one only).
#[derive(Default, Debug)]
pub struct KeySet {
    chunks: Vec<Vec<u64>>,
    len: usize,
}

impl KeySet {
    /// The chunk where `key` is or belongs (the last one past every key).
    fn chunk_of(&self, key: u64) -> usize {
        self.chunks
            .partition_point(|c| c.last().is_some_and(|last| *last < key))
            .min(self.chunks.len().saturating_sub(1))
    }

    /// Adds `key`; false when it was there.
    pub fn insert(&mut self, key: u64) -> bool {
        if self.chunks.is_empty() {
            self.chunks.push(Vec::new());
        }
        let c = self.chunk_of(key);
        let chunk = &mut self.chunks[c];
        let Err(i) = chunk.binary_search(&key) else {
            return false;
        };
        chunk.insert(i, key);
        self.len += 1;
        if chunk.len() >= 2 * CHUNK {
            let tail = chunk.split_off(CHUNK);
            self.chunks.insert(c + 1, tail);
        }
        true
    }

    /// Removes `key`; false when it was absent.
    pub fn remove(&mut self, key: u64) -> bool {
        if self.chunks.is_empty() {
            return false;
        }
        let c = self.chunk_of(key);
        let chunk = &mut self.chunks[c];
        let Ok(i) = chunk.binary_search(&key) else {
            return false;
        };
        chunk.remove(i);
        self.len -= 1;
        if chunk.is_empty() {
            self.chunks.remove(c);
        }
        true
    }

    /// Number of keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no key.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The keys, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.iter().flatten().copied()
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
    /// Tag hash -> vector keys of the rows with a vector carrying it: a filter's vector keys,
    /// ascending, without reading each row's record (a cache miss per row).
    pub vector_tags: IdMap<KeySet>,
    /// Metadata pair hash -> vector keys of the rows with a vector carrying it.
    pub vector_meta: IdMap<KeySet>,
    /// Rows with `superseded_by` set.
    pub superseded: usize,
    /// Expiry instants of the rows.
    pub expiries: Instants,
    /// `valid_to` instants of the rows.
    pub valid_tos: Instants,
    /// Rows with a vector.
    pub vectors: usize,
    /// Rows per tier, indexed by `Tier as usize`.
    pub tiers: [usize; 4],
    /// (created_at, rid) of every row: the namespace's timeline, in the order rows were
    /// made (rows stamped the same instant in the order they were first stored).
    pub timeline: BTreeSet<(Micros, u64)>,
    /// The timeline's measured coherence and the row count it was measured at (recall
    /// measures it again once the count has moved by more than a sixteenth).
    pub coherence: parking_lot::Mutex<Option<(usize, f64)>>,
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
        if let Some(k) = col.vkey {
            for h in &col.tag_hashes {
                self.vector_tags.entry(*h).or_default().insert(k);
            }
            for h in &col.meta_hashes {
                self.vector_meta.entry(*h).or_default().insert(k);
            }
        }
        self.superseded += usize::from(col.superseded_by.is_some());
        self.expiries.add(col.expires_at);
        self.valid_tos.add(col.valid_to);
        self.vectors += usize::from(col.vkey.is_some());
        self.tiers[col.tier as usize] += 1;
        self.timeline.insert((col.created_at, rid));
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
        if let Some(k) = col.vkey {
            for (map, hashes) in [
                (&mut self.vector_tags, &col.tag_hashes),
                (&mut self.vector_meta, &col.meta_hashes),
            ] {
                for h in hashes {
                    if let Some(set) = map.get_mut(h) {
                        set.remove(k);
                        if set.is_empty() {
                            map.remove(h);
                        }
                    }
                }
            }
        }
        self.superseded -= usize::from(col.superseded_by.is_some());
        self.expiries.remove(col.expires_at);
        self.valid_tos.remove(col.valid_to);
        self.vectors -= usize::from(col.vkey.is_some());
        self.tiers[col.tier as usize] -= 1;
        self.timeline.remove(&(col.created_at, rid));
    }

    /// The rows just before and just after `(created_at, rid)` on the timeline.
    #[must_use]
    pub fn neighbours(&self, created_at: Micros, rid: u64) -> [Option<u64>; 2] {
        use std::ops::Bound::{Excluded, Unbounded};
        let at = (created_at, rid);
        [
            self.timeline.range(..at).next_back().map(|e| e.1),
            self.timeline
                .range((Excluded(at), Unbounded))
                .next()
                .map(|e| e.1),
        ]
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
        c.by_vkey.reserve(records.len());
        for (rid, col) in records {
            c.put(rid, col);
        }
        c
    }

    /// Inserts or replaces the row `rid`; returns the previous record.
    pub fn put(&mut self, rid: u64, col: Col) -> Option<Col> {
        let old = self.remove(rid);
        // the name is cloned only for a new namespace (an open puts every row)
        match self.namespaces.get_mut(&col.namespace) {
            Some(ns) => ns.add(rid, &col),
            None => {
                let mut ns = Namespace::default();
                ns.add(rid, &col);
                self.namespaces.insert(col.namespace.clone(), ns);
            }
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_key_set_stays_sorted_through_splits_and_removals() {
        let mut set = KeySet::default();
        let mut want = BTreeSet::new();
        // appends, then keys between them, then removals emptying whole chunks
        for k in (0..5000)
            .map(|i| i * 10)
            .chain((0..3000).map(|i| i * 7 + 3))
        {
            assert_eq!(set.insert(k), want.insert(k));
        }
        assert!(!set.insert(10));
        for k in (0..60_000).step_by(3).chain(20_000..45_000) {
            assert_eq!(set.remove(k), want.remove(&k));
        }
        assert_eq!(set.len(), want.len());
        assert!(set.iter().eq(want.iter().copied()));
        for k in want.clone() {
            assert!(set.remove(k));
        }
        assert!(set.is_empty() && set.iter().next().is_none() && !set.remove(10));
    }

    #[test]
    fn the_timeline_orders_rows_by_creation_then_rid_and_follows_every_change() {
        let col = |id: &str, ns: &str, at: Micros| Col {
            id: id.into(),
            namespace: ns.into(),
            created_at: at,
            ..Col::default()
        };
        let mut c = Columns::default();
        c.put(1, col("a", "n", 5));
        c.put(2, col("b", "n", 5));
        c.put(3, col("c", "n", 3));
        c.put(4, col("d", "other", 4));
        let n = |c: &Columns, rid: u64| {
            let r = &c.rows[&rid];
            c.namespaces[&r.namespace].neighbours(r.created_at, rid)
        };
        assert_eq!(n(&c, 1), [Some(3), Some(2)]);
        assert_eq!(n(&c, 3), [None, Some(1)]);
        assert_eq!(n(&c, 4), [None, None]);
        c.remove(1);
        assert_eq!(n(&c, 3), [None, Some(2)]);
        // an update in place keeps the row's place; a move changes its namespace's timeline
        c.put(2, col("b", "other", 5));
        assert_eq!(n(&c, 3), [None, None]);
        assert_eq!(n(&c, 4), [None, Some(2)]);
    }

    /// Stored hashes are persisted in the row store: these values must never change.
    #[test]
    fn hashes_are_stable_and_keep_their_parts_apart() {
        assert_eq!(tag_hash("red"), PINNED[0]);
        assert_eq!(pair_hash("memory_type", "fact"), PINNED[1]);
        assert_eq!(fingerprint_hash("abc"), PINNED[2]);
        // one namespace per kind, and the parts of a pair are length-delimited
        assert_ne!(tag_hash("x"), fingerprint_hash("x"));
        assert_ne!(pair_hash("ab", "c"), pair_hash("a", "bc"));
        assert_ne!(pair_hash("k", ""), pair_hash("", "k"));
    }

    const PINNED: [u64; 3] = [
        3_151_863_521_993_924_036,
        14_542_951_394_327_908_104,
        6_259_883_817_822_236_417,
    ];

    #[test]
    fn instants_are_a_multiset() {
        let mut i = Instants::default();
        assert!(!i.any_at_or_before(i64::MAX));
        i.add(Some(10));
        i.add(Some(10));
        i.add(None);
        i.add(Some(30));
        assert!(i.any_at_or_before(10) && !i.any_at_or_before(9));
        i.remove(Some(10));
        assert!(i.any_at_or_before(10), "one of the two 10s is left");
        i.remove(Some(10));
        assert!(!i.any_at_or_before(29) && i.any_at_or_before(30));
        i.remove(Some(99)); // absent: no effect
        i.remove(None);
        i.remove(Some(30));
        assert!(!i.any_at_or_before(i64::MAX));
    }

    fn col(ns: &str, id: &str) -> Col {
        Col {
            id: id.to_owned(),
            namespace: ns.to_owned(),
            ..Col::default()
        }
    }

    /// Per namespace: rows, superseded rows, rows with a vector, expiry and validity-end
    /// multisets.
    type Counters = (
        usize,
        usize,
        usize,
        BTreeMap<Micros, usize>,
        BTreeMap<Micros, usize>,
    );

    /// The namespace counters rebuilt from `rows` alone.
    fn expected(c: &Columns) -> BTreeMap<String, Counters> {
        let mut m: BTreeMap<String, Counters> = BTreeMap::new();
        for col in c.rows.values() {
            let e = m.entry(col.namespace.clone()).or_default();
            e.0 += 1;
            e.1 += usize::from(col.superseded_by.is_some());
            e.2 += usize::from(col.vkey.is_some());
            if let Some(t) = col.expires_at {
                *e.3.entry(t).or_default() += 1;
            }
            if let Some(t) = col.valid_to {
                *e.4.entry(t).or_default() += 1;
            }
        }
        m
    }

    /// The same counters as kept by the namespace indexes.
    fn kept(c: &Columns) -> BTreeMap<String, Counters> {
        c.namespaces
            .iter()
            .map(|(name, ns)| {
                let counters = (
                    ns.ids.len(),
                    ns.superseded,
                    ns.vectors,
                    ns.expiries.0.clone(),
                    ns.valid_tos.0.clone(),
                );
                (name.clone(), counters)
            })
            .collect()
    }

    /// Every index in `c` describes exactly its rows.
    fn check(c: &Columns) {
        // (a namespace entry exists iff it holds rows)
        assert_eq!(kept(c), expected(c));
        for (name, ns) in &c.namespaces {
            for (id, rid) in &ns.ids {
                let col = &c.rows[rid];
                assert_eq!((&col.id, &col.namespace), (id, name));
                for h in &col.tag_hashes {
                    assert!(ns.tags[h].contains(rid));
                }
                for h in &col.meta_hashes {
                    assert!(ns.meta[h].contains(rid));
                }
            }
            for (map, which) in [(&ns.tags, 0), (&ns.meta, 1)] {
                for (h, rids) in map {
                    assert!(!rids.is_empty(), "{name}: empty posting list kept");
                    for rid in rids {
                        let col = &c.rows[rid];
                        let hashes = if which == 0 {
                            &col.tag_hashes
                        } else {
                            &col.meta_hashes
                        };
                        assert!(col.namespace == *name && hashes.contains(h));
                    }
                }
            }
        }
        let vkeys: usize = c.rows.values().filter(|r| r.vkey.is_some()).count();
        assert_eq!(c.by_vkey.len(), vkeys);
        for (k, rid) in &c.by_vkey {
            assert_eq!(c.rows[rid].vkey, Some(*k));
        }
    }

    #[test]
    fn counters_follow_puts_replacements_and_removals() {
        let mut c = Columns::default();
        let mut a = col("n", "a");
        a.superseded_by = Some("b".into());
        a.expires_at = Some(50);
        a.valid_to = Some(70);
        a.vkey = Some(1);
        a.tag_hashes = vec![tag_hash("red")];
        assert!(c.put(1, a.clone()).is_none());
        let ns = &c.namespaces["n"];
        assert_eq!((ns.superseded, ns.vectors), (1, 1));
        assert!(!ns.all_live(10), "superseded");
        check(&c);

        // replaced by a live version: every counter drops its contribution
        let mut live = col("n", "a");
        live.expires_at = Some(100);
        live.vkey = Some(2);
        assert_eq!(c.put(1, live), Some(a));
        let ns = &c.namespaces["n"];
        assert_eq!((ns.superseded, ns.vectors), (0, 1));
        assert!(
            ns.tags.is_empty(),
            "a tag nobody carries has no posting list"
        );
        assert!(ns.all_live(99) && !ns.all_live(100), "expiry at 100");
        assert_eq!(c.by_vkey.get(&1), None);
        assert_eq!(c.by_vkey.get(&2), Some(&1));
        check(&c);

        // a validity end makes the namespace not all live from then on
        let mut ended = col("n", "b");
        ended.valid_to = Some(60);
        c.put(2, ended);
        assert!(c.namespaces["n"].all_live(59) && !c.namespaces["n"].all_live(60));
        assert_eq!(c.rid("n", "b"), Some(2));
        assert_eq!(c.rid("m", "b"), None);

        // a row moving namespace leaves the old one, which disappears when empty
        c.put(2, col("m", "b"));
        assert_eq!(c.rid("n", "b"), None);
        assert_eq!(c.rid("m", "b"), Some(2));
        check(&c);
        assert!(c.remove(1).is_some());
        assert!(c.remove(1).is_none());
        assert!(!c.namespaces.contains_key("n"));
        check(&c);
        c.remove(2);
        assert!(c.namespaces.is_empty() && c.rows.is_empty() && c.by_vkey.is_empty());
    }

    #[test]
    fn random_puts_and_removes_keep_every_index_exact() {
        let mut s: u64 = 7;
        let mut next = |n: u64| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 33) % n
        };
        let mut c = Columns::default();
        let mut vkey = 0;
        for step in 0..2000 {
            let rid = next(40);
            if next(4) == 0 {
                c.remove(rid);
            } else {
                let mut r = col(["a", "b", "c"][usize::try_from(next(3)).unwrap()], "");
                r.id = format!("id{rid}");
                r.tag_hashes = (0..next(3))
                    .map(|_| tag_hash(&next(5).to_string()))
                    .collect();
                r.tag_hashes.dedup();
                r.meta_hashes = vec![pair_hash("k", &next(4).to_string())];
                r.superseded_by = (next(5) == 0).then(|| "x".to_owned());
                r.expires_at = (next(3) == 0).then(|| i64::try_from(next(10)).unwrap());
                r.valid_to = (next(3) == 0).then(|| i64::try_from(next(10)).unwrap());
                if next(2) == 0 {
                    vkey += 1;
                    r.vkey = Some(vkey);
                }
                c.put(rid, r);
            }
            if step % 50 == 0 {
                check(&c);
            }
        }
        check(&c);
        // loading the same records from scratch gives the same indexes
        let records: Vec<(u64, Col)> = c.rows.iter().map(|(r, col)| (*r, col.clone())).collect();
        let loaded = Columns::load(records);
        check(&loaded);
        assert_eq!(kept(&loaded), kept(&c));
        for (name, ns) in &c.namespaces {
            let other = &loaded.namespaces[name];
            assert_eq!(ns.ids, other.ids);
            assert_eq!(ns.tags, other.tags);
            assert_eq!(ns.meta, other.meta);
            for t in 0..12 {
                assert_eq!(ns.all_live(t), other.all_live(t), "{name} at {t}");
                assert_eq!(
                    ns.expiries.any_at_or_before(t),
                    other.expiries.any_at_or_before(t)
                );
            }
        }
    }
}
