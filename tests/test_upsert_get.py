"""Writing and reading memories: API.md sections 2-4 (everything but search and filters)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

import memini
from memini import (
    ConflictError,
    DimensionMismatchError,
    Filter,
    InvalidArgumentError,
    Level,
    MeminiError,
    Memory,
    NamespaceActivity,
    NamespaceLink,
    NotFoundError,
    Store,
    Tier,
)

NS = "ns"
T0 = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)  # millisecond-aligned
ONE_MS = timedelta(milliseconds=1)
FAR = datetime(2099, 1, 1, tzinfo=UTC)  # after any wall clock these tests run on


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def mem(id: str, ns: str = NS, **kw: Any) -> Memory:
    kw.setdefault("content", f"content of {id}")
    return Memory(id=id, namespace=ns, **kw)


def full(id: str, ns: str = NS, **overrides: Any) -> Memory:
    """A row with every field set to a non-default, millisecond-aligned value."""
    fields: dict[str, Any] = {
        "content": f"The full row {id}",
        "tier": Tier.PROCEDURAL,
        "level": Level.DEDUCED,
        "summary": f"summary of {id}",
        "metadata": {"memory_type": "decision", "n": 3, "nested": {"a": [1, 2.5, None, True]}},
        "tags": ["zeta", "Alpha", "alpha"],
        "importance": 0.1 + 0.2,
        "created_at": at(-48),
        "updated_at": at(-24),
        "last_accessed_at": at(-12),
        "access_count": 7,
        "expires_at": FAR,
        "superseded_by": None,
        "valid_from": at(-72),
        "valid_to": FAR + timedelta(days=1),
        "confidence": 1 / 3,
        "linked_memory_ids": ["other-1", "other-2"],
        "embedding": [0.25, -1.5, 3.0, 1e-3],
    }
    fields.update(overrides)
    return Memory(id=id, namespace=ns, **fields)


def stored(m: Memory, **overrides: Any) -> Memory:
    """What `get` returns for `m` when every timestamp was given: no embedding."""
    return dataclasses.replace(m, embedding=None, **overrides)


def f32(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float32)


@contextmanager
def wall_clock() -> Iterator[list[datetime]]:
    """Yields a list that holds [before, after] once the block ends: bounds of "now"."""
    bounds = [datetime.now(UTC)]
    yield bounds
    bounds.append(datetime.now(UTC))


def assert_stamped(dt: datetime | None, bounds: list[datetime]) -> None:
    """`dt` is a "now" taken within `bounds` (allowing millisecond truncation)."""
    assert dt is not None
    assert_utc(dt)
    lo = bounds[0].replace(microsecond=bounds[0].microsecond // 1000 * 1000)
    assert lo <= dt <= bounds[1] + ONE_MS, (dt, bounds)


def assert_utc(dt: datetime | None) -> None:
    if dt is not None:
        assert dt.tzinfo is not None and dt.utcoffset() == timedelta(0), dt


def assert_json_identical(got: Any, want: Any) -> None:
    """Equal, and of the same JSON types all the way down (True is not 1, 1 is not 1.0)."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, dict):
        assert list(got) == list(want) or sorted(got) == sorted(want), (got, want)
        for k in want:
            assert_json_identical(got[k], want[k])
    elif isinstance(want, list):
        assert len(got) == len(want), (got, want)
        for g, w in zip(got, want, strict=True):
            assert_json_identical(g, w)
    else:
        assert got == want, (got, want)


def assert_row(got: Memory, want: Memory) -> None:
    """Every field equal, returned types as the contract says."""
    assert isinstance(got, Memory)
    assert got.embedding is None
    assert got == want
    assert type(got.tier) is Tier
    assert got.level is None or type(got.level) is Level
    for name in (
        "created_at",
        "updated_at",
        "last_accessed_at",
        "expires_at",
        "valid_from",
        "valid_to",
    ):
        assert_utc(getattr(got, name))
    assert type(got.importance) is float
    assert got.confidence is None or type(got.confidence) is float
    assert type(got.access_count) is int
    assert_json_identical(got.metadata, want.metadata)
    assert got.tags == want.tags
    assert got.linked_memory_ids == want.linked_memory_ids


# ---------------------------------------------------------------------------------------------
# round trip


JSON_METADATA = {
    "int": 1,
    "float": 1.0,
    "bool": True,
    "false": False,
    "null": None,
    "big": 2**53 + 1,
    "neg": -7,
    "exact": 0.1 + 0.2,
    "list": [1, "two", [3.5, {"four": None}]],
    "dict": {"a": {"b": {"c": "deep"}}},
    "": "empty key",
}
PLUS_0530 = timezone(timedelta(hours=5, minutes=30))
MINUS_08 = timezone(timedelta(hours=-8))

# (fields written over full(), fields expected back where they differ from those written)
ROUND_TRIPS = [
    pytest.param({}, {}, id="every-field-set"),
    pytest.param(
        {"superseded_by": "newer", "valid_to": at(-1), "expires_at": at(-2)},
        {},
        id="expired-and-superseded-row-returned",
    ),
    pytest.param(
        {"tier": "episodic", "level": "explicit"},
        {"tier": Tier.EPISODIC, "level": Level.EXPLICIT},
        id="enum-values-as-strings",
    ),
    pytest.param(
        {"level": None, "confidence": None, "valid_from": None, "valid_to": None},
        {},
        id="none-fields-stay-none",
    ),
    pytest.param(
        {"confidence": 0.0, "importance": 0.0, "access_count": 0, "expires_at": None},
        {},
        id="zero-confidence-is-not-none",
    ),
    pytest.param(
        {"importance": 5e-324, "confidence": 1 - 2**-53}, {}, id="float-edge-values-exact"
    ),
    pytest.param(
        {"importance": 1.7976931348623157e308, "confidence": 0.1}, {}, id="float-max-exact"
    ),
    pytest.param({"importance": -2.5}, {}, id="importance-outside-unit-range-kept"),
    pytest.param(
        {"summary": "", "metadata": {}, "tags": [], "linked_memory_ids": [], "content": ""},
        {},
        id="empty-strings-and-collections",
    ),
    pytest.param(
        {
            "content": "Ünïcödé 東京 🙂 مرحبا",
            "summary": "résumé ✓",
            "tags": ["日本", "café", "🙂"],
            "metadata": {"clé": "välue", "列表": ["ü", "🙂"]},
        },
        {},
        id="unicode-everywhere",
    ),
    pytest.param({"content": "before\x00after"}, {}, id="nul-char"),
    pytest.param({"content": "word " * 20000}, {}, id="100kb-content"),
    pytest.param({"metadata": JSON_METADATA}, {}, id="metadata-json-types-and-nesting"),
    pytest.param(
        {"created_at": datetime(2024, 1, 2, 3, 4, 5), "expires_at": datetime(2091, 1, 1)},
        {
            "created_at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
            "expires_at": datetime(2091, 1, 1, tzinfo=UTC),
        },
        id="naive-datetimes-are-utc",
    ),
    pytest.param(
        {
            "created_at": datetime(2024, 1, 2, 8, 34, 5, tzinfo=PLUS_0530),
            "updated_at": datetime(2024, 1, 1, 19, 0, tzinfo=MINUS_08),
        },
        {
            "created_at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
            "updated_at": datetime(2024, 1, 2, 3, 0, tzinfo=UTC),
        },
        id="non-utc-offsets-converted",
    ),
    pytest.param({"valid_from": datetime(1900, 1, 1, tzinfo=UTC)}, {}, id="pre-epoch-datetime"),
    pytest.param(
        {"valid_from": datetime(1969, 12, 31, 23, 59, 59, 999000, UTC)},
        {},
        id="one-ms-before-epoch",
    ),
    pytest.param(
        {"expires_at": datetime(2999, 12, 31, 23, 59, 59, 999000, UTC)},
        {},
        id="far-future-datetime",
    ),
]


@pytest.mark.parametrize("batch", [False, True], ids=["upsert", "upsert_many"])
@pytest.mark.parametrize(("written", "differs"), ROUND_TRIPS)
def test_round_trip(
    store: Store, written: dict[str, Any], differs: dict[str, Any], batch: bool
) -> None:
    row = full("r", **written)
    if batch:
        assert store.upsert_many([row]) == 1
    else:
        assert store.upsert(row) is None
    assert_row(store.get(NS, "r"), stored(full("r", **{**written, **differs})))


def test_defaults_and_stamped_timestamps(store: Store) -> None:
    with wall_clock() as bounds:
        store.upsert(Memory(id="a", namespace=NS, content="hello"))
    got = store.get(NS, "a")
    assert_stamped(got.created_at, bounds)
    assert_stamped(got.updated_at, bounds)
    assert_stamped(got.last_accessed_at, bounds)
    expected = Memory(
        id="a",
        namespace=NS,
        content="hello",
        created_at=got.created_at,
        updated_at=got.updated_at,
        last_accessed_at=got.last_accessed_at,
    )
    assert_row(got, expected)
    assert got.tier is Tier.SEMANTIC
    assert got.level is None and got.expires_at is None and got.confidence is None


def test_sub_millisecond_precision_kept_to_at_least_1ms(store: Store) -> None:
    precise = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    store.upsert(
        mem(
            "a",
            created_at=precise,
            updated_at=precise,
            last_accessed_at=precise,
            expires_at=precise,
            valid_from=precise,
            valid_to=precise,
        )
    )
    got = store.get(NS, "a")
    for name in (
        "created_at",
        "updated_at",
        "last_accessed_at",
        "expires_at",
        "valid_from",
        "valid_to",
    ):
        value = getattr(got, name)
        assert_utc(value)
        assert abs(value - precise) < ONE_MS, name


def test_returned_row_is_a_copy(store: Store) -> None:
    m = full("a")
    store.upsert(m)
    m.tags.append("mutated-after-upsert")
    m.metadata["x"] = "mutated"
    got = store.get(NS, "a")
    got.tags.append("mutated-after-get")
    got.metadata["y"] = "mutated"
    assert_row(store.get(NS, "a"), stored(full("a")))


def test_named_arguments(store: Store) -> None:
    """Argument names are the ones API.md gives."""
    store.upsert(memory=mem("a", tier=Tier.WORKING, expires_at=at(1), embedding=[1, 2, 3, 4]))
    store.upsert_many(memories=[mem("b"), mem("c", superseded_by="a")])
    assert store.get(namespace=NS, id="a").id == "a"
    assert store.get_embedding(namespace=NS, id="a") is not None
    assert store.ids_by_prefix(namespace=NS, prefix="a", limit=5) == ["a"]
    assert store.predecessor_ids(namespace=NS, id="a") == ["c"]
    fp = memini.fingerprint("content of a")
    found = store.get_by_fingerprint(namespace=NS, tier=Tier.WORKING, fingerprint=fp, now=at(0))
    assert found.id == "a"
    store.reinforce(namespace=NS, ids=["a"], accessed_at=at(0), new_expiry=at(2))
    assert store.list_expired(now=at(3), limit=0)[0].id == "a"
    store.retier(namespace=NS, id="a", tier=Tier.WORKING, expires_at=at(1))
    store.delete_if_expired_before(namespace=NS, id="a", cutoff=at(1))
    store.set_confidence(namespace=NS, id="b", confidence=0.5, now=at(0))
    store.mark_contradicted(namespace=NS, id="b", contradicted_by="c", confidence=0.1, now=at(0))
    store.set_superseded(namespace=NS, id="b", superseded_by="c")
    store.restore(namespace=NS, id="b")
    assert store.reassign(from_ns=NS, ids=["b"], to_ns="ns2") == 1
    assert store.sweep_expired(now=at(0), limit=0) == 0
    assert store.namespace_activity(now=at(0)) != []
    store.delete(namespace=NS, id="c")
    assert store.delete_namespace(namespace="ns2") == 1


# ---------------------------------------------------------------------------------------------
# upsert as an update


def test_update_keeps_created_at(store: Store) -> None:
    store.upsert(full("a", created_at=at(0)))
    store.upsert(full("a", created_at=at(5), content="second version"))
    got = store.get(NS, "a")
    assert got.created_at == at(0)
    assert got.content == "second version"


def test_update_keeps_stamped_created_at(store: Store) -> None:
    with wall_clock() as bounds:
        store.upsert(mem("a"))
    first = store.get(NS, "a").created_at
    store.upsert(mem("a", created_at=at(0), content="v2"))
    assert store.get(NS, "a").created_at == first
    assert_stamped(first, bounds)


def test_update_stamps_none_timestamps_now(store: Store) -> None:
    store.upsert(full("a"))
    with wall_clock() as bounds:
        store.upsert(full("a", updated_at=None, last_accessed_at=None))
    got = store.get(NS, "a")
    assert_stamped(got.updated_at, bounds)
    assert_stamped(got.last_accessed_at, bounds)


def test_upsert_overwrites_every_other_field(store: Store) -> None:
    store.upsert(full("a", superseded_by="x", created_at=at(0)))
    replacement = mem("a", updated_at=at(1), last_accessed_at=at(2))
    store.upsert(replacement)
    assert_row(store.get(NS, "a"), stored(replacement, created_at=at(0)))
    assert store.get_embedding(NS, "a") is None  # no embedding given -> keyword-only row


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda s, m: s.upsert(m), id="upsert"),
        pytest.param(lambda s, m: s.upsert_many([m]), id="upsert_many"),
        pytest.param(lambda s, m: s.upsert_many([mem("fresh"), m]), id="upsert_many-after-ok-row"),
        pytest.param(lambda s, m: s.upsert_many([m, mem("fresh")]), id="upsert_many-before-ok-row"),
    ],
)
def test_id_in_another_namespace_conflicts(
    store: Store, write: Callable[[Store, Memory], Any]
) -> None:
    original = full("x", ns="a")
    store.upsert(original)
    with pytest.raises(ConflictError):
        write(store, full("x", ns="b", content="intruder", embedding=[9, 9, 9, 9]))
    assert_row(store.get("a", "x"), stored(original))
    np.testing.assert_array_equal(store.get_embedding("a", "x"), f32(0.25, -1.5, 3.0, 1e-3))
    for ns, id in (("b", "x"), (NS, "fresh"), ("b", "fresh")):
        with pytest.raises(NotFoundError):
            store.get(ns, id)
    assert store.list_namespaces() == ["a"]
    assert store.keyword_search("b", "intruder") == []
    assert store.vector_search("b", f32(9, 9, 9, 9)) == []


def test_same_id_twice_in_a_batch_in_two_namespaces_conflicts(store: Store) -> None:
    with pytest.raises(ConflictError):
        store.upsert_many([mem("x", ns="a"), mem("y", ns="a"), mem("x", ns="b")])
    assert store.list_namespaces() == []


# ---------------------------------------------------------------------------------------------
# upsert_many


def test_upsert_many_returns_len(store: Store) -> None:
    assert store.upsert_many([]) == 0
    rows = [mem(f"m{i}", embedding=[i, 0, 0, 1]) for i in range(25)]
    assert store.upsert_many(rows) == 25
    assert store.count(NS) == 25
    assert store.upsert_many(rows[:10]) == 10  # updates count too
    assert store.count(NS) == 25


def test_upsert_many_repeated_id_later_wins_created_at_from_first(store: Store) -> None:
    batch = [
        full("a", created_at=at(0), content="first", embedding=[1, 0, 0, 0]),
        mem("b"),
        full("a", created_at=at(5), content="second", tags=["t"], embedding=[0, 1, 0, 0]),
    ]
    assert store.upsert_many(batch) == 3
    got = store.get(NS, "a")
    assert_row(got, stored(batch[2], created_at=at(0)))
    np.testing.assert_array_equal(store.get_embedding(NS, "a"), f32(0, 1, 0, 0))
    assert store.count(NS) == 2
    [hit] = store.vector_search(NS, f32(0, 1, 0, 0), k=1)
    assert hit.memory.id == "a" and hit.score == 1.0
    assert [h.memory.id for h in store.keyword_search(NS, "first")] == []
    assert [h.memory.id for h in store.keyword_search(NS, "second")] == ["a"]


def test_upsert_many_repeated_id_of_stored_row_keeps_stored_created_at(store: Store) -> None:
    store.upsert(full("a", created_at=at(-100)))
    store.upsert_many([full("a", created_at=at(0)), full("a", created_at=at(5), content="last")])
    got = store.get(NS, "a")
    assert got.created_at == at(-100)
    assert got.content == "last"


def test_upsert_many_repeated_id_second_drops_vector(store: Store) -> None:
    store.upsert_many([mem("a", embedding=[1, 0, 0, 0]), mem("a", embedding=None)])
    assert store.get_embedding(NS, "a") is None
    assert store.vector_search(NS, f32(1, 0, 0, 0)) == []


BAD_ROWS = [
    pytest.param(
        lambda id: mem(id, embedding=[1, 2, 3]), DimensionMismatchError, id="embedding-3-of-4-dims"
    ),
    pytest.param(
        lambda id: mem(id, embedding=[1, 2, 3, 4, 5]),
        DimensionMismatchError,
        id="embedding-5-of-4-dims",
    ),
    pytest.param(
        lambda id: mem(id, embedding=[1, math.nan, 3, 4]), InvalidArgumentError, id="nan-embedding"
    ),
    pytest.param(
        lambda id: mem(id, embedding=[1, 2, math.inf, 4]), InvalidArgumentError, id="inf-embedding"
    ),
    pytest.param(
        lambda id: mem(id, embedding=f32(1, 2, 3, -np.inf)),
        InvalidArgumentError,
        id="minus-inf-embedding",
    ),
    pytest.param(
        lambda id: mem(id, metadata={"x": math.nan}), InvalidArgumentError, id="nan-metadata"
    ),
    pytest.param(
        lambda id: mem(id, metadata={"when": T0}), InvalidArgumentError, id="datetime-metadata"
    ),
    pytest.param(lambda id: mem(id, tier="eternal"), InvalidArgumentError, id="unknown-tier"),
    pytest.param(lambda id: mem(id, level="guessed"), InvalidArgumentError, id="unknown-level"),
    pytest.param(lambda id: mem(""), InvalidArgumentError, id="empty-id"),
    pytest.param(lambda id: mem(id, ns=""), InvalidArgumentError, id="empty-namespace"),
    pytest.param(lambda id: mem("lives-elsewhere"), ConflictError, id="id-in-other-namespace"),
]


@pytest.fixture
def seeded(store: Store) -> Store:
    """`keep` (with a vector) in NS and `lives-elsewhere` in another namespace."""
    store.upsert(full("keep", embedding=[1, 0, 0, 0]))
    store.upsert(mem("lives-elsewhere", ns="elsewhere"))
    return store


def assert_seeded_untouched(s: Store) -> None:
    assert_row(s.get(NS, "keep"), stored(full("keep")))
    np.testing.assert_array_equal(s.get_embedding(NS, "keep"), f32(1, 0, 0, 0))
    assert s.count(NS, Filter(include_expired=True, include_superseded=True)) == 1
    assert s.list_namespaces() == ["elsewhere", NS]
    assert s.get("elsewhere", "lives-elsewhere").content == "content of lives-elsewhere"
    assert [h.memory.id for h in s.vector_search(NS, f32(0, 0, 0, 1), k=10)] == ["keep"]
    assert s.keyword_search(NS, "batch") == []


@pytest.mark.parametrize("position", ["first", "middle", "last"])
@pytest.mark.parametrize(("make_bad", "error"), BAD_ROWS)
def test_upsert_many_is_all_or_nothing(
    seeded: Store, make_bad: Callable[[str], Memory], error: type[Exception], position: str
) -> None:
    good = [mem(f"new{i}", content=f"batch row {i}", embedding=[0, 0, 0, 1]) for i in range(4)]
    good.insert(1, full("keep", content="batch update of keep", embedding=[0, 0, 1, 1]))
    index = {"first": 0, "middle": 3, "last": len(good)}[position]
    with pytest.raises(error):  # the bad row may already be refused by Memory itself
        batch = [*good[:index], make_bad("bad"), *good[index:]]
        seeded.upsert_many(batch)
    assert_seeded_untouched(seeded)
    for i in range(4):
        with pytest.raises(NotFoundError):
            seeded.get(NS, f"new{i}")


@pytest.mark.parametrize("target", ["insert", "update"])
@pytest.mark.parametrize(("make_bad", "error"), BAD_ROWS)
def test_rejected_upsert_changes_nothing(
    request: pytest.FixtureRequest,
    seeded: Store,
    make_bad: Callable[[str], Memory],
    error: type[Exception],
    target: str,
) -> None:
    if target == "update" and "empty-namespace" in request.node.callspec.id:
        pytest.skip("a row with no namespace is not an update of keep")
    with pytest.raises(error):  # the bad row may already be refused by Memory itself
        bad = make_bad("keep" if target == "update" else "bad")
        seeded.upsert(dataclasses.replace(bad, content=f"batch {bad.content}"))
    assert_seeded_untouched(seeded)
    with pytest.raises(NotFoundError):
        seeded.get(NS, "bad")


# ---------------------------------------------------------------------------------------------
# embeddings


@pytest.mark.parametrize(
    "embedding",
    [
        pytest.param([0.1, 0.2, 0.3, 0.4], id="list-of-float"),
        pytest.param((0.1, 0.2, 0.3, 0.4), id="tuple"),
        pytest.param([1, 2, 3, 4], id="list-of-int"),
        pytest.param(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float64), id="float64-array"),
        pytest.param(np.arange(8, dtype=np.float32)[::2], id="strided-float32-view"),
        pytest.param(np.asfortranarray(np.ones(4, np.float32) / 3), id="fortran-order"),
        pytest.param(np.array([0.5, -0.5, 2, 3], dtype=np.float16), id="float16-array"),
    ],
)
def test_embedding_inputs_accepted(store: Store, embedding: Any) -> None:
    store.upsert(mem("a", embedding=embedding))
    got = store.get_embedding(NS, "a")
    assert got is not None
    assert got.dtype == np.float32 and got.shape == (4,)
    assert got.tobytes() == np.asarray(embedding, dtype=np.float32).tobytes()


@pytest.mark.parametrize("metric", ["l2", "cos", "ip"])
def test_get_embedding_is_bit_exact(open_store: Callable[..., Store], metric: str) -> None:
    s = open_store(dims=8, metric=metric)
    rng = np.random.default_rng(20240501)
    vectors = {f"r{i}": rng.standard_normal(8).astype(np.float32) * 10.0**i for i in range(-6, 7)}
    vectors["special"] = np.array(
        [-0.0, 1e-45, 3.4028235e38, -1.1754944e-38, 1.0, -1.0, 1 / 3, 7e-40], dtype=np.float32
    )
    s.upsert_many([mem(id, embedding=v) for id, v in vectors.items()])
    for id, v in vectors.items():
        got = s.get_embedding(NS, id)
        assert got is not None
        assert got.dtype == np.float32 and got.shape == (8,)
        assert got.tobytes() == v.tobytes(), id


def test_get_embedding_returns_a_copy(store: Store) -> None:
    v = f32(1, 2, 3, 4)
    store.upsert(mem("a", embedding=v))
    v[0] = 100  # the caller's array changes after the write
    got = store.get_embedding(NS, "a")
    assert got is not None
    if got.flags.writeable:
        got[1] = 100
    np.testing.assert_array_equal(store.get_embedding(NS, "a"), f32(1, 2, 3, 4))


@pytest.mark.parametrize(
    ("missing_ns", "missing_id"),
    [pytest.param(NS, "nope", id="absent"), pytest.param("other", "a", id="other-namespace")],
)
def test_get_embedding_not_found(store: Store, missing_ns: str, missing_id: str) -> None:
    store.upsert(mem("a", embedding=[1, 2, 3, 4]))
    with pytest.raises(NotFoundError):
        store.get_embedding(missing_ns, missing_id)


@pytest.mark.parametrize(
    ("embedding", "words"),
    [
        pytest.param([1, 2, 3], ["4", "3"], id="3-dims"),
        pytest.param([1, 2, 3, 4, 5], ["4", "5"], id="5-dims"),
        pytest.param([1.0], ["4", "1"], id="1-dim"),
    ],
)
def test_embedding_wrong_dims(store: Store, embedding: list[float], words: list[str]) -> None:
    with pytest.raises(DimensionMismatchError) as info:
        store.upsert(mem("a", embedding=embedding))
    for word in words:
        assert word in str(info.value)
    with pytest.raises(NotFoundError):
        store.get(NS, "a")


@pytest.mark.parametrize(
    "embedding",
    [
        pytest.param([math.nan, 0, 0, 0], id="nan"),
        pytest.param([0, math.inf, 0, 0], id="inf"),
        pytest.param([0, 0, -math.inf, 0], id="minus-inf"),
        pytest.param(np.array([0, 0, 0, np.nan], dtype=np.float32), id="nan-float32"),
        pytest.param(np.array([1e39, 0, 0, 0]), id="float64-overflows-float32"),
    ],
)
def test_embedding_non_finite_rejected(store: Store, embedding: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        store.upsert(mem("a", embedding=embedding))
    with pytest.raises(NotFoundError):
        store.get(NS, "a")


@pytest.mark.parametrize(
    "empty",
    [
        pytest.param(None, id="none"),
        pytest.param([], id="empty-list"),
        pytest.param((), id="empty-tuple"),
        pytest.param(np.empty(0, dtype=np.float32), id="empty-array"),
    ],
)
def test_empty_embedding_is_keyword_only_and_removes_vector(store: Store, empty: Any) -> None:
    store.upsert(mem("kw", content="keyword only row", embedding=empty))
    assert store.get_embedding(NS, "kw") is None
    assert store.vector_search(NS, f32(1, 1, 1, 1)) == []
    assert [h.memory.id for h in store.keyword_search(NS, "keyword")] == ["kw"]

    store.upsert(mem("v", content="vector row", embedding=[1, 1, 1, 1]))
    assert store.get_embedding(NS, "v") is not None
    store.upsert(mem("v", content="vector row now keyword only", embedding=empty))
    assert store.get_embedding(NS, "v") is None
    assert store.vector_search(NS, f32(1, 1, 1, 1)) == []
    assert {h.memory.id for h in store.keyword_search(NS, "keyword")} == {"kw", "v"}


# ---------------------------------------------------------------------------------------------
# update()


UPDATE_FIELDS = [
    pytest.param({"content": "new content"}, id="content"),
    pytest.param({"tier": Tier.WORKING}, id="tier"),
    pytest.param({"tier": "episodic"}, id="tier-as-string"),
    pytest.param({"level": Level.EXPLICIT}, id="level"),
    pytest.param({"level": None}, id="level-none"),
    pytest.param({"summary": "new summary"}, id="summary"),
    pytest.param({"metadata": {"only": "this"}}, id="metadata-replaced-whole"),
    pytest.param({"metadata": {}}, id="metadata-emptied"),
    pytest.param({"tags": ["b", "a"]}, id="tags"),
    pytest.param({"importance": 0.75}, id="importance"),
    pytest.param({"last_accessed_at": at(3)}, id="last-accessed-at"),
    pytest.param({"access_count": 42}, id="access-count"),
    pytest.param({"expires_at": at(1)}, id="expires-at"),
    pytest.param({"expires_at": None}, id="expires-at-none-clears"),
    pytest.param({"superseded_by": "successor"}, id="superseded-by"),
    pytest.param({"valid_from": at(-1)}, id="valid-from"),
    pytest.param({"valid_to": at(2)}, id="valid-to"),
    pytest.param({"valid_to": None}, id="valid-to-none"),
    pytest.param({"confidence": 0.9}, id="confidence"),
    pytest.param({"confidence": None}, id="confidence-none"),
    pytest.param({"linked_memory_ids": ["z"]}, id="linked-ids"),
    pytest.param({"content": "both", "tags": [], "importance": 1.0}, id="several-fields"),
]


@pytest.mark.parametrize("fields", UPDATE_FIELDS)
def test_update_changes_only_named_fields(store: Store, fields: dict[str, Any]) -> None:
    base = full("a")
    store.upsert(base)
    with wall_clock() as bounds:
        returned = store.update(NS, "a", **fields)
    got = store.get(NS, "a")
    assert_stamped(got.updated_at, bounds)
    coerced = {k: (Tier(v) if k == "tier" else v) for k, v in fields.items()}
    assert_row(got, stored(base, updated_at=got.updated_at, **coerced))
    assert_row(returned, got)
    # the vector was not named, so it is kept
    assert store.get_embedding(NS, "a").tobytes() == f32(0.25, -1.5, 3.0, 1e-3).tobytes()


def test_update_given_updated_at_is_kept(store: Store) -> None:
    store.upsert(full("a"))
    got = store.update(NS, "a", updated_at=at(7), content="x")
    assert got.updated_at == at(7)
    assert store.get(NS, "a").updated_at == at(7)


def test_update_embedding_replaces_vector(store: Store) -> None:
    store.upsert(full("a", embedding=[1, 0, 0, 0]))
    store.update(NS, "a", embedding=[0, 0, 0, 2])
    assert store.get_embedding(NS, "a").tobytes() == f32(0, 0, 0, 2).tobytes()
    [hit] = store.vector_search(NS, f32(0, 0, 0, 2), k=1)
    assert hit.memory.id == "a" and hit.score == 1.0
    assert_row(store.get(NS, "a"), stored(full("a"), updated_at=store.get(NS, "a").updated_at))


def test_update_adds_vector_to_keyword_only_row(store: Store) -> None:
    store.upsert(mem("a"))
    store.update(NS, "a", embedding=[0, 0, 0, 2])
    assert store.get_embedding(NS, "a").tobytes() == f32(0, 0, 0, 2).tobytes()


@pytest.mark.parametrize("empty", [pytest.param(None, id="none"), pytest.param([], id="empty")])
def test_update_embedding_none_removes_vector(store: Store, empty: Any) -> None:
    store.upsert(full("a", embedding=[1, 0, 0, 0]))
    store.update(NS, "a", embedding=empty)
    assert store.get_embedding(NS, "a") is None
    assert store.vector_search(NS, f32(1, 0, 0, 0)) == []
    assert store.get(NS, "a").content == full("a").content


REJECTED_UPDATES = [
    pytest.param({"id": "b"}, (InvalidArgumentError, TypeError), id="id"),
    pytest.param({"namespace": "other"}, (InvalidArgumentError, TypeError), id="namespace"),
    pytest.param({"created_at": at(1)}, (InvalidArgumentError, TypeError), id="created-at"),
    pytest.param({"colour": "red"}, (InvalidArgumentError, TypeError), id="unknown-field"),
    pytest.param({"tier": "eternal"}, InvalidArgumentError, id="unknown-tier"),
    pytest.param({"level": "guessed"}, InvalidArgumentError, id="unknown-level"),
    pytest.param({"embedding": [1, 2, 3]}, DimensionMismatchError, id="embedding-wrong-dims"),
    pytest.param({"embedding": [math.nan, 0, 0, 0]}, InvalidArgumentError, id="embedding-nan"),
    pytest.param({"metadata": {"x": math.inf}}, InvalidArgumentError, id="metadata-inf"),
    pytest.param({"metadata": {"x": T0}}, InvalidArgumentError, id="metadata-datetime"),
]


@pytest.mark.parametrize(("fields", "error"), REJECTED_UPDATES)
def test_rejected_update_changes_nothing(store: Store, fields: dict[str, Any], error: Any) -> None:
    store.upsert(full("a"))
    with pytest.raises(error):
        store.update(NS, "a", content="should not land", **fields)
    assert_row(store.get(NS, "a"), stored(full("a")))
    assert store.get_embedding(NS, "a").tobytes() == f32(0.25, -1.5, 3.0, 1e-3).tobytes()
    assert store.keyword_search(NS, "land") == []
    with pytest.raises(NotFoundError):
        store.get("other", "a")
    with pytest.raises(NotFoundError):
        store.get(NS, "b")


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(full("a", expires_at=at(-1000)), id="expired"),
        pytest.param(full("a", superseded_by="b", valid_to=at(-1000)), id="superseded"),
    ],
)
def test_update_works_on_expired_and_superseded_rows(store: Store, row: Memory) -> None:
    store.upsert(row)
    got = store.update(NS, "a", content="edited")
    assert got.content == "edited"
    assert got.expires_at == row.expires_at
    assert got.superseded_by == row.superseded_by
    assert store.get(NS, "a").content == "edited"


@pytest.mark.parametrize(
    ("ns", "id"),
    [pytest.param(NS, "missing", id="absent"), pytest.param("other", "a", id="other-namespace")],
)
def test_update_not_found(store: Store, ns: str, id: str) -> None:
    store.upsert(full("a"))
    with pytest.raises(NotFoundError):
        store.update(ns, id, content="x")
    assert store.list_namespaces() == [NS]
    assert_row(store.get(NS, "a"), stored(full("a")))


def test_update_content_changes_fingerprint(store: Store) -> None:
    store.upsert(full("a", content="old words", expires_at=None))
    store.update(NS, "a", content="brand new words")
    tier = Tier.PROCEDURAL
    with pytest.raises(NotFoundError):
        store.get_by_fingerprint(NS, tier, memini.fingerprint("old words"), now=at(0))
    found = store.get_by_fingerprint(NS, tier, memini.fingerprint("Brand  NEW words"), now=at(0))
    assert found.id == "a"


def test_update_tier_changes_fingerprint_lookup(store: Store) -> None:
    store.upsert(mem("a", content="same words"))
    store.update(NS, "a", tier=Tier.WORKING)
    fp = memini.fingerprint("same words")
    assert store.get_by_fingerprint(NS, Tier.WORKING, fp).id == "a"
    with pytest.raises(NotFoundError):
        store.get_by_fingerprint(NS, Tier.SEMANTIC, fp)


# ---------------------------------------------------------------------------------------------
# get, delete


@pytest.mark.parametrize(
    ("ns", "id"),
    [
        pytest.param(NS, "missing", id="absent"),
        pytest.param("other", "a", id="other-namespace"),
        pytest.param(NS, "A", id="id-is-case-sensitive"),
    ],
)
def test_get_not_found(store: Store, ns: str, id: str) -> None:
    store.upsert(mem("a"))
    store.upsert(mem("b", ns="other"))
    with pytest.raises(NotFoundError) as info:
        store.get(ns, id)
    assert isinstance(info.value, LookupError) and isinstance(info.value, MeminiError)


def test_delete(store: Store) -> None:
    store.upsert(full("a", content="delete me please", embedding=[1, 0, 0, 0]))
    store.upsert(full("b", embedding=[0, 1, 0, 0]))
    assert store.delete(NS, "a") is None
    with pytest.raises(NotFoundError):
        store.get(NS, "a")
    with pytest.raises(NotFoundError):
        store.get_embedding(NS, "a")
    assert [m.id for m in store.list(NS, Filter(include_expired=True))] == ["b"]
    assert [h.memory.id for h in store.vector_search(NS, f32(1, 0, 0, 0), k=10)] == ["b"]
    assert store.keyword_search(NS, "please") == []
    with pytest.raises(NotFoundError):
        store.delete(NS, "a")
    # the id is free again, in any namespace
    store.upsert(mem("a", ns="other"))
    assert store.get("other", "a").namespace == "other"


@pytest.mark.parametrize(
    ("ns", "id"),
    [pytest.param(NS, "missing", id="absent"), pytest.param("other", "a", id="other-namespace")],
)
def test_delete_not_found(store: Store, ns: str, id: str) -> None:
    store.upsert(mem("a"))
    with pytest.raises(NotFoundError):
        store.delete(ns, id)
    assert store.get(NS, "a").id == "a"


# ---------------------------------------------------------------------------------------------
# ids_by_prefix, predecessor_ids

PREFIX_IDS = [
    "a",
    "a%",
    "a%b",
    "a_b",
    "a.c",
    "a[b]",
    "a*",
    "a\\b",
    "ab",
    "abc",
    "abd",
    "A1",
    "b",
    "ä",
    "a'b",
]


@pytest.mark.parametrize(
    ("prefix", "limit", "expected"),
    [
        pytest.param("ab", 10, ["ab", "abc", "abd"], id="plain"),
        pytest.param("a%", 10, ["a%", "a%b"], id="percent-is-literal"),
        pytest.param("a_", 10, ["a_b"], id="underscore-is-literal"),
        pytest.param("a.", 10, ["a.c"], id="dot-is-literal"),
        pytest.param("a[", 10, ["a[b]"], id="bracket-is-literal"),
        pytest.param("a*", 10, ["a*"], id="star-is-literal"),
        pytest.param("a\\", 10, ["a\\b"], id="backslash-is-literal"),
        pytest.param("a'", 10, ["a'b"], id="quote-is-literal"),
        pytest.param("A", 10, ["A1"], id="case-sensitive-upper"),
        pytest.param("ä", 10, ["ä"], id="non-ascii"),
        pytest.param(
            "a",
            100,
            sorted(i for i in PREFIX_IDS if i.startswith("a")),
            id="ascending-all",
        ),
        pytest.param("a", 3, sorted(i for i in PREFIX_IDS if i.startswith("a"))[:3], id="limit"),
        pytest.param("abc", 10, ["abc"], id="whole-id"),
        pytest.param("abcd", 10, [], id="longer-than-any-id"),
        pytest.param("z", 10, [], id="no-match"),
        pytest.param("", 10, [], id="empty-prefix"),
        pytest.param("a", 0, [], id="limit-zero"),
        pytest.param("a", -1, [], id="limit-negative"),
    ],
)
def test_ids_by_prefix(store: Store, prefix: str, limit: int, expected: list[str]) -> None:
    store.upsert_many([mem(i) for i in PREFIX_IDS])
    store.upsert(mem("abz-elsewhere", ns="other"))
    assert store.ids_by_prefix(NS, prefix, limit) == expected


def test_ids_by_prefix_includes_expired_and_superseded(store: Store) -> None:
    store.upsert_many(
        [mem("p1", expires_at=at(-1000)), mem("p2", superseded_by="p1"), mem("p3", valid_to=at(0))]
    )
    assert store.ids_by_prefix(NS, "p", 10) == ["p1", "p2", "p3"]


def test_predecessor_ids(store: Store) -> None:
    store.upsert_many(
        [
            mem("c"),
            mem("a", superseded_by="c"),
            mem("b", superseded_by="c", expires_at=at(-1000)),
            mem("d", superseded_by="e"),
            mem("e"),
        ]
    )
    store.upsert(mem("x", ns="other", superseded_by="c"))
    assert sorted(store.predecessor_ids(NS, "c")) == ["a", "b"]
    assert store.predecessor_ids(NS, "e") == ["d"]
    assert store.predecessor_ids(NS, "a") == []
    store.set_superseded(NS, "e", "c")
    assert sorted(store.predecessor_ids(NS, "c")) == ["a", "b", "e"]
    store.restore(NS, "a")
    assert sorted(store.predecessor_ids(NS, "c")) == ["b", "e"]


# ---------------------------------------------------------------------------------------------
# get_by_fingerprint


@pytest.fixture
def fingerprinted(store: Store) -> Store:
    text = "the user likes coffee"
    store.upsert_many(
        [
            mem("old", content="The user likes coffee", created_at=at(0)),
            mem("mid", content="  the USER   likes\tcoffee ", created_at=at(1)),
            mem("new-expired", content=text, created_at=at(2), expires_at=at(3)),
            mem("new-superseded", content=text, created_at=at(2), superseded_by="mid"),
            mem("new-ended", content=text, created_at=at(1.5), valid_to=at(3)),
            mem("other-tier", content=text, created_at=at(5), tier=Tier.WORKING),
            mem("other-words", content="the user likes tea", created_at=at(6)),
        ]
    )
    store.upsert(mem("other-ns", ns="other", content=text, created_at=at(9)))
    return store


@pytest.mark.parametrize(
    ("tier", "now", "expected"),
    [
        pytest.param(Tier.SEMANTIC, at(4), "mid", id="newest-live-by-created-at"),
        pytest.param("semantic", at(4), "mid", id="tier-as-string"),
        pytest.param(Tier.SEMANTIC, at(2.5), "new-expired", id="not-yet-expired-wins"),
        pytest.param(Tier.WORKING, at(4), "other-tier", id="tier-scoped"),
        pytest.param(Tier.EPISODIC, at(4), None, id="no-row-in-tier"),
    ],
)
def test_get_by_fingerprint(
    fingerprinted: Store, tier: Any, now: datetime, expected: str | None
) -> None:
    fp = memini.fingerprint("The user likes coffee")
    if expected is None:
        with pytest.raises(NotFoundError):
            fingerprinted.get_by_fingerprint(NS, tier, fp, now)
    else:
        got = fingerprinted.get_by_fingerprint(NS, tier, fp, now)
        assert got.id == expected
        assert got.embedding is None


def test_get_by_fingerprint_wall_clock(store: Store) -> None:
    wall = datetime.now(UTC)
    store.upsert_many(
        [
            mem("live", content="x y", created_at=at(0)),
            mem("expired", content="x y", created_at=at(1), expires_at=wall - timedelta(days=1)),
            mem("later", content="x y", created_at=at(0.5), expires_at=wall + timedelta(days=1)),
        ]
    )
    assert store.get_by_fingerprint(NS, Tier.SEMANTIC, memini.fingerprint("x y")).id == "later"


@pytest.mark.parametrize(
    "fp",
    [
        pytest.param("", id="empty"),
        pytest.param(memini.fingerprint("nothing like this"), id="unknown"),
        pytest.param("The user likes coffee", id="content-is-not-a-fingerprint"),
    ],
)
def test_get_by_fingerprint_not_found(fingerprinted: Store, fp: str) -> None:
    with pytest.raises(NotFoundError):
        fingerprinted.get_by_fingerprint(NS, Tier.SEMANTIC, fp, at(4))


def test_get_by_fingerprint_of_empty_content(store: Store) -> None:
    store.upsert(mem("blank", content=""))
    got = store.get_by_fingerprint(NS, Tier.SEMANTIC, memini.fingerprint(""))
    assert got.id == "blank"


# ---------------------------------------------------------------------------------------------
# set_superseded, restore


def test_set_superseded_stamps_valid_to(store: Store) -> None:
    store.upsert(full("a", valid_to=None))
    with wall_clock() as bounds:
        assert store.set_superseded(NS, "a", "b") is None
    got = store.get(NS, "a")
    assert got.superseded_by == "b"
    assert_stamped(got.valid_to, bounds)
    assert_row(got, stored(full("a"), superseded_by="b", valid_to=got.valid_to))
    assert store.list(NS) == []


def test_set_superseded_keeps_existing_valid_to(store: Store) -> None:
    store.upsert(full("a", valid_to=at(3)))
    store.set_superseded(NS, "a", "b")
    got = store.get(NS, "a")
    assert got.superseded_by == "b"
    assert got.valid_to == at(3)


def test_restore_clears_superseded_and_valid_to(store: Store) -> None:
    store.upsert(full("a", valid_to=at(3), expires_at=None))
    store.set_superseded(NS, "a", "b")
    assert store.restore(NS, "a") is None
    got = store.get(NS, "a")
    assert got.superseded_by is None and got.valid_to is None
    assert_row(got, stored(full("a", expires_at=None), valid_to=None))
    assert [m.id for m in store.list(NS)] == ["a"]


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s, ns, id: s.set_superseded(ns, id, "b"), id="set_superseded"),
        pytest.param(lambda s, ns, id: s.restore(ns, id), id="restore"),
    ],
)
@pytest.mark.parametrize(
    ("ns", "id"),
    [pytest.param(NS, "missing", id="absent"), pytest.param("other", "a", id="other-namespace")],
)
def test_supersede_and_restore_not_found(store: Store, call: Any, ns: str, id: str) -> None:
    store.upsert(full("a"))
    with pytest.raises(NotFoundError):
        call(store, ns, id)
    assert_row(store.get(NS, "a"), stored(full("a")))


# ---------------------------------------------------------------------------------------------
# reinforce


@pytest.mark.parametrize(
    ("new_expiry", "expected_expiry"),
    [
        pytest.param(at(100), {"expiring": at(100), "forever": None}, id="new-expiry"),
        pytest.param(None, {"expiring": at(10), "forever": None}, id="no-new-expiry"),
    ],
)
def test_reinforce(
    store: Store, new_expiry: datetime | None, expected_expiry: dict[str, datetime | None]
) -> None:
    store.upsert_many(
        [
            full("expiring", expires_at=at(10), access_count=3, last_accessed_at=at(0)),
            full("forever", expires_at=None, access_count=0, last_accessed_at=at(0)),
            full("untouched", expires_at=at(10), access_count=5, last_accessed_at=at(0)),
        ]
    )
    store.upsert(full("elsewhere", ns="other", expires_at=at(10), access_count=1))
    assert (
        store.reinforce(NS, ["expiring", "forever", "missing", "elsewhere"], at(5), new_expiry)
        is None
    )
    for id, count in (("expiring", 4), ("forever", 1)):
        got = store.get(NS, id)
        assert got.access_count == count
        assert got.last_accessed_at == at(5)
        assert got.expires_at == expected_expiry[id]
        assert got.content == full(id).content
    assert_row(
        store.get(NS, "untouched"),
        stored(full("untouched", expires_at=at(10), access_count=5, last_accessed_at=at(0))),
    )
    other = store.get("other", "elsewhere")
    assert other.access_count == 1 and other.expires_at == at(10)
    with pytest.raises(NotFoundError):
        store.get(NS, "missing")


def test_reinforce_extends_expiry(store: Store) -> None:
    store.upsert(full("a", expires_at=at(1)))
    store.reinforce(NS, ["a"], at(2), at(50))
    got = store.get(NS, "a")
    assert got.expires_at == at(50)
    assert [m.id for m in store.list(NS, Filter(now=at(3)))] == ["a"]


def test_reinforce_empty_ids(store: Store) -> None:
    store.upsert(full("a"))
    store.reinforce(NS, [], at(5))
    assert_row(store.get(NS, "a"), stored(full("a")))


# ---------------------------------------------------------------------------------------------
# expiry: delete_if_expired_before, list_expired, sweep_expired


@pytest.mark.parametrize(
    ("expires_at", "cutoff", "deleted"),
    [
        pytest.param(at(1), at(2), True, id="expired-before-cutoff"),
        pytest.param(at(2), at(2), True, id="expires-at-cutoff"),
        pytest.param(at(3), at(2), False, id="expires-after-cutoff"),
        pytest.param(None, at(2), False, id="never-expires"),
    ],
)
def test_delete_if_expired_before(
    store: Store, expires_at: datetime | None, cutoff: datetime, deleted: bool
) -> None:
    store.upsert(full("a", expires_at=expires_at))
    if deleted:
        assert store.delete_if_expired_before(NS, "a", cutoff) is None
        with pytest.raises(NotFoundError):
            store.get(NS, "a")
    else:
        with pytest.raises(NotFoundError):
            store.delete_if_expired_before(NS, "a", cutoff)
        assert_row(store.get(NS, "a"), stored(full("a", expires_at=expires_at)))


@pytest.mark.parametrize(
    ("ns", "id"),
    [pytest.param(NS, "missing", id="absent"), pytest.param("other", "a", id="other-namespace")],
)
def test_delete_if_expired_before_not_found(store: Store, ns: str, id: str) -> None:
    store.upsert(full("a", expires_at=at(0)))
    with pytest.raises(NotFoundError):
        store.delete_if_expired_before(ns, id, at(10))
    assert store.get(NS, "a").id == "a"


@pytest.fixture
def expiring(store: Store) -> Store:
    """Rows in three namespaces expiring at hours 1..4 or never."""
    store.upsert_many(
        [
            full("e1", expires_at=at(1)),
            full("e2", expires_at=at(2), superseded_by="x", valid_to=at(0)),
            full("e3", ns="n2", expires_at=at(3)),
            full("e4", ns="n3", expires_at=at(4)),
            full("never", expires_at=None),
            full("never-superseded", expires_at=None, superseded_by="x"),
        ]
    )
    return store


@pytest.mark.parametrize(
    ("now", "limit", "expected", "size"),
    [
        pytest.param(at(0), 0, set(), 0, id="nothing-expired-yet"),
        pytest.param(at(1), 0, {"e1"}, 1, id="boundary-inclusive"),
        pytest.param(at(2.5), 0, {"e1", "e2"}, 2, id="superseded-too"),
        pytest.param(at(10), 0, {"e1", "e2", "e3", "e4"}, 4, id="all-namespaces"),
        pytest.param(at(10), -1, {"e1", "e2", "e3", "e4"}, 4, id="negative-limit-no-cap"),
        pytest.param(at(10), 2, {"e1", "e2", "e3", "e4"}, 2, id="limit-caps"),
        pytest.param(at(10), 100, {"e1", "e2", "e3", "e4"}, 4, id="limit-above-count"),
    ],
)
def test_list_expired(
    expiring: Store, now: datetime, limit: int, expected: set[str], size: int
) -> None:
    got = expiring.list_expired(now, limit)
    assert len(got) == size
    assert {m.id for m in got} <= expected
    assert len({m.id for m in got}) == size
    for m in got:
        assert isinstance(m, Memory) and m.embedding is None
        assert_row(m, expiring.get(m.namespace, m.id))


@pytest.mark.parametrize(
    ("now", "limit", "deletable", "count"),
    [
        pytest.param(at(0), 0, set(), 0, id="nothing-expired-yet"),
        pytest.param(at(1), 0, {"e1"}, 1, id="boundary-inclusive"),
        pytest.param(at(2), 0, {"e1", "e2"}, 2, id="superseded-expired-too"),
        pytest.param(at(10), 0, {"e1", "e2", "e3", "e4"}, 4, id="all-namespaces"),
        pytest.param(at(10), -5, {"e1", "e2", "e3", "e4"}, 4, id="negative-limit-no-cap"),
        pytest.param(at(10), 3, {"e1", "e2", "e3", "e4"}, 3, id="limit-caps"),
    ],
)
def test_sweep_expired(
    expiring: Store, now: datetime, limit: int, deletable: set[str], count: int
) -> None:
    all_ids = {"e1": NS, "e2": NS, "e3": "n2", "e4": "n3", "never": NS, "never-superseded": NS}
    assert expiring.sweep_expired(now, limit) == count
    remaining = set()
    for id, ns in all_ids.items():
        try:
            expiring.get(ns, id)
            remaining.add(id)
        except NotFoundError:
            pass
    gone = set(all_ids) - remaining
    assert gone <= deletable and len(gone) == count
    # a second sweep finishes the job
    assert expiring.sweep_expired(now, 0) == len(deletable) - count
    assert {m.id for m in expiring.list_expired(now, 0)} == set()


def test_sweep_expired_wall_clock(store: Store) -> None:
    wall = datetime.now(UTC)
    store.upsert_many(
        [
            mem("past", expires_at=wall - timedelta(days=1)),
            mem("future", expires_at=wall + timedelta(days=1)),
            mem("never"),
        ]
    )
    assert store.sweep_expired() == 1
    assert sorted(m.id for m in store.list(NS)) == ["future", "never"]


# ---------------------------------------------------------------------------------------------
# namespaces: list_namespaces, delete_namespace, reassign, namespace_activity


def test_list_namespaces(store: Store) -> None:
    assert store.list_namespaces() == []
    store.upsert_many(
        [
            mem("a", ns="zeta"),
            mem("b", ns="Alpha"),
            mem("c", ns="alpha", expires_at=at(-1000)),
            mem("d", ns="mu", superseded_by="x"),
            mem("e", ns="zeta"),
        ]
    )
    assert store.list_namespaces() == ["Alpha", "alpha", "mu", "zeta"]
    store.delete("mu", "d")
    assert store.list_namespaces() == ["Alpha", "alpha", "zeta"]


def test_delete_namespace(store: Store) -> None:
    store.upsert_many(
        [
            full("a1", ns="a", embedding=[1, 0, 0, 0], content="apple one"),
            full("a2", ns="a", expires_at=at(-1000), content="apple two"),
            full("a3", ns="a", superseded_by="a1", content="apple three"),
            full("b1", ns="b", embedding=[1, 0, 0, 0], content="apple bee"),
        ]
    )
    store.put_link(NamespaceLink("a", "b"))
    store.put_link(NamespaceLink("b", "a"))
    store.put_link(NamespaceLink("a", "a"))
    store.put_link(NamespaceLink("b", "c"))
    assert store.delete_namespace("a") == 3
    assert store.list_namespaces() == ["b"]
    assert [(link.src, link.dst) for link in store.list_all_links()] == [("b", "c")]
    assert store.vector_search("a", f32(1, 0, 0, 0)) == []
    assert store.keyword_search("a", "apple") == []
    assert store.count("a", Filter(include_expired=True, include_superseded=True)) == 0
    assert [h.memory.id for h in store.keyword_search("b", "apple")] == ["b1"]
    assert store.delete_namespace("a") == 0
    assert store.delete_namespace("never-existed") == 0
    store.upsert(mem("a1", ns="c"))  # ids are free again


def test_reassign(store: Store) -> None:
    rows = [
        full("m1", ns="from", content="moving apple", embedding=[1, 0, 0, 0]),
        full("m2", ns="from", content="moving pear", embedding=None),
        full("stay", ns="from", content="staying apple", embedding=[1, 0, 0, 0]),
        full("else", ns="third", content="third apple"),
    ]
    store.upsert_many(rows)
    assert store.reassign("from", ["m1", "m2", "missing", "else"], "to") == 2
    for row in rows[:2]:
        with pytest.raises(NotFoundError):
            store.get("from", row.id)
        assert_row(store.get("to", row.id), stored(row, namespace="to"))
    np.testing.assert_array_equal(store.get_embedding("to", "m1"), f32(1, 0, 0, 0))
    assert store.get_embedding("to", "m2") is None
    assert store.get("third", "else").namespace == "third"
    assert [h.memory.id for h in store.vector_search("to", f32(1, 0, 0, 0))] == ["m1"]
    assert [h.memory.id for h in store.vector_search("from", f32(1, 0, 0, 0))] == ["stay"]
    assert {h.memory.id for h in store.keyword_search("to", "moving")} == {"m1", "m2"}
    assert store.keyword_search("from", "moving") == []
    assert store.list_namespaces() == ["from", "third", "to"]


def test_reassign_same_namespace_is_noop(store: Store) -> None:
    store.upsert(full("a"))
    assert store.reassign(NS, ["a"], NS) == 0
    assert_row(store.get(NS, "a"), stored(full("a")))


def test_reassign_nothing(store: Store) -> None:
    store.upsert(full("a"))
    assert store.reassign(NS, [], "to") == 0
    assert store.reassign("empty", ["a"], "to") == 0
    assert store.list_namespaces() == [NS]


def test_namespace_activity(store: Store) -> None:
    store.upsert_many(
        [
            mem("z1", ns="zeta", created_at=at(1)),
            mem("z2", ns="zeta", created_at=at(3)),
            mem("z3", ns="zeta", created_at=at(9), expires_at=at(4)),  # expired at now
            mem("z4", ns="zeta", created_at=at(8), superseded_by="z1"),  # not live
            mem("a1", ns="alpha", created_at=at(2)),
            mem("a2", ns="alpha", created_at=at(7), valid_to=at(5)),  # validity ended
            mem("d1", ns="dead", created_at=at(1), expires_at=at(2)),  # no live row
            mem("m1", ns="mid", created_at=at(0), expires_at=at(6)),
        ]
    )
    got = store.namespace_activity(at(5))
    assert got == [
        NamespaceActivity("alpha", 1, at(2)),
        NamespaceActivity("mid", 1, at(0)),
        NamespaceActivity("zeta", 2, at(3)),
    ]
    for activity in got:
        assert isinstance(activity, NamespaceActivity)
        assert_utc(activity.last_write)


def test_namespace_activity_wall_clock(store: Store) -> None:
    wall = datetime.now(UTC)
    store.upsert_many(
        [
            mem("a", ns="n1", created_at=at(0)),
            mem("b", ns="n1", created_at=at(1), expires_at=wall - timedelta(days=1)),
            mem("c", ns="n2", created_at=at(2), expires_at=wall - timedelta(days=1)),
        ]
    )
    assert store.namespace_activity() == [NamespaceActivity("n1", 1, at(0))]


# ---------------------------------------------------------------------------------------------
# retier, set_confidence, mark_contradicted


@pytest.mark.parametrize(
    ("tier", "expires_at"),
    [
        pytest.param(Tier.WORKING, at(72), id="to-working-with-expiry"),
        pytest.param("episodic", at(24), id="tier-as-string"),
        pytest.param(Tier.SEMANTIC, None, id="expires-none-clears"),
    ],
)
def test_retier(store: Store, tier: Any, expires_at: datetime | None) -> None:
    store.upsert(full("a", expires_at=at(5)))
    assert store.retier(NS, "a", tier, expires_at) is None
    got = store.get(NS, "a")
    assert got.tier is Tier(tier)
    assert got.expires_at == expires_at
    assert got.content == full("a").content


def test_retier_errors(store: Store) -> None:
    store.upsert(full("a"))
    with pytest.raises(NotFoundError):
        store.retier(NS, "missing", Tier.WORKING, None)
    with pytest.raises(NotFoundError):
        store.retier("other", "a", Tier.WORKING, None)
    with pytest.raises(InvalidArgumentError):
        store.retier(NS, "a", "eternal", None)
    assert_row(store.get(NS, "a"), stored(full("a")))


@pytest.mark.parametrize(
    ("valid_to", "allowed"),
    [
        pytest.param(None, True, id="open-validity"),
        pytest.param(at(6), True, id="validity-ends-later"),
        pytest.param(at(5), False, id="validity-ends-now"),
        pytest.param(at(4), False, id="validity-ended"),
    ],
)
def test_set_confidence(store: Store, valid_to: datetime | None, allowed: bool) -> None:
    row = full("a", valid_to=valid_to, confidence=0.5)
    store.upsert(row)
    if allowed:
        assert store.set_confidence(NS, "a", 0.875, at(5)) is None
        assert_row(store.get(NS, "a"), stored(row, confidence=0.875, updated_at=at(5)))
    else:
        with pytest.raises(NotFoundError):
            store.set_confidence(NS, "a", 0.875, at(5))
        assert_row(store.get(NS, "a"), stored(row))


@pytest.mark.parametrize(
    ("ns", "id"),
    [pytest.param(NS, "missing", id="absent"), pytest.param("other", "a", id="other-namespace")],
)
def test_set_confidence_not_found(store: Store, ns: str, id: str) -> None:
    store.upsert(full("a"))
    with pytest.raises(NotFoundError):
        store.set_confidence(ns, id, 0.1, at(0))
    assert_row(store.get(NS, "a"), stored(full("a")))


@pytest.mark.parametrize(
    ("confidence", "valid_to", "expected_valid_to"),
    [
        pytest.param(0.8, None, at(5), id="stamps-valid-to"),
        pytest.param(0.8, at(2), at(2), id="keeps-valid-to"),
        pytest.param(None, None, at(5), id="untracked-confidence"),
        pytest.param(0.0, at(9), at(9), id="zero-confidence-is-a-value"),
    ],
)
def test_mark_contradicted(
    store: Store,
    confidence: float | None,
    valid_to: datetime | None,
    expected_valid_to: datetime,
) -> None:
    row = full("a", confidence=confidence, valid_to=valid_to, metadata={"keep": "me", "n": 1})
    store.upsert(row)
    assert store.mark_contradicted(NS, "a", "b", 0.25, at(5)) is None
    got = store.get(NS, "a")
    metadata = {
        "keep": "me",
        "n": 1,
        "contradicted_by": "b",
        "contradicted_prev_confidence": confidence,
    }
    assert_row(
        got,
        stored(
            row, metadata=metadata, confidence=0.25, valid_to=expected_valid_to, updated_at=at(5)
        ),
    )


def test_mark_contradicted_not_found(store: Store) -> None:
    store.upsert(full("a"))
    with pytest.raises(NotFoundError):
        store.mark_contradicted(NS, "missing", "b", 0.1, at(0))
    with pytest.raises(NotFoundError):
        store.mark_contradicted("other", "a", "b", 0.1, at(0))
    assert_row(store.get(NS, "a"), stored(full("a")))


# ---------------------------------------------------------------------------------------------
# metadata validation


class _Custom:
    pass


BAD_METADATA = [
    pytest.param({"when": T0}, id="datetime"),
    pytest.param({"x": math.nan}, id="nan"),
    pytest.param({"x": math.inf}, id="inf"),
    pytest.param({"x": -math.inf}, id="minus-inf"),
    pytest.param({"x": {1, 2}}, id="set"),
    pytest.param({"x": b"bytes"}, id="bytes"),
    pytest.param({"x": _Custom()}, id="object"),
    pytest.param({"x": 1j}, id="complex"),
    pytest.param({1: "int key"}, id="non-str-key"),
    pytest.param({"x": [1, {"y": math.nan}]}, id="nested-nan"),
    pytest.param({"x": {"y": [T0]}}, id="nested-datetime"),
    pytest.param({"x": np.float32(1.5)}, id="numpy-scalar"),
]


@pytest.mark.parametrize("metadata", BAD_METADATA)
@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda s, md: s.upsert(mem("new", metadata=md)), id="upsert-insert"),
        pytest.param(lambda s, md: s.upsert(full("a", metadata=md)), id="upsert-update"),
        pytest.param(lambda s, md: s.upsert_many([mem("new", metadata=md)]), id="upsert_many"),
        pytest.param(lambda s, md: s.update(NS, "a", metadata=md), id="update"),
    ],
)
def test_bad_metadata_rejected_nothing_stored(
    store: Store, metadata: dict[Any, Any], write: Callable[[Store, Any], Any]
) -> None:
    store.upsert(full("a"))
    with pytest.raises(InvalidArgumentError):
        write(store, metadata)
    assert_row(store.get(NS, "a"), stored(full("a")))
    with pytest.raises(NotFoundError):
        store.get(NS, "new")


# ---------------------------------------------------------------------------------------------
# ids and enum arguments


@pytest.mark.parametrize(
    "id",
    [
        pytest.param("with space", id="space"),
        pytest.param("slash/and\\backslash", id="slashes"),
        pytest.param("ü東京🙂", id="unicode"),
        pytest.param("quote'\"`", id="quotes"),
        pytest.param("%_*?[]", id="wildcard-chars"),
        pytest.param("x" * 1000, id="1000-chars"),
        pytest.param("0", id="digit"),
    ],
)
def test_unusual_ids_round_trip(store: Store, id: str) -> None:
    store.upsert(full(id, ns="名前空間/ü"))
    assert_row(store.get("名前空間/ü", id), stored(full(id, ns="名前空間/ü")))
    assert store.ids_by_prefix("名前空間/ü", id, 10) == [id]
    assert store.list_namespaces() == ["名前空間/ü"]
    store.delete("名前空間/ü", id)
    with pytest.raises(NotFoundError):
        store.get("名前空間/ü", id)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda s: s.get_by_fingerprint(NS, "eternal", memini.fingerprint("x")),
            id="get_by_fingerprint",
        ),
        pytest.param(lambda s: s.retier(NS, "a", "eternal", None), id="retier"),
        pytest.param(lambda s: s.update(NS, "a", tier="eternal"), id="update"),
    ],
)
def test_unknown_tier_argument(store: Store, call: Callable[[Store], Any]) -> None:
    store.upsert(full("a"))
    with pytest.raises(InvalidArgumentError):
        call(store)
    assert_row(store.get(NS, "a"), stored(full("a")))


def test_naive_now_arguments_are_utc(store: Store) -> None:
    naive = T0.replace(tzinfo=None)
    store.upsert(full("a", valid_to=None))
    store.reinforce(NS, ["a"], naive, naive + timedelta(hours=1))
    store.set_confidence(NS, "a", 0.5, naive)
    got = store.get(NS, "a")
    assert got.last_accessed_at == T0 and got.updated_at == T0
    assert got.expires_at == T0 + timedelta(hours=1)
    assert [m.id for m in store.list_expired(naive + timedelta(hours=1), 0)] == ["a"]
