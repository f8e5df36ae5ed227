"""Hostile input (API.md section 3): every call either succeeds or raises a `MeminiError`
subclass naming the problem — never another exception type, a crash or a hang — and the rows
written before are intact afterwards.

Each test seeds a namespace ``keep`` (rows with vectors, a link, an API key, events) that no
hostile call targets, then throws hostile values at one call site and checks ``keep`` with
get/list/count/get_embedding after every call. Hostile calls aim at the namespace ``x`` and its
row ``x1`` instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memini import (
    APIKey,
    Event,
    EventFilter,
    EventKind,
    Filter,
    InvalidArgumentError,
    MeminiError,
    Memory,
    NamespaceLink,
    Sort,
    Store,
    Tier,
    hash_api_key,
)

pytestmark = pytest.mark.timeout(120)

DIMS = 4
T0 = datetime(2024, 1, 1, tzinfo=UTC)
EVERYTHING = Filter(include_expired=True, include_superseded=True)

HOSTILE_STRINGS: dict[str, str] = {
    "empty": "",
    "nul": "\x00",
    "nul-inside": "a\x00b",
    "lone-high-surrogate": "\ud800",
    "lone-low-surrogate-inside": "x\udfffy",
    "query-syntax": 'a:b AND (c OR "d* ~2 ^3 [x TO y] \\ +e -f',
    "sql": "'; DROP TABLE memories; --",
    "like-wildcards": "%_%\\",
    "bidi-emoji-zero-width": "\u202e\U0001f980\u200b\ufeff",
    "path-traversal": "../../etc/passwd",
    "newlines": "a\nb\r\n\t",
    "long-64k": "w" * 65_536,
}
WRONG_TYPES: dict[str, Any] = {
    "none": None,
    "int": 1,
    "bytes": b"keep",
    "list": ["keep"],
    "object": object(),
}
TEN_MB = "word " * (2 * 1024 * 1024)


def vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)


def seed(s: Store) -> None:
    s.upsert_many(
        [
            Memory(
                id=f"keep{i}",
                namespace="keep",
                content=f"kept apple number{i}",
                tags=["t"],
                metadata={"k": "v"},
                created_at=T0,
                embedding=vec(i),
            )
            for i in range(3)
        ]
    )
    s.upsert(Memory(id="x1", namespace="x", content="victim row", embedding=vec(99)))
    s.put_link(NamespaceLink("keep", "other", note="kept link", created_at=T0))
    s.put_api_key(APIKey("keep-key", hash_api_key("keep-secret"), "keep", "keep", T0))
    s.append_events([Event("op1", EventKind.REMEMBER, "keep", query="kept", created_at=T0)])


def snapshot(s: Store) -> dict[str, Any]:
    return {
        "rows": s.list("keep", EVERYTHING),
        "count": s.count("keep", EVERYTHING),
        "got": [s.get("keep", f"keep{i}") for i in range(3)],
        "emb": [s.get_embedding("keep", f"keep{i}").tobytes() for i in range(3)],  # type: ignore[union-attr]
        "links": s.list_links("keep"),
        "keys": [k for k in s.list_api_keys() if k.name == "keep-key"],
        "events": s.list_events(EventFilter(namespace="keep")),
        "hits": [h.memory.id for h in s.vector_search("keep", vec(0), k=3)],
        "words": sorted(h.memory.id for h in s.keyword_search("keep", "apple", k=3)),
    }


@pytest.fixture
def seeded(store: Store) -> tuple[Store, dict[str, Any]]:
    seed(store)
    return store, snapshot(store)


def attempt(call: Callable[[], Any], label: str) -> tuple[Any, MeminiError | None, str | None]:
    """Run ``call``; return (result, MeminiError or None, failure description or None)."""
    try:
        return call(), None, None
    except MeminiError as e:
        if not str(e).strip():
            return None, e, f"{label}: {type(e).__name__} with an empty message"
        return None, e, None
    except BaseException as e:
        return None, None, f"{label}: raised {type(e).__name__}: {str(e)[:200]!r}"


def check_all(
    s: Store,
    snap: dict[str, Any],
    call: Callable[[Any], Any],
    values: dict[str, Any],
    must_raise: set[str] = frozenset(),  # type: ignore[assignment]
    ignore: tuple[str, ...] = (),
) -> None:
    """Try every value; collect non-Memini exceptions, missing errors and damage to 'keep'.

    ``ignore`` names snapshot parts the call may legitimately change (e.g. a global prune).
    """
    snap = {k: v for k, v in snap.items() if k not in ignore}
    failures = []
    for name, value in values.items():
        _, err, failure = attempt(lambda value=value: call(value), name)
        if failure:
            failures.append(failure)
        elif name in must_raise and err is None:
            failures.append(f"{name}: accepted, API.md requires an error")
        try:
            s.ping()
            now = {k: v for k, v in snapshot(s).items() if k not in ignore}
        except BaseException as e:
            failures.append(f"{name}: store unusable afterwards: {type(e).__name__}: {e}")
            break
        if now != snap:
            failures.append(f"{name}: rows of namespace 'keep' changed")
    assert not failures, "\n".join(failures)


ALL_VALUES = {**HOSTILE_STRINGS, **{f"type-{k}": v for k, v in WRONG_TYPES.items()}}


def key(v: Any) -> Any:
    """``v`` as a dict key (the test's own dict literal must not be what raises)."""
    return v if isinstance(v, Hashable) else repr(v)


def mem(**kw: Any) -> Memory:
    base: dict[str, Any] = {"id": "h1", "namespace": "x", "content": "hostile row"}
    return Memory(**{**base, **kw})


# (id, call taking the hostile value, values that API.md says must be rejected)
STR_CALL_SITES: list[Any] = [
    pytest.param(lambda s, v: s.upsert(mem(id=v)), {"empty", "type-none"}, id="upsert-id"),
    pytest.param(lambda s, v: s.upsert(mem(namespace=v)), {"empty"}, id="upsert-namespace"),
    pytest.param(lambda s, v: s.upsert(mem(content=v)), set(), id="upsert-content"),
    pytest.param(lambda s, v: s.upsert(mem(summary=v)), set(), id="upsert-summary"),
    pytest.param(lambda s, v: s.upsert(mem(tier=v)), set(), id="upsert-tier"),
    pytest.param(lambda s, v: s.upsert(mem(level=v)), set(), id="upsert-level"),
    pytest.param(lambda s, v: s.upsert(mem(tags=[v])), set(), id="upsert-tag"),
    pytest.param(lambda s, v: s.upsert(mem(metadata={key(v): v})), set(), id="upsert-metadata"),
    pytest.param(lambda s, v: s.upsert(mem(superseded_by=v)), set(), id="upsert-superseded-by"),
    pytest.param(lambda s, v: s.upsert(mem(linked_memory_ids=[v])), set(), id="upsert-linked"),
    pytest.param(
        lambda s, v: s.upsert_many([mem(id="h2"), mem(content=v)]), set(), id="upsert-many-content"
    ),
    pytest.param(
        lambda s, v: s.upsert_many([mem(id="h2"), mem(id=v)]), {"empty"}, id="upsert-many-id"
    ),
    pytest.param(lambda s, v: s.update("x", "x1", content=v), set(), id="update-content"),
    pytest.param(
        lambda s, v: s.update("x", "x1", tags=[v], summary=v), set(), id="update-tags-summary"
    ),
    pytest.param(lambda s, v: s.update(v, "x1", content="c"), set(), id="update-namespace"),
    pytest.param(lambda s, v: s.update("x", v, content="c"), set(), id="update-id"),
    pytest.param(lambda s, v: s.update("x", "x1", **{str(v): 1}), set(), id="update-field-name"),
    pytest.param(lambda s, v: s.get(v, "x1"), set(), id="get-namespace"),
    pytest.param(lambda s, v: s.get("x", v), set(), id="get-id"),
    pytest.param(lambda s, v: s.get_embedding("x", v), set(), id="get-embedding-id"),
    pytest.param(lambda s, v: s.ids_by_prefix("x", v, 10), set(), id="ids-by-prefix"),
    pytest.param(lambda s, v: s.ids_by_prefix(v, "x", 10), set(), id="ids-by-prefix-ns"),
    pytest.param(lambda s, v: s.predecessor_ids("x", v), set(), id="predecessor-ids"),
    pytest.param(
        lambda s, v: s.get_by_fingerprint("x", "semantic", v), set(), id="get-by-fingerprint"
    ),
    pytest.param(
        lambda s, v: s.get_by_fingerprint("x", v, "ab"), set(), id="get-by-fingerprint-tier"
    ),
    pytest.param(lambda s, v: s.delete("x", v), set(), id="delete-id"),
    pytest.param(lambda s, v: s.delete(v, "x1"), set(), id="delete-namespace-arg"),
    pytest.param(lambda s, v: s.set_superseded("x", "x1", v), set(), id="set-superseded-by"),
    pytest.param(lambda s, v: s.set_superseded(v, "x1", "y"), set(), id="set-superseded-ns"),
    pytest.param(lambda s, v: s.restore("x", v), set(), id="restore-id"),
    pytest.param(lambda s, v: s.vector_search(v, vec(0)), set(), id="vector-search-ns"),
    pytest.param(
        lambda s, v: s.vector_search_many(v, np.stack([vec(0)])), set(), id="vector-search-many-ns"
    ),
    pytest.param(lambda s, v: s.keyword_search("x", v), set(), id="keyword-search-query"),
    pytest.param(lambda s, v: s.keyword_search(v, "victim"), set(), id="keyword-search-ns"),
    pytest.param(lambda s, v: s.reinforce("x", [v, "x1"], T0), set(), id="reinforce-ids"),
    pytest.param(lambda s, v: s.reinforce(v, ["x1"], T0), set(), id="reinforce-ns"),
    pytest.param(
        lambda s, v: s.delete_if_expired_before("x", v, T0), set(), id="delete-if-expired-before"
    ),
    pytest.param(lambda s, v: s.delete_namespace(v), set(), id="delete-namespace"),
    pytest.param(lambda s, v: s.reassign("x", ["x1"], v), {"empty"}, id="reassign-to"),
    pytest.param(lambda s, v: s.reassign(v, ["keep0"], "x"), set(), id="reassign-from"),
    pytest.param(lambda s, v: s.reassign("x", [v], "y"), set(), id="reassign-ids"),
    pytest.param(lambda s, v: s.retier("x", "x1", v, None), set(), id="retier-tier"),
    pytest.param(lambda s, v: s.retier("x", v, "working", None), set(), id="retier-id"),
    pytest.param(lambda s, v: s.set_confidence("x", v, 0.5, T0), set(), id="set-confidence"),
    pytest.param(
        lambda s, v: s.mark_contradicted("x", "x1", v, 0.5, T0), set(), id="mark-contradicted-by"
    ),
    pytest.param(lambda s, v: s.set_embed_model(v), set(), id="set-embed-model"),
    pytest.param(lambda s, v: s.list(v), set(), id="list-namespace"),
    pytest.param(lambda s, v: s.count(v), set(), id="count-namespace"),
    pytest.param(lambda s, v: s.list("x", Filter(tags=[v])), set(), id="filter-tags"),
    pytest.param(
        lambda s, v: s.count("x", Filter(metadata={key(v): v})), set(), id="filter-metadata"
    ),
    pytest.param(
        lambda s, v: s.list("x", Filter(exclude_metadata={key(v): v})),
        set(),
        id="filter-exclude-metadata",
    ),
    pytest.param(
        lambda s, v: s.vector_search("x", vec(1), Filter(exclude_ids=[v])),
        set(),
        id="filter-exclude-ids",
    ),
    pytest.param(
        lambda s, v: s.keyword_search("x", "victim", Filter(memory_types=[v])),
        set(),
        id="filter-memory-types",
    ),
    pytest.param(lambda s, v: s.list("x", Filter(tiers=[v])), set(), id="filter-tiers"),
    pytest.param(lambda s, v: s.list("x", Filter(levels=[v])), set(), id="filter-levels"),
    pytest.param(lambda s, v: s.list("x", Filter(sort=Sort(v))), set(), id="filter-sort-key"),
    pytest.param(lambda s, v: s.put_link(NamespaceLink(v, "y", note=v)), set(), id="put-link"),
    pytest.param(
        lambda s, v: s.put_link(NamespaceLink("x", "y", tiers=[v])), set(), id="put-link-tiers"
    ),
    pytest.param(lambda s, v: s.delete_link(v, "other"), set(), id="delete-link"),
    pytest.param(lambda s, v: s.list_links(v), set(), id="list-links"),
    pytest.param(lambda s, v: s.rename_link_endpoints("x", v), set(), id="rename-link-endpoints"),
    pytest.param(
        lambda s, v: s.put_api_key(APIKey(v, hash_api_key("s1"), v, v)), set(), id="put-api-key"
    ),
    pytest.param(lambda s, v: s.put_api_key(APIKey("k2", v)), set(), id="put-api-key-hash"),
    pytest.param(lambda s, v: s.authenticate(v), set(), id="authenticate"),
    pytest.param(lambda s, v: s.delete_api_key(v), set(), id="delete-api-key"),
    pytest.param(lambda s, v: s.get_api_key_by_hash(v), set(), id="get-api-key-by-hash"),
    pytest.param(
        lambda s, v: s.rename_api_key_namespaces(v, "y"), set(), id="rename-api-key-namespaces"
    ),
    pytest.param(
        lambda s, v: s.append_events(
            [
                Event(
                    v,
                    EventKind.RECALL,
                    "x",
                    query=v,
                    memory_id=v,
                    memory_ns=v,
                    memory_summary=v,
                    detail={key(v): v},
                )
            ]
        ),
        set(),
        id="append-events",
    ),
    pytest.param(lambda s, v: s.append_events([Event("o", v, "x")]), set(), id="event-kind"),
    pytest.param(
        lambda s, v: s.list_events(EventFilter(namespace=v, text=v)), set(), id="list-events"
    ),
    pytest.param(
        lambda s, v: s.list_events(EventFilter(namespaces=[v], kinds=[v])),
        set(),
        id="list-events-lists",
    ),
]


@pytest.mark.parametrize(("call", "must_raise"), STR_CALL_SITES)
def test_hostile_string_arguments(
    seeded: tuple[Store, dict[str, Any]], call: Callable[[Store, Any], Any], must_raise: set[str]
) -> None:
    s, snap = seeded
    check_all(s, snap, lambda v: call(s, v), ALL_VALUES, must_raise)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s, v: s.upsert(mem(content=v)), id="upsert-content"),
        pytest.param(lambda s, v: s.upsert(mem(summary=v)), id="upsert-summary"),
        pytest.param(lambda s, v: s.update("x", "x1", content=v), id="update-content"),
        pytest.param(lambda s, v: s.keyword_search("x", v), id="keyword-search-query"),
        pytest.param(lambda s, v: s.upsert(mem(id="big" + v[:1_000_000])), id="upsert-1mb-id"),
    ],
)
def test_ten_megabyte_strings(
    seeded: tuple[Store, dict[str, Any]], call: Callable[[Store, Any], Any]
) -> None:
    s, snap = seeded
    check_all(s, snap, lambda v: call(s, v), {"10mb": TEN_MB})


def test_ten_megabyte_content_round_trips(store: Store) -> None:
    content = TEN_MB + "needleword"
    _, err, failure = attempt(lambda: store.upsert(mem(content=content)), "10mb")
    assert failure is None, failure
    if err is None:
        assert store.get("x", "h1").content == content
        assert [h.memory.id for h in store.keyword_search("x", "needleword")] == ["h1"]


# ------------------------------------------------------------------ specific hostile values


def nested(depth: int) -> dict[str, Any]:
    d: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        d = {"d": d}
    return d


cyclic: dict[str, Any] = {}
cyclic["self"] = cyclic

MEMORY_FIELD_VALUES: dict[str, dict[str, Any]] = {
    "tags": {
        "10k-tags": [f"tag{i}" for i in range(10_000)],
        "tags-str": "abc",
        "tags-int-item": [1],
        "tags-none-item": [None],
    },
    "metadata": {
        "nested-100": nested(100),
        "nested-10000": nested(10_000),
        "cycle": cyclic,
        "int-key": {1: "a"},
        "nan": {"a": math.nan},
        "inf": {"a": [math.inf]},
        "datetime": {"a": T0},
        "set": {"a": {1}},
        "bytes": {"a": b"x"},
        "huge-int": {"a": 2**100},
        "list": [1, 2],
        "tuple-value": {"a": (1, 2)},
    },
    "importance": {
        "nan": math.nan,
        "inf": math.inf,
        "-inf": -math.inf,
        "str": "1",
        "none": None,
        "huge": 1e308,
        "numpy": np.float64(0.5),
        "bool": True,
    },
    "confidence": {"nan": math.nan, "inf": math.inf, "str": "0.5", "negative": -1.0},
    "access_count": {"negative": -1, "float": 1.5, "huge": 2**70, "str": "1", "nan": math.nan},
    "embedding": {
        "nan": [math.nan, 0, 0, 0],
        "inf": np.array([np.inf, 0, 0, 0], np.float32),
        "f64-overflow": np.array([1e300, 0, 0, 0]),
        "3-dims": [0.0, 0.0, 0.0],
        "5-dims": np.zeros(5, np.float32),
        "2-d": np.zeros((2, 4), np.float32),
        "str": "abcd",
        "strings": ["a", "b", "c", "d"],
        "complex": np.zeros(4, np.complex64),
        "object": [object()] * 4,
        "empty": [],
        "dict": {"a": 1},
        "bool-array": np.ones(4, bool),
    },
    "created_at": {
        "str": "2024-01-01",
        "int": 0,
        "date-only": T0.date(),
        "year-1-naive": datetime(1, 1, 1),
        "year-1-utc": datetime.min.replace(tzinfo=UTC),
        "year-9999-utc": datetime.max.replace(tzinfo=UTC),
        "year-1-plus-5h": datetime.min.replace(tzinfo=timezone(timedelta(hours=5))),
        "year-9999-minus-5h": datetime.max.replace(tzinfo=timezone(-timedelta(hours=5))),
        "naive": datetime(2024, 6, 1, 12),
    },
    "expires_at": {
        "year-1": datetime.min.replace(tzinfo=UTC),
        "year-9999": datetime.max.replace(tzinfo=UTC),
        "naive": datetime(2030, 1, 1),
    },
    "linked_memory_ids": {
        "str": "abc",
        "int-items": [1, 2],
        "huge": [f"l{i}" for i in range(10_000)],
    },
}


@pytest.mark.parametrize("field", list(MEMORY_FIELD_VALUES))
def test_hostile_memory_fields(seeded: tuple[Store, dict[str, Any]], field: str) -> None:
    s, snap = seeded
    check_all(s, snap, lambda v: s.upsert(mem(**{field: v})), MEMORY_FIELD_VALUES[field])
    check_all(s, snap, lambda v: s.update("x", "x1", **{field: v}), MEMORY_FIELD_VALUES[field])
    check_all(
        s,
        snap,
        lambda v: s.upsert_many([mem(id="ok1"), mem(**{field: v})]),
        MEMORY_FIELD_VALUES[field],
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("metadata", {"a": math.nan}, id="metadata-nan"),
        pytest.param("metadata", nested(10_000), id="metadata-nested-10000"),
        pytest.param("metadata", {"a": T0}, id="metadata-datetime"),
        pytest.param("importance", math.nan, id="importance-nan"),
        pytest.param("confidence", math.inf, id="confidence-inf"),
        pytest.param("embedding", [math.nan, 0, 0, 0], id="embedding-nan"),
        pytest.param("embedding", [0.0, 0.0, 0.0], id="embedding-3-dims"),
    ],
)
def test_api_rejects_with_invalid_argument(store: Store, field: str, value: Any) -> None:
    """API.md names the error for these: nothing from the batch is stored."""
    store.upsert(Memory(id="x1", namespace="x", content="before", embedding=vec(1)))
    with pytest.raises(InvalidArgumentError):
        store.upsert(mem(**{field: value}))
    with pytest.raises(InvalidArgumentError):
        store.upsert_many([mem(id="ok1"), mem(**{field: value})])
    with pytest.raises(InvalidArgumentError):
        store.update("x", "x1", content="after", **{field: value})
    assert store.list_namespaces() == ["x"]
    assert [m.id for m in store.list("x", EVERYTHING)] == ["x1"]
    assert store.get("x", "x1").content == "before"
    assert store.get_embedding("x", "x1").tobytes() == vec(1).tobytes()  # type: ignore[union-attr]


def test_ten_thousand_tags_round_trip_and_filter(store: Store) -> None:
    tags = [f"tag{i}" for i in range(10_000)]
    _, err, failure = attempt(lambda: store.upsert(mem(tags=tags)), "10k-tags")
    assert failure is None, failure
    if err is None:
        assert store.get("x", "h1").tags == tags
        assert store.count("x", Filter(tags=tags)) == 1
        assert store.count("x", Filter(tags=[*tags, "missing"])) == 0


@pytest.mark.parametrize(
    "dt",
    [
        pytest.param(datetime(1, 1, 1), id="year-1-naive"),
        pytest.param(datetime.min.replace(tzinfo=UTC), id="year-1-utc"),
        pytest.param(datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), id="year-9999-utc"),
        pytest.param(datetime(2024, 6, 1, 12, 30), id="naive"),
    ],
)
def test_extreme_and_naive_datetimes_round_trip(store: Store, dt: datetime) -> None:
    """Naive input is UTC; stored precision is at least 1 ms; the returned value is aware."""
    want = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    _, err, failure = attempt(
        lambda: store.upsert(
            mem(created_at=dt, updated_at=dt, last_accessed_at=dt, valid_from=dt, valid_to=dt)
        ),
        "dt",
    )
    assert failure is None, failure
    if err is not None:
        assert "0001" in str(err) or "9999" in str(err) or "range" in str(err), err
        return
    got = store.get("x", "h1")
    for name in ("created_at", "updated_at", "last_accessed_at", "valid_from", "valid_to"):
        value = getattr(got, name)
        assert value.tzinfo is not None and value.utcoffset() == timedelta(0), name
        assert abs(value - want) < timedelta(milliseconds=1), (name, value, want)
    assert [m.id for m in store.list("x", Filter(created_after=dt, include_superseded=True))] == [
        "h1"
    ]


EDGE_TIMES: dict[str, Any] = {
    "year-1-naive": datetime(1, 1, 1),
    "year-1-utc": datetime.min.replace(tzinfo=UTC),
    "year-9999-utc": datetime.max.replace(tzinfo=UTC),
    "year-1-plus-5h": datetime.min.replace(tzinfo=timezone(timedelta(hours=5))),
    "year-9999-minus-5h": datetime.max.replace(tzinfo=timezone(-timedelta(hours=5))),
    "naive": datetime(2024, 6, 1),
    "str": "2024-01-01",
    "int": 0,
}


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s, t: s.list("x", Filter(now=t)), id="filter-now"),
        pytest.param(lambda s, t: s.count("x", Filter(as_of=t)), id="filter-as-of"),
        pytest.param(
            lambda s, t: s.vector_search("x", vec(0), Filter(created_after=t)),
            id="filter-created-after",
        ),
        pytest.param(
            lambda s, t: s.keyword_search("x", "victim", Filter(accessed_after=t)),
            id="filter-accessed-after",
        ),
        pytest.param(lambda s, t: s.reinforce("x", ["x1"], t, t), id="reinforce"),
        pytest.param(lambda s, t: s.retier("x", "x1", "working", t), id="retier"),
        pytest.param(lambda s, t: s.set_confidence("x", "x1", 0.5, t), id="set-confidence"),
        pytest.param(
            lambda s, t: s.mark_contradicted("x", "x1", "y", 0.5, t), id="mark-contradicted"
        ),
        pytest.param(
            lambda s, t: s.delete_if_expired_before("x", "x1", t), id="delete-if-expired-before"
        ),
        pytest.param(lambda s, t: s.list_expired(t, 0), id="list-expired"),
        pytest.param(lambda s, t: s.sweep_expired(t), id="sweep-expired"),
        pytest.param(lambda s, t: s.namespace_activity(t), id="namespace-activity"),
        pytest.param(
            lambda s, t: s.get_by_fingerprint("x", "semantic", "ab", t), id="get-by-fingerprint"
        ),
        pytest.param(lambda s, t: s.put_link(NamespaceLink("x", "y", created_at=t)), id="put-link"),
        pytest.param(
            lambda s, t: s.put_api_key(APIKey("k9", hash_api_key("z"), created_at=t)),
            id="put-api-key",
        ),
        pytest.param(
            lambda s, t: s.append_events([Event("o", "recall", "x", created_at=t)]),
            id="append-events",
        ),
        pytest.param(lambda s, t: s.list_events(EventFilter(since=t, before=t)), id="list-events"),
    ],
)
def test_edge_datetimes_everywhere(
    seeded: tuple[Store, dict[str, Any]], call: Callable[[Store, Any], Any]
) -> None:
    s, snap = seeded
    check_all(s, snap, lambda t: call(s, t), EDGE_TIMES)


def test_edge_datetimes_prune_events(seeded: tuple[Store, dict[str, Any]]) -> None:
    """prune_events is global: a late cutoff legitimately deletes 'keep''s event too."""
    s, snap = seeded
    check_all(s, snap, lambda t: s.prune_events(t), EDGE_TIMES, ignore=("events",))
    assert s.list_events(EventFilter(namespace="keep")) == []  # year 9999 pruned it


INTS: dict[str, Any] = {
    "zero": 0,
    "negative": -1,
    "huge": 2**70,
    "huge-negative": -(2**70),
    "bool": True,
    "float": 1.5,
    "str": "3",
    "none": None,
    "numpy-int": np.int64(3),
}


@pytest.mark.parametrize(
    ("call", "must_raise"),
    [
        pytest.param(
            lambda s, k: s.vector_search("x", vec(0), k=k),
            {"zero", "negative", "huge-negative"},
            id="vector-search-k",
        ),
        pytest.param(
            lambda s, k: s.vector_search_many("x", np.stack([vec(0)]), k=k),
            {"zero", "negative", "huge-negative"},
            id="vector-search-many-k",
        ),
        pytest.param(
            lambda s, k: s.keyword_search("x", "victim", k=k),
            {"zero", "negative", "huge-negative"},
            id="keyword-search-k",
        ),
        pytest.param(lambda s, n: s.list("x", None, n), set(), id="list-limit"),
        pytest.param(lambda s, n: s.list("x", None, 0, n), set(), id="list-offset"),
        pytest.param(lambda s, n: s.ids_by_prefix("x", "x", n), set(), id="ids-by-prefix-limit"),
        pytest.param(lambda s, n: s.list_expired(T0, n), set(), id="list-expired-limit"),
        pytest.param(lambda s, n: s.sweep_expired(T0, n), set(), id="sweep-limit"),
        pytest.param(lambda s, n: s.prune_events(None, n), set(), id="prune-keep-max"),
        pytest.param(
            lambda s, n: s.list_events(EventFilter(limit=n, before_id=n)),
            set(),
            id="event-filter-ints",
        ),
        pytest.param(
            lambda s, n: s.append_events([Event("o", "recall", "x", rank=n)]),
            set(),
            id="event-rank",
        ),
    ],
)
def test_hostile_ints(
    seeded: tuple[Store, dict[str, Any]], call: Callable[[Store, Any], Any], must_raise: set[str]
) -> None:
    s, snap = seeded
    check_all(s, snap, lambda n: call(s, n), INTS, must_raise)


def test_k_below_one_is_invalid_argument(store: Store) -> None:
    for k in (0, -1, -(2**70)):
        with pytest.raises(InvalidArgumentError):
            store.vector_search("x", vec(0), k=k)
        with pytest.raises(InvalidArgumentError):
            store.vector_search_many("x", np.stack([vec(0)]), k=k)
        with pytest.raises(InvalidArgumentError):
            store.keyword_search("x", "victim", k=k)


QUERY_VECTORS: dict[str, Any] = {
    "nan": [math.nan, 0, 0, 0],
    "inf": [math.inf, 0, 0, 0],
    "3-dims": [0.0, 0.0, 0.0],
    "5-dims": np.zeros(5),
    "empty": [],
    "none": None,
    "str": "abcd",
    "2-d": np.zeros((1, 4)),
    "scalar": 1.0,
    "object": [object()] * 4,
    "f64-overflow": [1e300, 0, 0, 0],
    "zero-vector": np.zeros(4, np.float32),
}


@pytest.mark.parametrize("metric", ["l2", "cos", "ip"])
def test_hostile_query_vectors(tmp_path: Path, metric: str) -> None:
    with Store.open(tmp_path / "s", dims=DIMS, metric=metric) as s:  # type: ignore[arg-type]
        seed(s)
        snap = snapshot(s)
        check_all(s, snap, lambda q: s.vector_search("x", q), QUERY_VECTORS)
        check_all(s, snap, lambda q: s.vector_search_many("x", [q]), QUERY_VECTORS)
        check_all(s, snap, lambda q: s.upsert(mem(embedding=q)), QUERY_VECTORS)
        for name in ("3-dims", "5-dims"):
            with pytest.raises(InvalidArgumentError) as e:
                s.vector_search("x", QUERY_VECTORS[name])
            assert type(e.value).__name__ == "DimensionMismatchError"
            assert "4" in str(e.value)


def test_hostile_floats_in_calls(seeded: tuple[Store, dict[str, Any]]) -> None:
    s, snap = seeded
    floats = {"nan": math.nan, "inf": math.inf, "str": "0.5", "none": None, "huge": 1e308}
    check_all(s, snap, lambda c: s.set_confidence("x", "x1", c, T0), floats, {"nan", "inf"})
    check_all(s, snap, lambda c: s.mark_contradicted("x", "x1", "y", c, T0), floats, {"nan", "inf"})
    check_all(s, snap, lambda c: s.append_events([Event("o", "recall", "x", score=c)]), floats)
    check_all(
        s,
        snap,
        lambda c: s.append_events([Event("o", "recall", "x", detail={"a": c})]),
        floats,
        {"nan", "inf"},
    )


HOSTILE_FILTERS: dict[str, Any] = {
    "not-a-filter": {"tiers": ["semantic"]},
    "sort-none": Filter(sort=None),  # type: ignore[arg-type]
    "sort-str": Filter(sort="created_at"),  # type: ignore[arg-type]
    "tags-str": Filter(tags="abc"),
    "metadata-list": Filter(metadata=["a"]),  # type: ignore[arg-type]
    "metadata-int-value": Filter(metadata={"a": 1}),  # type: ignore[dict-item]
    "exclude-ids-huge": Filter(exclude_ids=[f"e{i}" for i in range(10_000)]),
    "tags-10k": Filter(tags=[f"t{i}" for i in range(10_000)]),
    "include-expired-str": Filter(include_expired="yes"),  # type: ignore[arg-type]
    "now-str": Filter(now="2024"),  # type: ignore[arg-type]
    "tiers-none": Filter(tiers=None),  # type: ignore[arg-type]
}


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s, f: s.list("x", f), id="list"),
        pytest.param(lambda s, f: s.count("x", f), id="count"),
        pytest.param(lambda s, f: s.vector_search("x", vec(0), f), id="vector-search"),
        pytest.param(lambda s, f: s.vector_search_many("x", [vec(0)], f), id="vector-many"),
        pytest.param(lambda s, f: s.keyword_search("x", "victim", f), id="keyword-search"),
        pytest.param(lambda s, f: s.list_events(f), id="list-events"),
    ],
)
def test_hostile_filters(
    seeded: tuple[Store, dict[str, Any]], call: Callable[[Store, Any], Any]
) -> None:
    s, snap = seeded
    check_all(s, snap, lambda f: call(s, f), HOSTILE_FILTERS)


WHOLE: dict[str, Any] = {"none": None, "dict": {"id": "a"}, "str": "abc", "int": 3}


@pytest.mark.parametrize(
    ("call", "values", "must_raise"),
    [
        pytest.param(lambda s, v: s.upsert(v), WHOLE, set(WHOLE), id="upsert"),
        pytest.param(lambda s, v: s.upsert_many(v), WHOLE, {"dict", "int"}, id="upsert-many"),
        pytest.param(
            lambda s, v: s.upsert_many([mem(id="ok1"), v]), WHOLE, set(WHOLE), id="upsert-many-item"
        ),
        pytest.param(lambda s, v: s.put_link(v), WHOLE, set(WHOLE), id="put-link"),
        pytest.param(lambda s, v: s.put_api_key(v), WHOLE, set(WHOLE), id="put-api-key"),
        pytest.param(
            lambda s, v: s.append_events(v), WHOLE, {"dict", "int", "str"}, id="append-events"
        ),
        pytest.param(lambda s, v: s.append_events([v]), WHOLE, set(WHOLE), id="append-events-item"),
        pytest.param(
            lambda s, v: s.reinforce("x", v, T0),
            {**WHOLE, "gen": iter(["x1"])},
            set(),
            id="reinforce-ids",
        ),
        pytest.param(lambda s, v: s.reassign("x", v, "y"), WHOLE, set(), id="reassign-ids"),
        pytest.param(
            lambda s, v: s.backup(v),
            {**WHOLE, "nul": "a\x00b"},
            {"none", "dict", "int", "nul"},
            id="backup-path",
        ),
    ],
)
def test_hostile_whole_arguments(
    seeded: tuple[Store, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    call: Callable[[Store, Any], Any],
    values: dict[str, Any],
    must_raise: set[str],
) -> None:
    s, snap = seeded
    monkeypatch.chdir(tmp_path)  # backup("abc") writes a relative directory
    check_all(s, snap, lambda v: call(s, v), values, must_raise)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"dims": 0}, id="dims-0"),
        pytest.param({"dims": -1}, id="dims-negative"),
        pytest.param({"dims": True}, id="dims-bool"),
        pytest.param({"dims": 1.5}, id="dims-float"),
        pytest.param({"dims": "4"}, id="dims-str"),
        pytest.param({"dims": 2**64}, id="dims-beyond-u64"),
        pytest.param({"dims": 4, "metric": "L2"}, id="metric-case"),
        pytest.param({"dims": 4, "metric": ""}, id="metric-empty"),
        pytest.param({"dims": 4, "metric": "\x00"}, id="metric-nul"),
        pytest.param({}, id="dims-missing"),
    ],
)
def test_open_rejects_bad_options(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        Store.open(tmp_path / "s", **kwargs).close()
    with pytest.raises(InvalidArgumentError):
        Store.open(None, **kwargs).close()


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("a\x00b", id="nul"),
        pytest.param("\ud800", id="lone-surrogate"),
        pytest.param("", id="empty"),
        pytest.param(123, id="int"),
        pytest.param(b"bytes-dir", id="bytes"),
        pytest.param("file", id="existing-file"),
        pytest.param("x" * 5000, id="name-too-long"),
    ],
)
def test_open_hostile_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("not a store")
    _, _, failure = attempt(lambda: Store.open(path, dims=DIMS).close(), "open")
    assert failure is None, failure
    assert (tmp_path / "file").read_text() == "not a store"


# ------------------------------------------------------------------ named refusals


def refused(s: Store, snap: dict[str, Any], call: Callable[[], Any], match: str) -> None:
    """``call`` raises InvalidArgumentError matching ``match``; nothing stored changed."""
    victim = s.get("x", "x1")
    with pytest.raises(InvalidArgumentError, match=match):
        call()
    assert snapshot(s) == snap
    assert s.get("x", "x1") == victim
    assert s.get_embedding("x", "x1").tobytes() == vec(99).tobytes()  # type: ignore[union-attr]
    assert [m.id for m in s.list("x", EVERYTHING)] == ["x1"]  # nothing of a batch stored
    assert s.list_namespaces() == ["keep", "x"]


def bare(what: str, value: str = "a") -> str:
    """The message of the one bare-string rule, as a regex."""
    return rf"^{re.escape(what)} must be a list of [A-Za-z ]+, not a str: write " + re.escape(
        f"{what}=[{value!r}]"
    )


# Every call site taking a sequence of strings (or enum values): a bare str is refused the
# same way everywhere, with the fix in the message.
BARE_STRING_SITES: list[Any] = [
    pytest.param(lambda s: s.upsert(mem(tags="a")), bare("tags"), id="memory-tags"),
    pytest.param(
        lambda s: s.upsert(mem(linked_memory_ids="a")),
        bare("linked_memory_ids"),
        id="memory-linked-ids",
    ),
    pytest.param(
        lambda s: s.upsert_many([mem(id="ok1"), mem(tags="a")]), bare("tags"), id="batch-tags"
    ),
    pytest.param(lambda s: s.update("x", "x1", tags="a"), bare("tags"), id="update-tags"),
    pytest.param(lambda s: s.list("x", Filter(tags="a")), bare("filter.tags"), id="filter-tags"),
    pytest.param(
        lambda s: s.count("x", Filter(tiers="semantic")),  # type: ignore[arg-type]
        bare("filter.tiers", "semantic"),
        id="filter-tiers",
    ),
    pytest.param(
        lambda s: s.list("x", Filter(tiers=Tier.SEMANTIC)),  # type: ignore[arg-type]
        bare("filter.tiers", "semantic"),
        id="filter-tiers-member",
    ),
    pytest.param(
        lambda s: s.list("x", Filter(levels="explicit")),  # type: ignore[arg-type]
        bare("filter.levels", "explicit"),
        id="filter-levels",
    ),
    pytest.param(
        lambda s: s.vector_search("x", vec(0), Filter(exclude_ids="a")),
        bare("filter.exclude_ids"),
        id="filter-exclude-ids",
    ),
    pytest.param(
        lambda s: s.keyword_search("x", "victim", Filter(memory_types="a")),
        bare("filter.memory_types"),
        id="filter-memory-types",
    ),
    pytest.param(
        lambda s: s.list_events(EventFilter(namespaces="a")),
        bare("filter.namespaces"),
        id="event-filter-namespaces",
    ),
    pytest.param(
        lambda s: s.list_events(EventFilter(kinds="recall")),  # type: ignore[arg-type]
        bare("filter.kinds", "recall"),
        id="event-filter-kinds",
    ),
    pytest.param(
        lambda s: s.list_events(EventFilter(tiers="semantic")),  # type: ignore[arg-type]
        bare("filter.tiers", "semantic"),
        id="event-filter-tiers",
    ),
    pytest.param(
        lambda s: s.put_link(NamespaceLink("x", "y", tiers="semantic")),  # type: ignore[arg-type]
        bare("link.tiers", "semantic"),
        id="link-tiers",
    ),
    pytest.param(lambda s: s.reinforce("x", "x1", T0), bare("ids", "x1"), id="reinforce-ids"),
    pytest.param(lambda s: s.reassign("x", "x1", "y"), bare("ids", "x1"), id="reassign-ids"),
    pytest.param(
        lambda s: s.upsert(mem(tags="t" * 100)),
        r"^tags must be a list of strings, not a str: write tags=\['t{37}\.\.\.'\]$",
        id="long-str-shortened",
    ),
]


@pytest.mark.parametrize(("call", "match"), BARE_STRING_SITES)
def test_bare_string_where_a_list_is_expected(
    seeded: tuple[Store, dict[str, Any]], call: Callable[[Store], Any], match: str
) -> None:
    s, snap = seeded
    refused(s, snap, lambda: call(s), match)


NOT_UPDATABLE = "^id cannot be changed by update\\(\\).*new id"
NOT_MOVABLE = "^namespace cannot be changed by update\\(\\) \\(use reassign\\(\\)"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        pytest.param(lambda s: s.update("x", "x1", id="y"), NOT_UPDATABLE, id="id-field"),
        pytest.param(lambda s: s.update("x", "x1", id="x1"), NOT_UPDATABLE, id="same-id-field"),
        pytest.param(
            lambda s: s.update("x", "x1", namespace="keep"), NOT_MOVABLE, id="namespace-field"
        ),
        pytest.param(
            lambda s: s.update("x", namespace="keep", id="x1"), NOT_MOVABLE, id="namespace-twice"
        ),
        pytest.param(
            lambda s: s.update("x", "x1", content="new", id="y"), NOT_UPDATABLE, id="with-others"
        ),
        pytest.param(
            lambda s: s.update("x", "x1", created_at=T0), "^created_at cannot be updated", id="ca"
        ),
    ],
)
def test_update_cannot_change_the_key(
    seeded: tuple[Store, dict[str, Any]], call: Callable[[Store], Any], match: str
) -> None:
    """Never Python's "got multiple values" TypeError: an InvalidArgumentError naming the
    right tool."""
    s, snap = seeded
    refused(s, snap, lambda: call(s), match)


def test_update_with_keyword_key_still_works(store: Store) -> None:
    store.upsert(Memory(id="x1", namespace="x", content="before"))
    assert store.update(namespace="x", id="x1", content="after").content == "after"
    assert store.update("x", id="x1", summary="s").summary == "s"


CONFIDENCE = r"^confidence must be between 0 and 1, got "
SELF_SUPERSEDED = r"^memory 'x1' cannot be superseded by itself"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        pytest.param(
            lambda s: s.set_confidence("x", "x1", 5.0, T0), CONFIDENCE + "5.0", id="set-confidence"
        ),
        pytest.param(
            lambda s: s.set_confidence("x", "x1", -0.5, T0), CONFIDENCE, id="set-confidence-neg"
        ),
        pytest.param(
            lambda s: s.mark_contradicted("x", "x1", "y", 1.5, T0), CONFIDENCE, id="contradicted"
        ),
        pytest.param(
            lambda s: s.update("x", "x1", confidence=100), CONFIDENCE + "100.0", id="update"
        ),
        pytest.param(
            lambda s: s.upsert(mem(id="x1", namespace="x", confidence=1.0000001)),
            CONFIDENCE,
            id="upsert",
        ),
        pytest.param(
            lambda s: s.upsert_many([mem(id="ok1"), mem(confidence=-1e-9)]),
            CONFIDENCE,
            id="upsert-many",
        ),
        pytest.param(
            lambda s: s.set_superseded("x", "x1", "x1"), SELF_SUPERSEDED, id="set-superseded"
        ),
        pytest.param(
            lambda s: s.upsert(mem(id="x1", namespace="x", superseded_by="x1")),
            SELF_SUPERSEDED,
            id="upsert-self-superseded",
        ),
        pytest.param(
            lambda s: s.upsert_many([mem(id="ok1"), mem(id="x1", superseded_by="x1")]),
            SELF_SUPERSEDED,
            id="upsert-many-self-superseded",
        ),
        pytest.param(
            lambda s: s.update("x", "x1", superseded_by="x1"),
            SELF_SUPERSEDED,
            id="update-self-superseded",
        ),
        pytest.param(lambda s: s.list("x", None, 0, -1), r"^offset must be >= 0, got -1", id="off"),
        pytest.param(
            lambda s: s.list("keep", offset=-(2**70)), r"^offset must be >= 0", id="offset-huge"
        ),
        pytest.param(
            lambda s: s.vector_search_many("x", vec(0)),
            r"^query vectors must be a 2-D array of shape \(n, 4\).*got shape \(4,\)",
            id="vector-search-many-1d-array",
        ),
        pytest.param(
            lambda s: s.vector_search_many("x", [1, 2, 3, 4]),
            r"^query vectors must be a 2-D array of shape \(n, 4\).*flat sequence of 4 numbers",
            id="vector-search-many-flat-list",
        ),
    ],
)
def test_out_of_range_values_are_refused(
    seeded: tuple[Store, dict[str, Any]], call: Callable[[Store], Any], match: str
) -> None:
    s, snap = seeded
    refused(s, snap, lambda: call(s), match)


@pytest.mark.parametrize("confidence", [0, 0.0, 1, 1.0, 0.5])
def test_confidence_bounds_are_inclusive(store: Store, confidence: float) -> None:
    store.upsert(Memory(id="x1", namespace="x", content="c", confidence=confidence))
    store.set_confidence("x", "x1", confidence, T0)
    store.update("x", "x1", confidence=confidence)
    store.mark_contradicted("x", "x1", "y", confidence, T0)
    assert store.get("x", "x1").confidence == confidence
