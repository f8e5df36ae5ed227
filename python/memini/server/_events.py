"""The event log of served calls (API.md section 8): every recall, search and write.

`events_for` turns one served call into its rows: one operation id per call; a search or
recall gives one row per hit (``rank`` 0-based, ``score``, the hit's id, namespace, tier and
summary) or a single row when nothing was found; a write gives one row per memory written
(``remember`` / ``update`` / ``forget`` / ``supersede``), link and key changes one
``settings`` row. ``detail`` holds the method, ``k``, and the caller's key name (never a
secret).

`EventRecorder` appends them off the request path: rows are queued and written by one
thread in batches (one SQLite transaction per batch, every ``flush_every`` seconds or 2,000
rows), so a search pays no fsync. The price: the rows of the last ``flush_every`` seconds
before a crash (SIGKILL) are lost; a clean stop (SIGTERM) writes them all. The log is pruned
by the same thread to ``retention`` (age) and ``keep_max`` (rows).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from memini.store import Store
from memini.types import Event, EventKind, Memory, Tier, new_id

__all__ = ["EventRecorder", "events_for"]

_LOG = logging.getLogger("memini.server")
_SUMMARY_CHARS: Final = 200

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
    text = m.summary or m.content
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def _tier(value: object) -> Tier | None:
    try:
        return Tier(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _hits(
    op: str, kind: EventKind, ns: str, query: str, hits: list[Any], detail: dict[str, Any]
) -> list[Event]:
    rows = []
    for rank, hit in enumerate(hits):
        m: Memory = hit.memory
        rows.append(
            Event(
                op_id=op,
                kind=kind,
                namespace=ns,
                query=query,
                memory_id=m.id,
                memory_ns=m.namespace,
                memory_tier=m.tier,
                memory_summary=_summary(m),
                rank=rank,
                score=float(hit.score),
                detail=detail,
            )
        )
    return rows or [Event(op_id=op, kind=kind, namespace=ns, query=query, detail=detail)]


def events_for(method: str, args: Mapping[str, Any], result: Any, caller: str) -> list[Event]:
    """The event rows of one served call that succeeded (``[]`` for calls not logged)."""
    kind = EventKind.RECALL if method in _SEARCHES else _KINDS.get(method)
    if kind is None:
        return []
    op = new_id()
    detail: dict[str, Any] = {"method": method, "caller": caller}
    raw_ns = args.get("namespace", args.get("from_ns", args.get("src", "")))
    ns = raw_ns if isinstance(raw_ns, str) else ",".join(str(n) for n in raw_ns or ())
    if method in _SEARCHES:
        detail["k"] = args.get("k", 10)
        query = args.get("query", "")
        query = query if isinstance(query, str) else ""
        if method == "vector_search_many":
            out: list[Event] = []
            for i, hits in enumerate(result):
                out += _hits(op, kind, ns, query, hits, {**detail, "query_index": i})
            return out
        return _hits(op, kind, ns, query, result, detail)
    if method in ("upsert", "upsert_many"):
        memories = [args["memory"]] if method == "upsert" else list(args["memories"])
        return [
            Event(
                op_id=op,
                kind=kind,
                namespace=m.namespace,
                memory_id=m.id,
                memory_ns=m.namespace,
                memory_tier=_tier(m.tier),
                memory_summary=_summary(m),
                rank=i,
                detail=detail,
            )
            for i, m in enumerate(memories)
        ]
    if method == "update" and isinstance(result, Memory):
        detail["fields"] = sorted(args.get("fields", {}))
        return [
            Event(
                op_id=op,
                kind=kind,
                namespace=ns,
                memory_id=result.id,
                memory_ns=result.namespace,
                memory_tier=result.tier,
                memory_summary=_summary(result),
                detail=detail,
            )
        ]
    if isinstance(result, int) and not isinstance(result, bool):
        detail["count"] = result
    ids = args.get("ids")
    if isinstance(ids, list):
        detail["ids"] = [i for i in ids if isinstance(i, str)][:100]
    if method == "put_link":
        link = args["link"]
        ns, detail["dst"] = link.src, link.dst
    elif method in ("put_api_key", "delete_api_key"):
        key = args.get("key")
        detail["key_name"] = key.name if key is not None else args.get("name", "")
    for name in ("superseded_by", "to_ns", "dst", "tier"):
        if isinstance(args.get(name), str):
            detail[name] = str(args[name])
    memory_id = args.get("id", "")
    return [
        Event(
            op_id=op,
            kind=kind,
            namespace=ns,
            memory_id=memory_id if isinstance(memory_id, str) else "",
            memory_ns=ns if isinstance(memory_id, str) and memory_id else "",
            detail=detail,
        )
    ]


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
        self._pending: list[Event] = []
        self._cond = threading.Condition()
        self._writing = threading.Lock()  # one batch at a time, in queue order
        self._stop = False
        self.written = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="memini-events", daemon=True)
        self._thread.start()

    def record(self, events: list[Event]) -> None:
        """Queue rows for the next batch."""
        if not events:
            return
        with self._cond:
            self._pending.extend(events)
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

    def _write(self, batch: list[Event]) -> None:
        if not batch:
            return
        try:
            self._store.append_events(batch)
            self.written += len(batch)
        except Exception:  # the calls were served; a lost log row must not stop serving
            self.errors += len(batch)
            _LOG.exception("could not append %d event rows to the event log", len(batch))

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
            self._write(batch)

    def close(self) -> None:
        """Write what is queued, prune, and stop the thread. Idempotent."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()
