"""LocalEmbedder: all-MiniLM-L6-v2 in the Rust core, against sentence-transformers' vectors.

Fidelity is checked on 2,000 rows of pypi-100k (every 50th row; its vectors were made with
sentence-transformers and normalised) when the dataset is found (``MEMINI_BENCH_DATA``, else
``<repo>/../shared/datasets/pypi-100k``), and on a handful of its rows committed in
``tests/data/minilm_reference.json`` always.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embed_helpers import needs_weights, reference
from memini.embed import LocalEmbedder
from memini.errors import InvalidArgumentError

REPO = Path(__file__).resolve().parents[1]
DATASET = Path(
    os.environ.get("MEMINI_BENCH_DATA", REPO.parent / "shared" / "datasets" / "pypi-100k")
)
MIN_COSINE = 0.999


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


def _min_cosine(got: np.ndarray, want: np.ndarray) -> float:
    want = want / np.linalg.norm(want, axis=1, keepdims=True)
    return float(np.min(np.sum(got * want, axis=1)))


@needs_weights
def test_matches_committed_reference_vectors(local: LocalEmbedder) -> None:
    texts, want = reference()
    got = local.embed(texts)
    assert got.dtype == np.float32 and got.shape == (len(texts), 384)
    assert _min_cosine(got, want) >= MIN_COSINE


@needs_weights
@pytest.mark.skipif(
    not (DATASET / "texts.jsonl").exists(), reason=f"pypi-100k not found at {DATASET}"
)
def test_matches_sentence_transformers_on_2000_dataset_rows(local: LocalEmbedder) -> None:
    with open(DATASET / "texts.jsonl", encoding="utf-8") as f:
        texts = [json.loads(line)["content"] for line in f]
    rows = np.arange(0, len(texts), 50)[:2000]
    assert len(rows) >= 2000
    want = np.load(DATASET / "vectors.f16.npy", mmap_mode="r")[rows].astype(np.float32)
    got = local.embed([texts[i] for i in rows])
    cos = np.sum(got * (want / np.linalg.norm(want, axis=1, keepdims=True)), axis=1)
    worst = int(np.argmin(cos))
    assert cos[worst] >= MIN_COSINE, (int(rows[worst]), texts[rows[worst]], cos[worst])


@needs_weights
def test_vectors_are_unit_and_independent_of_batch_and_order(local: LocalEmbedder) -> None:
    texts, _ = reference()
    texts = [*texts, "short", "a much longer text " * 20, ""]
    together = local.embed(texts)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # bit for bit: a batch split over threads by texts, a long text alone by rows, a short
    # one on the calling thread, all compute each text's rows alike
    alone = np.stack([local.embed([t])[0] for t in texts])
    np.testing.assert_array_equal(together, alone)
    small = LocalEmbedder(batch=3).embed(texts[::-1])[::-1]
    np.testing.assert_array_equal(together, small)


@needs_weights
def test_tokenizer_lowercases_strips_accents_and_adds_specials(local: LocalEmbedder) -> None:
    ids = local.token_ids("Café RÉSUMÉ")
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]
    assert ids == local.token_ids("cafe resume")
    np.testing.assert_allclose(
        local.embed(["Café RÉSUMÉ"]), local.embed(["cafe resume"]), atol=1e-6
    )


@needs_weights
def test_long_text_is_truncated_at_256_word_pieces(local: LocalEmbedder) -> None:
    words = [f"w{i}" for i in range(400)]  # far over 256 word pieces
    long = " ".join(words)
    ids = local.token_ids(long)
    assert len(ids) == 256 and ids[0] == 101 and ids[-1] == 102
    # what follows the window changes nothing; what is inside it does
    a, b, c = local.embed([long, long + " tail words", "changed " + long])
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert float(a @ c) < 0.9999


@needs_weights
def test_embed_releases_the_gil(local: LocalEmbedder) -> None:
    texts = ["the GIL is released while the model runs"] * 256
    local.embed(texts[:1])  # loaded
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    start = time.perf_counter()
    local.embed(texts)
    elapsed = time.perf_counter() - start
    done.set()
    t.join()
    # a thread holding the GIL for the whole call would leave the counter at ~0
    assert ticks >= min(20, elapsed / 0.004)


@needs_weights
def test_threads_share_one_embedder(local: LocalEmbedder) -> None:
    texts, want = reference()
    results: list[Any] = [None] * 4

    def work(i: int) -> None:
        results[i] = local.embed(texts)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert _min_cosine(r, want) >= MIN_COSINE


@needs_weights
def test_import_and_construction_do_not_load_the_model() -> None:
    e = LocalEmbedder()
    assert e.load_seconds is None and e._core is None
    assert e.dims == 384 and e.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert e.embed([]).shape == (0, 384) and e._core is None
    e.embed(["now it loads"])
    assert e.load_seconds is not None and e.load_seconds > 0


@pytest.mark.parametrize(
    ("texts", "match"),
    [
        pytest.param("a bare string", "wrap one text in a list", id="bare-str"),
        pytest.param([b"bytes"], r"texts\[0\] must be a str", id="bytes-item"),
        pytest.param(None, "sequence of str", id="none"),
    ],
)
@needs_weights
def test_bad_texts_are_refused(local: LocalEmbedder, texts: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        local.embed(texts)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown local model"):
        LocalEmbedder("bert-base-uncased")
    with pytest.raises(InvalidArgumentError, match="batch"):
        LocalEmbedder(batch=0)
    with pytest.raises(InvalidArgumentError, match="batch_wait"):
        LocalEmbedder(batch_wait=-1)
    with pytest.raises(InvalidArgumentError, match="cache_size"):
        LocalEmbedder(cache_size=-1)


def test_missing_weights_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import memini.embed as me

    # the real lookup, for a distribution that is not installed
    monkeypatch.setitem(
        me._LOCAL_MODELS,
        "sentence-transformers/all-MiniLM-L6-v2",
        ("memini-no-such-weights-package", "x/model.zip", 384),
    )
    with pytest.raises(InvalidArgumentError, match=r"pip install 'memini\[embed\]'"):
        LocalEmbedder()


def test_importing_memini_loads_no_model() -> None:
    import subprocess
    import sys

    code = (
        "import sys, memini, memini.embed; "
        "assert 'all_minilm_l6_v2' not in sys.modules; "
        "assert 'torch' not in sys.modules and 'httpx' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "ok\n"


@needs_weights
def test_concurrent_callers_get_exactly_their_vectors_alone_and_share_passes() -> None:
    texts, _ = reference()
    queries = [*texts, "what does Alice drink?", "", "a much longer text " * 30]
    alone = LocalEmbedder(cache_size=0)
    want = {q: alone.embed([q])[0] for q in queries}
    shared = LocalEmbedder(cache_size=0, batch_wait=0.05)
    shared.embed(["load"])
    assert shared._core is not None
    passes_before = shared._core.passes
    rounds = 6
    got: list[list[tuple[str, np.ndarray]]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        for r in range(rounds):
            barrier.wait()
            q = queries[(i + r) % len(queries)]
            got[i].append((q, shared.embed([q])[0]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for results in got:
        assert len(results) == rounds
        for q, v in results:
            np.testing.assert_array_equal(v, want[q])  # bit for bit: batch mates change nothing
    # 48 one-text calls released together: they shared forward passes
    assert shared._core.passes - passes_before < 8 * rounds


@needs_weights
def test_recent_vectors_are_cached_and_the_cache_is_bounded() -> None:
    e = LocalEmbedder(cache_size=3)
    assert e.cached == 0
    texts = [f"query number {i}" for i in range(10)]
    first = e.embed(texts)
    assert e.cached == 3
    assert e._core is not None
    passes = e._core.passes
    again = e.embed(texts[-3:])  # the last three are remembered: no forward pass
    assert e._core.passes == passes
    np.testing.assert_array_equal(again, first[-3:])
    e.embed(texts[:1])  # evicts the least recently used
    assert e.cached == 3 and e._core.passes == passes + 1
    off = LocalEmbedder(cache_size=0)
    off.embed(texts)
    assert off.cached == 0


def _extract(dest: Path) -> Path:
    import zipfile

    from memini.embed import _weights_zip

    with zipfile.ZipFile(_weights_zip("sentence-transformers/all-MiniLM-L6-v2")) as z:
        z.extractall(dest)
    return dest


@needs_weights
def test_weights_from_a_hugging_face_directory(local: LocalEmbedder, tmp_path: Path) -> None:
    texts, want = reference()
    model_dir = _extract(tmp_path / "plain")
    got = LocalEmbedder(path=model_dir).embed(texts)
    np.testing.assert_array_equal(got, local.embed(texts))
    # a Hugging Face cache entry: the snapshot under it is found; vocab.txt instead of
    # tokenizer.json gives the same word pieces
    snap = tmp_path / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / "abc"
    _extract(snap)
    vocab = json.loads((snap / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    (snap / "tokenizer.json").unlink()
    words = sorted(vocab, key=vocab.__getitem__)
    (snap / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    from_cache = LocalEmbedder(path=snap.parent.parent)
    long = "Café RÉSUMÉ, naïve 東京 tokenizers! " * 40
    assert from_cache.token_ids(long) == local.token_ids(long)
    assert _min_cosine(from_cache.embed(texts), want) >= MIN_COSINE


@needs_weights
def test_a_model_shape_the_embedder_cannot_run_names_the_rule_and_the_fix(
    tmp_path: Path,
) -> None:
    """A config.json whose attention heads are not a multiple of 16 wide (384 / 16 = 24) is
    refused saying so, and what to use instead, not only that the shape cannot run."""
    model_dir = _extract(tmp_path / "m")
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    (model_dir / "config.json").write_text(
        json.dumps({**config, "num_attention_heads": 16}), encoding="utf-8"
    )
    with pytest.raises(InvalidArgumentError, match=r"heads are 24 wide .*another embedder"):
        LocalEmbedder(path=model_dir).embed(["x"])


@needs_weights
def test_missing_or_broken_weights_in_a_directory_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="Hugging Face layout"):
        LocalEmbedder(path=tmp_path / "nowhere")
    with pytest.raises(InvalidArgumentError, match=r"has no model\.safetensors"):
        LocalEmbedder(path=tmp_path)
    model_dir = _extract(tmp_path / "m")
    (model_dir / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    e = LocalEmbedder(path=model_dir)
    with pytest.raises(InvalidArgumentError, match=r"no tensor .*Hugging Face layout"):
        e.embed(["x"])
    (model_dir / "model.safetensors").write_bytes(b"not safetensors")
    (model_dir / "tokenizer.json").unlink()
    with pytest.raises(InvalidArgumentError, match=r"no tokenizer\.json or vocab\.txt"):
        LocalEmbedder(path=model_dir).embed(["x"])
