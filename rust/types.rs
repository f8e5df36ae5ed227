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

/// Which rows a list, count or search considers (API.md `Filter`, with `now` resolved).
#[derive(Clone, Debug, Default)]
pub struct FilterSpec {
    /// OR; empty = all.
    pub tiers: Vec<Tier>,
    /// OR; empty = all; None matches legacy rows.
    pub levels: Vec<Option<Level>>,
    /// AND, exact.
    pub tags: Vec<String>,
    /// AND of top-level string metadata pairs.
    pub metadata: Vec<(String, String)>,
    /// Drop rows carrying any of these pairs.
    pub exclude_metadata: Vec<(String, String)>,
    /// Ids dropped before ranking.
    pub exclude_ids: Vec<String>,
    /// Also rows whose expiry passed.
    pub include_expired: bool,
    /// Also superseded rows (and rows whose validity ended).
    pub include_superseded: bool,
    /// Reference instant (resolved by the caller).
    pub now: Micros,
    /// Time travel instant.
    pub as_of: Option<Micros>,
    /// `metadata["memory_type"]` in this list (OR).
    pub memory_types: Vec<String>,
    /// created_at >= this.
    pub created_after: Option<Micros>,
    /// last_accessed_at >= this.
    pub accessed_after: Option<Micros>,
    /// Sort key for `list`.
    pub sort_key: Option<SortKey>,
    /// Ascending order for `list`.
    pub sort_asc: bool,
}

/// A search hit.
#[derive(Clone, Debug)]
pub struct Scored {
    /// The row.
    pub memory: Memory,
    /// Higher is better.
    pub score: f64,
}
