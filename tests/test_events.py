"""The event log (API.md section 5): append_events, list_events, prune_events."""

from __future__ import annotations

import math
import random
import threading
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memini import events as events_module
from memini._sqlite import MetaDB
from memini.errors import ConflictError, InvalidArgumentError, StoreClosedError
from memini.types import Event, EventFilter, EventKind, NamespaceLink, Tier
from meta_helpers import T0, at

pytest_plugins = ["conftest_meta"]


def ev(op: str, ns: str = "n", **kw: Any) -> Event:
    """An event of kind recall unless told otherwise."""
    kw.setdefault("kind", EventKind.RECALL)
    return Event(op_id=op, namespace=ns, **kw)


def ids(events: list[Event]) -> list[int]:
    """The ids, in list order."""
    return [e.id for e in events]


# -- append_events -----------------------------------------------------------------------------


def test_round_trip_of_every_field(meta: MetaDB) -> None:
    detail = {"k": [1, 2.5, "s", None, True, {"deep": ["x"]}], "ü": "日本 \x00", "big": 2**64 - 1}
    event = Event(
        op_id="op",
        kind=EventKind.INJECT,
        namespace="ns",
        query="What is up?",
        memory_id="m1",
        memory_ns="other",
        memory_tier=Tier.PROCEDURAL,
        memory_summary="Summary ü 日本",
        rank=-3,
        score=0.1,
        detail=detail,
        created_at=T0,
    )
    meta.append_events([event])
    [got] = meta.list_events()
    assert got == replace(event, id=got.id)
    assert got.id > 0
    assert type(got.kind) is EventKind and type(got.memory_tier) is Tier
    assert got.created_at is not None and got.created_at.tzinfo is UTC


@pytest.mark.parametrize(
    ("score", "expected"),
    [
        pytest.param(None, None, id="none-stays-none"),
        pytest.param(0.0, 0.0, id="zero"),
        pytest.param(-0.5, -0.5, id="negative"),
        pytest.param(1e-300, 1e-300, id="tiny"),
        pytest.param(0.1 + 0.2, 0.1 + 0.2, id="exact-f64"),
        pytest.param(3, 3.0, id="int-becomes-float"),
    ],
)
def test_score_round_trips(meta: MetaDB, score: Any, expected: float | None) -> None:
    meta.append_events([ev("op", score=score)])
    [got] = meta.list_events()
    assert got.score == expected
    assert (got.score is None) == (expected is None)


@pytest.mark.parametrize(
    ("kind", "tier", "expected_kind", "expected_tier"),
    [
        pytest.param("get", "episodic", EventKind.GET, Tier.EPISODIC, id="string-values"),
        pytest.param(EventKind.PIN, Tier.WORKING, EventKind.PIN, Tier.WORKING, id="members"),
        pytest.param("unpin", None, EventKind.UNPIN, None, id="no-tier"),
        pytest.param("settings", "", EventKind.SETTINGS, None, id="empty-tier-is-none"),
    ],
)
def test_enum_fields_accept_values_and_return_members(
    meta: MetaDB, kind: Any, tier: Any, expected_kind: EventKind, expected_tier: Tier | None
) -> None:
    meta.append_events([ev("op", kind=kind, memory_tier=tier)])
    [got] = meta.list_events()
    assert (got.kind, got.memory_tier) == (expected_kind, expected_tier)
    assert type(got.kind) is EventKind


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"kind": "nope"}, id="unknown-kind"),
        pytest.param({"memory_tier": "long"}, id="unknown-tier"),
        pytest.param({"op_id": ""}, id="empty-op-id"),
        pytest.param({"namespace": None}, id="none-namespace"),
        pytest.param({"kind": None}, id="none-kind"),
        pytest.param({"query": 5}, id="int-query"),
        pytest.param({"rank": 1.5}, id="float-rank"),
        pytest.param({"rank": 2**63}, id="rank-overflow"),
        pytest.param({"score": math.nan}, id="nan-score"),
        pytest.param({"score": math.inf}, id="inf-score"),
        pytest.param({"score": "0.5"}, id="str-score"),
        pytest.param({"detail": {"x": math.nan}}, id="nan-in-detail"),
        pytest.param({"detail": {"x": [math.inf]}}, id="inf-in-detail"),
        pytest.param({"detail": {"x": T0}}, id="datetime-in-detail"),
        pytest.param({"detail": {"x": (1, 2)}}, id="tuple-in-detail"),
        pytest.param({"detail": {"x": {1, 2}}}, id="set-in-detail"),
        pytest.param({"detail": {"x": b"raw"}}, id="bytes-in-detail"),
        pytest.param({"detail": {1: "int key"}}, id="int-key-in-detail"),
        pytest.param({"detail": {"x": {None: 1}}}, id="none-key-nested"),
        pytest.param({"detail": ["not", "a", "dict"]}, id="list-detail"),
        pytest.param({"detail": None}, id="none-detail"),
        pytest.param({"detail": {"x": "\udc80 lone"}}, id="lone-surrogate-in-detail"),
        pytest.param({"detail": {"x": 2**64}}, id="int-beyond-64-bits-in-detail"),
        pytest.param({"created_at": "2025-01-01"}, id="str-created-at"),
        pytest.param({"memory_summary": "\ud800"}, id="lone-surrogate-text"),
    ],
)
def test_invalid_event_rejects_the_whole_batch(meta: MetaDB, bad: dict[str, Any]) -> None:
    bad_event = replace(ev("op"), **bad)
    with pytest.raises(InvalidArgumentError):
        meta.append_events([ev("ok"), bad_event, ev("ok2")])
    assert meta.list_events() == []


def test_deeply_nested_detail_is_rejected_not_a_crash(meta: MetaDB) -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(10_000):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(InvalidArgumentError):
        meta.append_events([ev("op", detail=deep)])


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(ev("op"), id="single-event-not-list"),
        pytest.param("events", id="string"),
        pytest.param([("op", "recall", "n")], id="tuple-rows"),
        pytest.param(None, id="none"),
    ],
)
def test_append_rejects_non_event_lists(meta: MetaDB, events: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        meta.append_events(events)


def test_batch_ids_are_contiguous_in_list_order_and_grow(meta: MetaDB) -> None:
    meta.append_events([ev("a", rank=i) for i in range(5)])
    meta.append_events([])  # nothing, no id consumed
    meta.append_events(ev("b", rank=i) for i in range(3))  # any iterable
    rows = sorted(meta.list_events(), key=lambda e: e.id)
    first = [e.id for e in rows if e.op_id == "a"]
    second = [e.id for e in rows if e.op_id == "b"]
    assert first[0] > 0
    assert first == list(range(first[0], first[0] + 5))
    assert second == list(range(first[-1] + 1, first[-1] + 4))
    assert [e.rank for e in rows] == [0, 1, 2, 3, 4, 0, 1, 2]


def test_created_at_none_is_one_now_per_batch_and_input_is_not_modified(meta: MetaDB) -> None:
    batch = [ev("op", rank=i) for i in range(3)]
    before = datetime.now(UTC)
    meta.append_events(batch)
    after = datetime.now(UTC)
    stamps = {e.created_at for e in meta.list_events()}
    assert len(stamps) == 1
    [stamp] = stamps
    assert stamp is not None and before - timedelta(milliseconds=1) <= stamp <= after
    assert all(e.id == 0 and e.created_at is None for e in batch)


@pytest.mark.parametrize(
    ("given_at", "expected"),
    [
        pytest.param(T0.replace(tzinfo=None), T0, id="naive-is-utc"),
        pytest.param(T0.astimezone(timezone(timedelta(hours=9))), T0, id="offset-converted"),
        pytest.param(
            datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
            datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
            id="microsecond-precision",
        ),
    ],
)
def test_created_at_round_trips(meta: MetaDB, given_at: datetime, expected: datetime) -> None:
    meta.append_events([ev("op", created_at=given_at)])
    [got] = meta.list_events()
    assert got.created_at == expected and got.created_at is not None
    assert got.created_at.tzinfo is UTC


def test_given_id_is_ignored(meta: MetaDB) -> None:
    meta.append_events([ev("op", id=12345)])
    [got] = meta.list_events()
    assert got.id != 12345


# -- list_events: order and filters -------------------------------------------------------------


@pytest.fixture
def log(meta: MetaDB) -> MetaDB:
    """A small log: 3 operations in 2 namespaces, with ties on created_at.

    ====  ==  =====  =========  ========  ==================  ========
    op    ns  kind   created    tier      query               summary
    ====  ==  =====  =========  ========  ==================  ========
    r1    n1  recall at(0)      -         "Coffee 50% off?"   ""
    r1    n1  recall at(0)      semantic  "Coffee 50% off?"   "likes TEA"
    r1    n1  get    at(1)      working   ""                  "a_b"
    r2    n2  recall at(1)      episodic  "Straße"            "École"
    r2    n2  recall at(2)      -         "Straße"            ""
    w1    n1  remem. at(3)      semantic  ""                  "500 off"
    ====  ==  =====  =========  ========  ==================  ========
    """
    meta.append_events(
        [
            ev("r1", "n1", query="Coffee 50% off?", created_at=at(0)),
            ev(
                "r1",
                "n1",
                query="Coffee 50% off?",
                memory_tier=Tier.SEMANTIC,
                memory_summary="likes TEA",
                created_at=at(0),
                rank=1,
            ),
            ev(
                "r1",
                "n1",
                kind=EventKind.GET,
                memory_tier=Tier.WORKING,
                memory_summary="a_b",
                created_at=at(1),
            ),
        ]
    )
    meta.append_events(
        [
            ev(
                "r2",
                "n2",
                query="Straße",
                memory_tier=Tier.EPISODIC,
                memory_summary="École",
                created_at=at(1),
            ),
            ev("r2", "n2", query="Straße", created_at=at(2)),
        ]
    )
    meta.append_events(
        [
            ev(
                "w1",
                "n1",
                kind=EventKind.REMEMBER,
                memory_tier=Tier.SEMANTIC,
                memory_summary="500 off",
                created_at=at(3),
            )
        ]
    )
    return meta


def keys(events: list[Event]) -> list[tuple[str, int]]:
    """(op_id, position within the log) of each event, by append order 1..6."""
    return [(e.op_id, e.id) for e in events]


# The log's rows by append position (ids are 1..6 in a fresh database).
R1A, R1B, R1C, R2A, R2B, W1 = range(1, 7)
NEWEST_FIRST = [W1, R2B, R2A, R1C, R1B, R1A]  # at(3), at(2), at(1) id 4 > 3, at(0) id 2 > 1


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        pytest.param(None, NEWEST_FIRST, id="none-lists-all-newest-first"),
        pytest.param(EventFilter(), NEWEST_FIRST, id="empty-filter"),
        pytest.param(EventFilter(namespace="n1"), [W1, R1C, R1B, R1A], id="namespace"),
        pytest.param(EventFilter(namespace="n"), [], id="namespace-exact-not-prefix"),
        pytest.param(EventFilter(namespaces=["n2", "zz"]), [R2B, R2A], id="namespaces-or"),
        pytest.param(
            EventFilter(namespace="n2", namespaces=["n1"]), [R2B, R2A], id="namespace-wins"
        ),
        pytest.param(EventFilter(kinds=["get", EventKind.REMEMBER]), [W1, R1C], id="kinds"),
        pytest.param(
            EventFilter(tiers=[Tier.WORKING]), [R1C, R1B, R1A], id="tiers-select-whole-op"
        ),
        pytest.param(EventFilter(tiers=["semantic"]), [W1, R1C, R1B, R1A], id="tiers-several-ops"),
        pytest.param(EventFilter(tiers=[Tier.PROCEDURAL]), [], id="tiers-no-match"),
        pytest.param(
            EventFilter(text="coffee"), [R1C, R1B, R1A], id="text-case-insensitive-whole-op"
        ),
        pytest.param(EventFilter(text="TEA"), [R1C, R1B, R1A], id="text-in-summary"),
        pytest.param(EventFilter(text="50%"), [R1C, R1B, R1A], id="percent-literal"),
        pytest.param(EventFilter(text="5%"), [], id="percent-not-wildcard"),
        pytest.param(EventFilter(text="a_b"), [R1C, R1B, R1A], id="underscore-literal"),
        pytest.param(EventFilter(text="a_"), [R1C, R1B, R1A], id="underscore-prefix"),
        pytest.param(EventFilter(text="_"), [R1C, R1B, R1A], id="underscore-only"),
        pytest.param(EventFilter(text="%"), [R1C, R1B, R1A], id="percent-only"),
        pytest.param(EventFilter(text="strasse"), [R2B, R2A], id="unicode-casefold-sharp-s"),
        pytest.param(EventFilter(text="ÉCOLE"), [R2B, R2A], id="unicode-case-insensitive"),
        pytest.param(EventFilter(text="ecole"), [], id="accents-matter"),
        pytest.param(EventFilter(text="off?likes"), [], id="no-match-across-fields"),
        pytest.param(EventFilter(text="off"), [W1, R1C, R1B, R1A], id="text-several-ops"),
        pytest.param(
            EventFilter(text="coffee", tiers=[Tier.WORKING]),
            [R1C, R1B, R1A],
            id="tiers-and-text-on-different-rows-of-one-op",
        ),
        pytest.param(
            EventFilter(text="500", tiers=[Tier.WORKING]), [], id="tiers-and-text-both-needed"
        ),
        pytest.param(EventFilter(text="coffee", kinds=["get"]), [R1C], id="text-then-row-filter"),
        pytest.param(
            EventFilter(tiers=["episodic"], namespace="n1"), [], id="tiers-then-namespace"
        ),
        pytest.param(EventFilter(since=at(1)), [W1, R2B, R2A, R1C], id="since-inclusive"),
        pytest.param(
            EventFilter(since=at(1).replace(tzinfo=None)),
            [W1, R2B, R2A, R1C],
            id="since-naive-utc",
        ),
        pytest.param(EventFilter(since=at(3.5)), [], id="since-after-all"),
        pytest.param(EventFilter(before=at(1)), [R1B, R1A], id="before-alone-strict"),
        pytest.param(
            EventFilter(before=at(1), before_id=R2A), [R1C, R1B, R1A], id="cursor-tie-on-time"
        ),
        pytest.param(EventFilter(before=at(1), before_id=R1C), [R1B, R1A], id="cursor-at-tie-end"),
        pytest.param(EventFilter(before=at(0), before_id=R1B), [R1A], id="cursor-inside-tie"),
        pytest.param(EventFilter(before=at(9), before_id=1), NEWEST_FIRST, id="cursor-later"),
        pytest.param(EventFilter(before_id=R2A), [R1C, R1B, R1A], id="before-id-alone"),
        pytest.param(EventFilter(limit=2), [W1, R2B], id="limit"),
        pytest.param(EventFilter(limit=0), NEWEST_FIRST, id="limit-zero-no-cap"),
        pytest.param(EventFilter(limit=-1), NEWEST_FIRST, id="limit-negative-no-cap"),
        pytest.param(EventFilter(text="off", limit=2), [W1, R1C], id="text-with-limit"),
        pytest.param(
            EventFilter(text="off", before=at(1), before_id=R1C, limit=1),
            [R1B],
            id="text-with-cursor",
        ),
        pytest.param(EventFilter(text=""), NEWEST_FIRST, id="empty-text-no-filter"),
    ],
)
def test_list_events_filters(log: MetaDB, flt: EventFilter | None, expected: list[int]) -> None:
    for probe_max in (0, 10**9):  # both step-2 plans: walk the time index, probe by op
        events_module.PROBE_MAX_OPS, saved = probe_max, events_module.PROBE_MAX_OPS
        try:
            assert ids(log.list_events(flt)) == expected, f"PROBE_MAX_OPS={probe_max}"
        finally:
            events_module.PROBE_MAX_OPS = saved


def test_list_events_text_with_nul_and_long_text(meta: MetaDB) -> None:
    meta.append_events([ev("a", query="x\x00y"), ev("b", memory_summary="y" * 10_000 + "NEEDLE")])
    assert [e.op_id for e in meta.list_events(EventFilter(text="\x00y"))] == ["a"]
    assert [e.op_id for e in meta.list_events(EventFilter(text="needle"))] == ["b"]


@pytest.mark.parametrize(
    "flt",
    [
        pytest.param(EventFilter(kinds="recall"), id="bare-string-kinds"),  # type: ignore[arg-type]
        pytest.param(EventFilter(kinds=["nope"]), id="unknown-kind"),  # type: ignore[list-item]
        pytest.param(EventFilter(tiers=["long"]), id="unknown-tier"),  # type: ignore[list-item]
        pytest.param(EventFilter(tiers=Tier.SEMANTIC), id="bare-member-tiers"),  # type: ignore[arg-type]
        pytest.param(EventFilter(namespaces="n1"), id="bare-string-namespaces"),
        pytest.param(EventFilter(namespaces=[1]), id="int-namespace"),  # type: ignore[list-item]
        pytest.param(EventFilter(before_id=-1), id="negative-before-id"),
        pytest.param(EventFilter(limit=1.5), id="float-limit"),  # type: ignore[arg-type]
        pytest.param(EventFilter(since="yesterday"), id="str-since"),  # type: ignore[arg-type]
        pytest.param(EventFilter(text=None), id="none-text"),  # type: ignore[arg-type]
        pytest.param({"namespace": "n1"}, id="dict-filter"),
    ],
)
def test_invalid_filter(log: MetaDB, flt: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        log.list_events(flt)


def test_cursor_pages_through_everything_once(meta: MetaDB) -> None:
    rng = random.Random(11)
    batch = [
        ev(f"op{i // 3}", f"n{rng.randrange(3)}", created_at=at(rng.randrange(20)), rank=i)
        for i in range(200)
    ]
    meta.append_events(batch)
    everything = meta.list_events()
    for flt in (
        EventFilter(limit=7),
        EventFilter(limit=7, namespace="n1"),
        EventFilter(limit=7, namespaces=["n0", "n2"]),
    ):
        pages: list[Event] = []
        cursor = flt
        while page := meta.list_events(cursor):
            assert len(page) <= 7
            pages += page
            cursor = replace(flt, before=page[-1].created_at, before_id=page[-1].id)
        wanted = {flt.namespace} if flt.namespace else set(flt.namespaces)
        assert pages == [e for e in everything if not wanted or e.namespace in wanted]


# -- the filter algebra against a brute-force model ----------------------------------------------

ALPHABET = "aAbB%_ßẞİi "
TEXT = st.text(alphabet=ALPHABET, max_size=4)


@st.composite
def event_batches(draw: st.DrawFn) -> list[list[Event]]:
    event = st.builds(
        Event,
        op_id=st.sampled_from(["o1", "o2", "o3", "o4", "o5"]),
        kind=st.sampled_from([EventKind.RECALL, EventKind.GET, EventKind.PIN]),
        namespace=st.sampled_from(["n1", "n2", "n3"]),
        query=TEXT,
        memory_tier=st.sampled_from([None, *Tier]),
        memory_summary=TEXT,
        created_at=st.integers(0, 5).map(at),
    )
    return draw(st.lists(st.lists(event, min_size=0, max_size=6), min_size=1, max_size=4))


def filters_for(stored: list[Event]) -> st.SearchStrategy[EventFilter]:
    """Filters aimed at ``stored``: texts cut from its rows, cursors at its rows."""
    texts = [e.query for e in stored] + [e.memory_summary for e in stored]
    pieces = st.sampled_from(texts or [""]).flatmap(
        lambda t: st.tuples(st.integers(0, len(t)), st.integers(0, len(t))).map(
            lambda ij: t[min(ij) : max(ij)]
        )
    )
    cursor_rows = st.sampled_from(stored) if stored else st.nothing()
    cursor = st.one_of(
        st.just((None, 0)),
        cursor_rows.map(lambda e: (e.created_at, e.id)),
        cursor_rows.map(lambda e: (e.created_at, 0)),
        st.tuples(st.none(), st.integers(1, len(stored) + 2)),
        st.tuples(st.integers(0, 6).map(at), st.integers(1, len(stored) + 2)),
    )
    return st.builds(
        lambda cur, **kw: EventFilter(before=cur[0], before_id=cur[1], **kw),
        cursor,
        namespace=st.sampled_from(["", "", "", "n1", "n4"]),
        namespaces=st.lists(st.sampled_from(["n1", "n2", "n3"]), max_size=2),
        kinds=st.lists(st.sampled_from([EventKind.RECALL, EventKind.GET]), max_size=2),
        tiers=st.one_of(st.just([]), st.lists(st.sampled_from(list(Tier)), max_size=2)),
        text=st.one_of(
            st.just(""), pieces, pieces.map(str.swapcase), st.text(ALPHABET, max_size=2)
        ),
        since=st.one_of(st.none(), st.none(), st.integers(0, 6).map(at)),
        limit=st.one_of(st.just(0), st.integers(-1, 8)),
    )


def model_list(rows: list[Event], f: EventFilter) -> list[int]:
    """API.md's list_events written the obvious way."""

    def cmp_key(e: Event) -> tuple[datetime, int]:
        assert e.created_at is not None
        return (e.created_at, e.id)

    ops_ok = {e.op_id for e in rows}
    if f.tiers:
        ops_ok &= {e.op_id for e in rows if e.memory_tier in f.tiers}
    if f.text:
        t = f.text.casefold()
        ops_ok &= {
            e.op_id for e in rows if t in e.query.casefold() or t in e.memory_summary.casefold()
        }
    out = []
    for e in rows:
        assert e.created_at is not None
        if f.namespace and e.namespace != f.namespace:
            continue
        if not f.namespace and f.namespaces and e.namespace not in f.namespaces:
            continue
        if f.kinds and e.kind not in f.kinds:
            continue
        if e.op_id not in ops_ok:
            continue
        if f.since is not None and e.created_at < f.since:
            continue
        if f.before is not None and f.before_id > 0 and not cmp_key(e) < (f.before, f.before_id):
            continue
        if f.before is not None and f.before_id == 0 and not e.created_at < f.before:
            continue
        if f.before is None and f.before_id > 0 and not e.id < f.before_id:
            continue
        out.append(e)
    out.sort(key=cmp_key, reverse=True)
    return [e.id for e in (out[: f.limit] if f.limit > 0 else out)]


@settings(max_examples=200)
@given(batches=event_batches(), probe_max=st.sampled_from([0, 1, 10**9]), data=st.data())
def test_list_events_matches_model(
    batches: list[list[Event]], probe_max: int, data: st.DataObject
) -> None:
    db = MetaDB.open(None)
    saved = events_module.PROBE_MAX_OPS
    events_module.PROBE_MAX_OPS = probe_max
    try:
        for batch in batches:
            db.append_events(batch)
        appended = [e for batch in batches for e in batch]
        stored = sorted(db.list_events(), key=lambda e: e.id)
        assert [e.id for e in stored] == list(range(1, len(appended) + 1))
        assert [replace(e, id=0) for e in stored] == appended
        for f in data.draw(st.lists(filters_for(stored), min_size=1, max_size=8)):
            assert ids(db.list_events(f)) == model_list(stored, f), f
    finally:
        events_module.PROBE_MAX_OPS = saved
        db.close()


# -- prune_events ------------------------------------------------------------------------------


@pytest.fixture
def ten(meta: MetaDB) -> MetaDB:
    """Ten events at at(0)..at(9), alternating namespaces, ids 1..10."""
    meta.append_events([ev(f"op{i}", f"n{i % 2}", created_at=at(i)) for i in range(10)])
    return meta


@pytest.mark.parametrize(
    ("older_than", "keep_max", "deleted", "left"),
    [
        pytest.param(None, 0, 0, list(range(10, 0, -1)), id="nothing-asked"),
        pytest.param(at(5), 0, 5, [10, 9, 8, 7, 6], id="older-than-is-strict"),
        pytest.param(at(5).replace(tzinfo=None), 0, 5, [10, 9, 8, 7, 6], id="naive-cutoff"),
        pytest.param(at(-1), 0, 0, list(range(10, 0, -1)), id="cutoff-before-all"),
        pytest.param(at(100), 0, 10, [], id="cutoff-after-all"),
        pytest.param(None, 3, 7, [10, 9, 8], id="keep-max-across-namespaces"),
        pytest.param(None, 10, 0, list(range(10, 0, -1)), id="keep-max-equal"),
        pytest.param(None, 50, 0, list(range(10, 0, -1)), id="keep-max-above"),
        pytest.param(None, -4, 0, list(range(10, 0, -1)), id="keep-max-negative-ignored"),
        pytest.param(at(8), 4, 8, [10, 9], id="age-first-then-count"),
        pytest.param(at(2), 4, 6, [10, 9, 8, 7], id="count-after-age"),
    ],
)
def test_prune_events(
    ten: MetaDB, older_than: datetime | None, keep_max: int, deleted: int, left: list[int]
) -> None:
    assert ten.prune_events(older_than, keep_max) == deleted
    assert ids(ten.list_events()) == left


def test_prune_keep_max_breaks_time_ties_by_id(meta: MetaDB) -> None:
    meta.append_events([ev("op", created_at=T0, rank=i) for i in range(6)])
    assert meta.prune_events(keep_max=4) == 2
    assert [e.rank for e in meta.list_events()] == [5, 4, 3, 2]


def test_prune_rejects_bad_arguments(ten: MetaDB) -> None:
    with pytest.raises(InvalidArgumentError):
        ten.prune_events(older_than=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        ten.prune_events(keep_max="3")  # type: ignore[arg-type]
    assert len(ten.list_events()) == 10


def test_ids_are_never_reused_after_pruning(open_meta: Any) -> None:
    db = open_meta()
    db.append_events([ev("a", rank=i) for i in range(5)])
    top = max(ids(db.list_events()))
    assert db.prune_events(keep_max=1) == 4
    assert db.prune_events(older_than=datetime.now(UTC) + timedelta(days=1)) == 1
    assert db.list_events() == []
    db.compact()
    db.append_events([ev("b")])
    [row] = db.list_events()
    assert row.id == top + 1


def test_ids_are_never_reused_after_reopen(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path)
    db.append_events([ev("a") for _ in range(3)])
    db.prune_events(keep_max=1)
    db.prune_events(older_than=datetime.now(UTC) + timedelta(days=1))
    db.close()
    db = MetaDB.open(tmp_path)
    try:
        db.append_events([ev("b")])
        assert ids(db.list_events()) == [4]
    finally:
        db.close()


def test_cursor_survives_pruning(meta: MetaDB) -> None:
    meta.append_events([ev(f"op{i}", created_at=at(i)) for i in range(10)])
    page = meta.list_events(EventFilter(limit=3))
    assert ids(page) == [10, 9, 8]
    meta.prune_events(older_than=at(3))  # ids 1..3 go
    meta.append_events([ev("new", created_at=at(20))])  # newer than the cursor: never seen
    rest = meta.list_events(EventFilter(before=page[-1].created_at, before_id=page[-1].id))
    assert ids(rest) == [7, 6, 5, 4]


# -- import_events (private: ``memini import`` restores exported ids with it) -------------------


def test_import_keeps_ids_and_created_at_and_appends_continue_above(meta: MetaDB) -> None:
    meta.import_events([ev("a", id=7, created_at=at(1)), ev("b", id=3, created_at=at(2))])
    assert [(e.id, e.op_id, e.created_at) for e in meta.list_events()] == [
        (3, "b", at(2)),
        (7, "a", at(1)),
    ]
    assert meta.stats()["next_event_id"] == 8
    meta.append_events([ev("c"), ev("d")])
    assert sorted(ids(meta.list_events())) == [3, 7, 8, 9]


def test_import_created_at_none_is_now(meta: MetaDB) -> None:
    before = datetime.now(UTC)
    meta.import_events([ev("a", id=2)])
    [got] = meta.list_events()
    assert got.id == 2 and got.created_at is not None
    assert before - timedelta(milliseconds=1) <= got.created_at <= datetime.now(UTC)


def test_import_ids_are_never_reused_after_reopen(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path)
    db.import_events([ev("a", id=5)])
    db.prune_events(keep_max=0, older_than=datetime.now(UTC) + timedelta(days=1))
    db.compact()
    db.close()
    db = MetaDB.open(tmp_path)
    try:
        assert db.stats()["next_event_id"] == 6
        db.append_events([ev("b")])
        assert ids(db.list_events()) == [6]
    finally:
        db.close()


@pytest.mark.parametrize(
    "taken",
    [
        pytest.param(2, id="existing-id"),
        pytest.param(1, id="pruned-id"),
        pytest.param(3, id="id-of-the-last-append"),
    ],
)
def test_import_of_a_taken_id_conflicts_and_writes_nothing(meta: MetaDB, taken: int) -> None:
    meta.append_events([ev("a", created_at=at(0)), ev("b", created_at=at(5)), ev("c")])
    meta.prune_events(older_than=at(1))  # id 1 goes; it stays handed out
    before = meta.list_events()
    with pytest.raises(ConflictError, match=f"event id {taken} is taken"):
        meta.import_events([ev("new", id=10), ev("x", id=taken)])
    assert meta.list_events() == before
    assert meta.stats()["next_event_id"] == 4


def test_import_of_one_id_twice_conflicts(meta: MetaDB) -> None:
    with pytest.raises(ConflictError, match=r"also the id of events\[0\]"):
        meta.import_events([ev("a", id=4), ev("b", id=4)])
    assert meta.list_events() == []


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(ev("a", id=0), id="id-zero"),
        pytest.param(ev("a", id=-1), id="negative-id"),
        pytest.param(ev("a", id=2**63), id="id-beyond-64-bits"),
        pytest.param(ev("a", id=1.0), id="float-id"),
        pytest.param(ev("a", id=1, kind="nope"), id="unknown-kind"),
        pytest.param(ev("a", id=1, detail={"x": math.nan}), id="nan-in-detail"),
    ],
)
def test_import_rejects_bad_events_and_writes_nothing(meta: MetaDB, bad: Event) -> None:
    with pytest.raises(InvalidArgumentError):
        meta.import_events([ev("ok", id=9), bad])
    assert meta.list_events() == []
    assert meta.stats()["next_event_id"] == 1


def test_import_next_id_advances_the_sequence_only_forward(meta: MetaDB) -> None:
    meta.import_events([], next_id=50)
    assert meta.stats()["next_event_id"] == 50
    meta.import_events([ev("a", id=60)], next_id=10)  # lower: no effect
    assert meta.stats()["next_event_id"] == 61
    meta.append_events([ev("b")])
    assert sorted(ids(meta.list_events())) == [60, 61]
    with pytest.raises(InvalidArgumentError):
        meta.import_events([], next_id=-1)


def test_import_into_a_fresh_store_then_append(meta: MetaDB) -> None:
    assert meta.stats()["next_event_id"] == 1
    meta.import_events([ev("a", id=1)])
    meta.append_events([ev("b")])
    assert sorted(ids(meta.list_events())) == [1, 2]


# -- lifecycle and threads ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "args"),
    [
        pytest.param("append_events", ([ev("op")],), id="append_events"),
        pytest.param("append_events", ([],), id="append_events-empty"),
        pytest.param("list_events", (), id="list_events"),
        pytest.param("prune_events", (), id="prune_events"),
        pytest.param("import_events", ([ev("op", id=1)],), id="import_events"),
    ],
)
def test_closed_raises(meta: MetaDB, method: str, args: tuple[Any, ...]) -> None:
    meta.close()
    with pytest.raises(StoreClosedError):
        getattr(meta, method)(*args)


def test_threads_append_events_and_put_links_concurrently(meta: MetaDB) -> None:
    """Each batch keeps contiguous ids in list order while 8 writers and 2 readers race."""
    n_writers, n_batches = 8, 40
    errors: list[BaseException] = []
    done = threading.Event()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for b in range(n_batches):
                size = rng.randint(1, 12)
                op = f"w{seed}-b{b}"
                meta.append_events(
                    [ev(op, f"n{seed % 3}", rank=i, query=f"q{seed}") for i in range(size)]
                )
                meta.put_link(NamespaceLink(f"n{seed}", f"n{b % 5}", note=op))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not done.is_set():
                for e in meta.list_events(EventFilter(text="q1", limit=50)):
                    assert e.query == "q1"
                meta.list_all_links()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(n_writers)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert errors == []

    rows = meta.list_events()
    assert len({e.id for e in rows}) == len(rows)
    by_op: dict[str, list[Event]] = defaultdict(list)
    for e in rows:
        by_op[e.op_id].append(e)
    assert len(by_op) == n_writers * n_batches
    for op_rows in by_op.values():
        op_rows.sort(key=lambda e: e.rank)
        first = op_rows[0].id
        assert [e.id for e in op_rows] == list(range(first, first + len(op_rows)))
    assert len(meta.list_all_links()) == n_writers * 5


def test_search_details_of_equal_but_different_k_stay_apart() -> None:
    """A search's detail JSON keeps ``k`` as the caller typed it: ``2`` and ``2.0`` differ."""
    from memini.server._events import search_events

    texts = [search_events("vector_search", "a", k, ["ns"], "", [[]]).rows[0][10] for k in (2, 2.0)]
    assert texts == [
        '{"method":"vector_search","caller":"a","k":2,"namespaces":["ns"]}',
        '{"method":"vector_search","caller":"a","k":2.0,"namespaces":["ns"]}',
    ]


def _reference_search_rows(
    op: str,
    method: str,
    caller: str,
    k: object,
    searched: list[str],
    query: str,
    now: int,
    results: list[list[tuple[str, str, str, str, float]]],
) -> tuple[list[events_module.EventRow], list[tuple[str, str, str | None, int]]]:
    """A search's rows as the spec says (API.md section 8), made with `event_row`: one per
    hit under its namespace, or one per namespace searched when a query found nothing."""
    from memini._values import metadata_to_json

    rows = []
    for i, hits in enumerate(results):
        detail: dict[str, Any] = {"method": method, "caller": caller, "k": k}
        detail["namespaces"] = searched
        if method == "vector_search_many":
            detail["query_index"] = i
        text = metadata_to_json(detail)
        if not hits:
            for ns in searched:
                rows.append(
                    events_module.event_row(
                        op, "recall", ns, "", "", "", None, "", 0, None, text, now
                    )
                )
        for rank, (id, ns, tier, summary, score) in enumerate(hits):
            rows.append(
                events_module.event_row(
                    op, "recall", ns, "", id, ns, tier, summary, rank, score, text, now
                )
            )
    queries = [(op, query, events_module.fold(query), now)] if query else []
    return rows, queries


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)
_HIT = st.tuples(
    st.text(min_size=1, max_size=30),
    _TEXT,
    st.sampled_from([t.value for t in Tier]),
    _TEXT,
    st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=300, deadline=None)
@given(
    method=st.sampled_from(["vector_search", "keyword_search", "recall", "vector_search_many"]),
    caller=_TEXT,
    k=st.one_of(st.integers(1, 1000), st.floats(1, 1000)),
    searched=st.lists(_TEXT, min_size=1, max_size=4),
    query=_TEXT,
    results=st.lists(st.lists(_HIT, max_size=12), min_size=1, max_size=3),
)
def test_the_core_makes_a_searchs_rows_as_event_row_does(
    method: str,
    caller: str,
    k: object,
    searched: list[str],
    query: str,
    results: list[list[tuple[str, str, str, str, float]]],
) -> None:
    """The rows the core makes of a search (`memini._core.search_event_rows`, also the
    front's) are the tuples `event_row` makes of the same values, byte for byte: detail
    JSON (unicode, control characters, quotes), folds (``ß``, Turkish ``İ``: Python's
    casefold beyond ASCII), summaries, scores; one row per namespace searched when a query
    found nothing."""
    from memini.server._events import search_events

    if method != "vector_search_many":
        results = results[:1]
    call = search_events(method, caller, k, searched, query, results, now=1_234_567)
    want = _reference_search_rows(call.op, method, caller, k, searched, query, 1_234_567, results)
    assert (call.rows, call.queries) == want


@pytest.mark.parametrize("text", ["Straße", "İstanbul", "ΣΑΣ", "ﬁ", "ASCII Only", "x\x00Y\n", ""])
def test_the_core_folds_as_python_casefolds(text: str) -> None:
    """The fold columns of the core's rows are `str.casefold` (NULL when it changes
    nothing), beyond ASCII too."""
    from memini.server._events import search_events

    call = search_events("recall", "c", 1, ["ns"], text, [[("id", "ns", "semantic", text, 1.0)]])
    assert call.rows[0][13] == events_module.fold(text)
    assert call.queries == ([(call.op, text, events_module.fold(text), call.now)] if text else [])


@pytest.mark.parametrize("n", [63, 64, 65, 200])
def test_a_batch_of_many_rows_keeps_its_order_and_values(meta: MetaDB, n: int) -> None:
    """A batch written many rows per statement (64) and the rest one by one gets contiguous
    ids in list order, each row its own values, each query once."""
    events = [
        ev(f"op{i % 7}", f"ns{i % 3}", rank=i, score=i / 3, memory_summary=f"S{i}")
        for i in range(n)
    ]
    rows = events_module.prepare_events(events)
    queries = [(f"op{i}", f"Q{i}", f"q{i}", 5) for i in range(n)]
    meta.append_event_rows(rows, queries)
    got = sorted(meta.list_events(), key=lambda e: e.id)
    assert [e.id for e in got] == list(range(got[0].id, got[0].id + n))
    assert [(e.op_id, e.namespace, e.rank, e.score, e.memory_summary) for e in got] == [
        (e.op_id, e.namespace, e.rank, e.score, e.memory_summary) for e in events
    ]
    assert {e.query for e in got} == {f"Q{e.op_id[2:]}" for e in got}
    assert {e.op_id for e in meta.list_events(EventFilter(text="q5"))} == {"op5"}


def _stored(meta: MetaDB) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every stored value of the event tables with its SQLite type, a REAL as `float.hex`
    (bit for bit, where ``==`` would take ``-0.0`` for ``0.0``)."""

    def exact(v: object) -> object:
        return v.hex() if isinstance(v, float) else v

    with meta._locked() as conn:
        events = conn.execute("SELECT *, typeof(score), typeof(rank) FROM events ORDER BY id")
        queries = conn.execute("SELECT *, typeof(created_at) FROM event_queries ORDER BY op_id")
        return (
            [tuple(map(exact, r)) for r in events.fetchall()],
            [tuple(map(exact, r)) for r in queries.fetchall()],
        )


def _both_ways(
    rows: list[events_module.EventRow], call: tuple[Any, ...], packed: bool = True
) -> tuple[MetaDB, MetaDB, events_module.PackedRows | None]:
    """A search's rows stored after ``rows`` as tuples in one store and as the core packs
    them (JSON, expanded by SQLite) in another, each in one batch."""
    from memini._core import search_event_rows

    tuples, queries, none = search_event_rows(*call, events_module.fold)
    assert none is None
    _, _, pack = search_event_rows(*call, events_module.fold, packed)
    old, new = MetaDB.open(None), MetaDB.open(None)
    assert new.packs_events
    old.append_event_rows(rows + tuples, queries)
    if pack is None:  # carried as tuples
        new.append_event_rows(rows + tuples, queries)
    else:
        new.append_event_rows(rows, [], pack)
    return old, new, pack


_NO_NUL_CHAR = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
_NO_NUL = st.text(_NO_NUL_CHAR, max_size=300)
_F32_HIT = st.tuples(  # what a served search's hits are like: f32 scores, |score| < 2^63
    st.text(_NO_NUL_CHAR, min_size=1, max_size=30),
    _NO_NUL,
    st.sampled_from([t.value for t in Tier]),
    _NO_NUL,
    st.floats(-(2.0**63), 2.0**63, exclude_min=True, exclude_max=True, width=32),
)


@settings(max_examples=300, deadline=None)
@given(
    packable=st.booleans(),
    method=st.sampled_from(["vector_search", "recall", "vector_search_many"]),
    before=st.integers(0, 3),
    now=st.integers(-(2**63), 2**63 - 1),
    data=st.data(),
)
def test_packed_rows_are_stored_exactly_as_their_tuples(
    packable: bool, method: str, before: int, now: int, data: st.DataObject
) -> None:
    """A search's rows packed by the core as JSON and expanded by SQLite (`PackedRows`, the
    served path) are stored value for value and type for type as their tuples bound one by
    one: texts with unicode, control characters, quotes and backslashes, detail JSON kept
    as its text, scores bit for bit (subnormal, negative, huge, -0.0; None for a query
    that found nothing), any created_at; after rows of the same batch given as tuples,
    with contiguous ids. Every batch without a NUL whose scores are f32 (< 2^63) travels
    packed; a value JSON would not carry exactly (NUL, a score with no exact form) sends
    the batch as tuples."""
    from memini.types import new_id

    text, hit = (_NO_NUL, _F32_HIT) if packable else (_TEXT, _HIT)
    caller = data.draw(text)
    searched = data.draw(st.lists(text, min_size=1, max_size=3))
    query = data.draw(text)
    many = 3 if method == "vector_search_many" else 1
    results = data.draw(st.lists(st.lists(hit, max_size=12), min_size=1, max_size=many))
    rows = [
        events_module.event_row("op0", "remember", "ns", "", f"m{i}", "ns", None, "", i, None,
                                "{}", 5)
        for i in range(before)
    ]  # fmt: skip
    call = (new_id(), method, caller, "10", searched, query, now, results)
    old, new, pack = _both_ways(rows, call)
    try:
        assert _stored(new) == _stored(old)
        if pack is None:
            assert not packable
            texts = [caller, query, *searched, *(t for hs in results for h in hs for t in h[:4])]
            scores = [h[4] for hs in results for h in hs]
            assert any("\x00" in t for t in texts) or any(
                s != 0 and (abs(s) < 2**-133 or abs(s) >= 2**63) for s in scores
            )
        else:
            assert pack[2] == len(_stored(new)[0]) - before
    finally:
        old.close()
        new.close()


@pytest.mark.parametrize(
    ("summary", "score", "packs"),
    [
        ("plain", 0.8125, True),
        ('{"a": [1, 2.50, "\\u00e9"]}\t\\', -3.5e-15, True),
        ("émoji 😀 ΣΑΣ Straße", float.fromhex("0x1.fffffffffffffp-133"), True),
        ("f32", float.fromhex("0x1p-149"), True),  # every f32 travels: a search's scores
        ("a\x00b", 0.5, False),  # SQLite < 3.45 cuts a JSON string at \u0000
        ("tiny", 5e-324, False),  # 2^-1074: more than three shifts of 62
        ("huge", 2.0**63, False),
    ],
)
def test_a_value_json_cannot_carry_sends_the_batch_as_tuples(
    summary: str, score: float, packs: bool
) -> None:
    """Which values travel packed and which send the batch as tuples; stored alike."""
    hits = [[("id", "ns", "semantic", summary, score)]]
    call = ("op", "recall", "c", "10", ["ns"], summary, 7, hits)
    old, new, pack = _both_ways([], call)
    try:
        assert (pack is not None) == packs
        assert _stored(new) == _stored(old)
        assert new.list_events()[0].memory_summary == summary
    finally:
        old.close()
        new.close()


def test_packed_rows_take_the_next_ids_in_order() -> None:
    """Packed rows take the ids after every id handed out, in the order they were packed:
    after rows pruned (an id is never reused), after an import that moved the sequence
    (``next_id``), and after the rows of the same batch given as tuples."""
    from memini._core import search_event_rows

    hits = [[(f"m{i}", "ns", "semantic", "s", 0.5) for i in range(3)]]
    call = ("op", "recall", "c", "10", ["ns"], "", 7, hits)
    _, _, pack = search_event_rows(*call, events_module.fold, True)
    assert pack is not None
    meta = MetaDB.open(None)
    try:
        meta.append_event_rows([], [], pack)  # ids 1-3
        assert meta.prune_events(older_than=datetime.now(UTC)) == 3
        meta.append_event_rows([], [], pack)  # ids 4-6
        meta.import_events([], next_id=100)
        row = events_module.event_row("op0", "remember", "ns", "", "m", "ns", None, "", 0, None,
                                      "{}", 5)  # fmt: skip
        meta.append_event_rows([row], [], pack)  # ids 100, 101-103
        got = sorted((e.id, e.op_id, e.memory_id) for e in meta.list_events())
        assert got == [
            (4, "op", "m0"), (5, "op", "m1"), (6, "op", "m2"),
            (100, "op0", "m"), (101, "op", "m0"), (102, "op", "m1"), (103, "op", "m2"),
        ]  # fmt: skip
        assert meta.stats()["next_event_id"] == 104
    finally:
        meta.close()
