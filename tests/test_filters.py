"""Filters, the live rule, time travel, sorting and paging (API.md sections 2 and 4)."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_type_hints

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from memini import (
    Filter,
    InvalidArgumentError,
    Level,
    Memory,
    Sort,
    SortKey,
    Store,
    Tier,
    _wire,
)
from memini import _convert as cv
from memini._core import Engine

NS = "ns"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def h(hours: float) -> datetime:
    return NOW + timedelta(hours=hours)


def mem(id: str, ns: str = NS, **kw: Any) -> Memory:
    kw.setdefault("content", f"common words for {id}")
    kw.setdefault("created_at", h(-100))
    kw.setdefault("updated_at", h(-100))
    kw.setdefault("last_accessed_at", h(-100))
    kw.setdefault("embedding", [1.0, 0.5, 0.25, 0.125])
    return Memory(id=id, namespace=ns, **kw)


def ids(rows: Sequence[Memory]) -> list[str]:
    return [m.id for m in rows]


def visible_everywhere(s: Store, f: Filter, ns: str = NS) -> dict[str, list[str]]:
    """What list, count, vector_search and keyword_search each select under `f`."""
    q = np.array([1.0, 0.5, 0.25, 0.125], dtype=np.float32)
    return {
        "list": sorted(ids(s.list(ns, f))),
        "count": [str(s.count(ns, f))],
        "vector": sorted(h.memory.id for h in s.vector_search(ns, q, f, k=1000)),
        "keyword": sorted(h.memory.id for h in s.keyword_search(ns, "common", f, k=1000)),
    }


def expect_everywhere(expected: Sequence[str]) -> dict[str, list[str]]:
    e = sorted(expected)
    return {"list": e, "count": [str(len(e))], "vector": e, "keyword": e}


# ---------------------------------------------------------------------------------------------
# the live rule and time travel, one row at a time

WALL = "wall-clock"  # marker: leave Filter.now unset

LIVE_CASES = [
    # plain live rule against Filter.now
    pytest.param({}, {}, True, id="plain-row-live"),
    pytest.param({"expires_at": h(1)}, {}, True, id="expires-later-live"),
    pytest.param({"expires_at": NOW}, {}, False, id="expires-at-now-hidden"),
    pytest.param({"expires_at": h(-1)}, {}, False, id="expired-row-hidden"),
    pytest.param(
        {"expires_at": h(-1)}, {"include_expired": True}, True, id="expired-row-include-expired"
    ),
    pytest.param({"superseded_by": "x"}, {}, False, id="superseded-hidden"),
    pytest.param(
        {"superseded_by": "x"}, {"include_superseded": True}, True, id="include-superseded"
    ),
    pytest.param(
        {"superseded_by": "x"},
        {"include_expired": True},
        False,
        id="include-expired-does-not-show-superseded",
    ),
    pytest.param(
        {"expires_at": h(-1)},
        {"include_superseded": True},
        False,
        id="include-superseded-does-not-show-expired",
    ),
    pytest.param({"valid_to": h(1)}, {}, True, id="valid-to-later-live"),
    pytest.param({"valid_to": NOW}, {}, False, id="valid-to-now-hidden"),
    pytest.param({"valid_to": h(-1)}, {}, False, id="validity-ended-hidden"),
    pytest.param(
        {"valid_to": h(-1)},
        {"include_superseded": True},
        True,
        id="include-superseded-lifts-valid-to",
    ),
    pytest.param(
        {"valid_to": h(-1)},
        {"include_expired": True},
        False,
        id="include-expired-does-not-lift-valid-to",
    ),
    pytest.param({"valid_from": h(5)}, {}, True, id="future-valid-from-still-live"),
    pytest.param(
        {"expires_at": h(-1), "superseded_by": "x", "valid_to": h(-1)},
        {"include_expired": True, "include_superseded": True},
        True,
        id="both-flags-show-everything",
    ),
    pytest.param({"expires_at": h(-1)}, {"now": h(-2)}, True, id="now-is-the-reference"),
    pytest.param({"valid_to": h(-1)}, {"now": h(-2)}, True, id="now-is-the-reference-valid-to"),
    pytest.param({"expires_at": h(1)}, {"now": h(2)}, False, id="later-now-expires-row"),
    # time travel: valid_from <= as_of < valid_to
    pytest.param(
        {"valid_from": h(-10), "valid_to": h(-5)}, {"as_of": h(-11)}, False, id="as-of-before"
    ),
    pytest.param(
        {"valid_from": h(-10), "valid_to": h(-5)},
        {"as_of": h(-10)},
        True,
        id="as-of-at-valid-from-inclusive",
    ),
    pytest.param(
        {"valid_from": h(-10), "valid_to": h(-5)}, {"as_of": h(-7)}, True, id="as-of-inside"
    ),
    pytest.param(
        {"valid_from": h(-10), "valid_to": h(-5)},
        {"as_of": h(-5)},
        False,
        id="as-of-at-valid-to-exclusive",
    ),
    pytest.param(
        {"valid_from": h(-10), "valid_to": h(-5)}, {"as_of": h(-4)}, False, id="as-of-after"
    ),
    pytest.param(
        {"valid_from": h(-10), "valid_to": h(-5), "superseded_by": "x"},
        {"as_of": h(-7)},
        True,
        id="as-of-ignores-superseded-by",
    ),
    pytest.param(
        {"valid_from": h(-10), "valid_to": h(-5), "superseded_by": "x"},
        {"as_of": h(-4)},
        False,
        id="as-of-outside-window-superseded",
    ),
    pytest.param(
        {"valid_from": h(-10), "valid_to": h(-5)},
        {"as_of": h(-4), "include_superseded": True},
        False,
        id="include-superseded-does-not-widen-as-of",
    ),
    pytest.param({}, {"as_of": h(-1000)}, True, id="as-of-open-bounds"),
    pytest.param({"valid_to": h(-5)}, {"as_of": h(-1000)}, True, id="as-of-open-valid-from"),
    pytest.param({"valid_from": h(-5)}, {"as_of": h(1000)}, True, id="as-of-open-valid-to"),
    pytest.param({"superseded_by": "x"}, {"as_of": h(-1)}, True, id="as-of-superseded-no-bounds"),
    pytest.param({"expires_at": h(-3)}, {"as_of": h(-4)}, True, id="as-of-is-the-reference"),
    pytest.param({"expires_at": h(-3)}, {"as_of": h(-2)}, False, id="expired-at-as-of"),
    pytest.param(
        {"expires_at": h(-3)},
        {"as_of": h(-2), "include_expired": True},
        True,
        id="as-of-with-include-expired",
    ),
    pytest.param(
        {"expires_at": h(1)}, {"now": h(2), "as_of": h(0)}, True, id="as-of-wins-over-now"
    ),
    pytest.param(
        {"expires_at": h(1)}, {"now": h(0), "as_of": h(2)}, False, id="as-of-wins-over-now-2"
    ),
    # wall clock when neither as_of nor now is set
    pytest.param(
        {"expires_at": datetime(2000, 1, 1, tzinfo=UTC)}, {"now": WALL}, False, id="wall-expired"
    ),
    pytest.param(
        {"expires_at": datetime(2999, 1, 1, tzinfo=UTC)}, {"now": WALL}, True, id="wall-live"
    ),
    pytest.param(
        {"valid_to": datetime(2000, 1, 1, tzinfo=UTC)}, {"now": WALL}, False, id="wall-ended"
    ),
]


@pytest.mark.parametrize(("row", "filter_kw", "visible"), LIVE_CASES)
def test_live_rule(
    store: Store, row: dict[str, Any], filter_kw: dict[str, Any], visible: bool
) -> None:
    store.upsert(mem("r", **row))
    store.upsert(mem("decoy", ns="other", **row))
    kw = {"now": NOW, **filter_kw}
    if kw["now"] == WALL:
        del kw["now"]
    got = visible_everywhere(store, Filter(**kw))
    assert got == expect_everywhere(["r"] if visible else [])


def test_default_filter_is_live_at_wall_clock(store: Store) -> None:
    past = datetime(2000, 1, 1, tzinfo=UTC)
    future = datetime(2999, 1, 1, tzinfo=UTC)
    store.upsert_many(
        [
            mem("live"),
            mem("expired", expires_at=past),
            mem("expiring", expires_at=future),
            mem("superseded", superseded_by="live"),
            mem("ended", valid_to=past),
            mem("ending", valid_to=future),
        ]
    )
    assert sorted(ids(store.list(NS))) == ["ending", "expiring", "live"]
    assert store.count(NS) == 3
    assert sorted(ids(store.list(NS, None))) == ["ending", "expiring", "live"]
    assert store.count(NS, None) == 3
    q = np.array([1.0, 0.5, 0.25, 0.125], dtype=np.float32)
    assert sorted(h.memory.id for h in store.vector_search(NS, q, k=10)) == [
        "ending",
        "expiring",
        "live",
    ]
    assert sorted(h.memory.id for h in store.keyword_search(NS, "common", k=10)) == [
        "ending",
        "expiring",
        "live",
    ]


def test_naive_filter_datetimes_are_utc(store: Store) -> None:
    store.upsert(mem("r", expires_at=h(1)))
    naive_before = (NOW + timedelta(minutes=30)).replace(tzinfo=None)
    naive_after = (NOW + timedelta(minutes=90)).replace(tzinfo=None)
    assert ids(store.list(NS, Filter(now=naive_before))) == ["r"]
    assert ids(store.list(NS, Filter(now=naive_after))) == []


# ---------------------------------------------------------------------------------------------
# field filters over one fixed data set

DATA = [
    mem(
        "r01",
        tier=Tier.SEMANTIC,
        level=Level.EXPLICIT,
        tags=["a", "b"],
        metadata={"k": "v", "j": "w", "memory_type": "decision"},
        created_at=h(-10),
        last_accessed_at=h(-1),
    ),
    mem(
        "r02",
        tier=Tier.WORKING,
        level=Level.DEDUCED,
        tags=["a"],
        metadata={"k": "v", "memory_type": "preference"},
        created_at=h(-9),
        last_accessed_at=h(-2),
    ),
    mem(
        "r03",
        tier=Tier.EPISODIC,
        level=None,
        tags=["A", "b"],
        metadata={"k": 1, "memory_type": "problem"},
        created_at=h(-8),
        last_accessed_at=h(-3),
    ),
    mem(
        "r04",
        tier=Tier.PROCEDURAL,
        level=None,
        tags=["ab"],
        metadata={"k": "1"},
        created_at=h(-7),
        last_accessed_at=h(-4),
    ),
    mem(
        "r05",
        tier=Tier.SEMANTIC,
        level=Level.EXPLICIT,
        tags=[],
        metadata={"k": True},
        created_at=h(-6),
        last_accessed_at=h(-5),
    ),
    mem(
        "r06",
        tier=Tier.SEMANTIC,
        level=Level.DEDUCED,
        tags=["b"],
        metadata={"k": "true", "memory_type": 1},
        created_at=h(-5),
        last_accessed_at=h(-6),
    ),
    mem(
        "r07",
        tier=Tier.WORKING,
        level=Level.EXPLICIT,
        tags=["a", "b", "c"],
        metadata={"k": {"nested": "v"}, "nested": {"k": "v"}},
        created_at=h(-4),
        last_accessed_at=h(-7),
    ),
    mem(
        "r08",
        tier=Tier.EPISODIC,
        level=None,
        tags=["c"],
        metadata={"k": None},
        created_at=h(-3),
        last_accessed_at=h(-8),
    ),
    mem(
        "r09",
        tier=Tier.PROCEDURAL,
        level=Level.DEDUCED,
        tags=["B"],
        metadata={"k": ""},
        created_at=h(-2),
        last_accessed_at=h(-9),
    ),
    mem(
        "r10",
        tier=Tier.SEMANTIC,
        level=None,
        tags=["a"],
        metadata={"k": "V", "memory_type": "Decision"},
        created_at=h(-1),
        last_accessed_at=h(-10),
    ),
]
ALL = [m.id for m in DATA]


def all_but(*excluded: str) -> list[str]:
    return [i for i in ALL if i not in excluded]


FIELD_CASES = [
    pytest.param({}, ALL, id="no-filter-all-live"),
    # tiers: OR
    pytest.param({"tiers": [Tier.WORKING]}, ["r02", "r07"], id="one-tier"),
    pytest.param(
        {"tiers": [Tier.WORKING, "episodic"]}, ["r02", "r03", "r07", "r08"], id="tiers-or"
    ),
    pytest.param({"tiers": list(Tier)}, ALL, id="all-tiers"),
    # levels: OR, None = legacy rows
    pytest.param({"levels": [Level.EXPLICIT]}, ["r01", "r05", "r07"], id="one-level"),
    pytest.param({"levels": ["deduced"]}, ["r02", "r06", "r09"], id="level-as-string"),
    pytest.param({"levels": [None]}, ["r03", "r04", "r08", "r10"], id="level-none-matches-legacy"),
    pytest.param(
        {"levels": [Level.DEDUCED, None]},
        ["r02", "r03", "r04", "r06", "r08", "r09", "r10"],
        id="levels-or-with-none",
    ),
    pytest.param({"levels": [Level.EXPLICIT, Level.DEDUCED, None]}, ALL, id="all-levels"),
    # tags: AND, exact, case-sensitive
    pytest.param({"tags": ["a"]}, ["r01", "r02", "r07", "r10"], id="one-tag"),
    pytest.param({"tags": ["a", "b"]}, ["r01", "r07"], id="tags-and"),
    pytest.param({"tags": ["A"]}, ["r03"], id="tags-case-sensitive"),
    pytest.param({"tags": ["b"]}, ["r01", "r03", "r06", "r07"], id="tag-exact-not-substring"),
    pytest.param({"tags": ["ab"]}, ["r04"], id="tag-exact-not-split"),
    pytest.param({"tags": ["a", "b", "c", "A"]}, [], id="tags-and-none-has-all"),
    pytest.param({"tags": ["zzz"]}, [], id="unknown-tag"),
    # metadata: AND on top-level string values
    pytest.param({"metadata": {"k": "v"}}, ["r01", "r02"], id="metadata-key-value"),
    pytest.param({"metadata": {"k": "v", "j": "w"}}, ["r01"], id="metadata-and"),
    pytest.param({"metadata": {"k": "1"}}, ["r04"], id="metadata-string-1-not-int-1"),
    pytest.param({"metadata": {"k": "true"}}, ["r06"], id="metadata-string-true-not-bool"),
    pytest.param({"metadata": {"k": ""}}, ["r09"], id="metadata-empty-string"),
    pytest.param({"metadata": {"k": "null"}}, [], id="metadata-null-is-not-a-string"),
    pytest.param({"metadata": {"k": "None"}}, [], id="metadata-none-is-not-a-string"),
    pytest.param({"metadata": {"nested": "v"}}, [], id="metadata-dict-value-never-matches"),
    pytest.param({"metadata": {"k": "V"}}, ["r10"], id="metadata-case-sensitive"),
    pytest.param({"metadata": {"zzz": "v"}}, [], id="metadata-missing-key"),
    # exclude_metadata: drop rows carrying ANY listed pair
    pytest.param({"exclude_metadata": {"k": "v"}}, all_but("r01", "r02"), id="exclude-pair"),
    pytest.param(
        {"exclude_metadata": {"k": "v", "memory_type": "problem"}},
        all_but("r01", "r02", "r03"),
        id="exclude-any-pair",
    ),
    pytest.param({"exclude_metadata": {"k": "1"}}, all_but("r04"), id="exclude-string-only"),
    pytest.param({"exclude_metadata": {"k": "true"}}, all_but("r06"), id="exclude-not-bool"),
    pytest.param({"exclude_metadata": {"zzz": "x"}}, ALL, id="exclude-absent-key-keeps-all"),
    pytest.param(
        {"metadata": {"k": "v"}, "exclude_metadata": {"j": "w"}},
        ["r02"],
        id="metadata-and-exclude",
    ),
    # exclude_ids
    pytest.param(
        {"exclude_ids": ["r01", "r05", "missing"]}, all_but("r01", "r05"), id="exclude-ids"
    ),
    # memory_types: metadata["memory_type"] in list
    pytest.param({"memory_types": ["decision"]}, ["r01"], id="memory-type"),
    pytest.param({"memory_types": ["decision", "problem"]}, ["r01", "r03"], id="memory-types-or"),
    pytest.param({"memory_types": ["Decision"]}, ["r10"], id="memory-type-case-sensitive"),
    pytest.param({"memory_types": ["1"]}, [], id="memory-type-int-is-not-string"),
    # created_after / accessed_after: inclusive
    pytest.param({"created_after": h(-3)}, ["r08", "r09", "r10"], id="created-after-inclusive"),
    pytest.param({"created_after": h(-2.5)}, ["r09", "r10"], id="created-after"),
    pytest.param({"created_after": h(0)}, [], id="created-after-all"),
    pytest.param({"accessed_after": h(-3)}, ["r01", "r02", "r03"], id="accessed-after-inclusive"),
    # combinations: AND across fields
    pytest.param(
        {"tiers": [Tier.SEMANTIC], "tags": ["a"], "levels": [Level.EXPLICIT]},
        ["r01"],
        id="tier-tag-level",
    ),
    pytest.param(
        {"tiers": [Tier.SEMANTIC], "tags": ["a"], "exclude_ids": ["r01"]},
        ["r10"],
        id="tier-tag-exclude-id",
    ),
    pytest.param(
        {"memory_types": ["decision", "preference"], "created_after": h(-9)},
        ["r02"],
        id="memory-type-created-after",
    ),
]


@pytest.fixture
def data(store: Store) -> Store:
    store.upsert_many(DATA)
    # another namespace where every filter would match: it must never leak in
    store.upsert_many([mem(f"x{m.id}", ns="other", **_fields(m)) for m in DATA])
    return store


def _fields(m: Memory) -> dict[str, Any]:
    return {
        k: getattr(m, k)
        for k in ("tier", "level", "tags", "metadata", "created_at", "last_accessed_at")
    }


@pytest.mark.parametrize(("filter_kw", "expected"), FIELD_CASES)
def test_field_filters(data: Store, filter_kw: dict[str, Any], expected: list[str]) -> None:
    f = Filter(now=NOW, **filter_kw)
    assert visible_everywhere(data, f) == expect_everywhere(expected)
    # default order: created_at descending
    assert ids(data.list(NS, f)) == sorted(expected, key=lambda i: -ALL.index(i))


@pytest.mark.parametrize(
    "make_filter",
    [
        pytest.param(lambda: Filter(tiers=["eternal"]), id="unknown-tier"),
        pytest.param(lambda: Filter(levels=["guessed"]), id="unknown-level"),
        pytest.param(lambda: Filter(sort=Sort(key="colour")), id="unknown-sort-key"),
    ],
)
def test_unknown_enum_values_in_filter(data: Store, make_filter: Any) -> None:
    q = np.ones(4, dtype=np.float32)
    for call in (
        lambda: data.list(NS, make_filter()),
        lambda: data.count(NS, make_filter()),
        lambda: data.vector_search(NS, q, make_filter()),
        lambda: data.keyword_search(NS, "common", make_filter()),
    ):
        with pytest.raises(InvalidArgumentError):
            call()


# ---------------------------------------------------------------------------------------------
# sorting and paging


def _sort_rows() -> list[Memory]:
    """Rows with many ties in every sort key, written in a shuffled order."""
    rng = np.random.default_rng(7)
    times = [h(-1), h(-2), h(-3)]
    rows = []
    for i in range(16):
        rows.append(
            mem(
                f"s{i:02d}",
                created_at=times[int(rng.integers(3))],
                updated_at=times[int(rng.integers(3))],
                last_accessed_at=times[int(rng.integers(3))],
                access_count=int(rng.integers(3)),
                importance=[0.1, 0.5, -1.0, 0.5][int(rng.integers(4))],
            )
        )
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


SORT_ROWS = _sort_rows()


def expected_order(rows: Sequence[Memory], key: str, asc: bool) -> list[str]:
    """Sort by `key` (asc or desc), ties by id ascending: the contract, written in Python."""
    by_id = sorted(rows, key=lambda m: m.id)
    return [m.id for m in sorted(by_id, key=lambda m: getattr(m, key), reverse=not asc)]


@pytest.mark.parametrize("asc", [True, False], ids=["asc", "desc"])
@pytest.mark.parametrize("key", list(SortKey), ids=[k.value for k in SortKey])
def test_sort(store: Store, key: SortKey, asc: bool) -> None:
    store.upsert_many(SORT_ROWS)
    want = expected_order(SORT_ROWS, key.value, asc)
    assert ids(store.list(NS, Filter(now=NOW, sort=Sort(key, asc)))) == want
    assert ids(store.list(NS, Filter(now=NOW, sort=Sort(key.value, asc)))) == want


def test_default_sort_is_created_at_desc(store: Store) -> None:
    store.upsert_many(SORT_ROWS)
    want = expected_order(SORT_ROWS, "created_at", asc=False)
    assert ids(store.list(NS, Filter(now=NOW))) == want
    assert ids(store.list(NS)) == want


@pytest.mark.parametrize(
    ("limit", "offset", "window"),
    [
        pytest.param(0, 0, slice(None), id="no-limit"),
        pytest.param(-1, 0, slice(None), id="negative-limit-is-no-limit"),
        pytest.param(5, 0, slice(0, 5), id="limit"),
        pytest.param(5, 3, slice(3, 8), id="limit-and-offset"),
        pytest.param(0, 3, slice(3, None), id="offset-without-limit"),
        pytest.param(100, 14, slice(14, None), id="last-page"),
        pytest.param(5, 16, slice(16, None), id="offset-at-end"),
        pytest.param(5, 100, slice(100, None), id="offset-past-end"),
        pytest.param(1, 15, slice(15, 16), id="last-row"),
    ],
)
def test_limit_and_offset(store: Store, limit: int, offset: int, window: slice) -> None:
    store.upsert_many(SORT_ROWS)
    f = Filter(now=NOW, sort=Sort(SortKey.IMPORTANCE, asc=True))
    full = expected_order(SORT_ROWS, "importance", asc=True)
    assert ids(store.list(NS, f, limit, offset)) == full[window]
    assert ids(store.list(NS, filter=f, limit=limit, offset=offset)) == full[window]
    assert store.count(NS, f) == len(full)


def test_pages_cover_everything_once(store: Store) -> None:
    store.upsert_many(SORT_ROWS)
    f = Filter(now=NOW, sort=Sort(SortKey.ACCESS_COUNT))
    pages = [ids(store.list(NS, f, 3, offset)) for offset in range(0, 18, 3)]
    assert list(itertools.chain.from_iterable(pages)) == expected_order(
        SORT_ROWS, "access_count", asc=False
    )


def test_positional_and_keyword_arguments(store: Store) -> None:
    store.upsert_many(SORT_ROWS)
    f = Filter(now=NOW, tags=[])
    assert store.list(NS, f, 3) == store.list(NS, filter=f, limit=3)
    assert store.list(namespace=NS, filter=f, limit=3, offset=1) == store.list(NS, f, 3, 1)
    assert store.count(NS, f) == store.count(namespace=NS, filter=f) == 16


# ---------------------------------------------------------------------------------------------
# the filter algebra against a brute-force model

GRID = [h(x) for x in range(-3, 4)]  # few instants, so ties and boundaries are common
TAG_VOCAB = ["a", "b", "A", "ab"]
MD_KEYS = ["k", "j", "memory_type"]
MD_VALUES: list[Any] = [
    "a",
    "b",
    "1",
    "true",
    "",
    "decision",
    1,
    True,
    None,
    1.0,
    ["a"],
    {"x": "a"},
]
FILTER_STRINGS = ["a", "b", "1", "true", "", "decision", "problem"]


def model_matches(m: Memory, f: Filter) -> bool:
    """API.md's filter rules, written straight from the text."""
    reference = f.as_of if f.as_of is not None else f.now
    assert reference is not None  # the model never uses the wall clock
    if f.as_of is not None:
        # valid_from <= as_of < valid_to (None bounds open), regardless of superseded_by and
        # include_superseded
        if m.valid_from is not None and not m.valid_from <= f.as_of:
            return False
        if m.valid_to is not None and not f.as_of < m.valid_to:
            return False
    elif not f.include_superseded:
        if m.superseded_by is not None:
            return False
        if m.valid_to is not None and not m.valid_to > reference:
            return False
    if not f.include_expired and m.expires_at is not None and not m.expires_at > reference:
        return False
    if f.tiers and Tier(m.tier) not in {Tier(t) for t in f.tiers}:
        return False
    if f.levels and m.level not in {None if lv is None else Level(lv) for lv in f.levels}:
        return False
    if not all(t in m.tags for t in f.tags):
        return False
    md = m.metadata

    def has(k: str, v: str) -> bool:
        return isinstance(md.get(k), str) and md[k] == v

    if not all(has(k, v) for k, v in f.metadata.items()):
        return False
    if any(has(k, v) for k, v in f.exclude_metadata.items()):
        return False
    if m.id in f.exclude_ids:
        return False
    if f.memory_types and not any(has("memory_type", t) for t in f.memory_types):
        return False
    assert m.created_at is not None and m.last_accessed_at is not None
    if f.created_after is not None and not m.created_at >= f.created_after:
        return False
    return f.accessed_after is None or m.last_accessed_at >= f.accessed_after


maybe_time = st.sampled_from([None, None, None, *GRID])  # mostly None: rows stay live


@st.composite
def rows_strategy(draw: st.DrawFn, ns: str) -> list[Memory]:
    n = draw(st.integers(1, 14))
    rows = []
    for i in range(n):
        rows.append(
            Memory(
                id=f"{ns}-r{i:02d}",
                namespace=ns,
                content=f"common row {i}",
                tier=draw(st.sampled_from(list(Tier))),
                level=draw(st.sampled_from([None, Level.EXPLICIT, Level.DEDUCED])),
                tags=draw(st.lists(st.sampled_from(TAG_VOCAB), unique=True, max_size=3)),
                metadata=draw(
                    st.dictionaries(st.sampled_from(MD_KEYS), st.sampled_from(MD_VALUES))
                ),
                importance=draw(st.sampled_from([0.0, 0.25, 0.5, 1.0])),
                created_at=draw(st.sampled_from(GRID)),
                updated_at=draw(st.sampled_from(GRID)),
                last_accessed_at=draw(st.sampled_from(GRID)),
                access_count=draw(st.integers(0, 3)),
                expires_at=draw(maybe_time),
                superseded_by=draw(st.sampled_from([None, None, None, "someone"])),
                valid_from=draw(maybe_time),
                valid_to=draw(maybe_time),
                embedding=draw(st.none() | st.just([1.0, 0.5, 0.25, 0.125])),
            )
        )
    return rows


FEATURES = [
    "tiers",
    "levels",
    "tags",
    "metadata",
    "exclude_metadata",
    "exclude_ids",
    "as_of",
    "memory_types",
    "created_after",
    "accessed_after",
]


@st.composite
def filter_strategy(draw: st.DrawFn, row_ids: list[str]) -> Filter:
    """A few field filters at a time (so that rows still match), on top of the live rule."""
    on = draw(st.sets(st.sampled_from(FEATURES), max_size=3))
    pairs = st.dictionaries(
        st.sampled_from(MD_KEYS), st.sampled_from(FILTER_STRINGS), min_size=1, max_size=2
    )
    levels = st.sampled_from([None, Level.EXPLICIT, Level.DEDUCED])
    kw: dict[str, Any] = {}
    if "tiers" in on:
        kw["tiers"] = draw(st.lists(st.sampled_from(list(Tier)), unique=True, min_size=1))
    if "levels" in on:
        kw["levels"] = draw(st.lists(levels, unique=True, min_size=1))
    if "tags" in on:
        kw["tags"] = draw(st.lists(st.sampled_from(TAG_VOCAB), unique=True, min_size=1, max_size=2))
    if "metadata" in on:
        kw["metadata"] = draw(pairs)
    if "exclude_metadata" in on:
        kw["exclude_metadata"] = draw(pairs)
    if "exclude_ids" in on and row_ids:
        kw["exclude_ids"] = draw(st.lists(st.sampled_from(row_ids), min_size=1, max_size=4))
    if "as_of" in on:
        kw["as_of"] = draw(st.sampled_from(GRID))
    if "memory_types" in on:
        kw["memory_types"] = draw(
            st.lists(st.sampled_from(FILTER_STRINGS), unique=True, min_size=1, max_size=3)
        )
    if "created_after" in on:
        kw["created_after"] = draw(st.sampled_from(GRID))
    if "accessed_after" in on:
        kw["accessed_after"] = draw(st.sampled_from(GRID))
    return Filter(
        include_expired=draw(st.booleans()),
        include_superseded=draw(st.booleans()),
        now=draw(st.sampled_from(GRID)),
        sort=Sort(draw(st.sampled_from(list(SortKey))), draw(st.booleans())),
        **kw,
    )


_example_counter = itertools.count()


@seed(20240501)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_filters_match_model(store: Store, data: st.DataObject) -> None:
    ns = f"h{next(_example_counter)}"
    rows = data.draw(rows_strategy(ns), label="rows")
    decoys = [
        Memory(id=f"{ns}-decoy", namespace=f"{ns}-other", content="common decoy", embedding=[1] * 4)
    ]
    store.upsert_many([*rows, *decoys])
    f = data.draw(filter_strategy([r.id for r in rows]), label="filter")
    limit = data.draw(st.integers(-1, len(rows) + 1), label="limit")
    offset = data.draw(st.integers(0, len(rows) + 1), label="offset")

    matching = [m for m in rows if model_matches(m, f)]
    event("rows match: " + ("none" if not matching else "all" if matching == rows else "some"))
    order = expected_order(matching, SortKey(f.sort.key).value, f.sort.asc)
    window = order[offset:] if limit <= 0 else order[offset : offset + limit]

    assert ids(store.list(ns, f)) == order
    assert ids(store.list(ns, f, limit, offset)) == window
    assert store.count(ns, f) == len(order)
    with_vector = sorted(m.id for m in matching if m.embedding is not None)
    q = np.array([1.0, 0.5, 0.25, 0.125], dtype=np.float32)
    assert sorted(h.memory.id for h in store.vector_search(ns, q, f, k=100)) == with_vector
    assert sorted(h.memory.id for h in store.keyword_search(ns, "common", f, k=100)) == sorted(
        order
    )
    # a small k: exactly min(k, matches), all of them matches (every score ties here)
    small = store.vector_search(ns, q, f, k=2)
    assert len(small) == min(2, len(with_vector))
    assert {h.memory.id for h in small} <= set(with_vector)
    small = store.keyword_search(ns, "common", f, k=2)
    assert len(small) == min(2, len(order))
    assert {h.memory.id for h in small} <= set(order)


# ---------------------------------------------------------------------------------------------
# one declaration of a filter's fields per language
#
# `memini.Filter` declares them in Python, ``for_filter_fields!`` in rust/types.rs in Rust; the
# spec dict between the two is derived from the dataclass (`memini._convert.filter_to_spec`) and
# the binding refuses a spec with a key missing or unknown, so that a field added on one side
# only fails every filtered call instead of being dropped or defaulted. The wire and the OpenAPI
# document are derived from the dataclass; PostgreSQL (`memini.postgres._filter`) and the core's
# predicate are the code giving each field its meaning, checked by the cases above.

RUST_TYPES = Path(__file__).resolve().parents[1] / "rust" / "types.rs"
SPEC = cv.filter_to_spec(Filter(), NOW)


def filter_spec_keys() -> list[str]:
    """The spec keys `Filter` declares: its fields, those of a dataclass-typed field (``sort``)
    as ``<field>_<subfield>``."""
    hints = get_type_hints(Filter)
    keys: list[str] = []
    for f in dataclasses.fields(Filter):
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            keys += [f"{f.name}_{g.name}" for g in dataclasses.fields(hint)]
        else:
            keys.append(f.name)
    return keys


def rust_filter_fields() -> list[str]:
    """The field names of ``for_filter_fields!`` in rust/types.rs, in order."""
    text = RUST_TYPES.read_text()
    start = text.index("macro_rules! for_filter_fields")
    body = text[start : text.index("\n}\n", start)]
    names = re.findall(r"^\s*(\w+)\s*:\s*[^;]+;\s*$", body, re.M)
    assert len(names) >= 10, f"cannot read the fields of for_filter_fields! in {RUST_TYPES}"
    return names


def test_filter_spec_keys_are_the_filter_fields_and_the_rust_fields() -> None:
    assert list(SPEC) == filter_spec_keys() == rust_filter_fields()


def every_field_set() -> Filter:
    """A `Filter` with no field at its default, each value taken from the first case above
    that tests the field on every backend."""
    kws = [p.values[0] for p in FIELD_CASES] + [p.values[1] for p in LIVE_CASES]
    samples: dict[str, Any] = {"sort": Sort(SortKey.IMPORTANCE, asc=True)}  # as in test_sort
    for kw in kws:
        for name, value in kw.items():
            if value is not WALL:
                samples.setdefault(name, value)
    return Filter(**samples)


def test_every_filter_field_is_tested_on_every_backend() -> None:
    """A `Filter` field without cases above (run on disk, in memory, served and on
    PostgreSQL) or outside the model of `test_filters_match_model` fails here: so a field the
    wire or PostgreSQL do not honour cannot be added unnoticed."""
    spec = cv.filter_to_spec(every_field_set(), NOW)
    assert [k for k in spec if spec[k] == SPEC[k]] == [], "add FIELD_CASES for these fields"
    drawn_always = {"include_expired", "include_superseded", "now", "sort"}  # filter_strategy
    assert set(FEATURES) | drawn_always == {f.name for f in dataclasses.fields(Filter)}


class _Reads(dict[str, Any]):
    """A spec recording the keys read from it."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)


def test_postgres_reads_every_spec_key() -> None:
    pytest.importorskip("psycopg", reason="pip install 'memini[postgres]'")
    from memini.postgres._filter import order_by, where

    spec = _Reads(SPEC)
    where(spec, {})
    order_by(spec)
    assert spec.read == set(SPEC)


def test_wire_carries_every_filter_field() -> None:
    f = every_field_set()
    back = _wire.decode(_wire.loads(_wire.dumps(_wire.encode(f, Filter))), Filter, "filter")
    assert cv.filter_to_spec(back) == cv.filter_to_spec(f)


BAD_SPECS = [
    *(
        pytest.param(
            {k: v for k, v in SPEC.items() if k != key},
            f'missing the key "{key}"',
            id=f"missing-{key}",
        )
        for key in SPEC
    ),
    pytest.param({**SPEC, "colour": "red"}, "unknown key\\(s\\) 'colour'", id="unknown-key"),
    pytest.param({**SPEC, 7: None}, "unknown key\\(s\\) 7", id="unknown-non-str-key"),
    pytest.param({**SPEC, "tags": None}, 'key "tags": ', id="none-list-not-defaulted"),
    pytest.param({**SPEC, "include_expired": None}, 'key "include_expired": ', id="none-flag"),
    pytest.param({**SPEC, "tiers": ["eternal"]}, 'key "tiers": unknown tier', id="bad-tier"),
]


@pytest.mark.parametrize(("spec", "match"), BAD_SPECS)
def test_binding_refuses_a_spec_with_a_key_missing_or_unknown(
    spec: dict[Any, Any], match: str
) -> None:
    engine = Engine(None, 4, "l2")
    q = np.ones(4, dtype=np.float32)
    for call in (
        lambda: engine.count(NS, spec),
        lambda: engine.list(NS, spec, 0, 0),
        lambda: engine.vector_search(NS, q, spec, 1),
        lambda: engine.keyword_search(NS, "x", spec, 1),
    ):
        with pytest.raises(InvalidArgumentError, match=match):
            call()
    assert engine.count(NS, SPEC) == 0  # the complete spec is taken


def test_a_filter_field_of_an_uncovered_type_fails_at_import() -> None:
    with pytest.raises(TypeError, match=r"Filter.colour has type .*add one to _FILTER_RULES"):
        cv._rule(Filter, "colour", bytes)
