"""Feeding parsed records into an open store.

Memories land in atomic batches (a bad row is isolated by splitting the batch, so the rest
still lands), links and API keys one by one, events all together at the end so that their
ids can be restored. What is stored already is skipped and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memini.cli.records import (
    EXPORT_TYPE,
    MEMORY_FIELDS,
    BadRecord,
    Fields,
    dumps,
    event_record,
    json_type,
    parse_event,
    parse_key,
    parse_link,
    parse_memory,
)
from memini.errors import CorruptionError, MeminiError, StoreClosedError
from memini.events import check_event
from memini.store import Store
from memini.types import Event, Memory

__all__ = ["ImportSummary", "Importer"]


@dataclass
class _Counts:
    read: int = 0
    inserted: int = 0
    skipped: int = 0
    bad: int = 0


@dataclass
class ImportSummary:
    """What an import did, per kind of record, and the bad lines with their reasons."""

    memories: _Counts = field(default_factory=_Counts)
    links: _Counts = field(default_factory=_Counts)
    api_keys: _Counts = field(default_factory=_Counts)
    events: _Counts = field(default_factory=_Counts)
    other_bad: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def bad(self) -> int:
        """Lines not imported because of an error."""
        kinds = (self.memories, self.links, self.api_keys, self.events)
        return self.other_bad + sum(c.bad for c in kinds)


class Importer:
    """Feeds records into an open store: memories in atomic batches, links and keys one by
    one, events all together at the end (so that their ids can be restored)."""

    def __init__(
        self,
        store: Store,
        *,
        batch: int,
        default_ns: str,
        on_error: Callable[[int, str], None],
        next_event_id: int = 0,
    ) -> None:
        self.store = store
        self.next_event_id = next_event_id  # from the export header; 0 = none
        self.dims = int(store.stats()["dims"])
        self.batch_size = batch
        self.default_ns = default_ns
        self.on_error = on_error
        self.summary = ImportSummary()
        self._batch: list[tuple[int, Memory]] = []
        self._seen: set[tuple[str, str]] = set()  # (namespace, id) of the pending batch
        self._links: set[tuple[str, str]] | None = None
        self._keys: set[str] | None = None
        self._events: list[tuple[int, Event]] = []

    def bad_line(self, lineno: int, message: str, counts: _Counts | None) -> None:
        """Count and report a line that is not imported."""
        if counts is None:
            self.summary.other_bad += 1
        else:
            counts.bad += 1
        self.summary.errors.append((lineno, message))
        self.on_error(lineno, message)

    def add(self, lineno: int, obj: object) -> None:
        """Take one parsed JSON line (memories are stored when their batch fills)."""
        if not isinstance(obj, dict):
            self.bad_line(lineno, f"expected a JSON object, got {json_type(obj)}", None)
            return
        kind = obj.get("type", "memory")
        handlers: dict[object, tuple[_Counts, Callable[[int, dict[str, Any]], None]]] = {
            "memory": (self.summary.memories, self._add_memory),
            "link": (self.summary.links, self._add_link),
            "api_key": (self.summary.api_keys, self._add_key),
            "event": (self.summary.events, self._add_event),
        }
        if kind == EXPORT_TYPE:
            self.bad_line(lineno, "an export header is only valid as the first line", None)
            return
        if kind not in handlers:
            self.bad_line(lineno, f"unknown record type {kind!r}", None)
            return
        counts, handler = handlers[kind]
        counts.read += 1
        try:
            handler(lineno, obj)
        except BadRecord as e:
            self.bad_line(lineno, str(e), counts)
        except MeminiError as e:
            if isinstance(e, CorruptionError | StoreClosedError):
                raise
            self.bad_line(lineno, str(e), counts)

    def _add_memory(self, lineno: int, obj: dict[str, Any]) -> None:
        ids = Fields(obj, "memory", MEMORY_FIELDS)
        id_, ns = ids.opt_text("id"), ids.opt_text("namespace") or self.default_ns
        # The id sorts first among the ids it prefixes: one cheap lookup, no full parse.
        if id_ and ((ns, id_) in self._seen or self.store.ids_by_prefix(ns, id_, 1) == [id_]):
            self.summary.memories.skipped += 1
            return
        memory = parse_memory(obj, self.default_ns, self.dims)
        self._seen.add((memory.namespace, memory.id))
        self._batch.append((lineno, memory))
        if len(self._batch) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Store the pending batch of memories; a bad row is reported, the others land."""
        batch, self._batch = self._batch, []
        self._land(batch)
        self._seen.clear()  # from now on the store itself knows these ids

    def _land(self, rows: list[tuple[int, Memory]]) -> None:
        """Upsert ``rows`` atomically; on failure split in halves until the bad rows are
        isolated, so everything else still lands (a few extra commits per bad row)."""
        if not rows:
            return
        try:
            self.store.upsert_many([m for _, m in rows])
        except (CorruptionError, StoreClosedError):
            raise
        except (MeminiError, ValueError, TypeError, OverflowError) as e:
            if len(rows) == 1:
                self.bad_line(rows[0][0], str(e), self.summary.memories)
                return
            mid = len(rows) // 2
            self._land(rows[:mid])
            self._land(rows[mid:])
            return
        self.summary.memories.inserted += len(rows)

    def _add_link(self, lineno: int, obj: dict[str, Any]) -> None:
        link = parse_link(obj)
        if self._links is None:
            self._links = {(lk.src, lk.dst) for lk in self.store.list_all_links()}
        if (link.src, link.dst) in self._links:
            self.summary.links.skipped += 1
            return
        self.store.put_link(link)
        self._links.add((link.src, link.dst))
        self.summary.links.inserted += 1

    def _add_key(self, lineno: int, obj: dict[str, Any]) -> None:
        key = parse_key(obj)
        if self._keys is None:
            self._keys = {k.name for k in self.store.list_api_keys()}
        if key.name in self._keys:
            self.summary.api_keys.skipped += 1
            return
        self.store.put_api_key(key)
        self._keys.add(key.name)
        self.summary.api_keys.inserted += 1

    def _add_event(self, lineno: int, obj: dict[str, Any]) -> None:
        event = parse_event(obj)
        check_event(event)  # the store's checks now, so that a bad line is reported alone
        self._events.append((lineno, event))

    def finish(self) -> ImportSummary:
        """Store the last batch and the buffered events; return the summary."""
        self.flush()
        if self._events or self.next_event_id:
            self._restore_events()
        return self.summary

    def _restore_events(self) -> None:
        """Store the buffered events, keeping their ids where the store allows it.

        An event whose id holds the same event already is skipped, and so is one stored
        before under another id (same content and created_at). The events whose id is still
        free here (above every id this store has handed out) keep it; the rest (no id, an id
        taken by another event, or an id this store used before: ids are never reused) are
        appended after them and get the next free ids. Then the store's next event id is at
        least the export header's, so a round trip keeps the id sequence too.
        """
        counts = self.summary.events
        existing = {e.id: e for e in self.store.list_events()}
        first_free = int(self.store._meta.stats()["next_event_id"])
        unmatched = Counter(_event_key(e) for e in existing.values())
        keep: list[Event] = []
        renumber: list[Event] = []
        for _, ev in sorted(self._events, key=lambda t: (t[1].id == 0, t[1].id, t[0])):
            key = _event_key(ev)
            if ev.id in existing and _same_event(existing[ev.id], ev):
                counts.skipped += 1
                unmatched[key] -= 1
            elif ev.id >= first_free and (not keep or ev.id > keep[-1].id):
                keep.append(ev)
            elif ev.created_at is not None and unmatched[key] > 0:
                counts.skipped += 1  # imported before under another id
                unmatched[key] -= 1
            else:
                renumber.append(ev)
        self.store._meta.import_events(keep, next_id=self.next_event_id)
        if renumber:
            self.store.append_events(renumber)
            self.summary.notes.append(
                f"{len(renumber)} event(s) got new ids (no id, or their id is taken or was "
                "used before in this store: event ids are never reused)"
            )
        counts.inserted += len(keep) + len(renumber)


def _event_key(ev: Event) -> str:
    """An event's content without its id, to recognise it under another id."""
    record = event_record(ev)
    del record["id"]
    return dumps(record)


def _same_event(stored: Event, ev: Event) -> bool:
    """Whether ``stored`` is ``ev`` as imported (a missing created_at matches any)."""
    a, b = event_record(stored), event_record(ev)
    if ev.created_at is None:
        a.pop("created_at")
        b.pop("created_at")
    return a == b
