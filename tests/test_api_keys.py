"""API keys (API.md section 5): upsert by name, hash uniqueness, authenticate, renames."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memini._sqlite import MetaDB
from memini.errors import ConflictError, InvalidArgumentError, StoreClosedError
from memini.types import APIKey, hash_api_key
from meta_helpers import T0, at

pytest_plugins = ["conftest_meta"]

H1, H2, H3 = (hash_api_key(s) for s in ("secret-1", "secret-2", "secret-3"))


def test_put_and_list_round_trip_by_name(meta: MetaDB) -> None:
    keys = [
        APIKey("zeta", H1, home_ns="h", default_ns="d", created_at=T0, disabled=True),
        APIKey("alpha", H2, created_at=at(1)),
        APIKey("Mid", H3, home_ns="ü", default_ns="", created_at=at(2).replace(tzinfo=None)),
    ]
    for k in keys:
        meta.put_api_key(k)
    assert meta.list_api_keys() == [
        APIKey("Mid", H3, home_ns="ü", default_ns="", created_at=at(2)),
        APIKey("alpha", H2, created_at=at(1)),
        APIKey("zeta", H1, home_ns="h", default_ns="d", created_at=T0, disabled=True),
    ]
    assert all(
        k.created_at is not None and k.created_at.tzinfo is UTC for k in meta.list_api_keys()
    )


def test_new_key_without_created_at_is_stamped_now(meta: MetaDB) -> None:
    before = datetime.now(UTC)
    meta.put_api_key(APIKey("k", H1))
    [key] = meta.list_api_keys()
    assert key.created_at is not None
    assert before - timedelta(milliseconds=1) <= key.created_at <= datetime.now(UTC)


@pytest.mark.parametrize(
    ("second_created_at", "expected"),
    [
        pytest.param(None, T0, id="none-keeps-stored"),
        pytest.param(at(3600), at(3600), id="given-overwrites"),
        pytest.param(at(-3600), at(-3600), id="older-given-overwrites"),
    ],
)
def test_upsert_by_name(
    meta: MetaDB, second_created_at: datetime | None, expected: datetime
) -> None:
    meta.put_api_key(APIKey("k", H1, home_ns="a", default_ns="b", created_at=T0))
    meta.put_api_key(
        APIKey("k", H2, home_ns="c", default_ns="", created_at=second_created_at, disabled=True)
    )
    assert meta.list_api_keys() == [
        APIKey("k", H2, home_ns="c", default_ns="", created_at=expected, disabled=True)
    ]
    assert meta.get_api_key_by_hash(H1) is None  # the old hash is free again


def test_duplicate_hash_under_another_name_conflicts_and_writes_nothing(meta: MetaDB) -> None:
    meta.put_api_key(APIKey("first", H1, created_at=T0))
    meta.put_api_key(APIKey("second", H2, created_at=T0))
    with pytest.raises(ConflictError, match="first"):
        meta.put_api_key(APIKey("third", H1))
    with pytest.raises(ConflictError):
        meta.put_api_key(APIKey("second", H1, home_ns="changed"))
    assert meta.list_api_keys() == [
        APIKey("first", H1, created_at=T0),
        APIKey("second", H2, created_at=T0),
    ]
    meta.put_api_key(APIKey("first", H1, home_ns="same-name-same-hash-is-fine", created_at=T0))
    assert meta.list_api_keys()[0].home_ns == "same-name-same-hash-is-fine"


def test_hash_freed_by_delete_can_be_reused(meta: MetaDB) -> None:
    meta.put_api_key(APIKey("old", H1))
    assert meta.delete_api_key("old") is True
    meta.put_api_key(APIKey("new", H1))
    assert [k.name for k in meta.list_api_keys()] == ["new"]


def test_delete_api_key_reports_whether_one_existed(meta: MetaDB) -> None:
    meta.put_api_key(APIKey("k", H1))
    assert meta.delete_api_key("k") is True
    assert meta.delete_api_key("k") is False
    assert meta.delete_api_key("never") is False
    assert meta.list_api_keys() == []


@pytest.mark.parametrize(
    ("secret", "found"),
    [
        pytest.param("secret-1", "enabled", id="known-secret"),
        pytest.param("secret-2", None, id="disabled-key"),
        pytest.param("unknown", None, id="unknown-secret"),
        pytest.param("", None, id="empty-secret"),
        pytest.param("SECRET-1", None, id="case-sensitive"),
        pytest.param("secret-1 ", None, id="no-trimming"),
        pytest.param("\udc80", None, id="lone-surrogate-never-matches"),
    ],
)
def test_authenticate(meta: MetaDB, secret: str, found: str | None) -> None:
    meta.put_api_key(APIKey("enabled", H1, home_ns="h", created_at=T0))
    meta.put_api_key(APIKey("disabled", H2, created_at=T0, disabled=True))
    key = meta.authenticate(secret)
    assert (key.name if key else None) == found
    if key is not None:
        assert key == APIKey("enabled", H1, home_ns="h", created_at=T0)


def test_authenticate_rejects_non_str(meta: MetaDB) -> None:
    with pytest.raises(InvalidArgumentError):
        meta.authenticate(b"secret-1")  # type: ignore[arg-type]


def test_get_api_key_by_hash_returns_disabled_keys_too(meta: MetaDB) -> None:
    meta.put_api_key(APIKey("d", H2, created_at=T0, disabled=True))
    assert meta.get_api_key_by_hash(H2) == APIKey("d", H2, created_at=T0, disabled=True)
    assert meta.get_api_key_by_hash(H1) is None
    assert meta.get_api_key_by_hash("") is None


def test_get_api_key_by_hash_is_indexed(meta: MetaDB) -> None:
    with meta._locked() as conn:
        plan = " ".join(
            r[3]
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM api_keys WHERE hash = ?", ("x",)
            )
        )
    assert "USING INDEX sqlite_autoindex_api_keys" in plan, plan


def test_secrets_are_never_stored(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path)
    secret = "very-secret-value-0123456789"
    db.put_api_key(APIKey("k", hash_api_key(secret)))
    assert db.authenticate(secret) is not None
    db.close()
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert secret.encode() not in data
    assert hash_api_key(secret).encode() in data


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(("old", "old"), ("new", "new"), id="both-fields"),
        pytest.param(("old", "other"), ("new", "other"), id="home-only"),
        pytest.param(("other", "old"), ("other", "new"), id="default-only"),
        pytest.param(("other", ""), ("other", ""), id="neither"),
        pytest.param(("", ""), ("", ""), id="empty-untouched"),
        pytest.param(("old-ish", "xold"), ("old-ish", "xold"), id="exact-match-only"),
    ],
)
def test_rename_api_key_namespaces(
    meta: MetaDB, before: tuple[str, str], after: tuple[str, str]
) -> None:
    meta.put_api_key(APIKey("k", H1, home_ns=before[0], default_ns=before[1], created_at=T0))
    meta.put_api_key(APIKey("bystander", H2, home_ns="x", default_ns="y", created_at=at(1)))
    meta.rename_api_key_namespaces("old", "new")
    assert meta.list_api_keys() == [
        APIKey("bystander", H2, home_ns="x", default_ns="y", created_at=at(1)),
        APIKey("k", H1, home_ns=after[0], default_ns=after[1], created_at=T0),
    ]


def test_rename_api_key_namespaces_same_name_is_no_op(meta: MetaDB) -> None:
    meta.put_api_key(APIKey("k", H1, home_ns="a", default_ns="a", created_at=T0))
    meta.rename_api_key_namespaces("a", "a")
    assert meta.list_api_keys() == [APIKey("k", H1, home_ns="a", default_ns="a", created_at=T0)]


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(APIKey("", H1), id="empty-name"),
        pytest.param(APIKey("k", ""), id="empty-hash"),
        pytest.param(APIKey("k", H1, disabled=1), id="int-disabled"),  # type: ignore[arg-type]
        pytest.param(APIKey("k", H1, home_ns=None), id="none-home"),  # type: ignore[arg-type]
        pytest.param(APIKey("k", H1, created_at=0), id="int-created-at"),  # type: ignore[arg-type]
        pytest.param(APIKey("k\udc80", H1), id="lone-surrogate"),
        pytest.param({"name": "k", "hash": H1}, id="not-a-key"),
    ],
)
def test_invalid_key_is_rejected(meta: MetaDB, key: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        meta.put_api_key(key)
    assert meta.list_api_keys() == []


@pytest.mark.parametrize(
    "hash_",
    [
        pytest.param("very-secret-value", id="a-secret-by-mistake"),
        pytest.param(H1[:-1], id="63-digits"),
        pytest.param(H1 + "0", id="65-digits"),
        pytest.param(H1[:-1] + "g", id="non-hex-digit"),
        pytest.param(f" {H1}", id="leading-space"),
        pytest.param(f"{H1}\n", id="trailing-newline"),
        pytest.param("\uff10" * 64, id="fullwidth-digits"),
        pytest.param("sha256:" + H1, id="prefixed"),
        pytest.param("", id="empty"),
    ],
)
def test_hash_must_be_64_hex_digits(meta: MetaDB, hash_: str) -> None:
    """Anything but a hash is refused before it is written (a secret passed by mistake would
    be stored in clear); the message names the fix and never echoes the value."""
    with pytest.raises(InvalidArgumentError, match=r"hash_api_key\(secret\)") as err:
        meta.put_api_key(APIKey("k", hash_))
    assert str(err.value).startswith("key.hash must be the 64 hex digits of hash_api_key(secret)")
    if hash_.strip():
        assert hash_.strip() not in str(err.value)
    assert meta.list_api_keys() == []


def test_hash_is_stored_lowercase_and_found_in_either_case(meta: MetaDB) -> None:
    meta.put_api_key(APIKey("k", H1.upper(), created_at=T0))
    want = APIKey("k", H1, created_at=T0)
    assert meta.list_api_keys() == [want]
    assert meta.get_api_key_by_hash(H1) == want
    assert meta.get_api_key_by_hash(H1.upper()) == want
    assert meta.authenticate("secret-1") == want
    with pytest.raises(ConflictError):  # the same hash in the other case is the same hash
        meta.put_api_key(APIKey("other", H1))
    assert meta.get_api_key_by_hash("not a hash") is None


def test_keys_survive_reopen(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path)
    db.put_api_key(APIKey("k", H1, home_ns="h", default_ns="d", created_at=T0, disabled=True))
    db.close()
    db = MetaDB.open(tmp_path)
    try:
        assert db.list_api_keys() == [
            APIKey("k", H1, home_ns="h", default_ns="d", created_at=T0, disabled=True)
        ]
    finally:
        db.close()


@pytest.mark.parametrize(
    ("method", "args"),
    [
        pytest.param("put_api_key", (APIKey("k", H1),), id="put_api_key"),
        pytest.param("authenticate", ("s",), id="authenticate"),
        pytest.param("delete_api_key", ("k",), id="delete_api_key"),
        pytest.param("list_api_keys", (), id="list_api_keys"),
        pytest.param("get_api_key_by_hash", (H1,), id="get_api_key_by_hash"),
        pytest.param("rename_api_key_namespaces", ("a", "b"), id="rename_api_key_namespaces"),
    ],
)
def test_closed_raises(meta: MetaDB, method: str, args: tuple[Any, ...]) -> None:
    meta.close()
    with pytest.raises(StoreClosedError):
        getattr(meta, method)(*args)


def test_concurrent_puts_of_one_hash_admit_one_name(meta: MetaDB) -> None:
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def put(i: int) -> None:
        barrier.wait()
        try:
            meta.put_api_key(APIKey(f"k{i}", H1))
            result = "ok"
        except ConflictError:
            result = "conflict"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["ok"]
    assert len(meta.list_api_keys()) == 1
