"""More concurrency (API.md section 1): timed mixed workloads with invariant checks, close()
racing in-flight calls, backup()/compact() under load, the directory lock across processes
(including an owner killed with SIGKILL), fork(), and readers racing writers with exact counts.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memini import (
    Filter,
    Memory,
    NotFoundError,
    Scored,
    Store,
    StoreClosedError,
    StoreLockedError,
)

DIMS = 4
NS = "ns"
EVERYTHING = Filter(include_expired=True, include_superseded=True)


def vec_for(id: str) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(id.encode())).standard_normal(DIMS).astype(np.float32)


def word_for(id: str) -> str:
    return "w" + id.replace("-", "q")


def l2_score(q: np.ndarray, v: np.ndarray) -> float:
    d = q.astype(np.float64) - v.astype(np.float64)
    return float(1.0 / (1.0 + np.sqrt((d * d).sum())))


def mem(id: str, version: int = 0, ns: str = NS) -> Memory:
    return Memory(
        id=id,
        namespace=ns,
        content=f"{word_for(id)} version{version}",
        metadata={"v": version},
        embedding=vec_for(id),
    )


def check_vector_hits(hits: list[Scored], q: np.ndarray, k: int, ns: str = NS) -> None:
    assert len(hits) <= k
    ids = [h.memory.id for h in hits]
    assert len(set(ids)) == len(ids), ids
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    for h in hits:
        assert h.memory.namespace == ns
        assert h.memory.superseded_by is None
        assert abs(h.score - l2_score(q, vec_for(h.memory.id))) <= 1e-9


def run_threads(fn: Callable[[int], Any], n: int) -> list[Any]:
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(fn, t) for t in range(n)]
        return [f.result() for f in futures]


# ------------------------------------------------------------------ timed mixed workload


@dataclass
class Own:
    version: dict[str, int] = field(default_factory=dict)
    superseded: set[str] = field(default_factory=set)
    ops: int = 0
    self_queries: int = 0
    self_misses: int = 0  # HNSW is approximate once a namespace outgrows the exact scan


def mixed_worker(s: Store, t: int, seconds: float) -> Own:
    """Writes its own rows, reads everybody's; checks read-your-writes and hit invariants."""
    rng = random.Random(t)
    own = Own()
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        own.ops += 1
        op = rng.random()
        live = sorted(set(own.version) - own.superseded)
        if op < 0.25 or not own.version:
            id = f"t{t}-{n}"
            n += 1
            s.upsert(mem(id))
            own.version[id] = 0
            assert s.get(NS, id).metadata == {"v": 0}
            assert [h.memory.id for h in s.keyword_search(NS, word_for(id), k=1)] == [id]
        elif op < 0.35:
            ids = [f"t{t}-{n + j}" for j in range(3)]
            n += 3
            assert s.upsert_many([mem(id) for id in ids]) == 3
            for id in ids:
                own.version[id] = 0
            assert s.count(NS, Filter(exclude_ids=[])) >= len(live) + 3
        elif op < 0.45:
            id = rng.choice(sorted(own.version))
            v = own.version[id] + 1
            got = s.update(NS, id, content=f"{word_for(id)} version{v}", metadata={"v": v})
            assert got.metadata == {"v": v}
            own.version[id] = v
            assert s.get(NS, id).content.endswith(f"version{v}")
            assert s.get_embedding(NS, id).tobytes() == vec_for(id).tobytes()  # type: ignore[union-attr]
        elif op < 0.5:
            id = rng.choice(sorted(own.version))
            s.delete(NS, id)
            del own.version[id]
            own.superseded.discard(id)
            with pytest.raises(NotFoundError):
                s.get(NS, id)
            assert s.keyword_search(NS, word_for(id), EVERYTHING) == []
        elif op < 0.55 and live:
            id = rng.choice(live)
            s.set_superseded(NS, id, "someone")
            own.superseded.add(id)
            assert s.vector_search(NS, vec_for(id), Filter(exclude_ids=[]), 50)[0].memory.id != id
        elif op < 0.6 and own.superseded:
            id = rng.choice(sorted(own.superseded))
            s.restore(NS, id)
            own.superseded.discard(id)
            own.self_queries += 1
            own.self_misses += s.vector_search(NS, vec_for(id), k=1)[0].memory.id != id
        elif op < 0.8:
            q = vec_for(rng.choice(live)) if live else vec_for("x")
            k = rng.randint(1, 20)
            hits = s.vector_search(NS, q, None, k)
            check_vector_hits(hits, q, k)
            if live:
                assert hits
                own.self_queries += 1
                own.self_misses += hits[0].score != pytest.approx(1.0)
        elif op < 0.9:
            id = rng.choice(sorted(own.version))
            hits = s.keyword_search(NS, word_for(id), EVERYTHING, k=3)
            assert [h.memory.id for h in hits] == [id]
            assert hits[0].memory.metadata == {"v": own.version[id]}
        else:
            rows = s.list(NS, Filter(include_superseded=True), limit=50)
            assert len(rows) <= 50
            assert s.count(NS, EVERYTHING) >= len(own.version)
    return own


def final_check(s: Store, owns: list[Own]) -> None:
    everything = {m.id: m for m in s.list(NS, EVERYTHING)}
    want = {id: v for own in owns for id, v in own.version.items()}
    assert set(everything) == set(want)
    for id, v in want.items():
        assert everything[id].metadata == {"v": v}, id
    superseded = {id for own in owns for id in own.superseded}
    assert {id for id, m in everything.items() if m.superseded_by} == superseded
    assert s.count(NS) == len(want) - len(superseded)
    for id in list(want)[:50]:
        assert [h.memory.id for h in s.keyword_search(NS, word_for(id), EVERYTHING, 1)] == [id]


def mixed(open_store: Callable[..., Store], seconds: float) -> None:
    s = open_store()
    owns = run_threads(lambda t: mixed_worker(s, t, seconds), 8)
    assert all(o.ops > 10 for o in owns), [o.ops for o in owns]
    misses = sum(o.self_misses for o in owns)
    queries = sum(o.self_queries for o in owns)
    assert misses <= max(1, queries // 100), f"{misses} of {queries} self-queries missed"
    final_check(s, owns)


def test_mixed_threads_5s(open_store: Callable[..., Store]) -> None:
    mixed(open_store, 5)


@pytest.mark.slow
def test_mixed_threads_60s(open_store: Callable[..., Store]) -> None:
    mixed(open_store, 60)


def test_mixed_threads_survive_reopen(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "s", dims=DIMS)
    owns = run_threads(lambda t: mixed_worker(s, t, 2), 8)
    s.close()
    with Store.open(tmp_path / "s") as s2:
        final_check(s2, owns)


# ------------------------------------------------------------------ close racing calls


def test_close_races_in_flight_calls(open_store: Callable[..., Store]) -> None:
    s = open_store()
    s.upsert_many([mem(f"seed-{i}") for i in range(200)])
    started = threading.Barrier(9)
    acked: list[list[str]] = [[] for _ in range(8)]

    def work(t: int) -> str:
        rng = random.Random(t)
        started.wait()
        i = 0
        while True:
            i += 1
            try:
                r = rng.random()
                if r < 0.4:
                    q = vec_for(f"seed-{rng.randrange(200)}")
                    check_vector_hits(s.vector_search(NS, q, None, 10), q, 10)
                elif r < 0.6:
                    s.keyword_search(NS, word_for(f"seed-{rng.randrange(200)}"))
                elif r < 0.7:
                    s.vector_search_many(NS, np.stack([vec_for("a"), vec_for("b")]), None, 5)
                elif r < 0.8:
                    s.list(NS, None, 20)
                    s.count(NS)
                else:
                    id = f"w{t}-{i}"
                    s.upsert(mem(id))
                    acked[t].append(id)
            except StoreClosedError:
                return "closed"

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(work, t) for t in range(8)]
        started.wait()
        time.sleep(0.3)
        s.close()
        assert [f.result(timeout=60) for f in futures] == ["closed"] * 8
    for call in (
        lambda: s.vector_search(NS, vec_for("a")),
        lambda: s.keyword_search(NS, "word"),
        lambda: s.get(NS, "seed-1"),
        lambda: s.upsert(mem("late")),
        lambda: s.count(NS),
        s.ping,
        s.compact,
    ):
        with pytest.raises(StoreClosedError):
            call()
    s.close()  # idempotent
    if getattr(s, "_path", None) is not None:  # on disk: every acknowledged upsert survived
        with Store.open(s._path) as s2:
            have = {m.id for m in s2.list(NS)}
            for ids in acked:
                assert set(ids) <= have


# ------------------------------------------------------------------ backup and compact


def test_backup_and_compact_under_load(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "s", dims=DIMS)
    stop = threading.Event()
    progress = [0] * 4

    def writer(t: int) -> None:
        i = 0
        while not stop.is_set():
            s.upsert(mem(f"t{t}-{i:06d}"))
            if i % 5 == 4:  # tombstones (rows, vectors, keyword docs) for compact to reclaim
                s.upsert(mem(f"c{t}-{i}", ns="churn"))
                s.delete("churn", f"c{t}-{i}")
            progress[t] = i + 1
            i += 1

    def reader(t: int) -> None:
        rng = random.Random(t)
        while not stop.is_set():
            q = vec_for(f"t{rng.randrange(4)}-{rng.randrange(50):06d}")
            check_vector_hits(s.vector_search(NS, q, None, 5), q, 5)
            s.keyword_search(NS, "version0", None, 5)

    backups = []
    with ThreadPoolExecutor(max_workers=7) as pool:
        futures = [pool.submit(writer, t) for t in range(4)]
        futures += [pool.submit(reader, t) for t in range(3)]
        try:
            for b in range(3):
                time.sleep(0.3)
                s.compact()
                before = list(progress)
                dest = tmp_path / f"backup{b}"
                s.backup(dest)
                backups.append((dest, before))
        finally:
            stop.set()
            for f in futures:
                f.result(timeout=60)
    total = sum(progress)
    assert s.count(NS) == total
    s.close()
    for dest, before in backups:
        with Store.open(dest) as b:
            ids = [m.id for m in b.list(NS)]
            by_thread: dict[int, set[int]] = {}
            for id in ids:
                t, i = id[1:].split("-")
                by_thread.setdefault(int(t), set()).add(int(i))
            for t in range(4):
                got = by_thread.get(t, set())
                # consistent snapshot: each writer's rows form a prefix, at least as long as
                # what it had finished when backup() started
                assert got == set(range(len(got))), (dest, t)
                assert len(got) >= before[t], (dest, t, len(got), before[t])
            for id in ids[:20]:
                assert b.vector_search(NS, vec_for(id), k=1)[0].memory.id == id
                assert [h.memory.id for h in b.keyword_search(NS, word_for(id))] == [id]
    with Store.open(tmp_path / "s") as s2:
        assert s2.count(NS) == total


# ------------------------------------------------------------------ locks across processes

HOLDER = textwrap.dedent(
    """
    import sys, time
    from memini import Store
    s = Store.open(sys.argv[1], dims=4)
    print("ready", flush=True)
    time.sleep(120)
    """
)

OPENER = textwrap.dedent(
    """
    import sys, time
    from memini import Store
    t = time.monotonic()
    try:
        Store.open(sys.argv[1]).close()
        print("opened", time.monotonic() - t)
    except Exception as e:
        print(type(e).__name__, time.monotonic() - t, str(e).replace(chr(10), " "))
    """
)


def try_open_elsewhere(path: Path) -> tuple[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", OPENER, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    return out[0], float(out[1])


def test_second_process_gets_store_locked_error(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store.open(path, dims=DIMS) as s:
        s.upsert(mem("a"))
        kind, took = try_open_elsewhere(path)
        assert kind == "StoreLockedError"
        assert took < 5, "a second opener must fail immediately, not wait"
        with pytest.raises(StoreLockedError):
            Store.open(path)  # this process too
        assert s.get(NS, "a").id == "a"
    assert try_open_elsewhere(path)[0] == "opened"


def test_lock_released_when_owner_is_sigkilled(tmp_path: Path) -> None:
    path = tmp_path / "s"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError):
            Store.open(path)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    with Store.open(path) as s:
        s.upsert(mem("after"))
        assert s.count(NS) == 1


# ------------------------------------------------------------------ fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_finds_store_closed(open_store: Callable[..., Store]) -> None:
    s = open_store()
    s.upsert_many([mem(f"p{i}") for i in range(20)])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report and leave without running any pytest machinery
        code = 0
        try:
            for call in (
                lambda: s.get(NS, "p1"),
                lambda: s.vector_search(NS, vec_for("p1")),
                lambda: s.keyword_search(NS, word_for("p1")),
                lambda: s.upsert(mem("child")),
                lambda: s.count(NS),
                s.ping,
            ):
                try:
                    call()
                    code = 1
                except StoreClosedError:
                    pass
            s.close()  # a no-op that must not release the parent's lock
            s.close()
        except BaseException:
            code = 2
        os.write(w, bytes([code]))
        os._exit(code)
    os.close(w)
    try:
        status = os.read(r, 1)
    finally:
        os.close(r)
    _, wait_status = os.waitpid(pid, 0)
    assert status == b"\x00", f"child status {status!r}"
    assert os.waitstatus_to_exitcode(wait_status) == 0
    # the parent's store keeps working, its lock held
    s.upsert(mem("parent-after-fork"))
    assert s.count(NS) == 21
    assert s.vector_search(NS, vec_for("p3"), k=1)[0].memory.id == "p3"
    assert [h.memory.id for h in s.keyword_search(NS, word_for("parent-after-fork"))] == [
        "parent-after-fork"
    ]
    if getattr(s, "_path", None) is not None:  # a local store on disk
        assert try_open_elsewhere(s._path)[0] == "StoreLockedError"


# ------------------------------------------------------------------ readers racing writers


def test_eight_searchers_two_writers_exact(open_store: Callable[..., Store]) -> None:
    s = open_store()
    static = [f"s{i}" for i in range(300)]
    s.upsert_many([mem(id, ns="static") for id in static])
    vecs = np.stack([vec_for(id) for id in static]).astype(np.float64)
    per_writer = 150
    writers_done = threading.Event()

    def write(t: int) -> int:
        for i in range(per_writer):
            s.upsert(mem(f"w{t}-{i}", ns="busy"))
            if i % 10 == 0:
                s.upsert_many([mem(f"w{t}-{i}-b{j}", ns="busy") for j in range(3)])
        return per_writer + 3 * len(range(0, per_writer, 10))

    def search(t: int) -> int:
        rng = np.random.default_rng(t)
        n = 0
        while not writers_done.is_set() or n < 20:
            q = rng.standard_normal(DIMS).astype(np.float32)
            k = int(rng.integers(1, 12))
            hits = s.vector_search("static", q, None, k)
            d = np.sqrt(((vecs - q.astype(np.float64)) ** 2).sum(axis=1))
            want = [static[i] for i in np.argsort(d, kind="stable")[:k]]
            assert [h.memory.id for h in hits] == want
            for h, i in zip(hits, np.sort(d)[:k], strict=True):
                assert h.score == pytest.approx(1 / (1 + i), abs=1e-12)
            assert s.count("static") == len(static)
            busy = s.vector_search("busy", q, None, k)
            check_vector_hits(busy, q, k, ns="busy")
            n += 1
        return n

    with ThreadPoolExecutor(max_workers=10) as pool:
        searchers = [pool.submit(search, t) for t in range(8)]
        writers = [pool.submit(write, t) for t in range(2)]
        written = sum(f.result(timeout=120) for f in writers)
        writers_done.set()
        assert all(f.result(timeout=120) >= 20 for f in searchers)
    assert s.count("busy") == written
    assert s.count("static") == len(static)
    assert len(s.vector_search("busy", vec_for("w0-0"), None, written + 5)) == written
    assert s.vector_search("busy", vec_for("w1-7"), k=1)[0].memory.id == "w1-7"
    assert datetime.now(UTC).year >= 2024
