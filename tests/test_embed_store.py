"""Store.open(..., embedder=): dims and embed_model from the embedder, rows without an
embedding embedded from their content (one call per upsert_many), the query helper."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from embed_helpers import needs_weights
from memini import DimensionMismatchError, InvalidArgumentError, Memory, NotFoundError, Store
from memini.embed import LocalEmbedder


class LetterEmbedder:
    """A real (if crude) embedder: letter-bigram counts hashed into ``dims`` buckets,
    normalised. Records every call so tests can count them."""

    def __init__(self, model: str = "test/bigrams", dims: int = 16, out_dims: int | None = None):
        self.model = model
        self.dims = dims
        self.out_dims = out_dims or dims
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.out_dims), dtype=np.float32)
        for i, t in enumerate(texts):
            s = t.lower()
            for a, b in itertools.pairwise(s):
                out[i, zlib.crc32((a + b).encode()) % self.out_dims] += 1.0
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        return out


@pytest.fixture(params=["disk", "memory"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Path | None:
    return tmp_path / "s" if request.param == "disk" else None


def test_dims_and_model_come_from_the_embedder(where: Path | None) -> None:
    e = LetterEmbedder()
    with Store.open(where, embedder=e) as s:
        assert s.stats()["dims"] == 16
        assert s.embed_model() == "test/bigrams"
    with Store.open(where, dims=16, embedder=e) as s:  # the same explicit dims: fine
        assert s._embedder is e
    with pytest.raises(DimensionMismatchError, match=r"dims=8 .* 16-d"):
        Store.open(where, dims=8, embedder=e)


def test_reopen_with_another_model_is_refused(tmp_path: Path) -> None:
    with Store.open(tmp_path, embedder=LetterEmbedder("model-a")) as s:
        s.upsert(Memory(id="1", namespace="n", content="hello world"))
    with pytest.raises(DimensionMismatchError, match=r"'model-a'.*'model-b'"):
        Store.open(tmp_path, embedder=LetterEmbedder("model-b"))
    # the refused open released the store: the right model and no embedder both open it
    with Store.open(tmp_path, embedder=LetterEmbedder("model-a")) as s:
        assert s.count("n") == 1
    with Store.open(tmp_path) as s:
        assert s.embed_model() == "model-a" and s._embedder is None


def test_a_store_without_a_recorded_model_adopts_the_embedders(tmp_path: Path) -> None:
    with Store.open(tmp_path, dims=16) as s:
        assert s.embed_model() == ""
    with Store.open(tmp_path, embedder=LetterEmbedder()) as s:
        assert s.embed_model() == "test/bigrams"


def test_upsert_embeds_content_of_rows_without_embedding(where: Path | None) -> None:
    e = LetterEmbedder()
    given = np.full(16, 0.25, dtype=np.float32)
    with Store.open(where, embedder=e) as s:
        s.upsert(Memory(id="a", namespace="n", content="Alice prefers green tea"))
        s.upsert(Memory(id="b", namespace="n", content="anything", embedding=given))
        s.upsert(Memory(id="c", namespace="n", content="   "))
        assert e.calls == [["Alice prefers green tea"]]
        np.testing.assert_array_equal(
            s.get_embedding("n", "a"), e.embed(["Alice prefers green tea"])[0]
        )
        np.testing.assert_array_equal(s.get_embedding("n", "b"), given)
        assert s.get_embedding("n", "c") is None  # blank content: keyword-only


def test_upsert_many_embeds_in_one_call(where: Path | None) -> None:
    e = LetterEmbedder()
    ms = [Memory(id=str(i), namespace="n", content=f"memory {i}") for i in range(50)]
    ms[7].embedding = np.ones(16, dtype=np.float32)
    with Store.open(where, embedder=e) as s:
        assert s.upsert_many(ms) == 50
        assert len(e.calls) == 1 and len(e.calls[0]) == 49
        assert "memory 7" not in e.calls[0]
        np.testing.assert_array_equal(s.get_embedding("n", "3"), e.embed(["memory 3"])[0])


def test_update_re_embeds_changed_content_only(where: Path | None) -> None:
    e = LetterEmbedder()
    with Store.open(where, embedder=e) as s:
        s.upsert(Memory(id="a", namespace="n", content="first words"))
        e.calls.clear()
        s.update("n", "a", importance=0.5)
        assert e.calls == []
        np.testing.assert_array_equal(s.get_embedding("n", "a"), e.embed(["first words"])[0])
        e.calls.clear()
        s.update("n", "a", content="second words")
        assert e.calls == [["second words"]]
        np.testing.assert_array_equal(s.get_embedding("n", "a"), e.embed(["second words"])[0])
        mine = np.full(16, 0.5, dtype=np.float32)
        s.update("n", "a", content="third", embedding=mine)
        np.testing.assert_array_equal(s.get_embedding("n", "a"), mine)
        s.update("n", "a", content="  ")
        assert s.get_embedding("n", "a") is None
        s.update("n", "a", content="back again")
        s.update("n", "a", embedding=None)  # explicit removal still removes
        assert s.get_embedding("n", "a") is None


def test_a_failing_embedder_stores_nothing(where: Path | None) -> None:
    class Broken(LetterEmbedder):
        def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            raise RuntimeError("model crashed")

    wrong = LetterEmbedder(out_dims=15)
    with Store.open(where, embedder=wrong) as s:
        batch = [Memory(id=str(i), namespace="n", content=f"m {i}") for i in range(3)]
        with pytest.raises(DimensionMismatchError, match="15-d vectors but says dims=16"):
            s.upsert_many(batch)
        assert s.count("n") == 0
    with Store.open(where, embedder=Broken()) as s:
        with pytest.raises(RuntimeError, match="model crashed"):
            s.upsert(Memory(id="x", namespace="n", content="text"))
        with pytest.raises(NotFoundError):
            s.get("n", "x")


def test_embed_query(where: Path | None) -> None:
    e = LetterEmbedder()
    with Store.open(where, embedder=e) as s:
        np.testing.assert_array_equal(s._embed_query("tea?"), e.embed(["tea?"])[0])
        assert s._embed_query("  ") is None
    with Store.open(None, dims=4) as s:
        assert s._embed_query("tea?") is None


@pytest.mark.parametrize(
    "embedder",
    [
        pytest.param(object(), id="no-embed-method"),
        pytest.param(LetterEmbedder(model=""), id="empty-model"),
        pytest.param(LetterEmbedder(dims=0), id="dims-0"),
    ],
)
def test_not_an_embedder(embedder: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="embedder"):
        Store.open(None, embedder=embedder)


@needs_weights
def test_local_embedder_finds_typed_queries(where: Path | None) -> None:
    facts = {
        "tea": "Alice prefers green tea in the morning",
        "deploy": "The production deploy runs every Friday at noon",
        "cat": "Bob's cat is called Miso and is afraid of the vacuum",
        "db": "The team moved the database from MySQL to PostgreSQL last year",
    }
    with Store.open(where, embedder=LocalEmbedder(), metric="cos") as s:
        assert s.embed_model() == "sentence-transformers/all-MiniLM-L6-v2"
        s.upsert_many([Memory(id=k, namespace="n", content=v) for k, v in facts.items()])
        for query, want in [
            ("what does Alice drink?", "tea"),
            ("when do we ship to prod?", "deploy"),
            ("what is the name of Bob's pet?", "cat"),
            ("which SQL server do we use", "db"),
        ]:
            q = s._embed_query(query)
            assert q is not None
            assert s.vector_search("n", q, k=1)[0].memory.id == want, query


def test_recall_embeds_its_query(where: Path | None) -> None:
    e = LetterEmbedder()
    with Store.open(where, embedder=e, metric="cos") as s:
        s.upsert_many(
            [
                Memory(id="tea", namespace="n", content="green tea every morning"),
                Memory(id="car", namespace="n", content="the car is parked outside"),
            ]
        )
        e.calls.clear()
        hits = s.recall("n", "green tea", k=2)
        assert e.calls == [["green tea"]]
        assert hits[0].memory.id == "tea"
        assert hits[0].vector_score is not None and hits[0].keyword_score is not None
        e.calls.clear()
        s.recall("n", "green tea", vector=e.embed(["tea"])[0], k=2)  # a given vector wins
        assert e.calls == [["tea"]]


def test_cli_embedder_option() -> None:
    import argparse

    from memini.cli.common import embedder_arg, make_embedder
    from memini.embed import OpenAIEmbedder

    assert make_embedder(embedder_arg("none")) is None and make_embedder(None) is None
    e = make_embedder(embedder_arg("openai:http://127.0.0.1:9/v1#nomic-embed-text"))
    assert isinstance(e, OpenAIEmbedder)
    assert (e.url, e.model) == ("http://127.0.0.1:9/v1/embeddings", "nomic-embed-text")
    e.close()
    for bad in ("openai:http://x", "minilm", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="use local, openai"):
            embedder_arg(bad)


class _IpEmbedder(LetterEmbedder):
    metric = "ip"


@pytest.mark.parametrize(
    ("embedder", "metric"),
    [
        pytest.param(LetterEmbedder(), "cos", id="text-models-default-to-cos"),
        pytest.param(_IpEmbedder(), "ip", id="the-embedders-own-metric"),
    ],
)
def test_a_new_store_takes_the_embedders_metric(
    where: Path | None, embedder: LetterEmbedder, metric: str
) -> None:
    """A store opened with an embedder and no metric was created l2 forever (and the
    LangGraph adapter then refused it)."""
    with Store.open(where, embedder=embedder) as s:
        assert s.stats()["metric"] == metric
    if where is not None:
        with Store.open(where, embedder=embedder) as s:  # a reopen keeps it
            assert s.stats()["metric"] == metric
        with Store.open(where) as s:
            assert s.stats()["metric"] == metric


def test_an_explicit_metric_still_wins(where: Path | None) -> None:
    with Store.open(where, metric="l2", embedder=LetterEmbedder()) as s:
        assert s.stats()["metric"] == "l2"


def test_text_without_a_vector_is_refused_when_the_store_records_a_model(tmp_path: Path) -> None:
    """Opened without an embedder, a store whose vectors come from a model stored text with
    no vector, silently: recall by meaning never found it."""
    e = LetterEmbedder()
    with Store.open(tmp_path, embedder=e) as s:
        s.upsert(Memory(id="a", namespace="n", content="alice drinks green tea"))
    with Store.open(tmp_path) as s:
        for write in (
            lambda: s.upsert(Memory(id="b", namespace="n", content="bob likes coffee")),
            lambda: s.upsert_many([Memory(id="b", namespace="n", content="bob likes coffee")]),
            lambda: s.update("n", "a", content="alice drinks black tea"),
        ):
            with pytest.raises(InvalidArgumentError, match=r"embedder=.*embedding="):
                write()
        assert s.count("n") == 1
        assert s.get("n", "a").content == "alice drinks green tea"
        # the ways that do work: a vector, or a keyword-only row asked for
        s.upsert(Memory(id="b", namespace="n", content="bob", embedding=e.embed(["bob"])[0]))
        s.upsert(Memory(id="c", namespace="n", content="carol", embedding=[]))
        s.update("n", "a", content="alice drinks black tea", embedding=e.embed(["x"])[0])
        s.update("n", "a", summary="tea")  # content unchanged: nothing to embed
        assert s.get_embedding("n", "c") is None
    with Store.open(tmp_path / "plain", dims=4) as s:  # no model recorded: as before
        s.upsert(Memory(id="k", namespace="n", content="keyword-only row"))
        s.set_embed_model("some-model")  # this open's own writes stay as they were asked
        s.upsert(Memory(id="l", namespace="n", content="text"))
    with Store.open(tmp_path / "plain") as s, pytest.raises(InvalidArgumentError, match="some"):
        s.upsert(Memory(id="m", namespace="n", content="text"))


@needs_weights
def test_a_store_of_the_local_model_embeds_without_being_told(tmp_path: Path) -> None:
    with Store.open(tmp_path, embedder=LocalEmbedder()) as s:
        s.upsert(Memory(id="tea", namespace="n", content="Alice drinks green tea"))
    with Store.open(tmp_path) as s:  # no embedder= : the recorded local model
        s.upsert(Memory(id="bug", namespace="n", content="debugging a memory leak"))
        assert s.get_embedding("n", "bug") is not None
        hits = s.recall("n", "what beverage does she like?", k=1)
        assert hits[0].memory.id == "tea" and hits[0].vector_score is not None


def test_an_embedder_of_other_dims_is_told_what_to_do(tmp_path: Path) -> None:
    with Store.open(tmp_path, embedder=LetterEmbedder("model-a", dims=16)):
        pass
    with pytest.raises(DimensionMismatchError) as e:
        Store.open(tmp_path, embedder=LetterEmbedder("model-b", dims=8))
    message = str(e.value)
    assert "model-b" in message and "8-d" in message and "dims=None" not in message


def test_a_wrong_length_embedding_is_not_told_to_reopen_the_store(tmp_path: Path) -> None:
    with Store.open(tmp_path, dims=4) as s:
        s.upsert(Memory(id="a", namespace="n", content="x", embedding=[1, 2, 3, 4]))
        for write in (
            lambda: s.update("n", "a", embedding=[1, 2, 3]),
            lambda: s.upsert(Memory(id="b", namespace="n", content="x", embedding=[1, 2, 3])),
        ):
            with pytest.raises(DimensionMismatchError) as e:
                write()
            assert "open the store with" not in str(e.value)
            assert "store expects 4" in str(e.value)
