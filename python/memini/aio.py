"""asyncio front ends: `AsyncStore`, every `Store` method as a coroutine; `connect` ->
`AsyncRemoteStore`, the same for a store served by ``memini serve`` (see `memini.client`).

Each call runs the `Store` method on a worker thread of a bounded pool owned by the
`AsyncStore`, so the event loop never waits for store work. The core releases the GIL for
searches, reads and commits, so concurrent awaits really run in parallel on as many cores as
the machine has (writes are group-committed: concurrent writers share fsyncs). The two
searches an agent awaits most, `vector_search` and `keyword_search` of an embedded store,
skip the pool: their checks run on the loop thread (microseconds), the core runs them on its
own threads, and the loop collects the finished ones itself (`_native`, `_completions`).

Cancelling an await does not cancel the store call it started: a write that was already
running completes (durably) even though its awaiter sees `asyncio.CancelledError`.

The wrappers are derived from `Store`'s methods in one place (`_Coroutine`), typed from them
(mypy sees ``AsyncStore.get(ns, id) -> Coroutine[..., Memory]``), and a test checks that
every public `Store` method has one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import queue
import threading
import types
import weakref
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import (
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    cast,
    overload,
)

from memini._core import Completions, Engine
from memini.client import AsyncRemoteStore
from memini.client import aconnect as connect
from memini.errors import InvalidArgumentError
from memini.store import Store

__all__ = ["AsyncRemoteStore", "AsyncStore", "connect", "default_workers"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_MAX_WORKERS = 256


def default_workers() -> int:
    """Worker threads of an `AsyncStore` pool: ``2 * cores + 4``, at most 256.

    Searches are CPU work without the GIL (one thread per core keeps every core busy);
    writes mostly wait for fsync while their group commit runs, so twice the cores keeps
    the cores busy with a write batch in flight; the cap keeps a 512-core box from starting
    a thousand threads. Idle threads cost nothing: a pool starts them on demand.
    """
    return min(_MAX_WORKERS, 2 * (os.cpu_count() or 1) + 4)


class _Workers:
    """A bounded pool of worker threads fed from one queue: the dispatch under `AsyncStore`.

    Lighter than `concurrent.futures.ThreadPoolExecutor` where it counts, on the event-loop
    thread that every concurrent await shares: a submit is a `queue.SimpleQueue` put (no
    `concurrent.futures.Future`, no Python-level lock or semaphore; the submitting thread's
    CPU per ``submit`` measured 10 -> 0.5 us), and a worker finishing a job holds the GIL for
    a few bytecodes after waking the loop, so the loop thread rarely wakes only to wait for
    the GIL. Threads start on demand, up to ``workers``. At interpreter exit the threads
    finish the jobs already queued and stop before Python joins its threads, as the threads
    of `concurrent.futures` pools do (a pool left open never delays exit).
    """

    def __init__(self, workers: int, name: str) -> None:
        self._max = workers
        self._name = name
        self._shut = False
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        """No threads and no jobs: a new pool, or a forked child's copy (whose threads did not
        survive the fork, so a job queued for them would wait forever)."""
        self._jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        # one token per worker that is, or is about to be, waiting for a job
        self._idle: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], object]) -> None:
        """Run ``job()`` on a worker thread (it must handle its own exceptions)."""
        if self._shut:
            raise RuntimeError("cannot submit to a pool that was shut down")
        self._jobs.put(job)
        try:
            self._idle.get_nowait()  # a worker will take it
        except queue.Empty:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if len(self._threads) < self._max and not self._shut:
                name = f"{self._name}_{len(self._threads)}"
                t = threading.Thread(target=self._work, name=name, daemon=_AT_EXIT is None)
                t.start()
                self._threads.append(t)

    def _work(self) -> None:
        take, idle = self._jobs.get, self._idle.put
        while (job := take()) is not None:
            job()
            del job
            idle(None)

    def shutdown(self, wait: bool = True) -> None:
        """Stop the threads once the queued jobs are done (``wait``: join them). Idempotent."""
        with self._lock:
            self._shut = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        if wait:
            for t in threads:
                if t is not threading.current_thread():
                    t.join()


_LIVE: weakref.WeakSet[_Workers] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for pool in list(_LIVE):
        pool._reset()
    # the parent's loops are not the child's (asyncio's loops do not survive a fork): a loop
    # the child runs anyway watches sockets of its own
    _LOOPS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _stop_all() -> None:
    for pool in list(_LIVE):
        pool.shutdown(wait=False)


# CPython's hook that runs just before the interpreter joins non-daemon threads at exit (the
# one `concurrent.futures` uses): every pool's threads then stop once their queue is done.
# Elsewhere the threads are daemons.
_AT_EXIT: Callable[[Callable[[], None]], None] | None = getattr(threading, "_register_atexit", None)
if _AT_EXIT is not None:
    _AT_EXIT(_stop_all)


def _pool(workers: int | None, name: str) -> _Workers:
    n = default_workers() if workers is None else workers
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 4096:
        raise InvalidArgumentError(
            f"workers must be an int between 1 and 4096, got {workers!r} "
            f"(None = {default_workers()} on this machine)"
        )
    return _Workers(n, name)


def _settle(future: asyncio.Future[Any], error: BaseException | None, result: Any) -> None:
    """Complete ``future`` on its loop (unless its awaiter cancelled it meanwhile)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Pool(Protocol):
    def submit(self, job: Callable[[], object], /) -> object: ...


def _dispatch(
    pool: _Pool, fn: Callable[..., _R], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> asyncio.Future[_R]:
    """Start ``fn(*args, **kwargs)`` on ``pool`` with the caller's context variables; the
    returned future (of the running loop) completes with its result or exception.

    The worker completes the future itself with one ``call_soon_threadsafe``, as the last
    thing it does before waiting for its next job: ``loop.run_in_executor`` would chain a
    `concurrent.futures.Future` to an asyncio one (callbacks and a state copy on the loop
    thread per call), and the loop thread is the one all concurrent awaits share.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_R] = loop.create_future()
    run = contextvars.copy_context().run

    def job() -> None:
        error: BaseException | None = None
        result: Any = None
        try:
            result = run(fn, *args, **kwargs)
        except BaseException as e:  # handed to the awaiter, as run_in_executor does
            error = e
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits it
            loop.call_soon_threadsafe(_settle, future, error, result)

    pool.submit(job)
    return future


async def _in_pool(pool: _Pool, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """``await fn(*args, **kwargs)`` run on ``pool`` (a `_Workers` or a `ThreadPoolExecutor`),
    with the caller's context variables (see `_dispatch`)."""
    return await _dispatch(pool, fn, args, kwargs)


def _post(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    error: BaseException | None,
    result: Any,
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits it
        loop.call_soon_threadsafe(_settle, future, error, result)


# a method's checks (making the core call's arguments) and its ``Engine.<name>_then``
_Core = tuple[Callable[..., tuple[Any, ...]], str]


def _native(
    store: Store,
    core: _Core,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    after: Callable[[BaseException | None, Any], Any] | None = None,
) -> asyncio.Future[Any]:
    """A search started straight in the core: its checks run here (a few microseconds of
    the loop thread), then ``Engine.<name>_then`` runs it on a core thread without the GIL,
    and the loop completes the future when it drains its `_completions` (see
    ``rust/python/spawn.rs``).

    Against a worker thread of the pool running the `Store` method, this saves the worker's
    first GIL take (which often collides with the loop thread that just submitted it: the
    worker wakes, waits for the GIL, wakes again) and its Python frames. Measured with a
    search that costs next to nothing (1000 rows, 8 dims, k=1; CPU from /proc schedstat,
    loaded machine): CPU per awaited call 44-53 -> 39-43 us, of which off the loop thread
    30-33 -> 20 us, on it 14-20 -> 19-23 us (the checks moved there).

    ``after(error, result)``, when given, runs on the core thread instead (which then takes
    the GIL once), whatever the call's outcome (not when the checks raise here): what it
    returns completes the future, what it raises fails it (`memini.server` encodes the
    answer there, off the event loop).
    """
    prepare, name = core
    call_args = prepare(store, *args, **kwargs)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    start = getattr(store._engine, name)
    if after is not None:
        start(*call_args, functools.partial(_post_after, loop, future, after))
    elif (completions := _completions(loop)) is not None:
        start(*call_args, functools.partial(_settle, future), completions)
    else:
        start(*call_args, functools.partial(_post, loop, future))
    return future


# each event loop's `Completions` (None: the loop cannot watch a socket, as Windows'
# proactor loop cannot), made on its first search
_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Completions | None] = (
    weakref.WeakKeyDictionary()
)


def _completions(loop: asyncio.AbstractEventLoop) -> Completions | None:
    """The queue the core's threads hand ``loop``'s finished searches to: the loop watches
    its socket and runs their callbacks itself, many in one wake-up when they finish
    together, so a core thread never takes the GIL (which the loop thread holds while it
    runs) and no ``call_soon_threadsafe`` hop is needed.

    Against completing each future with ``call_soon_threadsafe`` from the core thread
    (same runs, alternated, medians; 2 shared cores, loaded): CPU per awaited search that
    costs next to nothing (1000 rows, 8 dims, k=10) 68 -> 57 us one at a time, 70 -> 47 us
    two at once (a direct call from a thread: 31 us); on pypi 99k (k=10) context switches per
    await two at once 3.7 -> 2.7, CPU per await 739 -> 693 us (a plain thread's: 656 us).
    """
    try:
        return _LOOPS[loop]
    except KeyError:
        pass
    made = Completions()
    try:
        loop.add_reader(made.fileno(), made.drain)
    except NotImplementedError:
        _LOOPS[loop] = None
        return None
    _LOOPS[loop] = made
    return made


def _post_after(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    after: Callable[[BaseException | None, Any], Any],
    error: BaseException | None,
    result: Any,
) -> None:
    try:
        result, error = after(error, result), None
    except BaseException as e:  # handed to the awaiter
        result, error = None, e
    _post(loop, future, error, result)


class _Coroutine(Generic[_P, _R]):
    """A `Store` method as a coroutine method of `AsyncStore`, typed from the method."""

    def __init__(
        self,
        method: Callable[Concatenate[Store, _P], _R],
        core: tuple[Callable[Concatenate[Store, _P], tuple[Any, ...]], str] | None = None,
    ) -> None:
        """``core``, for a method that is its checks plus one core call: the function that
        makes the call's arguments, and the name of the `memini._core.Engine` method that
        runs it on the core's own threads (``<name>_then``, see `_native`)."""
        self._method = method
        self.core = core
        self.__doc__ = method.__doc__
        self.__name__ = method.__name__

        # made once per method; an attribute lookup only binds it (no wrapper per call)
        @functools.wraps(method)
        async def call(obj: AsyncStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            if obj._closed:  # the store raises StoreClosedError at once: no thread needed
                return method(obj._store, *args, **kwargs)
            if core is not None and obj._native:
                return cast(_R, await _native(obj._store, core, args, kwargs))
            return await _dispatch(obj._pool, method, (obj._store, *args), kwargs)

        self._call = call

    @overload
    def __get__(self, obj: None, owner: type[AsyncStore]) -> Self: ...
    @overload
    def __get__(
        self, obj: AsyncStore, owner: type[AsyncStore]
    ) -> Callable[_P, Coroutine[Any, Any, _R]]: ...
    def __get__(
        self, obj: AsyncStore | None, owner: type[AsyncStore]
    ) -> Self | Callable[_P, Coroutine[Any, Any, _R]]:
        if obj is None:
            return self
        return types.MethodType(self._call, obj)


def _native_calls(store: Store) -> dict[str, _Core]:
    """The methods ``store`` can start in the core (`_native`) by name: `vector_search` and
    `keyword_search` of an embedded store, none of a PostgreSQL one."""
    if not isinstance(store._engine, Engine):
        return {}
    return {
        name: c.core
        for name, c in vars(AsyncStore).items()
        if isinstance(c, _Coroutine) and c.core is not None
    }


def _async_open(open_store: Callable[_P, Store]) -> Callable[_P, Coroutine[Any, Any, AsyncStore]]:
    """`Store.open` as a coroutine returning an `AsyncStore` (same arguments and types)."""

    async def open(*args: _P.args, **kwargs: _P.kwargs) -> AsyncStore:
        """Open (or create) a store as `Store.open` does, off the event loop.

        Same arguments, defaults and exceptions as `Store.open`. The pool has
        `default_workers` threads; for another size wrap a `Store` yourself:
        ``AsyncStore(Store.open(...), workers=n)``.
        """
        # opening may rebuild an index: on a thread of its own, off the event loop
        return AsyncStore(await asyncio.to_thread(open_store, *args, **kwargs))

    return open


class AsyncStore:
    """An open `Store` driven from asyncio: every `Store` method is a coroutine here.

    Open with ``await AsyncStore.open(path, dims=...)`` (the options of `Store.open`), or
    wrap a `Store` you already hold with ``AsyncStore(store)``; use ``async with`` or
    ``await close()``. Signatures, results and exceptions are `Store`'s. Concurrent awaits run
    in parallel on a bounded thread pool (`default_workers` threads unless ``workers`` is
    given), so the event loop stays free while the store works; `vector_search` and
    `keyword_search` of an embedded store run on the core's own threads instead (as many as
    `default_workers`, shared by every `AsyncStore` of the process).
    """

    def __init__(self, store: Store, *, workers: int | None = None) -> None:
        """Drive ``store`` from asyncio on a pool of ``workers`` threads.

        Closing the `AsyncStore` closes ``store``.

        Raises:
            InvalidArgumentError: ``store`` is not a `Store`, or ``workers`` is not an int in
                [1, 4096].
        """
        if not isinstance(store, Store):
            raise InvalidArgumentError(
                f"AsyncStore wraps a memini.Store, got {type(store).__name__} "
                "(open one with `await AsyncStore.open(path, dims=...)`)"
            )
        self._store = store
        self._pool = _pool(workers, "memini-aio")
        self._closed = False
        # searches of an embedded store start in the core (`_native`); PostgreSQL's run
        # on the pool like every other call
        self._native = isinstance(store._engine, Engine)

    @property
    def store(self) -> Store:
        """The wrapped `Store`, for synchronous code sharing it (it is thread-safe)."""
        return self._store

    async def close(self) -> None:
        """Close the store (waits for in-flight calls) and its thread pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.to_thread(self._store.close)
        finally:
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        self._store.ping()  # a closed store raises StoreClosedError here
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<memini.aio.AsyncStore over {self._store!r}>"

    open = staticmethod(_async_open(Store.open))

    # ------------------------------------------------------------------ the Store methods
    # One line per public Store method (tests/test_aio.py checks none is missing).

    ping = _Coroutine(Store.ping)
    stats = _Coroutine(Store.stats)
    acknowledge_meta_db_loss = _Coroutine(Store.acknowledge_meta_db_loss)
    backup = _Coroutine(Store.backup)
    compact = _Coroutine(Store.compact)
    # memories: writes
    upsert = _Coroutine(Store.upsert)
    upsert_many = _Coroutine(Store.upsert_many)
    update = _Coroutine(Store.update)
    delete = _Coroutine(Store.delete)
    set_superseded = _Coroutine(Store.set_superseded)
    restore = _Coroutine(Store.restore)
    reinforce = _Coroutine(Store.reinforce)
    delete_if_expired_before = _Coroutine(Store.delete_if_expired_before)
    sweep_expired = _Coroutine(Store.sweep_expired)
    delete_namespace = _Coroutine(Store.delete_namespace)
    reassign = _Coroutine(Store.reassign)
    retier = _Coroutine(Store.retier)
    set_confidence = _Coroutine(Store.set_confidence)
    mark_contradicted = _Coroutine(Store.mark_contradicted)
    set_embed_model = _Coroutine(Store.set_embed_model)
    # memories: reads
    get = _Coroutine(Store.get)
    get_embedding = _Coroutine(Store.get_embedding)
    ids_by_prefix = _Coroutine(Store.ids_by_prefix)
    predecessor_ids = _Coroutine(Store.predecessor_ids)
    get_by_fingerprint = _Coroutine(Store.get_by_fingerprint)
    list_expired = _Coroutine(Store.list_expired)
    list = _Coroutine(Store.list)
    count = _Coroutine(Store.count)
    list_namespaces = _Coroutine(Store.list_namespaces)
    namespace_activity = _Coroutine(Store.namespace_activity)
    embed_model = _Coroutine(Store.embed_model)
    refresh_active_counts = _Coroutine(Store.refresh_active_counts)
    # search
    vector_search = _Coroutine(
        Store.vector_search, (Store._vector_search_args, "vector_search_then")
    )
    vector_search_many = _Coroutine(Store.vector_search_many)
    keyword_search = _Coroutine(
        Store.keyword_search, (Store._keyword_search_args, "keyword_search_then")
    )
    recall = _Coroutine(Store.recall)
    # links
    put_link = _Coroutine(Store.put_link)
    delete_link = _Coroutine(Store.delete_link)
    list_links = _Coroutine(Store.list_links)
    list_all_links = _Coroutine(Store.list_all_links)
    rename_link_endpoints = _Coroutine(Store.rename_link_endpoints)
    # API keys
    put_api_key = _Coroutine(Store.put_api_key)
    authenticate = _Coroutine(Store.authenticate)
    delete_api_key = _Coroutine(Store.delete_api_key)
    list_api_keys = _Coroutine(Store.list_api_keys)
    get_api_key_by_hash = _Coroutine(Store.get_api_key_by_hash)
    rename_api_key_namespaces = _Coroutine(Store.rename_api_key_namespaces)
    # events
    append_events = _Coroutine(Store.append_events)
    list_events = _Coroutine(Store.list_events)
    prune_events = _Coroutine(Store.prune_events)


# ---------------------------------------------------------------------- served stores
# `connect(url, *, api_key=None, timeout=30.0) -> AsyncRemoteStore` (API.md section 8) goes
# here, beside `AsyncStore`, when the remote client lands.
