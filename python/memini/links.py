"""Namespace links on SQLite: the SQL behind ``Store.put_link`` and friends.

Table ``links`` (see ``memini._sqlite`` for the schema history)::

    links(src TEXT, dst TEXT, tiers TEXT NULL, note TEXT, created_at INTEGER,
          PRIMARY KEY (src, dst)) WITHOUT ROWID
    links_by_dst(dst, src)

Invariants:

* one row per ``(src, dst)``; ``tiers`` is NULL for "all tiers" or a JSON array of tier values
  in the order given (duplicates kept), so ``NamespaceLink.tiers`` round-trips exactly;
* ``created_at`` is microseconds since the epoch, UTC.

The functions here take an open connection; the caller (``MetaDB``) holds the lock and owns
the transaction. ``prepare_*`` functions only validate and never touch the database.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from memini._values import check_text, coerce_enum_list, from_micros, now_micros, to_micros
from memini.errors import CorruptionError, InvalidArgumentError
from memini.limits import check_namespace
from memini.types import NamespaceLink, Tier

__all__ = [
    "delete_link",
    "delete_links_of_namespace",
    "list_all_links",
    "list_links",
    "prepare_link",
    "put_link",
    "rename_link_endpoints",
]

LinkRow = tuple[str, str, str | None, str, int]
"""A validated link as stored: ``(src, dst, tiers_json, note, created_at_us)``."""

_COLUMNS = "src, dst, tiers, note, created_at"


def prepare_link(link: NamespaceLink) -> LinkRow:
    """Validate a link and convert it to its stored form.

    Args:
        link: The link; ``created_at=None`` is stamped with the wall clock.

    Returns:
        The row to store.

    Raises:
        InvalidArgumentError: Not a `NamespaceLink`, empty ``src``/``dst``, an unknown tier,
            or a field of the wrong type.
    """
    if not isinstance(link, NamespaceLink):
        raise InvalidArgumentError(f"link must be a NamespaceLink, got {type(link).__name__}")
    src = check_namespace(link.src, "link.src")
    dst = check_namespace(link.dst, "link.dst")
    note = check_text(link.note, "link.note")
    tiers: str | None = None
    if link.tiers is not None:
        members = coerce_enum_list(Tier, link.tiers, "link.tiers")
        tiers = json.dumps([t.value for t in members], separators=(",", ":"))
    created = (
        now_micros() if link.created_at is None else to_micros(link.created_at, "link.created_at")
    )
    return (src, dst, tiers, note, created)


def _to_link(row: tuple[Any, ...]) -> NamespaceLink:
    """Build a `NamespaceLink` from a stored row (columns in ``_COLUMNS`` order)."""
    src, dst, tiers, note, created = row
    tier_list: list[Tier] | None = None
    if tiers is not None:
        try:
            tier_list = [Tier(t) for t in json.loads(str(tiers))]
        except (ValueError, TypeError) as exc:
            raise CorruptionError(f"link {src!r}->{dst!r} has unreadable tiers {tiers!r}") from exc
    return NamespaceLink(
        src=src, dst=dst, tiers=tier_list, note=note, created_at=from_micros(created)
    )


def put_link(conn: sqlite3.Connection, row: LinkRow) -> None:
    """Insert the link, or overwrite tiers, note and created_at of the one at (src, dst).

    Args:
        conn: The connection, inside a write transaction.
        row: A row from `prepare_link`.
    """
    conn.execute(
        f"INSERT INTO links ({_COLUMNS}) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (src, dst) DO UPDATE SET "
        "tiers = excluded.tiers, note = excluded.note, created_at = excluded.created_at",
        row,
    )


def delete_link(conn: sqlite3.Connection, src: str, dst: str) -> bool:
    """Delete the link ``src -> dst``.

    Args:
        conn: The connection, inside a write transaction.
        src: Source namespace.
        dst: Destination namespace.

    Returns:
        Whether a link existed.
    """
    cur = conn.execute("DELETE FROM links WHERE src = ? AND dst = ?", (src, dst))
    return cur.rowcount > 0


def list_links(conn: sqlite3.Connection, src: str) -> list[NamespaceLink]:
    """The links going out of ``src``, ordered by ``dst``.

    Args:
        conn: The connection.
        src: Source namespace.

    Returns:
        The links.
    """
    cur = conn.execute(f"SELECT {_COLUMNS} FROM links WHERE src = ? ORDER BY dst", (src,))
    return [_to_link(r) for r in cur]


def list_all_links(conn: sqlite3.Connection) -> list[NamespaceLink]:
    """Every link, ordered by ``(src, dst)``.

    Args:
        conn: The connection.

    Returns:
        The links.
    """
    cur = conn.execute(f"SELECT {_COLUMNS} FROM links ORDER BY src, dst")
    return [_to_link(r) for r in cur]


def rename_link_endpoints(conn: sqlite3.Connection, from_ns: str, to_ns: str) -> None:
    """Rewrite every ``from_ns`` endpoint (either end) to ``to_ns``.

    A link that already exists at the new key and does not itself touch ``from_ns`` wins a
    collision. Links renamed onto the same new key (``from->to`` and ``to->from`` both
    become ``to->to``) collapse to the first of them in original ``(src, dst)`` order. Tiers,
    note and created_at move with the link. ``from_ns == to_ns`` changes nothing.

    Args:
        conn: The connection, inside a write transaction.
        from_ns: The namespace being renamed.
        to_ns: Its new name.
    """
    if from_ns == to_ns:
        return
    moved = conn.execute(
        f"SELECT {_COLUMNS} FROM links WHERE src = ?1 OR dst = ?1 ORDER BY src, dst",
        (from_ns,),
    ).fetchall()
    if not moved:
        return
    conn.execute("DELETE FROM links WHERE src = ?1 OR dst = ?1", (from_ns,))

    def rename(ns: str) -> str:
        return to_ns if ns == from_ns else ns

    # INSERT OR IGNORE keeps whatever already sits at the key: the untouched pre-existing link,
    # or the earlier renamed one (rows are visited in original (src, dst) order).
    conn.executemany(
        f"INSERT OR IGNORE INTO links ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
        [(rename(s), rename(d), tiers, note, created) for s, d, tiers, note, created in moved],
    )


def delete_links_of_namespace(conn: sqlite3.Connection, namespace: str) -> int:
    """Delete every link with ``namespace`` at either end.

    Args:
        conn: The connection, inside a write transaction.
        namespace: The namespace.

    Returns:
        The number of links deleted.
    """
    cur = conn.execute("DELETE FROM links WHERE src = ?1 OR dst = ?1", (namespace,))
    return cur.rowcount
