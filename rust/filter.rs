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

/// What every row of a posting list is known to satisfy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vouched {
    /// Nothing (the whole namespace, or a union of lists).
    Nothing,
    /// The row carries this tag (hash).
    Tag(u64),
    /// The row carries this metadata pair (hash).
    Meta(u64),
}

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
    /// Every row passes the live rule and nothing but tags and metadata pairs is asked.
    plain: bool,
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
        let mut tiers = spec.tiers.iter().fold(0u8, |m, t| m | (1 << (*t as u8)));
        // tiers that every row of the namespace is in restrict nothing (a linked namespace's
        // default tiers, semantic and procedural, over a namespace of long-term memories):
        // the searches then plan as unfiltered
        let in_tiers: usize = (0..4)
            .filter(|t| tiers & (1 << t) != 0)
            .map(|t| ns.tiers[t])
            .sum();
        if in_tiers == ns.ids.len() {
            tiers = 0;
        }
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
            plain: false,
        };
        let live_trivial = spec.as_of.is_none()
            && (spec.include_expired || !ns.expiries.any_at_or_before(reference))
            && (spec.include_superseded
                || (ns.superseded == 0 && !ns.valid_tos.any_at_or_before(reference)));
        p.plain = live_trivial
            && p.tiers == 0
            && p.levels == 0
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
        self.plain && self.tags.is_empty() && self.meta.is_empty()
    }

    /// The vector keys of the rows passing, ascending, when those rows are exactly one
    /// posting list (a single tag or metadata pair asked of a namespace whose rows are all
    /// live): listed without reading a row.
    #[must_use]
    pub fn exact_vector_keys(&self) -> Option<Vec<u64>> {
        if !self.plain {
            return None;
        }
        let list = match (self.tags.as_slice(), self.meta.as_slice()) {
            ([h], []) => self.ns.vector_tags.get(h),
            ([], [h]) => self.ns.vector_meta.get(h),
            _ => return None,
        };
        Some(list.map(|l| l.iter().collect()).unwrap_or_default())
    }

    /// Whether the row passes.
    #[must_use]
    pub fn matches(&self, rid: u64, c: &Col) -> bool {
        self.matches_vouched(rid, c, Vouched::Nothing)
    }

    /// Whether a row of a posting list passes, not testing what the list vouches for (reading
    /// the row's tags costs a cache miss per row: ~30% of listing a 10% tag's rows).
    #[must_use]
    pub fn matches_vouched(&self, rid: u64, c: &Col, vouched: Vouched) -> bool {
        if self.is_trivial() {
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
        if !self
            .tags
            .iter()
            .all(|h| vouched == Vouched::Tag(*h) || c.tag_hashes.contains(h))
            || !self
                .meta
                .iter()
                .all(|h| vouched == Vouched::Meta(*h) || c.meta_hashes.contains(h))
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
        self.candidates_vouched().map(|(rids, _)| rids)
    }

    /// [`candidates`](Self::candidates), with what that list vouches for its rows (for
    /// [`matches_vouched`](Self::matches_vouched)).
    #[must_use]
    pub fn candidates_vouched(&self) -> Option<(Vec<u64>, Vouched)> {
        let mut best: Option<(Vec<u64>, Vouched)> = None;
        let mut consider = |rids: Vec<u64>, vouched: Vouched| {
            if best.as_ref().is_none_or(|b| rids.len() < b.0.len()) {
                best = Some((rids, vouched));
            }
        };
        for h in &self.tags {
            consider(
                self.ns
                    .tags
                    .get(h)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default(),
                Vouched::Tag(*h),
            );
        }
        for h in &self.meta {
            consider(
                self.ns
                    .meta
                    .get(h)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default(),
                Vouched::Meta(*h),
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
            consider(union, Vouched::Nothing);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::collections::BTreeSet;

    use super::*;
    use crate::columns::Columns;
    use crate::types::Tier;

    const NOW: Micros = 1000;

    /// Rows 1-7 of namespace "n" (see the table in `every_field_selects_its_rows`) and one
    /// row of namespace "m".
    fn columns() -> Columns {
        let row = |id: &str, tier, level, created_at, last_accessed_at| Col {
            id: id.to_owned(),
            namespace: "n".to_owned(),
            tier,
            level,
            created_at,
            last_accessed_at,
            ..Col::default()
        };
        let tags = |t: &[&str]| t.iter().map(|t| tag_hash(t)).collect::<Vec<_>>();
        let meta = |m: &[(&str, &str)]| m.iter().map(|(k, v)| pair_hash(k, v)).collect();

        let mut r1 = row("r1", Tier::Semantic, Some(Level::Explicit), 100, 500);
        r1.tag_hashes = tags(&["red"]);
        r1.meta_hashes = meta(&[("k", "v"), ("memory_type", "fact")]);
        let mut r2 = row("r2", Tier::Episodic, Some(Level::Deduced), 200, 900);
        r2.tag_hashes = tags(&["red", "blue"]);
        r2.meta_hashes = meta(&[("k", "w"), ("memory_type", "event")]);
        let mut r3 = row("r3", Tier::Working, None, 300, 0);
        r3.expires_at = Some(900);
        let mut r4 = row("r4", Tier::Procedural, Some(Level::Explicit), 400, 0);
        r4.superseded_by = Some("r1".to_owned());
        let mut r5 = row("r5", Tier::Semantic, None, 500, 0);
        r5.valid_from = Some(500);
        r5.valid_to = Some(800);
        let mut r6 = row("r6", Tier::Semantic, None, 600, 650);
        r6.valid_from = Some(1500);
        let mut r7 = row("r7", Tier::Semantic, Some(Level::Deduced), 700, 100);
        r7.expires_at = Some(2000);
        r7.tag_hashes = tags(&["blue"]);
        r7.meta_hashes = meta(&[("memory_type", "fact")]);
        let mut other = row("m1", Tier::Semantic, None, 0, 0);
        other.namespace = "m".to_owned();
        other.tag_hashes = tags(&["red"]);
        Columns::load(
            [r1, r2, r3, r4, r5, r6, r7, other]
                .into_iter()
                .zip(1..)
                .map(|(mut c, rid)| {
                    c.vkey = (rid != 3).then_some(100 + rid);
                    (rid, c)
                })
                .collect(),
        )
    }

    fn spec() -> FilterSpec {
        FilterSpec {
            now: NOW,
            ..FilterSpec::default()
        }
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    /// The rows of `ns` the predicate passes, checked against `candidates`/`candidate_count`.
    fn passing(c: &Columns, ns: &str, spec: &FilterSpec) -> BTreeSet<u64> {
        let n = &c.namespaces[ns];
        let p = Predicate::new(spec, n);
        let all: Vec<u64> = n.ids.values().copied().collect();
        let pass: BTreeSet<u64> = all
            .iter()
            .copied()
            .filter(|rid| p.matches(*rid, &c.rows[rid]))
            .collect();
        if p.is_trivial() {
            assert_eq!(pass.len(), all.len(), "trivial, yet rows fail");
        }
        match p.candidates() {
            Some(cands) => {
                assert_eq!(p.candidate_count(), cands.len());
                let cands: BTreeSet<u64> = cands.into_iter().collect();
                assert!(pass.is_subset(&cands), "a passing row is not a candidate");
            }
            None => assert_eq!(p.candidate_count(), all.len()),
        }
        if let Some(exact) = p.exact_vector_keys() {
            let vkeys: Vec<u64> = pass.iter().filter_map(|rid| c.rows[rid].vkey).collect();
            assert_eq!(
                vkeys, exact,
                "an exact posting list is not the passing rows"
            );
        }
        pass
    }

    #[test]
    #[allow(clippy::too_many_lines, reason = "one table")]
    fn every_field_selects_its_rows() {
        let c = columns();
        let at = |as_of| FilterSpec {
            as_of: Some(as_of),
            ..spec()
        };
        let cases: Vec<(&str, FilterSpec, &[u64])> = vec![
            // r3 expired at 900, r4 superseded, r5's validity ended at 800; r6's validity
            // starting later does not matter without as_of
            ("default", spec(), &[1, 2, 6, 7]),
            (
                "tier",
                FilterSpec {
                    tiers: vec![Tier::Semantic],
                    ..spec()
                },
                &[1, 6, 7],
            ),
            (
                "tiers-or",
                FilterSpec {
                    tiers: vec![Tier::Episodic, Tier::Working, Tier::Procedural],
                    ..spec()
                },
                &[2],
            ),
            (
                "level-none-is-legacy",
                FilterSpec {
                    levels: vec![None],
                    ..spec()
                },
                &[6],
            ),
            (
                "levels-or",
                FilterSpec {
                    levels: vec![Some(Level::Explicit), None],
                    ..spec()
                },
                &[1, 6],
            ),
            (
                "level-deduced",
                FilterSpec {
                    levels: vec![Some(Level::Deduced)],
                    ..spec()
                },
                &[2, 7],
            ),
            (
                "tag",
                FilterSpec {
                    tags: strings(&["red"]),
                    ..spec()
                },
                &[1, 2],
            ),
            (
                "tags-and",
                FilterSpec {
                    tags: strings(&["red", "blue"]),
                    ..spec()
                },
                &[2],
            ),
            (
                "tag-unknown",
                FilterSpec {
                    tags: strings(&["green"]),
                    ..spec()
                },
                &[],
            ),
            (
                "metadata",
                FilterSpec {
                    metadata: pairs(&[("k", "v")]),
                    ..spec()
                },
                &[1],
            ),
            (
                "metadata-and",
                FilterSpec {
                    metadata: pairs(&[("k", "w"), ("memory_type", "fact")]),
                    ..spec()
                },
                &[],
            ),
            (
                "exclude-metadata",
                FilterSpec {
                    exclude_metadata: pairs(&[("k", "v"), ("memory_type", "event")]),
                    ..spec()
                },
                &[6, 7],
            ),
            (
                "exclude-ids",
                FilterSpec {
                    // m1 lives in another namespace, "zz" nowhere: no effect
                    exclude_ids: strings(&["r2", "m1", "zz"]),
                    ..spec()
                },
                &[1, 6, 7],
            ),
            (
                "include-expired",
                FilterSpec {
                    include_expired: true,
                    ..spec()
                },
                &[1, 2, 3, 6, 7],
            ),
            (
                "include-superseded-lifts-valid-to",
                FilterSpec {
                    include_superseded: true,
                    ..spec()
                },
                &[1, 2, 4, 5, 6, 7],
            ),
            (
                "include-both",
                FilterSpec {
                    include_expired: true,
                    include_superseded: true,
                    ..spec()
                },
                &[1, 2, 3, 4, 5, 6, 7],
            ),
            // as_of: validity windows [valid_from, valid_to), superseding ignored, expiry
            // checked at as_of
            ("as-of-700", at(700), &[1, 2, 3, 4, 5, 7]),
            ("as-of-800-window-end-excluded", at(800), &[1, 2, 3, 4, 7]),
            ("as-of-900-expiry-reached", at(900), &[1, 2, 4, 7]),
            (
                "as-of-900-include-expired",
                FilterSpec {
                    include_expired: true,
                    ..at(900)
                },
                &[1, 2, 3, 4, 7],
            ),
            (
                "as-of-1500-window-start-included",
                at(1500),
                &[1, 2, 4, 6, 7],
            ),
            ("as-of-2000-r7-expired", at(2000), &[1, 2, 4, 6]),
            (
                "memory-type",
                FilterSpec {
                    memory_types: strings(&["fact"]),
                    ..spec()
                },
                &[1, 7],
            ),
            (
                "memory-types-or",
                FilterSpec {
                    memory_types: strings(&["fact", "event"]),
                    ..spec()
                },
                &[1, 2, 7],
            ),
            (
                "memory-type-unknown",
                FilterSpec {
                    memory_types: strings(&["plan"]),
                    ..spec()
                },
                &[],
            ),
            (
                "created-after-inclusive",
                FilterSpec {
                    created_after: Some(200),
                    ..spec()
                },
                &[2, 6, 7],
            ),
            (
                "accessed-after-inclusive",
                FilterSpec {
                    accessed_after: Some(650),
                    ..spec()
                },
                &[2, 6],
            ),
            (
                "combined",
                FilterSpec {
                    tiers: vec![Tier::Semantic, Tier::Episodic],
                    tags: strings(&["blue"]),
                    memory_types: strings(&["fact", "event"]),
                    include_expired: true,
                    ..spec()
                },
                &[2, 7],
            ),
        ];
        for (name, spec, want) in cases {
            let got: Vec<u64> = passing(&c, "n", &spec).into_iter().collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn the_reference_instant_is_now_without_as_of() {
        let c = columns();
        let at = |now| FilterSpec { now, ..spec() };
        let got = |s: &FilterSpec| passing(&c, "n", s).into_iter().collect::<Vec<_>>();
        // before r5's validity ended and r3 expired; r7 expires at 2000
        assert_eq!(got(&at(799)), [1, 2, 3, 5, 6, 7]);
        assert_eq!(got(&at(800)), [1, 2, 3, 6, 7]);
        assert_eq!(got(&at(900)), [1, 2, 6, 7]);
        assert_eq!(got(&at(2000)), [1, 2, 6]);
    }

    #[test]
    fn a_filter_is_trivial_only_when_every_row_passes_it() {
        let c = columns();
        let trivial = |ns: &str, s: &FilterSpec| Predicate::new(s, &c.namespaces[ns]).is_trivial();
        // "n" holds expired, superseded and ended rows; "m" none of them
        assert!(!trivial("n", &spec()));
        assert!(trivial("m", &spec()));
        let lifted = FilterSpec {
            include_expired: true,
            include_superseded: true,
            ..spec()
        };
        assert!(trivial("n", &lifted));
        assert!(!trivial(
            "n",
            &FilterSpec {
                include_expired: true,
                ..spec()
            }
        ));
        assert!(!trivial(
            "n",
            &FilterSpec {
                include_superseded: true,
                ..spec()
            }
        ));
        // an unknown id to exclude changes nothing
        let absent = FilterSpec {
            exclude_ids: strings(&["zz"]),
            ..spec()
        };
        assert!(trivial("m", &absent));
        // tiers holding every row of the namespace restrict nothing ("m" is all semantic)
        let tiers = |ts: &[Tier]| FilterSpec {
            tiers: ts.to_vec(),
            ..lifted.clone()
        };
        assert!(trivial("m", &tiers(&[Tier::Semantic])));
        assert!(trivial("n", &tiers(Tier::ALL)));
        assert!(!trivial("m", &tiers(&[Tier::Episodic])));
        assert!(!trivial("n", &tiers(&[Tier::Semantic, Tier::Procedural])));
        // every other field makes it non-trivial, even when all rows pass
        let others = [
            FilterSpec {
                as_of: Some(NOW),
                ..spec()
            },
            FilterSpec {
                levels: vec![None],
                ..spec()
            },
            FilterSpec {
                tags: strings(&["red"]),
                ..spec()
            },
            FilterSpec {
                metadata: pairs(&[("k", "v")]),
                ..spec()
            },
            FilterSpec {
                exclude_metadata: pairs(&[("k", "v")]),
                ..spec()
            },
            FilterSpec {
                exclude_ids: strings(&["m1"]),
                ..spec()
            },
            FilterSpec {
                memory_types: strings(&["fact"]),
                ..spec()
            },
            FilterSpec {
                created_after: Some(0),
                ..spec()
            },
            FilterSpec {
                accessed_after: Some(0),
                ..spec()
            },
        ];
        for (i, s) in others.iter().enumerate() {
            assert!(!trivial("m", s), "field {i}");
        }
        // a predicate names the tags a keyword search may require
        let tagged = FilterSpec {
            tags: strings(&["red", "blue"]),
            ..spec()
        };
        let p = Predicate::new(&tagged, &c.namespaces["n"]);
        assert_eq!(p.tags(), [tag_hash("red"), tag_hash("blue")]);
    }

    #[test]
    fn a_filter_lists_its_vector_keys_only_for_one_tag_or_pair_on_live_rows() {
        let c = columns();
        let exact =
            |ns: &str, s: &FilterSpec| Predicate::new(s, &c.namespaces[ns]).exact_vector_keys();
        let red = FilterSpec {
            tags: strings(&["red"]),
            ..spec()
        };
        // "m" is all live; "n" holds expired, superseded and ended rows; row r has vector
        // key 100 + r, but for r3 (none)
        assert_eq!(exact("m", &red), Some(vec![108]));
        assert_eq!(exact("n", &red), None);
        let lifted = FilterSpec {
            include_expired: true,
            include_superseded: true,
            ..red.clone()
        };
        assert_eq!(exact("n", &lifted), Some(vec![101, 102]));
        let unknown = FilterSpec {
            tags: strings(&["green"]),
            ..lifted.clone()
        };
        assert_eq!(exact("n", &unknown), Some(vec![]));
        let pair = FilterSpec {
            include_expired: true,
            include_superseded: true,
            metadata: pairs(&[("k", "v")]),
            ..spec()
        };
        assert_eq!(exact("n", &pair), Some(vec![101]));
        // two lists, or anything else asked: not one list
        for s in [
            FilterSpec {
                tags: strings(&["red", "blue"]),
                ..lifted.clone()
            },
            FilterSpec {
                metadata: pairs(&[("k", "v")]),
                ..lifted.clone()
            },
            FilterSpec {
                tiers: vec![Tier::Semantic],
                ..lifted.clone()
            },
            FilterSpec {
                exclude_ids: strings(&["r1"]),
                ..lifted.clone()
            },
        ] {
            assert_eq!(exact("n", &s), None);
        }
    }

    #[test]
    fn candidates_are_the_smallest_posting_list() {
        let c = columns();
        let n = &c.namespaces["n"];
        let cands = |s: &FilterSpec| {
            let p = Predicate::new(s, n);
            (p.candidates(), p.candidate_count())
        };
        // no posting list: scan the namespace
        assert_eq!(cands(&spec()), (None, 7));
        assert_eq!(
            cands(&FilterSpec {
                tiers: vec![Tier::Semantic],
                ..spec()
            }),
            (None, 7)
        );
        // red {1, 2}, blue {2, 7}, k=v {1}: the smallest wins
        assert_eq!(
            cands(&FilterSpec {
                tags: strings(&["red"]),
                ..spec()
            }),
            (Some(vec![1, 2]), 2)
        );
        let s = FilterSpec {
            tags: strings(&["red", "blue"]),
            metadata: pairs(&[("k", "v")]),
            ..spec()
        };
        assert_eq!(cands(&s), (Some(vec![1]), 1));
        // an unknown tag: nothing can pass
        let s = FilterSpec {
            tags: strings(&["red", "green"]),
            ..spec()
        };
        assert_eq!(cands(&s), (Some(vec![]), 0));
        // memory types: their union (fact {1, 7}, event {2}), unless a list is smaller
        let types = FilterSpec {
            memory_types: strings(&["fact", "event", "plan"]),
            ..spec()
        };
        assert_eq!(cands(&types), (Some(vec![1, 2, 7]), 3));
        let s = FilterSpec {
            metadata: pairs(&[("k", "w")]),
            ..types
        };
        assert_eq!(cands(&s), (Some(vec![2]), 1));
        // other namespaces' postings are never candidates
        let m = Predicate::new(
            &FilterSpec {
                tags: strings(&["red"]),
                ..spec()
            },
            &c.namespaces["m"],
        );
        assert_eq!(m.candidates(), Some(vec![8]));
    }
}
