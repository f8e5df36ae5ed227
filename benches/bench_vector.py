"""Vector search: memini next to raw usearch (same HNSW parameters) and an exact numpy scan.

Queries are the 1000 held-out rows, k=10, metric cos. QPS is single-threaded, one
`vector_search` call per query from Python (results materialised as `Scored` memories);
the usearch peer pays its own Python call per query (`Index.search`, keys only) and the
numpy peer is a single-threaded matrix-vector scan + argpartition. Recall is tie-aware
against the exact scan (see `_data.py`). Every QPS is the best of a few passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import _data as D

# Steps of 8-16 around the 0.95-0.97 operating points (~48-80 on pypi-100k): with steps of 16-32
# there, an engine 0.001 short of a target at 64 was charged breadth 96 (a third fewer q/s),
# which build-to-build recall noise (~0.003) decided as often as the engines did.
BREADTHS = (16, 24, 32, 40, 48, 56, 64, 80, 96, 128)
DEFAULT_BREADTH = 64
TARGET_RECALLS = (0.95, 0.97)  # issue 14: memini >= 1.0x usearch's QPS at both
ROUNDS = 3
Point = tuple[int, float, float]  # (breadth, recall@10, QPS)
_SWEEP: dict[str, list[Point]] = {}


def _ids(hits: list[Any]) -> list[int]:
    return [D.row_of(h.memory.id) for h in hits]


def _memini_pass(store: Any, data: D.Dataset, flt: Any = None, ns: str = D.NS) -> list[list[int]]:
    return [_ids(store.vector_search(ns, q, flt, D.K)) for q in data.queries]


def _usearch_pass(index: Any, data: D.Dataset) -> list[list[int]]:
    return [index.search(q, D.K).keys.tolist() for q in data.queries]


def _numpy_pass(base: np.ndarray, qunit: np.ndarray) -> list[np.ndarray]:
    k = min(D.K, len(base))  # a 0.1% filter of fewer than 10,000 rows keeps < 10 rows
    out = []
    for q in qunit:
        sims = base @ q
        top = np.argpartition(-sims, k - 1)[:k]
        out.append(top[np.argsort(-sims[top])])
    return out


def _numpy_qps(data: D.Dataset, mask_name: str, n_queries: int = 200) -> float:
    """Exact-scan QPS over the pre-selected rows of the filter (single thread)."""
    base = data.unit[data.mask(mask_name)]
    qs = data.qunit[:n_queries]
    return n_queries / D.best_of(lambda: _numpy_pass(base, qs), 2)


def _vs_unfiltered(
    benchmark: Any, main: D.MainStore, data: D.Dataset, run: Callable[[], object]
) -> tuple[float, float]:
    """QPS of ``run`` (1000 queries) and of memini's unfiltered pass at the default breadth,
    measured round by round side by side."""
    ours, base = D.timed_pair(benchmark, run, lambda: _memini_pass(main.store, data), ROUNDS)
    return D.N_QUERIES / ours, D.N_QUERIES / base


def test_upsert_many_vs_usearch_add(
    benchmark: Any, data: D.Dataset, builds: D.Builds, main: D.MainStore
) -> None:
    """Raw usearch single-thread add of every stored row (timed here) vs memini's
    upsert_many rate from the main store's build (vectors + text + tags, durable)."""
    benchmark.group = "vector: build"
    _, seconds = D.timed_build(
        benchmark, builds, "usearch", lambda: D.build_usearch(data), lambda: D.build_usearch(data)
    )
    peer = data.n / seconds
    ours = data.n / main.build_seconds
    D.report(
        benchmark,
        "upsert_many vs usearch add (1 thread)",
        ours,
        "rows/s",
        peer=peer,
        peer_name="usearch add",
        ratio=ours / peer,
        goal=">= 2.0x",
        met=ours >= 2.0 * peer,
    )


@pytest.mark.parametrize("mask_name", ["all", "p10", "p1", "p01"])
def test_vector_search(
    benchmark: Any, data: D.Dataset, main: D.MainStore, usearch_index: Any, mask_name: str
) -> None:
    """recall@10 and single-thread QPS, unfiltered and under the 10%/1%/0.1% tag filters,
    at the default search breadth; peer: exact numpy scan of the same rows."""
    from memini import Filter

    benchmark.group = "vector: search (1000 queries/round)"
    store = main.store
    flt = None if mask_name == "all" else Filter(tags=[mask_name])
    found: list[list[int]] = []

    def run() -> None:
        found[:] = _memini_pass(store, data, flt)

    if mask_name == "all":
        usearch_index.expansion_search = DEFAULT_BREADTH
        ours, peer = D.timed_pair(
            benchmark, run, lambda: _usearch_pass(usearch_index, data), ROUNDS
        )
        qps, base = D.N_QUERIES / ours, D.N_QUERIES / peer
    else:
        qps, base = _vs_unfiltered(benchmark, main, data, run)
    recall = data.recall(found, mask_name)
    want = min(D.K, int(data.mask(mask_name).sum()))
    full = sum(len(r) == want for r in found) / len(found)
    label = "unfiltered" if mask_name == "all" else f"{mask_name} ({D.TAG_FILTERS[mask_name][1]})"
    D.report(
        benchmark,
        f"recall@10 {label}",
        recall,
        "recall",
        goal=">= 0.95",
        met=recall >= 0.95,
        full_result_lists=full,
    )
    assert full == 1.0, "a filter must never make vector_search return fewer than min(k, n)"
    np_qps = _numpy_qps(data, mask_name)
    if mask_name == "all":
        urec = data.recall(_usearch_pass(usearch_index, data))
        D.report(
            benchmark,
            "QPS unfiltered, both at breadth 64",
            qps,
            "q/s",
            peer=base,
            peer_name="usearch",
            ratio=qps / base,
            usearch_recall_at_64=urec,
            note=f"recall memini {recall:.3f}, usearch {urec:.3f}; numpy exact scan "
            f"{np_qps:,.0f} q/s (memini/numpy {qps / np_qps:.1f}x)",
        )
        return
    goal = {"p10": 0.5, "p1": 0.8}.get(mask_name)
    D.report(
        benchmark,
        f"QPS {label} / unfiltered",
        qps,
        "q/s",
        peer=base,
        peer_name="memini unfiltered",
        ratio=qps / base,
        goal=f">= {goal}x" if goal else "",
        met=None if goal is None else qps / base >= goal,
        note=f"numpy exact scan of the same rows: {np_qps:,.0f} q/s "
        f"(memini/numpy {qps / np_qps:.2f}x)",
    )


def _sweep(data: D.Dataset, main: D.MainStore, index: Any) -> dict[str, list[Point]]:
    """(breadth, recall@10, QPS) per breadth for memini (search_breadth, set on the open
    store's engine as `Store.open(search_breadth=...)` does) and usearch (expansion_search).
    The two engines alternate pass by pass at each breadth, so a neighbour's load on this
    shared machine hits both alike; QPS is the best of 3 passes."""
    if not _SWEEP:
        runs = {
            "memini": lambda: _memini_pass(main.store, data),
            "usearch": lambda: _usearch_pass(index, data),
        }
        points: dict[str, list[Point]] = {name: [] for name in runs}
        try:
            for b in BREADTHS:
                main.store._engine.set_search_breadth(b)
                index.expansion_search = b
                found = {name: run() for name, run in runs.items()}  # also warms up
                best = dict.fromkeys(runs, float("inf"))
                for _ in range(3):
                    for name, run in runs.items():
                        best[name] = min(best[name], D.best_of(run, 1))
                for name in runs:
                    recall = data.recall(found[name])
                    points[name].append((b, recall, D.N_QUERIES / best[name]))
        finally:
            main.store._engine.set_search_breadth(DEFAULT_BREADTH)
            index.expansion_search = DEFAULT_BREADTH
        _SWEEP.update(points)
    return _SWEEP


def _operating_point(points: list[Point], target: float) -> Point:
    """The first breadth reaching the target recall (else the most accurate one)."""
    for p in points:
        if p[1] >= target:
            return p
    return max(points, key=lambda p: p[1])


def test_qps_at_equal_recall(
    benchmark: Any, data: D.Dataset, main: D.MainStore, usearch_index: Any
) -> None:
    """Sweep both breadths (memini search_breadth, usearch expansion_search) and compare
    single-thread QPS (from the interleaved sweep) where each first reaches recall@10 >=
    0.95, and >= 0.97 (goal >= 1.0x at both); the table row times memini again at its 0.95
    operating point."""
    benchmark.group = "vector: QPS at recall 0.95 (1000 queries/round)"
    sweep = _sweep(data, main, usearch_index)
    ours, peer = sweep["memini"], sweep["usearch"]
    ob = _operating_point(ours, TARGET_RECALLS[0])[0]
    main.store._engine.set_search_breadth(ob)
    try:
        again = D.N_QUERIES / D.timed_rounds(
            benchmark, lambda: _memini_pass(main.store, data), ROUNDS
        )
    finally:
        main.store._engine.set_search_breadth(DEFAULT_BREADTH)
    for target in TARGET_RECALLS:
        ob, orec, oqps = _operating_point(ours, target)
        pb, prec, pqps = _operating_point(peer, target)
        ratio = oqps / pqps
        D.report(
            benchmark,
            f"QPS at recall>={target}",
            oqps,
            "q/s",
            peer=pqps,
            peer_name="usearch",
            ratio=ratio,
            goal=">= 1.0x",
            met=ratio >= 1.0,
            note=f"memini breadth {ob} (recall {orec:.3f}) vs usearch expansion_search {pb} "
            f"(recall {prec:.3f})"
            + (
                f"; sweep memini {[(b, round(r, 3), round(q)) for b, r, q in ours]}; "
                f"usearch {[(b, round(r, 3), round(q)) for b, r, q in peer]}"
                if target == TARGET_RECALLS[0]
                else ""
            ),
            sweep_memini=ours,
            sweep_usearch=peer,
            memini_qps_timed_again=again,
        )


def test_expired_20pct(benchmark: Any, data: D.Dataset, main: D.MainStore) -> None:
    """20% of the rows expired (searched with ``Filter(now=2099-06-01)``, see _data.py) vs
    the all-live namespace; recall is against the exact scan of the rows still live."""
    from memini import Filter

    benchmark.group = "vector: search (1000 queries/round)"
    flt = Filter(now=D.EXPIRED_NOW)
    found: list[list[int]] = []

    def run() -> None:
        found[:] = _memini_pass(main.store, data, flt)

    qps, base = _vs_unfiltered(benchmark, main, data, run)
    recall = data.recall(found, "live2099")
    assert all(not D.expires(r) for rows in found for r in rows)
    D.report(
        benchmark,
        "QPS 20% expired / all-live",
        qps,
        "q/s",
        peer=base,
        peer_name="all-live",
        ratio=qps / base,
        goal=">= 0.7x",
        met=qps / base >= 0.7,
        recall_at_10=recall,
    )
    D.report(
        benchmark, "recall@10 20% expired", recall, "recall", goal=">= 0.95", met=recall >= 0.95
    )


def test_vector_search_many_2_threads(benchmark: Any, data: D.Dataset, main: D.MainStore) -> None:
    """vector_search_many of the 1000 queries (parallel, 2 cores here) vs one-at-a-time."""
    benchmark.group = "vector: search (1000 queries/round)"
    out: list[list[Any]] = []

    def run() -> None:
        out[:] = main.store.vector_search_many(D.NS, data.queries, None, D.K)

    qps, base = _vs_unfiltered(benchmark, main, data, run)
    recall = data.recall([_ids(r) for r in out])
    ratio = qps / base
    D.report(
        benchmark,
        "vector_search_many / 1 thread",
        qps,
        "q/s",
        peer=base,
        peer_name="1-thread loop",
        ratio=ratio,
        goal=">= 1.6x",
        met=ratio >= 1.6,
        recall_at_10=recall,
    )


def test_two_threads_vs_one(benchmark: Any, data: D.Dataset, main: D.MainStore) -> None:
    """Goal (issue 14): 2 Python threads each calling `vector_search` on one store reach
    >= 1.85x the throughput of one thread (the core releases the GIL; raw usearch's Python
    binding measured 0.82x). The 1000 queries split in two halves, one per thread, against
    all 1000 from one thread; alternated, best of 3 each."""
    benchmark.group = "vector: search (1000 queries/round)"
    halves = (data.queries[: len(data.queries) // 2], data.queries[len(data.queries) // 2 :])
    best = {1: float("inf"), 2: float("inf")}

    def both() -> None:
        one = D.best_of(lambda: D.searches_in_threads(main.store, (data.queries,)), 1)
        two = D.best_of(lambda: D.searches_in_threads(main.store, halves), 1)
        best[1], best[2] = min(best[1], one), min(best[2], two)

    benchmark.pedantic(both, rounds=3, iterations=1)
    ratio = best[1] / best[2]
    D.report(
        benchmark,
        "vector_search: 2 threads / 1 thread",
        len(data.queries) / best[2],
        "q/s",
        peer=len(data.queries) / best[1],
        peer_name="1 thread",
        ratio=ratio,
        goal=">= 1.85x (2 cores)",
        met=ratio >= 1.85,
    )


@pytest.fixture(scope="module")
def small_ns(data: D.Dataset, main: D.MainStore) -> int:
    """A 1000-row namespace ``small`` inside the main store (rows 0..999 again, ids s...)."""
    n = min(1000, data.n)
    mems = [data.memory(i, namespace="small", id=f"s{i:06d}") for i in range(n)]
    main.store.upsert_many(mems)
    return n


def test_small_namespace(benchmark: Any, data: D.Dataset, main: D.MainStore, small_ns: int) -> None:
    """A 1k-row namespace next to the big one: results exact, and faster than the big one."""
    benchmark.group = "vector: search (1000 queries/round)"
    found: list[list[int]] = []

    def run() -> None:
        found[:] = _memini_pass(main.store, data, None, "small")

    qps, base = _vs_unfiltered(benchmark, main, data, run)
    _, kth = D.exact_topk(data.unit[:small_ns], data.qunit, D.K)
    exact = 0
    for qi, rows in enumerate(found):
        cos = data.unit[rows] @ data.qunit[qi]
        exact += len(rows) == D.K and bool((cos >= kth[qi] - 1e-5).all())
    D.report(
        benchmark,
        "QPS 1k-row namespace / big one",
        qps,
        "q/s",
        peer=base,
        peer_name=f"{data.n // 1000}k namespace",
        ratio=qps / base,
        goal="> 1x",
        met=qps > base,
        exact_fraction=exact / len(found),
    )
    assert exact == len(found), f"only {exact}/{len(found)} small-namespace searches exact"


_MANY_NS = """
import json, sys, time
import numpy as np
import memini
qs = np.load(sys.argv[2]).astype(np.float32)
n_ns, k = int(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
s = memini.Store.open(sys.argv[1])
t1 = time.perf_counter()
out = [[h.memory.id for h in s.vector_search(f"t{j:05d}", qs[j % len(qs)], k=k)]
       for j in range(n_ns)]
t2 = time.perf_counter()
s.close()
print(json.dumps({"open": t1 - t0, "qps": n_ns / (t2 - t1), "ids": out}))
"""


def test_many_small_namespaces(
    benchmark: Any, data: D.Dataset, bench_dir: Path, queries_file: Path
) -> None:
    """ROWS/10 namespaces of 10 rows (10k at 100k rows) in their own store: open time in a
    fresh process (goal < 2 s) and one k=5 search per namespace, every one exact. Namespace
    j holds rows (10j + r) % n, r = 0..9, ids t{j:05d}{r}."""
    import memini

    benchmark.group = "vector: 10k namespaces"
    n_ns = D.ROWS // 10
    k = 5
    rows = (np.arange(n_ns)[:, None] * 10 + np.arange(10)[None, :]) % data.n
    path = bench_dir / "many-ns"
    store = memini.Store.open(path, dims=D.DIMS, metric="cos")
    mems = [
        data.memory(int(rows[j, r]), namespace=f"t{j:05d}", id=f"t{j:05d}{r}")
        for j in range(n_ns)
        for r in range(10)
    ]
    build = D.best_of(
        lambda: [store.upsert_many(mems[b : b + D.BATCH]) for b in range(0, len(mems), D.BATCH)],
        1,
    )
    store.close()
    runs: list[dict[str, Any]] = []
    benchmark.pedantic(
        lambda: runs.append(
            D.run_python(_MANY_NS, str(path), str(queries_file), str(n_ns), str(k))
        ),
        rounds=2,
        iterations=1,
    )
    exact = 0
    for j, ids in enumerate(runs[-1]["ids"]):
        got = rows[j, [int(i[-1]) for i in ids]]
        q = data.qunit[j % D.N_QUERIES]
        cos_all = np.sort(data.unit[rows[j]] @ q)[::-1]
        cos_got = data.unit[got] @ q
        exact += len(ids) == k and bool(np.allclose(cos_got, cos_all[:k], atol=1e-5))
    worst_open = max(r["open"] for r in runs)
    D.report(
        benchmark,
        f"open store with {n_ns} namespaces",
        worst_open,
        "s",
        goal="< 2 s",
        met=worst_open < 2.0,
        search_qps=runs[-1]["qps"],
        build_rows_per_s=len(mems) / build,
        note=f"worst of {len(runs)} fresh processes; {runs[-1]['qps']:,.0f} searches/s; "
        f"exact {exact}/{n_ns}; build {len(mems) / build:,.0f} rows/s",
    )
    D.report(
        benchmark,
        "many-namespace searches exact",
        exact / n_ns,
        "fraction",
        goal="= 1.0",
        met=exact == n_ns,
    )
    assert exact == n_ns, f"only {exact}/{n_ns} small-namespace searches exact"


_RSS = """
import json, sys
import numpy as np
import psutil
import memini
me = psutil.Process()
base = me.memory_info().rss
qs = np.load(sys.argv[2]).astype(np.float32)
s = memini.Store.open(sys.argv[1])
opened = me.memory_info().rss
for q in qs:
    s.vector_search("main", q, k=10)
for w in ("python library", "data tool", "web framework", "machine learning") * 50:
    s.keyword_search("main", w, k=10)
for i in range(0, int(sys.argv[3]), 997):
    s.get("main", f"m{i:06d}")
warm = me.memory_info().rss
s.close()
print(json.dumps({"base": base, "opened": opened, "warm": warm}))
"""


def test_memory_rss(
    benchmark: Any, data: D.Dataset, main: D.MainStore, usearch_index: Any, queries_file: Path
) -> None:
    """RSS of a fresh process that opens the main store and warms it (1000 vector searches,
    200 keyword searches, ~100 gets) vs the memory budget: 1.5x raw usearch's `memory_usage`
    + 100 MB (the allowance for the interpreter, numpy and the rows)."""
    benchmark.group = "vector: memory"
    runs: list[dict[str, Any]] = []
    main.close()
    try:
        benchmark.pedantic(
            lambda: runs.append(D.run_python(_RSS, str(main.path), str(queries_file), str(data.n))),
            rounds=1,
            iterations=1,
        )
    finally:
        main.reopen()
    r = runs[-1]
    mb = 1024 * 1024
    ours = r["warm"] / mb
    budget = 1.5 * usearch_index.memory_usage / mb + 100
    D.report(
        benchmark,
        "RSS of open warmed store",
        ours,
        "MB",
        peer=budget,
        peer_name="1.5x usearch + 100MB",
        ratio=ours / budget,
        goal="<= 1.0x",
        met=ours <= budget,
        note=f"{r['base'] / mb:,.0f} MB before open (python+numpy+memini imported), "
        f"{r['opened'] / mb:,.0f} MB right after open, {ours:,.0f} MB warm; usearch "
        f"memory_usage {usearch_index.memory_usage / mb:,.0f} MB",
    )


CHECKPOINT_EVERY = 50_000  # changes between periodic index checkpoints (rust/engine/commit.rs)


def test_searches_during_checkpoint(
    benchmark: Any, data: D.Dataset, main: D.MainStore, bench_dir: Path
) -> None:
    """How long the periodic index checkpoint stalls writes and searches. On a backup of the
    main store, one thread re-upserts the rows (1000 a batch) past the next checkpoint (every
    50,000 changes) while this thread searches; the writer's slowest batch holds the
    checkpoint. Peer: the searches outside that batch."""
    import threading

    import memini

    benchmark.group = "vector: checkpoint"
    copy = bench_dir / "checkpoint"
    main.store.backup(copy)
    store = memini.Store.open(copy)
    mems = [data.memory(i) for i in range(data.n)]
    batches = [mems[b : b + D.BATCH] for b in range(0, data.n, D.BATCH)]
    n_batches = CHECKPOINT_EVERY // D.BATCH + 10
    writes: list[tuple[float, float]] = []
    searches: list[tuple[float, float]] = []

    def write() -> None:
        for j in range(n_batches):
            t0 = time.perf_counter()
            store.upsert_many(batches[j % len(batches)])
            writes.append((t0, time.perf_counter()))

    def run() -> None:
        writer = threading.Thread(target=write)
        writer.start()
        qi = 0
        while writer.is_alive():
            t0 = time.perf_counter()
            store.vector_search(D.NS, data.queries[qi % len(data.queries)], k=D.K)
            searches.append((t0, time.perf_counter()))
            qi += 1
        writer.join()

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        store.close()
    assert len(writes) == n_batches
    start, end = max(writes, key=lambda w: w[1] - w[0])
    batch_ms = sorted(1000 * (e - s) for s, e in writes)
    during = [e - s for s, e in searches if s < end and e > start]
    outside = [e - s for s, e in searches if e <= start or s >= end]
    inside, rest = D.percentiles_ms(during or [0.0]), D.percentiles_ms(outside)
    median = batch_ms[len(batch_ms) // 2]
    D.report(
        benchmark,
        "search p99 during checkpoint / outside",
        inside["p99_ms"],
        "ms",
        peer=rest["p99_ms"],
        peer_name="outside",
        ratio=inside["p99_ms"] / rest["p99_ms"],
        note=f"checkpoint batch {batch_ms[-1]:,.0f} ms (median batch {median:,.0f} ms); "
        f"{len(during)} searches during it: p50 {inside['p50_ms']} ms, max "
        f"{inside['max_ms']} ms; outside: p50 {rest['p50_ms']} ms, max {rest['max_ms']} ms",
        checkpoint_batch_ms=batch_ms[-1],
        median_batch_ms=median,
        searches_during=len(during),
    )


def test_single_writes_across_checkpoint(
    benchmark: Any, data: D.Dataset, main: D.MainStore, bench_dir: Path
) -> None:
    """Worst single-row write across a periodic index checkpoint vs the median write. On a
    backup of the main store, batches bring the changes since the last checkpoint
    (``stats()["changes_since_checkpoint"]``) to just short of the next one (untimed); then
    single-row upserts (each its own durable commit) run until the background checkpoint they
    start has finished, and then as a control, the same writes with no checkpoint running, for
    2 s and at least 3x as many writes. Goal (the issue's): worst <= 5x median. Beside it, two
    rows judged against the control, since fsync latency alone is noisy on a shared disk: p99
    during the checkpoint vs the control's p99, and the worst write during it vs the worst of
    as many consecutive control writes (the median over the control's runs of that length).

    The 99k prepared memories are frozen out of Python's cyclic GC first: a full collection
    walks them all (~110 ms, measured) wherever it falls, and it is the test's memory, not
    the store's."""
    import gc

    import memini

    benchmark.group = "vector: checkpoint"
    copy = bench_dir / "checkpoint-single"
    main.store.backup(copy)
    store = memini.Store.open(copy)
    mems = [data.memory(i) for i in range(data.n)]
    gc.collect()
    gc.freeze()
    during: list[float] = []
    after: list[float] = []
    took: list[float] = []

    def run() -> None:
        b, waited = 0, time.perf_counter()
        while True:
            short = CHECKPOINT_EVERY - store.stats()["changes_since_checkpoint"]
            if short <= 0:  # a checkpoint is running (the backup's changes started it)
                assert time.perf_counter() - waited < 300, "the checkpoint never ended"
                time.sleep(0.05)
                continue
            if short <= 400:
                break
            n = min(D.BATCH, short - 200)
            store.upsert_many(mems[b % data.n : b % data.n + n])
            b += n
        D.drained(store)
        before = store.stats()["checkpoints"]
        i, started, done_at = 0, time.perf_counter(), None

        def control_short() -> bool:
            return time.perf_counter() - done_at < 2.0 or len(after) < 3 * len(during)

        while done_at is None or control_short():
            t0 = time.perf_counter()
            store.upsert(mems[i % data.n])
            (during if done_at is None else after).append(time.perf_counter() - t0)
            i += 1
            if done_at is None and store.stats()["checkpoints"] > before:
                done_at = time.perf_counter()
                took.append(done_at - started)
            assert i < 100_000, "no checkpoint came"

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        store.close()
        gc.unfreeze()
    p = D.percentiles_ms(during + after)
    during_p, control = D.percentiles_ms(during), D.percentiles_ms(after)
    worst, median = during_p["max_ms"], p["p50_ms"]
    n = len(during)
    # the worst of each run of n consecutive control writes: what n writes cost with no checkpoint
    runs = sorted(1000 * max(after[j : j + n]) for j in range(0, len(after) - n + 1, n))
    control_worst = runs[len(runs) // 2]
    D.report(
        benchmark,
        "worst single write across a checkpoint / median",
        worst,
        "ms",
        peer=median,
        peer_name="median write",
        ratio=worst / median,
        goal="<= 5x",
        met=worst / median <= 5,
        note=f"{n} single-row upserts during the checkpoint ({took[0]:.2f} s), {len(after)} "
        f"after it (the control); p50 {median} ms, p99 {p['p99_ms']} ms; the control's own "
        f"worst {control['max_ms']} ms = {control['max_ms'] / control['p50_ms']:.1f}x its median",
        writes=n + len(after),
        checkpoint_s=round(took[0], 3),
    )
    D.report(
        benchmark,
        "single write p99 during a checkpoint / control",
        during_p["p99_ms"],
        "ms",
        peer=control["p99_ms"],
        peer_name="control p99",
        ratio=during_p["p99_ms"] / control["p99_ms"],
        note=f"p50 during {during_p['p50_ms']} ms vs {control['p50_ms']} ms in the control",
    )
    D.report(
        benchmark,
        "worst single write during a checkpoint / control",
        worst,
        "ms",
        peer=control_worst,
        peer_name=f"worst of {n} control writes",
        ratio=worst / control_worst,
        note=f"the worst of each of the control's {len(runs)} runs of {n} writes: "
        + ", ".join(f"{r:.2f}" for r in runs)
        + " ms",
    )
