//! Core calls started from asyncio (`memini.aio`): the call runs on one of the binding's own
//! threads without the GIL, and its result is built on the event-loop thread.
//!
//! A finished call goes into the `Completions` queue of the awaiting event loop, which
//! watches the queue's socket (`loop.add_reader`) and drains every call finished since it
//! last looked in one callback: the results are built and the awaited futures completed
//! there, on the thread that holds the GIL anyway. The thread that ran the call never takes
//! the GIL, so it never waits for the loop thread (or for another core thread building its
//! result), and the loop thread wakes once per batch of finished calls, not once per call
//! plus once per GIL hand-over.
//!
//! The threads start on demand, at most [`max_threads`], and never run Python code; a call
//! goes to the thread that finished last, and wakes it alone.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::intern;
use pyo3::prelude::*;

use super::errors::outcome;

type Job = Box<dyn FnOnce() + Send>;

/// Threads running spawned calls: `2 * cores + 4`, at most 256, as `memini.aio`'s pools
/// (searches keep every core busy; a call waiting on a lock or a disk leaves room for more).
fn max_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    (2 * cores + 4).min(256)
}

/// A thread waiting for a job: `submit` puts one in `slot` and unparks it.
struct Idle {
    slot: Mutex<Option<Job>>,
    thread: std::thread::Thread,
}

#[derive(Default)]
struct Threads {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Jobs submitted while every thread was busy and no more could start, oldest first.
    queued: VecDeque<Job>,
    /// The waiting threads, the one that finished last on top: a job goes to it (its caches
    /// are the warmest) and wakes it alone, so threads that stay idle sleep undisturbed.
    idle: Vec<Arc<Idle>>,
    started: usize,
}

static THREADS: OnceLock<Threads> = OnceLock::new();

impl Threads {
    fn get() -> &'static Self {
        THREADS.get_or_init(Self::default)
    }

    fn submit(&'static self, job: Job) -> PyResult<()> {
        let mut state = self.state.lock();
        if let Some(idle) = state.idle.pop() {
            drop(state);
            *idle.slot.lock() = Some(job);
            idle.thread.unpark();
        } else if state.started < max_threads() {
            let n = state.started;
            state.started += 1;
            drop(state);
            if let Err(e) = std::thread::Builder::new()
                .name(format!("memini-aio-core-{n}"))
                .spawn(move || self.work(job))
            {
                self.state.lock().started -= 1;
                return Err(PyRuntimeError::new_err(format!("starting a thread: {e}")));
            }
        } else {
            state.queued.push_back(job);
        }
        Ok(())
    }

    /// A thread's life: `job`, then the queued jobs, then each job it is handed.
    fn work(&self, mut job: Job) {
        let me = Arc::new(Idle {
            slot: Mutex::new(None),
            thread: std::thread::current(),
        });
        loop {
            job();
            let mut state = self.state.lock();
            job = if let Some(next) = state.queued.pop_front() {
                next
            } else {
                state.idle.push(Arc::clone(&me));
                drop(state);
                // an unpark that comes before the park makes it return at once: no lost
                // wake-up, and `submit` never waits for this thread to fall asleep
                loop {
                    if let Some(next) = me.slot.lock().take() {
                        break next;
                    }
                    std::thread::park();
                }
            };
        }
    }
}

/// The socket pair that wakes an event loop: a Unix socket pair, or on other systems a
/// loopback TCP connection (what a `selectors` event loop can watch there).
#[cfg(unix)]
type Wake = std::os::unix::net::UnixStream;
#[cfg(not(unix))]
type Wake = std::net::TcpStream;

/// (the end the event loop watches, the end finished calls write to)
fn wake_pair() -> std::io::Result<(Wake, Wake)> {
    #[cfg(unix)]
    let (rx, tx) = Wake::pair()?;
    #[cfg(not(unix))]
    let (rx, tx) = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let tx = Wake::connect(listener.local_addr()?)?;
        tx.set_nodelay(true)?;
        (listener.accept()?.0, tx)
    };
    rx.set_nonblocking(true)?;
    tx.set_nonblocking(true)?;
    Ok((rx, tx))
}

/// Builds a finished call's result (or its exception) with the GIL.
type Build = Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send>;

/// The most calls one `Completions::drain` completes (a search's result is built in ~2 us
/// per hit: 16 searches of k=10 hold the event loop for ~0.3 ms).
const DRAIN_BATCH: usize = 16;

/// A call that has finished on a core thread, waiting for its event loop.
struct Finished {
    future: Py<PyAny>,
    /// The object the call ran on, kept alive by the call; released with the GIL (drain).
    owner: Py<PyAny>,
    build: Build,
    /// `after(error, result)`: what it returns completes the future, what it raises fails it.
    after: Option<Py<PyAny>>,
}

#[derive(Default)]
struct Queue {
    finished: Vec<Finished>,
    /// A byte is (or is about to be) in the socket for what `finished` holds: the loop will
    /// drain, so a call finishing meanwhile need not write another.
    poked: bool,
}

struct Inner {
    queue: Mutex<Queue>,
    /// The end the event loop watches.
    rx: Wake,
    tx: Wake,
}

impl Inner {
    fn push(&self, done: Finished) {
        let poke = {
            let mut q = self.queue.lock();
            q.finished.push(done);
            !std::mem::replace(&mut q.poked, true)
        };
        if poke {
            self.poke();
        }
    }

    /// Makes the socket readable: the loop will drain.
    fn poke(&self) {
        // WouldBlock: the socket's buffer is full, so it is readable already
        let _ = (&self.tx).write(&[1]);
    }
}

/// The calls finished for one event loop, which drains them (see the module's docs).
///
/// `memini.aio` makes one per event loop: ``loop.add_reader(c.fileno(), c.drain)``.
#[pyclass(frozen, module = "memini._core")]
pub struct Completions {
    inner: Arc<Inner>,
}

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        let io = |e: std::io::Error| PyOSError::new_err(format!("memini completions: {e}"));
        let (rx, tx) = wake_pair().map_err(io)?;
        let queue = Mutex::new(Queue::default());
        Ok(Self {
            inner: Arc::new(Inner { queue, rx, tx }),
        })
    }

    /// The file descriptor (a socket) that is readable when calls have finished.
    fn fileno(&self) -> i64 {
        #[cfg(unix)]
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.inner.rx).into();
        #[cfg(windows)]
        let fd = std::os::windows::io::AsRawSocket::as_raw_socket(&self.inner.rx) as i64;
        fd
    }

    /// Completes the future of each call finished since the last drain, in the order they
    /// finished: its result, or its `memini.errors` exception, through the call's `after`
    /// when it has one (a future already done, i.e. cancelled by its awaiter, is left
    /// alone, its result built only for `after`). At most
    /// [`DRAIN_BATCH`] calls per drain: with more, the socket is poked again, and the rest wait
    /// for the loop's next turn, after the callbacks that are ready, so one drain never holds
    /// the loop for long. Call it on the futures' event-loop thread.
    fn drain(&self, py: Python<'_>) {
        let mut buf = [0u8; 64];
        // empty the socket (until WouldBlock): its bytes only say "look", the queue says what
        loop {
            match (&self.inner.rx).read(&mut buf) {
                Ok(n) if n > 0 => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                _ => break,
            }
        }
        let (finished, more) = {
            let mut q = self.inner.queue.lock();
            if q.finished.len() > DRAIN_BATCH {
                let rest = q.finished.split_off(DRAIN_BATCH);
                (std::mem::replace(&mut q.finished, rest), true)
            } else {
                q.poked = false;
                (std::mem::take(&mut q.finished), false)
            }
        };
        if more {
            self.inner.poke();
        }
        for f in finished {
            let future = f.future.clone_ref(py);
            if let Err(e) = f.complete(py) {
                e.write_unraisable(py, Some(future.bind(py)));
            }
        }
    }
}

impl Finished {
    /// Completes the future with the result (or exception), passed through `after` when
    /// given. A future already done (cancelled by its awaiter) is left alone, and its result
    /// is built only for `after`, which runs whatever the outcome.
    fn complete(self, py: Python<'_>) -> PyResult<()> {
        let Self {
            future,
            owner,
            build,
            after,
        } = self;
        let future = future.bind(py);
        let cancelled = future.call_method0(intern!(py, "done"))?.is_truthy()?;
        if cancelled && after.is_none() {
            return Ok(());
        }
        let mut out = build(py);
        drop(owner); // the call's object, no longer needed: released with the GIL
        if let Some(after) = after {
            let none = py.None().into_bound(py);
            out = match out {
                Ok(v) => after.bind(py).call1((none, v)),
                Err(e) => after.bind(py).call1((e.into_value(py), none)),
            };
        }
        if cancelled {
            return Ok(());
        }
        match out {
            Ok(v) => future.call_method1(intern!(py, "set_result"), (v,)),
            Err(e) => future.call_method1(intern!(py, "set_exception"), (e.into_value(py),)),
        }
        .map(drop)
    }
}

/// Where a spawned call's outcome goes: `future`, completed by the loop draining `to`,
/// through `after(error, result)` when given (see `Completions::drain`).
pub struct Awaited<'a> {
    pub future: Py<PyAny>,
    pub to: &'a Completions,
    pub after: Option<Py<PyAny>>,
}

/// Runs `work(owner)` (core work, no GIL) on a binding thread, then queues the call for its
/// event loop, which completes the awaited future: with the result `convert` builds, or with
/// the `memini.errors` exception of a core error or panic (or of `convert`).
pub fn spawn<S, T>(
    owner: Py<S>,
    awaited: Awaited<'_>,
    work: impl FnOnce(&S) -> crate::Result<T> + Send + 'static,
    convert: impl for<'py> FnOnce(Python<'py>, T) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
) -> PyResult<()>
where
    S: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
    T: Send + 'static,
{
    let Awaited { future, to, after } = awaited;
    let to = Arc::clone(&to.inner);
    Threads::get().submit(Box::new(move || {
        let out = catch_unwind(AssertUnwindSafe(|| work(owner.get())));
        to.push(Finished {
            future,
            owner: owner.into_any(),
            build: Box::new(move |py| convert(py, outcome(py, out)?)),
            after,
        });
    }))
}
