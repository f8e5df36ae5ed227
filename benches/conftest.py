"""Session fixtures for the memini benchmarks: the dataset, the stores and the peers.

Run: ``MEMINI_BENCH_ROWS=100000 python -m pytest benches --benchmark-columns=mean,ops``;
CI smoke: ``MEMINI_BENCH_ROWS=10000 python -m pytest -q benches --benchmark-disable``.
See ``_data.py`` for the dataset, the derived tags/expiries and how recall is computed.
Without pypi-100k (``MEMINI_BENCH_DATA``, or ``../shared`` beside the checkout) everything runs
on the demo sample the repository ships; the pytest header and the end-of-session summary
say which data ran ("bench data: ...").

Every store and peer index is built once per session in a temporary directory. The main
store (namespace ``main``, every stored row with vector, text and tags) is shared: tests that
need it closed (reopen time, RSS in a fresh process) close it and reopen it in place through
`D.MainStore`, so later tests keep working. Goals are recorded, never asserted; only
correctness (exactness where memini promises it, read-your-writes, full result lists) is.
"""

from __future__ import annotations

import fnmatch
import os

# The exact-scan peer is measured single-threaded, like every other single-thread number.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import _data as D

# ---------------------------------------------------------------------------- collection


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect ``bench_*.py`` (the project's pytest config only names ``test_*.py``)."""
    if file_path.suffix != ".py" or not file_path.name.startswith("bench_"):
        return None
    if parent.session.isinitpath(file_path) or any(
        fnmatch.fnmatch(file_path.name, p) for p in parent.config.getini("python_files")
    ):
        return None  # pytest collects it itself (named on the command line, or a test_ name)
    return pytest.Module.from_parent(parent, path=file_path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Store builds at 100k rows take minutes: lift the suite's 300 s per-test timeout."""
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.timeout(3600))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to benchmark a debug build of the extension, or a ``MEMINI_BENCH_DATA`` that
    is not the dataset (once, rather than as an error in every test that needs data)."""
    if problem := D.check_data():
        pytest.exit(problem, returncode=4)
    import memini._core

    profile = memini._core.build_profile()
    if profile != "release":
        pytest.exit(
            f"memini._core is a {profile!r} build: benchmarks need a release build "
            "(`maturin develop --release`, or `make install`)",
            returncode=2,
        )


def pytest_report_header() -> str:
    """Which data the benchmarks run on (the header is hidden by ``-q``; the summary repeats
    it)."""
    return D.describe()


_STORED: list[int] = []  # rows stored, once the session's dataset is loaded


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which data ran, then print every recorded number, peer, ratio and goal in one
    table."""
    if not D.RESULTS:
        if _STORED:
            terminalreporter.section("memini benchmarks")
            terminalreporter.write_line(D.describe(_STORED[0]))
        return
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    terminalreporter.section(f"memini vs peers ({D.ROWS} rows requested)")
    terminalreporter.write_line(D.describe(_STORED[0] if _STORED else None))
    terminalreporter.write_line(f"{os.cpu_count()} CPUs; load average at the end: {load}")
    for line in D.summary_lines(D.RESULTS):
        terminalreporter.write_line(line)


# ---------------------------------------------------------------------------- data


@pytest.fixture(scope="session")
def data() -> D.Dataset:
    """The stored rows and the 1000 query rows (loaded once)."""
    dataset = D.load()
    _STORED.append(dataset.n)
    return dataset


@pytest.fixture(scope="session")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One temporary directory for every store and peer index of the session."""
    return tmp_path_factory.mktemp("memini-bench")


@pytest.fixture(scope="session")
def queries_file(data: D.Dataset, bench_dir: Path) -> Path:
    """The query vectors as a ``.npy`` file, for benchmarks that search in a fresh process."""
    path = bench_dir / "queries.npy"
    np.save(path, data.queries)
    return path


@pytest.fixture(scope="session")
def builds() -> D.Builds:
    """The session's build cache."""
    return D.Builds()


@pytest.fixture(scope="session")
def main(data: D.Dataset, bench_dir: Path, builds: D.Builds) -> Iterator[D.MainStore]:
    """The shared main store (built once; `bench_core.test_upsert_many` times the build)."""
    path = bench_dir / "main"
    (store, seconds), _ = builds.get("main", lambda: D.build_main_store(data, path))
    holder = D.MainStore(path, seconds, store)
    yield holder
    holder.close()


@pytest.fixture(scope="session")
def usearch_index(data: D.Dataset, builds: D.Builds) -> Any:
    """The raw usearch peer index (see `_data.build_usearch`), built once."""
    (index, _), _ = builds.get("usearch", lambda: D.build_usearch(data))
    return index
