"""Writing rows into ``memories``: one upsert per row for small batches, ``COPY`` into a
staging table then one upsert for large ones, and a bulk load that builds the indexes once
at the end.

Both upsert forms apply the same rule: ``INSERT .. ON CONFLICT (id) DO UPDATE`` whose update
applies only when the stored row is in the same namespace (the row comes back from
``RETURNING``); a row that does not come back holds an id of another namespace:
`ConflictError`, and the caller's transaction rolls back.

`upsert` takes a batch of `COPY_MIN` rows or more through ``COPY`` (binary) into the
session's temporary ``memini_stage`` table (emptied at every commit), then one ``INSERT ..
SELECT`` in batch order. One statement cannot touch a row twice, so an id repeated in the
batch is merged first, as sequential upserts would leave it: the last row's values, the
first row's ``created_at``, the later occurrences reported as updates (and a repeat in
another namespace is a `ConflictError`).

`deferred_indexes` serves a load into an empty store (``memini import``): it drops the
secondary indexes of ``memories`` (all but the primary key), records their definitions in
``memini_settings`` and holds an advisory lock while the rows load; at the end it builds
them again, once each, which is several times faster than maintaining an HNSW graph row by
row. If the loading process dies, the next `memini.postgres._schema.migrate` finds the record
with the lock free and builds the indexes itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import psycopg

from memini.errors import ConflictError
from memini.postgres._rows import WRITE_COLUMNS, write_values
from memini.postgres._search import TS_CONFIG

if TYPE_CHECKING:
    from memini.postgres._pool import Conn, Pool

__all__ = [
    "COPY_MIN",
    "DEFERRED_KEY",
    "LOAD_LOCK",
    "UPSERT",
    "build_deferred",
    "conflict",
    "deferred_indexes",
    "recover_deferred",
    "upsert",
]

log = logging.getLogger("memini")

COPY_MIN: Final = 64
"""Batches of at least this many rows load through ``COPY`` (measured in
benches/bench_postgres.py::test_ingest: below it the staging costs more than it saves)."""
DEFERRED_KEY: Final = "deferred_indexes"
"""The ``memini_settings`` key of the indexes a bulk load dropped (a JSON list of
``CREATE INDEX`` statements)."""
LOAD_LOCK: Final = 0x6D656D6A
"""The advisory lock a bulk load holds while its indexes are dropped."""
# per row of an HNSW build in memory beyond its vector (neighbour lists, element headers),
# and the most maintenance_work_mem a build asks for (kB)
_GRAPH_BYTES: Final = 600
_MAX_BUILD_KB: Final = 2 * 1024 * 1024
_UPDATE: Final = ", ".join(
    f"{c} = excluded.{c}" for c in (*WRITE_COLUMNS, "words") if c not in ("id", "created_at")
)
_CONFLICT: Final = (
    f"ON CONFLICT (id) DO UPDATE SET {_UPDATE} WHERE memories.namespace = excluded.namespace"
)
UPSERT: Final = (
    f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}, words) VALUES ("
    + ", ".join(f"%({c})s" for c in WRITE_COLUMNS)
    + f", to_tsvector('{TS_CONFIG}', %(words)s)) {_CONFLICT} RETURNING (xmax = 0)"
)
"""The upsert of one row (`memini.postgres._rows.write_values` as its parameters)."""
_STAGE_COLUMNS: Final = ("ord", *WRITE_COLUMNS, "words")
# meta travels as text (its exact JSON) and becomes jsonb in the upsert
_STAGE: Final = (
    "CREATE TEMP TABLE IF NOT EXISTS memini_stage ON COMMIT DELETE ROWS AS SELECT 0::int AS ord, "
    + ", ".join("meta::text AS meta" if c == "meta" else c for c in WRITE_COLUMNS)
    + ", ''::text AS words FROM memories WITH NO DATA"
)
_STAGE_TYPES: Final = {
    "ord": "int4",
    "tags": "text[]",
    "linked_memory_ids": "text[]",
    "importance": "float8",
    "confidence": "float8",
    "embedding": "vector",
    **{
        c: "int8"
        for c in (
            "created_at",
            "updated_at",
            "last_accessed_at",
            "access_count",
            "expires_at",
            "valid_from",
            "valid_to",
        )
    },
}
_FROM_STAGE: Final = (
    f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}, words) SELECT "
    + ", ".join("meta::jsonb" if c == "meta" else c for c in WRITE_COLUMNS)
    + f", to_tsvector('{TS_CONFIG}', words) FROM memini_stage ORDER BY ord {_CONFLICT} "
    "RETURNING id, (xmax = 0)"
)


def conflict(id: str) -> ConflictError:
    """The error of an id that lives in another namespace."""
    return ConflictError(
        f"memory id {id!r} already exists in a different namespace (ids are unique across "
        "namespaces; use a new id)"
    )


def upsert(conn: Conn, rows: Sequence[dict[str, Any]]) -> list[bool]:
    """Upsert stamped core rows in order inside the caller's transaction; per row whether
    it was inserted (False: it replaced a stored row).

    Raises:
        ConflictError: A row's id lives in another namespace (roll the transaction back).
    """
    params = [write_values(r) for r in rows]
    if len(params) >= COPY_MIN:
        return _upsert_copied(conn, params)
    if len(params) == 1:
        got = conn.execute(UPSERT, params[0]).fetchone()
        if got is None:
            raise conflict(params[0]["id"])
        return [bool(got[0])]
    out: list[bool] = []
    with conn.cursor() as cur:
        # one statement per row, in order (a repeated id is sequential upserts), sent in
        # one pipeline
        cur.executemany(UPSERT, params, returning=True)
        for p in params:
            got = cur.fetchone()
            if got is None:
                raise conflict(p["id"])
            out.append(bool(got[0]))
            cur.nextset()
    return out


def _upsert_copied(conn: Conn, params: list[dict[str, Any]]) -> list[bool]:
    """`upsert` of a large batch: ``COPY`` into the stage, one ``INSERT .. SELECT``."""
    merged: dict[str, tuple[int, dict[str, Any]]] = {}  # id -> (first position, row)
    for n, p in enumerate(params):
        first = merged.get(p["id"])
        if first is None:
            merged[p["id"]] = (n, p)
        elif first[1]["namespace"] != p["namespace"]:
            raise conflict(p["id"])
        else:  # the later row's values, the first one's created_at
            merged[p["id"]] = (first[0], {**p, "created_at": first[1]["created_at"]})
    conn.execute(_STAGE)
    with conn.cursor() as cur:
        copy_sql = f"COPY memini_stage ({', '.join(_STAGE_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
        with cur.copy(copy_sql) as cp:
            cp.set_types([_STAGE_TYPES.get(c, "text") for c in _STAGE_COLUMNS])
            for n, p in sorted(merged.values(), key=lambda t: t[0]):
                cp.write_row((n, *(p[c] for c in WRITE_COLUMNS), p["words"]))
        inserted = dict(cur.execute(_FROM_STAGE).fetchall())
    out: list[bool] = []
    seen: set[str] = set()
    for p in params:
        id_ = p["id"]
        if id_ not in inserted:
            raise conflict(id_)
        out.append(bool(inserted[id_]) and id_ not in seen)
        seen.add(id_)
    return out


_SECONDARY: Final = (
    "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
    "WHERE i.indrelid = 'memories'::regclass AND NOT i.indisprimary ORDER BY 1"
)


@contextlib.contextmanager
def deferred_indexes(pool: Pool) -> Iterator[bool]:
    """Drop the secondary indexes of an empty ``memories`` for a bulk load, and build them
    again at the end (see the module docs). Yields whether it did: False when the store
    holds rows (or another load runs), and the load then keeps the indexes as they are.
    """
    with pool.read() as lock_conn:  # the advisory lock is this session's
        got = lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (LOAD_LOCK,)).fetchone()
        if not (got and got[0]):
            yield False
            return
        defs: list[tuple[str, str]] = []
        try:
            with lock_conn.transaction():
                lock_conn.execute("LOCK TABLE memories IN SHARE ROW EXCLUSIVE MODE")
                empty = lock_conn.execute("SELECT NOT EXISTS (SELECT FROM memories)").fetchone()
                defs = lock_conn.execute(_SECONDARY).fetchall() if empty and empty[0] else []
                for name, _ in defs:
                    lock_conn.execute(f"DROP INDEX {name}")
                if defs:
                    lock_conn.execute(
                        "INSERT INTO memini_settings (key, value) VALUES (%s, %s) "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (DEFERRED_KEY, json.dumps([d for _, d in defs])),
                    )
            yield bool(defs)
        finally:
            try:
                if defs:
                    build_deferred(lock_conn)
            finally:
                lock_conn.execute("SELECT pg_advisory_unlock(%s)", (LOAD_LOCK,))


def recover_deferred(conn: psycopg.Connection[Any]) -> None:
    """Build the indexes of a bulk load whose process died: its record is there and its
    lock is free (a load still running holds it, and builds them itself)."""
    if (
        conn.execute("SELECT FROM memini_settings WHERE key = %s", (DEFERRED_KEY,)).fetchone()
        is None
    ):
        return
    got = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOAD_LOCK,)).fetchone()
    if not (got and got[0]):
        return
    try:
        build_deferred(conn)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (LOAD_LOCK,))


def build_deferred(conn: psycopg.Connection[Any]) -> None:
    """Build the indexes a bulk load dropped (recorded under `DEFERRED_KEY`), then forget
    the record and refresh the planner statistics. Run outside a transaction."""
    r = conn.execute("SELECT value FROM memini_settings WHERE key = %s", (DEFERRED_KEY,)).fetchone()
    if r is None:
        return
    defs: list[str] = json.loads(r[0])
    rows = conn.execute("SELECT count(*) FROM memories").fetchone()
    dims = conn.execute("SELECT value FROM memini_settings WHERE key = 'dims'").fetchone()
    if rows and dims:  # an HNSW graph built in memory is several times faster than on disk
        need = int(rows[0]) * (4 * int(dims[0]) + _GRAPH_BYTES) // 1024
        have = conn.execute(
            "SELECT setting::bigint FROM pg_settings WHERE name = 'maintenance_work_mem'"
        ).fetchone()
        if have and need > int(have[0]):
            conn.execute(f"SET maintenance_work_mem = '{min(need, _MAX_BUILD_KB)}kB'")
    for d in defs:
        log.info("building index: %s", d)
        conn.execute(d.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1).encode())
    conn.execute("RESET maintenance_work_mem")
    conn.execute("DELETE FROM memini_settings WHERE key = %s", (DEFERRED_KEY,))
    conn.execute("ANALYZE memories")
