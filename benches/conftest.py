"""Session fixtures for the memini benchmarks: the dataset, the stores and the peers.

Run: ``MEMINI_BENCH_ROWS=100000 python -m pytest benches --benchmark-columns=mean,ops``;
CI smoke: ``MEMINI_BENCH_ROWS=10000 python -m pytest -q benches --benchmark-disable``.
See ``_data.py`` for the dataset, the derived tags/expiries and how recall is computed.

Every store and peer index is built once per session in a temporary directory. The main
store (namespace ``main``, every stored row with vector, text and tags) is shared: tests that
need it closed (reopen time, RSS in a fresh process) close it and reopen it in place through
`MainStore`, so later tests keep working. Goals are recorded, never asserted; only
correctness (exactness where memini promises it, read-your-writes, full result lists) is.
"""

from __future__ import annotations

import fnmatch
import os

# The exact-scan peer is measured single-threaded, like every other single-thread number.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import _data as D

# ---------------------------------------------------------------------------- collection


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect ``bench_*.py`` (the project's pytest config only names ``test_*.py``)."""
    if file_path.suffix != ".py" or not file_path.name.startswith("bench_"):
        return None
    if any(fnmatch.fnmatch(file_path.name, p) for p in parent.config.getini("python_files")):
        return None  # already collected by pytest itself
    return pytest.Module.from_parent(parent, path=file_path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Store builds at 100k rows take minutes: lift the suite's 300 s per-test timeout."""
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.timeout(3600))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to benchmark a debug build of the extension."""
    import memini._core

    profile = memini._core.build_profile()
    if profile != "release":
        pytest.exit(
            f"memini._core is a {profile!r} build: benchmarks need a release build "
            "(`maturin develop --release`, or `make install`)",
            returncode=2,
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print every recorded number, peer, ratio and goal in one table."""
    if not D.RESULTS:
        return
    terminalreporter.section(f"memini vs peers ({D.ROWS} rows requested)")
    for line in D.summary_lines(D.RESULTS):
        terminalreporter.write_line(line)


# ---------------------------------------------------------------------------- data


@pytest.fixture(scope="session")
def data() -> D.Dataset:
    """The stored rows and the 1000 query rows (loaded once)."""
    return D.load()


@pytest.fixture(scope="session")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One temporary directory for every store and peer index of the session."""
    return tmp_path_factory.mktemp("memini-bench")


@pytest.fixture(scope="session")
def fsync_ms(bench_dir: Path) -> float:
    """Median fsync latency (ms) of this disk, measured beside the stores."""
    return D.fsync_latency_ms(bench_dir)


class MainStore:
    """The shared 100k-row store; `close_for` hands its directory to another process."""

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


@pytest.fixture(scope="session")
def builds() -> Builds:
    """The session's build cache."""
    return Builds()


def build_main_store(data: D.Dataset, path: Path) -> Any:
    """A store at ``path`` holding every stored row in ``main``: upsert_many, 1000 a batch.

    The Memory objects are made before the clock starts (a caller has them already);
    the time covers conversion, the durable commits and both index updates.
    """
    import memini

    mems = [data.memory(i) for i in range(data.n)]
    t0 = time.perf_counter()
    store = memini.Store.open(path, dims=D.DIMS, metric="cos")
    for b in range(0, data.n, D.BATCH):
        store.upsert_many(mems[b : b + D.BATCH])
    return store, time.perf_counter() - t0


@pytest.fixture(scope="session")
def main(data: D.Dataset, bench_dir: Path, builds: Builds) -> Iterator[MainStore]:
    """The shared main store (built once; `bench_core.test_upsert_many` times the build)."""
    path = bench_dir / "main"
    (store, seconds), _ = builds.get("main", lambda: build_main_store(data, path))
    holder = MainStore(path, seconds, store)
    yield holder
    holder.close()


@pytest.fixture(scope="session")
def usearch_index(data: D.Dataset, builds: Builds) -> tuple[Any, float]:
    """Raw usearch peer (M=16, expansion_add=128, cos, f32), every stored row added on ONE
    thread; returns the index and the add time in seconds."""
    import numpy as np
    from usearch.index import Index

    def build() -> tuple[Any, float]:
        index = Index(ndim=D.DIMS, metric="cos", dtype="f32", connectivity=16, expansion_add=128)
        t0 = time.perf_counter()
        index.add(np.arange(data.n, dtype=np.uint64), data.vectors, threads=1)
        return index, time.perf_counter() - t0

    value, _ = builds.get("usearch", build)
    return value
