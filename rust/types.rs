//! Plain data types shared by the core: the memory row, its enums, filters and search hits.
//! Timestamps are `i64` microseconds since the Unix epoch (UTC).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Microseconds since the Unix epoch, UTC.
pub type Micros = i64;

/// The wall clock in microseconds.
#[must_use]
pub fn now_micros() -> Micros {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// `content` with its whitespace collapsed and its case folded, so that trivially different
/// restatements compare equal (`memini.normalize_content`, which calls this): the words
/// between runs of Unicode White_Space (`char::is_whitespace`) joined with single spaces,
/// each code point lowercased by the Unicode *simple* mapping (one code point to one, no
/// context: U+0130 becomes `i`, U+03A3 always U+03C3).
#[must_use]
pub fn normalize_content(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    for word in content.split(char::is_whitespace).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        if word.is_ascii() {
            out.extend(word.chars().map(|c| c.to_ascii_lowercase()));
            continue;
        }
        for c in word.chars() {
            // the only code point whose full lowercase mapping is not one code point
            if c == '\u{130}' {
                out.push('i');
            } else {
                out.extend(c.to_lowercase());
            }
        }
    }
    out
}

/// The content key of exact-restatement dedup (`memini.fingerprint`, which calls this):
/// the lowercase hex SHA-256 of the UTF-8 of `normalize_content(content)`.
#[must_use]
pub fn fingerprint(content: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let digest = Sha256::digest(normalize_content(content).as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// A UTC instant's calendar fields (proleptic Gregorian), as Python's `datetime` holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i32,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    pub micro: u32,
}

const US_PER_DAY: Micros = 86_400_000_000;
/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z: the range of Python's datetime.
const MIN_US: Micros = -62_135_596_800_000_000;
const MAX_US: Micros = 253_402_300_799_999_999;

/// The calendar fields of `us` microseconds since the epoch, exactly (no float rounding);
/// None outside the range of Python's `datetime` (years 1 to 9999).
#[must_use]
pub fn civil(us: Micros) -> Option<Civil> {
    if !(MIN_US..=MAX_US).contains(&us) {
        return None;
    }
    // civil date from days since 1970-01-01 (H. Hinnant's algorithm, proleptic Gregorian)
    let (days, rem) = (us.div_euclid(US_PER_DAY), us.rem_euclid(US_PER_DAY));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let secs = rem / 1_000_000;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "range-checked above: every component fits its type"
    )]
    Some(Civil {
        year: year as i32,
        month: month as u8,
        day: day as u8,
        hour: (secs / 3600) as u8,
        minute: (secs / 60 % 60) as u8,
        second: (secs % 60) as u8,
        micro: (rem % 1_000_000) as u32,
    })
}

/// `civil`'s inverse: the instant of calendar fields, None when they name none Python's
/// `datetime` holds (a 30 February, an hour 24, a year 0).
#[must_use]
pub fn from_civil(c: &Civil) -> Option<Micros> {
    // days since 1970-01-01 of a civil date (H. Hinnant's algorithm, as `civil`)
    let year = i64::from(c.year) - i64::from(c.month <= 2);
    let (era, yoe) = (year.div_euclid(400), year.rem_euclid(400));
    let doy = (153 * ((i64::from(c.month) + 9) % 12) + 2) / 5 + i64::from(c.day) - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let secs = i64::from(c.hour) * 3600 + i64::from(c.minute) * 60 + i64::from(c.second);
    let us = (days * 86_400 + secs)
        .checked_mul(1_000_000)?
        .checked_add(i64::from(c.micro))?;
    (civil(us).as_ref() == Some(c)).then_some(us)
}

macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident, $what:literal { $($variant:ident = $s:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $(#[doc = $s] $variant),* }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];

            /// The string value used by the Python API.
            #[must_use]
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $s),* }
            }

            /// Parses the string value; an unknown value names the allowed ones.
            pub fn parse(s: &str) -> Result<Self> {
                match s {
                    $($s => Ok(Self::$variant),)*
                    _ => Err(Error::invalid(format!(
                        concat!("unknown ", $what, " {:?} (use one of: {})"),
                        s,
                        [$($s),*].join(", ")
                    ))),
                }
            }
        }
    };
}

string_enum!(
    /// Memory tier.
    Tier, "tier" { Working = "working", Episodic = "episodic", Semantic = "semantic", Procedural = "procedural" }
);

impl Default for Tier {
    /// API.md's default tier.
    fn default() -> Self {
        Self::Semantic
    }
}
string_enum!(
    /// How a memory was obtained.
    Level, "level" { Explicit = "explicit", Deduced = "deduced" }
);
string_enum!(
    /// Vector distance metric of a store.
    Metric, "metric" { L2 = "l2", Cos = "cos", Ip = "ip" }
);
string_enum!(
    /// Sort keys honoured by `list`.
    SortKey, "sort key" {
        CreatedAt = "created_at", UpdatedAt = "updated_at", LastAccessedAt = "last_accessed_at",
        AccessCount = "access_count", Importance = "importance",
    }
);

/// The fields of a memory, declared once: `for_memory_fields!(m)` expands the macro `m!` with
/// the list, and every layer that handles each field derives its code from it (the `Memory`
/// and `MemoryPatch` structs and `Memory::apply` here, the split into stored records in
/// `rows`, the conversion to and from Python in `python::convert`).
///
/// Each entry: docs, `name: Type`, the stored record holding it (`col`: the small record the
/// filter columns are built from; `payload`: the rest), how it crosses to Python (`text`,
/// `opt_text`, `tier`, `level`, `json`, `list`, `float`, `opt_float`, `int`, `time` — stamped
/// "now" when given as None — `opt_time`, and `digest`: in rows, never in Python objects),
/// and whether `update` may change it
/// (`update`/`fixed`).
#[macro_export]
macro_rules! for_memory_fields {
    ($m:ident) => {
        $m! {
            /// Unique across all namespaces.
            id: String, col, text, fixed;
            /// Owning namespace.
            namespace: String, col, text, fixed;
            /// The memory text.
            content: String, payload, text, update;
            /// Tier.
            tier: Tier, col, tier, update;
            /// None = legacy/unknown.
            level: Option<Level>, col, level, update;
            /// Short summary.
            summary: String, payload, text, update;
            /// JSON object text.
            metadata: String, payload, json, update;
            /// Tags, order preserved.
            tags: Vec<String>, payload, list, update;
            /// Importance weight.
            importance: f64, col, float, update;
            /// Creation instant (kept on update).
            created_at: Micros, col, time, fixed;
            /// Last update instant.
            updated_at: Micros, col, time, update;
            /// Last access instant.
            last_accessed_at: Micros, col, time, update;
            /// Access counter.
            access_count: i64, col, int, update;
            /// Expiry instant; None = never.
            expires_at: Option<Micros>, col, opt_time, update;
            /// Set = tombstoned by that id.
            superseded_by: Option<String>, col, opt_text, update;
            /// Validity start.
            valid_from: Option<Micros>, col, opt_time, update;
            /// Validity end.
            valid_to: Option<Micros>, col, opt_time, update;
            /// Confidence; None = not tracked.
            confidence: Option<f64>, col, opt_float, update;
            /// Related memory ids.
            linked_memory_ids: Vec<String>, payload, list, update;
            /// Hex SHA-256 of the normalised content (computed by the caller with the content).
            fingerprint: String, payload, digest, update;
        }
    };
}

/// Applies one patch field: `update` fields take the new value, `fixed` ones never change.
macro_rules! patch_field {
    (update, $m:ident, $p:ident, $name:ident) => {
        if let Some(v) = $p.$name {
            $m.$name = v;
        }
    };
    (fixed, $m:ident, $p:ident, $name:ident) => {};
}

macro_rules! define_memory {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty, $rec:ident, $py:ident, $upd:ident; )*) => {
        /// One memory row as the API sees it (without its vector).
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        pub struct Memory {
            $( $(#[$doc])* pub $name: $ty, )*
        }

        /// A partial update: each `Some` replaces that field (`Some(None)` clears an optional
        /// one); fixed fields (id, namespace, created_at) are ignored.
        #[derive(Clone, Debug, Default)]
        #[allow(
            clippy::option_option,
            reason = "Some(None) means: set the optional field to None"
        )]
        pub struct MemoryPatch {
            $( $(#[$doc])* pub $name: Option<$ty>, )*
            /// New vector (Some(None) removes it).
            pub embedding: Option<Option<Vec<f32>>>,
        }

        impl Memory {
            /// Applies a patch's fields (not its vector, which the caller handles).
            pub fn apply(&mut self, patch: MemoryPatch) {
                $( patch_field!($upd, self, patch, $name); )*
            }
        }
    };
}

for_memory_fields!(define_memory);

impl MemoryPatch {
    /// Whether the patch changes a field kept in the row's payload (its text or lists).
    #[must_use]
    pub fn touches_payload(&self) -> bool {
        macro_rules! any_payload {
            ($( $(#[$doc:meta])* $name:ident : $ty:ty, $rec:ident, $py:ident, $upd:ident; )*) => {
                false $( || any_payload!(@ $rec, self.$name) )*
            };
            (@ payload, $e:expr) => { $e.is_some() };
            (@ col, $e:expr) => { false };
        }
        for_memory_fields!(any_payload)
    }
}

/// Time fields of a new memory given as None: the store stamps them with "now".
#[derive(Clone, Copy, Debug, Default)]
#[allow(clippy::struct_excessive_bools, reason = "one flag per time field")]
pub struct Unstamped {
    /// `created_at` was not given.
    pub created_at: bool,
    /// `updated_at` was not given.
    pub updated_at: bool,
    /// `last_accessed_at` was not given.
    pub last_accessed_at: bool,
}

/// A memory to write: the row, which of its timestamps to stamp, and an optional vector.
#[derive(Clone, Debug)]
pub struct NewMemory {
    /// The row; its unstamped timestamps are replaced by the store.
    pub memory: Memory,
    /// Which timestamps were not given.
    pub unstamped: Unstamped,
    /// The vector; None = keyword-only row.
    pub embedding: Option<Vec<f32>>,
}

/// The fields of a filter spec, declared once: `for_filter_fields!(m)` expands the macro `m!`
/// with the list, from which the `FilterSpec` struct here and its conversion from Python in
/// `python::convert` are derived. The Python declaration is the `memini.Filter` dataclass
/// (`memini._convert.filter_to_spec` makes the spec dict, its `sort` flattened into `sort_key`
/// and `sort_asc`); `tests/test_filters.py` checks that both name the same fields, in order.
///
/// Each entry: docs, `name: Type`. Adding a field here and to `memini.Filter`, plus the code
/// giving it meaning (`filter::Predicate` here, `memini.postgres._filter` there), is all.
#[macro_export]
macro_rules! for_filter_fields {
    ($m:ident) => {
        $m! {
            /// OR; empty = all.
            tiers: Vec<Tier>;
            /// OR; empty = all; None matches legacy rows.
            levels: Vec<Option<Level>>;
            /// AND, exact.
            tags: Vec<String>;
            /// AND of top-level string metadata pairs.
            metadata: Vec<(String, String)>;
            /// Drop rows carrying any of these pairs.
            exclude_metadata: Vec<(String, String)>;
            /// Ids dropped before ranking.
            exclude_ids: Vec<String>;
            /// Also rows whose expiry passed.
            include_expired: bool;
            /// Also superseded rows (and rows whose validity ended).
            include_superseded: bool;
            /// Reference instant (resolved by the caller).
            now: Micros;
            /// Time travel instant.
            as_of: Option<Micros>;
            /// `metadata["memory_type"]` in this list (OR).
            memory_types: Vec<String>;
            /// created_at >= this.
            created_after: Option<Micros>;
            /// last_accessed_at >= this.
            accessed_after: Option<Micros>;
            /// Sort key for `list` (None = `created_at`).
            sort_key: Option<SortKey>;
            /// Ascending order for `list`.
            sort_asc: bool;
        }
    };
}

macro_rules! define_filter_spec {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty; )*) => {
        /// Which rows a list, count or search considers (API.md `Filter`, with `now`
        /// resolved). The default selects the live rows at instant 0.
        #[derive(Clone, Debug, Default)]
        pub struct FilterSpec {
            $( $(#[$doc])* pub $name: $ty, )*
        }
    };
}

for_filter_fields!(define_filter_spec);

/// A search hit.
#[derive(Clone, Debug)]
pub struct Scored {
    /// The row.
    pub memory: Memory,
    /// Higher is better.
    pub score: f64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn string_enums_round_trip_and_name_the_allowed_values() {
        fn round_trip<T: Copy + PartialEq + std::fmt::Debug>(
            all: &[T],
            as_str: fn(T) -> &'static str,
            parse: fn(&str) -> Result<T>,
        ) {
            let names: Vec<&str> = all.iter().map(|v| as_str(*v)).collect();
            for v in all {
                assert_eq!(parse(as_str(*v)).unwrap(), *v);
            }
            let mut unique = names.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), names.len(), "{names:?}");
        }
        round_trip(Tier::ALL, Tier::as_str, Tier::parse);
        round_trip(Level::ALL, Level::as_str, Level::parse);
        round_trip(Metric::ALL, Metric::as_str, Metric::parse);
        round_trip(SortKey::ALL, SortKey::as_str, SortKey::parse);
        assert_eq!(Tier::ALL.len(), 4);
        assert_eq!(Tier::default(), Tier::Semantic);
        assert_eq!(SortKey::LastAccessedAt.as_str(), "last_accessed_at");

        let err = |e: Error| match e {
            Error::InvalidArgument(m) => m,
            other => panic!("not an invalid argument: {other:?}"),
        };
        assert_eq!(
            err(Tier::parse("Semantic").unwrap_err()),
            "unknown tier \"Semantic\" (use one of: working, episodic, semantic, procedural)"
        );
        assert_eq!(
            err(SortKey::parse("").unwrap_err()),
            "unknown sort key \"\" (use one of: created_at, updated_at, last_accessed_at, \
             access_count, importance)"
        );
        assert_eq!(
            err(Metric::parse("cosine").unwrap_err()),
            "unknown metric \"cosine\" (use one of: l2, cos, ip)"
        );
        assert!(err(Level::parse("implicit").unwrap_err()).contains("explicit, deduced"));
    }

    fn memory() -> Memory {
        Memory {
            id: "m1".into(),
            namespace: "ns".into(),
            content: "old".into(),
            tier: Tier::Working,
            level: Some(Level::Explicit),
            tags: vec!["a".into()],
            created_at: 10,
            updated_at: 10,
            expires_at: Some(99),
            confidence: Some(0.5),
            ..Memory::default()
        }
    }

    #[test]
    fn a_patch_changes_its_update_fields_and_never_the_fixed_ones() {
        let mut m = memory();
        m.apply(MemoryPatch {
            id: Some("other".into()),
            namespace: Some("elsewhere".into()),
            created_at: Some(1),
            content: Some("new".into()),
            tier: Some(Tier::Semantic),
            level: Some(None),
            tags: Some(vec![]),
            updated_at: Some(20),
            expires_at: Some(None),
            superseded_by: Some(Some("m2".into())),
            confidence: Some(Some(0.9)),
            embedding: Some(None),
            ..MemoryPatch::default()
        });
        let want = Memory {
            content: "new".into(),
            tier: Tier::Semantic,
            level: None,
            tags: vec![],
            updated_at: 20,
            expires_at: None,
            superseded_by: Some("m2".into()),
            confidence: Some(0.9),
            ..memory()
        };
        assert_eq!(m, want);
        assert_eq!(
            (m.id.as_str(), m.namespace.as_str(), m.created_at),
            ("m1", "ns", 10)
        );

        // an empty patch changes nothing
        let mut same = memory();
        same.apply(MemoryPatch::default());
        assert_eq!(same, memory());
    }

    #[test]
    fn touches_payload_is_true_for_payload_fields_only() {
        let payload = [
            MemoryPatch {
                content: Some(String::new()),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                summary: Some(String::new()),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                metadata: Some("{}".into()),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                tags: Some(vec![]),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                linked_memory_ids: Some(vec![]),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                fingerprint: Some(String::new()),
                ..MemoryPatch::default()
            },
        ];
        for (i, p) in payload.iter().enumerate() {
            assert!(p.touches_payload(), "payload field {i}");
        }
        let columns = [
            MemoryPatch::default(),
            MemoryPatch {
                tier: Some(Tier::Working),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                level: Some(None),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                importance: Some(1.0),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                updated_at: Some(1),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                last_accessed_at: Some(1),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                access_count: Some(1),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                expires_at: Some(None),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                superseded_by: Some(None),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                valid_from: Some(None),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                valid_to: Some(None),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                confidence: Some(None),
                ..MemoryPatch::default()
            },
            // the vector is not in the payload, nor are the fixed fields patched at all
            MemoryPatch {
                embedding: Some(None),
                ..MemoryPatch::default()
            },
            MemoryPatch {
                id: Some(String::new()),
                ..MemoryPatch::default()
            },
        ];
        for (i, p) in columns.iter().enumerate() {
            assert!(!p.touches_payload(), "column patch {i}");
        }
    }

    #[test]
    fn from_civil_inverts_civil_and_refuses_what_is_no_instant() {
        let (min, max) = (-62_135_596_800_000_000, 253_402_300_799_999_999);
        let mut us = min;
        while us < max {
            let c = civil(us).unwrap();
            assert_eq!(from_civil(&c), Some(us), "{c:?}");
            us += 86_399_999_999 * 7 + 13; // days, hours and digits of every kind
        }
        assert_eq!(from_civil(&civil(max).unwrap()), Some(max));
        let c = civil(0).unwrap();
        for bad in [
            Civil {
                month: 2,
                day: 30,
                ..c
            },
            Civil { month: 13, ..c },
            Civil { day: 0, ..c },
            Civil { hour: 24, ..c },
            Civil { second: 60, ..c },
            Civil {
                micro: 1_000_000,
                ..c
            },
            Civil { year: 0, ..c },
            Civil { year: 10_000, ..c },
        ] {
            assert_eq!(from_civil(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn now_micros_is_after_2020() {
        assert!(now_micros() > 1_577_836_800_000_000);
    }
}
