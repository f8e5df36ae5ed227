//! memini core: an embeddable memory store for AI agents.
//!
//! - [`rows`]: the durable row store (redb), the single source of truth;
//! - [`columns`] and [`filter`]: in-memory filter columns and compiled filters;
//! - [`vector`]: usearch HNSW per namespace plus exact scans;
//! - [`keyword`]: tantivy BM25;
//! - [`rank`]: the ranking helpers (salience, confidence decay, quality);
//! - [`engine`]: locking, group commit, recovery and search planning;
//! - [`embed`]: the local text embedder (a BERT sentence model on candle).
//!
//! The Python binding lives in `python/` behind the `python` feature; nothing else here
//! knows about Python.

pub mod columns;
pub mod embed;
pub mod engine;
pub mod error;
pub mod filter;
pub mod fusion;
pub mod keyword;
pub mod pool;
pub mod rank;
pub mod rows;
pub mod types;
pub mod vector;

#[cfg(feature = "python")]
mod python;

pub use engine::{Engine, FaultPoint, Fusion, Options, RecallQuery, Recalled, Source, Stats};
pub use error::{Error, Result};
pub use types::{
    FilterSpec, Level, Memory, MemoryPatch, Metric, Micros, NewMemory, Scored, SortKey, Tier,
};
pub use vector::{Route, Tuning};

/// The core's allocator. Memory one thread allocates and another frees is the rule here (a
/// writer fills the keyword delta, the folder thread frees it; the worker pool builds what a
/// caller drops): with glibc's malloc the freed chunks wait in the allocating thread's arena,
/// and that thread's next allocation sorted them — a single write right after a keyword fold
/// of ~2,000 documents spent 6-9 ms of CPU in `_int_malloc` (perf, 99k-row store, quiet
/// machine, median write 0.45 ms). mimalloc frees across threads without that pass.
///
/// Built without its transparent-huge-page advice (`no_thp`): mimalloc asks the kernel for
/// huge pages on its arenas, and a huge page's first touch zeroes 2 MB at once. On the VMs
/// this is measured on (freed memory goes back to the host) the zeroing was ~60% of an open's
/// CPU (perf): a 99k-row store opened in 0.70-1.21 s with the advice (three of four runs over
/// 1.1 s), 0.64-0.70 s without, searching at the same speed (alternated fresh processes,
/// quiet machine). The process's own huge-page policy is left as it is.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
