"""Shared benchmark data and helpers: the pypi-100k dataset, derived tags, exact ground truth.

Everything here is deterministic (fixed seeds, derived from row numbers), so two runs of the
suite measure the same stores and the same queries.

Dataset: pypi-100k, 100k PyPI summaries with all-MiniLM-L6-v2 vectors, from
``MEMINI_BENCH_DATA`` when set (it must then hold ``texts.jsonl`` and ``vectors.f16.npy``),
else from ``<repo>/../shared/datasets/pypi-100k`` when that exists. Without it (a fresh clone
has no ``../shared``) the benchmarks run on the demo sample the repository ships
(``python/memini/data/sample.*.gz``, see ``scripts/make_sample.py``): the dataset's first
10,000 rows, same texts, same vectors, so every benchmark and its recall still mean
something, at sample size. `describe` is the line that says which data ran.

The last 1,000 rows of the data are the queries and are never stored; the store holds the
first ``MEMINI_BENCH_ROWS`` rows (default 100000), capped so that it never reaches the query
rows (at 100000 the store holds 99,000 rows of pypi-100k; the sample holds at most 9,000).

Derived per stored row ``i`` (0-based row number in the file):

- id ``m{i:06d}``, namespace ``main``, content = the row's text, tier semantic;
- tags (selectivity filters): ``p10`` when ``i % 10 == 0`` (10%), ``p1`` when
  ``i % 100 == 0`` (1%), ``p01`` when ``i % 1000 == 0`` (0.1%); nested, so a ``p01`` row also
  carries ``p1`` and ``p10``;
- ``expires_at`` = 2099-01-01 UTC on rows with ``i % 5 == 1`` (20%). They are live at the
  wall clock, so the namespace is all-live for every ordinary search; a search with
  ``Filter(now=EXPIRED_NOW)`` (2099-06-01) sees exactly those 20% as expired.

Recall is tie-aware: a returned row counts as a hit when its exact cosine to the query is at
least the exact k-th best cosine (minus 1e-5). The corpus has many duplicate summaries (equal
vectors), so comparing id sets would punish an engine for picking an equally good twin.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASET = REPO.parent / "shared" / "datasets" / "pypi-100k"
SAMPLE_DIR = REPO / "python" / "memini" / "data"
DATASET_FILES = ("texts.jsonl", "vectors.f16.npy")


def _dataset_dir() -> Path | None:
    """pypi-100k's directory: ``MEMINI_BENCH_DATA`` when set (even if wrong: `check_data`
    then says so, never a silent fallback), else ``../shared``'s copy when it exists, else
    None (the shipped sample runs)."""
    env = os.environ.get("MEMINI_BENCH_DATA")
    if env:
        return Path(env)
    return SHARED_DATASET if SHARED_DATASET.is_dir() else None


DATA_DIR = _dataset_dir()
ROWS = int(os.environ.get("MEMINI_BENCH_ROWS", "100000"))
N_QUERIES = 1000
DIMS = 384
K = 10
SEED = 20261130
NS = "main"
EXPIRES_AT = datetime(2099, 1, 1, tzinfo=UTC)
EXPIRED_NOW = datetime(2099, 6, 1, tzinfo=UTC)
# selectivity filters: tag -> (row predicate modulus, human label)
TAG_FILTERS = {"p10": (10, "10%"), "p1": (100, "1%"), "p01": (1000, "0.1%")}
BATCH = 1000
_STOP = frozenset(
    (  # noqa: SIM905 - a word list reads best as one string
        "the and for with from that this your are you into using use based via its can all "
        "not has have was our out any one new more some other"
    ).split()
)


def tags_for(i: int) -> list[str]:
    """The derived tags of stored row ``i`` (see the module docstring)."""
    return [t for t, (mod, _) in TAG_FILTERS.items() if i % mod == 0]


def row_id(i: int) -> str:
    """The memory id of stored row ``i``."""
    return f"m{i:06d}"


def expires(i: int) -> bool:
    """Whether stored row ``i`` carries the far-future expiry (20% of rows)."""
    return i % 5 == 1


@dataclass
class Dataset:
    """The store rows and the query rows, loaded once per session."""

    texts: list[str]
    vectors: np.ndarray  # (n, DIMS) float32, as stored
    query_texts: list[str]
    queries: np.ndarray  # (N_QUERIES, DIMS) float32
    _truth: dict[Any, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of stored rows."""
        return len(self.texts)

    @cached_property
    def unit(self) -> np.ndarray:
        """Stored vectors scaled to unit length (cosine = dot product)."""
        return _normalise(self.vectors)

    @cached_property
    def qunit(self) -> np.ndarray:
        """Query vectors scaled to unit length."""
        return _normalise(self.queries)

    def mask(self, name: str) -> np.ndarray:
        """Boolean row mask: a tag name from TAG_FILTERS, ``"live2099"`` or ``"all"``."""
        idx = np.arange(self.n)
        if name == "all":
            return np.ones(self.n, dtype=bool)
        if name == "live2099":  # rows still live at EXPIRED_NOW
            return idx % 5 != 1
        return idx % TAG_FILTERS[name][0] == 0

    def truth(self, mask_name: str = "all", k: int = K) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k row numbers (N_QUERIES, k) and the k-th best cosine per query."""
        key = (mask_name, k)
        if key not in self._truth:
            rows = np.flatnonzero(self.mask(mask_name))
            top, kth = exact_topk(self.unit[rows], self.qunit, k)
            self._truth[key] = (rows[top], kth)
        return self._truth[key]

    def recall(self, found: Sequence[Sequence[int]], mask_name: str = "all", k: int = K) -> float:
        """Mean tie-aware recall@k of per-query result row numbers against the exact scan."""
        _, kth = self.truth(mask_name, k)
        want = min(k, int(self.mask(mask_name).sum()))
        total = 0.0
        for qi, rows in enumerate(found):
            rows = list(rows)[:k]
            if not rows:
                continue
            cos = self.unit[rows] @ self.qunit[qi]
            total += min(want, int((cos >= kth[qi] - 1e-5).sum())) / want
        return total / len(found)

    def memory(self, i: int, namespace: str = NS, id: str | None = None) -> Any:
        """The `memini.Memory` of stored row ``i`` (vector, text, tags, derived expiry)."""
        from memini import Memory

        return Memory(
            id=id or row_id(i),
            namespace=namespace,
            content=self.texts[i],
            tags=tags_for(i),
            expires_at=EXPIRES_AT if expires(i) else None,
            embedding=self.vectors[i],
        )

    @cached_property
    def keyword_queries(self) -> list[str]:
        """1000 two-word queries: two distinct whole words (ASCII letters only, >= 3 long, not
        a stop word) drawn with a seeded RNG from each query row's text, topped up from the
        next rows' texts."""
        rng = np.random.default_rng(SEED)
        out = []
        texts = self.query_texts
        for j in range(N_QUERIES):
            words: list[str] = []
            step = 0
            while len(words) < 2:
                for w in _words(texts[(j + step) % len(texts)]):
                    if w not in words:
                        words.append(w)
                step += 1
            a, b = rng.choice(len(words), size=2, replace=False)
            out.append(f"{words[a]} {words[b]}")
        return out


def first_words(text: str, n: int) -> list[str]:
    """The first ``n`` query words of ``text`` (lowercase, >= 3 letters, not stop words)."""
    return _words(text)[:n]


def _words(text: str) -> list[str]:
    """Whole words of ``text`` as the engines tokenise it (runs of letters/digits), kept when
    all letters, >= 3 long and not stop words; lowercase."""
    import re

    return [
        w
        for w in re.findall(r"[^\W_]+", text.lower())
        if len(w) >= 3 and w.isascii() and w.isalpha() and w not in _STOP
    ]


def _normalise(v: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.maximum(norms, 1e-12)).astype(np.float32)


def exact_topk(base: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by dot product (positions into ``base``) and each query's k-th best score."""
    k_eff = min(k, len(base))
    tops = np.empty((len(queries), k_eff), dtype=np.int64)
    kth = np.empty(len(queries), dtype=np.float32)
    for s in range(0, len(queries), 100):
        sims = queries[s : s + 100] @ base.T
        part = np.argpartition(-sims, k_eff - 1, axis=1)[:, :k_eff]
        psims = np.take_along_axis(sims, part, axis=1)
        order = np.argsort(-psims, axis=1, kind="stable")
        tops[s : s + 100] = np.take_along_axis(part, order, axis=1)
        kth[s : s + 100] = np.take_along_axis(psims, order, axis=1)[:, -1]
    return tops, kth


def check_data() -> str | None:
    """Why the data cannot be loaded (``MEMINI_BENCH_DATA`` names a directory without the
    dataset's files), or None when it can."""
    if DATA_DIR is None:
        return None
    missing = [name for name in DATASET_FILES if not (DATA_DIR / name).is_file()]
    if not missing:
        return None
    return (
        f"MEMINI_BENCH_DATA={DATA_DIR} has no {' or '.join(missing)} (expected pypi-100k: "
        f"{', '.join(DATASET_FILES)}); point it at the dataset, or unset it to run on the "
        "demo sample the repository ships"
    )


def describe(stored: int | None = None) -> str:
    """The line that says which data the benchmarks run on (``stored``: rows in the store,
    once loaded)."""
    if DATA_DIR is not None:
        line = f"bench data: pypi-100k at {DATA_DIR}"
    else:
        line = (
            f"bench data: shipped demo sample at {SAMPLE_DIR} (pypi-100k's first 10,000 rows) "
            "-- set MEMINI_BENCH_DATA for the real dataset"
        )
    if stored is not None:
        line += f"; {stored:,} rows stored"
        if stored < ROWS:
            line += f" ({ROWS:,} requested: all there are before the query rows)"
        line += f", {N_QUERIES:,} held-out queries"
    return line


def load(rows: int = ROWS, *, require_dataset: bool = False) -> Dataset:
    """Load the first ``rows`` rows (capped before the query rows) and the 1000 query rows,
    from pypi-100k or, without it, from the shipped sample (refused if ``require_dataset``)."""
    if problem := check_data():
        raise FileNotFoundError(problem)
    if DATA_DIR is not None:
        vec_all = np.load(DATA_DIR / "vectors.f16.npy", mmap_mode="r")
        with open(DATA_DIR / "texts.jsonl", encoding="utf-8") as f:
            return _split(vec_all, f, rows)
    if require_dataset:
        raise FileNotFoundError(
            f"pypi-100k not found (no {SHARED_DATASET}): set MEMINI_BENCH_DATA to its directory"
        )
    with gzip.open(SAMPLE_DIR / "sample.f16.npy.gz", "rb") as g:
        vec_all = np.lib.format.read_array(g)
    with gzip.open(SAMPLE_DIR / "sample.jsonl.gz", "rt", encoding="utf-8") as f:
        return _split(vec_all, f, rows)


def _split(vec_all: np.ndarray, lines: Iterable[str], rows: int) -> Dataset:
    """The stored rows and the query rows of a (vectors, JSON lines with ``content``) pair."""
    total = len(vec_all)
    n = min(rows, total - N_QUERIES)
    texts: list[str] = []
    query_texts: list[str] = []
    for i, line in enumerate(lines):
        if i < n:
            texts.append(json.loads(line)["content"])
        elif i >= total - N_QUERIES:
            query_texts.append(json.loads(line)["content"])
    return Dataset(
        texts=texts,
        vectors=np.ascontiguousarray(vec_all[:n], dtype=np.float32),
        query_texts=query_texts,
        queries=np.ascontiguousarray(vec_all[total - N_QUERIES :], dtype=np.float32),
    )


def row_of(memory_id: str) -> int:
    """Inverse of `row_id` for ids of the form ``<letter><digits>``."""
    return int(memory_id[1:])


# ---------------------------------------------------------------------------- timing


def best_of(fn: Callable[[], object], rounds: int) -> float:
    """Best wall time in seconds of ``rounds`` calls of ``fn``."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def searches_in_threads(store: Any, parts: Sequence[np.ndarray]) -> None:
    """`vector_search` of each query of ``parts[i]`` from thread i, all threads at once."""
    from concurrent.futures import ThreadPoolExecutor

    def run(part: np.ndarray) -> None:
        for q in part:
            store.vector_search(NS, q, None, K)

    with ThreadPoolExecutor(len(parts)) as pool:
        list(pool.map(run, parts))


def timed_rounds(benchmark: Any, fn: Callable[[], object], rounds: int) -> float:
    """Time ``fn`` through pytest-benchmark (so it shows in the table) and return the best
    round in seconds; with ``--benchmark-disable`` the function runs once, still timed here."""
    times: list[float] = []

    def wrapped() -> None:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)

    benchmark.pedantic(wrapped, rounds=rounds, iterations=1)
    return min(times)


def timed_pair(
    benchmark: Any, fn: Callable[[], object], beside: Callable[[], object], rounds: int
) -> tuple[float, float]:
    """Like `timed_rounds`, and ``beside`` (the thing ``fn`` is compared with) runs right
    before each round, untimed by pytest-benchmark but timed here: on a shared machine the
    two then see the same load. Each starts with Python's garbage collected (untimed), so
    neither pays a collection of what ran before it. Returns the best seconds of ``fn`` and
    of ``beside``."""
    other: list[float] = []

    def setup() -> None:
        gc.collect()
        t0 = time.perf_counter()
        beside()
        other.append(time.perf_counter() - t0)
        gc.collect()

    times: list[float] = []

    def wrapped() -> None:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)

    benchmark.pedantic(wrapped, setup=setup, rounds=rounds, iterations=1)
    return min(times), min(other)


def fsync_latency_ms(directory: str | os.PathLike[str], n: int = 50) -> float:
    """Median latency in ms of os.fsync after appending 4 KiB to a small file in
    ``directory`` (the file grows, so each fsync also commits file-system metadata, like a
    database commit does). Measured right beside each durable-write benchmark: on a shared
    disk it moves with the neighbours' load."""
    fd, path = tempfile.mkstemp(dir=directory, prefix="fsync-probe-")
    try:
        lat = []
        block = b"x" * 4096
        for _ in range(n):
            os.write(fd, block)
            t0 = time.perf_counter()
            os.fsync(fd)
            lat.append(time.perf_counter() - t0)
        return float(np.median(lat) * 1000.0)
    finally:
        os.close(fd)
        os.unlink(path)


def percentiles_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p99 / max of a list of latencies in seconds, as ms."""
    a = np.asarray(seconds) * 1000.0
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def run_python(code: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (``sys.argv[1:] = args``); it must print one JSON
    object on its last stdout line, which is returned."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- reporting


@dataclass
class Result:
    """One reported number: memini next to its peer, with the goal it is judged by."""

    name: str
    memini: float
    unit: str
    peer: float | None = None
    peer_name: str = ""
    ratio: float | None = None
    goal: str = ""
    met: bool | None = None
    note: str = ""


RESULTS: list[Result] = []


def report(
    benchmark: Any,
    name: str,
    memini: float,
    unit: str,
    *,
    peer: float | None = None,
    peer_name: str = "",
    ratio: float | None = None,
    goal: str = "",
    met: bool | None = None,
    note: str = "",
    **extra: Any,
) -> None:
    """Record a number in ``benchmark.extra_info`` and in the end-of-session summary table.

    Goals are judged (``met``) but never asserted: CI smoke runs are too small and too noisy.
    """
    key = name.replace(" ", "_")
    info = benchmark.extra_info
    info[key] = round(memini, 4)
    info[f"{key}_unit"] = unit
    if peer is not None:
        info[f"{key}_peer_{peer_name or 'peer'}"] = round(peer, 4)
    if ratio is not None:
        info[f"{key}_ratio"] = round(ratio, 4)
    if goal:
        info[f"{key}_goal"] = goal
        info[f"{key}_met"] = met
    for k, v in extra.items():
        info[k] = v
    RESULTS.append(Result(name, memini, unit, peer, peer_name, ratio, goal, met, note))


def summary_lines(results: Iterable[Result]) -> list[str]:
    """The summary table printed at the end of the session."""
    lines = [
        f"{'measure':<52} {'memini':>12} {'peer':>12} {'ratio':>8}  {'goal':<14} met",
        "-" * 108,
    ]
    for r in results:
        peer = "" if r.peer is None else f"{r.peer:,.4g}"
        ratio = "" if r.ratio is None else f"{r.ratio:.3f}"
        met = "" if r.met is None else ("yes" if r.met else "NO")
        mem = f"{r.memini:,.4g}"
        label = f"{r.name} [{r.unit}]" + (f" vs {r.peer_name}" if r.peer_name else "")
        lines.append(f"{label:<52} {mem:>12} {peer:>12} {ratio:>8}  {r.goal:<14} {met}")
        if r.note:
            lines.append(f"    {r.note}")
    return lines


# ---------------------------------------------------------------------------- stores


class MainStore:
    """The shared main store; tests that need its directory in another process `close`
    it and `reopen` it afterwards, so `.store` is always the live handle."""

    def __init__(self, path: Path, build_seconds: float, store: Any) -> None:
        self.path = path
        self.build_seconds = build_seconds
        self.store = store

    def reopen(self) -> None:
        """Reopen in this process after `close`."""
        import memini

        self.store = memini.Store.open(self.path)

    def close(self) -> None:
        """Close (checkpoints the indexes and releases the directory lock)."""
        self.store.close()


class Builds:
    """Session cache of expensive builds, each timed once (seconds kept beside the value)."""

    def __init__(self) -> None:
        self._done: dict[str, tuple[Any, float]] = {}

    def has(self, key: str) -> bool:
        """Whether ``key`` has been built."""
        return key in self._done

    def get(self, key: str, build: Callable[[], Any]) -> tuple[Any, float]:
        """The value of ``key`` and its build time, building it on first use."""
        if key not in self._done:
            t0 = time.perf_counter()
            value = build()
            self._done[key] = (value, time.perf_counter() - t0)
        return self._done[key]


def build_main_store(data: Dataset, path: Path) -> tuple[Any, float]:
    """A store at ``path`` holding every stored row in ``main``: upsert_many, 1000 a batch.

    The Memory objects are made before the clock starts (a caller has them already);
    the time covers conversion, the durable commits and both index updates, up to the last
    vector in its graph (vectors added while a checkpoint saved the graph enter it in the
    background afterwards: that work is the load's). Each batch's latency is kept in
    ``BATCH_SECONDS`` (a stall, e.g. an index checkpoint, shows there).
    """
    import memini

    mems = [data.memory(i) for i in range(data.n)]
    BATCH_SECONDS.clear()
    t0 = time.perf_counter()
    store = memini.Store.open(path, dims=DIMS, metric="cos")
    for b in range(0, data.n, BATCH):
        tb = time.perf_counter()
        store.upsert_many(mems[b : b + BATCH])
        BATCH_SECONDS.append(time.perf_counter() - tb)
    drained(store)
    seconds = time.perf_counter() - t0
    settle(store)
    return store, seconds


def _wait(busy: Callable[[], bool], timeout: float = 120.0) -> float:
    """Poll ``busy`` every 50 ms until it is false (or ``timeout``); the seconds waited."""
    t0 = time.perf_counter()
    while busy() and time.perf_counter() - t0 < timeout:
        time.sleep(0.05)
    return time.perf_counter() - t0


def drained(store: Any) -> float:
    """Wait until every vector added is in its graph (see `build_main_store`); the seconds
    waited. An ingest's time includes this."""
    return _wait(lambda: store.stats()["vector_pending"] > 0)


def settle(store: Any, timeout: float = 120.0) -> float:
    """Wait (untimed) until a freshly loaded store is in its steady state, and return the
    seconds waited: every vector in its graph (see `build_main_store`) and the keyword
    index's segments merged, which it does in the background once writes pause
    (``keyword_merging``). Searches are measured in that state, as the peers are measured after
    their own merges (tantivy-py: ``wait_merging_threads``)."""

    def busy() -> bool:
        s = store.stats()
        return bool(s["vector_pending"] > 0 or s["keyword_merging"] or s["keyword_segments"] > 2)

    return _wait(busy, timeout)


BATCH_SECONDS: list[float] = []


def bench_mean(benchmark: Any) -> float | None:
    """Mean seconds per call of the last ``benchmark(...)`` run; None when timing is off."""
    stats = getattr(benchmark, "stats", None)
    if benchmark.disabled or stats is None:
        return None
    return float(stats.stats.mean)


def build_usearch(data: Dataset) -> tuple[Any, float]:
    """The raw usearch peer (M=16, expansion_add=128, cos, f32) holding every stored row,
    added on ONE thread; returns the index and the add time in seconds."""
    from usearch.index import Index

    index = Index(ndim=DIMS, metric="cos", dtype="f32", connectivity=16, expansion_add=128)
    t0 = time.perf_counter()
    index.add(np.arange(data.n, dtype=np.uint64), data.vectors, threads=1)
    return index, time.perf_counter() - t0


def timed_build(
    benchmark: Any,
    builds: Builds,
    key: str,
    build: Callable[[], tuple[Any, float]],
    throwaway: Callable[[], tuple[Any, float]],
) -> tuple[Any, float]:
    """Time the session's one build of ``key`` through pytest-benchmark; if another test
    built it already, time ``throwaway`` (a second, separate build) instead. Both builders
    return ``(value, seconds)``, timing only the work being measured."""
    if builds.has(key):
        return benchmark.pedantic(throwaway, rounds=1, iterations=1)
    value, _ = benchmark.pedantic(lambda: builds.get(key, build), rounds=1, iterations=1)
    return value
