"""``memini demo``: import the shipped sample, recall from it.

The sample (``memini/data``) holds 10,000 PyPI package summaries with float16 vectors and a
few query vectors; the demo imports it into a store (skipping what is there already) and
runs a vector, a keyword, a filtered and a time-travel recall. The sample's vectors come from
all-MiniLM-L6-v2 (sentence-transformers), the model `memini.embed.LocalEmbedder` runs: with
``memini[embed]`` installed the demo also embeds typed queries (``--query``) in process.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import importlib.resources
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from rich.console import Console

from memini.cli.common import (
    CliError,
    create_store,
    open_existing,
    progress_bar,
    store_location,
)
from memini.cli.importer import Importer
from memini.embed import LocalEmbedder
from memini.errors import InvalidArgumentError, MeminiError
from memini.store import Store, shown_location
from memini.types import Filter, Scored, Tier

__all__ = ["DEFAULT_DEMO_QUERIES", "DEFAULT_DEMO_STORE", "cmd_demo"]

DEFAULT_DEMO_STORE = "./memini-data"
"""Where ``memini demo`` puts its store unless told otherwise."""

DEFAULT_DEMO_QUERIES = ("read tables out of pdf files", "tool to keep my agents' memories")
"""The typed queries ``memini demo`` embeds with the local model unless given ``--query``."""


@dataclass
class _Sample:
    records: list[dict[str, Any]]
    vectors: npt.NDArray[np.float32]
    queries: list[tuple[str, npt.NDArray[np.float32]]]
    model: str


def _load_sample() -> _Sample:
    data = importlib.resources.files("memini").joinpath("data")
    with data.joinpath("sample.jsonl.gz").open("rb") as f:
        records = [json.loads(line) for line in gzip.GzipFile(fileobj=f)]
    with data.joinpath("sample.f16.npy.gz").open("rb") as f:
        vectors = np.lib.format.read_array(gzip.GzipFile(fileobj=f)).astype(np.float32)
    meta = json.loads(data.joinpath("sample_queries.json").read_text(encoding="utf-8"))
    queries = [
        (q["text"], np.frombuffer(base64.b64decode(q["embedding_f16"]), "<f2").astype(np.float32))
        for q in meta["queries"]
    ]
    return _Sample(records, vectors, queries, meta["model"])


def _hit_line(h: Scored, store: Store | None = None) -> str:
    """One search hit on one line: score, package name, text, and any supersession."""
    m = h.memory
    text = m.content if len(m.content) <= 60 else m.content[:57] + "..."
    line = f"   {h.score:6.3f}  {m.summary[:24]:<24} {text}"
    if m.superseded_by:
        successor = m.superseded_by
        if store is not None:
            with contextlib.suppress(MeminiError):
                successor = store.get(m.namespace, successor).summary or successor
        when = m.valid_to.date().isoformat() if m.valid_to else "?"
        line += f"\n            (superseded by {successor} on {when})"
    return line


def _timed(fn: Callable[[], list[Scored]]) -> tuple[list[Scored], float]:
    t0 = time.perf_counter()
    hits = fn()
    return hits, (time.perf_counter() - t0) * 1000


def _local_embedder() -> LocalEmbedder | None:
    """The local model when its weights are installed, else None."""
    try:
        return LocalEmbedder()
    except InvalidArgumentError:
        return None


def _open_demo_store(path: Path | str, sample: _Sample, embedder: LocalEmbedder | None) -> Store:
    """The demo's store: created for the sample, or one holding nothing but the sample (a
    previous run's). Any other store is refused: the demo would add 10,000 rows to it."""
    dims = sample.vectors.shape[1]
    store = open_existing(path, "demo", embedder=embedder)
    if store is None:
        return create_store(path, dims, "cos", "demo", embedder=embedder)
    st = store.stats()
    if (st["dims"], st["metric"]) != (dims, "cos") or not _only_the_sample(store, sample):
        store.close()
        raise CliError(
            f"store {path} holds memories of its own: the demo imports "
            f"{len(sample.records):,} sample rows ({dims} dims, cos) only into a new store or "
            "its own; pass --store NEW_DIR"
        )
    return store


def _only_the_sample(store: Store, sample: _Sample) -> bool:
    """Whether every memory of ``store`` is a row of the sample (in its namespace)."""
    names = store.list_namespaces()
    if not names:
        return True
    ns = sample.records[0]["namespace"]
    if names != [ns]:
        return False
    everything = Filter(include_expired=True, include_superseded=True)
    if store.count(ns, everything) > len(sample.records):
        return False
    ids = {r["id"] for r in sample.records}
    return all(m.id in ids for m in store.list(ns, everything))


def cmd_demo(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini demo``: import the shipped sample into a store and run a few recalls."""
    sample = _load_sample()
    dims = sample.vectors.shape[1]
    path = store_location(args.store)
    ns = "pypi"

    def say(text: str = "") -> None:
        out.print(text, markup=False, highlight=False)

    embedder = _local_embedder()
    if embedder is not None and embedder.model != sample.model:
        raise CliError(f"the sample was embedded with {sample.model}, not {embedder.model}")
    store = _open_demo_store(path, sample, embedder)
    with store:
        if not store.embed_model():
            store.set_embed_model(sample.model)
        say(
            f"memini demo: store {shown_location(path)} ({dims} dims, {store.stats()['metric']}), "
            f"sample of {len(sample.records):,} PyPI package summaries ({sample.model})"
        )
        t0 = time.perf_counter()
        imp = Importer(
            store,
            batch=1000,
            default_ns=ns,
            on_error=lambda n, msg: err.print(f"sample row {n}: {msg}", markup=False),
        )
        with progress_bar(err) as progress:
            task = progress.add_task("importing sample", total=len(sample.records), rows=0)
            for i, rec in enumerate(sample.records):
                imp.add(i + 1, {**rec, "embedding": sample.vectors[i]})
                if i % 500 == 499:
                    progress.update(task, completed=i + 1, rows=i + 1)
            s = imp.finish()
        secs = time.perf_counter() - t0
        rate = f", {s.memories.inserted / secs:,.0f} rows/s" if s.memories.inserted else ""
        say(
            f"import: {s.memories.inserted:,} inserted, {s.memories.skipped:,} already there, "
            f"{s.bad} bad, in {secs:.1f} s{rate}"
        )
        live = store.count(ns)
        total = store.count(ns, Filter(include_superseded=True, include_expired=True))
        say(f"namespace {ns!r}: {total:,} memories, {live:,} live ({total - live:,} superseded)")

        (q1, v1), (q2, v2) = sample.queries[0], sample.queries[1]
        say()
        hits, ms = _timed(lambda: store.vector_search(ns, v1, k=5))
        say(f"1. vector recall, k=5 ({ms:.1f} ms): {q1!r}")
        for h in hits:
            say(_hit_line(h, store))

        kw = "pdf extract text tables"
        hits, ms = _timed(lambda: store.keyword_search(ns, kw, k=5))
        say(f"2. keyword recall (BM25), k=5 ({ms:.1f} ms): {kw!r}")
        for h in hits:
            say(_hit_line(h, store))

        flt = Filter(
            tags=["cli"],
            tiers=[Tier.PROCEDURAL, Tier.SEMANTIC],
            created_after=datetime(2023, 1, 1, tzinfo=UTC),
        )
        hits, ms = _timed(lambda: store.vector_search(ns, v2, flt, k=5))
        say(
            f"3. filtered vector recall, tag 'cli', tier procedural|semantic, created in 2023 "
            f"or later ({ms:.1f} ms): {q2!r}"
        )
        for h in hits:
            say(_hit_line(h, store))

        q3, v3 = sample.queries[4]
        when = datetime(2022, 1, 1, tzinfo=UTC)
        then = Filter(as_of=when)
        hits_now, ms_now = _timed(lambda: store.vector_search(ns, v3, k=5))
        hits_then, ms_then = _timed(lambda: store.vector_search(ns, v3, then, k=5))
        valid_then = store.count(ns, then)
        say(f"4. time travel: {q3!r}")
        say(f"   now, live rows ({ms_now:.1f} ms):")
        for h in hits_now:
            say(_hit_line(h, store))
        say(f"   as_of {when.date()}, the {valid_then:,} rows valid then ({ms_then:.1f} ms):")
        for h in hits_then:
            say(_hit_line(h, store))

        say()
        queries: list[str] = args.query or list(DEFAULT_DEMO_QUERIES)
        if embedder is None:
            say(
                "5. typed queries: install the local model to embed them "
                "(pip install 'memini[embed]')"
            )
            return 0
        for i, text in enumerate(queries):
            t0 = time.perf_counter()
            vec = store._embed_query(text)
            embed_ms = (time.perf_counter() - t0) * 1000
            if i == 0 and embedder.load_seconds is not None:
                say(f"5. typed queries, embedded by {embedder.model} in process")
                say(f"   (model loaded in {embedder.load_seconds:.2f} s, once)")
                embed_ms -= embedder.load_seconds * 1000
            if vec is None:
                continue
            hits, ms = _timed(lambda v=vec: store.vector_search(ns, v, k=5))  # type: ignore[misc]
            say(f"   {text!r} (embedded in {embed_ms:.1f} ms, searched in {ms:.1f} ms):")
            for h in hits:
                say(_hit_line(h, store))
    return 0
