"""The local embedder (all-MiniLM-L6-v2 in the Rust core) next to sentence-transformers.

Measured: batched throughput (texts/s, batch 64, over the first stored texts of the bench
data: 2,048 at full size, 256 at smoke size), single-query latency (one text per call, the
median over 200 query texts; 50 at smoke size), 8 threads each embedding one query per call
(texts/s, against one batched call of the same queries), the model's load time, and the
vectors' fidelity (min cosine against the dataset's reference vectors, made by
sentence-transformers). The embedder's vector cache is off (``cache_size=0``): every call
runs the model.

The peer is sentence-transformers on torch (CPU), measured in the same run when it is
importable, loaded from the same weights (the ``memini[embed]`` zip, extracted to a temporary
directory), ``normalize_embeddings=True``, batch 64, with torch using every core (the bench
conftest sets OMP_NUM_THREADS=1 for numpy; torch is set back to ``os.cpu_count()`` threads,
as many as the core's). torch is never a dev or CI dependency: without it the ratio is
skipped and the summary says so. ``make bench-embed-venv`` installs it in ``.venv-bench``.
"""

from __future__ import annotations

import os
import statistics
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import _data as D

SMOKE = D.ROWS < 100_000
N_TEXTS = 256 if SMOKE else 2048
N_SINGLE = 50 if SMOKE else 200
BATCH = 64
ROUNDS = 1 if SMOKE else 3


@pytest.fixture(scope="module")
def local() -> Any:
    from memini.embed import LocalEmbedder
    from memini.errors import InvalidArgumentError

    try:
        e = LocalEmbedder(batch=BATCH, cache_size=0)
    except InvalidArgumentError as err:
        pytest.skip(f"local embedder: {err}")
    e.embed(["warm up"])
    return e


@pytest.fixture(scope="module")
def peer(local: Any, bench_dir: Path) -> Any:
    """sentence-transformers on the same weights, or None when it is not installed."""
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    model_dir = bench_dir / "minilm"
    with zipfile.ZipFile(local._zip) as z:
        z.extractall(model_dir)
    model = SentenceTransformer(str(model_dir), device="cpu")
    model.encode(["warm up"], normalize_embeddings=True)
    return model


def _peer_encode(model: Any, texts: list[str]) -> np.ndarray:
    out = model.encode(texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True)
    return np.asarray(out, dtype=np.float32)


def test_embed_batched(benchmark: Any, data: D.Dataset, local: Any, peer: Any) -> None:
    """Batched texts/s vs sentence-transformers (torch CPU); goal >= 1.0x."""
    benchmark.group = f"embed: {N_TEXTS} texts, batch {BATCH}"
    texts = data.texts[:N_TEXTS]
    got: list[np.ndarray] = []

    def run() -> None:
        got[:] = [local.embed(texts)]

    if peer is None:
        secs = D.timed_rounds(benchmark, run, ROUNDS)
        peer_rate = None
    else:
        want: list[np.ndarray] = []

        def beside() -> None:
            want[:] = [_peer_encode(peer, texts)]

        secs, peer_secs = D.timed_pair(benchmark, run, beside, ROUNDS)
        peer_rate = N_TEXTS / peer_secs
    rate = N_TEXTS / secs
    ref = data.vectors[:N_TEXTS] / np.linalg.norm(data.vectors[:N_TEXTS], axis=1, keepdims=True)
    fidelity = float(np.min(np.sum(got[0] * ref, axis=1)))
    note = f"min cosine vs the data's reference vectors {fidelity:.5f} over {N_TEXTS} texts"
    if peer is None:
        note += "; sentence-transformers not installed: no ratio (make bench-embed-venv)"
    else:
        note += f"; vs torch's own vectors {float(np.min(np.sum(got[0] * want[0], axis=1))):.5f}"
    D.report(
        benchmark,
        "embed texts/s batched",
        rate,
        "texts/s",
        peer=peer_rate,
        peer_name="sentence-transformers",
        ratio=None if peer_rate is None else rate / peer_rate,
        goal=">= 1.0x" if peer_rate else "",
        met=None if peer_rate is None else rate >= peer_rate,
        note=note,
        min_cosine=fidelity,
    )
    assert fidelity >= 0.999


def _single_ms(fn: Any, queries: list[str]) -> float:
    times = []
    for q in queries:
        t0 = time.perf_counter()
        fn([q])
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def test_embed_single_query(benchmark: Any, data: D.Dataset, local: Any, peer: Any) -> None:
    """One query per call, median ms vs sentence-transformers; goal <= 1.0x its latency."""
    benchmark.group = "embed: single query"
    queries = data.query_texts[:N_SINGLE]
    ms: list[float] = []
    peer_ms: list[float] = []

    def run() -> None:
        ms.append(_single_ms(local.embed, queries))

    def beside() -> None:
        if peer is not None:
            peer_ms.append(_single_ms(lambda t: _peer_encode(peer, t), queries))

    D.timed_pair(benchmark, run, beside, ROUNDS)
    ours, theirs = min(ms), (min(peer_ms) if peer_ms else None)
    D.report(
        benchmark,
        "embed single query",
        ours,
        "ms",
        peer=theirs,
        peer_name="sentence-transformers",
        ratio=None if theirs is None else ours / theirs,
        goal="<= 1.0x" if theirs else "",
        met=None if theirs is None else ours <= theirs,
        note=f"median of {len(queries)} one-text calls"
        + ("" if theirs else "; sentence-transformers not installed: no ratio"),
    )


def test_embed_eight_threads(benchmark: Any, data: D.Dataset, local: Any) -> None:
    """8 threads each embedding one query per call (the core batches them) vs one batched
    call of the same queries; goal >= 0.8x the batched rate."""
    import threading

    benchmark.group = "embed: 8 threads, one query per call"
    queries = data.query_texts[: max(N_SINGLE, 64)]
    rates: list[float] = []
    batched: list[float] = []

    def run() -> None:
        parts = [queries[i::8] for i in range(8)]

        def work(part: list[str]) -> None:
            for q in part:
                local.embed([q])

        threads = [threading.Thread(target=work, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rates.append(len(queries) / (time.perf_counter() - t0))

    def beside() -> None:
        t0 = time.perf_counter()
        local.embed(queries)
        batched.append(len(queries) / (time.perf_counter() - t0))

    D.timed_pair(benchmark, run, beside, ROUNDS)
    ours, whole = max(rates), max(batched)
    D.report(
        benchmark,
        "embed 8 threads x 1 query",
        ours,
        "texts/s",
        peer=whole,
        peer_name="one batched call",
        ratio=ours / whole,
        goal=">= 0.8x",
        met=ours >= 0.8 * whole,
        note=f"{len(queries)} queries over 8 threads, one text per call, cache off",
    )


def test_embed_model_load(benchmark: Any, local: Any) -> None:
    """Time of the first embed of a fresh LocalEmbedder: read the zip, load the weights."""
    from memini.embed import LocalEmbedder

    benchmark.group = "embed: model load"
    loads: list[float] = []

    def run() -> None:
        e = LocalEmbedder()
        e.embed(["load"])
        assert e.load_seconds is not None
        loads.append(e.load_seconds)

    D.timed_rounds(benchmark, run, 1)
    D.report(
        benchmark,
        "embed model load",
        min(loads),
        "s",
        note="unzip model.safetensors + tokenizer.json (90 MB) and build the model; once "
        "per LocalEmbedder, on its first embed",
    )
