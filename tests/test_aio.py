"""memini.aio.AsyncStore: every Store method as a coroutine, run off the event loop."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memini import (
    DimensionMismatchError,
    Filter,
    InvalidArgumentError,
    Memory,
    NotFoundError,
    Store,
    StoreClosedError,
    StoreLockedError,
)
from memini.aio import AsyncStore, default_workers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """AsyncStore is built on asyncio's executors."""
    return "asyncio"


def test_every_store_method_is_a_coroutine_of_the_same_method() -> None:
    public = {n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))}
    missing = public - set(vars(AsyncStore))
    assert not missing, f"AsyncStore lacks {sorted(missing)}"
    for name in sorted(public - {"open", "close"}):
        assert getattr(AsyncStore, name)._method is getattr(Store, name), name


async def test_wrappers_keep_the_signature_and_docs() -> None:
    s = await AsyncStore.open(None, dims=2)
    for name in ("get", "list", "update", "vector_search"):
        method = getattr(s, name)
        assert inspect.iscoroutinefunction(method), name
        assert method.__doc__ == getattr(Store, name).__doc__
        sync = list(inspect.signature(getattr(Store, name)).parameters)
        assert list(inspect.signature(method).parameters) == sync[1:], name
    assert inspect.iscoroutinefunction(AsyncStore.open)
    await s.close()


async def test_open_write_read_search_close(tmp_path: Path) -> None:
    async with await AsyncStore.open(tmp_path / "s", dims=2, metric="cos") as s:
        await s.upsert(Memory(id="a", namespace="n", content="red apples", embedding=[1, 0]))
        n = await s.upsert_many(
            [
                Memory(id="b", namespace="n", content="green pears", embedding=[0, 1]),
                Memory(id="c", namespace="n", content="red cherries", embedding=[1, 1]),
            ]
        )
        assert n == 2
        assert (await s.get("n", "a")).content == "red apples"
        hits = await s.vector_search("n", np.array([1, 0.1], dtype=np.float32), k=2)
        assert [h.memory.id for h in hits] == ["a", "c"]
        words = await s.keyword_search("n", "red", Filter(), 10)
        assert {h.memory.id for h in words} == {"a", "c"}
        updated = await s.update("n", "b", content="ripe pears")
        assert updated.content == "ripe pears"
        assert await s.count("n") == 3
        assert await s.list_namespaces() == ["n"]
        emb = await s.get_embedding("n", "a")
        assert emb is not None and emb.tolist() == [1.0, 0.0]
    # closed with the block, and the directory is free again
    with Store.open(tmp_path / "s") as again:
        assert again.count("n") == 3


async def test_errors_are_the_stores() -> None:
    s = await AsyncStore.open(None, dims=2)
    with pytest.raises(NotFoundError):
        await s.get("n", "missing")
    with pytest.raises(InvalidArgumentError):
        await s.vector_search("n", [1.0, 0.0], k=0)
    with pytest.raises(InvalidArgumentError):
        await s.update("n", "x", namespace="m")
    await s.close()
    await s.close()  # idempotent
    with pytest.raises(StoreClosedError):
        await s.get("n", "a")
    with pytest.raises(StoreClosedError):
        async with s:
            pass


async def test_open_errors_are_the_stores(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        await AsyncStore.open(tmp_path / "new")  # no dims for a new store
    held = await AsyncStore.open(tmp_path / "held", dims=2)
    with pytest.raises(StoreLockedError):
        await AsyncStore.open(tmp_path / "held")
    await held.close()


async def test_wraps_an_open_store_and_validates_workers() -> None:
    store = Store.open(None, dims=2)
    s = AsyncStore(store, workers=3)
    assert s.store is store
    await s.upsert(Memory(id="a", namespace="n", content="x"))
    assert store.get("n", "a").content == "x"  # the same store, seen from sync code
    await s.close()
    with pytest.raises(StoreClosedError):
        store.ping()
    for bad in (0, -1, 1.5, True, 5000):
        with pytest.raises(InvalidArgumentError, match="workers"):
            AsyncStore(Store.open(None, dims=2), workers=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"memini\.Store"):
        AsyncStore(object())  # type: ignore[arg-type]
    assert 6 <= default_workers() <= 256


async def test_calls_run_on_worker_threads_with_context() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[tuple[str, str]] = []

    class Spy:
        """A Metrics object recording which thread reports a write, and the context."""

        def upsert(self, op: str, tier: str, memory_type: str) -> None:
            seen.append((threading.current_thread().name, var.get()))

        def delete(self) -> None: ...
        def soft_delete(self) -> None: ...
        def sweep_expired(self, tier: str) -> None: ...
        def active_by_tier(self, tier: str, n: int) -> None: ...
        def dedup_tombstoned(self, n: int) -> None: ...

    async with await AsyncStore.open(None, dims=2, metrics=Spy()) as s:
        var.set("caller's")
        await s.upsert(Memory(id="a", namespace="n", content="x"))
    assert seen == [(seen[0][0], "caller's")]
    assert seen[0][0].startswith("memini-aio")


async def test_the_event_loop_runs_while_the_store_works() -> None:
    """A big atomic write takes a while; the loop keeps ticking meanwhile."""
    rng = np.random.default_rng(7)
    rows = [
        Memory(id=f"m{i}", namespace="n", content=f"row {i}", embedding=rng.random(16))
        for i in range(5_000)
    ]
    async with await AsyncStore.open(None, dims=16) as s:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        await s.upsert_many(rows)
        took = time.perf_counter() - t0
        done.set()
        await task
        assert await s.count("n") == 5_000
        # a blocked loop would tick once or twice; a free one ticks through the write
        assert took < 0.05 or ticks >= 5, (took, ticks)


async def test_concurrent_awaits_all_land() -> None:
    async with await AsyncStore.open(None, dims=4) as s:
        rng = np.random.default_rng(1)
        vecs = rng.random((64, 4)).astype(np.float32)
        await asyncio.gather(
            *(
                s.upsert(Memory(id=f"m{i}", namespace=f"ns{i % 4}", content="x", embedding=v))
                for i, v in enumerate(vecs)
            )
        )
        counts = await asyncio.gather(*(s.count(f"ns{j}") for j in range(4)))
        assert counts == [16, 16, 16, 16]
        results = await asyncio.gather(
            *(s.vector_search(f"ns{i % 4}", v, k=1) for i, v in enumerate(vecs))
        )
        assert [r[0].memory.id for r in results] == [f"m{i}" for i in range(64)]


def _scored(hits: list[Any]) -> list[tuple[str, float, str]]:
    return [(h.memory.id, round(h.score, 9), h.memory.content) for h in hits]


async def test_searches_started_in_the_core_equal_the_stores() -> None:
    """vector_search and keyword_search start in the core (Engine.*_then): same results,
    same errors as the Store method, for every argument form the Store method takes."""
    rng = np.random.default_rng(3)
    async with await AsyncStore.open(None, dims=8, metric="cos") as s:
        store = s.store
        rows = [
            Memory(
                id=f"m{i}",
                namespace="n",
                content=f"{'red' if i % 3 else 'green'} fruit number {i}",
                tags=["even"] if i % 2 == 0 else [],
                embedding=rng.random(8),
            )
            for i in range(200)
        ]
        await s.upsert_many(rows)
        assert s._native
        q = rng.random(8).astype(np.float32)
        even = Filter(tags=["even"])
        assert _scored(await s.vector_search("n", q)) == _scored(store.vector_search("n", q))
        assert _scored(await s.vector_search("n", q.tolist(), even, 5)) == _scored(
            store.vector_search("n", q.tolist(), even, 5)
        )
        assert _scored(await s.vector_search(namespace="n", vector=q, k=3)) == _scored(
            store.vector_search("n", q, k=3)
        )
        assert await s.vector_search("elsewhere", q) == []
        assert _scored(await s.keyword_search("n", "green fruit", even, 7)) == _scored(
            store.keyword_search("n", "green fruit", even, 7)
        )
        assert _scored(await s.keyword_search("n", "red")) == _scored(
            store.keyword_search("n", "red")
        )
        with pytest.raises(DimensionMismatchError):
            await s.vector_search("n", [1.0, 2.0])
        with pytest.raises(InvalidArgumentError, match="k must be"):
            await s.keyword_search("n", "red", None, 0)
        with pytest.raises(InvalidArgumentError, match="query must be a str"):
            await s.keyword_search("n", b"red")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="filter"):
            await s.vector_search("n", q, "tags")  # type: ignore[arg-type]


async def test_a_core_error_in_a_search_started_in_the_core_reaches_the_awaiter() -> None:
    """The error path of Engine.*_then: the core refuses the call on its own thread (here a
    query of the wrong length, which the facade would have caught) and done(error, None)
    hands the memini error to the caller."""
    from memini._convert import filter_to_spec
    from memini._core import Engine

    store = Store.open(None, dims=4)
    loop = asyncio.get_running_loop()
    got: asyncio.Future[tuple[BaseException | None, object]] = loop.create_future()

    def done(error: BaseException | None, result: object) -> None:
        loop.call_soon_threadsafe(got.set_result, (error, result))

    engine = store._engine
    assert isinstance(engine, Engine)
    engine.vector_search_then("n", np.zeros(3, dtype=np.float32), filter_to_spec(None), 10, done)
    error, result = await got
    assert isinstance(error, DimensionMismatchError) and result is None
    store.close()


def test_one_call_at_a_time_keeps_to_the_thread_that_went_idle_last() -> None:
    """The core's threads take each job on the thread that went idle last (see
    rust/python/spawn.rs): after calls at once started several threads, calls made one at a
    time keep running on one of them, whose caches are warm, instead of rotating through all."""
    from collections import Counter

    from memini._convert import filter_to_spec
    from memini._core import Engine

    store = Store.open(None, dims=4)
    engine = store._engine
    assert isinstance(engine, Engine)
    spec, q = filter_to_spec(None), np.ones(4, dtype=np.float32)
    ran: list[int] = []

    def calls(n: int) -> None:
        left, finished, lock = [n], threading.Event(), threading.Lock()

        def done(error: BaseException | None, result: object) -> None:
            with lock:
                ran.append(threading.get_ident())
                left[0] -= 1
                if not left[0]:
                    finished.set()

        for _ in range(n):
            engine.vector_search_then("n", q, spec, 1, done)
        assert finished.wait(30)

    calls(8)
    ran.clear()
    for _ in range(20):
        calls(1)
        time.sleep(0.02)  # the thread parks again after its callback returned
    assert Counter(ran).most_common(1)[0][1] >= 16, Counter(ran)
    store.close()


async def test_a_cancelled_search_leaves_the_loop_clean() -> None:
    """Cancelling an await of a search started in the core: the search finishes on its
    thread and its completion finds the future cancelled, silently."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, ctx: errors.append(ctx))
    rng = np.random.default_rng(5)
    async with await AsyncStore.open(None, dims=16) as s:
        await s.upsert_many(
            [
                Memory(id=f"m{i}", namespace="n", content="x", embedding=rng.random(16))
                for i in range(500)
            ]
        )
        tasks = [asyncio.create_task(s.vector_search("n", rng.random(16), k=50)) for _ in range(20)]
        await asyncio.sleep(0)
        for t in tasks[::2]:
            t.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(d, asyncio.CancelledError) for d in done[::2])
        assert all(isinstance(d, list) and len(d) == 50 for d in done[1::2])
        await asyncio.sleep(0.05)  # completions of the cancelled ones land meanwhile
    assert errors == []


def _random_memories(rng: np.random.Generator, n: int, content: str) -> list[Memory]:
    """``n`` memories m0.. in namespace "n" with random 8-d vectors and the same text."""
    return [
        Memory(id=f"m{i}", namespace="n", content=content, embedding=rng.random(8))
        for i in range(n)
    ]


def _wait_readable(fd: int) -> None:
    import select

    assert select.select([fd], [], [], 10)[0] == [fd], "no completion signalled in 10 s"


def test_completions_hold_replies_until_drained_on_the_draining_thread() -> None:
    """`Completions`: a search started with ``completions=`` finishes on a core thread that
    never calls back; its socket turns readable, and ``drain()`` runs every waiting
    ``done(error, result)`` on the thread that drains (the event loop's, in `memini.aio`),
    errors included."""
    from memini._convert import filter_to_spec
    from memini._core import Completions, Engine

    rng = np.random.default_rng(7)
    store = Store.open(None, dims=8)
    store.upsert_many(_random_memories(rng, 300, "x"))
    engine = store._engine
    assert isinstance(engine, Engine)
    c = Completions()
    got: dict[str, tuple[int, BaseException | None, Any]] = {}

    def done(label: str, error: BaseException | None, result: Any) -> None:
        got[label] = (threading.get_ident(), error, result)

    nofilter = filter_to_spec(None)
    queries = rng.random((20, 8), dtype=np.float32)
    for i, q in enumerate(queries):
        engine.vector_search_then("n", q, nofilter, 5, functools.partial(done, f"v{i}"), c)
    engine.vector_search_then(
        "n", np.zeros(3, np.float32), nofilter, 5, functools.partial(done, "bad"), c
    )
    engine.keyword_search_then("n", "x", nofilter, 5, functools.partial(done, "kw"), c)
    while len(got) < 22:
        _wait_readable(c.fileno())
        c.drain()
    c.drain()  # nothing waiting: a no-op
    assert len(got) == 22
    assert {ident for ident, _, _ in got.values()} == {threading.get_ident()}
    for i, q in enumerate(queries):
        assert got[f"v{i}"][1] is None
        assert _scored(got[f"v{i}"][2]) == _scored(store.vector_search("n", q, k=5))
    assert _scored(got["kw"][2]) == _scored(store.keyword_search("n", "x", k=5))
    assert isinstance(got["bad"][1], DimensionMismatchError) and got["bad"][2] is None
    store.close()


async def test_searches_complete_through_their_loops_completions() -> None:
    """`AsyncStore` searches reply through the running loop's `Completions` (one per loop,
    watched with ``add_reader``), and every `done` runs on the loop's thread."""
    from memini.aio import _LOOPS

    loop = asyncio.get_running_loop()
    rng = np.random.default_rng(8)
    async with await AsyncStore.open(None, dims=8) as s:
        await s.upsert_many(_random_memories(rng, 200, "y"))
        qs = rng.random((40, 8), dtype=np.float32)
        hits = await asyncio.gather(*(s.vector_search("n", q, k=3) for q in qs))
        assert [_scored(h) for h in hits] == [
            _scored(s.store.vector_search("n", q, k=3)) for q in qs
        ]
        first = _LOOPS[loop]
        assert first is not None
        await s.keyword_search("n", "y")
        assert _LOOPS[loop] is first  # made once per loop


def test_event_loops_on_many_threads_each_get_their_replies() -> None:
    """Loops running at once on 4 threads, searching the same store: each loop receives
    exactly its own results."""
    rng = np.random.default_rng(9)
    store = Store.open(None, dims=8)
    store.upsert_many(_random_memories(rng, 300, "z"))
    a = AsyncStore(store)
    qs = rng.random((4, 30, 8), dtype=np.float32)
    got: dict[int, list[Any]] = {}

    def run(t: int) -> None:
        async def searches() -> list[Any]:
            return await asyncio.gather(*(a.vector_search("n", q, k=4) for q in qs[t]))

        got[t] = [_scored(h) for h in asyncio.run(searches())]

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t in range(4):
        assert got[t] == [_scored(store.vector_search("n", q, k=4)) for q in qs[t]]
    asyncio.run(a.close())


def test_a_loop_that_cannot_watch_sockets_gets_its_replies_anyway() -> None:
    """A loop without ``add_reader`` (Windows' proactor loop): searches complete their
    futures from the core thread with ``call_soon_threadsafe`` instead."""
    from memini.aio import _LOOPS

    class NoReaders(asyncio.SelectorEventLoop):
        def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:
            raise NotImplementedError

    rng = np.random.default_rng(11)
    store = Store.open(None, dims=8)
    store.upsert_many(_random_memories(rng, 100, "v"))
    a = AsyncStore(store)
    qs = rng.random((10, 8), dtype=np.float32)

    async def searches() -> list[Any]:
        return await asyncio.gather(*(a.vector_search("n", q, k=3) for q in qs))

    loop = NoReaders()
    try:
        hits = loop.run_until_complete(searches())
        assert _LOOPS[loop] is None
        assert [_scored(h) for h in hits] == [_scored(store.vector_search("n", q, k=3)) for q in qs]
        loop.run_until_complete(a.close())
    finally:
        loop.close()


def test_a_loop_closed_with_searches_in_flight_leaves_the_next_loop_working() -> None:
    """Searches whose loop closed before they finished reply into a queue nobody drains:
    nothing raises, and a new loop's searches work."""
    import gc

    rng = np.random.default_rng(10)
    store = Store.open(None, dims=16)
    store.upsert_many(
        [
            Memory(id=f"m{i}", namespace="n", content="w", embedding=rng.random(16))
            for i in range(2000)
        ]
    )
    a = AsyncStore(store)

    left: list[asyncio.Task[Any]] = []

    async def leave() -> None:
        left.extend(
            asyncio.create_task(a.vector_search("n", rng.random(16), k=100)) for _ in range(30)
        )
        await asyncio.sleep(0)

    asyncio.run(leave())  # cancels the tasks; their searches finish with no loop to drain
    time.sleep(0.2)
    gc.collect()

    async def again() -> int:
        return len(await a.vector_search("n", rng.random(16), k=7))

    assert asyncio.run(again()) == 7
    assert all(t.cancelled() for t in left)
    asyncio.run(a.close())


def test_an_unclosed_async_store_never_delays_exit(tmp_path: Path) -> None:
    """Its pool's threads stop at interpreter exit (after the jobs already queued: the write
    in flight lands), and the store is closed by its exit hook, durable."""
    import subprocess
    import sys

    script = f"""
import asyncio
import numpy as np
from memini import Memory
from memini.aio import AsyncStore

async def main():
    s = await AsyncStore.open({str(tmp_path / "s")!r}, dims=2)
    await s.upsert(Memory(id="a", namespace="n", content="x", embedding=[1, 0]))
    await s.vector_search("n", np.array([1, 0], dtype=np.float32))
    await s.keyword_search("n", "x")
    # in flight when the loop ends: nobody awaits it
    asyncio.ensure_future(s.upsert(Memory(id="b", namespace="n", content="y")))
    await asyncio.sleep(0)

asyncio.run(main())
print("done")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"
    with Store.open(tmp_path / "s") as s:
        assert s.get("n", "a").content == "x"
        assert s.get("n", "b").content == "y"
