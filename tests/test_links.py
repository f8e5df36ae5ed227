"""Namespace links (API.md section 5): put/delete/list, rename_link_endpoints, namespace delete."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memini._sqlite import MetaDB
from memini.errors import InvalidArgumentError, StoreClosedError
from memini.types import NamespaceLink, Tier
from meta_helpers import T0, at

pytest_plugins = ["conftest_meta"]


def keyed(links: list[NamespaceLink]) -> dict[tuple[str, str], NamespaceLink]:
    """Links by (src, dst)."""
    return {(link.src, link.dst): link for link in links}


# -- put / list round trip ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tiers", "expected"),
    [
        pytest.param(None, None, id="none-stays-none"),
        pytest.param([], [], id="empty-list-stays-empty"),
        pytest.param([Tier.SEMANTIC], [Tier.SEMANTIC], id="one-tier"),
        pytest.param(
            [Tier.PROCEDURAL, Tier.WORKING, Tier.EPISODIC],
            [Tier.PROCEDURAL, Tier.WORKING, Tier.EPISODIC],
            id="order-kept",
        ),
        pytest.param(["working", "semantic"], [Tier.WORKING, Tier.SEMANTIC], id="string-values"),
        pytest.param(("episodic",), [Tier.EPISODIC], id="tuple-accepted"),
        pytest.param(
            [Tier.SEMANTIC, Tier.SEMANTIC], [Tier.SEMANTIC, Tier.SEMANTIC], id="duplicates-kept"
        ),
    ],
)
def test_tiers_round_trip_as_given(meta: MetaDB, tiers: Any, expected: Any) -> None:
    meta.put_link(NamespaceLink("a", "b", tiers=tiers, note="n", created_at=T0))
    [link] = meta.list_links("a")
    assert link == NamespaceLink("a", "b", tiers=expected, note="n", created_at=T0)
    assert link.tiers is None or all(type(t) is Tier for t in link.tiers)


@pytest.mark.parametrize(
    ("given_at", "expected"),
    [
        pytest.param(T0, T0, id="aware-utc"),
        pytest.param(T0.replace(tzinfo=None), T0, id="naive-is-utc"),
        pytest.param(T0.astimezone(timezone(timedelta(hours=-5))), T0, id="other-offset-converted"),
        pytest.param(
            datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=UTC),
            datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=UTC),
            id="before-epoch-microseconds",
        ),
    ],
)
def test_created_at_round_trips_as_aware_utc(
    meta: MetaDB, given_at: datetime, expected: datetime
) -> None:
    meta.put_link(NamespaceLink("a", "b", created_at=given_at))
    [link] = meta.list_all_links()
    assert link.created_at == expected
    assert link.created_at is not None and link.created_at.tzinfo is UTC


def test_created_at_none_is_stamped_now(meta: MetaDB) -> None:
    before = datetime.now(UTC)
    meta.put_link(NamespaceLink("a", "b"))
    after = datetime.now(UTC)
    [link] = meta.list_all_links()
    assert link.created_at is not None
    assert before - timedelta(milliseconds=1) <= link.created_at <= after


def test_put_overwrites_tiers_note_and_created_at(meta: MetaDB) -> None:
    meta.put_link(NamespaceLink("a", "b", tiers=[Tier.WORKING], note="old", created_at=T0))
    meta.put_link(NamespaceLink("a", "b", tiers=None, note="new", created_at=at(60)))
    assert meta.list_all_links() == [NamespaceLink("a", "b", None, "new", at(60))]
    meta.put_link(NamespaceLink("a", "b", tiers=[Tier.SEMANTIC], note="", created_at=at(-60)))
    assert meta.list_all_links() == [NamespaceLink("a", "b", [Tier.SEMANTIC], "", at(-60))]


def test_put_with_created_at_none_restamps(meta: MetaDB) -> None:
    meta.put_link(NamespaceLink("a", "b", created_at=T0))
    meta.put_link(NamespaceLink("a", "b"))
    [link] = meta.list_all_links()
    assert link.created_at is not None and link.created_at > T0


def test_put_does_not_modify_the_argument(meta: MetaDB) -> None:
    link = NamespaceLink("a", "b", tiers=["semantic"])  # type: ignore[list-item]
    meta.put_link(link)
    assert link == NamespaceLink("a", "b", tiers=["semantic"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "link",
    [
        pytest.param(NamespaceLink("a", "b", tiers=["nope"]), id="unknown-tier"),  # type: ignore[list-item]
        pytest.param(NamespaceLink("a", "b", tiers="semantic"), id="bare-string-tiers"),  # type: ignore[arg-type]
        pytest.param(NamespaceLink("a", "b", tiers=[1]), id="int-tier"),  # type: ignore[list-item]
        pytest.param(NamespaceLink("", "b"), id="empty-src"),
        pytest.param(NamespaceLink("a", ""), id="empty-dst"),
        pytest.param(NamespaceLink(1, "b"), id="int-src"),  # type: ignore[arg-type]
        pytest.param(NamespaceLink("a", "b", note=None), id="none-note"),  # type: ignore[arg-type]
        pytest.param(NamespaceLink("a", "b", created_at="2025"), id="str-created-at"),  # type: ignore[arg-type]
        pytest.param(NamespaceLink("a", "b", note="\udc80"), id="lone-surrogate"),
        pytest.param(("a", "b"), id="not-a-link"),
    ],
)
def test_invalid_link_is_rejected_and_nothing_written(meta: MetaDB, link: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        meta.put_link(link)
    assert meta.list_all_links() == []


def test_text_round_trips(meta: MetaDB) -> None:
    meta.put_link(NamespaceLink("ns/ü", "日本", note="line\nbreak\x00nul 🎉", created_at=T0))
    assert meta.list_links("ns/ü") == [
        NamespaceLink("ns/ü", "日本", None, "line\nbreak\x00nul 🎉", T0)
    ]


# -- delete / list -----------------------------------------------------------------------------


def test_delete_link_reports_whether_one_existed(meta: MetaDB) -> None:
    meta.put_link(NamespaceLink("a", "b"))
    meta.put_link(NamespaceLink("b", "a"))
    assert meta.delete_link("a", "b") is True
    assert meta.delete_link("a", "b") is False
    assert meta.delete_link("x", "y") is False
    assert [(x.src, x.dst) for x in meta.list_all_links()] == [("b", "a")]


def test_list_links_is_by_dst_and_only_from_src(meta: MetaDB) -> None:
    rng = random.Random(7)
    pairs = [(s, d) for s in "abc" for d in "abcde" if s != d]
    rng.shuffle(pairs)
    for s, d in pairs:
        meta.put_link(NamespaceLink(s, d, created_at=T0))
    assert [x.dst for x in meta.list_links("b")] == ["a", "c", "d", "e"]
    assert all(x.src == "b" for x in meta.list_links("b"))
    assert meta.list_links("zzz") == []
    assert [(x.src, x.dst) for x in meta.list_all_links()] == sorted(pairs)


def test_list_all_links_orders_by_code_point(meta: MetaDB) -> None:
    names = ["b", "B", "a", "ä", "Z", "aa", "a b", "😀", "\u00e9"]
    for n in names:
        meta.put_link(NamespaceLink(n, "x"))
        meta.put_link(NamespaceLink("x", n))
    assert [x.src for x in meta.list_all_links() if x.dst == "x"] == sorted(names)
    assert [x.dst for x in meta.list_links("x")] == sorted(names)


# -- rename_link_endpoints -----------------------------------------------------------------------

Spec = tuple[str, str, str]  # (src, dst, note)


@pytest.mark.parametrize(
    ("before", "rename", "after"),
    [
        pytest.param([("a", "x", "1")], ("a", "b"), [("b", "x", "1")], id="src-end"),
        pytest.param([("x", "a", "1")], ("a", "b"), [("x", "b", "1")], id="dst-end"),
        pytest.param([("a", "a", "1")], ("a", "b"), [("b", "b", "1")], id="self-loop"),
        pytest.param(
            [("a", "x", "1"), ("x", "y", "2")],
            ("a", "b"),
            [("b", "x", "1"), ("x", "y", "2")],
            id="others-untouched",
        ),
        pytest.param(
            [("a", "x", "renamed"), ("b", "x", "existing")],
            ("a", "b"),
            [("b", "x", "existing")],
            id="existing-wins-at-src",
        ),
        pytest.param(
            [("x", "a", "renamed"), ("x", "b", "existing")],
            ("a", "b"),
            [("x", "b", "existing")],
            id="existing-wins-at-dst",
        ),
        pytest.param(
            [("a", "b", "ab"), ("b", "a", "ba")],
            ("a", "b"),
            [("b", "b", "ab")],
            id="reciprocal-pair-collapses-to-first",
        ),
        pytest.param(
            [("b", "a", "ba"), ("a", "b", "ab")],
            ("b", "a"),
            [("a", "a", "ab")],
            id="reciprocal-pair-first-is-by-src-dst-not-insertion",
        ),
        pytest.param(
            [("a", "a", "aa"), ("a", "b", "ab"), ("b", "a", "ba")],
            ("a", "b"),
            [("b", "b", "aa")],
            id="self-loop-first",
        ),
        pytest.param(
            [("a", "b", "ab"), ("b", "a", "ba"), ("b", "b", "existing")],
            ("a", "b"),
            [("b", "b", "existing")],
            id="existing-self-loop-beats-reciprocal-pair",
        ),
        pytest.param([("a", "x", "1")], ("a", "a"), [("a", "x", "1")], id="same-name-no-op"),
        pytest.param([("a", "x", "1")], ("q", "b"), [("a", "x", "1")], id="absent-namespace"),
        pytest.param([], ("a", "b"), [], id="empty"),
        pytest.param(
            [("a", "c", "1"), ("c", "a", "2"), ("a", "d", "3")],
            ("a", "b"),
            [("b", "c", "1"), ("b", "d", "3"), ("c", "b", "2")],
            id="several",
        ),
    ],
)
def test_rename_link_endpoints(
    meta: MetaDB, before: list[Spec], rename: tuple[str, str], after: list[Spec]
) -> None:
    for i, (s, d, note) in enumerate(before):
        meta.put_link(NamespaceLink(s, d, [Tier.WORKING], note, at(i)))
    meta.rename_link_endpoints(*rename)
    assert [(x.src, x.dst, x.note) for x in meta.list_all_links()] == after


def test_rename_keeps_tiers_note_and_created_at(meta: MetaDB) -> None:
    meta.put_link(NamespaceLink("a", "x", [Tier.PROCEDURAL, Tier.WORKING], "keep", T0))
    meta.put_link(NamespaceLink("y", "a", None, "also", at(5)))
    meta.rename_link_endpoints("a", "b")
    assert meta.list_all_links() == [
        NamespaceLink("b", "x", [Tier.PROCEDURAL, Tier.WORKING], "keep", T0),
        NamespaceLink("y", "b", None, "also", at(5)),
    ]


@pytest.mark.parametrize(
    ("from_ns", "to_ns"),
    [
        pytest.param("", "b", id="empty-from"),
        pytest.param("a", "", id="empty-to"),
        pytest.param(None, "b", id="none-from"),
    ],
)
def test_rename_rejects_bad_names(meta: MetaDB, from_ns: Any, to_ns: Any) -> None:
    meta.put_link(NamespaceLink("a", "x"))
    with pytest.raises(InvalidArgumentError):
        meta.rename_link_endpoints(from_ns, to_ns)
    assert [(x.src, x.dst) for x in meta.list_all_links()] == [("a", "x")]


def model_rename(
    links: dict[tuple[str, str], str], from_ns: str, to_ns: str
) -> dict[tuple[str, str], str]:
    """The reference semantics of API.md, written the obvious way."""
    if from_ns == to_ns:
        return dict(links)
    out = {k: v for k, v in links.items() if from_ns not in k}
    for (s, d), note in sorted(links.items()):
        if from_ns in (s, d):
            key = (to_ns if s == from_ns else s, to_ns if d == from_ns else d)
            out.setdefault(key, note)
    return out


NS = st.sampled_from(["a", "b", "c", "d"])


@given(
    links=st.dictionaries(st.tuples(NS, NS), st.text(max_size=3), max_size=12),
    from_ns=NS,
    to_ns=NS,
)
def test_rename_matches_model(links: dict[tuple[str, str], str], from_ns: str, to_ns: str) -> None:
    db = MetaDB.open(None)
    try:
        for (s, d), note in links.items():
            db.put_link(NamespaceLink(s, d, note=note, created_at=T0))
        db.rename_link_endpoints(from_ns, to_ns)
        got = {(x.src, x.dst): x.note for x in db.list_all_links()}
        assert got == model_rename(links, from_ns, to_ns)
    finally:
        db.close()


# -- delete_namespace support ------------------------------------------------------------------


def test_delete_links_of_namespace_takes_both_ends_and_is_retry_safe(meta: MetaDB) -> None:
    for s, d in [("a", "b"), ("b", "a"), ("a", "a"), ("b", "c"), ("c", "b"), ("c", "d")]:
        meta.put_link(NamespaceLink(s, d))
    assert meta.delete_links_of_namespace("b") == 4
    assert [(x.src, x.dst) for x in meta.list_all_links()] == [("a", "a"), ("c", "d")]
    assert meta.delete_links_of_namespace("b") == 0  # a retry after a crash is harmless
    assert meta.delete_links_of_namespace("nobody") == 0


# -- persistence, closing, threads -------------------------------------------------------------


def test_links_survive_reopen(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path)
    db.put_link(NamespaceLink("a", "b", [Tier.EPISODIC], "n", T0))
    db.close()
    db = MetaDB.open(tmp_path)
    try:
        assert db.list_all_links() == [NamespaceLink("a", "b", [Tier.EPISODIC], "n", T0)]
    finally:
        db.close()


@pytest.mark.parametrize(
    ("method", "args"),
    [
        pytest.param("put_link", (NamespaceLink("a", "b"),), id="put_link"),
        pytest.param("delete_link", ("a", "b"), id="delete_link"),
        pytest.param("list_links", ("a",), id="list_links"),
        pytest.param("list_all_links", (), id="list_all_links"),
        pytest.param("rename_link_endpoints", ("a", "b"), id="rename_link_endpoints"),
        pytest.param("delete_links_of_namespace", ("a",), id="delete_links_of_namespace"),
    ],
)
def test_closed_raises(meta: MetaDB, method: str, args: tuple[Any, ...]) -> None:
    meta.close()
    meta.close()  # idempotent
    with pytest.raises(StoreClosedError):
        getattr(meta, method)(*args)


def test_concurrent_puts_and_renames(meta: MetaDB) -> None:
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for i in range(150):
                meta.put_link(NamespaceLink(f"t{seed}", f"d{rng.randrange(20)}", note=str(i)))
                if i % 25 == 0:
                    meta.rename_link_endpoints("shared", f"shared{seed}")
                    meta.put_link(NamespaceLink("shared", f"t{seed}"))
                meta.list_links(f"t{seed}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    links = meta.list_all_links()
    assert len(keyed(links)) == len(links)
    for seed in range(8):
        assert {x.src for x in meta.list_links(f"t{seed}")} == {f"t{seed}"}
        assert 1 <= len(meta.list_links(f"t{seed}")) <= 20
