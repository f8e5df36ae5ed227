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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use rayon::prelude::*;

    use super::*;

    #[test]
    fn the_pool_is_built_once_and_runs_work_on_its_named_threads() {
        let p = pool().unwrap();
        assert!(std::ptr::eq(p, pool().unwrap()), "one pool per process");
        assert!(p.current_num_threads() >= 1);
        let sum: u64 = p.install(|| (1..=1000u64).into_par_iter().sum());
        assert_eq!(sum, 500_500);
        // its own threads, not rayon's global pool (whose threads are unnamed)
        let name = p.install(|| std::thread::current().name().map(str::to_owned));
        assert!(name.unwrap().starts_with("memini-worker-"));
    }
}
