//! The core's worker pool: bulk graph inserts and multi-query searches run here, never on
//! rayon's process-global pool (which an application may size or occupy for its own work).
//!
//! Its size is rayon's default: one thread per core, or `RAYON_NUM_THREADS`. Whatever the
//! size, calls into usearch are bounded separately by the vector index's thread slots, so a
//! 128-core machine runs the same code paths as a 2-core one.

use std::sync::OnceLock;

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, Result};

static POOL: OnceLock<std::result::Result<ThreadPool, String>> = OnceLock::new();

/// The shared worker pool, built on first use.
pub fn pool() -> Result<&'static ThreadPool> {
    POOL.get_or_init(|| {
        ThreadPoolBuilder::new()
            .thread_name(|i| format!("memini-worker-{i}"))
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::storage("worker pool", e))
}
