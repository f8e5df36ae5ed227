"""``meta.sqlite3``: namespace links, API keys and the event log, beside the Rust core.

`MetaDB` is the one object the `Store` delegates these API.md section 5 methods to. The SQL
of each area lives in `memini.links`, `memini.keys` and `memini.events`; this module owns
the connection, the lock, the transactions, the schema and its migrations.

Invariants:

* one ``sqlite3`` connection per `MetaDB`, shared by every thread and guarded by one lock:
  each public method runs alone, in one transaction (``BEGIN IMMEDIATE`` for writes, a
  deferred read transaction for reads), so a method's statements see one snapshot and a
  write is all or nothing;
* on disk the file is ``<store dir>/meta.sqlite3`` (plus its ``-wal``/``-shm``), a file the
  Rust core never touches, in WAL mode with ``synchronous=FULL``: a write that returned
  survives a crash or power loss. ``MetaDB.open(None)`` is one in-memory database shared by
  all threads;
* ``PRAGMA user_version`` is the schema version; `MetaDB.open` applies the missing
  migrations of ``_MIGRATIONS`` in one transaction and refuses a newer file;
* after ``close()``, and in a child process forked after ``open()``, every method raises
  `StoreClosedError`; the child never touches the parent's connection.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import datetime
from typing import Any

from memini import events as _events
from memini import keys as _keys
from memini import links as _links
from memini._values import check_int, check_key_hash, check_text, to_micros
from memini.errors import (
    CorruptionError,
    InvalidArgumentError,
    MeminiError,
    StoreClosedError,
)
from memini.limits import check_limit, check_namespace
from memini.types import APIKey, Event, EventFilter, NamespaceLink

__all__ = ["FILE_NAME", "SCHEMA_VERSION", "MetaDB"]

FILE_NAME = "meta.sqlite3"
"""Name of the metadata database inside the store directory."""

_LOG = logging.getLogger("memini")
_BUSY_TIMEOUT_S = 10.0
_APPLICATION_ID = 0x6D656D69  # "memi": marks the file as memini metadata
_MIN_SQLITE = (3, 24, 0)  # INSERT ... ON CONFLICT DO UPDATE

# Each entry upgrades the schema from version i to i + 1; append, never edit a released one.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        f"PRAGMA application_id = {_APPLICATION_ID}",
        """CREATE TABLE links (
            src        TEXT NOT NULL,
            dst        TEXT NOT NULL,
            tiers      TEXT,                      -- NULL = all tiers, else JSON array
            note       TEXT NOT NULL DEFAULT '',
            created_at INTEGER NOT NULL,          -- microseconds since the epoch, UTC
            PRIMARY KEY (src, dst)
        ) WITHOUT ROWID""",
        "CREATE INDEX links_by_dst ON links (dst, src)",
        """CREATE TABLE api_keys (
            name       TEXT NOT NULL PRIMARY KEY,
            hash       TEXT NOT NULL UNIQUE,      -- hex SHA-256 of the secret
            home_ns    TEXT NOT NULL DEFAULT '',
            default_ns TEXT NOT NULL DEFAULT '',
            created_at INTEGER NOT NULL,
            disabled   INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID""",
        """CREATE TABLE events (
            id             INTEGER PRIMARY KEY AUTOINCREMENT,
            op_id          TEXT NOT NULL,
            kind           TEXT NOT NULL,
            namespace      TEXT NOT NULL,
            query          TEXT NOT NULL DEFAULT '',
            memory_id      TEXT NOT NULL DEFAULT '',
            memory_ns      TEXT NOT NULL DEFAULT '',
            memory_tier    TEXT,
            memory_summary TEXT NOT NULL DEFAULT '',
            rank           INTEGER NOT NULL DEFAULT 0,
            score          REAL,
            detail         TEXT NOT NULL DEFAULT '{}',
            created_at     INTEGER NOT NULL,
            query_fold     TEXT,                  -- casefold(query) when it differs, else NULL
            summary_fold   TEXT                   -- casefold(memory_summary) likewise
        )""",
        "CREATE INDEX events_by_time ON events (created_at)",
        "CREATE INDEX events_by_ns_time ON events (namespace, created_at)",
        "CREATE INDEX events_by_op ON events (op_id)",
    ),
    (
        # the query of a served call, once per operation (its rows store query = '')
        """CREATE TABLE event_queries (
            op_id      TEXT NOT NULL PRIMARY KEY,
            query      TEXT NOT NULL,
            query_fold TEXT,                      -- casefold(query) when it differs
            created_at INTEGER NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX event_queries_by_time ON event_queries (created_at)",
    ),
)

SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this code writes (``PRAGMA user_version``)."""

# Connections of MetaDBs closed in a forked child: kept referenced so the child never runs
# sqlite3_close on a connection whose file locks and WAL index belong to the parent.
_FORK_ORPHANS: list[sqlite3.Connection] = []


def _translate(exc: BaseException) -> MeminiError:
    """The memini error for a sqlite3 (or encoding) exception raised by a statement."""
    if isinstance(exc, UnicodeEncodeError):
        return InvalidArgumentError(
            "text must be valid Unicode: it contains a lone surrogate (e.g. from a bad "
            f"decode); encode it properly first ({exc.reason} at {exc.start})"
        )
    if isinstance(exc, OverflowError):
        return InvalidArgumentError(f"an integer does not fit in 64 bits: {exc}")
    code = getattr(exc, "sqlite_errorcode", None)
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return CorruptionError(f"{FILE_NAME} is damaged: {exc}")
    return MeminiError(f"{FILE_NAME}: {exc}")


def _fsync_dir(directory: str) -> None:
    """Make a file created or renamed in ``directory`` durable (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: str) -> None:
    """fsync one file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _configure(conn: sqlite3.Connection, on_disk: bool) -> None:
    """Connection settings; the journal mode is stored in the file, the rest per connection."""
    if on_disk:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            _LOG.warning("%s: WAL unavailable, using journal_mode=%s", FILE_NAME, mode)
        # Reset the WAL to at most this size after a checkpoint (a big prune grows it).
        conn.execute("PRAGMA journal_size_limit = 67108864")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA trusted_schema = OFF")


def _migrate(conn: sqlite3.Connection, migrations: Sequence[Sequence[str]]) -> None:
    """Bring the schema to ``len(migrations)`` in one transaction.

    Raises:
        InvalidArgumentError: The file is newer than this code, or not memini metadata.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if version > len(migrations):
            raise InvalidArgumentError(
                f"{FILE_NAME} has schema version {version}, newer than the {len(migrations)} "
                "this memini understands; upgrade memini to open this store"
            )
        foreign = app_id not in (0, _APPLICATION_ID) or (
            version == 0 and conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
        )
        if foreign:
            raise InvalidArgumentError(
                f"{FILE_NAME} is an SQLite database memini did not create "
                f"(application_id={app_id}, user_version={version}); move it out of the store "
                "directory"
            )
        for target in range(version + 1, len(migrations) + 1):
            if version:
                _LOG.info("%s: migrating schema %d -> %d", FILE_NAME, target - 1, target)
            for statement in migrations[target - 1]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {target}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class MetaDB:
    """The metadata database of one store: links, API keys and the event log.

    Thread-safe: one connection guarded by one lock; every method is one transaction.
    Methods mirror the `Store` methods of API.md section 5 (same names, arguments and
    semantics). Obtain one with `MetaDB.open`.
    """

    shared = False
    """Whether other processes write this database at once. A store directory's database
    has one writer (the directory lock), so its `Store` may cache what it reads."""

    def __init__(self, conn: sqlite3.Connection, path: str | None, created: bool = False) -> None:
        """Wrap an opened, migrated connection (use `MetaDB.open`)."""
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._created = created
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.packs_events = _events.can_unpack(conn)
        """Whether `append_event_rows` takes `memini.events.PackedRows` (SQLite has JSON1)."""

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike[str] | None) -> MetaDB:
        """Open (creating and migrating as needed) the metadata database of a store.

        Args:
            directory: The store directory (created when missing); the database is the
                file ``meta.sqlite3`` inside it. None opens a private in-memory database,
                shared by every thread that uses the returned object.

        Returns:
            The open database.

        Raises:
            InvalidArgumentError: The file has a newer schema than this code understands,
                or is not a memini metadata database.
            CorruptionError: The file is not a readable SQLite database.
            MeminiError: Any other SQLite failure (permissions, disk full, ...).
        """
        if sqlite3.sqlite_version_info < _MIN_SQLITE:
            raise MeminiError(
                f"SQLite {sqlite3.sqlite_version} is too old; memini needs "
                f"{'.'.join(map(str, _MIN_SQLITE))} or newer"
            )
        path: str | None = None
        created = False
        try:
            if directory is None:
                conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            else:
                folder = os.fspath(directory)
                os.makedirs(folder, exist_ok=True)
                path = os.path.join(folder, FILE_NAME)
                created = not os.path.exists(path)
                conn = sqlite3.connect(
                    path,
                    timeout=_BUSY_TIMEOUT_S,
                    check_same_thread=False,
                    isolation_level=None,
                )
        except sqlite3.Error as exc:
            raise _translate(exc) from exc
        except OSError as exc:
            raise MeminiError(f"cannot open {FILE_NAME} in {directory!r}: {exc}") from exc
        try:
            _configure(conn, on_disk=path is not None)
            _migrate(conn, _MIGRATIONS)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc) from exc
            raise
        if created and path is not None:
            _fsync_dir(os.path.dirname(path))
        return cls(conn, path, created)

    @property
    def path(self) -> str | None:
        """The database file, or None for an in-memory database."""
        return self._path

    @property
    def created(self) -> bool:
        """Whether `open` created the file (it did not exist)."""
        return self._created

    @property
    def closed(self) -> bool:
        """Whether `close` was called (or this is a forked child's copy)."""
        return self._conn is None or os.getpid() != self._pid

    def close(self) -> None:
        """Close the database. Idempotent; every other method then raises `StoreClosedError`.

        In a child forked after `open`, this only detaches: the parent's connection is left
        untouched.
        """
        if os.getpid() != self._pid:
            conn, self._conn = self._conn, None
            if conn is not None:
                _FORK_ORPHANS.append(conn)
            return
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __repr__(self) -> str:
        """``MetaDB('<path>')``, ``MetaDB(None)`` in memory, with ``closed`` when closed."""
        state = ", closed" if self.closed else ""
        return f"MetaDB({self._path!r}{state})"

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and yield the live connection, translating database errors."""
        if os.getpid() != self._pid:
            raise StoreClosedError(
                "this store was opened before os.fork(); open it again in the child process"
            )
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreClosedError("the store is closed")
            try:
                yield conn
            except (sqlite3.Error, UnicodeEncodeError, OverflowError) as exc:
                raise _translate(exc) from exc

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock: committed on success, rolled back on any error."""
        with self._locked() as conn:
            conn.execute(begin)
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):  # keep the original error
                        conn.execute("ROLLBACK")
                raise

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        """A read transaction (one snapshot for all the method's statements)."""
        return self._transaction("BEGIN")

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction; durable when it returns."""
        return self._transaction("BEGIN IMMEDIATE")

    def backup(self, dest_directory: str | os.PathLike[str]) -> None:
        """Write a consistent copy of the database to ``dest_directory/meta.sqlite3``.

        Uses SQLite's online backup API. On disk the copy is read through a second
        connection, so writers and readers of this database keep going meanwhile (WAL);
        in memory the copy holds the lock while it runs. The copy is written beside the
        target, fsynced, then renamed into place, so the target is either complete or absent.

        Args:
            dest_directory: Directory of the copy (created when missing).

        Raises:
            InvalidArgumentError: ``dest_directory/meta.sqlite3`` already exists.
            StoreClosedError: The database is closed.
            MeminiError: The copy failed (nothing is left at the target).
        """
        folder = os.fspath(dest_directory)
        with self._locked():
            pass  # raise StoreClosedError before touching the destination
        target = os.path.join(folder, FILE_NAME)
        if os.path.lexists(target):
            raise InvalidArgumentError(f"{target} already exists; back up into a new directory")
        os.makedirs(folder, exist_ok=True)
        partial = target + ".partial"
        for leftover in (partial, partial + "-journal"):
            if os.path.lexists(leftover):
                os.remove(leftover)
        try:
            dest = sqlite3.connect(partial, isolation_level=None)
            try:
                if self._path is None:
                    with self._locked() as conn:
                        conn.backup(dest)
                else:
                    source = sqlite3.connect(self._path, timeout=_BUSY_TIMEOUT_S)
                    try:
                        with self._locked():
                            pass  # still open: the copy must not outlive close()
                        source.backup(dest)
                    finally:
                        source.close()
            finally:
                dest.close()
            _fsync_file(partial)
            os.replace(partial, target)
            _fsync_dir(folder)
        except BaseException as exc:
            for leftover in (partial, partial + "-journal"):
                if os.path.lexists(leftover):
                    os.remove(leftover)
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc) from exc
            if isinstance(exc, OSError):
                raise MeminiError(f"backup of {FILE_NAME} to {folder!r} failed: {exc}") from exc
            raise

    def ping(self) -> None:
        """Check that the database answers.

        Raises:
            StoreClosedError: The database is closed.
            MeminiError: The database fails.
        """
        with self._read() as conn:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()

    def stats(self) -> dict[str, Any]:
        """Row counts, the next event id and file size, for `Store.stats`.

        Returns:
            ``{"links": n, "api_keys": n, "events": n, "next_event_id": n, "bytes": n}``;
            ``next_event_id`` is the id the next appended event gets (above every id handed
            out so far, pruned ones included); ``bytes`` counts the database file and its WAL
            (0 in memory).
        """
        with self._read() as conn:
            counts = {
                table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("links", "api_keys", "events")
            }
            counts["next_event_id"] = _events.next_event_id(conn)
        size = 0
        if self._path is not None:
            for suffix in ("", "-wal"):
                with suppress(OSError):
                    size += os.path.getsize(self._path + suffix)
        return {**counts, "bytes": size}

    def compact(self) -> None:
        """Reclaim the pages of deleted rows (``VACUUM``) and truncate the WAL.

        Holds the lock for the duration (a rewrite of the whole file). Event ids are kept.
        """
        with self._locked() as conn:
            conn.execute("VACUUM")
            if self._path is not None:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    # -- namespace links ---------------------------------------------------------------------

    def put_link(self, link: NamespaceLink) -> None:
        """Insert a link, or overwrite the tiers, note and created_at of the one at (src, dst).

        Args:
            link: The link. ``tiers`` round-trips as given (None = all tiers, order and
                duplicates kept); ``created_at=None`` is stamped now.

        Raises:
            InvalidArgumentError: Empty ``src``/``dst``, an unknown tier, a wrong type.
            StoreClosedError: The database is closed.
        """
        row = _links.prepare_link(link)
        with self._write() as conn:
            _links.put_link(conn, row)

    def delete_link(self, src: str, dst: str) -> bool:
        """Delete the link ``src -> dst``.

        Args:
            src: Source namespace.
            dst: Destination namespace.

        Returns:
            Whether the link existed.

        Raises:
            StoreClosedError: The database is closed.
        """
        src, dst = check_text(src, "src"), check_text(dst, "dst")
        with self._write() as conn:
            return _links.delete_link(conn, src, dst)

    def list_links(self, src: str) -> list[NamespaceLink]:
        """The links going out of ``src``, ordered by ``dst``.

        Args:
            src: Source namespace.

        Returns:
            The links.

        Raises:
            StoreClosedError: The database is closed.
        """
        src = check_text(src, "src")
        with self._read() as conn:
            return _links.list_links(conn, src)

    def list_all_links(self) -> list[NamespaceLink]:
        """Every link, ordered by ``(src, dst)``.

        Returns:
            The links.

        Raises:
            StoreClosedError: The database is closed.
        """
        with self._read() as conn:
            return _links.list_all_links(conn)

    def rename_link_endpoints(self, from_ns: str, to_ns: str) -> None:
        """Rewrite both ends of every link from ``from_ns`` to ``to_ns``, atomically.

        On a collision with a link that already existed at the new key, that link wins;
        links renamed onto the same new key (``from->to`` and ``to->from`` both become
        ``to->to``) collapse to the first of them in original ``(src, dst)`` order.
        ``rename_link_endpoints(x, x)`` is a no-op.

        Args:
            from_ns: The old namespace name.
            to_ns: The new namespace name.

        Raises:
            InvalidArgumentError: An empty or non-string namespace.
            StoreClosedError: The database is closed.
        """
        from_ns = check_text(from_ns, "from_ns", non_empty=True)
        to_ns = check_namespace(to_ns, "to_ns")
        with self._write() as conn:
            _links.rename_link_endpoints(conn, from_ns, to_ns)

    def delete_links_of_namespace(self, namespace: str) -> int:
        """Delete every link with ``namespace`` at either end (``Store.delete_namespace``).

        Idempotent, so ``delete_namespace`` can call it first and be retried after a crash.

        Args:
            namespace: The namespace.

        Returns:
            The number of links deleted.

        Raises:
            StoreClosedError: The database is closed.
        """
        namespace = check_text(namespace, "namespace")
        with self._write() as conn:
            return _links.delete_links_of_namespace(conn, namespace)

    # -- API keys ----------------------------------------------------------------------------

    def put_api_key(self, key: APIKey) -> None:
        """Insert a key, or replace the key with the same name.

        Args:
            key: The key (its ``hash`` is the hex SHA-256 of the secret, see
                `memini.types.hash_api_key`; the secret itself is never stored).
                ``created_at=None`` keeps the stored value (now for a new key).

        Raises:
            ConflictError: Another name already has this hash; nothing is written.
            InvalidArgumentError: An empty name or hash, or a field of the wrong type.
            StoreClosedError: The database is closed.
        """
        row = _keys.prepare_api_key(key)
        with self._write() as conn:
            _keys.put_api_key(conn, row)

    def authenticate(self, secret: str) -> APIKey | None:
        """The enabled key whose hash matches ``hash_api_key(secret)``.

        Args:
            secret: The secret presented by a client.

        Returns:
            The key, or None if the secret is unknown, empty or its key is disabled.

        Raises:
            InvalidArgumentError: ``secret`` is not a str.
            StoreClosedError: The database is closed.
        """
        with self._read() as conn:
            return _keys.authenticate(conn, secret)

    def delete_api_key(self, name: str) -> bool:
        """Delete the key called ``name``.

        Args:
            name: The key's name.

        Returns:
            Whether the key existed.

        Raises:
            StoreClosedError: The database is closed.
        """
        name = check_text(name, "name")
        with self._write() as conn:
            return _keys.delete_api_key(conn, name)

    def list_api_keys(self) -> list[APIKey]:
        """Every key, ordered by name (hashes only; secrets are never stored).

        Returns:
            The keys.

        Raises:
            StoreClosedError: The database is closed.
        """
        with self._read() as conn:
            return _keys.list_api_keys(conn)

    def get_api_key_by_hash(self, hash: str) -> APIKey | None:
        """The key with this hash, disabled or not (an indexed lookup).

        Args:
            hash: The hex SHA-256 of the secret, in either case (hashes are stored
                lowercase); any other str matches no key.

        Returns:
            The key, or None.

        Raises:
            StoreClosedError: The database is closed.
        """
        hash_ = check_key_hash(hash, "hash", lookup=True)
        with self._read() as conn:
            return _keys.get_api_key_by_hash(conn, hash_)

    def rename_api_key_namespaces(self, from_ns: str, to_ns: str) -> None:
        """Repoint ``home_ns`` and ``default_ns`` equal to ``from_ns`` at ``to_ns``.

        Each field is rewritten independently; ``created_at`` is untouched;
        ``rename_api_key_namespaces(x, x)`` is a no-op.

        Args:
            from_ns: The old namespace name.
            to_ns: The new namespace name.

        Raises:
            InvalidArgumentError: An empty or non-string namespace.
            StoreClosedError: The database is closed.
        """
        from_ns = check_text(from_ns, "from_ns", non_empty=True)
        to_ns = check_text(to_ns, "to_ns", non_empty=True)
        with self._write() as conn:
            _keys.rename_api_key_namespaces(conn, from_ns, to_ns)

    # -- event log ---------------------------------------------------------------------------

    def append_events(self, events: Iterable[Event]) -> None:
        """Append a batch of events in one transaction.

        The batch gets contiguous ids in list order, greater than every id handed out
        before (also those of pruned rows). The given objects are not modified: their
        ``id`` is ignored, and ``created_at=None`` is stored as one "now" for the batch.

        Args:
            events: The events.

        Raises:
            InvalidArgumentError: A malformed event (nothing from the batch is stored).
            StoreClosedError: The database is closed.
        """
        self.append_event_rows(_events.prepare_events(events))

    def append_event_rows(
        self,
        rows: Sequence[_events.EventRow],
        queries: Sequence[_events.OpQueryRow] = (),
        packed: _events.PackedRows | None = None,
    ) -> None:
        """`append_events` of rows built by `memini.events.event_row` (checked already),
        with the queries their operations share (`memini._core.search_event_rows`), then
        the ``packed`` ones (the core's, when `packs_events`)."""
        if not rows and (packed is None or packed[2] == 0):
            with self._locked():
                return
        with self._write() as conn:
            _events.append_events(conn, rows, queries, packed)

    def import_events(self, events: Sequence[Event], *, next_id: int = 0) -> None:
        """Insert events under their own ids and created_at, in one transaction (an import).

        Private to the package (``memini import`` restores an exported log with it). Each
        event keeps its ``id``, which must be above every id handed out so far (pruned ones
        included: ids are never reused); ``created_at=None`` is stored as one "now" for the
        batch. The id sequence moves past the imported ids, so later `append_events` get
        higher ones. Rows are validated like `append_events`.

        Args:
            events: The events, each with ``id > 0``; any order.
            next_id: When greater than the id the next appended event would get, make it the
                next id (as if the ids below it had been handed out and pruned), so an
                export's id sequence round-trips; 0 (the default) leaves the sequence.

        Raises:
            ConflictError: An id is taken (it exists, or was handed out before and pruned),
                or two events share one; nothing is written.
            InvalidArgumentError: A malformed event, an id <= 0 or a negative ``next_id``
                (nothing is written).
            StoreClosedError: The database is closed.
        """
        rows = _events.prepare_imported_events(events)
        next_id = check_int(next_id, "next_id", non_negative=True)
        with self._write() as conn:
            _events.import_events(conn, rows, next_id)

    def list_events(self, filter: EventFilter | None = None) -> list[Event]:
        """Events matching ``filter``, newest first (created_at desc, id desc).

        ``namespace`` selects one namespace exactly, else ``namespaces`` any of several;
        ``kinds`` keeps rows of those kinds. ``tiers`` and ``text`` select whole operations:
        every row of an op_id that has a row whose ``memory_tier`` is in ``tiers`` and a row
        whose ``query`` or ``memory_summary`` contains ``text`` (case-insensitive, Unicode
        case folding; ``%`` and ``_`` are literal). ``since`` is inclusive. ``before`` /
        ``before_id`` is a keyset cursor: rows strictly older than ``(before, before_id)``
        in the list order (``before`` alone: created_at < before; ``before_id`` alone:
        id < before_id). ``limit > 0`` caps the rows.

        Args:
            filter: The filter; None lists everything.

        Returns:
            The events, with enum members and aware UTC datetimes.

        Raises:
            InvalidArgumentError: A malformed filter.
            StoreClosedError: The database is closed.
        """
        query = _events.prepare_filter(filter)
        with self._read() as conn:
            return _events.list_events(conn, query)

    def prune_events(self, older_than: datetime | None = None, keep_max: int = 0) -> int:
        """Delete old events, in one transaction.

        First every row with created_at strictly before ``older_than``; then, when
        ``keep_max > 0``, every row but the newest ``keep_max`` across all namespaces.
        Ids are never reused, so cursors stay valid.

        Args:
            older_than: Age cutoff (naive = UTC); None skips the age step.
            keep_max: Rows to keep at most; <= 0 skips the count step.

        Returns:
            The number of rows deleted.

        Raises:
            InvalidArgumentError: A wrong type.
            StoreClosedError: The database is closed.
        """
        cutoff = None if older_than is None else to_micros(older_than, "older_than")
        keep = check_limit(keep_max, "keep_max")
        with self._write() as conn:
            return _events.prune_events(conn, cutoff, keep)

    def explain_list_events(self, filter: EventFilter | None = None) -> list[str]:
        """``EXPLAIN QUERY PLAN`` of what `list_events` runs for ``filter`` (for benchmarks).

        Args:
            filter: The filter.

        Returns:
            The plan lines, each statement introduced by a ``-- `` line.
        """
        query = _events.prepare_filter(filter)
        with self._read() as conn:
            return _events.query_plan(conn, query)
