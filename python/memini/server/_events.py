"""The event log of served calls (API.md section 8): every recall, search and write.

`event_rows` turns one served call into its rows: one operation id per call; a search or
recall gives one row per hit (``rank`` 0-based, ``score``, the hit's id, namespace, tier and
summary), recorded under the hit's own namespace (a linked or multi-namespace recall never
files one tenant's rows under another's name), or one row per namespace searched when
nothing was found; ``detail["namespaces"]`` lists the namespaces searched. A write gives one
row per memory written
(``remember`` / ``update`` / ``forget`` / ``supersede``), link and key changes one
``settings`` row. ``detail`` holds the method, ``k``, and the caller's key name (never a
secret).

`EventRecorder` appends them off the request path: rows are queued and written by one
thread in batches (one SQLite transaction per batch, every ``flush_every`` seconds or 2,000
rows), so a search pays no fsync. The price: the rows of the last ``flush_every`` seconds
before a crash (SIGKILL) are lost; a clean stop (SIGTERM) writes them all. The log is pruned
by the same thread to ``retention`` (age) and ``keep_max`` (rows).

A search's rows are made by the core (`memini._core.search_event_rows`, the one home of
their rule), for the searches the app answers as for those the HTTP front
(`memini._core.Front`) answers itself: the front makes them when it answers, without the
GIL, and queues them (bounded: a full queue drops a call's rows and counts them,
`EventRecorder.dropped`); each batch takes that queue as ready rows in one call
(`Front.take_events`: Python only names each operation, `new_id`, and folds a non-ASCII
text, `memini.events.fold`), packed by the core as one JSON text that SQLite expands
itself (`memini.events.PackedRows`: two values bound per batch, not 14 per row, with the
GIL held), or as tuples where it cannot (no JSON1, or a value JSON would not carry
exactly: a NUL, a score too small for its exact form). The writes the front answers queue
their values in the same bound, and the batch makes their rows here (`write_events`, as
`event_rows` does).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from memini._core import Front, event_summary, search_event_rows
from memini._values import metadata_to_json, now_micros
from memini.events import EventRow, OpQueryRow, PackedRows, event_row, fold
from memini.store import Store
from memini.types import EventKind, Memory, Tier, new_id

__all__ = ["CallEvents", "EventRecorder", "event_rows", "search_events", "write_events"]

_LOG = logging.getLogger("memini.server")

_SEARCHES: Final = frozenset({"vector_search", "keyword_search", "recall", "vector_search_many"})
_KINDS: Final[dict[str, EventKind]] = {
    "upsert": EventKind.REMEMBER,
    "upsert_many": EventKind.REMEMBER,
    "update": EventKind.UPDATE,
    "delete": EventKind.FORGET,
    "delete_if_expired_before": EventKind.FORGET,
    "delete_namespace": EventKind.FORGET,
    "sweep_expired": EventKind.FORGET,
    "set_superseded": EventKind.SUPERSEDE,
    "restore": EventKind.UPDATE,
    "reinforce": EventKind.UPDATE,
    "reassign": EventKind.UPDATE,
    "retier": EventKind.UPDATE,
    "set_confidence": EventKind.UPDATE,
    "mark_contradicted": EventKind.UPDATE,
    "put_link": EventKind.SETTINGS,
    "delete_link": EventKind.SETTINGS,
    "rename_link_endpoints": EventKind.SETTINGS,
    "put_api_key": EventKind.SETTINGS,
    "delete_api_key": EventKind.SETTINGS,
    "rename_api_key_namespaces": EventKind.SETTINGS,
    "set_embed_model": EventKind.SETTINGS,
}


def _summary(m: Memory) -> str:
    return event_summary(m.summary, m.content)


Hit = tuple[str, str, str, str, float]
"""A hit as its event row names it: (id, namespace, tier, summary, score)."""


def _hit(hit: Any) -> Hit:
    m: Memory = hit.memory
    return m.id, m.namespace, m.tier.value, _summary(m), float(hit.score)


def _tier(value: object) -> str | None:
    """A tier's value (a `Tier` member or its string), None for anything else."""
    if isinstance(value, Tier):
        return value.value
    try:
        return Tier(value).value if isinstance(value, str) else None
    except ValueError:
        return None


def _text(value: object) -> str:
    """A caller's text as it can be stored: a lone surrogate (which no store keeps) replaced."""
    if not isinstance(value, str):
        return ""
    return value if value.isascii() else value.encode("utf-8", "replace").decode("utf-8")


class CallEvents:
    """The values every row of one served call shares, and its rows as they are built."""

    __slots__ = ("kind", "now", "ns", "op", "queries", "rows")

    def __init__(self, kind: EventKind, ns: str, now: int | None = None) -> None:
        self.op = new_id()
        self.kind = kind.value
        self.ns = ns
        self.now = now_micros() if now is None else now
        self.rows: list[EventRow] = []
        self.queries: list[OpQueryRow] = []

    def row(
        self,
        detail: str,
        *,
        namespace: str | None = None,
        memory_id: str = "",
        memory_ns: str = "",
        tier: str | None = None,
        summary: str = "",
        rank: int = 0,
        score: float | None = None,
    ) -> None:
        ns = self.ns if namespace is None else namespace
        self.rows.append(
            event_row(
                self.op, self.kind, ns, "", memory_id, memory_ns, tier, summary, rank,
                score, detail, self.now,
            )
        )  # fmt: skip


def search_events(
    method: str,
    caller: str,
    k: object,
    searched: list[str],
    query: str,
    results: list[list[Hit]],
    now: int | None = None,
) -> CallEvents:
    """The rows of one search (``results``: one list of hits per query, several only for
    ``vector_search_many``) and its query, made at ``now`` (default: now) by the core's
    rule (`memini._core.search_event_rows`)."""
    call = CallEvents(EventKind.RECALL, "", now)
    k_json = metadata_to_json({"k": k}, "k")[5:-1]  # k as the detail dict writes it
    call.rows, call.queries, _ = search_event_rows(
        call.op, method, caller, k_json, searched, query, call.now, results, fold
    )
    return call


def event_rows(method: str, args: Mapping[str, Any], result: Any, caller: str) -> CallEvents | None:
    """The event-log rows of one served call that succeeded, with its query (None for
    calls not logged).

    Built straight as stored rows (`memini.events.event_row`) from values the store has
    checked or returned, never from the caller's raw input: ~10 `Event` objects per search
    and their second check cost more than the search's own Python.
    """
    kind = EventKind.RECALL if method in _SEARCHES else _KINDS.get(method)
    if kind is None:
        return None
    raw_ns = args.get("namespace", args.get("from_ns", args.get("src", "")))
    if method in _SEARCHES:
        searched = [raw_ns] if isinstance(raw_ns, str) else [str(n) for n in raw_ns or ()]
        lists = result if method == "vector_search_many" else [result]
        hits = [[_hit(h) for h in hs] for hs in lists]
        query = _text(args.get("query", ""))
        return search_events(method, caller, args.get("k", 10), searched, query, hits)
    detail: dict[str, Any] = {"method": method, "caller": caller}
    call = CallEvents(kind, raw_ns if isinstance(raw_ns, str) else "")
    if method in ("upsert", "upsert_many"):
        memories = [args["memory"]] if method == "upsert" else list(args["memories"])
        touched = [(m.id, m.namespace, _tier(m.tier), _summary(m)) for m in memories]
        _touched(call, method, caller, touched)
        return call
    if method == "update" and isinstance(result, Memory):
        touched = [(result.id, result.namespace, result.tier.value, _summary(result))]
        _touched(call, method, caller, touched, sorted(args.get("fields", {})))
        return call
    if isinstance(result, int) and not isinstance(result, bool):
        detail["count"] = result
    ids = args.get("ids")
    if isinstance(ids, list):
        detail["ids"] = [i for i in ids if isinstance(i, str)][:100]
    if method == "put_link":
        link = args["link"]
        call.ns, detail["dst"] = link.src, link.dst
    elif method in ("put_api_key", "delete_api_key"):
        key = args.get("key")
        detail["key_name"] = key.name if key is not None else args.get("name", "")
    for name in ("superseded_by", "to_ns", "dst", "tier"):
        if isinstance(args.get(name), str):
            detail[name] = str(args[name])
    memory_id = args.get("id", "")
    memory_id = memory_id if isinstance(memory_id, str) else ""
    call.row(
        metadata_to_json(detail, "detail"),
        memory_id=memory_id,
        memory_ns=call.ns if memory_id else "",
    )
    return call


Touched = tuple[str, str, str | None, str]
"""A memory a write touched, as its event row names it: (id, namespace, tier, summary)."""


def _touched(
    call: CallEvents,
    method: str,
    caller: str,
    touched: list[Touched],
    fields: list[str] | None = None,
) -> None:
    """One row per memory a write touched, under the memory's namespace (``rank``: its
    place in the call); ``fields``: the fields an ``update`` named."""
    detail: dict[str, Any] = {"method": method, "caller": caller}
    if fields is not None:
        detail["fields"] = fields
    text = metadata_to_json(detail, "detail")
    for i, (id, ns, tier, summary) in enumerate(touched):
        call.row(text, namespace=ns, memory_id=id, memory_ns=ns, tier=tier, summary=summary, rank=i)


def write_events(
    method: str,
    caller: str,
    ns: str,
    touched: list[Touched],
    fields: list[str] | None,
    now: int | None = None,
) -> CallEvents:
    """The rows of a write the front answered (``upsert``, ``upsert_many``, ``update``,
    ``delete``): as `event_rows` makes them for the same call, at ``now``."""
    call = CallEvents(_KINDS[method], ns, now)
    _touched(call, method, caller, touched, fields)
    return call


class EventRecorder:
    """Appends the rows of served calls to the store's event log from one thread.

    Args:
        store: The served store.
        retention: Prune rows older than this (None = keep by age).
        keep_max: Keep at most this many rows (0 = no cap).
        flush_every: Seconds between batches.
        prune_every: Seconds between prunes.
    """

    def __init__(
        self,
        store: Store,
        *,
        retention: timedelta | None = timedelta(days=30),
        keep_max: int = 0,
        flush_every: float = 0.2,
        prune_every: float = 60.0,
    ) -> None:
        self._store = store
        self._retention = retention
        self._keep_max = keep_max
        self._flush_every = flush_every
        self._prune_every = prune_every
        self._pending: list[EventRow] = []
        self._queries: list[OpQueryRow] = []
        self._cond = threading.Condition()
        self._writing = threading.Lock()  # one batch at a time, in queue order
        self._stop = False
        self._front: Front | None = None
        self.written = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="memini-events", daemon=True)
        self._thread.start()

    def attach(self, front: Front) -> None:
        """Write the rows of the searches ``front`` answers itself too (each batch takes its
        queue)."""
        self._front = front

    @property
    def dropped(self) -> int:
        """Event rows the front's queue dropped (full) since the server started."""
        return 0 if self._front is None else self._front.events_dropped

    def _from_front(self) -> tuple[list[EventRow], list[OpQueryRow], PackedRows | None]:
        """The rows of the searches the front answered since the last batch (made by the
        front, packed as one JSON text when the store takes that; here each operation gets
        its id), and of its writes (made here)."""
        if self._front is None:
            return [], [], None
        try:
            rows, queries, packed = self._front.take_events(new_id, fold, self._store._packs_events)
        except Exception:  # the calls were served; their rows are lost, never the serving
            self.errors += 1
            _LOG.exception("could not take the event rows of the front's searches")
            rows, queries, packed = [], [], None
        for method, caller, ns, now, touched, fields in self._front.take_writes():
            try:
                call = write_events(method, caller, ns, touched, fields, now)
            except Exception:
                self.errors += 1
                _LOG.exception("could not make the event rows of a served %s()", method)
                continue
            rows.extend(call.rows)
        return rows, queries, packed

    def record(self, method: str, args: Mapping[str, Any], result: Any, caller: str) -> None:
        """Queue the rows of a served call that succeeded (`event_rows`) for the next batch.
        Never raises: the call was served, and a row that cannot be made is logged."""
        try:
            call = event_rows(method, args, result, caller)
        except Exception:
            self.errors += 1
            _LOG.exception("could not make the event rows of a served %s()", method)
            return
        if call is None or not call.rows:
            return
        with self._cond:
            self._pending.extend(call.rows)
            self._queries.extend(call.queries)
            if len(self._pending) >= 2_000:
                self._cond.notify()

    def _run(self) -> None:
        last_prune = time.monotonic()
        while True:
            with self._cond:
                if not self._stop:
                    self._cond.wait(self._flush_every)
                stop = self._stop
            self.flush()
            if time.monotonic() - last_prune >= self._prune_every or stop:
                last_prune = time.monotonic()
                self.prune()
            if stop:
                return

    def _write(
        self, batch: list[EventRow], queries: list[OpQueryRow], packed: PackedRows | None
    ) -> None:
        n = len(batch) + (0 if packed is None else packed[2])
        if not n:
            return
        try:
            self._store._append_event_rows(batch, queries, packed)
            self.written += n
        except Exception:  # the calls were served; a lost log row must not stop serving
            self.errors += n
            _LOG.exception("could not append %d event rows to the event log", n)

    def prune(self) -> int:
        """Apply the retention now; return rows deleted (0 after an error, logged)."""
        if self._retention is None and self._keep_max <= 0:
            return 0
        older = None if self._retention is None else datetime.now(UTC) - self._retention
        try:
            return self._store.prune_events(older, self._keep_max)
        except Exception:
            _LOG.exception("could not prune the event log")
            return 0

    def flush(self) -> None:
        """Write what is queued now (for tests and before a snapshot): when it returns,
        every row queued before the call is in the log, also those of a batch the thread
        was writing meanwhile."""
        with self._writing:
            with self._cond:
                batch, self._pending = self._pending, []
                queries, self._queries = self._queries, []
            front, front_queries, packed = self._from_front()
            self._write(batch + front, queries + front_queries, packed)

    def close(self) -> None:
        """Write what is queued, prune, and stop the thread. Idempotent."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()
