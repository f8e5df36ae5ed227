"""One Store shared by many threads (API.md section 1: thread-safe, writes serialised)."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from memini import ConflictError, Filter, Memory, NotFoundError, Scored, Store, StoreClosedError

NS = "ns"
THREADS = 8
T0 = datetime(2024, 5, 1, tzinfo=UTC)


def vec_for(id: str) -> np.ndarray:
    """Every id has one fixed vector, so any thread can check any hit's score."""
    return np.random.default_rng(zlib.crc32(id.encode())).standard_normal(4).astype(np.float32)


def l2_score(q: np.ndarray, v: np.ndarray) -> float:
    d = q.astype(np.float64) - v.astype(np.float64)
    return float(1.0 / (1.0 + np.sqrt((d * d).sum())))


def check_vector_hits(hits: list[Scored], q: np.ndarray, k: int, tag: str | None = None) -> None:
    assert len(hits) <= k
    assert len({h.memory.id for h in hits}) == len(hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        m = hit.memory
        assert m.namespace == NS
        assert m.superseded_by is None and m.expires_at is None
        assert m.embedding is None
        assert abs(hit.score - l2_score(q, vec_for(m.id))) <= 1e-9
        if tag is not None:
            assert tag in m.tags


def check_keyword_hits(hits: list[Scored], word: str, k: int, tag: str | None = None) -> None:
    assert len(hits) <= k
    assert len({h.memory.id for h in hits}) == len(hits)
    for hit in hits:
        m = hit.memory
        assert hit.score > 0
        assert m.namespace == NS and m.superseded_by is None
        assert word in m.content.split()
        if tag is not None:
            assert tag in m.tags


def run_threads(fn: Callable[[int], Any], n: int = THREADS) -> list[Any]:
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(fn, t) for t in range(n)]
        return [f.result() for f in futures]  # re-raises a thread's failure


# ---------------------------------------------------------------------------------------------
# mixed workload, exact final state


@dataclass
class Own:
    """What one thread knows about its own rows."""

    version: dict[str, int] = field(default_factory=dict)
    access: dict[str, int] = field(default_factory=dict)
    superseded: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)

    def live(self) -> set[str]:
        return set(self.version) - self.superseded


def content(t: int, id: str, version: int) -> str:
    return f"shared thread{t} {id} version{version}"


def worker(store: Store, t: int, ops: int = 150) -> Own:
    rng = np.random.default_rng(100 + t)
    own = Own()
    tag = f"thread{t}"
    next_id = 0
    for _ in range(ops):
        op = rng.choice(
            [
                "insert",
                "update",
                "get",
                "list",
                "delete",
                "reinforce",
                "supersede",
                "restore",
                "vector",
                "keyword",
                "batch",
            ],
            p=[0.2, 0.1, 0.1, 0.05, 0.05, 0.1, 0.05, 0.05, 0.12, 0.08, 0.1],
        )
        mine = sorted(own.version)
        pick = mine[int(rng.integers(len(mine)))] if mine else None
        if op == "insert" or (op == "batch" and not mine):
            id = f"t{t}-{next_id}"
            next_id += 1
            store.upsert(
                Memory(
                    id=id,
                    namespace=NS,
                    content=content(t, id, 0),
                    tags=[tag],
                    embedding=vec_for(id),
                )
            )
            own.version[id], own.access[id] = 0, 0
        elif op == "batch":
            new = [f"t{t}-{next_id + j}" for j in range(3)]
            next_id += 3
            rows = [
                Memory(
                    id=i, namespace=NS, content=content(t, i, 0), tags=[tag], embedding=vec_for(i)
                )
                for i in new
            ]
            assert pick is not None
            if pick not in own.superseded:
                v = own.version[pick] + 1
                rows.append(
                    Memory(
                        id=pick,
                        namespace=NS,
                        content=content(t, pick, v),
                        tags=[tag],
                        access_count=own.access[pick],
                        embedding=vec_for(pick),
                    )
                )
                own.version[pick] = v
            assert store.upsert_many(rows) == len(rows)
            for i in new:
                own.version[i], own.access[i] = 0, 0
        elif pick is None:
            continue
        elif op == "update":
            v = own.version[pick] + 1
            got = store.update(NS, pick, content=content(t, pick, v))
            assert got.content == content(t, pick, v)
            own.version[pick] = v
        elif op == "get":
            m = store.get(NS, pick)
            assert m.content == content(t, pick, own.version[pick])
            assert m.access_count == own.access[pick]
            assert (m.superseded_by is not None) == (pick in own.superseded)
        elif op == "list":
            got = {m.id for m in store.list(NS, Filter(tags=[tag]))}
            assert got == own.live()
            assert store.count(NS, Filter(tags=[tag])) == len(own.live())
        elif op == "delete":
            store.delete(NS, pick)
            del own.version[pick], own.access[pick]
            own.superseded.discard(pick)
            own.deleted.add(pick)
            with pytest.raises(NotFoundError):
                store.get(NS, pick)
        elif op == "reinforce":
            ids = list({pick, *(mine[int(i)] for i in rng.integers(len(mine), size=2))})
            store.reinforce(NS, [*ids, f"t{t}-missing"], T0 + timedelta(hours=len(ids)))
            for i in ids:
                own.access[i] += 1
        elif op == "supersede":
            store.set_superseded(NS, pick, "someone")
            own.superseded.add(pick)
        elif op == "restore":
            store.restore(NS, pick)
            own.superseded.discard(pick)
        elif op == "vector":
            q = rng.standard_normal(4).astype(np.float32)
            hits = store.vector_search(NS, q, k=10)
            check_vector_hits(hits, q, 10)
            mine_hits = store.vector_search(NS, q, Filter(tags=[tag]), k=1000)
            check_vector_hits(mine_hits, q, 1000, tag)
            assert {h.memory.id for h in mine_hits} == own.live()  # only this thread writes them
            q = vec_for(pick)
            if pick not in own.superseded:
                top = store.vector_search(NS, q, Filter(tags=[tag]), k=1)
                assert [h.memory.id for h in top] == [pick] and top[0].score == 1.0
        elif op == "keyword":
            hits = store.keyword_search(NS, "shared", k=10)
            check_keyword_hits(hits, "shared", 10)
            mine_hits = store.keyword_search(NS, tag, k=1000)
            check_keyword_hits(mine_hits, tag, 1000, tag)
            assert {h.memory.id for h in mine_hits} == own.live()
    return own


def test_mixed_workload_exact_final_state(store: Store) -> None:
    owns: list[Own] = run_threads(lambda t: worker(store, t))
    total = 0
    for t, own in enumerate(owns):
        for id, version in own.version.items():
            m = store.get(NS, id)
            assert m.content == content(t, id, version)
            assert m.access_count == own.access[id]
            assert (m.superseded_by is not None) == (id in own.superseded)
            assert m.tags == [f"thread{t}"]
            assert store.get_embedding(NS, id).tobytes() == vec_for(id).tobytes()
        for id in own.deleted:
            with pytest.raises(NotFoundError):
                store.get(NS, id)
        assert {m.id for m in store.list(NS, Filter(tags=[f"thread{t}"]))} == own.live()
        total += len(own.version)
    everything = Filter(include_superseded=True)
    assert store.count(NS, everything) == total
    assert len(store.vector_search(NS, np.zeros(4, np.float32), everything, k=10_000)) == total
    assert len(store.keyword_search(NS, "shared", everything, k=10_000)) == total


# ---------------------------------------------------------------------------------------------
# races that must have exactly one winner / no lost update


def test_contested_id_has_one_namespace(store: Store) -> None:
    """Threads race to create the same ids, each in its own namespace: one wins each id."""
    ids = [f"c{j}" for j in range(40)]

    def race(t: int) -> dict[str, bool]:
        rng = np.random.default_rng(200 + t)
        won = {}
        for j in rng.permutation(len(ids)):
            row = Memory(
                id=ids[j], namespace=f"ns{t}", content=f"claimed by {t}", embedding=vec_for(ids[j])
            )
            try:
                if j % 2:
                    store.upsert(row)
                else:
                    store.upsert_many([row])
                won[ids[j]] = True
            except ConflictError:
                won[ids[j]] = False
        return won

    results = run_threads(race)
    for id in ids:
        winners = [t for t, won in enumerate(results) if won[id]]
        # a thread whose namespace already holds the id simply updates it, so count namespaces
        owners = []
        for t in range(THREADS):
            try:
                store.get(f"ns{t}", id)
                owners.append(t)
            except NotFoundError:
                pass
        assert len(owners) == 1, (id, owners)
        assert winners == owners, (id, winners, owners)
        assert store.get(f"ns{owners[0]}", id).content == f"claimed by {owners[0]}"


def test_concurrent_reinforce_loses_no_increment(store: Store) -> None:
    store.upsert(Memory(id="hot", namespace=NS, content="hot row", embedding=vec_for("hot")))

    def hammer(t: int) -> None:
        for i in range(50):
            if i % 10 == t % 10:
                store.update(NS, "hot", importance=float(t))
            store.reinforce(NS, ["hot"], T0 + timedelta(seconds=t * 100 + i))

    run_threads(hammer)
    assert store.get(NS, "hot").access_count == THREADS * 50
    assert store.get_embedding(NS, "hot").tobytes() == vec_for("hot").tobytes()


def test_concurrent_updates_of_distinct_fields_all_land(store: Store) -> None:
    store.upsert_many(
        [
            Memory(id=f"u{t}", namespace=NS, content="start", embedding=vec_for(f"u{t}"))
            for t in range(THREADS)
        ]
    )

    def edit(t: int) -> None:
        for i in range(30):
            store.update(NS, f"u{(t + i) % THREADS}", summary=f"s{t}-{i}")
            store.update(NS, f"u{t}", tags=[f"tag{i}"])

    run_threads(edit)
    for t in range(THREADS):
        m = store.get(NS, f"u{t}")
        assert m.tags == ["tag29"]
        assert m.content == "start"
        assert store.get_embedding(NS, f"u{t}").tobytes() == vec_for(f"u{t}").tobytes()


# ---------------------------------------------------------------------------------------------
# readers while writers write


def test_searches_while_writing(store: Store) -> None:
    stable = [
        Memory(
            id=f"stable{i}",
            namespace=NS,
            content=f"shared stable {i}",
            tags=["stable"],
            embedding=vec_for(f"stable{i}"),
        )
        for i in range(25)
    ]
    store.upsert_many(stable)
    writers_done = threading.Event()

    def write(t: int) -> int:
        rng = np.random.default_rng(300 + t)
        n = 0
        for b in range(40):
            ids = [f"w{t}-{b}-{j}" for j in range(5)]
            store.upsert_many(
                [
                    Memory(
                        id=i,
                        namespace=NS,
                        content=f"shared churn batch{t}x{b}",
                        tags=["churn", f"batch{t}x{b}"],
                        embedding=vec_for(i),
                    )
                    for i in ids
                ]
            )
            n += 5
            gone = int(rng.integers(1, 5))
            if rng.random() < 0.5:
                store.delete(NS, ids[gone])
                n -= 1
            if rng.random() < 0.3:
                store.set_superseded(NS, ids[0], "x")
        return n

    def read(t: int) -> int:
        rng = np.random.default_rng(400 + t)
        rounds = 0
        while not writers_done.is_set() or rounds < 5:
            q = rng.standard_normal(4).astype(np.float32)
            check_vector_hits(store.vector_search(NS, q, k=10), q, 10)
            # rows nobody touches: always exactly min(k, 25), whatever the writers do
            hits = store.vector_search(NS, q, Filter(tags=["stable"]), k=10)
            check_vector_hits(hits, q, 10, "stable")
            assert len(hits) == 10
            assert len(store.vector_search(NS, q, Filter(tags=["stable"]), k=100)) == 25
            [many] = store.vector_search_many(NS, q[None, :], Filter(tags=["stable"]), k=10)
            assert [(h.memory.id, h.score) for h in many] == [(h.memory.id, h.score) for h in hits]
            kw = store.keyword_search(NS, "stable", k=100)
            check_keyword_hits(kw, "stable", 100, "stable")
            assert len(kw) == 25
            check_keyword_hits(store.keyword_search(NS, "shared churn", k=20), "shared", 20)
            churn = store.keyword_search(NS, "churn", Filter(tags=["churn"]), k=50)
            check_keyword_hits(churn, "churn", 50, "churn")
            assert store.count(NS, Filter(tags=["stable"])) == 25
            rounds += 1
        return rounds

    with ThreadPoolExecutor(max_workers=8) as pool:
        readers = [pool.submit(read, t) for t in range(4)]
        writers = [pool.submit(write, t) for t in range(4)]
        written = [w.result() for w in writers]
        writers_done.set()
        assert all(r.result() >= 5 for r in readers)
    assert store.count(NS, Filter(tags=["churn"], include_superseded=True)) == sum(written)


def test_batches_are_visible_whole_or_not_at_all(store: Store) -> None:
    done = threading.Event()

    def write(t: int) -> None:
        for b in range(30):
            store.upsert_many(
                [
                    Memory(
                        id=f"b{t}-{b}-{j}",
                        namespace=NS,
                        content=f"batch words b{t}x{b}",
                        tags=[f"b{t}x{b}"],
                        embedding=vec_for(f"b{t}-{b}-{j}"),
                    )
                    for j in range(10)
                ]
            )

    def read(t: int) -> None:
        rng = np.random.default_rng(500 + t)
        seen_whole = 0
        while not done.is_set():
            w, b = int(rng.integers(4)), int(rng.integers(30))
            tag = f"b{w}x{b}"
            n = store.count(NS, Filter(tags=[tag]))
            assert n in (0, 10), (tag, n)
            listed = store.list(NS, Filter(tags=[tag]))
            assert len(listed) in (0, 10), (tag, len(listed))
            found = store.keyword_search(NS, tag, Filter(tags=[tag]), k=20)
            assert len(found) in (0, 10), (tag, len(found))
            seen_whole += n == 10

    with ThreadPoolExecutor(max_workers=8) as pool:
        readers = [pool.submit(read, t) for t in range(4)]
        writers = [pool.submit(write, t) for t in range(4)]
        for w in writers:
            w.result()
        done.set()
        for r in readers:
            r.result()
    assert store.count(NS) == 4 * 30 * 10


def test_close_while_threads_work(open_store: Callable[..., Store]) -> None:
    """Closing under load: every thread ends with StoreClosedError, nothing else, no crash."""
    s = open_store()
    s.upsert_many(
        [
            Memory(id=f"a{i}", namespace=NS, content=f"apple {i}", embedding=vec_for(f"a{i}"))
            for i in range(500)
        ]
    )
    busy = threading.Barrier(THREADS + 1)

    def work(t: int) -> str:
        rng = np.random.default_rng(600 + t)
        n = 0
        while True:
            if n == 20:
                busy.wait()  # every thread is mid-work when close() comes
            try:
                if t % 3 == 0:
                    s.vector_search(NS, rng.standard_normal(4).astype(np.float32), k=10)
                elif t % 3 == 1:
                    s.keyword_search(NS, "apple", k=10)
                else:
                    s.upsert(Memory(id=f"w{t}-{n}", namespace=NS, content="x", embedding=[1] * 4))
            except StoreClosedError:
                return "closed"
            n += 1

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        futures = [pool.submit(work, t) for t in range(THREADS)]
        busy.wait()
        s.close()
        assert [f.result() for f in futures] == ["closed"] * THREADS
    with pytest.raises(StoreClosedError):
        s.get(NS, "a0")
