"""The oracle is LangGraph itself: random operation sequences applied to MeminiStore and to
LangGraph's InMemoryStore must give equal results.

Compared: get (namespace, key, value), list_namespaces (exactly, in order), search without a
query (the same items; LangGraph's InMemoryStore defines no order there, so a page is
checked to be the right size and drawn from the same items) and search with a query (the
same items, as many scored and unscored among the best ``limit``). Timestamps are left
aside. The machine runs twice: with MeminiStore's default query ranking, LangGraph's own
(each item by its best field's cosine): MeminiStore's must then be best-first by
InMemoryStore's own cosine scores, and its best ``limit`` must have the oracle's best scores
(ties aside, the same ranking); and with ``index["recall"] = {"alpha": 0.5}``, vectors and
words fused, an order LangGraph does not define, where only the items are compared.

Two adaptations of the oracle, where InMemoryStore's behaviour is an accident of its dicts:
it keeps listing a namespace after its last item is deleted, and after a mere get of it
(its dict of namespaces is a defaultdict), while MeminiStore, like LangGraph's SQLite and
Postgres stores, lists namespaces that hold items: after every step the oracle's empty
namespaces are dropped. And a re-put with ``index=False`` keeps the item's previous vectors
in InMemoryStore (its vectors are dropped only by a delete), so a query still finds the new
value by the old text; MeminiStore stores the item without vectors, as ``index=False``
says: the oracle's stale vectors are dropped on such a put.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from langgraph.store.base import Item
from langgraph.store.memory import InMemoryStore

import lg_helpers as H
from memini import Store
from memini.langgraph import MeminiStore

NAMESPACES = [("a",), ("a", "b"), ("a", "b/c"), ("b", "a"), ("a", "x", "b"), ("100%",)]
KEYS = ["k1", "k2", "k3", "k/4", "ключ"]
WORDS = ["red", "green", "apple", "car", "dog", "sky", "blue"]
TAGS = ["x", "y", "z"]

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
values = st.fixed_dictionaries(
    {"text": texts, "n": st.integers(-3, 3), "tag": st.sampled_from(TAGS)},
    optional={
        "f": st.floats(-1e6, 1e6, allow_nan=False),
        "nested": st.fixed_dictionaries({"m": st.integers(0, 2)}),
        "list": st.lists(st.integers(0, 2), max_size=2),
    },
)
prefixes = st.sampled_from([(), ("a",), ("a", "b"), ("b",), ("a", "x"), ("c",), ("100%",)])
filters = st.one_of(
    st.none(),
    st.sampled_from(TAGS).map(lambda t: {"tag": t}),
    st.sampled_from(TAGS).map(lambda t: {"tag": {"$ne": t}}),
    st.sampled_from(TAGS).map(lambda t: {"tag": {"$eq": t}}),
    st.tuples(
        st.sampled_from(["$gt", "$gte", "$lt", "$lte", "$eq", "$ne"]), st.integers(-3, 3)
    ).map(lambda p: {"n": {p[0]: p[1]}}),
    st.integers(0, 2).map(lambda m: {"nested": {"m": m}}),
    st.tuples(st.sampled_from(TAGS), st.integers(-3, 3)).map(
        lambda p: {"tag": p[0], "n": {"$gte": p[1]}}
    ),
)
patterns = st.lists(st.sampled_from(["a", "b", "x", "*", "b/c"]), min_size=1, max_size=3).map(tuple)


def _triple(item: Item | None) -> tuple[Any, ...] | None:
    """What is compared of an item: namespace, key and the value as JSON text (key order,
    ints and floats included)."""
    return None if item is None else (item.namespace, item.key, json.dumps(item.value))


class Oracle(RuleBasedStateMachine):
    """MeminiStore (its default query ranking, LangGraph's) vs InMemoryStore, step by step,
    order compared."""

    RECALL: dict[str, Any] | None = None  # index["recall"] of the MeminiStore
    RANKED_BY_VECTORS = True

    @initialize()
    def open(self) -> None:
        self.store = Store.open(None, dims=H.DIMS, metric="cos")
        self.memini = MeminiStore(self.store, index={**H.index(), "recall": self.RECALL})
        self.lg = InMemoryStore(index=H.index())  # type: ignore[arg-type]

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()

    def _drop_empty_namespaces(self) -> None:
        for ns in [ns for ns, items in self.lg._data.items() if not items]:
            del self.lg._data[ns]

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS), value=values)
    def put(self, ns: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        self.memini.put(ns, key, value)
        self.lg.put(ns, key, value)

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS), value=values)
    def put_unindexed(self, ns: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        self.memini.put(ns, key, value, index=False)
        self.lg.put(ns, key, value, index=False)
        self.lg._vectors[ns].pop(key, None)

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS))
    def delete(self, ns: tuple[str, ...], key: str) -> None:
        self.memini.delete(ns, key)
        self.lg.delete(ns, key)
        self._drop_empty_namespaces()

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS))
    def get(self, ns: tuple[str, ...], key: str) -> None:
        assert _triple(self.memini.get(ns, key)) == _triple(self.lg.get(ns, key))
        self._drop_empty_namespaces()

    @rule(prefix=prefixes, flt=filters, limit=st.integers(1, 12), offset=st.integers(0, 4))
    def search(
        self, prefix: tuple[str, ...], flt: dict[str, Any] | None, limit: int, offset: int
    ) -> None:
        everything = {_triple(i) for i in self.lg.search(prefix, filter=flt, limit=1000)}
        assert {
            _triple(i) for i in self.memini.search(prefix, filter=flt, limit=1000)
        } == everything
        page = [
            _triple(i) for i in self.memini.search(prefix, filter=flt, limit=limit, offset=offset)
        ]
        assert len(page) == len(set(page)) == max(0, min(limit, len(everything) - offset))
        assert set(page) <= everything

    @rule(prefix=prefixes, flt=filters, query=texts, limit=st.integers(1, 12))
    def search_query(
        self, prefix: tuple[str, ...], flt: dict[str, Any] | None, query: str, limit: int
    ) -> None:
        oracle = self.lg.search(prefix, query=query, filter=flt, limit=1000)
        score = {(i.namespace, i.key): i.score for i in oracle}
        mine = self.memini.search(prefix, query=query, filter=flt, limit=1000)
        assert {_triple(i) for i in mine} == {_triple(i) for i in oracle}
        ranked = [score[(i.namespace, i.key)] for i in mine if i.score is not None]
        assert all(s is not None for s in ranked), "an item scored by one store only"
        top = self.memini.search(prefix, query=query, filter=flt, limit=limit)
        want = [i.score for i in oracle[:limit] if i.score is not None]
        got = [score[(i.namespace, i.key)] for i in top if i.score is not None]
        assert len(top) == len(oracle[:limit])
        assert len(got) == len(want)
        if self.RANKED_BY_VECTORS:
            assert all(a >= b - 1e-6 for a, b in itertools.pairwise(ranked))  # type: ignore[operator]
            # the best `limit`: the oracle's best scores (ties may swap items)
            assert all(abs(a - b) <= 1e-6 for a, b in zip(got, want, strict=True))  # type: ignore[operator]

    @rule(
        prefix=st.one_of(st.none(), patterns),
        suffix=st.one_of(st.none(), patterns),
        max_depth=st.one_of(st.none(), st.integers(1, 3)),
        limit=st.integers(1, 10),
        offset=st.integers(0, 3),
    )
    def list_namespaces(
        self,
        prefix: tuple[str, ...] | None,
        suffix: tuple[str, ...] | None,
        max_depth: int | None,
        limit: int,
        offset: int,
    ) -> None:
        args = {"prefix": prefix, "suffix": suffix, "max_depth": max_depth}
        assert self.memini.list_namespaces(
            **args, limit=limit, offset=offset
        ) == self.lg.list_namespaces(**args, limit=limit, offset=offset)

    @invariant()
    def same_namespaces(self) -> None:
        if hasattr(self, "memini"):
            assert self.memini.list_namespaces(limit=1000) == self.lg.list_namespaces(limit=1000)


class HybridOracle(Oracle):
    """MeminiStore ranking queries by vectors and words fused vs InMemoryStore, items
    compared."""

    RECALL = {"alpha": 0.5}  # noqa: RUF012 - a constant of the class
    RANKED_BY_VECTORS = False


_SETTINGS = {"stateful_step_count": 25, "deadline": None}
Oracle.TestCase.settings = settings(Oracle.TestCase.settings, **_SETTINGS)
HybridOracle.TestCase.settings = settings(HybridOracle.TestCase.settings, **_SETTINGS)
TestVectorOracle = Oracle.TestCase
TestHybridOracle = HybridOracle.TestCase
