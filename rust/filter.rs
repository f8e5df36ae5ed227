//! A [`FilterSpec`] compiled once per call into a predicate over the in-memory columns.
//!
//! The live rule (API.md): with `as_of` set, a row matches when
//! `valid_from <= as_of < valid_to` (None bounds open) whatever its `superseded_by`; otherwise
//! it must not be superseded and its `valid_to` must lie after the reference instant, unless
//! `include_superseded`. Either way its `expires_at` must lie after the reference instant
//! unless `include_expired`. The reference instant is `as_of`, else `now`.

use std::collections::HashSet;

use crate::columns::{pair_hash, tag_hash, Namespace};
use crate::rows::Col;
use crate::types::{FilterSpec, Level, Micros};

/// Key of the memory type in the metadata.
const MEMORY_TYPE: &str = "memory_type";

/// The compiled predicate for one namespace.
pub struct Predicate<'a> {
    ns: &'a Namespace,
    tiers: u8,
    levels: u8,
    tags: Vec<u64>,
    meta: Vec<u64>,
    exclude_meta: Vec<u64>,
    memory_types: Vec<u64>,
    exclude_rids: HashSet<u64>,
    reference: Micros,
    as_of: Option<Micros>,
    include_expired: bool,
    include_superseded: bool,
    created_after: Option<Micros>,
    accessed_after: Option<Micros>,
    trivial: bool,
}

fn level_bit(l: Option<Level>) -> u8 {
    match l {
        None => 1,
        Some(Level::Explicit) => 2,
        Some(Level::Deduced) => 4,
    }
}

impl<'a> Predicate<'a> {
    /// Compiles `spec` against the namespace `ns`.
    #[must_use]
    pub fn new(spec: &FilterSpec, ns: &'a Namespace) -> Self {
        let tiers = spec.tiers.iter().fold(0u8, |m, t| m | (1 << (*t as u8)));
        let levels = spec.levels.iter().fold(0u8, |m, l| m | level_bit(*l));
        let reference = spec.as_of.unwrap_or(spec.now);
        let exclude_rids: HashSet<u64> = spec
            .exclude_ids
            .iter()
            .filter_map(|id| ns.ids.get(id).copied())
            .collect();
        let mut p = Self {
            ns,
            tiers,
            levels,
            tags: spec.tags.iter().map(|t| tag_hash(t)).collect(),
            meta: spec.metadata.iter().map(|(k, v)| pair_hash(k, v)).collect(),
            exclude_meta: spec
                .exclude_metadata
                .iter()
                .map(|(k, v)| pair_hash(k, v))
                .collect(),
            memory_types: spec
                .memory_types
                .iter()
                .map(|t| pair_hash(MEMORY_TYPE, t))
                .collect(),
            exclude_rids,
            reference,
            as_of: spec.as_of,
            include_expired: spec.include_expired,
            include_superseded: spec.include_superseded,
            created_after: spec.created_after,
            accessed_after: spec.accessed_after,
            trivial: false,
        };
        let live_trivial = spec.as_of.is_none()
            && (spec.include_expired || !ns.expiries.any_at_or_before(reference))
            && (spec.include_superseded
                || (ns.superseded == 0 && !ns.valid_tos.any_at_or_before(reference)));
        p.trivial = live_trivial
            && p.tiers == 0
            && p.levels == 0
            && p.tags.is_empty()
            && p.meta.is_empty()
            && p.exclude_meta.is_empty()
            && p.memory_types.is_empty()
            && p.exclude_rids.is_empty()
            && p.created_after.is_none()
            && p.accessed_after.is_none();
        p
    }

    /// Hashes of the tags a row must carry (all of them).
    #[must_use]
    pub fn tags(&self) -> &[u64] {
        &self.tags
    }

    /// True when every row of the namespace passes (searches then need no predicate at all).
    #[must_use]
    pub fn is_trivial(&self) -> bool {
        self.trivial
    }

    /// Whether the row passes.
    #[must_use]
    pub fn matches(&self, rid: u64, c: &Col) -> bool {
        if self.trivial {
            return true;
        }
        if self.tiers != 0 && self.tiers & (1 << (c.tier as u8)) == 0 {
            return false;
        }
        if self.levels != 0 && self.levels & level_bit(c.level) == 0 {
            return false;
        }
        if !self.include_expired && c.expires_at.is_some_and(|e| e <= self.reference) {
            return false;
        }
        if let Some(t) = self.as_of {
            if c.valid_from.is_some_and(|f| f > t) || c.valid_to.is_some_and(|e| e <= t) {
                return false;
            }
        } else if !self.include_superseded
            && (c.superseded_by.is_some() || c.valid_to.is_some_and(|e| e <= self.reference))
        {
            return false;
        }
        if self.created_after.is_some_and(|t| c.created_at < t)
            || self.accessed_after.is_some_and(|t| c.last_accessed_at < t)
        {
            return false;
        }
        if !self.tags.iter().all(|h| c.tag_hashes.contains(h))
            || !self.meta.iter().all(|h| c.meta_hashes.contains(h))
            || self.exclude_meta.iter().any(|h| c.meta_hashes.contains(h))
        {
            return false;
        }
        if !self.memory_types.is_empty()
            && !self.memory_types.iter().any(|h| c.meta_hashes.contains(h))
        {
            return false;
        }
        !self.exclude_rids.contains(&rid)
    }

    /// The smallest posting list that every passing row must be in, when the filter has one
    /// (a tag, a metadata pair, or the union of the memory types): enumerate it instead of the
    /// whole namespace. `None` = no such list; scan the namespace.
    #[must_use]
    pub fn candidates(&self) -> Option<Vec<u64>> {
        let mut best: Option<Vec<u64>> = None;
        let mut consider = |rids: Vec<u64>| {
            if best.as_ref().is_none_or(|b| rids.len() < b.len()) {
                best = Some(rids);
            }
        };
        for h in &self.tags {
            consider(
                self.ns
                    .tags
                    .get(h)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default(),
            );
        }
        for h in &self.meta {
            consider(
                self.ns
                    .meta
                    .get(h)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default(),
            );
        }
        if !self.memory_types.is_empty() {
            let mut union: Vec<u64> = self
                .memory_types
                .iter()
                .filter_map(|h| self.ns.meta.get(h))
                .flat_map(|s| s.iter().copied())
                .collect();
            union.sort_unstable();
            union.dedup();
            consider(union);
        }
        best
    }

    /// Length of the list [`candidates`](Self::candidates) would return, without building
    /// it (the namespace size when the filter has no posting list).
    #[must_use]
    pub fn candidate_count(&self) -> usize {
        let len = |h: &u64, map: &crate::columns::IdMap<std::collections::BTreeSet<u64>>| {
            map.get(h).map_or(0, std::collections::BTreeSet::len)
        };
        let mut n = self.ns.ids.len();
        for h in &self.tags {
            n = n.min(len(h, &self.ns.tags));
        }
        for h in &self.meta {
            n = n.min(len(h, &self.ns.meta));
        }
        if !self.memory_types.is_empty() {
            n = n.min(
                self.memory_types
                    .iter()
                    .map(|h| len(h, &self.ns.meta))
                    .sum(),
            );
        }
        n
    }
}
