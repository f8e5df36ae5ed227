"""memini next to the systems a user would pick instead: same data, queries and filters.

Run (in the bench venv, which has the peers): ``.venv-bench/bin/python benches/compare.py
[--rows 100000] [--queries 1000] [--sizes 10000,30000]``. Writes ``benches/report/compare.md``
(+ ``compare.json`` with every raw number, + PNG plots) and reassembles ``benches/REPORT.md``.

Data: pypi-100k via `_data.load` (the last 1,000 rows are the queries and never stored; the
first ``--rows`` rows, capped at 99,000, are stored), tags ``p10`` / ``p1`` / ``p01`` on 10% /
1% / 0.1% of the rows exactly as `_data.tags_for` derives them, the two-word keyword queries of
`_data.Dataset.keyword_queries`, tie-aware recall@10 against an exact scan
(`_data.Dataset.recall`). Every system runs in this one process, one after another:

- **memini** — ``Store.open(dims=384, metric="cos")``, ``upsert_many`` 1000 rows a batch (each
  batch durable; both indexes), default search breadth 64, ``Filter(tags=[...])``; every hit
  is a full `Memory`. Searches start once the keyword index's background merges have run
  (untimed), as tantivy's start after ``wait_merging_threads``.
- **sqlite-vec + FTS5** — the upstream memini engine's design: a rows table (id, content, tags
  as JSON), a ``vec0`` table (``float[384] distance_metric=cosine``, brute force) and an FTS5
  table (``porter unicode61``), WAL with ``synchronous=FULL`` (durable commits like memini),
  one transaction per 1000 rows. Vector search is a KNN query with ``k = 10`` unfiltered and
  ``k = 4000`` post-filtered by the tag (``json_each``) when filtered, as upstream does; keyword
  search is ``MATCH '"a" OR "b"' ORDER BY bm25 LIMIT 10``. Hits join the rows table (id+text).
  Python's own ``sqlite3`` here cannot load extensions, so this uses ``pysqlite3`` (SQLite
  3.51) when present.
- **chromadb** — ``PersistentClient``, one collection, hnsw ``space=cosine``, its default
  build/search parameters (M 16, ef_construction 100, ef_search 100), ``add`` 1000 rows a
  batch with metadata ``{"p10": bool, "p1": bool, "p01": bool}``, ``where={tag: True}``; hits
  carry ids + documents. Chroma has no ranked keyword search (only ``$contains`` filters).
- **lancedb** — one table (rid, vector, content, tag booleans) written 10,000 rows an
  ``add``, then its default vector index (``IVF_PQ``, cosine) and its native FTS index, both
  counted in ingest; ``where(tag, prefilter=True)``; default nprobes and no refine step
  (the sweep varies ``refine_factor``, which re-ranks with the full vectors); hits carry
  rid + text.
- **usearch** (raw) — ``Index(cos, f32, M=16, expansion_add=128, expansion_search=64)``,
  memini's own parameters, added on one thread; keys only; no filtered search from Python
  and no durability: the engine's own limit, not a product.
- **tantivy** (raw tantivy-py) — ``en_stem`` text field, one commit; stored id per hit.
- **numpy** — exact single-threaded scan of the rows the filter selects (recall 1 by
  construction): the floor any index has to beat.

Measured per system: ingest rows/s; vector QPS + recall@10 unfiltered and under the 10% / 1% /
0.1% tags; keyword QPS (+ top-10 overlap with FTS5); reopen (fresh process: open + first
search) and peak RSS (the same process after 200 vector + 200 keyword searches, from
``VmHWM``); bytes on disk per row (after close); p50/p99 latency of a mixed load (alternating
one durable single-row write and one vector search, single thread; memini's include its index
checkpoint, which falls inside this load at 100k rows); a breadth sweep (recall vs QPS) for
memini, usearch, chroma (ef_search) and lancedb (refine_factor); and unfiltered vector / keyword QPS
at the smaller ``--sizes``. QPS is one query at a time from one Python thread, best of 2
passes (one pass for sqlite-vec and lancedb). Slow peers run fewer queries (printed in the
report): sqlite-vec 200, chroma 300, lancedb 300.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("LANCEDB_LOG", "error")  # one deprecation warning per query otherwise
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _data as D
import _report as R

FILTERS = (None, "p10", "p1", "p01")
FILTER_LABEL = {None: "unfiltered", "p10": "10%", "p1": "1%", "p01": "0.1%"}
POSTFILTER_K = 4000
SWEEP = {
    "memini": (16, 24, 32, 48, 64, 96, 128, 256),
    "usearch": (16, 24, 32, 48, 64, 96, 128, 256),
    "chroma": (16, 32, 64, 100, 128, 256),
    "lancedb": (1, 2, 5, 10, 25),
}
SWEEP_KNOB = {
    "memini": "search_breadth",
    "usearch": "expansion_search",
    "chroma": "hnsw ef_search",
    "lancedb": "refine_factor",
}
CHILD_QUERIES = 200


def _rows_of(ids: list[str]) -> list[int]:
    return [D.row_of(i) for i in ids]


# ---------------------------------------------------------------------------- systems


class System:
    """One engine behind a common interface. Subclasses set the flags and the methods they
    support; `None` query caps mean ``--queries``."""

    name = ""
    vector = True
    keyword = False
    filters = True
    writes = True
    persistent = True
    max_queries: int | None = None
    passes = 2
    mixed_ops = 2000

    def __init__(self, path: Path) -> None:
        self.path = path

    # build: prepare (untimed: the caller has its rows already) then ingest (timed)
    def prepare(self, data: D.Dataset) -> Any:
        return None

    def ingest(self, data: D.Dataset, payload: Any) -> None:
        raise NotImplementedError

    def reopen(self) -> None:
        """Open the on-disk store again (in this process or a child)."""
        raise NotImplementedError

    def settle(self) -> None:
        """Wait (untimed) for background work the ingest left, e.g. index merges."""

    def search(self, q: np.ndarray, tag: str | None) -> list[int]:
        raise NotImplementedError

    def text_search(self, query: str) -> list[int]:
        raise NotImplementedError

    def set_breadth(self, b: int) -> None:
        raise NotImplementedError

    def write(self, j: int, data: D.Dataset, i: int) -> None:
        """One durable single-row write (a copy of row ``i`` under a new id ``j``)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class Memini(System):
    name = "memini"
    keyword = True
    mixed_ops = 3000  # 1500 writes: at 99k rows the 100k-change index checkpoint falls inside

    def prepare(self, data: D.Dataset) -> Any:
        return [data.memory(i) for i in range(data.n)]

    def ingest(self, data: D.Dataset, payload: Any) -> None:
        import memini

        self.s = memini.Store.open(self.path, dims=D.DIMS, metric="cos")
        for b in range(0, len(payload), D.BATCH):
            self.s.upsert_many(payload[b : b + D.BATCH])
        D.drained(self.s)

    def reopen(self) -> None:
        import memini

        self.s = memini.Store.open(self.path)

    def settle(self) -> None:
        D.settle(self.s)  # keyword segments merge once writes pause (tantivy's: in ingest)

    def search(self, q: np.ndarray, tag: str | None) -> list[int]:
        from memini import Filter

        flt = None if tag is None else Filter(tags=[tag])
        return _rows_of([h.memory.id for h in self.s.vector_search(D.NS, q, flt, D.K)])

    def text_search(self, query: str) -> list[int]:
        return _rows_of([h.memory.id for h in self.s.keyword_search(D.NS, query, None, D.K)])

    def set_breadth(self, b: int) -> None:
        self.s._engine.set_search_breadth(b)

    def write(self, j: int, data: D.Dataset, i: int) -> None:
        self.s.upsert(data.memory(i, id=f"x{j:07d}"))

    def close(self) -> None:
        self.s.close()


def _sqlite() -> Any:
    try:
        import pysqlite3 as sqlite3
    except ImportError:
        import sqlite3
    return sqlite3


class SqliteVec(System):
    name = "sqlite-vec+fts5"
    keyword = True
    max_queries = 200
    passes = 1
    mixed_ops = 400

    def _connect(self) -> None:
        import sqlite_vec

        self.con = _sqlite().connect(self.path / "db.sqlite3", isolation_level=None)
        self.con.enable_load_extension(True)
        sqlite_vec.load(self.con)
        self.con.enable_load_extension(False)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("PRAGMA synchronous=FULL")

    def prepare(self, data: D.Dataset) -> Any:
        return [
            (i, D.row_id(i), data.texts[i], json.dumps(D.tags_for(i)), data.vectors[i].tobytes())
            for i in range(data.n)
        ]

    def ingest(self, data: D.Dataset, payload: Any) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._connect()
        c = self.con
        c.execute(
            "CREATE TABLE memories(rowid INTEGER PRIMARY KEY, id TEXT UNIQUE, "
            "content TEXT, tags TEXT)"
        )
        c.execute(
            f"CREATE VIRTUAL TABLE vec USING vec0(embedding float[{D.DIMS}] distance_metric=cosine)"
        )
        c.execute("CREATE VIRTUAL TABLE fts USING fts5(content, tokenize='porter unicode61')")
        for b in range(0, len(payload), D.BATCH):
            self._insert(payload[b : b + D.BATCH])

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        c = self.con
        c.execute("BEGIN")
        c.executemany("INSERT INTO memories VALUES (?, ?, ?, ?)", [r[:4] for r in rows])
        c.executemany(
            "INSERT INTO vec(rowid, embedding) VALUES (?, ?)", [(r[0], r[4]) for r in rows]
        )
        c.executemany("INSERT INTO fts(rowid, content) VALUES (?, ?)", [(r[0], r[2]) for r in rows])
        c.execute("COMMIT")

    def reopen(self) -> None:
        self._connect()

    def search(self, q: np.ndarray, tag: str | None) -> list[int]:
        if tag is None:
            sql = (
                "SELECT m.rowid, m.id, m.content FROM (SELECT rowid, distance FROM vec "
                "WHERE embedding MATCH ? AND k = 10) v JOIN memories m ON m.rowid = v.rowid "
                "ORDER BY v.distance"
            )
            args: tuple[Any, ...] = (q.tobytes(),)
        else:
            sql = (
                "SELECT m.rowid, m.id, m.content FROM (SELECT rowid, distance FROM vec "
                f"WHERE embedding MATCH ? AND k = {POSTFILTER_K}) v "
                "JOIN memories m ON m.rowid = v.rowid "
                "WHERE EXISTS (SELECT 1 FROM json_each(m.tags) WHERE value = ?) "
                "ORDER BY v.distance LIMIT 10"
            )
            args = (q.tobytes(), tag)
        return [r[0] for r in self.con.execute(sql, args)]

    def text_search(self, query: str) -> list[int]:
        a, b = query.split()
        sql = (
            "SELECT m.rowid, m.id, m.content FROM fts JOIN memories m ON m.rowid = fts.rowid "
            "WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT 10"
        )
        return [r[0] for r in self.con.execute(sql, (f'"{a}" OR "{b}"',))]

    def write(self, j: int, data: D.Dataset, i: int) -> None:
        self._insert(
            [
                (
                    10_000_000 + j,
                    f"x{j:07d}",
                    data.texts[i],
                    json.dumps(D.tags_for(i)),
                    data.vectors[i].tobytes(),
                )
            ]
        )

    def close(self) -> None:
        self.con.close()


class Chroma(System):
    name = "chroma"
    max_queries = 300
    mixed_ops = 1000

    def _client(self) -> Any:
        import chromadb

        return chromadb.PersistentClient(
            path=str(self.path), settings=chromadb.Settings(anonymized_telemetry=False)
        )

    def prepare(self, data: D.Dataset) -> Any:
        return (
            [D.row_id(i) for i in range(data.n)],
            [{t: (i % m == 0) for t, (m, _) in D.TAG_FILTERS.items()} for i in range(data.n)],
        )

    def ingest(self, data: D.Dataset, payload: Any) -> None:
        ids, metas = payload
        self.client = self._client()
        self.col = self.client.create_collection(
            "bench", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
        )
        for b in range(0, data.n, D.BATCH):
            e = min(data.n, b + D.BATCH)
            self.col.add(
                ids=ids[b:e],
                embeddings=data.vectors[b:e],
                documents=data.texts[b:e],
                metadatas=metas[b:e],
            )

    def reopen(self) -> None:
        self.client = self._client()
        self.col = self.client.get_collection("bench", embedding_function=None)

    def search(self, q: np.ndarray, tag: str | None) -> list[int]:
        r = self.col.query(
            query_embeddings=[q],
            n_results=D.K,
            where=None if tag is None else {tag: True},
            include=["documents"],
        )
        return _rows_of(r["ids"][0])

    def set_breadth(self, b: int) -> None:
        self.col.modify(configuration={"hnsw": {"ef_search": b}})

    def write(self, j: int, data: D.Dataset, i: int) -> None:
        self.col.add(
            ids=[f"x{j:07d}"],
            embeddings=data.vectors[i : i + 1],
            documents=[data.texts[i]],
            metadatas=[{t: (i % m == 0) for t, (m, _) in D.TAG_FILTERS.items()}],
        )

    def close(self) -> None:
        import chromadb

        self.col = None
        self.client = None
        chromadb.api.client.SharedSystemClient.clear_system_cache()
        gc.collect()


class Lance(System):
    name = "lancedb"
    keyword = True
    max_queries = 300
    passes = 1
    mixed_ops = 400
    LANCE_BATCH = 10_000

    def _arrow(self, data: D.Dataset, idx: range | list[int], rids: list[int] | None = None) -> Any:
        import pyarrow as pa

        idx = list(idx)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(data.vectors[idx].ravel()), D.DIMS)
        cols = {
            "rid": pa.array(rids if rids is not None else idx, type=pa.int64()),
            "vector": vec,
            "content": pa.array([data.texts[i] for i in idx]),
        }
        for t, (m, _) in D.TAG_FILTERS.items():
            cols[t] = pa.array([i % m == 0 for i in idx])
        return pa.table(cols)

    def prepare(self, data: D.Dataset) -> Any:
        return [
            self._arrow(data, range(b, min(data.n, b + self.LANCE_BATCH)))
            for b in range(0, data.n, self.LANCE_BATCH)
        ]

    def ingest(self, data: D.Dataset, payload: Any) -> None:
        import lancedb

        self.db = lancedb.connect(str(self.path))
        self.tbl = self.db.create_table("bench", data=payload[0])
        for t in payload[1:]:
            self.tbl.add(t)
        # IVF_PQ needs >= 256 rows per PQ training set; tiny stores stay unindexed (exact)
        if data.n >= 5000:
            self.tbl.create_index(metric="cosine", vector_column_name="vector")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.tbl.create_fts_index("content")

    def reopen(self) -> None:
        import lancedb

        self.db = lancedb.connect(str(self.path))
        self.tbl = self.db.open_table("bench")
        self.refine: int | None = None

    def search(self, q: np.ndarray, tag: str | None) -> list[int]:
        qb = self.tbl.search(q).distance_type("cosine").limit(D.K).select(["rid", "content"])
        if getattr(self, "refine", None):
            qb = qb.refine_factor(self.refine)
        if tag is not None:
            qb = qb.where(f"{tag} = true", prefilter=True)
        return qb.to_arrow()["rid"].to_pylist()

    def text_search(self, query: str) -> list[int]:
        qb = self.tbl.search(query, query_type="fts").limit(D.K).select(["rid", "content"])
        return qb.to_arrow()["rid"].to_pylist()

    def set_breadth(self, b: int) -> None:
        self.refine = b

    def write(self, j: int, data: D.Dataset, i: int) -> None:
        self.tbl.add(self._arrow(data, [i], rids=[10_000_000 + j]))


class USearch(System):
    name = "usearch"
    filters = False
    mixed_ops = 3000

    def ingest(self, data: D.Dataset, payload: Any) -> None:
        self.index, _ = D.build_usearch(data)
        self.index.expansion_search = 64
        self.path.mkdir(parents=True, exist_ok=True)
        self.index.save(str(self.path / "index.usearch"))

    def reopen(self) -> None:
        from usearch.index import Index

        self.index = Index.restore(str(self.path / "index.usearch"))
        self.index.expansion_search = 64

    def search(self, q: np.ndarray, tag: str | None) -> list[int]:
        return self.index.search(q, D.K).keys.tolist()

    def set_breadth(self, b: int) -> None:
        self.index.expansion_search = b

    def write(self, j: int, data: D.Dataset, i: int) -> None:
        self.index.add(10_000_000 + j, data.vectors[i])


class Tantivy(System):
    name = "tantivy"
    vector = False
    keyword = True
    filters = False
    writes = False

    def ingest(self, data: D.Dataset, payload: Any) -> None:
        import tantivy

        schema = (
            tantivy.SchemaBuilder()
            .add_text_field("id", stored=True, tokenizer_name="raw")
            .add_text_field("content", tokenizer_name="en_stem")
            .build()
        )
        self.path.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(schema, path=str(self.path))
        writer = self.index.writer(heap_size=128_000_000, num_threads=1)
        for i, text in enumerate(data.texts):
            writer.add_document(tantivy.Document(id=D.row_id(i), content=text))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()

    def reopen(self) -> None:
        import tantivy

        self.index = tantivy.Index.open(str(self.path))
        self.searcher = self.index.searcher()

    def text_search(self, query: str) -> list[int]:
        hits = self.searcher.search(self.index.parse_query(query, ["content"]), D.K).hits
        return _rows_of([self.searcher.doc(addr)["id"][0] for _, addr in hits])


class Numpy(System):
    name = "numpy"
    writes = False
    persistent = False

    def ingest(self, data: D.Dataset, payload: Any) -> None:
        self.bases = {
            tag: (np.flatnonzero(data.mask(tag or "all")), data.unit[data.mask(tag or "all")])
            for tag in FILTERS
        }

    def search(self, q: np.ndarray, tag: str | None) -> list[int]:
        rows, base = self.bases[tag]
        qn = q / np.linalg.norm(q)
        sims = base @ qn
        k = min(D.K, len(sims))  # a tiny filtered set may hold fewer than k rows
        top = np.argpartition(-sims, k - 1)[:k]
        return rows[top[np.argsort(-sims[top])]].tolist()


SYSTEMS: dict[str, type[System]] = {
    s.name: s for s in (Memini, SqliteVec, Chroma, Lance, USearch, Tantivy, Numpy)
}


# ---------------------------------------------------------------------------- child process

_CHILD_MAIN = "--child"


def child(name: str, path: str, qfile: str, kwfile: str) -> None:
    """Reopen a system's store in this fresh process: time open + first search, then run
    200 vector (half filtered at 1% where supported) and 200 keyword searches; print JSON."""
    import psutil

    me = psutil.Process()
    qs = np.load(qfile)
    kws = json.loads(Path(kwfile).read_text())
    sysm = SYSTEMS[name](Path(path))
    base = me.memory_info().rss
    t0 = time.perf_counter()
    sysm.reopen()
    t1 = time.perf_counter()
    if sysm.vector:
        sysm.search(qs[0], None)
    else:
        sysm.text_search(kws[0])
    t2 = time.perf_counter()
    opened = me.memory_info().rss
    for j, q in enumerate(qs[:CHILD_QUERIES]):
        if sysm.vector:
            sysm.search(q, "p1" if sysm.filters and j % 2 else None)
    if sysm.keyword:
        for w in kws[:CHILD_QUERIES]:
            sysm.text_search(w)
    warm = me.memory_info().rss
    sysm.close()
    with open("/proc/self/status", encoding="utf-8") as f:
        peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))
    print(
        json.dumps(
            {
                "open": t1 - t0,
                "first": t2 - t1,
                "base": base,
                "opened": opened,
                "warm": warm,
                "peak": peak,
            }
        )
    )


def run_child(name: str, path: Path, qfile: Path, kwfile: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, _CHILD_MAIN, name, str(path), str(qfile), str(kwfile)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- measuring


def best_pass(fn: Callable[[], list[Any]], passes: int = 2) -> tuple[list[Any], float]:
    """Results of the last pass and the best pass time in seconds."""
    best, out = float("inf"), []
    for _ in range(passes):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def overlap(a: list[list[int]], b: list[list[int]]) -> float:
    """Mean top-10 overlap of two engines' result lists (over the shorter list set)."""
    m = min(len(a), len(b))
    return float(
        np.mean([len(set(x) & set(y)) / max(1, len(y)) for x, y in zip(a[:m], b[:m], strict=True)])
    )


def dir_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure(
    cls: type[System],
    data: D.Dataset,
    root: Path,
    n_queries: int,
    full: bool,
    files: tuple[Path, Path],
) -> dict[str, Any]:
    """Build one system on ``data`` and measure it; ``full`` adds filters, sweep, reopen,
    RSS, disk and the mixed load. Keyword result lists are kept under ``_kw_found`` for the
    overlap computed by `run_all`."""
    path = root / cls.name.replace("+", "_")
    sysm = cls(path)
    nq = min(n_queries, cls.max_queries or n_queries)
    out: dict[str, Any] = {"n": data.n, "queries": nq}
    payload = sysm.prepare(data)
    t0 = time.perf_counter()
    sysm.ingest(data, payload)
    out["ingest_s"] = time.perf_counter() - t0
    if cls is not Numpy:  # an array copy is not an ingest
        out["ingest_rows_s"] = data.n / out["ingest_s"]
    del payload
    sysm.settle()
    log(f"  {cls.name}: ingest {data.n / out['ingest_s']:,.0f} rows/s ({out['ingest_s']:.1f} s)")
    qs = data.queries[:nq]
    if sysm.vector:
        for tag in FILTERS if full else (None,):
            if tag is not None and not sysm.filters:
                continue
            found, sec = best_pass(lambda t=tag: [sysm.search(q, t) for q in qs], cls.passes)
            key = FILTER_LABEL[tag]
            want = min(D.K, int(data.mask(tag or "all").sum()))
            out[f"vec_qps_{key}"] = nq / sec
            out[f"recall_{key}"] = data.recall(found, tag or "all")
            out[f"full_lists_{key}"] = sum(len(r) == want for r in found) / len(found)
            log(
                f"  {cls.name}: vector {key}: {nq / sec:,.0f} q/s, recall "
                f"{out[f'recall_{key}']:.3f}, full lists {out[f'full_lists_{key}']:.2f}"
            )
    if sysm.keyword:
        kqs = data.keyword_queries[:nq]
        found, sec = best_pass(lambda: [sysm.text_search(w) for w in kqs], cls.passes)
        out["kw_qps"] = nq / sec
        out["kw_hits"] = float(np.mean([len(r) for r in found]))
        out["_kw_found"] = found
        log(f"  {cls.name}: keyword {nq / sec:,.0f} q/s")
    if full and cls.name in SWEEP:
        ns = min(nq, 500)
        pts = []
        try:
            for b in SWEEP[cls.name]:
                sysm.set_breadth(b)
                found, sec = best_pass(
                    lambda n=ns: [sysm.search(q, None) for q in qs[:n]], cls.passes
                )
                pts.append((b, data.recall(found), ns / sec))
            out["sweep"] = pts
            log(f"  {cls.name}: sweep {[(b, round(r, 3), round(q)) for b, r, q in pts]}")
        except Exception as e:  # a knob the peer does not honour is reported, not fatal
            out["sweep_error"] = repr(e)
            log(f"  {cls.name}: sweep failed: {e!r}")
        restore = {"memini": 64, "usearch": 64, "chroma": 100}.get(cls.name)
        if restore:
            sysm.set_breadth(restore)
        elif isinstance(sysm, Lance):
            sysm.refine = None
    if full and sysm.persistent:
        sysm.close()
        gc.collect()
        out["disk_bytes_per_row"] = dir_bytes(path) / data.n
        child_out = run_child(cls.name, path, *files)
        out["reopen_s"] = child_out["open"] + child_out["first"]
        out["child"] = child_out
        out["peak_rss_mb"] = child_out["peak"] / 2**20
        log(
            f"  {cls.name}: reopen {out['reopen_s']:.3f} s, peak RSS {out['peak_rss_mb']:.0f} MB, "
            f"{out['disk_bytes_per_row']:,.0f} B/row on disk"
        )
        sysm.reopen()
    if full and sysm.writes and sysm.vector:
        ops = cls.mixed_ops
        rlat, wlat = [], []
        for j in range(ops):
            t0 = time.perf_counter()
            if j % 2 == 0:
                sysm.write(j, data, (j * 7919) % data.n)
                wlat.append(time.perf_counter() - t0)
            else:
                sysm.search(data.queries[(j // 2) % len(data.queries)], None)
                rlat.append(time.perf_counter() - t0)
        alll = rlat + wlat
        out["mixed"] = {
            "ops": ops,
            "all": D.percentiles_ms(alll),
            "read": D.percentiles_ms(rlat),
            "write": D.percentiles_ms(wlat),
        }
        log(f"  {cls.name}: mixed {ops} ops: {out['mixed']}")
    sysm.close()
    gc.collect()
    shutil.rmtree(path, ignore_errors=True)
    return out


START = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - START:7.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------------------- report

# (label, key, higher is better)
HEADLINE = [
    ("ingest rows/s", "ingest_rows_s", True),
    ("vector QPS, unfiltered", "vec_qps_unfiltered", True),
    ("vector QPS, 10% filter", "vec_qps_10%", True),
    ("vector QPS, 1% filter", "vec_qps_1%", True),
    ("vector QPS, 0.1% filter", "vec_qps_0.1%", True),
    ("recall@10, unfiltered", "recall_unfiltered", True),
    ("recall@10, 10% filter", "recall_10%", True),
    ("recall@10, 1% filter", "recall_1%", True),
    ("recall@10, 0.1% filter", "recall_0.1%", True),
    ("keyword QPS", "kw_qps", True),
    ("reopen: open + first search (s)", "reopen_s", False),
    ("mixed load p50 (ms)", "mixed.all.p50_ms", False),
    ("mixed load p99 (ms)", "mixed.all.p99_ms", False),
    ("mixed: search p99 (ms)", "mixed.read.p99_ms", False),
    ("mixed: write p99 (ms)", "mixed.write.p99_ms", False),
    ("peak RSS, fresh process (MB)", "peak_rss_mb", False),
    ("bytes on disk per row", "disk_bytes_per_row", False),
]


def get(res: dict[str, Any], key: str) -> float | None:
    """``res[key]``, else a dotted path into nested dicts (``mixed.all.p50_ms``); None if
    absent or not a number."""
    cur: Any = res.get(key) if key in res else res
    if key not in res:
        for part in key.split("."):
            if not isinstance(cur, dict) or part not in cur:
                return None
            cur = cur[part]
    return float(cur) if isinstance(cur, int | float) else None


def write_report(
    results: dict[str, Any],
    sizes: dict[int, dict[str, Any]],
    meta: dict[str, Any],
    plots: list[str],
) -> None:
    names = [n for n in SYSTEMS if n in results and "error" not in results[n]]
    peers = [n for n in names if n != "memini"]
    mem = results.get("memini", {})
    lines = [
        f"## memini vs the alternatives at {meta['n']:,} rows",
        "",
        f"Machine: {meta['machine']}. Whole run {meta['minutes']:.1f} min "
        f"(`benches/compare.py --rows {meta['rows']} --queries {meta['queries']}`, bench venv: "
        f"memini {meta['versions'].get('memini', '?')} wheel, "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if k != "memini")
        + ").",
        "",
        "Queries: the held-out last rows of pypi-100k, k=10, cos; one query at a time from one "
        "Python thread. Query counts: "
        + ", ".join(f"{n} {results[n]['queries']}" for n in names)
        + " (slow peers run fewer). How each system is set up, and what its hits carry, is in "
        "the docstring of `benches/compare.py`.",
        "",
        "### Ratios memini / peer",
        "",
        "Above 1 is better for memini where higher is better (QPS, rows/s, recall); for the "
        "rows marked (lower is better) a ratio below 1 is better for memini. A `*` marks where "
        "memini is worse than the peer. `n/a`: the peer cannot do it (see below).",
        "",
    ]
    rows = []
    for label, key, hib in HEADLINE:
        ours = get(mem, key)
        row = [label + ("" if hib else " (lower is better)")]
        for p in peers:
            theirs = get(results[p], key)
            if ours is None or theirs is None or theirs == 0:
                row.append("n/a")
                continue
            r = ours / theirs
            worse = (r < 0.995) if hib else (r > 1.005)
            row.append((f"{r:.2f}" if r < 10 else f"{r:,.0f}") + ("*" if worse else ""))
        rows.append(row)
    lines += [R.table(["measure", *peers], rows), ""]
    lines += ["### Absolute numbers", ""]
    rows = []
    for label, key, _ in HEADLINE:
        rows.append([label] + [R.fmt(get(results[n], key)) for n in names])
    rows.append(
        ["keyword: mean hits / top-10 overlap with FTS5"]
        + [
            f"{results[n]['kw_hits']:.1f} / {results[n].get('kw_overlap_fts5', 1.0):.2f}"
            if "kw_hits" in results[n]
            else "n/a"
            for n in names
        ]
    )
    rows.append(
        ["full result lists at 0.1% filter"]
        + [R.fmt(get(results[n], "full_lists_0.1%")) for n in names]
    )
    rows.append(
        ["mixed load ops (write:search 1:1)"] + [R.fmt(get(results[n], "mixed.ops")) for n in names]
    )
    lines += [R.table(["measure", *names], rows), ""]
    broken = {n: results[n]["error"] for n in results if "error" in results[n]}
    if broken:
        lines += ["### Peers that failed in this run", ""]
        lines += [f"- **{n}**: `{e.splitlines()[-1][:300]}`" for n, e in broken.items()]
        lines += [""]
    if sizes:
        lines += ["### Unfiltered vector QPS and keyword QPS vs stored rows", ""]
        ns = sorted(sizes)
        rows = []
        for n in names:
            v = [R.fmt(get(sizes[s].get(n, {}), "vec_qps_unfiltered")) for s in ns]
            k = [R.fmt(get(sizes[s].get(n, {}), "kw_qps")) for s in ns]
            rows.append([n, *v, *k])
        lines += [
            R.table(
                [
                    "system",
                    *[f"vector q/s @ {s // 1000}k" for s in ns],
                    *[f"keyword q/s @ {s // 1000}k" for s in ns],
                ],
                rows,
            ),
            "",
        ]
    sweeps = {n: results[n]["sweep"] for n in names if "sweep" in results[n]}
    if sweeps:
        lines += [
            "### Breadth sweeps (recall@10 vs QPS, unfiltered, min(500, query count) queries)",
            "",
        ]
        for n, pts in sweeps.items():
            lines.append(
                f"- {n} ({SWEEP_KNOB[n]}): "
                + ", ".join(f"{b}: {r:.3f} @ {q:,.0f} q/s" for b, r, q in pts)
            )
        for n in names:
            if "sweep_error" in results[n]:
                lines.append(f"- {n}: sweep not possible: `{results[n]['sweep_error'][:200]}`")
        lines.append("")
    lines += [f"![{p}]({p})" for p in plots]
    lines += ["", "### Reading the numbers", "", meta.get("notes", "").strip(), ""]
    R.write_part("compare", "\n".join(lines))


def make_plots(results: dict[str, Any], sizes: dict[int, dict[str, Any]]) -> list[str]:
    """recall-vs-QPS (sweeps + exact peers) and QPS-vs-rows PNGs; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, NullLocator

    R.REPORT_DIR.mkdir(parents=True, exist_ok=True)
    out = []
    ok = {n: r for n, r in results.items() if "error" not in r and "recall_unfiltered" in r}
    # the y range follows the HNSW curves; a peer far below is pinned to the bottom edge
    good = [p[1] for r in ok.values() for p in r.get("sweep", []) if p[1] >= 0.8]
    y0 = min(0.9, min(good) - 0.02) if good else 0.5
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    below = []
    for n, res in ok.items():
        c = COLORS.get(n)
        if "sweep" in res:
            pts = sorted(res["sweep"])
            _, r, q = zip(*pts, strict=True)
            below += [f"{n} at {bi}: recall {ri:.2f}" for bi, ri, _ in pts if ri < y0]
            ax.plot(
                q,
                [max(x, y0) for x in r],
                marker="o",
                color=c,
                label=f"{n} (sweep of {SWEEP_KNOB[n]})",
            )
            for bi, ri, qi in pts:
                ax.annotate(
                    str(bi),
                    (qi, max(ri, y0)),
                    textcoords="offset points",
                    xytext=(3, 5),
                    fontsize=7,
                    color=c,
                )
        else:
            ax.scatter(
                [res["vec_qps_unfiltered"]],
                [res["recall_unfiltered"]],
                marker="s",
                s=70,
                color=c,
                label=f"{n} (exact scan)",
                zorder=3,
            )
    ax.set_xscale("log")
    ax.set_ylim(y0 - 0.005, 1.005)
    ax.set_xlabel("queries/s, one thread (log scale)")
    ax.set_ylabel("recall@10 (tie-aware)")
    nrows = next(iter(ok.values()), {}).get("n", 0)
    ax.set_title(f"Recall vs speed, unfiltered, {nrows:,} rows (point labels: the knob's value)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if below:
        ax.text(
            1.01,
            0.02,
            "below the axis, drawn at its edge:\n" + "\n".join(below),
            transform=ax.transAxes,
            fontsize=8,
            va="bottom",
        )
    fig.tight_layout()
    fig.savefig(R.REPORT_DIR / "recall_vs_qps.png")
    plt.close(fig)
    out.append("report/recall_vs_qps.png")

    if len(sizes) > 1:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), dpi=110)
        ns = sorted(sizes)
        for ax, key, title in (
            (axes[0], "vec_qps_unfiltered", "vector search, unfiltered"),
            (axes[1], "kw_qps", "keyword search (2-word OR queries)"),
        ):
            for n in SYSTEMS:
                pts = [(s, get(sizes[s].get(n, {}), key)) for s in ns]
                pts = [(s, v) for s, v in pts if v is not None]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot([x / 1000 for x in xs], ys, marker="o", color=COLORS.get(n), label=n)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks([s / 1000 for s in ns])
            ax.set_xticklabels([f"{s / 1000:.0f}k" for s in ns])
            ax.set_xlabel("rows stored (log scale)")
            ax.set_ylabel("queries/s, one thread (log scale)")
            ax.set_title(title)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
        fig.savefig(R.REPORT_DIR / "qps_vs_rows.png")
        plt.close(fig)
        out.append("report/qps_vs_rows.png")
    return out


COLORS = {
    "memini": "tab:red",
    "usearch": "tab:blue",
    "chroma": "tab:green",
    "lancedb": "tab:purple",
    "sqlite-vec+fts5": "tab:orange",
    "numpy": "tab:gray",
    "tantivy": "tab:brown",
}


def versions() -> dict[str, str]:
    """Installed versions of memini and the peers (for labelling the numbers)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in ("memini", "chromadb", "lancedb", "sqlite-vec", "usearch", "tantivy", "numpy"):
        with contextlib.suppress(PackageNotFoundError):
            out[p] = version(p)
    with contextlib.suppress(ImportError):
        out["SQLite"] = _sqlite().sqlite_version
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument(
        "--sizes",
        default="10000,30000",
        help="smaller store sizes for the QPS-vs-rows plot ('' = none)",
    )
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument(
        "--notes",
        type=Path,
        default=R.REPORT_DIR / "notes.md",
        help="Markdown file appended under 'Reading the numbers'",
    )
    ap.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="redraw the plots and compare.md from a saved compare.json (no measuring)",
    )
    args = ap.parse_args()
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        meta = saved["meta"]
        if args.notes:
            meta["notes"] = _notes(args.notes)
        sizes = {int(k): v for k, v in saved["sizes"].items()}
        for res in [saved["results"], *sizes.values()]:
            res.get("numpy", {}).pop("ingest_rows_s", None)  # older files: an array copy
        plots = make_plots(saved["results"], sizes)
        write_report(saved["results"], sizes, meta, plots)
        if args.from_json.resolve() == (R.REPORT_DIR / "compare.json").resolve():
            args.from_json.write_text(json.dumps(saved, indent=1, default=str))
        return
    import memini._core

    if memini._core.build_profile() != "release":
        sys.exit("memini._core is a debug build: benchmark a release build")
    machine = R.machine_info()
    log(f"{machine}")
    full = D.load(args.rows, require_dataset=True)
    nq = min(args.queries, D.N_QUERIES)
    chosen = [s for s in args.systems.split(",") if s]
    root = Path(tempfile.mkdtemp(prefix="memini-compare-"))
    qfile, kwfile = root / "queries.npy", root / "kw.json"
    np.save(qfile, full.queries)
    kwfile.write_text(json.dumps(full.keyword_queries))
    sizes_n = sorted({int(s) for s in args.sizes.split(",") if s and int(s) < full.n})
    sizes: dict[int, dict[str, Any]] = {}
    for n in sizes_n:
        sub = D.Dataset(full.texts[:n], full.vectors[:n], full.query_texts, full.queries)
        log(f"size {n}")
        sizes[n] = run_all(chosen, sub, root, nq, False, (qfile, kwfile))
    log(f"full run at {full.n}")
    results = run_all(chosen, full, root, nq, True, (qfile, kwfile))
    sizes[full.n] = results
    minutes = (time.perf_counter() - START) / 60
    meta = {
        "n": full.n,
        "rows": args.rows,
        "queries": nq,
        "machine": machine,
        "minutes": minutes,
        "versions": versions(),
        "notes": _notes(args.notes),
    }
    # the raw numbers first: a failure while drawing must not lose a 30-minute run
    R.REPORT_DIR.mkdir(parents=True, exist_ok=True)
    (R.REPORT_DIR / "compare.json").write_text(
        json.dumps(
            {"meta": meta, "results": results, "sizes": {str(k): v for k, v in sizes.items()}},
            indent=1,
            default=str,
        )
    )
    plots = make_plots(results, sizes)
    write_report(results, {k: v for k, v in sizes.items()}, meta, plots)
    shutil.rmtree(root, ignore_errors=True)
    log(f"done in {minutes:.1f} min; wrote {R.REPORT}")


def _notes(path: Path | None) -> str:
    """The notes file's text; a missing file is reported, never fatal."""
    if path is None:
        return ""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        log(f"notes not read: {e}")
        return ""


def run_all(
    chosen: list[str], data: D.Dataset, root: Path, nq: int, full: bool, files: tuple[Path, Path]
) -> dict[str, Any]:
    """Measure every chosen system on ``data``, memini first, then the peers."""
    order = sorted(chosen, key=lambda s: s != "memini")
    results: dict[str, Any] = {}
    for name in order:
        try:
            results[name] = measure(SYSTEMS[name], data, root, nq, full, files)
        except Exception:
            err = traceback.format_exc()
            log(f"  {name} FAILED:\n{err}")
            results[name] = {"error": err}
        gc.collect()
    ref = results.get("sqlite-vec+fts5", {}).get("_kw_found")
    for res in results.values():
        found = res.pop("_kw_found", None)
        if found is not None and ref is not None:
            res["kw_overlap_fts5"] = overlap(found, ref)
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == _CHILD_MAIN:
        child(*sys.argv[2:6])
    else:
        main()
