"""Core engine: bulk and durable writes, point reads, filtered count/list, reopen time.

Peers here are the disk itself (fsync latency measured beside the writes) and the goals of
the core-engine issue. See conftest.py / _data.py for the data and the stores.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import _data as D


def test_upsert_many(benchmark: Any, data: D.Dataset, bench_dir: Path, builds: D.Builds) -> None:
    """upsert_many of every stored row, batches of 1000 (vector + text + tags), one timed
    build; the store built here is the session's main store."""
    benchmark.group = "core: bulk write"
    path = bench_dir / "main"
    again = bench_dir / "main-again"

    def throwaway() -> tuple[Any, float]:
        store, seconds = D.build_main_store(data, again)
        store.close()
        return None, seconds

    _, seconds = D.timed_build(
        benchmark, builds, "main", lambda: D.build_main_store(data, path), throwaway
    )
    D.report(
        benchmark,
        "upsert_many rows/s",
        data.n / seconds,
        "rows/s",
        note=f"{data.n} rows in {seconds:.1f} s, batches of {D.BATCH}; per batch "
        + (
            f"p50 {np.median(D.BATCH_SECONDS):.3f} s, max {max(D.BATCH_SECONDS):.3f} s "
            f"(batch #{int(np.argmax(D.BATCH_SECONDS))})"
            if D.BATCH_SECONDS
            else "n/a"
        ),
        batch_seconds=[round(x, 4) for x in D.BATCH_SECONDS],
    )


def _durable_rate(store: Any, data: D.Dataset, threads: int, per_thread: int, tag: str) -> float:
    """Durable single-row upserts per second from ``threads`` threads at once."""
    start = threading.Barrier(threads + 1)

    def work(t: int) -> None:
        mems = [
            data.memory((t * per_thread + j) % data.n, namespace="dur", id=f"{tag}{t:02d}{j:06d}")
            for j in range(per_thread)
        ]
        start.wait()
        for m in mems:
            store.upsert(m)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return threads * per_thread / (time.perf_counter() - t0)


@pytest.fixture(scope="module")
def durable_store(bench_dir: Path) -> Any:
    """A separate on-disk store for single-row durable writes."""
    import memini

    store = memini.Store.open(bench_dir / "durable", dims=D.DIMS, metric="cos")
    yield store
    store.close()


def test_durable_upsert_group_commit(
    benchmark: Any, data: D.Dataset, durable_store: Any, bench_dir: Path
) -> None:
    """Single `upsert` calls (each durable) into a fresh store: 1 thread x 200, then 8
    threads x 100 sharing commits, twice alternated (best rate of each kept); this disk's
    fsync latency measured just before."""
    benchmark.group = "core: durable upsert"
    rates: dict[int, float] = {1: 0.0, 8: 0.0}
    fsync_ms = D.fsync_latency_ms(bench_dir)
    rounds = iter(range(100))

    def run() -> None:
        r = next(rounds)
        rates[1] = max(rates[1], _durable_rate(durable_store, data, 1, 200, f"a{r}"))
        rates[8] = max(rates[8], _durable_rate(durable_store, data, 8, 100, f"b{r}"))

    benchmark.pedantic(run, rounds=2, iterations=1)
    fsync_bound = 1000.0 / fsync_ms
    D.report(
        benchmark,
        "durable upsert 1 thread",
        rates[1],
        "ops/s",
        peer=fsync_bound,
        peer_name="1/fsync",
        ratio=rates[1] / fsync_bound,
        fsync_ms=round(fsync_ms, 3),
        note=f"fsync (append 4 KiB) median {fsync_ms:.2f} ms",
    )
    ratio = rates[8] / rates[1]
    D.report(
        benchmark,
        "durable upsert 8 threads",
        rates[8],
        "ops/s",
        peer=rates[1],
        peer_name="1 thread",
        ratio=ratio,
        goal=">= 4x",
        met=ratio >= 4.0,
    )


def test_get(benchmark: Any, data: D.Dataset, main: D.MainStore) -> None:
    """`get` of random ids (seeded) from the main namespace."""
    benchmark.group = "core: reads"
    rng = np.random.default_rng(D.SEED)
    ids = itertools.cycle([D.row_id(int(i)) for i in rng.permutation(data.n)[:5000]])
    store = main.store
    m = benchmark(lambda: store.get(D.NS, next(ids)))
    assert m.namespace == D.NS
    mean = D.bench_mean(benchmark)
    if mean is not None:
        D.report(benchmark, "get", 1.0 / mean, "ops/s", note=f"mean {mean * 1e6:.1f} us")


@pytest.mark.parametrize("op", ["count", "list100"])
def test_filtered_count_list(benchmark: Any, data: D.Dataset, main: D.MainStore, op: str) -> None:
    """`count` and `list(limit=100)` under the 1% tag filter (``p1``); goal < 5 ms each."""
    from memini import Filter

    benchmark.group = "core: filtered count/list"
    store = main.store
    f = Filter(tags=["p1"])
    want = int(data.mask("p1").sum())
    if op == "count":
        got = benchmark(lambda: store.count(D.NS, f))
        assert got == want
    else:
        got = benchmark(lambda: store.list(D.NS, f, 100))
        assert len(got) == min(100, want)
        assert all("p1" in m.tags for m in got)
    mean = D.bench_mean(benchmark)
    if mean is not None:
        D.report(
            benchmark,
            f"{op} p1 (1%) filter",
            mean * 1000,
            "ms",
            goal="< 5 ms",
            met=mean < 0.005,
            note=f"{want} matching rows",
        )


_REOPEN = """
import json, sys, time
import numpy as np
t_import = time.perf_counter()
import memini
q = np.load(sys.argv[2], mmap_mode="r")[-1].astype(np.float32)
t0 = time.perf_counter()
s = memini.Store.open(sys.argv[1])
t1 = time.perf_counter()
hits = s.vector_search("main", q, k=10)
t2 = time.perf_counter()
kw = s.keyword_search("main", "python library", k=10)
t3 = time.perf_counter()
s.close()
t4 = time.perf_counter()
print(json.dumps({"open": t1 - t0, "open_search": t2 - t0, "keyword": t3 - t2,
                  "close": t4 - t3, "hits": len(hits), "kw_hits": len(kw)}))
"""


def test_reopen(benchmark: Any, main: D.MainStore, queries_file: Path) -> None:
    """Close the main store, then in a fresh process time Store.open + one vector search
    (3 rounds; the first follows our close, later ones follow the subprocess's own close)."""
    benchmark.group = "core: reopen"
    runs: list[dict[str, Any]] = []
    main.close()
    try:
        benchmark.pedantic(
            lambda: runs.append(D.run_python(_REOPEN, str(main.path), str(queries_file))),
            rounds=3,
            iterations=1,
        )
    finally:
        main.reopen()
    assert all(r["hits"] == 10 for r in runs)
    worst = max(r["open_search"] for r in runs)
    D.report(
        benchmark,
        "reopen: open + 1 search",
        worst,
        "s",
        goal="< 1 s",
        met=worst < 1.0,
        note="worst of 3 fresh processes; open/open+search/close per run: "
        + ", ".join(f"{r['open']:.3f}/{r['open_search']:.3f}/{r['close']:.3f}" for r in runs),
        reopen_runs=runs,
    )
