"""The PostgreSQL schema of a memini store and its versioned migrations.

One database (or one schema of it, chosen by the connection's ``search_path``) holds one
store: ``memini_settings`` (dims, metric, embed model, schema version), ``memories`` (one row
per memory, its vector in a pgvector column with an HNSW index, its words in a ``tsvector``
with a GIN index), and beside them ``links``, ``api_keys`` and ``events`` (API.md section 5),
so one transaction can touch any of them.

Text columns use the ``"C"`` collation: ids, namespaces and names sort by code point, as in
the embedded store, whatever the database's locale. Timestamps are ``bigint`` microseconds
since the Unix epoch (UTC), the embedded store's unit: exact, and compared as integers.

`migrate` applies the missing migrations in one transaction under an advisory lock, so any
number of processes may open (and create) the same store at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import psycopg

from memini.errors import DimensionMismatchError, InvalidArgumentError

__all__ = ["HNSW_MAX_DIMS", "OPERATORS", "SCHEMA_VERSION", "migrate"]

# pgvector's operator (distance, smaller = nearer) and HNSW operator class per metric
OPERATORS: Final = {"l2": "<->", "cos": "<=>", "ip": "<#>"}
_OPCLASS: Final = {"l2": "vector_l2_ops", "cos": "vector_cosine_ops", "ip": "vector_ip_ops"}
HNSW_MAX_DIMS: Final = 2000
"""pgvector indexes ``vector`` columns of at most 2,000 dims; above it searches scan."""
_LOCK_KEY: Final = 0x6D656D69  # "memi": the advisory lock taken while migrating


def _v1(dims: int, metric: str) -> list[str]:
    stmts = [
        """CREATE TABLE memini_settings (
            key   text COLLATE "C" PRIMARY KEY,
            value text NOT NULL
        )""",
        f"""CREATE TABLE memories (
            id                text COLLATE "C" PRIMARY KEY,
            namespace         text COLLATE "C" NOT NULL,
            seq               bigint GENERATED ALWAYS AS IDENTITY,  -- storage order
            content           text NOT NULL,
            tier              text NOT NULL,
            level             text,
            summary           text NOT NULL,
            metadata          text NOT NULL,      -- the exact JSON text, read back as given
            meta              jsonb NOT NULL,     -- the same, for filters (GIN)
            tags              text[] COLLATE "C" NOT NULL,
            importance        float8 NOT NULL,
            created_at        bigint NOT NULL,
            updated_at        bigint NOT NULL,
            last_accessed_at  bigint NOT NULL,
            access_count      bigint NOT NULL,
            expires_at        bigint,
            superseded_by     text COLLATE "C",
            valid_from        bigint,
            valid_to          bigint,
            confidence        float8,
            linked_memory_ids text[] COLLATE "C" NOT NULL,
            fingerprint       text COLLATE "C" NOT NULL,
            embedding         vector({dims}),
            words             tsvector NOT NULL
        )""",
        'CREATE INDEX memories_ns_id ON memories (namespace, id COLLATE "C")',
        "CREATE INDEX memories_ns_time ON memories (namespace, created_at, seq)",
        "CREATE INDEX memories_ns_fp ON memories (namespace, fingerprint)",
        "CREATE INDEX memories_expiry ON memories (expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX memories_superseded ON memories (namespace, superseded_by) "
        "WHERE superseded_by IS NOT NULL",
        "CREATE INDEX memories_tags ON memories USING gin (tags)",
        "CREATE INDEX memories_meta ON memories USING gin (meta jsonb_path_ops)",
        "CREATE INDEX memories_words ON memories USING gin (words)",
        """CREATE TABLE links (
            src        text COLLATE "C" NOT NULL,
            dst        text COLLATE "C" NOT NULL,
            tiers      text,                      -- NULL = all tiers, else a JSON array
            note       text NOT NULL DEFAULT '',
            created_at bigint NOT NULL,
            PRIMARY KEY (src, dst)
        )""",
        "CREATE INDEX links_by_dst ON links (dst, src)",
        """CREATE TABLE api_keys (
            name       text COLLATE "C" PRIMARY KEY,
            hash       text COLLATE "C" NOT NULL UNIQUE,
            home_ns    text COLLATE "C" NOT NULL DEFAULT '',
            default_ns text COLLATE "C" NOT NULL DEFAULT '',
            created_at bigint NOT NULL,
            disabled   integer NOT NULL DEFAULT 0
        )""",
        """CREATE TABLE events (
            id             bigint PRIMARY KEY,
            op_id          text COLLATE "C" NOT NULL,
            kind           text NOT NULL,
            namespace      text COLLATE "C" NOT NULL,
            query          text NOT NULL DEFAULT '',
            memory_id      text NOT NULL DEFAULT '',
            memory_ns      text NOT NULL DEFAULT '',
            memory_tier    text,
            memory_summary text NOT NULL DEFAULT '',
            rank           bigint NOT NULL DEFAULT 0,
            score          float8,
            detail         text NOT NULL DEFAULT '{}',
            created_at     bigint NOT NULL,
            query_fold     text,
            summary_fold   text
        )""",
        "CREATE INDEX events_by_time ON events (created_at, id)",
        "CREATE INDEX events_by_ns_time ON events (namespace, created_at, id)",
        "CREATE INDEX events_by_op ON events (op_id)",
    ]
    if dims <= HNSW_MAX_DIMS:
        stmts.append(
            f"CREATE INDEX memories_hnsw ON memories USING hnsw (embedding {_OPCLASS[metric]})"
        )
    return stmts


def _v2(dims: int, metric: str) -> list[str]:
    """Vectors stay in the row (``MAIN``: out of line only when nothing else makes it fit):
    under pgvector's default (``EXTERNAL``) a row over ~2 kB moved its vector to TOAST, 12%
    of the rows of the benchmark's package descriptions, and each search reading one paid
    extra page reads. Rows written before keep their layout until rewritten."""
    return ["ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN"]


# Each entry upgrades the schema from version i to i + 1; append, never edit a released one.
_MIGRATIONS: Final[tuple[Callable[[int, str], list[str]], ...]] = (_v1, _v2)
SCHEMA_VERSION: Final = len(_MIGRATIONS)


def _setting(conn: psycopg.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM memini_settings WHERE key = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def migrate(
    conn: psycopg.Connection, dims: int | None, metric: str | None, new_metric: str = "l2"
) -> tuple[int, str]:
    """Create or upgrade the store's tables; return its ``(dims, metric)``.

    Args:
        conn: An autocommit connection (this runs its own transaction).
        dims: Required for a new store; checked against a stored one.
        metric: None = ``new_metric`` for a new store; checked against a stored one.
        new_metric: The metric of a new store opened with ``metric=None``.

    Raises:
        InvalidArgumentError: A new store without ``dims``; a store written by a newer memini.
        DimensionMismatchError: ``dims`` or ``metric`` differ from the stored ones.
    """
    with conn.transaction():
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        exists = conn.execute("SELECT to_regclass('memini_settings') IS NOT NULL").fetchone()
        version = 0
        if exists is not None and exists[0]:
            version = int(_setting(conn, "schema_version") or 0)
        if version > SCHEMA_VERSION:
            raise InvalidArgumentError(
                f"the database holds a memini schema of version {version}, newer than this "
                f"memini's {SCHEMA_VERSION}: upgrade memini to open it"
            )
        if version == 0:
            if dims is None:
                raise InvalidArgumentError(
                    "dims is required to create a new store (e.g. Store.open(url, dims=384))"
                )
            new_metric = metric or new_metric
            for stmt in _v1(dims, new_metric):
                conn.execute(stmt.encode())
            conn.execute(
                "INSERT INTO memini_settings (key, value) VALUES "
                "('dims', %s), ('metric', %s), ('embed_model', ''), ('next_event_id', '1'), "
                "('schema_version', '1')",
                (str(dims), new_metric),
            )
            version = 1
        stored_dims = int(_setting(conn, "dims") or 0)
        stored_metric = _setting(conn, "metric") or "l2"
        for v in range(version, SCHEMA_VERSION):
            for stmt in _MIGRATIONS[v](stored_dims, stored_metric):
                conn.execute(stmt.encode())
            conn.execute(
                "UPDATE memini_settings SET value = %s WHERE key = 'schema_version'", (str(v + 1),)
            )
    if dims is not None and dims != stored_dims:
        raise DimensionMismatchError(
            f"the store has dims={stored_dims}, not dims={dims}: open it with "
            f"dims={stored_dims} (or dims=None), or use another database"
        )
    if metric is not None and metric != stored_metric:
        raise DimensionMismatchError(
            f"the store has metric={stored_metric!r}, not metric={metric!r}: open it with "
            f"metric={stored_metric!r} (or metric=None), or use another database"
        )
    return stored_dims, stored_metric
