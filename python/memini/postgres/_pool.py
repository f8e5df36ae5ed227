"""The connections of a PostgreSQL store: the pool, the session each connection runs, the
error translation.

Every connection is in autocommit mode, so a call that is one statement costs one round trip
(no ``BEGIN``/``COMMIT`` around it: `Pool.read`); a call that needs several statements in one
transaction takes `Pool.tx`.

Each connection's session is set once, when it opens (`_configure`):

- ``plan_cache_mode = force_generic_plan``: a statement memini prepares is planned once per
  connection, never re-planned per call. Only the search statements are prepared (psycopg's
  automatic preparation is off), and their SQL fixes the plan they get: which index a search
  uses is decided by the statement memini chooses (`memini.postgres._search`), not by the
  planner's guess about one call's values (the per-call plans of earlier versions picked a
  sequential scan for some keyword queries, at twice the cost).
- ``max_parallel_workers_per_gather = 0``: a search is too short for parallel workers, whose
  start costs milliseconds, and a generic plan would start them even for a branch that a
  one-time filter turns off (measured: 8.4 ms instead of 0.5 for a keyword search).
- ``random_page_cost = 1.1`` (PostgreSQL's default is 4, for spinning disks): the cost of
  a page read out of order, as on an SSD or in the cache. At 4 the HNSW scan of a graph
  walk at ``hnsw.ef_search`` 64 cost the planner more than reading a table of 2,000 rows
  whole and sorting it (611): recall's statement took 2.7 ms of server CPU that way, 1.7-1.9
  with the HNSW scan (benches/bench_postgres.py's rows and queries).
- ``hnsw.iterative_scan = relaxed_order``: a filtered graph walk goes on until it finds
  enough rows; the order it returns them in does not matter, as every hit is rescored.
- ``hnsw.ef_search`` differs between calls (it follows ``k`` and the filter), so `Conn`
  remembers its session's value and `use_ef_search` sets it only when a call needs another.

Vectors travel in pgvector's binary format and load straight into float32 numpy arrays.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import struct
import threading
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import psycopg
import psycopg_pool
from psycopg import pq
from psycopg.adapt import Dumper, Loader
from psycopg.types import TypeInfo
from psycopg.types.string import ByteaBinaryLoader, TextBinaryLoader

from memini.errors import InvalidArgumentError, MeminiError, StoreClosedError, UnavailableError
from memini.postgres._rows import register_text_codec

__all__ = ["Conn", "Pool", "numbered", "stack_vectors", "translate", "use_ef_search"]

_POOL_MAX: Final = 16
DEFAULT_EF_SEARCH: Final = 64
"""``hnsw.ef_search`` of a new session: the default search breadth."""
_SESSION: Final = (
    "SET plan_cache_mode = force_generic_plan; "
    "SET max_parallel_workers_per_gather = 0; "
    "SET random_page_cost = 1.1; "
    "SET hnsw.iterative_scan = relaxed_order; "
    f"SET hnsw.ef_search = {DEFAULT_EF_SEARCH}"
)


_KEEP_ROWS: Final = 1000
"""A result of more rows closes `Conn.rows`'s cursor (it is not kept until the next call)."""


# a named placeholder of memini's SQL, or an escaped percent sign
_PLACEHOLDER: Final = re.compile(r"%\((\w+)\)s|%%")


@functools.lru_cache(maxsize=512)
def _numbered(sql: str) -> tuple[bytes, tuple[str, ...]]:
    """``sql`` with its named placeholders numbered (``$1``, ...; a name used twice keeps
    its number), and the names in their numbers' order."""
    names: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return "%"
        return f"${names.setdefault(m.group(1), len(names) + 1)}"

    return _PLACEHOLDER.sub(number, sql).encode(), tuple(names)


def numbered(sql: str, params: dict[str, Any]) -> tuple[bytes, list[Any]]:
    """A statement of named placeholders (``%(name)s``) and its parameters, as a raw
    cursor (`Conn.search_cursor`) runs them: placeholders numbered, parameters in order.

    The numbering is made once per statement text, where psycopg parses the text of a
    named statement on every call when it is longer than 4,096 characters (recall's:
    0.035 ms of client CPU per call, benches/bench_postgres.py's rows)."""
    text, names = _numbered(sql)
    return text, [params[n] for n in names]


class Conn(psycopg.Connection[Any]):
    """A pooled connection that knows its session's ``hnsw.ef_search``, and runs the
    prepared statements of searches through one cursor of its own (`Conn.rows`)."""

    ef_search: int = DEFAULT_EF_SEARCH
    vector_oid: int = 0
    _cursor: psycopg.RawCursor[Any] | None = None

    def rows(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (named placeholders, `numbered`) run as a prepared
        statement, values in binary, vectors as their bytes (for `stack_vectors`), text in
        its stored form (`memini.postgres._rows.decoded` undoes it for a row of
        ``SELECT``, `memini.postgres._rows.decode_text` for one value).

        One cursor serves every call of the connection: a cursor made per call looks up
        the loader of each result column again (psycopg's client CPU for a 10-row vector
        search: 0.14 ms with a cursor per call, 0.115 with this one)."""
        cur = self._cursor
        if cur is None or cur.closed:
            cur = self._cursor = self.search_cursor()
        cur.execute(*numbered(sql, params), prepare=True)
        rows = cur.fetchall()
        if len(rows) > _KEEP_ROWS:  # the cursor holds its result until the next call
            cur.close()
        return rows

    def search_cursor(self) -> psycopg.RawCursor[Any]:
        """A new raw cursor (``$n`` placeholders, `numbered`) of values in binary, vectors
        as their bytes (`stack_vectors`), text in its stored form, read by psycopg's own
        loader where the codec's (`memini.postgres._rows.register_text_codec`) is a Python
        call per value."""
        cur: psycopg.RawCursor[Any] = psycopg.RawCursor(self)
        cur.format = pq.Format.BINARY
        cur.adapters.register_loader(self.vector_oid, ByteaBinaryLoader)
        cur.adapters.register_loader("text", TextBinaryLoader)
        return cur


def use_ef_search(conn: Conn, ef: int) -> None:
    """Set the session's ``hnsw.ef_search`` to ``ef`` unless it is already (outside a
    transaction: a rollback would undo the setting behind the connection's back)."""
    if conn.ef_search != ef:
        conn.execute(f"SET hnsw.ef_search = {int(ef)}")
        conn.ef_search = ef


_HEAD: Final = struct.Struct(">HH")


class _VectorLoader(Loader):
    """pgvector's binary ``vector`` (uint16 dims, uint16 unused, big-endian float4s) as a
    float32 array."""

    format = pq.Format.BINARY

    def load(self, data: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
        dims = _HEAD.unpack_from(data)[0]
        return np.frombuffer(data, ">f4", dims, 4).astype(np.float32)


class _VectorDumper(Dumper):
    """A float32 array as pgvector's binary ``vector``."""

    format = pq.Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return _HEAD.pack(len(obj), 0) + np.asarray(obj, ">f4").tobytes()


def stack_vectors(raw: list[bytes]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The vectors of `Conn.rows` (pgvector's binary form, of one dims) as the rows of
    one float32 array: one conversion for all of them, where `_VectorLoader` made an
    array per vector and a stack copied them again (a 10-row vector search: 0.024 ms of
    client CPU less)."""
    # each header (uint16 dims, uint16 unused) fills one float's slot: a column dropped
    dims = _HEAD.unpack_from(raw[0])[0]
    arr = np.frombuffer(b"".join(raw), ">f4").reshape(len(raw), 1 + dims)
    return arr[:, 1:].astype(np.float32)


def _register_vector(conn: Conn) -> None:
    info = TypeInfo.fetch(conn, "vector")
    if info is None:  # the migration creates the extension before any pool opens
        raise MeminiError("PostgreSQL: the vector type is missing (CREATE EXTENSION vector)")
    info.register(conn)  # vector[] too
    dumper = type("_Vector", (_VectorDumper,), {"oid": info.oid})
    conn.adapters.register_dumper(np.ndarray, dumper)
    conn.adapters.register_loader(info.oid, _VectorLoader)
    conn.vector_oid = info.oid


# psycopg prepares a statement run this many times; None would also refuse prepare=True
_NEVER: Final = 2**31


def _configure(conn: Conn) -> None:
    conn.prepare_threshold = _NEVER  # only what memini prepares itself (see the module docs)
    _register_vector(conn)
    register_text_codec(conn)
    conn.execute(_SESSION)


def translate(exc: psycopg.Error | psycopg_pool.PoolTimeout) -> MeminiError:
    """The memini error for a psycopg exception."""
    if isinstance(exc, psycopg.errors.ProgramLimitExceeded):  # e.g. an id too long to index
        return InvalidArgumentError(f"a value is too large for PostgreSQL: {exc}")
    if isinstance(exc, psycopg_pool.PoolTimeout | psycopg.OperationalError):
        return UnavailableError(f"PostgreSQL cannot be reached: {exc}")
    if isinstance(exc, psycopg.DataError):
        return InvalidArgumentError(f"PostgreSQL refused a value: {exc}")
    return MeminiError(f"PostgreSQL: {exc}")


class Pool:
    """The shared connection pool of a store's two halves, and their transaction helpers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            url,
            connection_class=Conn,
            min_size=1,
            max_size=_POOL_MAX,
            kwargs={"autocommit": True},
            configure=_configure,
            open=False,
            name="memini",
        )
        self.closed = False
        self.pid = os.getpid()
        self.lock = threading.Lock()

    def open(self) -> None:
        try:
            self.pool.open(wait=True, timeout=30.0)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
            raise translate(e) from None

    @contextlib.contextmanager
    def read(self) -> Iterator[Conn]:
        """A connection outside any transaction: each statement commits on its own."""
        with self._errors(), self.pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def tx(self) -> Iterator[Conn]:
        """A connection inside one transaction (READ COMMITTED), committed at the end."""
        with self._errors(), self.pool.connection() as conn, conn.transaction():
            yield conn

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        if self.closed or os.getpid() != self.pid:
            raise StoreClosedError("store is closed")
        try:
            yield
        except psycopg_pool.PoolClosed:  # closed by another thread meanwhile
            raise StoreClosedError("store is closed") from None
        except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
            if self.closed:
                raise StoreClosedError("store is closed") from None
            raise translate(e) from None

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        if os.getpid() == self.pid:
            self.pool.close()
