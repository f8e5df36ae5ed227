//! The core's worker pool: bulk graph inserts and multi-query searches run here, never on
//! rayon's process-global pool (which an application may size or occupy for its own work).
//!
//! Its size is rayon's default: one thread per core, or `RAYON_NUM_THREADS`. Whatever the
//! size, calls into usearch are bounded separately by the vector index's thread slots, so a
//! 128-core machine runs the same code paths as a 2-core one.
//!
//! Threads do not survive `fork()`: a child forked after the parent used a pool would hand
//! its work to threads that do not exist and wait forever (as `multiprocessing` with the
//! fork start method, or a pre-forking server, does after the parent touched a store). So a
//! process-wide pool is a [`PerProcess`] value: a forked child builds its own on first use.

use std::sync::atomic::{AtomicPtr, Ordering};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, Result};

/// A process-wide value built on first use, and built again in a forked child (see the
/// module docs). The parent's value is never dropped in the child (its threads are gone).
pub(crate) struct PerProcess<T: 'static> {
    /// The owning process id and the value, leaked: never freed once published.
    current: AtomicPtr<(u32, T)>,
}

impl<T: Sync> PerProcess<T> {
    /// An empty slot.
    pub(crate) const fn new() -> Self {
        Self {
            current: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// This process's value, built by `init` if this process has none yet.
    pub(crate) fn get_or_init(&self, init: impl FnOnce() -> T) -> &'static T {
        let pid = std::process::id();
        let seen = self.current.load(Ordering::Acquire);
        if let Some((owner, value)) = published(seen) {
            if *owner == pid {
                return value;
            }
        }
        let fresh = Box::into_raw(Box::new((pid, init())));
        let winner =
            match self
                .current
                .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => fresh,
                Err(won) => {
                    // another thread of this process published first: use its value
                    drop(unbox(fresh));
                    won
                }
            };
        match published(winner) {
            Some((_, value)) => value,
            None => unreachable!("PerProcess publishes only non-null pointers"),
        }
    }
}

/// The pair behind a pointer [`PerProcess`] published (null: none yet).
#[allow(
    unsafe_code,
    reason = "published pointers come from Box::into_raw and are never freed"
)]
fn published<T>(p: *mut (u32, T)) -> Option<&'static (u32, T)> {
    // SAFETY: a non-null pointer here was made by `Box::into_raw` and, once published, is
    // never freed or written, so it stays valid for the rest of the process.
    unsafe { p.as_ref() }
}

/// Takes back a value that lost the race to be published (no one else has seen it).
#[allow(unsafe_code, reason = "the pointer was never published")]
fn unbox<T>(p: *mut (u32, T)) -> Box<(u32, T)> {
    // SAFETY: `p` came from `Box::into_raw` and was never shared.
    unsafe { Box::from_raw(p) }
}

static POOL: PerProcess<std::result::Result<ThreadPool, String>> = PerProcess::new();

/// The shared worker pool, built on first use in each process.
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
    fn a_per_process_value_is_built_once_per_process() {
        static VALUE: PerProcess<String> = PerProcess::new();
        let mut built = 0;
        let a = VALUE.get_or_init(|| {
            built += 1;
            "first".to_owned()
        });
        let b = VALUE.get_or_init(|| "second".to_owned());
        assert_eq!((a.as_str(), b.as_str(), built), ("first", "first", 1));
        assert!(std::ptr::eq(a, b));
    }

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
