"""API keys on SQLite: the SQL behind ``Store.put_api_key``, ``Store.authenticate`` and friends.

Table ``api_keys`` (see ``memini._sqlite`` for the schema history)::

    api_keys(name TEXT PRIMARY KEY, hash TEXT UNIQUE, home_ns TEXT, default_ns TEXT,
             created_at INTEGER, disabled INTEGER) WITHOUT ROWID

Invariants:

* secrets are never stored, only their hash (`memini.types.hash_api_key`): a put whose
  ``hash`` is not 64 hex digits is refused (a secret passed by mistake is never written),
  and hashes are stored lowercase;
* one key per name and one name per hash (the UNIQUE constraint is the lookup index of
  `get_api_key_by_hash` and `authenticate`);
* ``created_at`` is set once, when the key is first stored, unless a put names one.

The functions here take an open connection; the caller (``MetaDB``) holds the lock and owns
the transaction. ``prepare_*`` functions only validate and never touch the database.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from memini._values import (
    check_bool,
    check_key_hash,
    check_text,
    from_micros,
    now_micros,
    to_micros,
)
from memini.errors import ConflictError, InvalidArgumentError
from memini.types import APIKey, hash_api_key

__all__ = [
    "authenticate",
    "delete_api_key",
    "get_api_key_by_hash",
    "list_api_keys",
    "prepare_api_key",
    "put_api_key",
    "rename_api_key_namespaces",
]

KeyRow = tuple[str, str, str, str, int | None, int]
"""A validated key: ``(name, hash, home_ns, default_ns, created_at_us or None, disabled)``."""

_COLUMNS = "name, hash, home_ns, default_ns, created_at, disabled"


def prepare_api_key(key: APIKey) -> KeyRow:
    """Validate a key and convert it to its stored form.

    Args:
        key: The key. ``created_at=None`` keeps the stored value (now for a new key).

    Returns:
        The row to store; ``created_at`` is None when the key did not name one.

    Raises:
        InvalidArgumentError: Not an `APIKey`, an empty name, a hash that is not 64 hex
            digits (the message names ``hash_api_key(secret)``), or a field of the wrong
            type.
    """
    if not isinstance(key, APIKey):
        raise InvalidArgumentError(f"key must be an APIKey, got {type(key).__name__}")
    created = None if key.created_at is None else to_micros(key.created_at, "key.created_at")
    return (
        check_text(key.name, "key.name", non_empty=True),
        check_key_hash(key.hash, "key.hash"),
        check_text(key.home_ns, "key.home_ns"),
        check_text(key.default_ns, "key.default_ns"),
        created,
        int(check_bool(key.disabled, "key.disabled")),
    )


def _to_key(row: tuple[Any, ...]) -> APIKey:
    """Build an `APIKey` from a stored row (columns in ``_COLUMNS`` order)."""
    name, hash_, home_ns, default_ns, created, disabled = row
    return APIKey(
        name=name,
        hash=hash_,
        home_ns=home_ns,
        default_ns=default_ns,
        created_at=from_micros(created),
        disabled=bool(disabled),
    )


def hash_in_use(name: str, other: str) -> ConflictError:
    """The error of key ``name`` whose hash key ``other`` already has (both backends)."""
    return ConflictError(
        f"API key {name!r}: its hash is already used by key {other!r} "
        "(generate a new secret, or delete or update that key first)"
    )


def put_api_key(conn: sqlite3.Connection, row: KeyRow) -> None:
    """Insert the key, or replace the one with the same name (keeping its created_at if unset).

    Args:
        conn: The connection, inside a write transaction.
        row: A row from `prepare_api_key`.

    Raises:
        ConflictError: Another name already uses this hash; nothing is written.
    """
    name, hash_, home_ns, default_ns, created, disabled = row
    other = conn.execute(
        "SELECT name FROM api_keys WHERE hash = ? AND name <> ?", (hash_, name)
    ).fetchone()
    if other is not None:
        raise hash_in_use(name, other[0])
    conn.execute(
        f"INSERT INTO api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, home_ns = excluded.home_ns, "
        "default_ns = excluded.default_ns, disabled = excluded.disabled, "
        "created_at = CASE WHEN ? THEN excluded.created_at ELSE api_keys.created_at END",
        (
            name,
            hash_,
            home_ns,
            default_ns,
            now_micros() if created is None else created,
            disabled,
            created is not None,
        ),
    )


def get_api_key_by_hash(conn: sqlite3.Connection, hash_: str) -> APIKey | None:
    """The key with this hash, disabled or not.

    Args:
        conn: The connection.
        hash_: The hex SHA-256 of the secret.

    Returns:
        The key, or None when no key has this hash.
    """
    row = conn.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE hash = ?", (hash_,)).fetchone()
    return None if row is None else _to_key(row)


def authenticate(conn: sqlite3.Connection, secret: str) -> APIKey | None:
    """The enabled key whose hash is ``hash_api_key(secret)``.

    Args:
        conn: The connection.
        secret: The secret presented by a client. ``""`` never authenticates.

    Returns:
        The key, or None when the secret is empty, unknown, or its key is disabled.

    Raises:
        InvalidArgumentError: ``secret`` is not a str.
    """
    digest = hash_api_key(secret)
    if not secret:
        return None
    key = get_api_key_by_hash(conn, digest)
    return None if key is None or key.disabled else key


def delete_api_key(conn: sqlite3.Connection, name: str) -> bool:
    """Delete the key called ``name``.

    Args:
        conn: The connection, inside a write transaction.
        name: The key's name.

    Returns:
        Whether a key existed.
    """
    return conn.execute("DELETE FROM api_keys WHERE name = ?", (name,)).rowcount > 0


def list_api_keys(conn: sqlite3.Connection) -> list[APIKey]:
    """Every key, ordered by name.

    Args:
        conn: The connection.

    Returns:
        The keys (hashes only; secrets are never stored).
    """
    return [_to_key(r) for r in conn.execute(f"SELECT {_COLUMNS} FROM api_keys ORDER BY name")]


def rename_api_key_namespaces(conn: sqlite3.Connection, from_ns: str, to_ns: str) -> None:
    """Point ``home_ns`` and ``default_ns`` equal to ``from_ns`` at ``to_ns``, independently.

    Each field is rewritten on its own (a key whose home is ``from_ns`` but whose default is
    elsewhere keeps its default); ``created_at`` is untouched; ``from_ns == to_ns`` changes
    nothing.

    Args:
        conn: The connection, inside a write transaction.
        from_ns: The namespace being renamed.
        to_ns: Its new name.
    """
    if from_ns == to_ns:
        return
    conn.execute("UPDATE api_keys SET home_ns = ?1 WHERE home_ns = ?2", (to_ns, from_ns))
    conn.execute("UPDATE api_keys SET default_ns = ?1 WHERE default_ns = ?2", (to_ns, from_ns))
