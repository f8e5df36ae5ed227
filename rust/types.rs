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

/// One memory row as the API sees it (without its vector).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Unique across all namespaces.
    pub id: String,
    /// Owning namespace.
    pub namespace: String,
    /// The memory text.
    pub content: String,
    /// Tier.
    pub tier: Tier,
    /// None = legacy/unknown.
    pub level: Option<Level>,
    /// Short summary.
    pub summary: String,
    /// JSON object text.
    pub metadata: String,
    /// Tags, order preserved.
    pub tags: Vec<String>,
    /// Importance weight.
    pub importance: f64,
    /// Creation instant (kept on update).
    pub created_at: Micros,
    /// Last update instant.
    pub updated_at: Micros,
    /// Last access instant.
    pub last_accessed_at: Micros,
    /// Access counter.
    pub access_count: i64,
    /// Expiry instant; None = never.
    pub expires_at: Option<Micros>,
    /// Set = tombstoned by that id.
    pub superseded_by: Option<String>,
    /// Validity start.
    pub valid_from: Option<Micros>,
    /// Validity end.
    pub valid_to: Option<Micros>,
    /// Confidence; None = not tracked.
    pub confidence: Option<f64>,
    /// Related memory ids.
    pub linked_memory_ids: Vec<String>,
    /// Hex SHA-256 of the normalised content (computed by the caller).
    pub fingerprint: String,
}

/// A memory to write: the row with optional timestamps (None = "now") and an optional vector.
#[derive(Clone, Debug)]
pub struct NewMemory {
    /// The row; its `created_at`/`updated_at`/`last_accessed_at` are replaced per the flags.
    pub memory: Memory,
    /// `created_at` was given.
    pub has_created_at: bool,
    /// `updated_at` was given.
    pub has_updated_at: bool,
    /// `last_accessed_at` was given.
    pub has_last_accessed_at: bool,
    /// The vector; None = keyword-only row.
    pub embedding: Option<Vec<f32>>,
}

/// A partial update: each `Some` replaces that field.
#[derive(Clone, Debug, Default)]
#[allow(
    clippy::option_option,
    reason = "Some(None) means: set the optional field to None"
)]
pub struct MemoryPatch {
    /// New content (and its fingerprint).
    pub content: Option<(String, String)>,
    /// New tier.
    pub tier: Option<Tier>,
    /// New level.
    pub level: Option<Option<Level>>,
    /// New summary.
    pub summary: Option<String>,
    /// New metadata JSON.
    pub metadata: Option<String>,
    /// New tags.
    pub tags: Option<Vec<String>>,
    /// New importance.
    pub importance: Option<f64>,
    /// New updated_at (default: now).
    pub updated_at: Option<Micros>,
    /// New last_accessed_at.
    pub last_accessed_at: Option<Micros>,
    /// New access count.
    pub access_count: Option<i64>,
    /// New expiry.
    pub expires_at: Option<Option<Micros>>,
    /// New superseded_by.
    pub superseded_by: Option<Option<String>>,
    /// New validity start.
    pub valid_from: Option<Option<Micros>>,
    /// New validity end.
    pub valid_to: Option<Option<Micros>>,
    /// New confidence.
    pub confidence: Option<Option<f64>>,
    /// New linked ids.
    pub linked_memory_ids: Option<Vec<String>>,
    /// New vector (Some(None) removes it).
    pub embedding: Option<Option<Vec<f32>>>,
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
