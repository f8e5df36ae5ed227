//! Core calls started from asyncio (`memini.aio`): the call runs on one of the binding's own
//! threads, and a Python callback receives its result, either on that thread with the GIL
//! taken once, or on the event loop's thread through a [`Completions`] queue.
//!
//! A Python worker thread running a `Store` method takes the GIL twice per call (to start,
//! and to build the result), and its first take usually collides with the event-loop thread
//! that just handed it the call and still holds the GIL: the worker wakes, waits, and wakes
//! again. Here the arguments are extracted on the calling thread and the thread that runs
//! the call needs no GIL until the result is built. With a [`Completions`] queue it needs
//! none at all: it queues the finished call and, when the queue was empty, writes one byte
//! to a socket the event loop watches; the loop builds the results and calls back itself,
//! every call that finished meanwhile in one wake-up. Without it the callback (which
//! completes the awaited future with `loop.call_soon_threadsafe`) is the last thing the
//! thread does holding the GIL, which the loop thread holds whenever it runs Python: the
//! two threads hand it back and forth, and wake each other up, once more per call.
//!
//! The threads start on demand, at most [`max_threads`], take jobs in order from one queue,
//! and each keeps one Python thread state for its life (attached only while it builds a
//! result and calls back). A job wakes exactly one idle thread, the one that went idle
//! last: its caches and its allocator's pages are the warmest, and a caller awaiting one
//! call at a time keeps meeting the same thread instead of every thread of the pool in turn.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::Thread;

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

/// The binding's threads and the jobs waiting for them.
struct Threads {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Threads parked for want of a job and not woken for one yet, the last parked last.
    idle: Vec<Thread>,
    /// Threads started (they never stop: the pool lives as long as its process).
    started: usize,
}

/// Per process: a child forked after the parent started threads starts its own.
static THREADS: PerProcess<Threads> = PerProcess::new();

impl Threads {
    fn get() -> &'static Self {
        THREADS.get_or_init(|| Self {
            state: Mutex::new(State::default()),
        })
    }

    /// Queues `job` and wakes the last idle thread for it, or starts one (below the limit;
    /// at the limit a thread takes it when done with its own).
    fn submit(&'static self, job: Job) -> PyResult<()> {
        let mut state = self.state.lock();
        state.jobs.push_back(job);
        if let Some(thread) = state.idle.pop() {
            drop(state);
            thread.unpark();
        } else if state.started < max_threads() {
            let n = state.started;
            let spawned = std::thread::Builder::new()
                .name(format!("memini-aio-core-{n}"))
                .spawn(move || self.work());
            match spawned {
                Ok(_) => state.started += 1,
                // a running thread takes the job once it is done with its own
                Err(_) if n > 0 => {}
                Err(e) => {
                    state.jobs.pop_back();
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                        "cannot start a thread for the call: {e}"
                    )));
                }
            }
        }
        Ok(())
    }

    fn work(&self) {
        // one thread state for the thread's life: attached only around a callback
        Python::attach(|py| {
            py.detach(|| loop {
                let job = self.next();
                job();
            });
        });
    }

    /// The next job, parking this thread until one is queued.
    fn next(&self) -> Job {
        let me = std::thread::current();
        loop {
            {
                let mut state = self.state.lock();
                // still listed after a spurious wake-up: a job must not wake a busy thread
                state.idle.retain(|t| t.id() != me.id());
                if let Some(job) = state.jobs.pop_front() {
                    return job;
                }
                state.idle.push(me.clone());
            }
            std::thread::park();
        }
    }
}

/// Where a spawned call's callback runs once the call is over.
pub enum Reply {
    /// On the binding thread that ran the call, with the GIL taken there.
    Here,
    /// On the thread that next drains these completions (an event loop's, see
    /// [`Completions`]): the binding thread never takes the GIL.
    Queue(Arc<Queue>),
}

impl Reply {
    /// `Queue` when `completions` is given, else `Here`.
    pub fn from(completions: Option<&Bound<'_, Completions>>) -> Self {
        completions.map_or(Self::Here, |c| Self::Queue(Arc::clone(&c.get().0)))
    }
}

/// Runs `work(owner)` (core work, no GIL) on a binding thread, then with the GIL calls
/// `done(error, result)` where `reply` says: `result` built by `convert`, or `error` the
/// `memini.errors` exception of a core error or panic (or of `convert`). An exception raised
/// by `done` itself is reported as unraisable.
pub fn spawn<S, T>(
    owner: Py<S>,
    done: Py<PyAny>,
    reply: Reply,
    work: impl FnOnce(&S) -> crate::Result<T> + Send + 'static,
    convert: impl for<'py> FnOnce(Python<'py>, T) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
) -> PyResult<()>
where
    S: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
    T: Send + 'static,
{
    Threads::get().submit(Box::new(move || {
        let out = catch_unwind(AssertUnwindSafe(|| work(owner.get())));
        let finish = move |py: Python<'_>| {
            let (error, result) = match outcome(py, out).and_then(|v| convert(py, v)) {
                Ok(v) => (py.None(), v.unbind()),
                Err(e) => (e.into_value(py).into_any(), py.None()),
            };
            if let Err(e) = done.call1(py, (error, result)) {
                e.write_unraisable(py, None);
            }
            drop((done, owner));
        };
        match reply {
            // None: the interpreter is shutting down, and nobody awaits the result any more
            Reply::Here => drop(Python::try_attach(finish)),
            Reply::Queue(queue) => queue.push(Box::new(finish)),
        }
    }))
}

/// A finished call's reply, run by whoever drains its [`Queue`], with the GIL.
type Finished = Box<dyn for<'py> FnOnce(Python<'py>) + Send>;

/// The calls finished for one [`Completions`], and the socket pair that signals them.
pub struct Queue {
    finished: Mutex<Vec<Finished>>,
    /// Written (one byte) when `finished` stops being empty.
    signal: Socket,
    /// Readable while a signal is pending: the end an event loop watches.
    watched: Socket,
}

impl Queue {
    fn push(&self, reply: Finished) {
        let first = {
            let mut finished = self.finished.lock();
            finished.push(reply);
            finished.len() == 1
        };
        // Only the first reply of a batch signals: the drain that takes it takes every reply
        // pushed before it. A full socket already holds a pending signal: nothing lost.
        if first {
            let _ = (&self.signal).write(&[1]);
        }
    }
}

/// Replies of calls started with `completions=` (`Engine.vector_search_then`, ...), waiting
/// for the thread that drains them: an asyncio event loop watching `fileno()` with
/// ``loop.add_reader(c.fileno(), c.drain)`` runs every `done` callback on its own thread,
/// and the core's threads never wait for the GIL, which that loop holds while it runs.
#[pyclass(frozen, name = "Completions", module = "memini._core")]
pub struct Completions(Arc<Queue>);

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        let (signal, watched) = socket_pair()?;
        signal.set_nonblocking(true)?;
        watched.set_nonblocking(true)?;
        Ok(Self(Arc::new(Queue {
            finished: Mutex::new(Vec::new()),
            signal,
            watched,
        })))
    }

    /// The file descriptor that turns readable when replies are waiting.
    fn fileno(&self) -> u64 {
        raw(&self.0.watched)
    }

    /// Runs every waiting reply (each `done(error, result)`) on this thread, in the order
    /// the calls finished.
    fn drain(&self, py: Python<'_>) {
        // the signal first, then the replies: a reply pushed after the take signals again
        let mut buf = [0u8; 64];
        while matches!((&self.0.watched).read(&mut buf), Ok(n) if n == buf.len()) {}
        let finished = std::mem::take(&mut *self.0.finished.lock());
        for reply in finished {
            reply(py);
        }
    }
}

#[cfg(unix)]
type Socket = std::os::unix::net::UnixStream;
#[cfg(not(unix))]
type Socket = std::net::TcpStream;

#[cfg(unix)]
fn socket_pair() -> std::io::Result<(Socket, Socket)> {
    Socket::pair()
}

/// Elsewhere (Windows, whose selector loop watches sockets only): two ends of a loopback
/// TCP connection.
#[cfg(not(unix))]
fn socket_pair() -> std::io::Result<(Socket, Socket)> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let signal = Socket::connect(listener.local_addr()?)?;
    let (watched, _) = listener.accept()?;
    signal.set_nodelay(true)?;
    Ok((signal, watched))
}

#[cfg(unix)]
fn raw(s: &Socket) -> u64 {
    u64::try_from(std::os::fd::AsRawFd::as_raw_fd(s)).unwrap_or(u64::MAX)
}

#[cfg(not(unix))]
fn raw(s: &Socket) -> u64 {
    std::os::windows::io::AsRawSocket::as_raw_socket(s)
}
