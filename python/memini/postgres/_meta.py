"""Links, API keys and the event log (API.md section 5) in PostgreSQL.

Validation and conversion are the embedded store's (`memini.links.prepare_link`,
`memini.keys.prepare_api_key`, `memini.events.prepare_events` / ``prepare_filter`` and their
row readers); only the SQL differs. Every function runs inside the caller's transaction.

Event ids come from the ``next_event_id`` setting, read and advanced under its row lock, so
a batch gets contiguous ids in list order even while other processes append, ids grow
across batches and are never reused (pruning does not lower the counter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from memini import events as ev
from memini import keys as ky
from memini import links as lk
from memini._values import now_micros
from memini.types import APIKey, Event, NamespaceLink

__all__ = [
    "append_events",
    "delete_links_of_namespace",
    "import_events",
    "list_events",
    "next_event_id",
    "prune_events",
    "put_api_key",
    "put_link",
    "rename_link_endpoints",
]

Conn = psycopg.Connection[Any]

LINK_COLUMNS = "src, dst, tiers, note, created_at"
KEY_COLUMNS = "name, hash, home_ns, default_ns, created_at, disabled"
_EVENT_INSERT = (
    "op_id, kind, namespace, query, memory_id, memory_ns, memory_tier, memory_summary, "
    "rank, score, detail, created_at, query_fold, summary_fold"
)
_EVENT_SELECT = (
    "id, op_id, kind, namespace, query, memory_id, memory_ns, memory_tier, memory_summary, "
    "rank, score, detail, created_at"
)


# ---------------------------------------------------------------------------------- links


def put_link(conn: Conn, link: NamespaceLink) -> None:
    conn.execute(
        f"INSERT INTO links ({LINK_COLUMNS}) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (src, dst) DO UPDATE SET tiers = excluded.tiers, note = excluded.note, "
        "created_at = excluded.created_at",
        lk.prepare_link(link),
    )


def list_links(conn: Conn, src: str | None) -> list[NamespaceLink]:
    if src is None:
        rows = conn.execute(f"SELECT {LINK_COLUMNS} FROM links ORDER BY src, dst").fetchall()
    else:
        rows = conn.execute(
            f"SELECT {LINK_COLUMNS} FROM links WHERE src = %s ORDER BY dst", (src,)
        ).fetchall()
    return [lk._to_link(r) for r in rows]


def rename_link_endpoints(conn: Conn, from_ns: str, to_ns: str) -> None:
    """As `memini.links.rename_link_endpoints`: an existing link at the new key wins, links
    renamed onto one key collapse to the first in (src, dst) order."""
    if from_ns == to_ns:
        return
    moved = conn.execute(
        f"DELETE FROM links WHERE src = %(ns)s OR dst = %(ns)s RETURNING {LINK_COLUMNS}",
        {"ns": from_ns},
    ).fetchall()

    def rename(ns: str) -> str:
        return to_ns if ns == from_ns else ns

    for s, d, tiers, note, created in sorted(moved, key=lambda r: (r[0], r[1])):
        conn.execute(
            f"INSERT INTO links ({LINK_COLUMNS}) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            (rename(s), rename(d), tiers, note, created),
        )


def delete_links_of_namespace(conn: Conn, namespace: str) -> int:
    return conn.execute(
        "DELETE FROM links WHERE src = %(ns)s OR dst = %(ns)s", {"ns": namespace}
    ).rowcount


# ---------------------------------------------------------------------------------- keys


def put_api_key(conn: Conn, key: APIKey) -> None:
    name, hash_, home_ns, default_ns, created, disabled = ky.prepare_api_key(key)
    other = conn.execute(
        "SELECT name FROM api_keys WHERE hash = %s AND name <> %s", (hash_, name)
    ).fetchone()
    if other is not None:
        raise ky.hash_in_use(name, other[0])
    conn.execute(
        f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, home_ns = excluded.home_ns, "
        "default_ns = excluded.default_ns, disabled = excluded.disabled, "
        "created_at = CASE WHEN %s THEN excluded.created_at ELSE api_keys.created_at END",
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


def get_api_key_by_hash(conn: Conn, hash_: str) -> APIKey | None:
    row = conn.execute(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE hash = %s", (hash_,)).fetchone()
    return None if row is None else ky._to_key(row)


def list_api_keys(conn: Conn) -> list[APIKey]:
    rows = conn.execute(f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY name").fetchall()
    return [ky._to_key(r) for r in rows]


def rename_api_key_namespaces(conn: Conn, from_ns: str, to_ns: str) -> None:
    if from_ns == to_ns:
        return
    conn.execute("UPDATE api_keys SET home_ns = %s WHERE home_ns = %s", (to_ns, from_ns))
    conn.execute("UPDATE api_keys SET default_ns = %s WHERE default_ns = %s", (to_ns, from_ns))


# ---------------------------------------------------------------------------------- events


def next_event_id(conn: Conn, *, lock: bool = False) -> int:
    """The id the next appended event gets (``lock``: hold the counter's row lock)."""
    row = conn.execute(
        "SELECT value FROM memini_settings WHERE key = 'next_event_id'"
        + (" FOR UPDATE" if lock else "")
    ).fetchone()
    return 1 if row is None else int(row[0])


def _set_next_event_id(conn: Conn, next_id: int) -> None:
    conn.execute(
        "UPDATE memini_settings SET value = %s WHERE key = 'next_event_id'", (str(next_id),)
    )


def _insert_events(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> None:
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO events (id, {_EVENT_INSERT}) VALUES ({', '.join(['%s'] * 15)})", rows
        )


def append_events(conn: Conn, rows: Sequence[ev.EventRow]) -> None:
    """Insert validated rows (`memini.events.prepare_events`) under the next ids, in order."""
    first = next_event_id(conn, lock=True)
    _insert_events(conn, [(first + i, *r) for i, r in enumerate(rows)])
    _set_next_event_id(conn, first + len(rows))


def import_events(conn: Conn, rows: Sequence[tuple[int, ev.EventRow]], next_id: int = 0) -> None:
    """Insert validated rows (`memini.events.prepare_imported_events`) under their own ids
    (each at or above the next free id), then make the next id at least ``next_id`` (as
    `memini.events.import_events`).

    Raises:
        ConflictError: An id is taken; nothing is inserted.
    """
    first_free = next_event_id(conn, lock=True)
    ev.refuse_taken_ids(rows, first_free)
    _insert_events(conn, [(event_id, *r) for event_id, r in rows])
    top = max([first_free, next_id, *(event_id + 1 for event_id, _ in rows)])
    _set_next_event_id(conn, top)


def list_events(conn: Conn, q: ev.EventQuery) -> list[Event]:
    """Events matching ``q``, newest first; ``tiers``/``text`` select whole operations."""
    params: dict[str, Any] = {}
    conds: list[str] = []
    if q.namespaces:
        conds.append("namespace = ANY(%(ns)s)")
        params["ns"] = list(q.namespaces)
    if q.kinds:
        conds.append("kind = ANY(%(kinds)s)")
        params["kinds"] = list(q.kinds)
    if q.since is not None:
        conds.append("created_at >= %(since)s")
        params["since"] = q.since
    if q.before is not None:
        params["before"] = q.before
        if q.before_id > 0:
            conds.append("(created_at, id) < (%(before)s, %(before_id)s)")
            params["before_id"] = q.before_id
        else:
            conds.append("created_at < %(before)s")
    elif q.before_id > 0:
        conds.append("id < %(before_id)s")
        params["before_id"] = q.before_id
    op_terms: list[str] = []
    if q.tiers:
        op_terms.append("bool_or(memory_tier = ANY(%(tiers)s))")
        params["tiers"] = list(q.tiers)
    if q.text:
        op_terms.append(
            "bool_or(strpos(coalesce(query_fold, query), %(text)s) > 0 "
            "OR strpos(coalesce(summary_fold, memory_summary), %(text)s) > 0)"
        )
        params["text"] = q.text
    if op_terms:
        conds.append(
            f"op_id IN (SELECT op_id FROM events GROUP BY op_id HAVING {' AND '.join(op_terms)})"
        )
    sql = f"SELECT {_EVENT_SELECT} FROM events"
    if conds:
        sql += " WHERE " + " AND ".join(conds)
    sql += " ORDER BY created_at DESC, id DESC"
    if q.limit > 0:
        sql += " LIMIT %(limit)s"
        params["limit"] = q.limit
    return [ev._to_event(r) for r in conn.execute(sql, params).fetchall()]


def prune_events(conn: Conn, older_than: int | None, keep_max: int) -> int:
    deleted = 0
    if older_than is not None:
        deleted += conn.execute("DELETE FROM events WHERE created_at < %s", (older_than,)).rowcount
    if keep_max > 0:
        edge = conn.execute(
            "SELECT created_at, id FROM events ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET %s",
            (keep_max - 1,),
        ).fetchone()
        if edge is not None:
            deleted += conn.execute(
                "DELETE FROM events WHERE (created_at, id) < (%s, %s)", edge
            ).rowcount
    return deleted
