"""memini.langgraph.MeminiStore: LangGraph's BaseStore on a memini Store.

The behaviours LangGraph's own store tests check (namespaces, values, filters, vector search,
pagination, TTL), written for MeminiStore; the equivalence with LangGraph's InMemoryStore on
random operation sequences is in test_langgraph_oracle.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp

import lg_helpers as H
from embed_helpers import needs_weights
from memini import InvalidArgumentError, Store
from memini.langgraph import MeminiStore, namespace_from_tuple, namespace_to_tuple

OpenLG = Callable[..., MeminiStore]


@pytest.fixture(params=["disk", "memory"])
def open_lg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenLG]:
    """``open_lg(index=..., ttl=...)``: a MeminiStore over a fresh 16-d cos store."""
    opened: list[tuple[MeminiStore, Store]] = []

    def factory(**options: Any) -> MeminiStore:
        path = tmp_path / f"s{len(opened)}" if request.param == "disk" else None
        store = Store.open(path, dims=H.DIMS, metric="cos")
        lg = MeminiStore(store, **options)
        opened.append((lg, store))
        return lg

    yield factory
    for lg, store in opened:
        lg.close()
        store.close()


@pytest.fixture
def lg(open_lg: OpenLG) -> MeminiStore:
    """A MeminiStore indexing the ``text`` field."""
    return open_lg(index=H.index())


def keys(items: Sequence[Any]) -> list[str]:
    return [i.key for i in items]


# ---------------------------------------------------------------------- namespaces


labels = st.text(
    st.characters(blacklist_characters=".\x00", blacklist_categories=("Cs",)), min_size=1
)


@given(st.lists(labels, min_size=1, max_size=4).map(tuple))
def test_namespace_mapping_is_reversible(ns: tuple[str, ...]) -> None:
    assert namespace_to_tuple(namespace_from_tuple(ns)) == ns


@pytest.mark.parametrize(
    ("ns", "memini"),
    [
        pytest.param(("users", "42"), "users/42", id="plain"),
        pytest.param(("a/b", "c"), "a%2Fb/c", id="slash-escaped"),
        pytest.param(("100%",), "100%25", id="percent-escaped"),
        pytest.param(("%2F",), "%252F", id="escape-of-escape"),
    ],
)
def test_namespace_mapping(ns: tuple[str, ...], memini: str) -> None:
    assert namespace_from_tuple(ns) == memini
    assert namespace_to_tuple(memini) == ns


@pytest.mark.parametrize("foreign", ["a//b", "/a", "a%", "a%2", "a%zz", ""])
def test_foreign_namespaces_are_not_langgraph_ones(foreign: str) -> None:
    assert namespace_to_tuple(foreign) is None


@pytest.mark.parametrize(
    "ns",
    [
        pytest.param((), id="empty"),
        pytest.param(("the", "thing.about"), id="dot"),
        pytest.param(("some", ""), id="empty-label"),
        pytest.param(("nul\x00",), id="nul"),
        pytest.param(("langgraph", "x"), id="reserved-root"),
        pytest.param(("a", 1), id="not-a-str"),
    ],
)
def test_put_refuses_langgraph_invalid_namespaces(lg: MeminiStore, ns: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidNamespaceError):
        lg.put(ns, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        asyncio.run(lg.aput(ns, "k", {"v": 1}))
    assert lg.list_namespaces() == []


def test_reserved_root_only_through_put(lg: MeminiStore) -> None:
    """As in LangGraph: ``langgraph`` as the root label is refused by put, not by batch."""
    lg.batch([PutOp(("langgraph", "x"), "k", {"v": 1})])
    assert lg.get(("langgraph", "x"), "k").value == {"v": 1}  # type: ignore[union-attr]
    lg.put(("foo", "langgraph"), "k", {"v": 2})
    assert lg.search(("foo", "langgraph"))[0].value == {"v": 2}


def test_stored_rows(lg: MeminiStore) -> None:
    lg.put(("users", "a/b"), "prefs", {"text": "dark mode", "n": 1})
    store = lg._store
    assert store.list_namespaces() == ["users/a%2Fb"]
    (row,) = store.list("users/a%2Fb")
    assert json.loads(row.id) == ["users/a%2Fb", "prefs"]
    assert row.content == "dark mode"
    assert row.metadata["memory_type"] == "langgraph"
    assert json.loads(row.metadata["$value"]) == {"text": "dark mode", "n": 1}
    assert row.metadata["value.text"] == "dark mode"
    emb = store.get_embedding("users/a%2Fb", row.id)
    assert emb is not None
    np.testing.assert_allclose(emb, np.float32(H.embed(["dark mode"])[0]), rtol=1e-6)


def test_list_namespaces(lg: MeminiStore) -> None:
    for i, ns in enumerate(
        [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    ):
        lg.put(ns, f"k{i}", {"i": i})
    assert lg.list_namespaces(prefix=("a", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "f"),
    ]
    assert lg.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert lg.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert lg.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert lg.list_namespaces(suffix=("*", "a", "*")) == [("b", "a", "f")]
    assert lg.list_namespaces(max_depth=2) == [("a", "b"), ("a", "c"), ("b", "a")]
    assert lg.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert lg.list_namespaces(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "b", "f")]
    assert lg.list_namespaces(prefix=("zz",)) == []
    lg.delete(("a", "b", "c"), "k0")
    assert ("a", "b", "c") not in lg.list_namespaces()


def test_list_namespaces_pagination_and_empty(lg: MeminiStore) -> None:
    assert lg.list_namespaces() == []
    for i in range(20):
        lg.put(("ns", f"sub{i:02d}"), "k", {"i": i})
    pages = [lg.list_namespaces(prefix=("ns",), limit=5, offset=o) for o in range(0, 20, 5)]
    assert [ns for page in pages for ns in page] == [("ns", f"sub{i:02d}") for i in range(20)]


# ---------------------------------------------------------------------- values and batches


VALUES = [
    pytest.param({"a": 1, "b": 1.0, "c": 0.1, "d": -0.0}, id="ints-floats"),
    pytest.param({"big": 2**80, "neg": -(2**70)}, id="big-ints"),
    pytest.param({"z": 1, "a": {"y": [1, {"x": None}], "b": True}}, id="nested-order"),
    pytest.param({"text": "é中\U0001f600\n\t\"'", "": "empty key"}, id="unicode"),
    pytest.param({}, id="empty"),
]


@pytest.mark.parametrize("value", VALUES)
def test_values_round_trip_exactly(lg: MeminiStore, value: dict[str, Any]) -> None:
    lg.put(("v",), "k", value)
    got = lg.get(("v",), "k")
    assert got is not None
    assert json.dumps(got.value) == json.dumps(value)  # key order and int/float kept
    assert lg.search(("v",))[0].value == value


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"when": datetime.now(UTC)}, id="datetime"),
        pytest.param({"x": float("nan")}, id="nan"),
        pytest.param({"x": {1, 2}}, id="set"),
        pytest.param(["not", "a", "dict"], id="list"),
    ],
)
def test_non_json_values_are_refused_and_nothing_is_written(lg: MeminiStore, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        lg.batch([PutOp(("v",), "good", {"x": 1}), PutOp(("v",), "bad", bad)])
    assert lg.get(("v",), "good") is None


def test_batch_reads_see_the_store_before_its_writes(lg: MeminiStore) -> None:
    lg.put(("b",), "k", {"v": 1})
    results = lg.batch(
        [
            PutOp(("b",), "k", {"v": 2}),
            GetOp(("b",), "k"),
            PutOp(("b",), "k", {"v": 3}),
            SearchOp(("b",)),
        ]
    )
    assert results[0] is None and results[2] is None
    assert results[1].value == {"v": 1}  # type: ignore[union-attr]
    assert [i.value for i in results[3]] == [{"v": 1}]  # type: ignore[union-attr]
    assert lg.get(("b",), "k").value == {"v": 3}  # type: ignore[union-attr]


def test_put_update_delete_and_timestamps(lg: MeminiStore) -> None:
    lg.put(("t",), "k", {"v": 1})
    first = lg.get(("t",), "k")
    assert first is not None and first.created_at.tzinfo is not None
    time.sleep(0.01)
    lg.put(("t",), "k", {"v": 2})
    second = lg.get(("t",), "k")
    assert second is not None and second.value == {"v": 2}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    lg.delete(("t",), "k")
    assert lg.get(("t",), "k") is None
    lg.delete(("t",), "k")  # deleting a missing key is fine
    assert lg.get(("missing",), "k") is None


def test_items_survive_a_reopen(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", dims=H.DIMS, metric="cos") as s:
        MeminiStore(s, index=H.index()).put(("p",), "k", {"text": "kept"})
    with Store.open(tmp_path / "s") as s:
        lg = MeminiStore(s, index=H.index())
        assert lg.get(("p",), "k").value == {"text": "kept"}  # type: ignore[union-attr]
        assert keys(lg.search(("p",), query="kept")) == ["k"]


# ---------------------------------------------------------------------- search


def test_search_without_query_newest_update_first(lg: MeminiStore) -> None:
    for k in ("a", "b", "c"):
        lg.put(("s", k), k, {"k": k})
        time.sleep(0.002)
    lg.put(("s", "a"), "a", {"k": "a2"})
    assert keys(lg.search(("s",))) == ["a", "c", "b"]
    assert keys(lg.search(("s",), limit=1, offset=1)) == ["c"]
    assert keys(lg.search(("s", "b"))) == ["b"]
    assert keys(lg.search(())) == ["a", "c", "b"]
    assert lg.search(("nope",)) == []


DOCS = [
    ("doc1", {"text": "red apple", "color": "red", "score": 4.5, "tags": ["a", "b"]}),
    ("doc2", {"text": "red car", "color": "red", "score": 3.0, "meta": {"x": 1, "y": 2}}),
    ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
    ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
]


@pytest.mark.parametrize(
    ("flt", "want"),
    [
        pytest.param({"color": "red"}, {"doc1", "doc2"}, id="eq-plain"),
        pytest.param({"color": {"$eq": "red"}}, {"doc1", "doc2"}, id="eq"),
        pytest.param({"color": {"$ne": "red"}}, {"doc3", "doc4"}, id="ne"),
        pytest.param({"score": {"$gt": 3.5}}, {"doc1", "doc3"}, id="gt"),
        pytest.param({"score": {"$gte": 3.5}}, {"doc1", "doc3", "doc4"}, id="gte"),
        pytest.param({"score": {"$lt": 3.5}}, {"doc2"}, id="lt"),
        pytest.param({"score": {"$lte": 3.5}}, {"doc2", "doc4"}, id="lte"),
        pytest.param({"score": {"$gt": 3, "$lt": 4.5}}, {"doc3", "doc4"}, id="range"),
        pytest.param({"score": {"$gte": 4.0}, "color": "green"}, {"doc3"}, id="and"),
        pytest.param({"score": 4.5}, {"doc1"}, id="eq-number"),
        pytest.param({"tags": ["a", "b"]}, {"doc1"}, id="eq-list"),
        pytest.param({"meta": {"x": 1}}, {"doc2"}, id="nested-dict"),
        pytest.param({"missing": {"$gt": 1}}, set(), id="range-on-missing-field"),
        pytest.param({"color": {"$gt": 1}}, set(), id="range-on-word"),
        pytest.param({"color": {"$ne": "red"}, "score": {"$ne": 4.0}}, {"doc4"}, id="ne-mixed"),
        pytest.param({"missing": {"$ne": "x"}}, {"doc1", "doc2", "doc3", "doc4"}, id="ne-missing"),
    ],
)
@pytest.mark.parametrize("query", [None, "apple"])
def test_filters(lg: MeminiStore, flt: dict[str, Any], want: set[str], query: str | None) -> None:
    for key, value in DOCS:
        lg.put(("f",), key, value)
    assert set(keys(lg.search(("f",), filter=flt, query=query))) == want


def test_long_strings_are_filtered_exactly_too(lg: MeminiStore) -> None:
    """Strings over 256 characters are not mirrored into the row's metadata: filters on
    them are decided in Python, with the same answers."""
    long = "word " * 100
    lg.put(("l",), "a", {"text": long, "tag": "x"})
    lg.put(("l",), "b", {"text": long + "!", "tag": "x"})
    row = lg._store.list("l")[0]
    assert "value.text" not in row.metadata and row.metadata["value.tag"] == "x"
    assert keys(lg.search(("l",), filter={"text": long})) == ["a"]
    assert keys(lg.search(("l",), filter={"text": {"$ne": long}, "tag": "x"})) == ["b"]
    assert keys(lg.search(("l",), query="word", filter={"text": {"$eq": long}})) == ["a"]


def test_unknown_filter_operator(lg: MeminiStore) -> None:
    with pytest.raises(InvalidArgumentError, match=r"\$in"):
        lg.search(("f",), filter={"x": {"$in": [1]}})


def test_query_ranks_by_meaning(lg: MeminiStore) -> None:
    for key, value in DOCS:
        lg.put(("q",), key, value)
    hits = lg.search(("q",), query="apple", filter={"color": "red"})
    assert keys(hits) == ["doc1", "doc2"]
    assert hits[0].score is not None and hits[0].score > (hits[1].score or 0)
    assert keys(lg.search(("q",), query="car", filter={"color": "red"}))[0] == "doc2"
    assert keys(lg.search(("q",), query="blue", filter={"score": {"$gt": 3.2}}))[0] == "doc4"


@pytest.mark.parametrize("recall", [None, {"alpha": 1.0}, {"fusion": "rrf"}, {"pool": 200}])
def test_recall_options(open_lg: OpenLG, recall: dict[str, Any] | None) -> None:
    """Queries go through Store.recall with index["recall"] as its options."""
    lg = open_lg(index={**H.index(), "recall": recall})
    for key, value in DOCS:
        lg.put(("r",), key, value)
    hits = lg.search(("r",), query="green apple")
    assert keys(hits)[0] == "doc3" and len(hits) == 4
    assert all(h.score is not None for h in hits)


def test_query_pagination(lg: MeminiStore) -> None:
    for i in range(7):
        lg.put(("p",), f"doc{i}", {"text": f"test document {'x ' * i}"})
    every = keys(lg.search(("p",), query="test document", limit=10))
    assert len(every) == 7
    pages = [keys(lg.search(("p",), query="test document", limit=3, offset=o)) for o in (0, 3, 6)]
    assert [k for page in pages for k in page] == every


def test_reput_changes_the_vector_and_index_false_keeps_none(lg: MeminiStore) -> None:
    lg.put(("u",), "doc1", {"text": "zany zebra xerxes"})
    lg.put(("u",), "doc2", {"text": "something about dogs"})
    before = lg.search(("u",), query="zany xerxes")[0]
    assert before.key == "doc1"
    lg.put(("u",), "doc1", {"text": "new text about dogs"})
    after = {i.key: i.score for i in lg.search(("u",), query="zany xerxes")}
    assert (after["doc1"] or 0) < (before.score or 0)
    lg.put(("u",), "doc3", {"text": "new text about dogs"}, index=False)
    assert "doc3" not in keys(lg.search(("u",), query="new text about dogs", limit=2))
    # fewer scored items than the limit: the unindexed ones fill up, unscored
    filled = lg.search(("u",), query="new text about dogs", limit=10)
    assert keys(filled)[-1] == "doc3" and filled[-1].score is None


def test_several_texts_per_item_keep_the_best(lg: MeminiStore) -> None:
    lg.put(
        ("m",),
        "chat",
        {"msgs": [{"c": "weather today"}, {"c": "zebra stripes"}]},
        index=["msgs[*].c"],
    )
    lg.put(("m",), "other", {"msgs": [{"c": "zebra crossing at night"}]}, index=["msgs[*].c"])
    hits = lg.search(("m",), query="zebra stripes")
    assert keys(hits) == ["chat", "other"]  # one result per item, by its best text
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    # a re-put with fewer texts drops the extra vector rows
    lg.put(("m",), "chat", {"msgs": [{"c": "weather today"}]}, index=["msgs[*].c"])
    assert keys(lg.search(("m",), query="zebra stripes")) == ["other", "chat"]
    lg.delete(("m",), "chat")
    lg.delete(("m",), "other")
    assert lg._store.count("m") == 0  # no extra-text row left behind


def test_fields_and_whole_value(open_lg: OpenLG) -> None:
    whole = open_lg(index={"dims": H.DIMS, "embed": H.embed})  # fields default: ["$"]
    whole.put(("w",), "k", {"title": "zebra"})
    row = whole._store.list("w")[0]
    assert row.content == json.dumps({"title": "zebra"})
    two = open_lg(index=H.index(["title", "body"]))
    two.put(("w",), "k", {"title": "zebra", "body": "stripes"})
    # the item row holds every text (for keyword search), an extra row the second one
    assert sorted(r.content for r in two._store.list("w")) == ["stripes", "zebra\nstripes"]
    assert keys(two.search(("w",), query="stripes")) == ["k"]


# ---------------------------------------------------------------------- embedders


class CountingEmbeddings(Embeddings):
    """A LangChain Embeddings counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return H.embed(texts)

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return H.embed([text])[0]


class MeminiLikeEmbedder:
    """The shape of memini's own embedders: model, dims, embed(texts) -> ndarray."""

    model = "test-bag-of-words"
    dims = H.DIMS

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(H.embed(texts), dtype=np.float32)


async def _async_embed(texts: Sequence[str]) -> list[list[float]]:
    await asyncio.sleep(0)
    return H.embed(texts)


@pytest.mark.parametrize(
    "embed",
    [
        pytest.param(CountingEmbeddings(), id="langchain"),
        pytest.param(H.embed, id="function"),
        pytest.param(MeminiLikeEmbedder(), id="memini-embedder"),
    ],
)
def test_embedder_kinds(open_lg: OpenLG, embed: Any) -> None:
    lg = open_lg(index={"dims": H.DIMS, "embed": embed, "fields": ["text"]})
    lg.put(("e",), "a", {"text": "red apple"})
    lg.put(("e",), "b", {"text": "blue car"})
    assert keys(lg.search(("e",), query="apple")) == ["a", "b"]


def test_batch_embeds_once(open_lg: OpenLG) -> None:
    emb = CountingEmbeddings()
    lg = open_lg(index={"dims": H.DIMS, "embed": emb, "fields": ["text"]})
    lg.batch([PutOp(("e",), f"k{i}", {"text": f"word{i}"}) for i in range(10)])
    assert emb.calls == 1


def test_async_embed_function_and_abatch(open_lg: OpenLG) -> None:
    lg = open_lg(index={"dims": H.DIMS, "embed": _async_embed, "fields": ["text"]})

    async def run() -> list[str]:
        await asyncio.gather(
            lg.aput(("e",), "a", {"text": "red apple"}), lg.aput(("e",), "b", {"text": "blue car"})
        )
        got = await lg.aget(("e",), "a")
        assert got is not None and got.value == {"text": "red apple"}
        assert await lg.alist_namespaces() == [("e",)]
        return keys(await lg.asearch(("e",), query="apple"))

    assert asyncio.run(run()) == ["a", "b"]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        pytest.param({"index": {"dims": H.DIMS}}, "embed", id="no-embed"),
        pytest.param({"index": {**H.index(), "dims": 7}}, "dims", id="dims"),
        pytest.param({"index": {**H.index(), "distance": "l2"}}, "unknown index", id="index-key"),
        pytest.param({"ttl": {"default": 5}}, "unknown ttl", id="ttl-key"),
        pytest.param({"index": {**H.index(), "embed": 42}}, "embed", id="embed-kind"),
        pytest.param({"index": {**H.index(), "recall": {"alpha": 2}}}, "alpha", id="alpha"),
        pytest.param({"index": {**H.index(), "recall": {"rerank": None}}}, "recall", id="rk"),
    ],
)
def test_config_errors(open_lg: OpenLG, options: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        open_lg(**options)


def test_an_index_needs_a_cosine_store() -> None:
    with Store.open(None, dims=H.DIMS) as s, pytest.raises(InvalidArgumentError, match="cos"):
        MeminiStore(s, index=H.index())


# ---------------------------------------------------------------------- TTL


def _row(lg: MeminiStore, ns: tuple[str, ...], key: str) -> Any:
    name = namespace_from_tuple(ns)
    return lg._store.get(name, json.dumps([name, key]))


def test_ttl_sets_and_refreshes_expiry(open_lg: OpenLG) -> None:
    lg = open_lg(index=H.index(), ttl={"default_ttl": 10, "refresh_on_read": True})
    t0 = datetime.now(UTC)
    lg.put(("t",), "default", {"text": "a"})
    lg.put(("t",), "own", {"text": "b"}, ttl=60)
    lg.put(("t",), "never", {"text": "c"}, ttl=None)
    exp = _row(lg, ("t",), "default").expires_at
    assert t0 + timedelta(minutes=10) <= exp <= datetime.now(UTC) + timedelta(minutes=10)
    assert _row(lg, ("t",), "own").expires_at >= t0 + timedelta(minutes=60)
    assert _row(lg, ("t",), "never").expires_at is None
    time.sleep(0.02)
    lg.get(("t",), "default")
    assert _row(lg, ("t",), "default").expires_at > exp  # a read restarted the TTL
    later = _row(lg, ("t",), "default").expires_at
    time.sleep(0.02)
    lg.get(("t",), "default", refresh_ttl=False)
    lg.search(("t",), query="a", refresh_ttl=False)
    assert _row(lg, ("t",), "default").expires_at == later
    lg.search(("t",), query="a")
    assert _row(lg, ("t",), "default").expires_at > later
    assert _row(lg, ("t",), "never").expires_at is None


def test_refresh_on_read_false(open_lg: OpenLG) -> None:
    lg = open_lg(ttl={"default_ttl": 10, "refresh_on_read": False})
    lg.put(("t",), "k", {"v": 1})
    exp = _row(lg, ("t",), "k").expires_at
    time.sleep(0.02)
    lg.get(("t",), "k")
    lg.search(("t",))
    assert _row(lg, ("t",), "k").expires_at == exp


def _expire(lg: MeminiStore, ns: tuple[str, ...], key: str) -> None:
    name = namespace_from_tuple(ns)
    past = datetime.now(UTC) - timedelta(seconds=1)
    lg._store.update(name, json.dumps([name, key]), expires_at=past)


@pytest.mark.parametrize("omit", [False, True])
def test_expired_items_until_swept(open_lg: OpenLG, omit: bool) -> None:
    lg = open_lg(index=H.index(), ttl={"default_ttl": 10, "omit_expired": omit})
    lg.put(("x",), "old", {"text": "apple"})
    lg.put(("x",), "new", {"text": "apple pie"})
    _expire(lg, ("x",), "old")
    shown = {"old", "new"} if not omit else {"new"}
    assert {k for k in ("old", "new") if lg.get(("x",), k) is not None} == shown
    assert set(keys(lg.search(("x",)))) == shown
    assert set(keys(lg.search(("x",), query="apple"))) == shown
    assert lg.sweep_ttl() == 1
    assert lg.get(("x",), "old") is None
    assert keys(lg.search(("x",))) == ["new"]


def test_sweeper_thread(open_lg: OpenLG) -> None:
    lg = open_lg(ttl={"default_ttl": 10, "sweep_interval_minutes": 0.001})  # every 60 ms
    lg.put(("x",), "old", {"v": 1})
    _expire(lg, ("x",), "old")
    deadline = time.monotonic() + 10
    while lg.get(("x",), "old") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lg.get(("x",), "old") is None
    assert lg.stop_ttl_sweeper(timeout=5)


# ---------------------------------------------------------------------- LangGraph itself


class ChatState(TypedDict):
    """The graph's state: the user's message and the bot's answer."""

    message: str
    answer: str


def test_a_compiled_graph_remembers_across_threads(tmp_path: Path) -> None:
    """Thread 1 tells the bot a fact; thread 2 (a new conversation, no shared state) asks
    for it and gets it from the store, by meaning."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph

    def remember(state: ChatState) -> dict[str, str]:
        store = get_store()
        if state["message"].startswith("remember: "):
            fact = state["message"].removeprefix("remember: ")
            store.put(("memories", "user-1"), f"fact-{len(fact)}", {"text": fact})
            return {"answer": "noted"}
        return {}

    def recall(state: ChatState) -> dict[str, str]:
        if state.get("answer") == "noted":
            return {}
        found = get_store().search(("memories", "user-1"), query=state["message"], limit=1)
        return {"answer": found[0].value["text"] if found else "I don't know"}

    builder = StateGraph(ChatState)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)

    with Store.open(tmp_path / "mem", dims=H.DIMS, metric="cos") as store:
        lg = MeminiStore(store, index=H.index())
        graph = builder.compile(checkpointer=InMemorySaver(), store=lg)
        one = {"configurable": {"thread_id": "1"}}
        two = {"configurable": {"thread_id": "2"}}
        graph.invoke({"message": "remember: my dog is called rex", "answer": ""}, one)
        graph.invoke({"message": "remember: my favourite colour is green", "answer": ""}, one)
        out = graph.invoke({"message": "what is my dog called", "answer": ""}, two)
        assert out["answer"] == "my dog is called rex"
        out = asyncio.run(graph.ainvoke({"message": "favourite colour", "answer": ""}, two))
        assert out["answer"] == "my favourite colour is green"
        assert lg.list_namespaces() == [("memories", "user-1")]


@needs_weights
def test_memini_local_embedder_finds_memories_by_meaning(tmp_path: Path) -> None:
    """memini's own model (all-MiniLM-L6-v2 in the core) as the IndexConfig's embed, the
    same embedder the store was opened with."""
    from memini.embed import LocalEmbedder

    embedder = LocalEmbedder()
    with Store.open(tmp_path / "s", embedder=embedder, metric="cos") as store:
        lg = MeminiStore(store, index={"dims": embedder.dims, "embed": embedder})
        facts = {
            "tea": "Alice prefers green tea in the morning",
            "deploy": "The production deploy runs every Friday at noon",
            "cat": "Bob's cat is called Miso and is afraid of the vacuum",
        }
        lg.batch([PutOp(("team",), k, {"fact": v}) for k, v in facts.items()])
        for query, want in [
            ("what does Alice drink?", "tea"),
            ("when do we ship to prod?", "deploy"),
            ("what is the name of Bob's pet?", "cat"),
        ]:
            assert lg.search(("team",), query=query, limit=1)[0].key == want, query


def test_import_memini_does_not_import_langgraph() -> None:
    code = (
        "import sys, memini, memini.aio; "
        "print('langgraph' in sys.modules, 'langchain_core' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_an_item_scores_by_its_best_field_as_in_langgraph(open_lg: OpenLG) -> None:
    """LangGraph embeds each field path on its own and scores an item by its best field:
    an item matching one field exactly scores 1.0 (it scored 0.63 with the fields' texts
    fused by recall), and the ranking and scores are InMemoryStore's."""
    from langgraph.store.memory import InMemoryStore

    index = {**H.index(), "fields": ["title", "body"]}
    lg = open_lg(index=index)
    oracle = InMemoryStore(index=index)  # type: ignore[arg-type]
    items = {
        "1": {"title": "red apple", "body": "green sky dog"},
        "2": {"title": "blue car", "body": "red dog"},
        "3": {"title": "dog", "body": "apple car sky"},
    }
    for store in (lg, oracle):
        for key, value in items.items():
            store.put(("u",), key, value)
    for query in ("red dog", "apple car sky", "blue", "green sky dog"):
        got = [(r.key, r.score) for r in lg.search(("u",), query=query)]
        want = [(r.key, r.score) for r in oracle.search(("u",), query=query)]
        assert [k for k, _ in got] == [k for k, _ in want], query
        assert got[0][1] == pytest.approx(want[0][1], abs=1e-6), query
    assert lg.search(("u",), query="apple car sky")[0].score == pytest.approx(1.0, abs=1e-6)
