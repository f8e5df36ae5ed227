"""The event log on SQLite: the SQL behind ``Store.append_events``, ``list_events`` and friends.

Table ``events`` (see ``memini._sqlite`` for the schema history)::

    events(id INTEGER PRIMARY KEY AUTOINCREMENT, op_id, kind, namespace, query, memory_id,
           memory_ns, memory_tier NULL, memory_summary, rank, score NULL, detail, created_at,
           query_fold NULL, summary_fold NULL)
    events_by_time(created_at)              -- the rowid (= id) is the implicit last column
    events_by_ns_time(namespace, created_at)
    events_by_op(op_id)
    event_queries(op_id PRIMARY KEY, query, query_fold NULL, created_at)

Invariants:

* ids come from AUTOINCREMENT: they are > 0, a batch gets contiguous ids in list order (one
  transaction, one writer), and an id is never handed out twice, also after pruning, so a
  keyset cursor ``(before, before_id)`` stays valid across `prune_events`. An import
  (`import_events`) may choose ids, but only above every id handed out so far, and the
  sequence moves past them;
* ``created_at`` is microseconds since the epoch, UTC; the log reads newest first, i.e. by
  ``(created_at DESC, id DESC)``, which both time indexes deliver without a sort;
* ``query_fold`` / ``summary_fold`` hold ``str.casefold()`` of ``query`` / ``memory_summary``
  when that differs from the original (NULL otherwise, which keeps the common lowercase
  rows small). The text filter is ``instr`` over the folded text: a Unicode-aware,
  case-insensitive substring test in which ``%`` and ``_`` are ordinary characters;
* ``detail`` is JSON text (`memini._values.metadata_to_json`, the rule of metadata);
* the query of a served call is stored once, in ``event_queries`` under its op_id,
  and its rows hold ``query = ''``: a row reads its operation's query there when its own is
  empty (one row per hit repeated a 4 KB query up to k times). Only the server's log writes
  ``event_queries``; events appended by callers keep their own queries, row by row.

Query plans of `list_events` (see `query_plan` and ``benches/bench_events.py``):

* without ``tiers``/``text`` one statement: a range scan of ``events_by_ns_time`` (one
  namespace) or of ``events_by_time``, newest first, starting at the cursor, stopped by
  ``LIMIT``;
* with ``tiers``/``text`` the filter selects whole operations. Step 1 scans the table once
  and collects the op_ids having a matching row into the in-memory table ``temp.event_ops``
  (there is no index that answers a substring test). Step 2 reads those operations' rows:
  with few operations (or no limit) through ``events_by_op`` followed by a sort ("probe"),
  with many operations and a limit by walking the time index newest first and keeping the
  rows whose op_id is in ``temp.event_ops`` until the limit is reached ("walk").

The functions here take an open connection; the caller (``MetaDB``) holds the lock and owns
the transaction. ``prepare_*`` functions only validate and never touch the database.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

from memini._values import (
    check_int,
    check_opt_float,
    check_text,
    check_text_list,
    coerce_enum,
    coerce_enum_list,
    from_micros,
    metadata_to_json,
    now_micros,
    to_micros,
)
from memini.errors import ConflictError, CorruptionError, InvalidArgumentError
from memini.limits import check_limit
from memini.types import Event, EventFilter, EventKind, Tier

__all__ = [
    "EventQuery",
    "OpQueryRow",
    "PackedRows",
    "append_events",
    "can_unpack",
    "check_event",
    "event_row",
    "fold",
    "import_events",
    "inline_queries",
    "list_events",
    "next_event_id",
    "prepare_events",
    "prepare_filter",
    "prepare_imported_events",
    "prune_events",
    "query_plan",
    "refuse_taken_ids",
]

EventRow = tuple[
    str,
    str,
    str,
    str,
    str,
    str,
    str | None,
    str,
    int,
    float | None,
    str,
    int,
    str | None,
    str | None,
]
"""A validated event as stored (columns in ``_INSERT_COLUMNS`` order)."""

_INSERT_COLUMNS = (
    "op_id, kind, namespace, query, memory_id, memory_ns, memory_tier, memory_summary, "
    "rank, score, detail, created_at, query_fold, summary_fold"
)
OpQueryRow = tuple[str, str, str | None, int]
"""The query of one served operation as stored in ``event_queries``: (op_id, query, its
`fold`, created_at), made by the core (`memini._core.search_event_rows`)."""

_SELECT_COLUMNS = (
    "id, op_id, kind, namespace, "
    "CASE WHEN query = '' THEN coalesce("
    "(SELECT q.query FROM event_queries q WHERE q.op_id = events.op_id), '') ELSE query END, "
    "memory_id, memory_ns, memory_tier, memory_summary, rank, score, detail, created_at"
)
_TEXT_MATCH = (
    "(instr(coalesce(query_fold, query), :text) > 0 "
    "OR instr(coalesce(summary_fold, memory_summary), :text) > 0 "
    "OR op_id IN (SELECT op_id FROM event_queries "
    "WHERE instr(coalesce(query_fold, query), :text) > 0))"
)
# Step 2 of a whole-operation filter reads the matching operations through events_by_op
# ("probe") up to this many operations; above it, with a limit, it walks the time index.
PROBE_MAX_OPS = 2000

_KINDS = {k.value: k for k in EventKind}
_TIERS = {t.value: t for t in Tier}


def fold(text: str) -> str | None:
    """``text.casefold()``, or None when folding changes nothing (the column stays NULL).
    The core folds ASCII text itself (casefold is ASCII lowercase there) and calls this for
    the rest (`memini._core.search_event_rows`)."""
    folded = text.casefold()
    return None if folded == text else folded


def _event_row(
    event: object, what: str, now: int, details: dict[int, str] | None = None
) -> EventRow:
    """Validate one event and convert it to its stored row (``created_at=None`` -> ``now``).

    ``details`` memoises the JSON of ``detail`` dicts by identity within one batch: the rows
    of one served search share one dict (half the cost of a row was checking it again).
    """
    if not isinstance(event, Event):
        raise InvalidArgumentError(f"{what} must be an Event, got {type(event).__name__}")
    if event.detail is None:  # unlike Memory.metadata, None is not read as {}
        raise InvalidArgumentError(f"{what}.detail must be a dict with str keys, got None")
    check_int(event.id, f"{what}.id", non_negative=True)  # the store assigns it, but an id
    tier = event.memory_tier
    return event_row(
        check_text(event.op_id, f"{what}.op_id", non_empty=True),
        coerce_enum(EventKind, event.kind, f"{what}.kind").value,
        check_text(event.namespace, f"{what}.namespace"),
        check_text(event.query, f"{what}.query"),
        check_text(event.memory_id, f"{what}.memory_id"),
        check_text(event.memory_ns, f"{what}.memory_ns"),
        None
        if tier is None or tier == ""
        else coerce_enum(Tier, tier, f"{what}.memory_tier").value,
        check_text(event.memory_summary, f"{what}.memory_summary"),
        check_int(event.rank, f"{what}.rank"),
        check_opt_float(event.score, f"{what}.score"),
        _detail_json(event.detail, what, details),
        now if event.created_at is None else to_micros(event.created_at, f"{what}.created_at"),
    )


def event_row(
    op_id: str,
    kind: str,
    namespace: str,
    query: str,
    memory_id: str,
    memory_ns: str,
    memory_tier: str | None,
    memory_summary: str,
    rank: int,
    score: float | None,
    detail: str,
    created_at: int,
) -> EventRow:
    """The stored row of an event whose values are checked already (the one home of the
    column order): enum values as str, ``detail`` as JSON text, ``created_at`` in
    microseconds. `prepare_events` checks an `Event` and builds its row here; a caller that
    makes its rows from values it holds valid (the server's log of served writes) builds
    them here directly, without an `Event` per row. A served search's rows (~10) are made
    as these tuples by the core (`memini._core.search_event_rows`; tests/test_events.py
    holds them equal to this function's)."""
    return (
        op_id,
        kind,
        namespace,
        query,
        memory_id,
        memory_ns,
        memory_tier,
        memory_summary,
        rank,
        score,
        detail,
        created_at,
        fold(query),
        fold(memory_summary),
    )


def inline_queries(rows: Sequence[EventRow], queries: Sequence[OpQueryRow]) -> list[EventRow]:
    """``rows`` with their operations' queries written into each (for a backend that keeps
    a query per row, PostgreSQL)."""
    by_op = {q[0]: q for q in queries}
    out = []
    for r in rows:
        q = by_op.get(r[0]) if r[3] == "" else None
        out.append(r if q is None else (*r[:3], q[1], *r[4:12], q[2], r[13]))
    return out


def _detail_json(detail: dict[str, Any], what: str, details: dict[int, str] | None) -> str:
    if details is None:
        return metadata_to_json(detail, f"{what}.detail")
    text = details.get(id(detail))
    if text is None:
        text = details[id(detail)] = metadata_to_json(detail, f"{what}.detail")
    return text


def check_event(event: Event, what: str = "event") -> None:
    """Validate one event as `prepare_events` does, for a caller that reports per item.

    Args:
        event: The event (its ``id`` is not checked).
        what: Its name in error messages.

    Raises:
        InvalidArgumentError: What `prepare_events` refuses.
    """
    _event_row(event, what, 0)


def _event_list(events: Iterable[Event]) -> Iterable[Event]:
    """``events`` as an iterable of events; a single `Event` or a str is refused."""
    if isinstance(events, Event | str | bytes) or not isinstance(events, Iterable):
        raise InvalidArgumentError(f"events must be a list of Event, got {type(events).__name__}")
    return events


def prepare_events(events: Iterable[Event]) -> list[EventRow]:
    """Validate events and convert them to stored rows.

    ``id`` of the input is ignored (the store assigns it); ``created_at=None`` is stamped
    with one wall-clock instant for the whole batch; ``memory_tier`` of ``None`` or ``""``
    means "no tier". The input objects are not modified.

    Args:
        events: The events, in the order their ids will be assigned.

    Returns:
        The rows to insert.

    Raises:
        InvalidArgumentError: Not an iterable of `Event`, an empty ``op_id``, an unknown
            kind or tier, a non-finite score, a non-JSON detail, or a field of the wrong type.
    """
    now = now_micros()
    events = list(_event_list(events))  # alive while `details` keys by id()
    details: dict[int, str] = {}
    return [_event_row(e, f"events[{i}]", now, details) for i, e in enumerate(events)]


def prepare_imported_events(events: Iterable[Event]) -> list[tuple[int, EventRow]]:
    """Validate events that keep their own ids (an import) and convert them to stored rows.

    Like `prepare_events`, but each event's ``id`` is kept: it must be > 0 and appear once
    in the batch.

    Args:
        events: The events.

    Returns:
        ``(id, row)`` pairs, in the given order.

    Raises:
        InvalidArgumentError: What `prepare_events` refuses, or an ``id`` <= 0.
        ConflictError: Two events of the batch have the same id.
    """
    now = now_micros()
    out: list[tuple[int, EventRow]] = []
    first_index: dict[int, int] = {}
    for i, event in enumerate(_event_list(events)):
        what = f"events[{i}]"
        row = _event_row(event, what, now)
        event_id = check_int(event.id, f"{what}.id")
        if event_id <= 0:
            raise InvalidArgumentError(f"{what}.id must be > 0 to be kept, got {event_id}")
        if event_id in first_index:
            raise ConflictError(
                f"{what}.id {event_id} is also the id of events[{first_index[event_id]}]; "
                "an id names one event"
            )
        first_index[event_id] = i
        out.append((event_id, row))
    return out


PackedRows = tuple[str, str, int]
"""Rows and queries made by the core as two JSON texts, and the row count
(`memini._core.Front.take_events` with ``packed``; ``crate::serve::events::pack``): each row
the array of its `EventRow` values but the score, given as ``[m, a, b, c]`` (``score = m /
2**(a + b + c)`` exactly, or null); each query an `OpQueryRow` as an array. SQLite expands
them in C (``json_each``), so a batch binds two values instead of 14 per row, with the GIL
held; the batch's values arrive exactly as their tuples would (tests/test_events.py)."""


_ROWS = "WITH packed AS MATERIALIZED (SELECT key, value FROM json_each(?1))"
"""The arrays of a JSON text (`PackedRows`), each rendered once (SQLite 3.35+)."""

_SCORE = (
    "CAST(json_extract(value, '$[9][0]') AS REAL)"
    " / (1 << json_extract(value, '$[9][1]')) / (1 << json_extract(value, '$[9][2]'))"
    " / (1 << json_extract(value, '$[9][3]'))"
)
"""A packed row's score, ``[m, a, b, c]``, as the REAL ``m / 2**a / 2**b / 2**c``: no
decimal text parsed (SQLite's parse is not correctly rounded before 3.43), each step
exact."""


def _unpack(table: str, width: int) -> str:
    """``INSERT INTO table SELECT`` the values of each array of a JSON text (`PackedRows`,
    bound as ``?1``); for ``events`` column 9 (the score) `_SCORE`, and the id ``?2 + `` the
    array's index (``?2``: `next_event_id`), so the rows' ids follow the array's order
    without sorting them first (measured: 0.4-0.6 us of CPU per row), for
    ``event_queries`` in array order (a later query of an op_id replaces an earlier one).

    Each array is read once into `_ROWS` (``MATERIALIZED``): ``json_each`` renders an
    array element's ``value`` as new JSON text at every reference, and a row's 17
    ``json_extract`` calls rendered it 17 times (measured, 2,000 rows of 10-hit searches,
    ~350 bytes each, on disk with the 3 indexes: 12.1 -> 6.4 us of CPU per row; tuples
    3.3, with the GIL held)."""

    def value(i: int) -> str:
        # a JSON string comes back as its text, never re-serialised (detail stays as is)
        return _SCORE if table == "events" and i == 9 else f"json_extract(value, '$[{i}]')"

    values = ", ".join(value(i) for i in range(width))
    if table == "events":
        head = f"INSERT INTO events (id, {_INSERT_COLUMNS}) SELECT ?2 + key,"
        return f"{_ROWS} {head} {values} FROM packed"
    return f"{_ROWS} INSERT OR REPLACE INTO event_queries SELECT {values} FROM packed ORDER BY key"


_UNPACK_ROWS = _unpack("events", 14)
_UNPACK_QUERIES = _unpack("event_queries", 4)


_PROBE = '[["\\u00e9\\ud83d\\ude00\\"\\\\\\n\\u001f", 0, 0, 0, 0, 0, 0, 0, 0, [-3, 62, 62, 1]]]'
"""A packed row with the escapes the core writes (`PackedRows` are ASCII: a character
beyond the BMP as a UTF-16 pair) and a score of three shifts."""


def can_unpack(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite reads `PackedRows` exactly, which `append_events` needs: it has
    ``json_each`` (JSON1: built in since 3.38, optional before) and ``MATERIALIZED``
    (3.35+), and reads `_PROBE` back as its tuple would be stored."""
    try:
        got = conn.execute(
            f"{_ROWS} SELECT json_extract(value, '$[0]'), {_SCORE} FROM packed", (_PROBE,)
        ).fetchall()
    except sqlite3.OperationalError:
        return False
    return got == [('\u00e9\U0001f600"\\\n\x1f', -3 / 2**125)]


def append_events(
    conn: sqlite3.Connection,
    rows: Sequence[EventRow],
    queries: Sequence[OpQueryRow] = (),
    packed: PackedRows | None = None,
) -> None:
    """Insert rows in order, then the ``packed`` ones; inside one transaction their ids are
    contiguous.

    Args:
        conn: The connection, inside a write transaction.
        rows: Rows from `prepare_events` (or `event_row`).
        queries: The queries of the rows' operations, once each (`memini._core.search_event_rows`).
        packed: More rows and queries, as the core packs them (only where `can_unpack`).
    """
    _insert(conn, f"INSERT INTO events ({_INSERT_COLUMNS})", 14, rows)
    _insert(conn, "INSERT OR REPLACE INTO event_queries", 4, queries)
    if packed is not None:
        conn.execute(_UNPACK_ROWS, (packed[0], next_event_id(conn)))
        conn.execute(_UNPACK_QUERIES, (packed[1],))


_ROWS_PER_INSERT = 64
"""Rows per ``INSERT`` statement of `_insert`: 64 rows of 14 values bind 896 parameters,
under 999, the oldest SQLite's limit."""


def _insert(
    conn: sqlite3.Connection, head: str, width: int, rows: Sequence[tuple[Any, ...]]
) -> None:
    """``head VALUES (...)`` for each row, in order, `_ROWS_PER_INSERT` rows per statement:
    the GIL is held while each row's values are bound, and one statement per row held it
    about as long again (its reset, step and bookkeeping; measured: 2.9 -> 1.7 us of CPU
    per 14-value row, in-memory table), where one statement of many rows does that once."""
    one = f"({', '.join('?' * width)})"
    full = len(rows) - len(rows) % _ROWS_PER_INSERT
    if full:
        many = f"{head} VALUES {', '.join([one] * _ROWS_PER_INSERT)}"
        for i in range(0, full, _ROWS_PER_INSERT):
            conn.execute(many, tuple(chain.from_iterable(rows[i : i + _ROWS_PER_INSERT])))
    if full < len(rows):
        conn.executemany(f"{head} VALUES {one}", rows[full:])


def next_event_id(conn: sqlite3.Connection) -> int:
    """The id the next appended event gets: one more than every id handed out so far.

    AUTOINCREMENT keeps the highest id ever used in ``sqlite_sequence`` (also after its
    row was pruned); the row is absent until the first insert.

    Args:
        conn: The connection.
    """
    row = conn.execute(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
        "coalesce((SELECT max(id) FROM events), 0))"
    ).fetchone()
    return int(row[0]) + 1


def refuse_taken_ids(rows: Sequence[tuple[int, EventRow]], first_free: int) -> None:
    """Refuse an import whose ids are not all at or above ``first_free`` (the next id this
    store hands out: ids are never reused).

    Raises:
        ConflictError: An id is taken.
    """
    taken = [event_id for event_id, _ in rows if event_id < first_free]
    if taken:
        raise ConflictError(
            f"event id {min(taken)} is taken ({len(taken)} of the {len(rows)} events have an "
            f"id below {first_free}, the next free one; ids are never reused): import them "
            "with append_events to get new ids"
        )


def import_events(
    conn: sqlite3.Connection, rows: Sequence[tuple[int, EventRow]], next_id: int = 0
) -> None:
    """Insert rows under their own ids, then advance the id sequence to ``next_id``.

    An id is taken when it is at most the highest id ever handed out (a pruned id
    included): ids are never reused, so a cursor or log reference never changes meaning.
    Inserting an explicit id moves AUTOINCREMENT's sequence past it, so later
    `append_events` continue above the imported ids.

    Args:
        conn: The connection, inside a write transaction.
        rows: ``(id, row)`` pairs from `prepare_imported_events`.
        next_id: When greater than the id the next appended event would get, make that
            the next id (ids below it are skipped, as if handed out and pruned); 0 = leave.

    Raises:
        ConflictError: An id is taken; nothing is inserted.
    """
    refuse_taken_ids(rows, next_event_id(conn))
    conn.executemany(
        f"INSERT INTO events (id, {_INSERT_COLUMNS}) VALUES ({', '.join('?' * 15)})",
        [(event_id, *row) for event_id, row in rows],
    )
    if next_id > next_event_id(conn):
        seq = next_id - 1
        if (
            conn.execute(
                "UPDATE sqlite_sequence SET seq = ? WHERE name = 'events'", (seq,)
            ).rowcount
            == 0
        ):
            conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('events', ?)", (seq,))


@dataclass(frozen=True)
class EventQuery:
    """A validated `EventFilter`: plain values ready to bind.

    Attributes:
        namespaces: Namespaces to keep (empty = all).
        kinds: Kind values to keep (empty = all).
        tiers: Tier values an operation must touch (empty = no tier filter).
        text: Case-folded substring an operation's query or summary must contain ("" = none).
        since: Inclusive lower bound on created_at, in microseconds, or None.
        before: Cursor created_at in microseconds, or None.
        before_id: Cursor id (0 = none).
        limit: Maximum rows (0 = no cap).
    """

    namespaces: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    tiers: tuple[str, ...] = ()
    text: str = ""
    since: int | None = None
    before: int | None = None
    before_id: int = 0
    limit: int = 0


def prepare_filter(filter: EventFilter | None) -> EventQuery:
    """Validate an `EventFilter` (None = everything).

    ``namespace`` wins over ``namespaces``; ``limit <= 0`` means no cap; ``before_id`` must
    be >= 0. ``namespaces``, ``kinds`` and ``tiers`` take a list, tuple or set (None =
    empty); a bare str is refused (``memini._values.check_sequence``).

    Args:
        filter: The filter.

    Returns:
        The validated query.

    Raises:
        InvalidArgumentError: Not an `EventFilter`, an unknown kind or tier, a bare string
            where a list is expected, a negative ``before_id``, or a field of the wrong type.
    """
    if filter is None:
        return EventQuery()
    if not isinstance(filter, EventFilter):
        raise InvalidArgumentError(
            f"filter must be an EventFilter or None, got {type(filter).__name__}"
        )
    namespace = check_text(filter.namespace, "filter.namespace")
    listed = check_text_list(filter.namespaces, "filter.namespaces", unordered=True)
    namespaces = (namespace,) if namespace else tuple(dict.fromkeys(listed))
    before_id = check_int(filter.before_id, "filter.before_id")
    if before_id < 0:
        raise InvalidArgumentError(f"filter.before_id must be >= 0, got {before_id}")
    limit = check_limit(filter.limit, "filter.limit")
    return EventQuery(
        namespaces=namespaces,
        kinds=tuple(
            dict.fromkeys(
                k.value
                for k in coerce_enum_list(EventKind, filter.kinds, "filter.kinds", unordered=True)
            )
        ),
        tiers=tuple(
            dict.fromkeys(
                t.value
                for t in coerce_enum_list(Tier, filter.tiers, "filter.tiers", unordered=True)
            )
        ),
        text=check_text(filter.text, "filter.text").casefold(),
        since=None if filter.since is None else to_micros(filter.since, "filter.since"),
        before=None if filter.before is None else to_micros(filter.before, "filter.before"),
        before_id=before_id,
        limit=max(limit, 0),
    )


def _in_list(column: str, values: Sequence[str], prefix: str, params: dict[str, Any]) -> str:
    """``column = :p0`` or ``column IN (:p0, :p1, ...)``, binding the values into ``params``."""
    names = [f"{prefix}{i}" for i in range(len(values))]
    params.update(zip(names, values, strict=True))
    if len(names) == 1:
        return f"{column} = :{names[0]}"
    return f"{column} IN ({', '.join(':' + n for n in names)})"


def _row_conditions(q: EventQuery, params: dict[str, Any]) -> list[str]:
    """WHERE terms for the row-level filters (namespace, kinds, since, cursor)."""
    conds: list[str] = []
    if q.namespaces:
        conds.append(_in_list("namespace", q.namespaces, "ns", params))
    if q.kinds:
        conds.append(_in_list("kind", q.kinds, "kind", params))
    if q.since is not None:
        conds.append("created_at >= :since")
        params["since"] = q.since
    if q.before is not None:
        params["before"] = q.before
        if q.before_id > 0:
            # Written as a range on created_at plus a tiebreak so the time index seeks to
            # the cursor instead of filtering everything newer than it.
            conds.append("created_at <= :before AND (created_at < :before OR id < :before_id)")
            params["before_id"] = q.before_id
        else:
            conds.append("created_at < :before")
    elif q.before_id > 0:
        conds.append("id < :before_id")
        params["before_id"] = q.before_id
    return conds


def _op_match_sql(q: EventQuery, params: dict[str, Any]) -> str:
    """SELECT of the op_ids with a row matching ``tiers`` and an (other) row matching ``text``."""
    terms: list[str] = []
    if q.tiers:
        terms.append(_in_list("memory_tier", q.tiers, "tier", params))
    if q.text:
        terms.append(_TEXT_MATCH)
        params["text"] = q.text
    # NOT INDEXED: one sequential pass over the table beats visiting it in op_id order.
    if len(terms) == 1:
        return f"SELECT DISTINCT op_id FROM events NOT INDEXED WHERE {terms[0]}"
    return (
        f"SELECT op_id FROM events NOT INDEXED WHERE {' OR '.join(terms)} "
        f"GROUP BY op_id HAVING {' AND '.join(f'max({t})' for t in terms)}"
    )


def _where(conds: list[str]) -> str:
    """``WHERE a AND b`` or ``""``."""
    return f"WHERE {' AND '.join(conds)}" if conds else ""


def _tail(q: EventQuery, params: dict[str, Any]) -> str:
    """ORDER BY newest first, and the LIMIT when there is one."""
    order = "ORDER BY created_at DESC, id DESC"
    if q.limit > 0:
        params["limit"] = q.limit
        return f"{order} LIMIT :limit"
    return order


def _plan(q: EventQuery, n_ops: int | None) -> tuple[str, dict[str, Any]]:
    """The final SELECT; ``n_ops`` is the size of ``temp.event_ops`` (None: no op filter)."""
    params: dict[str, Any] = {}
    conds = _row_conditions(q, params)
    source = "events"
    if n_ops is not None:
        if q.limit > 0 and n_ops > PROBE_MAX_OPS:
            # Walk a time index newest first; the "+" keeps the planner off events_by_op.
            conds.append("+op_id IN (SELECT op_id FROM temp.event_ops)")
        else:
            # Probe: read just the matching operations' rows, then sort them.
            source = "events INDEXED BY events_by_op"
            conds.append("op_id IN (SELECT op_id FROM temp.event_ops)")
    sql = f"SELECT {_SELECT_COLUMNS} FROM {source} {_where(conds)} {_tail(q, params)}"
    return sql, params


def _ops_table(conn: sqlite3.Connection) -> None:
    """Create the connection's (in-memory, private) ``temp.event_ops`` when missing."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS event_ops (op_id TEXT PRIMARY KEY) WITHOUT ROWID")


def _collect_ops(conn: sqlite3.Connection, q: EventQuery) -> int:
    """Step 1 of a whole-operation filter: fill ``temp.event_ops``; returns its row count."""
    _ops_table(conn)
    conn.execute("DELETE FROM temp.event_ops")
    params: dict[str, Any] = {}
    sql = _op_match_sql(q, params)
    return conn.execute(f"INSERT INTO temp.event_ops (op_id) {sql}", params).rowcount


def _to_event(row: tuple[Any, ...]) -> Event:
    """Build an `Event` from a stored row (columns in ``_SELECT_COLUMNS`` order)."""
    (
        id_,
        op_id,
        kind,
        namespace,
        query,
        memory_id,
        memory_ns,
        tier,
        summary,
        rank,
        score,
        detail,
        created,
    ) = row
    try:
        kind_member = _KINDS[kind]
        tier_member = None if tier is None else _TIERS[tier]
        detail_dict = {} if detail == "{}" else json.loads(detail)
    except (KeyError, ValueError) as exc:
        raise CorruptionError(f"event {id_} is unreadable: {exc}") from exc
    return Event(
        op_id=op_id,
        kind=kind_member,
        namespace=namespace,
        query=query,
        memory_id=memory_id,
        memory_ns=memory_ns,
        memory_tier=tier_member,
        memory_summary=summary,
        rank=rank,
        score=score,
        detail=detail_dict,
        created_at=from_micros(created),
        id=id_,
    )


def list_events(conn: sqlite3.Connection, q: EventQuery) -> list[Event]:
    """Events matching ``q``, newest first (created_at desc, id desc).

    Args:
        conn: The connection, inside a read (or write) transaction so both steps of a
            whole-operation filter see one snapshot.
        q: A query from `prepare_filter`.

    Returns:
        The events.
    """
    n_ops: int | None = None
    if q.tiers or q.text:
        n_ops = _collect_ops(conn, q)
        if n_ops == 0:
            return []
    sql, params = _plan(q, n_ops)
    return [_to_event(r) for r in conn.execute(sql, params)]


def query_plan(conn: sqlite3.Connection, q: EventQuery) -> list[str]:
    """``EXPLAIN QUERY PLAN`` of the statements `list_events` runs for ``q``.

    Runs step 1 of a whole-operation filter for real (its result decides step 2's plan).

    Args:
        conn: The connection.
        q: A query from `prepare_filter`.

    Returns:
        One line per plan node, each statement introduced by a ``-- `` line.
    """
    lines: list[str] = []
    n_ops: int | None = None
    if q.tiers or q.text:
        params: dict[str, Any] = {}
        _ops_table(conn)
        sql = f"INSERT INTO temp.event_ops (op_id) {_op_match_sql(q, params)}"
        lines.append("-- step 1: " + sql)
        lines += [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        n_ops = _collect_ops(conn, q)
        lines.append(f"-- {n_ops} operations match")
    sql, params = _plan(q, n_ops)
    lines.append("-- " + sql)
    lines += [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    return lines


def prune_events(conn: sqlite3.Connection, older_than: int | None, keep_max: int) -> int:
    """Delete rows older than ``older_than``, then all but the newest ``keep_max`` rows.

    Args:
        conn: The connection, inside a write transaction.
        older_than: Microseconds; rows with ``created_at`` strictly before it are deleted.
            None skips this step.
        keep_max: When > 0, keep only the newest ``keep_max`` rows (by created_at, then id)
            across every namespace.

    Returns:
        The number of rows deleted.
    """
    deleted = 0
    if older_than is not None:
        deleted += conn.execute("DELETE FROM events WHERE created_at < ?", (older_than,)).rowcount
        conn.execute("DELETE FROM event_queries WHERE created_at < ?", (older_than,))
    if keep_max > 0 and _more_than(conn, keep_max):
        # The oldest row to keep, found along events_by_time; everything before it goes.
        edge = conn.execute(
            "SELECT created_at, id FROM events ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET ?",
            (keep_max - 1,),
        ).fetchone()
        if edge is not None:
            deleted += conn.execute(
                "DELETE FROM events WHERE created_at <= ?1 AND (created_at < ?1 OR id < ?2)",
                edge,
            ).rowcount
            conn.execute("DELETE FROM event_queries WHERE created_at < ?", (edge[0],))
    return deleted


def _more_than(conn: sqlite3.Connection, n: int) -> bool:
    """Whether the log may hold more than ``n`` rows: ids grow by one per row and are never
    reused, so ``max(id) - min(id) + 1`` bounds the count from above in O(log n), sparing a
    capped log below its cap the walk of ``n`` index entries on every prune."""
    low, high = conn.execute("SELECT min(id), max(id) FROM events").fetchone()
    return low is not None and high - low + 1 > n
