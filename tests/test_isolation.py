"""Namespace isolation and secret hygiene.

No read, write, search hit, count or error message in namespace ``bob`` reveals a row of
namespace ``alice`` (API.md: ``get`` of another namespace's id is ``NotFoundError``; a write of
another namespace's id is ``NotFoundError``/``ConflictError`` with nothing written). API-key
secrets never reach the store directory or the logs: only their hash is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memini import (
    APIKey,
    ConflictError,
    Filter,
    MeminiError,
    Memory,
    NotFoundError,
    Store,
    fingerprint,
    hash_api_key,
)

DIMS = 4
T0 = datetime(2024, 1, 1, tzinfo=UTC)
ALICE = "alice-tenant"
BOB = "bob-tenant"
SECRET_WORD = "zanzibarsecret"  # only in alice's content
EVERYTHING = Filter(include_expired=True, include_superseded=True)


def vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)


def alice_rows() -> list[Memory]:
    return [
        Memory(
            id=f"a{i}",
            namespace=ALICE,
            content=f"{SECRET_WORD} private fact {i}",
            summary="alicesummary",
            tags=["private"],
            metadata={"owner": "alice"},
            expires_at=T0 + timedelta(days=1) if i == 2 else None,
            created_at=T0,
            embedding=vec(i),
        )
        for i in range(3)
    ]


@pytest.fixture
def two(store: Store) -> Store:
    store.upsert_many(alice_rows())
    store.upsert(Memory(id="b0", namespace=BOB, content="bob public fact", embedding=vec(50)))
    return store


def alice_state(s: Store) -> list[tuple[Memory, bytes]]:
    return [
        (m, s.get_embedding(ALICE, m.id).tobytes())  # type: ignore[union-attr]
        for m in s.list(ALICE, EVERYTHING)
    ]


def assert_no_leak(err: BaseException) -> None:
    msg = str(err)
    for secret in (ALICE, SECRET_WORD, "alicesummary", "private fact"):
        assert secret not in msg, f"error message leaks {secret!r}: {msg!r}"


CROSS_NS_MISSING: list[Any] = [
    pytest.param(lambda s: s.get(BOB, "a0"), id="get"),
    pytest.param(lambda s: s.get_embedding(BOB, "a0"), id="get-embedding"),
    pytest.param(lambda s: s.update(BOB, "a0", content="stolen"), id="update"),
    pytest.param(lambda s: s.delete(BOB, "a0"), id="delete"),
    pytest.param(lambda s: s.set_superseded(BOB, "a0", "b0"), id="set-superseded"),
    pytest.param(lambda s: s.restore(BOB, "a0"), id="restore"),
    pytest.param(lambda s: s.retier(BOB, "a0", "working", None), id="retier"),
    pytest.param(lambda s: s.set_confidence(BOB, "a0", 0.5, T0), id="set-confidence"),
    pytest.param(lambda s: s.mark_contradicted(BOB, "a0", "b0", 0.1, T0), id="mark-contradicted"),
    pytest.param(
        lambda s: s.delete_if_expired_before(BOB, "a2", T0 + timedelta(days=9)),
        id="delete-if-expired-before",
    ),
    pytest.param(
        lambda s: s.get_by_fingerprint(
            BOB, "semantic", fingerprint(f"{SECRET_WORD} private fact 0"), T0
        ),
        id="get-by-fingerprint",
    ),
]


@pytest.mark.parametrize("call", CROSS_NS_MISSING)
def test_other_namespace_id_is_not_found(two: Store, call: Callable[[Store], Any]) -> None:
    before = alice_state(two)
    with pytest.raises(NotFoundError) as e:
        call(two)
    assert_no_leak(e.value)
    assert alice_state(two) == before


def test_upsert_of_other_namespace_id_conflicts_without_leaking(two: Store) -> None:
    before = alice_state(two)
    with pytest.raises(ConflictError) as e:
        two.upsert(Memory(id="a0", namespace=BOB, content="takeover", embedding=vec(9)))
    assert_no_leak(e.value)
    with pytest.raises(ConflictError) as e:
        two.upsert_many(
            [
                Memory(id="b9", namespace=BOB, content="x"),
                Memory(id="a1", namespace=BOB, content="takeover"),
            ]
        )
    assert_no_leak(e.value)
    assert alice_state(two) == before
    assert [m.id for m in two.list(BOB, EVERYTHING)] == ["b0"]


def test_reads_and_searches_never_cross(two: Store) -> None:
    before = alice_state(two)
    assert [m.id for m in two.list(BOB, EVERYTHING)] == ["b0"]
    assert two.count(BOB, EVERYTHING) == 1
    assert two.count(BOB, Filter(tags=["private"], include_expired=True)) == 0
    assert two.count(BOB, Filter(metadata={"owner": "alice"})) == 0
    for k in (1, 10, 100):
        for q in [vec(0), vec(1), vec(2)]:
            assert [h.memory.id for h in two.vector_search(BOB, q, EVERYTHING, k)] == ["b0"]
        many = two.vector_search_many(BOB, np.stack([vec(0), vec(1)]), None, k)
        assert [[h.memory.id for h in r] for r in many] == [["b0"], ["b0"]]
        assert two.keyword_search(BOB, SECRET_WORD, EVERYTHING, k) == []
        assert two.keyword_search(BOB, "alicesummary private", None, k) == []
    assert two.ids_by_prefix(BOB, "a", 100) == []
    assert two.predecessor_ids(BOB, "a0") == []
    # the only cross-namespace reads are the global ones API.md defines
    assert two.list_namespaces() == sorted([ALICE, BOB])
    assert alice_state(two) == before


def test_writes_through_bob_never_touch_alice(two: Store) -> None:
    before = alice_state(two)
    two.reinforce(BOB, ["a0", "a1", "a2"], T0 + timedelta(hours=1), T0 + timedelta(days=5))
    assert two.reassign(BOB, ["a0", "a1"], "carol") == 0
    assert two.reassign("carol", ["a0"], BOB) == 0
    assert two.delete_namespace(BOB) == 1
    assert two.delete_namespace("carol") == 0
    assert alice_state(two) == before
    assert two.list_namespaces() == [ALICE]


def test_keyword_and_vector_entries_move_with_reassign(two: Store) -> None:
    assert two.reassign(ALICE, ["a0"], BOB) == 1
    assert [h.memory.id for h in two.keyword_search(BOB, SECRET_WORD)] == ["a0"]
    hits = two.keyword_search(ALICE, SECRET_WORD, EVERYTHING)
    assert sorted(h.memory.id for h in hits) == ["a1", "a2"]
    assert two.vector_search(ALICE, vec(0), k=1)[0].memory.id != "a0"
    assert two.vector_search(BOB, vec(0), k=1)[0].memory.id == "a0"
    with pytest.raises(NotFoundError):
        two.get(ALICE, "a0")


def test_error_messages_of_missing_rows_do_not_echo_other_namespaces(two: Store) -> None:
    """Even an absent id in bob gives a message without alice's name."""
    for call in (lambda: two.get(BOB, "nope"), lambda: two.delete(BOB, "a2")):
        with pytest.raises(MeminiError) as e:
            call()
        assert_no_leak(e.value)


# ------------------------------------------------------------------ secrets

SECRET = "sk-live-Q7vX9pLmZr2KdT8wYb4N"


def grep_dir(root: Path, needle: str) -> list[str]:
    hits = []
    forms = {needle.encode(), needle.encode("utf-16-le"), needle.encode("utf-16-be")}
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            if any(f in data for f in forms):
                hits.append(str(p.relative_to(root)))
    return hits


def test_api_key_secrets_never_reach_disk_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "s"
    s = Store.open(path, dims=DIMS)
    try:
        s.put_api_key(APIKey("agent", hash_api_key(SECRET), "home", "home", T0))
        assert s.authenticate(SECRET) is not None
        assert s.authenticate(SECRET + "-wrong") is None
        with pytest.raises(ConflictError) as e:
            s.put_api_key(APIKey("other", hash_api_key(SECRET)))
        assert SECRET not in str(e.value)
        s.upsert(Memory(id="m1", namespace="home", content="x"))
        s.backup(tmp_path / "backup")
        s.compact()
        assert grep_dir(path, SECRET) == []  # before close: WAL / journal files included
        assert [k.hash for k in s.list_api_keys()] == [hash_api_key(SECRET)]
        assert SECRET not in repr(s.list_api_keys()) + repr(s.stats())
    finally:
        s.close()
    assert grep_dir(path, SECRET) == []
    assert grep_dir(tmp_path / "backup", SECRET) == []
    logged = caplog.text + "".join(repr(r.args) for r in caplog.records)
    assert SECRET not in logged
    assert (SECRET + "-wrong") not in logged
