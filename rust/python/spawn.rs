//! Core calls started from asyncio (`memini.aio`): the call runs on one of the binding's own
//! threads, and a Python callback receives its result there, with the GIL taken once.
//!
//! A Python worker thread running a `Store` method takes the GIL twice per call (to start,
//! and to build the result), and its first take usually collides with the event-loop thread
//! that just handed it the call and still holds the GIL: the worker wakes, waits, and wakes
//! again. Here the arguments are extracted on the calling thread, the thread that runs the
//! call needs no GIL until the result is built, and the callback (which completes the
//! awaited future with `loop.call_soon_threadsafe`) is the last thing it does holding it.
//!
//! The threads start on demand, at most [`MAX_THREADS`], and each keeps one Python thread
//! state for its life (attached only while it builds a result and calls back).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;

use super::errors::outcome;
use crate::pool::PerProcess;

type Job = Box<dyn FnOnce() + Send>;

/// Threads running spawned calls: `2 * cores + 4`, at most 256, as `memini.aio`'s pools
/// (searches keep every core busy; a call waiting on a lock or a disk leaves room for more).
fn max_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    (2 * cores + 4).min(256)
}

struct Threads {
    jobs: Sender<Job>,
    queue: Arc<Mutex<Receiver<Job>>>,
    /// Threads waiting for a job (or about to).
    idle: Arc<AtomicUsize>,
    started: Mutex<usize>,
}

/// Per process: a child forked after the parent started threads starts its own.
static THREADS: PerProcess<Threads> = PerProcess::new();

impl Threads {
    fn get() -> &'static Self {
        THREADS.get_or_init(|| {
            let (jobs, queue) = channel();
            Self {
                jobs,
                queue: Arc::new(Mutex::new(queue)),
                idle: Arc::new(AtomicUsize::new(0)),
                started: Mutex::new(0),
            }
        })
    }

    fn submit(&self, job: Job) -> PyResult<()> {
        self.jobs
            .send(job)
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("memini's threads are gone"))?;
        if self.idle.load(Ordering::Acquire) == 0 {
            self.start()?;
        }
        Ok(())
    }

    fn start(&self) -> PyResult<()> {
        let mut started = self.started.lock();
        if *started >= max_threads() {
            return Ok(());
        }
        let (queue, idle) = (Arc::clone(&self.queue), Arc::clone(&self.idle));
        std::thread::Builder::new()
            .name(format!("memini-aio-core-{started}"))
            .spawn(move || {
                // one thread state for the thread's life: attached only around a callback
                Python::attach(|py| {
                    py.detach(|| loop {
                        idle.fetch_add(1, Ordering::AcqRel);
                        let job = queue.lock().recv();
                        idle.fetch_sub(1, Ordering::AcqRel);
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    });
                });
            })
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("thread: {e}")))?;
        *started += 1;
        Ok(())
    }
}

/// Runs `work(owner)` (core work, no GIL) on a binding thread, then with the GIL calls
/// `done(error, result)`: `result` built by `convert`, or `error` the `memini.errors`
/// exception of a core error or panic (or of `convert`). An exception raised by `done`
/// itself is reported as unraisable.
pub fn spawn<S, T>(
    owner: Py<S>,
    done: Py<PyAny>,
    work: impl FnOnce(&S) -> crate::Result<T> + Send + 'static,
    convert: impl for<'py> FnOnce(Python<'py>, T) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
) -> PyResult<()>
where
    S: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
    T: Send + 'static,
{
    Threads::get().submit(Box::new(move || {
        let out = catch_unwind(AssertUnwindSafe(|| work(owner.get())));
        // None: the interpreter is shutting down, and nobody awaits the result any more
        let _ = Python::try_attach(|py| {
            let (error, result) = match outcome(py, out).and_then(|v| convert(py, v)) {
                Ok(v) => (py.None(), v.unbind()),
                Err(e) => (e.into_value(py).into_any(), py.None()),
            };
            if let Err(e) = done.call1(py, (error, result)) {
                e.write_unraisable(py, None);
            }
            drop((done, owner));
        });
    }))
}
