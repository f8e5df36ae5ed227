//! memini core: an embeddable memory store for AI agents.
//!
//! - [`rows`]: the durable row store (redb), the single source of truth;
//! - [`columns`] and [`filter`]: in-memory filter columns and compiled filters;
//! - [`vector`]: usearch HNSW per namespace plus exact scans;
//! - [`keyword`]: tantivy BM25;
//! - [`rank`]: the ranking helpers (salience, confidence decay, quality);
//! - [`engine`]: locking, group commit, recovery and search planning;
//! - [`embed`]: the local text embedder (a BERT sentence model, hand-written SIMD kernels);
//! - [`limits`]: the largest sizes and names a caller may give, and their checks.
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
pub mod limits;
pub mod pool;
pub mod rank;
pub mod rows;
#[cfg(feature = "serve")]
pub mod serve;
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
/// mimalloc keeps its transparent-huge-page advice on its arenas. Without it (`no_thp`) a
/// 99k-row store opened faster on these VMs (0.64-0.70 s vs 0.70-1.21 s: a huge page's first
/// touch zeroes 2 MB), but at 1M rows the open was no faster (14.6-18.9 s vs 16.0-18.7 s)
/// and searches were slower (4.3-5.4 ms vs 3.2-4.8 ms, 2,000 one-thread searches after the
/// open; alternated fresh processes, quiet machine, `examples/reopen`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
