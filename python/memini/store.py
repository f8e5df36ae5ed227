"""`Store`: the public facade over the Rust engine (memories) and SQLite (links, keys, events).

The facade validates and normalises arguments (datetimes to UTC microseconds, embeddings to
float32), calls the engine — which releases the GIL for all its work — and converts results
back to the dataclasses of `memini.types`. It reports to `Metrics` only after a change is
durable, through `GuardedMetrics`: a failing report is logged and counted, never raised (the
change is done; a caller seeing an exception would retry a write that succeeded).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import functools
import logging
import math
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, Self, TypeVar
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import numpy.typing as npt

from memini import _convert as cv
from memini import _core, limits
from memini import _values as vals
from memini._core import Engine
from memini._sqlite import MetaDB
from memini.embed import Embedder, check_vectors
from memini.errors import DimensionMismatchError, InvalidArgumentError, StoreClosedError
from memini.metrics import GuardedMetrics, Metrics, NullMetrics, check_metrics
from memini.types import (
    APIKey,
    Event,
    EventFilter,
    Filter,
    Memory,
    NamespaceActivity,
    NamespaceLink,
    Recalled,
    Scored,
    Tier,
)

if TYPE_CHECKING:  # memini.postgres imports psycopg: only Store.open of a URL loads it
    from memini._core import FilterSpec
    from memini.events import EventRow, OpQueryRow, PackedRows
    from memini.postgres import PgEngine, PgMeta

__all__ = ["Store"]


def is_postgres_url(path: object) -> bool:
    """Whether a store location (``Store.open``'s ``path``, ``--store``) is a PostgreSQL URL
    (``postgresql://`` or ``postgres://``) rather than a directory."""
    return isinstance(path, str) and path.startswith(("postgresql://", "postgres://"))


def shown_location(path: object) -> str:
    """A store location as messages, logs and ``repr`` show it: a PostgreSQL URL without its
    password (``user:***@host``, ``password=***`` in the query), a directory as it is."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if not is_postgres_url(text):
        return text
    parts = urlsplit(text)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(
        f"{k}=***" if k.lower() == "password" else f"{k}={v}" if sep else k
        for k, sep, v in (pair.partition("=") for pair in parts.query.split("&") if pair)
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


_METRICS_MEMORY_TYPES = frozenset({"decision", "preference", "problem"})
_METRIC_NAMES = ("l2", "cos", "ip")
_MAX_DIMS = 65_536
# Far above any useful breadth (the graph search visits at most every vector anyway); keeps
# the core's arithmetic on it (multiples of the breadth) well inside 64 bits.
_MAX_SEARCH_BREADTH = 1 << 24
# store settings kept with the rows (Engine.setting): the store has a meta.sqlite3 / when one
# was found missing and recreated empty
_META_DB = "meta_db"
_META_DB_LOST = "meta_db_lost"
# recall (API.md section 6): defaults measured on locomo-dev (see Store.recall)
# recall's defaults: the core's (the HTTP front answers a recall with them too)
_DEFAULT_FUSION: Literal["convex", "rrf"] = "convex"
_DEFAULT_ALPHA: float = _core.RECALL_ALPHA
_DEFAULT_CONTEXT: float = _core.RECALL_CONTEXT
_DEFAULT_KEYWORD_HALF: float = _core.RECALL_KEYWORD_HALF
_DEFAULT_RRF_K: float = _core.RECALL_RRF_K
_MIN_POOL: int = _core.RECALL_MIN_POOL
_LINK_DEFAULT_TIERS = (Tier.SEMANTIC, Tier.PROCEDURAL)
# namespace lists whose link lookups recall(linked=True) keeps (see Store._linked_sources)
_LINKED_CACHE = 256

# Stores opened in this process, closed in a forked child (the parent keeps its lock).
_open_stores: weakref.WeakSet[Store] = weakref.WeakSet()
_open_lock = threading.Lock()


def _after_fork_in_child() -> None:
    for s in list(_open_stores):
        s._forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_at_exit() -> None:
    """Close the stores still open when the interpreter exits, as `close()` would: indexes
    checkpointed (no rebuild on the next open) while Python can still take the core's logs."""
    for s in list(_open_stores):
        try:
            s.close()
        except Exception:  # exiting anyway; the rows are durable already
            logging.getLogger(__name__).exception("closing %r at exit", s)


atexit.register(_close_at_exit)


def _memory_type(memory: Memory) -> str:
    mt = memory.metadata.get("memory_type") if isinstance(memory.metadata, dict) else None
    return mt if isinstance(mt, str) and mt in _METRICS_MEMORY_TYPES else ""


def _namespaces(namespace: object) -> list[str]:
    """recall's ``namespace``: one str, or a non-empty sequence of at most
    `limits.MAX_NAMESPACES` (repeats once)."""
    if isinstance(namespace, str):
        return [_text(namespace, "namespace")]
    names = _texts(namespace, "namespace")
    if not names:
        raise InvalidArgumentError("namespace list is empty: name at least one namespace")
    if len(names) > limits.MAX_NAMESPACES:
        raise InvalidArgumentError(
            f"namespace list must be at most {limits.MAX_NAMESPACES} namespaces, "
            f"got {len(names)} (split the call, or link namespaces and use linked=True)"
        )
    unique = list(dict.fromkeys(names))
    return unique


def _limit(value: object, what: str) -> int:
    return limits.check_limit(value, what)


def _text(value: object, what: str) -> str:
    return vals.check_text(value, what)


def _texts(values: object, what: str) -> list[str]:
    return vals.check_text_list(values, what)


def _dir(path: object, what: str) -> Path:
    """A directory argument as an absolute Path: str or os.PathLike of str, valid Unicode,
    not empty, and neither it nor an ancestor an existing non-directory (a file)."""
    if not isinstance(path, str | os.PathLike):
        raise InvalidArgumentError(
            f"{what} must be a str or os.PathLike, got {type(path).__name__}"
        )
    p = os.fspath(path)
    if not isinstance(p, str):
        raise InvalidArgumentError(f"{what} must be a text path, not bytes (decode it first)")
    if not _text(p, what):
        raise InvalidArgumentError(
            f"{what} is empty: name a directory (write '.' for the current one; "
            "Store.open(None, ...) opens an in-memory store)"
        )
    if "\x00" in p:
        raise InvalidArgumentError(f"{what} contains a NUL character, which no file system allows")
    full = Path(p).absolute()
    for d in (full, *full.parents):
        try:
            mode = os.stat(d).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue  # missing: look at its parent
        except OSError:
            break  # e.g. a name too long: the core reports it
        if not stat.S_ISDIR(mode):
            where = "it" if d == full else f"{str(d)!r}"
            raise InvalidArgumentError(
                f"{what} {str(full)!r} must be a directory, but {where} is an existing file "
                "(choose a directory path)"
            )
        break
    return full


def _pair_meta_db(engine: Engine, meta: MetaDB, path: Path) -> None:
    """The rows remember that the store has a ``meta.sqlite3``. When a later open finds it
    missing (and so recreates it empty), the loss is logged and recorded with the rows, for
    ``stats()["meta_db_lost"]`` and ``memini check`` to report until acknowledged."""
    if engine.setting(_META_DB) is None:
        engine.set_setting(_META_DB, "present")
    elif meta.created:
        engine.set_setting(_META_DB_LOST, datetime.now(UTC).isoformat(timespec="seconds"))
        logging.getLogger("memini").warning(
            "%s was missing and is recreated empty: the links, API keys and events stored "
            "before are lost (restore the file from a backup); the memories are intact",
            path / "meta.sqlite3",
        )


def _embedder_dims(embedder: object, dims: int | None) -> int:
    """The dims of a store opened with ``embedder`` (checked to be an `Embedder`)."""
    if not callable(getattr(embedder, "embed", None)) or not hasattr(embedder, "model"):
        raise InvalidArgumentError(
            f"embedder must have model, dims and embed(texts) (see memini.embed.Embedder), "
            f"got {type(embedder).__name__}"
        )
    e_dims = getattr(embedder, "dims", None)
    if not isinstance(embedder.model, str) or not embedder.model:
        raise InvalidArgumentError("embedder.model must be a non-empty str")
    if isinstance(e_dims, bool) or not isinstance(e_dims, int) or not 1 <= e_dims <= _MAX_DIMS:
        raise InvalidArgumentError(f"embedder.dims must be an int >= 1, got {e_dims!r}")
    if dims is not None and dims != e_dims:
        raise DimensionMismatchError(
            f"dims={dims} but the embedder {embedder.model!r} makes {e_dims}-d vectors "
            "(drop dims=: it comes from the embedder)"
        )
    return e_dims


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; False where the OS cannot say (e.g. a name too long, which
    the core then reports in its own words)."""
    try:
        return path.exists()
    except OSError:
        return False


def _embedder_metric(embedder: object) -> str:
    """The metric of a new store opened with ``embedder`` and no ``metric``: the embedder's
    ``metric`` attribute when it has one, else ``"cos"`` (text embedding models are compared
    by cosine; all-MiniLM-L6-v2's vectors are unit length)."""
    metric = getattr(embedder, "metric", "cos")
    if metric not in _METRIC_NAMES:
        raise InvalidArgumentError(
            f"embedder.metric must be one of {', '.join(_METRIC_NAMES)}, got {metric!r}"
        )
    return str(metric)


_E = TypeVar("_E")


def _embedder_fits(embedder: Embedder | None, asked_dims: int | None, open: Callable[[], _E]) -> _E:
    """``open()``, with the dims mismatch of an embedder whose vectors the store cannot hold
    told as such (the store's own message advises ``dims=``, which the caller never gave)."""
    try:
        return open()
    except DimensionMismatchError as e:
        if embedder is None or asked_dims is not None:
            raise
        stored = str(e).split(" (", 1)[0]
        raise DimensionMismatchError(
            f"the embedder {embedder.model!r} makes {embedder.dims}-d vectors, which this "
            f"store cannot hold ({stored}): open it with an embedder of the store's own model "
            "(Store.embed_model()), or copy the memories into a new store"
        ) from None


def _recorded_embedder(engine: Engine | PgEngine) -> Embedder | None:
    """The embedder of a store opened without one: the built-in local model when the store
    records it and its weights are installed, else None (the store then refuses text that
    would be stored without a vector, see `Store._embed_rows`)."""
    from memini.embed import LocalEmbedder

    model = engine.embed_model()
    if not model:
        return None
    try:
        local = LocalEmbedder(model)
    except InvalidArgumentError:  # another model, or the weights are not installed
        return None
    if local.dims != engine.dims:
        return None
    logging.getLogger("memini").info("embedding text with the store's model %s", local.model)
    return local


def _pair_embed_model(engine: Engine | PgEngine, model: str) -> None:
    """Record ``model`` as the store's embed_model, or refuse a store recording another."""
    stored = engine.embed_model()
    if not stored:
        engine.set_embed_model(model)
    elif stored != model:
        raise DimensionMismatchError(
            f"the store's vectors come from embed_model {stored!r}, not from the embedder's "
            f"{model!r}: open it with an embedder of {stored!r}, or copy the memories into "
            "a new store re-embedded with the new model"
        )


def _now(now: datetime | None, what: str = "now") -> int:
    return vals.now_micros() if now is None else vals.to_micros(now, what)


_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")  # Store, or a remote client's class (memini.client)


def _key_fields_are_not_updates(
    method: Callable[Concatenate[_S, _P], _R],
) -> Callable[Concatenate[_S, _P], _R]:
    """For ``Store.update(self, namespace, id, **fields)``: ``namespace=``/``id=`` passed as
    a *field* while the key is already given positionally is an `InvalidArgumentError`
    naming the right tool, not Python's "got multiple values for argument" TypeError."""

    @functools.wraps(method)
    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        for name in ("namespace", "id")[: len(args)]:
            if name in kwargs:
                raise cv.not_updatable(name)
        return method(self, *args, **kwargs)

    return wrapper


class Store:
    """An open memini store: memories with vector and keyword search, plus namespace links,
    API keys and an event log.

    Open with `Store.open`; use as a context manager or call `close`. Safe to share between
    threads: reads run in parallel without the GIL, writes are serialised and group-committed.
    Every write method returns only once its change is durable.
    """

    def __init__(
        self,
        engine: Engine | PgEngine,
        meta: MetaDB | PgMeta,
        metrics: Metrics,
        path: Path | None,
        embedder: Embedder | None = None,
    ) -> None:
        """Internal: use `Store.open`."""
        self._engine = engine
        self._embedder = embedder
        # without an embedder: the model the store's vectors come from ("" = none recorded)
        self._needs_vectors_of = ""
        self._meta = meta
        self._metrics = GuardedMetrics(metrics)
        self._path = path
        self._dims = engine.dims
        self._forked = False
        self._closed = False
        # what `recall(linked=True)` reads of the links, per namespace list (a SQLite query
        # per namespace cost ~15 µs a link, GIL held); emptied by every link write, which
        # only this Store makes (the directory lock keeps other processes out); not kept
        # when the meta database is shared with other processes (PostgreSQL)
        self._linked: dict[tuple[str, ...], builtins.list[tuple[str, builtins.list[str]]]] = {}
        self._links_gen = 0
        self._links_lock = threading.Lock()
        with _open_lock:
            _open_stores.add(self)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None,
        *,
        dims: int | None = None,
        metric: Literal["l2", "cos", "ip"] | None = None,
        metrics: Metrics | None = None,
        search_breadth: int | None = None,
        embedder: Embedder | None = None,
    ) -> Store:
        """Open (or create) the store in directory ``path``; ``None`` = ephemeral, in memory;
        a ``postgresql://`` URL = the store in that PostgreSQL database (`memini.postgres`).

        Args:
            path: Store directory, created (with its parents) when missing. Must not be
                ``""`` (write ``"."`` for the current directory) nor an existing file. Or a
                ``postgresql://`` / ``postgres://`` URL (``pip install 'memini[postgres]'``,
                pgvector >= 0.8 on the server): the same API on PostgreSQL, which any number
                of processes may open at once (no lock; see the README for what differs).
            dims: Vector dimensions; required for a new store, checked on reopen.
            metric: ``"l2"`` (default for a new store), ``"cos"`` or ``"ip"``; checked on reopen.
            metrics: Receives counters after durable changes (e.g. `PrometheusMetrics`);
                any object with every method of the `Metrics` protocol, checked here. A
                report that raises is logged on the ``memini`` logger and counted in
                ``stats()["metrics_errors"]``, never raised from the write.
            search_breadth: How many candidates each approximate (HNSW graph) vector search
                keeps while walking the graph (usearch's ``expansion_search``); None = the
                default, 64. The graph is only used in namespaces of 2,048 vectors or more
                under filters passing more than 1,024 rows; smaller cases are exact scans,
                which this does not affect. The trade-off: a larger breadth visits more of
                the graph, so recall rises toward 1.0 while each search takes longer; a
                smaller one is faster and misses more true neighbours. Measured on 99k
                384-d cos rows, k=10 (``benches/report/compare.md``), recall@10 @ q/s:
                16: 0.854 @ 3,573; 32: 0.927 @ 2,525; 64: 0.969 @ 1,730;
                128: 0.987 @ 1,087; 256: 0.995 @ 627. A search for ``k`` results always
                keeps at least ``k`` candidates. Between 1 and 2**24; a setting of this
                open, not stored in the store.
            embedder: Turns text into vectors (`memini.embed.LocalEmbedder`,
                `memini.embed.OpenAIEmbedder` or any `memini.embed.Embedder`). The store's
                dims come from it, and its ``model`` is the store's ``embed_model``: a store
                with none recorded yet (a new one, or one made without an embedder) records
                it; a store recording another model is refused, so vectors of two models
                never mix. `upsert`, `upsert_many` and `update` then embed the ``content``
                of rows given no embedding (one ``embed`` call per `upsert_many`; a row
                whose content is blank stays keyword-only), and `recall` embeds its query.

        Raises:
            InvalidArgumentError: Missing/invalid dims, an unknown metric, an empty path or
                one that is a file, a ``metrics`` object lacking protocol methods (named),
                or a ``search_breadth`` out of range.
            UnavailableError: The PostgreSQL server of a URL cannot be reached.
            DimensionMismatchError: dims/metric differ from the stored ones; ``dims`` differs
                from the embedder's; the store records another embed_model than the
                embedder's ``model``.
            StoreLockedError: Another live Store holds the directory.
        """
        asked_dims = dims
        new_metric = "l2"
        if embedder is not None:
            dims = _embedder_dims(embedder, dims)
            new_metric = _embedder_metric(embedder)
        if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int)):
            raise InvalidArgumentError(f"dims must be an int >= 1, got {type(dims).__name__}")
        if dims is not None and not 1 <= dims <= _MAX_DIMS:
            raise InvalidArgumentError(f"dims must be between 1 and {_MAX_DIMS}, got {dims}")
        if metric is not None and metric not in _METRIC_NAMES:
            raise InvalidArgumentError(
                f"unknown metric {metric!r} (use one of: {', '.join(_METRIC_NAMES)})"
            )
        url = path if isinstance(path, str) and is_postgres_url(path) else None
        p = None if path is None or url is not None else _dir(path, "path")
        breadth = None
        if search_breadth is not None:
            breadth = vals.check_int(search_breadth, "search_breadth", saturate=True)
            if not 1 <= breadth <= _MAX_SEARCH_BREADTH:
                raise InvalidArgumentError(
                    f"search_breadth must be between 1 and 2**24, got {breadth} "
                    "(None = the default, 64)"
                )
        checked = NullMetrics() if metrics is None else check_metrics(metrics)
        engine: Engine | PgEngine
        meta: MetaDB | PgMeta
        if url is not None:  # PostgreSQL (memini.postgres): psycopg is imported only here
            from memini.postgres import open_backend

            engine, meta = _embedder_fits(
                embedder, asked_dims, lambda: open_backend(url, dims, metric, new_metric)
            )
        else:
            fresh = p is None or not _exists(p / "rows.redb")
            engine = _embedder_fits(
                embedder,
                asked_dims,
                lambda: Engine(
                    None if p is None else str(p), dims, metric or (new_metric if fresh else None)
                ),
            )
        try:
            if breadth is not None:
                engine.set_search_breadth(breadth)
            if url is None:
                meta = MetaDB.open(None if p is None else str(p))
        except BaseException:
            engine.close()
            raise
        try:
            if p is not None:
                assert isinstance(engine, Engine) and isinstance(meta, MetaDB)
                _pair_meta_db(engine, meta, p)
            if embedder is not None:
                _pair_embed_model(engine, embedder.model)
            else:
                embedder = _recorded_embedder(engine)
        except BaseException:
            meta.close()
            engine.close()
            raise
        store = cls(engine, meta, checked, p, embedder)
        if embedder is None:
            store._needs_vectors_of = engine.embed_model()
        return store

    def _check(self) -> None:
        if self._forked or self._closed:
            raise StoreClosedError(
                "store is closed"
                if self._closed
                else "store was opened before fork()"
                " and is closed in this child process; open it in one owning process"
            )

    def close(self) -> None:
        """Checkpoint the indexes and release the store. Idempotent; waits for in-flight calls.

        In a process forked from the owner this is a no-op (the parent keeps the lock).
        """
        if self._forked or self._closed:
            return
        self._closed = True
        try:
            self._meta.close()
        finally:
            self._engine.close()

    def __enter__(self) -> Self:
        self._check()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        if isinstance(self._engine, Engine):
            where = "memory" if self._path is None else str(self._path)
        else:
            where = self._engine.url
        state = "closed" if self._closed or self._forked else "open"
        return f"<memini.Store {where} dims={self._dims} {state}>"

    def ping(self) -> None:
        """Raise `StoreClosedError` if the store is closed; else do nothing."""
        self._check()
        self._engine.ping()
        self._meta.ping()

    def stats(self) -> dict[str, Any]:
        """Counts per namespace and tier, index sizes and bytes on disk (free-form).

        Always holds ``"metrics_errors"``: how many reports to the ``metrics`` object raised
        since the store was opened (each logged on the ``memini`` logger, none raised), and
        ``"checkpoint_failures"`` / ``"last_checkpoint_error"``: background index checkpoints
        that failed since the open and the last one's error (also logged; the rows hold every
        change, so nothing is lost, and the next checkpoint retries); ``"keyword_failures"`` /
        ``"last_keyword_error"``: the same for the keyword index's background folds (the
        changes they would fold stay searchable, and the next fold retries). ``"keyword_merging"``:
        the keyword index's segments are still to be merged into one once writes pause (~2 s
        after the last), or merging; searches are at their fastest once it is False.
        """
        self._check()
        out = self._engine.stats()
        out["meta"] = self._meta.stats()
        out["metrics_errors"] = self._metrics.errors
        out["meta_db_lost"] = self._engine.setting(_META_DB_LOST) or None
        return out

    def acknowledge_meta_db_loss(self) -> None:
        """Forget a recorded loss of ``meta.sqlite3`` (see ``stats()["meta_db_lost"]``).

        For ``memini check --repair``, once the loss is known: links, API keys and events
        from before it are gone for good unless the file is restored from a backup.
        """
        self._check()
        if self._engine.setting(_META_DB_LOST) is not None:
            self._engine.set_setting(_META_DB_LOST, "")

    def backup(self, path: str | os.PathLike[str]) -> None:
        """Write a consistent snapshot of the store into the new directory ``path``.

        The snapshot (memories, vectors, links, keys, events, settings) opens with
        `Store.open`. Readers are not blocked; writers wait while the rows are copied.

        Raises:
            InvalidArgumentError: ``path`` already exists.
        """
        self._check()
        dest = _dir(path, "backup path")
        self._engine.backup(str(dest))
        self._meta.backup(str(dest))

    def compact(self) -> None:
        """Reclaim the space of deleted rows (index tombstones, row-store free pages)."""
        self._check()
        self._engine.compact()
        self._meta.compact()

    @contextlib.contextmanager
    def _bulk_load(self) -> Iterator[bool]:
        """Internal, for ``memini import``: a load of many memories. Yields whether the
        store held no memory at the start. On PostgreSQL an empty store's secondary indexes
        are dropped for the load and built once when it ends (see
        `memini.postgres._bulk.deferred_indexes`); the embedded store changes nothing."""
        self._check()
        if isinstance(self._engine, Engine):
            yield not self._engine.list_namespaces()
            return
        with self._engine.bulk_load() as empty:
            yield empty

    # ------------------------------------------------------------------ memories: writes

    def _report_upsert(self, inserted: bool, memory: Memory) -> None:
        op = "insert" if inserted else "update"
        self._metrics.upsert(op, str(memory.tier), _memory_type(memory))

    def upsert(self, memory: Memory) -> None:
        """Insert, or replace by id within its namespace (see API.md for every rule).

        Raises:
            ConflictError: The id lives in another namespace (nothing written).
            DimensionMismatchError: Embedding of the wrong length.
            InvalidArgumentError: Any invalid field (NaN/inf embedding, non-JSON metadata, ...).
        """
        self._check()
        row = cv.memory_to_row(memory, self._dims)
        self._embed_rows([row], [memory.embedding is not None])
        (inserted,) = self._engine.upsert_many([row])
        self._report_upsert(inserted, memory)

    def upsert_many(self, memories: Iterable[Memory]) -> int:
        """Upsert every memory in one atomic, durable commit (all or nothing).

        Returns:
            ``len(memories)``.
        """
        self._check()
        if not isinstance(memories, Iterable) or isinstance(memories, str | bytes | Memory):
            raise InvalidArgumentError(
                f"memories must be an iterable of Memory, got {type(memories).__name__}"
            )
        ms = list(memories)
        self._upsert_rows([cv.memory_to_row(m, self._dims) for m in ms], ms)
        return len(ms)

    def _upsert_rows(self, rows: builtins.list[dict[str, Any]], ms: Sequence[Memory]) -> None:
        """`upsert_many` of memories already validated into ``rows``
        (`memini._convert.memory_to_row` with this store's dims; ``memini import`` checks
        each line as it reads it, and writes the rows it made)."""
        self._check()
        self._embed_rows(rows, [m.embedding is not None for m in ms])
        inserted = self._engine.upsert_many(rows)
        for ins, m in zip(inserted, ms, strict=True):
            self._report_upsert(ins, m)

    @_key_fields_are_not_updates
    def update(self, /, namespace: str, id: str, **fields: Any) -> Memory:
        """Change only the named fields of a memory; return the stored row.

        ``embedding=`` replaces the vector (``None`` removes it; omitting keeps it);
        ``metadata=`` replaces the whole dict; ``updated_at`` is stamped now unless given.
        Fields are validated as in `upsert`; a rejected update changes nothing.

        Raises:
            NotFoundError: No such memory in ``namespace``.
            InvalidArgumentError: A malformed value, an unknown field, or an attempt to
                change ``id`` (upsert a copy under a new id), ``namespace`` (use
                `reassign`) or ``created_at``; ``superseded_by`` equal to ``id``.
        """
        self._check()
        ns, key = _text(namespace, "namespace"), _text(id, "id")
        row = cv.fields_to_row(fields, self._dims, id=key)
        if (
            "content" in row
            and "embedding" not in row
            and (self._embedder is not None or self._needs_vectors_of)
        ):
            # the stored vector was of the old content: embed the new one (blank: none),
            # or refuse without an embedder
            row["embedding"] = None
            self._embed_rows([row], [False])
        stored = self._engine.update(ns, key, row)
        self._metrics.upsert("update", str(stored.tier), _memory_type(stored))
        return stored

    def _embed_rows(self, rows: builtins.list[dict[str, Any]], given: Sequence[bool]) -> None:
        """With an embedder, fill ``embedding`` of the rows that have none from their content
        (blank content stays keyword-only), in one ``embed`` call. The served front applies
        the same rule to the memories it embeds itself (``to_embed`` in rust/serve/writes.rs;
        ``test_fuzz_the_front_embeds_the_rows_the_app_embeds`` checks that they agree).

        Without one, a store that recorded an embed model before this open refuses a row
        whose text would be stored with no vector unasked (``given[i]``: row i's embedding
        was passed; an empty one asks for a keyword-only row): recall by meaning would never
        find it.

        Raises:
            InvalidArgumentError: Such a row, naming the fix.
        """
        if self._embedder is None:
            model = self._needs_vectors_of
            for r, asked in zip(rows, given, strict=True):
                if model and not asked and r.get("embedding") is None and r["content"].strip():
                    raise InvalidArgumentError(
                        f"this store's vectors come from {model!r}, and it was opened without "
                        "an embedder: open it with embedder= (memini.embed.LocalEmbedder() for "
                        "all-MiniLM-L6-v2, after pip install 'memini[embed]'), or pass the "
                        "memory's embedding (embedding=[] stores a keyword-only row)"
                    )
            return
        todo = [r for r in rows if r.get("embedding") is None and r["content"].strip()]
        if not todo:
            return
        vectors = check_vectors(
            self._embedder.embed([r["content"] for r in todo]), len(todo), self._embedder
        )
        for r, v in zip(todo, vectors, strict=True):
            r["embedding"] = v

    def _embed_query(self, text: str) -> npt.NDArray[np.float32] | None:
        """The embedder's vector of a query, None without an embedder or for a blank query
        (the served front recalls keyword-only as this does, told at start whether the store
        has an embedder: `memini.server.Server`)."""
        if self._embedder is None or not text.strip():
            return None
        vectors = check_vectors(self._embedder.embed([text]), 1, self._embedder)
        vector: npt.NDArray[np.float32] = vectors[0]
        return vector

    def delete(self, namespace: str, id: str) -> None:
        """Delete a memory.

        Raises:
            NotFoundError: No such memory in ``namespace``.
        """
        self._check()
        self._engine.delete(_text(namespace, "namespace"), _text(id, "id"))
        self._metrics.delete()

    def set_superseded(self, namespace: str, id: str, superseded_by: str) -> None:
        """Tombstone a memory; stamps ``valid_to`` with the wall clock unless already set.

        Raises:
            NotFoundError: No such memory in ``namespace``.
            InvalidArgumentError: ``superseded_by == id`` (a memory cannot replace itself).
        """
        self._check()
        key, by = _text(id, "id"), _text(superseded_by, "superseded_by")
        cv.check_supersession(key, by)
        self._engine.set_superseded(_text(namespace, "namespace"), key, by, vals.now_micros())
        self._metrics.soft_delete()

    def restore(self, namespace: str, id: str) -> None:
        """Clear ``superseded_by`` and ``valid_to``."""
        self._check()
        self._engine.restore(_text(namespace, "namespace"), _text(id, "id"))

    def reinforce(
        self,
        namespace: str,
        ids: Sequence[str],
        accessed_at: datetime,
        new_expiry: datetime | None = None,
    ) -> None:
        """Count an access: ``access_count += 1`` and ``last_accessed_at = accessed_at``.

        ``new_expiry`` replaces ``expires_at`` only on rows that already expire; missing ids
        are ignored.
        """
        self._check()
        self._engine.reinforce(
            _text(namespace, "namespace"),
            _texts(ids, "ids"),
            vals.to_micros(accessed_at, "accessed_at"),
            vals.opt_micros(new_expiry, "new_expiry"),
        )

    def delete_if_expired_before(self, namespace: str, id: str, cutoff: datetime) -> None:
        """Delete the memory only if its ``expires_at <= cutoff``.

        Raises:
            NotFoundError: Absent, or not expiring by ``cutoff`` (e.g. reinforced meanwhile).
        """
        self._check()
        deleted = self._engine.delete_if_expired_before(
            _text(namespace, "namespace"), _text(id, "id"), vals.to_micros(cutoff, "cutoff")
        )
        self._metrics.sweep_expired(deleted.tier)

    def sweep_expired(self, now: datetime | None = None, limit: int = 0) -> int:
        """Delete rows with ``expires_at <= now`` across namespaces (``limit <= 0``: all).

        Returns:
            Rows deleted.
        """
        self._check()
        tiers = self._engine.sweep_expired(_now(now), _limit(limit, "limit"))
        for t in tiers:
            self._metrics.sweep_expired(t)
        return len(tiers)

    def delete_namespace(self, namespace: str) -> int:
        """Delete every memory of ``namespace`` and the links with it at either end.

        Links go first, then memories; a retry after a crash finishes the job.

        Returns:
            Memories deleted.
        """
        self._check()
        ns = _text(namespace, "namespace")
        try:
            self._meta.delete_links_of_namespace(ns)
        finally:
            self._links_changed()
        tiers = self._engine.delete_namespace(ns)
        for _ in tiers:
            self._metrics.delete()
        return len(tiers)

    def reassign(self, from_ns: str, ids: Sequence[str], to_ns: str) -> int:
        """Move memories to another namespace (vectors and keyword entries move too).

        Returns:
            Rows moved; absent ids are skipped; ``from_ns == to_ns`` moves nothing.
        """
        self._check()
        return self._engine.reassign(
            _text(from_ns, "from_ns"), _texts(ids, "ids"), limits.check_namespace(to_ns, "to_ns")
        )

    def retier(
        self, namespace: str, id: str, tier: Tier | str, expires_at: datetime | None
    ) -> None:
        """Move a memory to another tier; ``expires_at=None`` clears its expiry."""
        self._check()
        self._engine.retier(
            _text(namespace, "namespace"),
            _text(id, "id"),
            vals.coerce_enum(Tier, tier, "tier").value,
            vals.opt_micros(expires_at, "expires_at"),
        )

    def set_confidence(self, namespace: str, id: str, confidence: float, now: datetime) -> None:
        """Set ``confidence`` (a float in [0, 1]) and ``updated_at = now``.

        Raises:
            NotFoundError: Missing, or its validity has ended (``valid_to <= now``).
            InvalidArgumentError: ``confidence`` outside [0, 1] or not finite.
        """
        self._check()
        self._engine.set_confidence(
            _text(namespace, "namespace"),
            _text(id, "id"),
            vals.check_confidence(confidence),
            vals.to_micros(now, "now"),
        )

    def mark_contradicted(
        self,
        namespace: str,
        id: str,
        contradicted_by: str,
        confidence: float,
        now: datetime,
    ) -> None:
        """Record a contradiction: metadata ``contradicted_by`` and
        ``contradicted_prev_confidence``, the new confidence (a float in [0, 1]),
        ``valid_to = now`` unless set, and ``updated_at = now``.

        Raises:
            NotFoundError: No such memory in ``namespace``.
            InvalidArgumentError: ``confidence`` outside [0, 1] or not finite.
        """
        self._check()
        self._engine.mark_contradicted(
            _text(namespace, "namespace"),
            _text(id, "id"),
            _text(contradicted_by, "contradicted_by"),
            vals.check_confidence(confidence),
            vals.to_micros(now, "now"),
        )

    def set_embed_model(self, model: str) -> None:
        """Record the name of the embedding model the vectors come from."""
        self._check()
        self._engine.set_embed_model(_text(model, "model"))

    # ------------------------------------------------------------------ memories: reads

    def get(self, namespace: str, id: str) -> Memory:
        """One memory (expired and superseded ones too); ``embedding`` is None.

        Raises:
            NotFoundError: Absent or in another namespace.
        """
        self._check()
        return self._engine.get(_text(namespace, "namespace"), _text(id, "id"))

    def get_embedding(self, namespace: str, id: str) -> npt.NDArray[np.float32] | None:
        """The stored vector, bit-exact float32; None for a keyword-only row.

        Raises:
            NotFoundError: Absent.
        """
        self._check()
        return self._engine.get_embedding(_text(namespace, "namespace"), _text(id, "id"))

    def ids_by_prefix(self, namespace: str, prefix: str, limit: int) -> list[str]:
        """Ids starting with the literal, case-sensitive ``prefix``, ascending.

        ``""`` or ``limit <= 0`` give ``[]``.
        """
        self._check()
        return self._engine.ids_by_prefix(
            _text(namespace, "namespace"), _text(prefix, "prefix"), _limit(limit, "limit")
        )

    def predecessor_ids(self, namespace: str, id: str) -> list[str]:
        """Ids of the memories whose ``superseded_by == id``."""
        self._check()
        return self._engine.predecessor_ids(_text(namespace, "namespace"), _text(id, "id"))

    def get_by_fingerprint(
        self, namespace: str, tier: Tier | str, fingerprint: str, now: datetime | None = None
    ) -> Memory:
        """The newest live memory (by ``created_at``) with this content fingerprint.

        Raises:
            NotFoundError: None, or ``fingerprint == ""``.
        """
        self._check()
        return self._engine.get_by_fingerprint(
            _text(namespace, "namespace"),
            vals.coerce_enum(Tier, tier, "tier").value,
            _text(fingerprint, "fingerprint"),
            _now(now),
        )

    def list_expired(self, now: datetime, limit: int) -> list[Memory]:
        """Memories of every namespace with ``expires_at <= now`` (``limit <= 0``: no cap)."""
        self._check()
        return self._engine.list_expired(vals.to_micros(now, "now"), _limit(limit, "limit"))

    def list(
        self, namespace: str, filter: Filter | None = None, limit: int = 0, offset: int = 0
    ) -> list[Memory]:
        """Memories passing ``filter``, ordered by ``filter.sort`` (ties by id ascending).

        ``limit <= 0`` returns all; the first ``offset`` rows are skipped.

        Raises:
            InvalidArgumentError: A negative ``offset``, or a malformed filter.
        """
        self._check()
        return self._engine.list(
            _text(namespace, "namespace"),
            cv.filter_to_spec(filter),
            _limit(limit, "limit"),
            limits.check_limit(offset, "offset", non_negative=True),
        )

    def count(self, namespace: str, filter: Filter | None = None) -> int:
        """How many memories `list` would return with no limit."""
        self._check()
        return self._engine.count(_text(namespace, "namespace"), cv.filter_to_spec(filter))

    def list_namespaces(self) -> builtins.list[str]:
        """Every namespace holding any memory, ascending."""
        self._check()
        return self._engine.list_namespaces()

    def namespace_activity(self, now: datetime | None = None) -> builtins.list[NamespaceActivity]:
        """Per namespace with a live memory: live count and newest live ``created_at``."""
        self._check()
        return [
            NamespaceActivity(ns=ns, total=n, last_write=vals.from_micros(t))
            for ns, n, t in self._engine.namespace_activity(_now(now))
        ]

    def embed_model(self) -> str:
        """The embedding model name, ``""`` until set."""
        self._check()
        return self._engine.embed_model()

    def refresh_active_counts(self, now: datetime | None = None) -> None:
        """Report ``active_by_tier`` to the metrics for every tier, from the live rows."""
        self._check()
        for tier, n in self._engine.active_by_tier(_now(now)):
            self._metrics.active_by_tier(tier, n)

    # ------------------------------------------------------------------ search

    def vector_search(
        self,
        namespace: str,
        vector: npt.ArrayLike,
        filter: Filter | None = None,
        k: int = 10,
    ) -> builtins.list[Scored]:
        """The ``k`` nearest memories passing ``filter``, best first.

        Exactly ``min(k, matching rows with a vector)`` results; scores computed in f64 from
        the stored vectors (l2: ``1/(1+distance)``, cos: cosine, ip: inner product).

        Raises:
            DimensionMismatchError: Query of the wrong length.
            InvalidArgumentError: ``k`` outside 1 .. 10,000 (`memini.limits`) or a malformed
                query/filter.
        """
        return self._engine.vector_search(*self._vector_search_args(namespace, vector, filter, k))

    def _vector_search_args(
        self, namespace: str, vector: npt.ArrayLike, filter: Filter | None = None, k: int = 10
    ) -> tuple[str, npt.NDArray[np.float32], FilterSpec, int]:
        """`vector_search`'s checks, and the core call's arguments (`memini.aio` runs it)."""
        self._check()
        k = limits.check_k(k)
        q = vals.query_to_array(vector, self._dims)
        return _text(namespace, "namespace"), q, cv.filter_to_spec(filter), k

    def vector_search_many(
        self,
        namespace: str,
        vectors: npt.ArrayLike,
        filter: Filter | None = None,
        k: int = 10,
    ) -> builtins.list[builtins.list[Scored]]:
        """`vector_search` for each row of a 2-D array of queries, searched in parallel."""
        self._check()
        k = limits.check_k(k)
        qs = vals.queries_to_array(vectors, self._dims)
        limits.check_at_most(len(qs), "number of query vectors", limits.MAX_QUERIES)
        spec = cv.filter_to_spec(filter)
        return self._engine.vector_search_many(_text(namespace, "namespace"), qs, spec, k)

    def keyword_search(
        self, namespace: str, query: str, filter: Filter | None = None, k: int = 10
    ) -> builtins.list[Scored]:
        """BM25 search over content, summary and tags, best first, positive scores.

        Any str of at most 4,096 characters (`memini.limits.MAX_QUERY_CHARS`) is a valid
        query (never parsed as syntax); its words are OR-ed, English
        stopwords ("what", "did", "the", ... NLTK's list) left out unless the query has no
        other word; a query with no word of >= 2 letters/digits returns ``[]``. BM25
        statistics (document count, each word's document frequency, the average length) are
        the namespace's: a word in nearly every row of it (a user's name in their own facts)
        weighs nearly nothing there, and no other tenant's rows move its scores (the
        PostgreSQL backend ranks by ``ts_rank`` times these words' weights, see the README).
        (Dropping stopwords: keyword-only R@10 on LoCoMo 0.668 -> 0.699, MRR 0.462 -> 0.490;
        see `recall`.) Length normalisation is scaled down (in effect BM25 with k1 = 0.39,
        b = 0.23: a word found ``tf`` times in a row of ``len`` tokens scores ``idf * 2.2 tf /
        (tf + 0.3 + 0.09 len / average len)``): a longer row matching the same words loses
        little to a shorter one (keyword-only on LoCoMo turns, R@5 / R@10 / MRR: 0.647 /
        0.711 / 0.508, against 0.631 / 0.700 / 0.488 with tantivy's k1 = 1.2, b = 0.75).
        """
        return self._engine.keyword_search(*self._keyword_search_args(namespace, query, filter, k))

    def _keyword_search_args(
        self, namespace: str, query: str, filter: Filter | None = None, k: int = 10
    ) -> tuple[str, str, FilterSpec, int]:
        """`keyword_search`'s checks, and the core call's arguments (`memini.aio` runs it)."""
        self._check()
        k = limits.check_k(k)
        q = limits.check_query(query)
        return _text(namespace, "namespace"), q, cv.filter_to_spec(filter), k

    def recall(
        self,
        namespace: str | Sequence[str],
        query: str = "",
        vector: npt.ArrayLike | None = None,
        filter: Filter | None = None,
        k: int = 10,
        *,
        fusion: Literal["convex", "rrf"] | None = None,
        alpha: float | None = None,
        rrf_k: float | None = None,
        pool: int | None = None,
        rerank: Literal["quality"] | None = "quality",
        dedup: bool = True,
        linked: bool = False,
        reinforce: bool = False,
    ) -> builtins.list[Recalled]:
        """Hybrid recall: the memories best matching ``query`` by words and ``vector`` by
        meaning, fused, reranked and deduplicated, in one call to the core.

        Both legs run inside the core without the GIL, on one consistent view of the store:
        `vector_search` of ``vector`` and `keyword_search` of ``query``, each taking ``pool``
        candidates (default ``max(5 * k, 50)``) per namespace under ``filter`` (every field,
        the live rule and ``as_of`` included). A leg without input (``vector=None``, or a
        query with no word) or finding nothing is skipped, and recall is the other leg
        alone, with that search's scores; with neither, the result is empty. A store opened
        with an ``embedder`` embeds a non-blank ``query`` when no ``vector`` is given (one
        ``embed`` call), so text alone runs both legs.

        Fusion (when both legs found rows), over each leg's candidates from all namespaces:
        ``"convex"`` min-max normalises each leg's scores to [0, 1] (all equal -> 1; a leg
        that missed a row gives it 0) and adds ``alpha * vector + (1 - alpha) * keyword``;
        ``"rrf"`` adds ``1 / (rrf_k + rank)`` (rank 0-based, ties by id) over the legs that
        found the row. An explicit ``fusion`` is exactly that formula; ``alpha`` and
        ``rrf_k`` are checked whenever given and used by their fusion (default 0.4 and 5).

        ``fusion=None`` (the default) is convex with ``alpha=0.4`` plus *neighbour context*:
        each candidate's fused score gains ``0.5 x gate`` x the best fused score of its two
        timeline neighbours (the rows of its namespace stored just before and just after it,
        by ``created_at`` then storage order) that are candidates too — a turn of a
        conversation is understood with the turns around it (a question and its answer
        share the meaning, rarely the words). It adds no row the legs did not find. The
        gate, ``min(1, coherence / 0.1)`` (0 when not positive), is measured per namespace
        from the data: *coherence* is how much more its time-adjacent rows resemble each
        other than rows far apart (mean cosine of 256 adjacent pairs spread along its
        timeline, minus that of their first rows taken pairwise; 0 under 8 rows), cached and
        measured again once the namespace's row count has moved by a sixteenth. Dialogue
        turns stored in order measure 0.07-0.16; the same turns shuffled, and facts stored in
        whatever order they were extracted, -0.02-0.01: neighbours lift nothing there. The
        keyword leg's BM25 statistics are those of all the namespaces searched together, and
        its min-max scores are multiplied by ``top / (top + 0.2)``, ``top`` its best BM25
        score: a leg that matched only words in nearly every row searched (a user's name in
        their own facts, ~0.06) counts for little, one matching a word that tells rows apart
        (>= 2.5: a word in a fifth of them) keeps 0.92-1 of its weight. (On PostgreSQL,
        whose ``ts_rank`` is no BM25 score, the keyword leg keeps its full weight.)
        Keyword queries drop English stopwords (see `keyword_search`).

        Chosen by measurement on LoCoMo's dev split, three shapes of memory (5 conversations,
        MiniLM vectors, k=10, pools of 50; the upstream protocol, ``benches/bench_recall.py``):
        2,760 dialogue turns stored in conversation order, the same turns stored in a random
        order (997 questions), and 1,210 facts about the speakers (``locomo-facts-dev``: one
        namespace per speaker, random order, 819 questions searching the namespaces of the
        speakers they name). R@5 / R@10 / MRR:

        ============================  =================  =================  =================
        method                        turns, in order    turns, shuffled    facts
        ============================  =================  =================  =================
        upstream hybrid, min-max 0.5  0.613 0.725 0.455  0.613 0.725 0.455  0.640 0.685 0.539
        memini vector only            0.443 0.552 0.299  0.443 0.552 0.299  0.606 0.651 0.481
        memini keyword only           0.647 0.711 0.508  0.647 0.711 0.508  0.596 0.650 0.513
        memini ``"convex"`` 0.5       0.656 0.755 0.498  0.656 0.755 0.498  0.643 0.684 0.543
        memini ``"rrf"`` 5            0.659 0.743 0.466  0.659 0.743 0.466  0.635 0.686 0.528
        memini defaults               0.727 0.811 0.550  0.674 0.759 0.523  0.646 0.683 0.546
        ============================  =================  =================  =================

        Around the defaults, on turns in order: alpha 0.3-0.5 x neighbour weight 0.3-0.7 give
        R@5 0.701-0.727, R@10 0.790-0.811, MRR 0.515-0.554 (no neighbours: 0.656-0.673 /
        0.755-0.759 / 0.487-0.530). On facts the defaults beat upstream's hybrid by 0.6
        point of R@5 and 0.7 of MRR (R@10 0.2 below): about level with it, not 2 points
        above. The keyword weight's 0.2 sits in a plateau: 0.05-0.7 give facts 0.646 /
        0.683-0.684 / 0.546 and turns within 0.003 of the table.

        ``rerank="quality"`` multiplies each fused score, divided by the best one, by
        ``0.8 + 0.2 * quality / max_quality`` over the candidates (`Memory.quality` at
        ``filter.now`` or the wall clock; a max of 0 leaves the factor at 1). Scores that
        can be negative (a cosine or inner-product vector leg alone) are min-max normalised
        instead of divided by the best. ``dedup`` keeps only the best row per
        `normalize_content` (rows with equal `fingerprint`).

        ``namespace`` may be a list (at most 64; a repeat counts once): each is searched and
        the results ranked together; ``via`` names where each was found. ``linked=True``
        then adds every namespace those link to (`list_links`, one hop; a namespace already
        listed is searched whole), taking from each only its link's tiers (None = semantic
        and procedural; several links to one namespace: the union), intersected with
        ``filter.tiers``. Nothing from another namespace ever appears.

        Returns ``min(k, rows found by either leg after filter and dedup)`` results, best
        first, ties by id: the same store state and arguments give the same list.
        ``reinforce=True`` then counts an access on every returned row (``access_count + 1``,
        ``last_accessed_at`` = the reference instant above) in one atomic, durable batch
        before returning; the returned memories show the rows as they were found.

        Raises:
            InvalidArgumentError: ``k`` outside 1 .. 10,000, ``pool`` outside ``k`` ..
                100,000, a query over 4,096 characters (`memini.limits`), ``alpha``
                outside [0, 1], ``rrf_k <= 0``, an unknown ``fusion`` or ``rerank``, an
                empty namespace list or one of more than 64, a malformed filter.
            DimensionMismatchError: ``vector`` of the wrong length.
        """
        self._check()
        k = limits.check_k(k)
        names = _namespaces(namespace)
        q = limits.check_query(query)
        vec = None if vector is None else vals.query_to_array(vector, self._dims)
        spec = cv.filter_to_spec(filter)
        size = max(5 * k, _MIN_POOL) if pool is None else limits.check_pool(pool, k)
        how = _DEFAULT_FUSION if fusion is None else fusion
        a = _DEFAULT_ALPHA if alpha is None else vals.check_float(alpha, "alpha")
        if not 0.0 <= a <= 1.0:
            raise InvalidArgumentError(f"alpha must be in [0, 1], got {alpha}")
        rk = _DEFAULT_RRF_K if rrf_k is None else vals.check_float(rrf_k, "rrf_k")
        if not (rk > 0.0 and math.isfinite(rk)):
            raise InvalidArgumentError(f"rrf_k must be a finite number > 0, got {rrf_k}")
        if how not in ("convex", "rrf"):
            raise InvalidArgumentError(f"unknown fusion {fusion!r} (use 'convex' or 'rrf')")
        if rerank not in ("quality", None):
            raise InvalidArgumentError(f"unknown rerank {rerank!r} (use 'quality' or None)")
        dedup = vals.check_bool(dedup, "dedup")
        sources: builtins.list[tuple[str, builtins.list[str] | None]] = [(n, None) for n in names]
        if vals.check_bool(linked, "linked"):
            sources += self._linked_sources(names)
        reinforce = vals.check_bool(reinforce, "reinforce")
        if vec is None:
            vec = self._embed_query(q)  # with an embedder; None for a blank query
        found = self._engine.recall(
            sources,
            q,
            vec,
            spec,
            k,
            size,
            how,
            a if how == "convex" else rk,
            _DEFAULT_CONTEXT if fusion is None else 0.0,
            _DEFAULT_KEYWORD_HALF if fusion is None else 0.0,
            rerank == "quality",
            dedup,
        )
        if reinforce and found:
            rows = [(r.via, r.memory.id) for r in found]
            self._engine.reinforce_rows(rows, spec["now"])
        return found

    def _linked_sources(
        self, names: builtins.list[str]
    ) -> builtins.list[tuple[str, builtins.list[str]]]:
        """The namespaces ``names`` link to (not among them), each with the union of its
        links' tiers (a link's None = semantic and procedural), in order of first link."""
        key = tuple(names)
        with self._links_lock:
            cached, gen = self._linked.get(key), self._links_gen
        if cached is not None:
            return cached
        tiers: dict[str, set[Tier]] = {}
        for src in names:
            for link in self._meta.list_links(src):
                if link.dst in names:
                    continue
                allowed = _LINK_DEFAULT_TIERS if link.tiers is None else link.tiers
                tiers.setdefault(link.dst, set()).update(Tier(t) for t in allowed)
        found = [(dst, sorted(t.value for t in ts)) for dst, ts in tiers.items()]
        if self._meta.shared:  # another process may write a link at any time
            return found
        with self._links_lock:
            if gen == self._links_gen:  # no link was written meanwhile
                if len(self._linked) >= _LINKED_CACHE:
                    self._linked.clear()
                self._linked[key] = found
        return found

    def _links_changed(self) -> None:
        """Forget the cached link lookups (after a link write, failed or not)."""
        with self._links_lock:
            self._links_gen += 1
            self._linked.clear()

    # ------------------------------------------------------------------ links (SQLite)

    def put_link(self, link: NamespaceLink) -> None:
        """Upsert a namespace link on (src, dst), overwriting tiers, note and created_at."""
        self._check()
        try:
            self._meta.put_link(link)
        finally:
            self._links_changed()

    def delete_link(self, src: str, dst: str) -> bool:
        """Delete a link; return whether one existed."""
        self._check()
        try:
            return self._meta.delete_link(src, dst)
        finally:
            self._links_changed()

    def list_links(self, src: str) -> builtins.list[NamespaceLink]:
        """Links from ``src``, by dst."""
        self._check()
        return self._meta.list_links(src)

    def list_all_links(self) -> builtins.list[NamespaceLink]:
        """Every link, by (src, dst)."""
        self._check()
        return self._meta.list_all_links()

    def rename_link_endpoints(self, from_ns: str, to_ns: str) -> None:
        """Rewrite both ends of links from ``from_ns`` to ``to_ns`` (see API.md on collisions)."""
        self._check()
        try:
            self._meta.rename_link_endpoints(from_ns, to_ns)
        finally:
            self._links_changed()

    # ------------------------------------------------------------------ API keys (SQLite)

    def put_api_key(self, key: APIKey) -> None:
        """Upsert an API key by name (``created_at=None`` keeps the stored one).

        Raises:
            ConflictError: The hash is used by another name.
        """
        self._check()
        self._meta.put_api_key(key)

    def authenticate(self, secret: str) -> APIKey | None:
        """The enabled key whose hash is ``hash_api_key(secret)``, else None."""
        self._check()
        return self._meta.authenticate(secret)

    def delete_api_key(self, name: str) -> bool:
        """Delete a key; return whether it existed."""
        self._check()
        return self._meta.delete_api_key(name)

    def list_api_keys(self) -> builtins.list[APIKey]:
        """Every key, by name (hashes only)."""
        self._check()
        return self._meta.list_api_keys()

    def get_api_key_by_hash(self, hash: str) -> APIKey | None:
        """The key with this hash, else None."""
        self._check()
        return self._meta.get_api_key_by_hash(hash)

    def rename_api_key_namespaces(self, from_ns: str, to_ns: str) -> None:
        """Rewrite ``home_ns`` and ``default_ns`` equal to ``from_ns``, each independently."""
        self._check()
        self._meta.rename_api_key_namespaces(from_ns, to_ns)

    # ------------------------------------------------------------------ events (SQLite)

    def append_events(self, events: Iterable[Event]) -> None:
        """Append a batch in one transaction, with contiguous ids in list order."""
        self._check()
        self._meta.append_events(events)

    @property
    def _packs_events(self) -> bool:
        """Whether `_append_event_rows` takes rows packed by the core (the SQLite log, with
        JSON1)."""
        return isinstance(self._meta, MetaDB) and self._meta.packs_events

    def _append_event_rows(
        self,
        rows: builtins.list[EventRow],
        queries: Sequence[OpQueryRow] = (),
        packed: PackedRows | None = None,
    ) -> None:
        """`append_events` of rows built by `memini.events.event_row` from values known
        valid (the server's log of served calls: no `Event` per row, no second check), the
        query of each operation given once (`memini._core.search_event_rows`), then the
        rows the core ``packed`` (only when `_packs_events`)."""
        self._check()
        if packed is None:
            self._meta.append_event_rows(rows, queries)
        elif isinstance(self._meta, MetaDB):
            self._meta.append_event_rows(rows, queries, packed)
        else:
            raise InvalidArgumentError("packed event rows need the SQLite event log")

    def list_events(self, filter: EventFilter | None = None) -> builtins.list[Event]:
        """Events newest first (created_at desc, id desc), as API.md's EventFilter selects."""
        self._check()
        return self._meta.list_events(filter)

    def prune_events(self, older_than: datetime | None = None, keep_max: int = 0) -> int:
        """Delete events older than ``older_than``, then all but the newest ``keep_max``."""
        self._check()
        return self._meta.prune_events(older_than, keep_max)
