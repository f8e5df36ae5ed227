"""The ``memini`` command line: bulk import and export, stats, compaction, index checks, demo.

Commands (``memini COMMAND --help`` lists the options):

* ``memini import FILE --store DIR``: load a JSONL file (``.gz`` too, ``-`` = stdin) in
  atomic batches. Re-running skips what is stored already; a bad line is reported with its
  line number and the rest lands.
* ``memini export --store DIR [-o FILE]``: the whole store as versioned JSONL; importing it
  into a new store and exporting again gives the same bytes.
* ``memini stats|compact|check [--repair] --store DIR``: inspect, compact, verify the indexes.
* ``memini demo [--store ./memini-data]``: import the shipped PyPI sample and recall from it.

The export format (version 1) is one JSON object per line: a header
``{"type": "memini-export", "version": 1, "dims": .., "metric": .., "embed_model": ..,
"next_event_id": ..}`` (the id the store hands the next event; absent in older exports), then
``"type": "memory"`` records (every `Memory` field; datetimes ISO-8601 UTC with microseconds;
``embedding`` a list of floats that parse back to the same float32 values, or null) ordered by
namespace then ``created_at``, then ``"link"``, ``"api_key"`` (hashes only) and ``"event"``
records (with their ids, ascending; an import keeps them, see `_Importer.finish`).
``memini import`` also takes plain lines such as
``{"content": "...", "embedding": [...]}``: a missing ``type`` means a memory, a missing
``id`` gets `memini.new_id` (so such a line is never recognised as already imported), a
missing ``namespace`` gets ``--namespace``.

Exit status: 0 on success; 1 on an error, or when an import had bad lines (the good ones are
stored); 2 when ``check`` finds the indexes out of step with the rows (without ``--repair``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import importlib.resources
import json
import logging
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal, TypeVar, cast

import numpy as np
import numpy.typing as npt
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from memini.errors import (
    CorruptionError,
    DimensionMismatchError,
    InvalidArgumentError,
    MeminiError,
    StoreClosedError,
    StoreLockedError,
)
from memini.events import check_event
from memini.store import Store
from memini.types import (
    APIKey,
    Event,
    EventKind,
    Filter,
    Level,
    Memory,
    NamespaceLink,
    Scored,
    Sort,
    SortKey,
    Tier,
    new_id,
)

__all__ = ["EXPORT_TYPE", "EXPORT_VERSION", "ImportSummary", "export_store", "main"]

EXPORT_TYPE = "memini-export"
"""The ``type`` of the header line of an export."""
EXPORT_VERSION = 1
"""The export format version this module writes and the newest it reads."""

DEFAULT_DEMO_STORE = "./memini-data"
_METRICS = ("l2", "cos", "ip")
_LIST_PAGE = 1000
_MAX_EVENT_ID = 2**63 - 1  # SQLite's largest rowid

_E = TypeVar("_E", Tier, Level, EventKind)
Metric = Literal["l2", "cos", "ip"]


class CliError(Exception):
    """A failure reported to the user as one message, with exit status 1."""


def _locked_message(path: Path, what: str) -> str:
    return (
        f"store {path} is open in another process (or Store) and {what} needs it to itself. "
        "Close it first; to snapshot a live store, call Store.backup(new_dir) from the "
        "process that holds it, then run this command on the copy."
    )


def _open_store(
    path: Path,
    what: str,
    *,
    dims: int | None = None,
    metric: Metric | None = None,
    must_exist: bool = True,
) -> Store:
    """Open the store in ``path`` for a command, turning the usual failures into `CliError`."""
    if must_exist and not (path.is_dir() and any(path.iterdir())):
        raise CliError(f"no store at {path}")
    try:
        return Store.open(path, dims=dims, metric=metric)
    except StoreLockedError:
        raise CliError(_locked_message(path, what)) from None
    except MeminiError as e:
        raise CliError(f"cannot open store {path}: {e}") from None


# --------------------------------------------------------------------------------------------
# Values <-> JSON
# --------------------------------------------------------------------------------------------


def _iso(dt: datetime | None) -> str | None:
    """ISO-8601 UTC with microseconds and a ``Z``, or None."""
    if dt is None:
        return None
    return dt.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _f32_list(vec: npt.NDArray[np.float32]) -> list[float]:
    """The vector as Python floats that print short and parse back to the same float32.

    Each value is the shortest decimal that round-trips float32; the rare one that would not
    survive JSON's parse-as-float64-then-round (double rounding) keeps its exact value.
    """
    short = [float(str(x)) for x in vec]
    back = np.asarray(short, dtype=np.float64).astype(np.float32)
    bad = np.flatnonzero(back.view(np.uint32) != vec.view(np.uint32))
    exact = vec.astype(np.float64)
    for i in bad:
        short[int(i)] = float(exact[i])
    return short


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=True, allow_nan=False)


def _memory_record(m: Memory, embedding: npt.NDArray[np.float32] | None) -> dict[str, Any]:
    return {
        "type": "memory",
        "id": m.id,
        "namespace": m.namespace,
        "content": m.content,
        "tier": str(m.tier),
        "level": None if m.level is None else str(m.level),
        "summary": m.summary,
        "metadata": m.metadata,
        "tags": m.tags,
        "importance": m.importance,
        "created_at": _iso(m.created_at),
        "updated_at": _iso(m.updated_at),
        "last_accessed_at": _iso(m.last_accessed_at),
        "access_count": m.access_count,
        "expires_at": _iso(m.expires_at),
        "superseded_by": m.superseded_by,
        "valid_from": _iso(m.valid_from),
        "valid_to": _iso(m.valid_to),
        "confidence": m.confidence,
        "linked_memory_ids": m.linked_memory_ids,
        "embedding": None if embedding is None else _f32_list(embedding),
    }


def _link_record(link: NamespaceLink) -> dict[str, Any]:
    return {
        "type": "link",
        "src": link.src,
        "dst": link.dst,
        "tiers": None if link.tiers is None else [str(t) for t in link.tiers],
        "note": link.note,
        "created_at": _iso(link.created_at),
    }


def _key_record(key: APIKey) -> dict[str, Any]:
    return {
        "type": "api_key",
        "name": key.name,
        "hash": key.hash,
        "home_ns": key.home_ns,
        "default_ns": key.default_ns,
        "created_at": _iso(key.created_at),
        "disabled": key.disabled,
    }


def _event_record(e: Event) -> dict[str, Any]:
    return {
        "type": "event",
        "id": e.id,
        "op_id": e.op_id,
        "kind": str(e.kind),
        "namespace": e.namespace,
        "query": e.query,
        "memory_id": e.memory_id,
        "memory_ns": e.memory_ns,
        "memory_tier": None if e.memory_tier is None else str(e.memory_tier),
        "memory_summary": e.memory_summary,
        "rank": e.rank,
        "score": e.score,
        "detail": e.detail,
        "created_at": _iso(e.created_at),
    }


class _BadRecord(Exception):
    """A line that cannot be imported; the message says why."""


_MISSING: Any = object()


class _Fields:
    """Typed, strict access to the fields of one JSON record (unknown fields are an error)."""

    def __init__(self, obj: dict[str, Any], kind: str, allowed: Sequence[str]) -> None:
        unknown = sorted(set(obj) - set(allowed) - {"type"})
        if unknown:
            raise _BadRecord(
                f"unknown field(s) {', '.join(map(repr, unknown))} in a {kind} record "
                f"(fields: {', '.join(allowed)})"
            )
        self._obj = obj

    def _get(self, key: str, expected: str) -> Any:
        value = self._obj.get(key, _MISSING)
        if value is _MISSING:
            raise _BadRecord(f"missing field {key!r} ({expected})")
        return value

    def text(self, key: str, default: str | None = None, *, nonempty: bool = False) -> str:
        value = self._obj.get(key, default)
        if value is None:
            value = self._get(key, "a string")
        if not isinstance(value, str):
            raise _BadRecord(f"field {key!r} must be a string, got {_json_type(value)}")
        if nonempty and not value:
            raise _BadRecord(f"field {key!r} must not be empty")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self._obj.get(key)
        if value is not None and not isinstance(value, str):
            raise _BadRecord(f"field {key!r} must be a string or null, got {_json_type(value)}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self._obj.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _BadRecord(f"field {key!r} must be a number, got {_json_type(value)}")
        return float(value)

    def opt_number(self, key: str) -> float | None:
        value = self._obj.get(key)
        return None if value is None else self.number(key, 0.0)

    def integer(self, key: str, default: int) -> int:
        value = self._obj.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _BadRecord(f"field {key!r} must be an integer, got {_json_type(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._obj.get(key, default)
        if not isinstance(value, bool):
            raise _BadRecord(f"field {key!r} must be true or false, got {_json_type(value)}")
        return value

    def moment(self, key: str) -> datetime | None:
        value = self._obj.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise _BadRecord(
                f"field {key!r} must be an ISO-8601 string or null, got {_json_type(value)}"
            )
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            raise _BadRecord(f"field {key!r}: {value!r} is not an ISO-8601 datetime") from None
        return dt.replace(tzinfo=UTC) if dt.utcoffset() is None else dt.astimezone(UTC)

    def texts(self, key: str) -> list[str]:
        value = self._obj.get(key, [])
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise _BadRecord(f"field {key!r} must be a list of strings")
        return cast("list[str]", value)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._obj.get(key, {})
        if not isinstance(value, dict):
            raise _BadRecord(f"field {key!r} must be an object, got {_json_type(value)}")
        return cast("dict[str, Any]", value)

    def enum(self, cls: type[_E], key: str, default: _E | None) -> _E | None:
        value = self._obj.get(key, default)
        if value is None or isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise _BadRecord(f"field {key!r}: {value!r} is not one of {allowed}") from None

    def embedding(self, key: str, dims: int) -> npt.NDArray[np.float32] | None:
        value = self._obj.get(key)
        if value is None:
            return None
        if isinstance(value, np.ndarray):  # the demo hands arrays in directly
            arr = value.astype(np.float32, copy=False).reshape(-1)
        else:
            if not isinstance(value, list) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in value
            ):
                raise _BadRecord(f"field {key!r} must be a list of numbers or null")
            with np.errstate(over="ignore"):
                arr = np.asarray(value, dtype=np.float32)
        if arr.size == 0:
            return None
        if arr.size != dims:
            raise _BadRecord(
                f"embedding has {arr.size} dims, the store expects {dims} "
                "(import into a store opened with that many dims, or re-embed)"
            )
        if not np.isfinite(arr).all():
            raise _BadRecord("embedding holds NaN or infinite values (or values beyond float32)")
        return arr


def _json_type(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names |= {list: "a list", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


_MEMORY_FIELDS = (
    *("id", "namespace", "content", "tier", "level", "summary", "metadata", "tags"),
    *("importance", "created_at", "updated_at", "last_accessed_at", "access_count"),
    *("expires_at", "superseded_by", "valid_from", "valid_to", "confidence"),
    *("linked_memory_ids", "embedding"),
)
_LINK_FIELDS = ("src", "dst", "tiers", "note", "created_at")
_KEY_FIELDS = ("name", "hash", "home_ns", "default_ns", "created_at", "disabled")
_EVENT_FIELDS = (
    *("id", "op_id", "kind", "namespace", "query", "memory_id", "memory_ns", "memory_tier"),
    *("memory_summary", "rank", "score", "detail", "created_at"),
)


def _parse_memory(obj: dict[str, Any], default_ns: str, dims: int) -> Memory:
    f = _Fields(obj, "memory", _MEMORY_FIELDS)
    return Memory(
        id=f.opt_text("id") or new_id(),
        namespace=f.opt_text("namespace") or default_ns,
        content=f.text("content"),
        tier=f.enum(Tier, "tier", Tier.SEMANTIC) or Tier.SEMANTIC,
        level=f.enum(Level, "level", None),
        summary=f.text("summary", ""),
        metadata=f.mapping("metadata"),
        tags=f.texts("tags"),
        importance=f.number("importance", 0.0),
        created_at=f.moment("created_at"),
        updated_at=f.moment("updated_at"),
        last_accessed_at=f.moment("last_accessed_at"),
        access_count=f.integer("access_count", 0),
        expires_at=f.moment("expires_at"),
        superseded_by=f.opt_text("superseded_by"),
        valid_from=f.moment("valid_from"),
        valid_to=f.moment("valid_to"),
        confidence=f.opt_number("confidence"),
        linked_memory_ids=f.texts("linked_memory_ids"),
        embedding=f.embedding("embedding", dims),
    )


def _parse_link(obj: dict[str, Any]) -> NamespaceLink:
    f = _Fields(obj, "link", _LINK_FIELDS)
    tiers: list[Tier] | None = None
    if obj.get("tiers") is not None:
        try:
            tiers = [Tier(t) for t in f.texts("tiers")]
        except ValueError as e:
            raise _BadRecord(f"field 'tiers': {e}") from None
    return NamespaceLink(
        src=f.text("src", nonempty=True),
        dst=f.text("dst", nonempty=True),
        tiers=tiers,
        note=f.text("note", ""),
        created_at=f.moment("created_at"),
    )


def _parse_key(obj: dict[str, Any]) -> APIKey:
    f = _Fields(obj, "api_key", _KEY_FIELDS)
    return APIKey(
        name=f.text("name", nonempty=True),
        hash=f.text("hash", nonempty=True),
        home_ns=f.text("home_ns", ""),
        default_ns=f.text("default_ns", ""),
        created_at=f.moment("created_at"),
        disabled=f.boolean("disabled", False),
    )


def _parse_event(obj: dict[str, Any]) -> Event:
    f = _Fields(obj, "event", _EVENT_FIELDS)
    event_id = f.integer("id", 0)
    if not 0 <= event_id <= _MAX_EVENT_ID:
        raise _BadRecord("field 'id' must be between 1 and 2**63-1 (or absent for a new event)")
    return Event(
        op_id=f.text("op_id", nonempty=True),
        kind=f.enum(EventKind, "kind", None) or EventKind(f.text("kind")),
        namespace=f.text("namespace"),
        query=f.text("query", ""),
        memory_id=f.text("memory_id", ""),
        memory_ns=f.text("memory_ns", ""),
        memory_tier=f.enum(Tier, "memory_tier", None),
        memory_summary=f.text("memory_summary", ""),
        rank=f.integer("rank", 0),
        score=f.opt_number("score"),
        detail=f.mapping("detail"),
        created_at=f.moment("created_at"),
        id=event_id,
    )


# --------------------------------------------------------------------------------------------
# Import
# --------------------------------------------------------------------------------------------


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


class _Importer:
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
            self.bad_line(lineno, f"expected a JSON object, got {_json_type(obj)}", None)
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
        except _BadRecord as e:
            self.bad_line(lineno, str(e), counts)
        except MeminiError as e:
            if isinstance(e, CorruptionError | StoreClosedError):
                raise
            self.bad_line(lineno, str(e), counts)

    def _add_memory(self, lineno: int, obj: dict[str, Any]) -> None:
        ids = _Fields(obj, "memory", _MEMORY_FIELDS)
        id_, ns = ids.opt_text("id"), ids.opt_text("namespace") or self.default_ns
        # The id sorts first among the ids it prefixes: one cheap lookup, no full parse.
        if id_ and ((ns, id_) in self._seen or self.store.ids_by_prefix(ns, id_, 1) == [id_]):
            self.summary.memories.skipped += 1
            return
        memory = _parse_memory(obj, self.default_ns, self.dims)
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
        link = _parse_link(obj)
        if self._links is None:
            self._links = {(lk.src, lk.dst) for lk in self.store.list_all_links()}
        if (link.src, link.dst) in self._links:
            self.summary.links.skipped += 1
            return
        self.store.put_link(link)
        self._links.add((link.src, link.dst))
        self.summary.links.inserted += 1

    def _add_key(self, lineno: int, obj: dict[str, Any]) -> None:
        key = _parse_key(obj)
        if self._keys is None:
            self._keys = {k.name for k in self.store.list_api_keys()}
        if key.name in self._keys:
            self.summary.api_keys.skipped += 1
            return
        self.store.put_api_key(key)
        self._keys.add(key.name)
        self.summary.api_keys.inserted += 1

    def _add_event(self, lineno: int, obj: dict[str, Any]) -> None:
        event = _parse_event(obj)
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
    record = _event_record(ev)
    del record["id"]
    return _dumps(record)


def _same_event(stored: Event, ev: Event) -> bool:
    """Whether ``stored`` is ``ev`` as imported (a missing created_at matches any)."""
    a, b = _event_record(stored), _event_record(ev)
    if ev.created_at is None:
        a.pop("created_at")
        b.pop("created_at")
    return a == b


@dataclass
class _Source:
    """The lines of an import file (gzip-compressed ones too; ``-`` = plain stdin) and how far
    through the file reading is."""

    raw: IO[bytes]
    lines: Iterator[bytes]
    size: int | None

    @classmethod
    def open(cls, path: str) -> _Source:
        if path == "-":
            raw: IO[bytes] = sys.stdin.buffer
            return cls(raw, iter(raw), None)
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as e:
            raise CliError(f"cannot read {path}: {e.strerror}") from None
        size = Path(path).stat().st_size
        magic = raw.read(2)
        raw.seek(0)
        if magic == b"\x1f\x8b":
            return cls(raw, iter(gzip.GzipFile(fileobj=raw)), size)
        return cls(raw, iter(raw), size)

    def position(self) -> int:
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        if self.raw is not sys.stdin.buffer:
            self.raw.close()


def _decode(line: bytes) -> tuple[object, str | None]:
    """The JSON value of a line, or an error message."""
    try:
        return json.loads(line), None
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return None, f"invalid JSON: {e.msg} (column {e.colno})"
    except RecursionError:
        return None, "invalid JSON: nested too deeply"


def _numbered(lines: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    for lineno, line in enumerate(lines, start=1):
        if line.strip():
            yield lineno, line


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[rows]:>10,} rows"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def _header_settings(
    obj: dict[str, Any], dims: int | None, metric: Metric | None
) -> tuple[int | None, Metric | None, str, int]:
    """dims, metric, embed model and next event id (0 = not given) from an export header
    (the options win)."""
    version = obj.get("version")
    if not isinstance(version, int) or version < 1:
        raise CliError(f"line 1: export header without a valid version: {version!r}")
    if version > EXPORT_VERSION:
        raise CliError(
            f"line 1: export format version {version} is newer than this memini reads "
            f"({EXPORT_VERSION}); upgrade memini"
        )
    hdims, hmetric, model = obj.get("dims"), obj.get("metric"), obj.get("embed_model", "")
    if dims is None and isinstance(hdims, int) and not isinstance(hdims, bool):
        dims = hdims
    if metric is None and hmetric in _METRICS:
        metric = cast("Metric", hmetric)
    next_event_id = obj.get("next_event_id", 0)
    if isinstance(next_event_id, bool) or not isinstance(next_event_id, int) or next_event_id < 0:
        raise CliError(f"line 1: export header with an invalid next_event_id: {next_event_id!r}")
    return dims, metric, model if isinstance(model, str) else "", next_event_id


def cmd_import(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini import``: bulk-load a JSONL file."""
    src = _Source.open(args.file)
    try:
        return _import(src, args, out, err)
    finally:
        src.close()


def _import(src: _Source, args: argparse.Namespace, out: Console, err: Console) -> int:
    path = Path(args.store)
    dims: int | None = args.dims
    metric: Metric | None = args.metric
    model = ""
    next_event_id = 0
    records = _numbered(src.lines)
    first = next(records, None)
    pending: list[tuple[int, bytes]] = []
    if first is not None:
        obj, _ = _decode(first[1])
        if isinstance(obj, dict) and obj.get("type") == EXPORT_TYPE:
            dims, metric, model, next_event_id = _header_settings(obj, dims, metric)
        else:
            pending.append(first)
            emb = obj.get("embedding") if isinstance(obj, dict) else None
            if dims is None and isinstance(emb, list) and emb:
                dims = len(emb)
    t0 = time.perf_counter()
    with _open_new_or_existing(path, dims, metric) as store, _progress(err) as progress:
        if model:
            current = store.embed_model()
            if not current:
                store.set_embed_model(model)
            elif current != model:
                err.print(f"warning: the store embeds with {current!r}, the file with {model!r}")
        task = progress.add_task(f"importing {args.file}", total=src.size, rows=0)

        def on_error(lineno: int, message: str) -> None:
            progress.console.print(f"line {lineno}: {message}", markup=False, highlight=False)

        imp = _Importer(
            store,
            batch=args.batch,
            default_ns=args.namespace,
            on_error=on_error,
            next_event_id=next_event_id,
        )
        for n, (lineno, line) in enumerate(_chain(pending, records), start=1):
            obj, problem = _decode(line)
            if problem is None:
                imp.add(lineno, obj)
            else:
                imp.bad_line(lineno, problem, None)
            if n % 256 == 0:
                progress.update(task, completed=src.position(), rows=n)
        summary = imp.finish()
    _print_summary(out, summary, time.perf_counter() - t0)
    return 1 if summary.bad else 0


def _chain(
    first: list[tuple[int, bytes]], rest: Iterator[tuple[int, bytes]]
) -> Iterator[tuple[int, bytes]]:
    yield from first
    yield from rest


def _open_new_or_existing(path: Path, dims: int | None, metric: Metric | None) -> Store:
    """Open for import: a new store needs dims; an existing one checks any given dims."""
    try:
        return Store.open(path, dims=dims, metric=metric)
    except StoreLockedError:
        raise CliError(_locked_message(path, "import")) from None
    except DimensionMismatchError as e:
        raise CliError(f"cannot import into {path}: {e}") from None
    except InvalidArgumentError as e:
        if dims is None:
            raise CliError(
                f"{path} is a new store: pass --dims N (the file has no export header and its "
                "first line no embedding to take the dims from)"
            ) from None
        raise CliError(f"cannot open store {path}: {e}") from None
    except MeminiError as e:
        raise CliError(f"cannot open store {path}: {e}") from None


def _print_summary(out: Console, s: ImportSummary, seconds: float) -> None:
    def say(text: str) -> None:
        out.print(text, markup=False, highlight=False)

    say(f"import finished in {seconds:.1f} s")
    kinds = [("memories", s.memories), ("links", s.links), ("api keys", s.api_keys)]
    for name, c in [*kinds, ("events", s.events)]:
        if c.read or name == "memories":
            say(
                f"  {name + ':':<10}{c.read:>10,} read, {c.inserted:,} inserted, "
                f"{c.skipped:,} skipped (already stored), {c.bad:,} bad"
            )
    if s.other_bad:
        say(f"  {'other:':<10}{s.other_bad:>10,} bad (unreadable lines, unknown record types)")
    for note in s.notes:
        say(f"note: {note}")
    if s.bad:
        lines = ", ".join(str(n) for n, _ in s.errors[:20])
        more = f" and {len(s.errors) - 20} more" if len(s.errors) > 20 else ""
        say(f"{s.bad} bad line(s) not imported: {lines}{more} (reasons on stderr)")


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------


def export_store(store: Store, out: IO[str], on_row: Callable[[int], None] | None = None) -> int:
    """Write the whole store to ``out`` in the export format; return the lines written.

    The output is a function of the stored data only: two stores holding the same rows,
    vectors, links, keys and events (with the same ids) and the same next event id export
    to the same bytes.
    """
    stats = store.stats()
    header = {
        "type": EXPORT_TYPE,
        "version": EXPORT_VERSION,
        "dims": stats["dims"],
        "metric": stats["metric"],
        "embed_model": store.embed_model(),
        "next_event_id": int(stats["meta"]["next_event_id"]),
    }
    out.write(_dumps(header) + "\n")
    n = 1
    everything = Filter(
        include_expired=True, include_superseded=True, sort=Sort(SortKey.CREATED_AT, asc=True)
    )
    for ns in store.list_namespaces():
        offset = 0
        while page := store.list(ns, everything, _LIST_PAGE, offset):
            offset += len(page)
            for m in page:
                emb = store.get_embedding(ns, m.id)
                out.write(_dumps(_memory_record(m, emb)) + "\n")
            n += len(page)
            if on_row is not None:
                on_row(len(page))
    for link in store.list_all_links():
        out.write(_dumps(_link_record(link)) + "\n")
        n += 1
    for key in store.list_api_keys():
        out.write(_dumps(_key_record(key)) + "\n")
        n += 1
    for ev in sorted(store.list_events(), key=lambda e: e.id):
        out.write(_dumps(_event_record(ev)) + "\n")
        n += 1
    return n


def cmd_export(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini export``: the whole store as JSONL on stdout (or ``--output``)."""
    path = Path(args.store)
    with _open_store(path, "export") as store, contextlib.ExitStack() as stack:
        total = int(store.stats()["rows"])
        target: IO[str] = sys.stdout  # the export is ASCII: any stdout encoding takes it
        if args.output not in (None, "-"):
            target = stack.enter_context(open(args.output, "w", encoding="ascii", newline="\n"))
        progress = stack.enter_context(_progress(err))
        task = progress.add_task("exporting", total=total, rows=0)
        done = 0

        def on_rows(k: int) -> None:
            nonlocal done
            done += k
            progress.update(task, completed=done, rows=done)

        lines = export_store(store, target, on_rows)
        target.flush()
    if args.output not in (None, "-"):
        err.print(f"exported {total:,} memories ({lines:,} lines) to {args.output}")
    return 0


# --------------------------------------------------------------------------------------------
# stats, compact, check
# --------------------------------------------------------------------------------------------


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _print_stats(out: Console, path: Path, st: dict[str, Any], model: str) -> None:
    out.print(
        f"store {path}: {st['rows']:,} memories, {st['dims']} dims, metric {st['metric']}, "
        f"embed model {model or '(unset)'}, {_size(st['bytes_on_disk'])} on disk",
        markup=False,
        highlight=False,
    )
    tiers = [t.value for t in Tier]
    table = Table("namespace", "rows", "vectors", *tiers)
    for col in table.columns[1:]:
        col.justify = "right"
    for ns, c in sorted(st["namespaces"].items()):
        table.add_row(ns, f"{c['rows']:,}", f"{c['vectors']:,}", *[f"{c[t]:,}" for t in tiers])
    out.print(table)
    meta = st.get("meta", {})
    out.print(
        f"indexes: {st['keyword_docs']:,} keyword docs; vectors in "
        f"{st['vector_graphs']} HNSW graph(s) + {st['vector_flat_partitions']} flat "
        f"partition(s), {_size(st['vector_memory_bytes'])} in memory\n"
        f"meta: {meta.get('links', 0):,} links, {meta.get('api_keys', 0):,} API keys, "
        f"{meta.get('events', 0):,} events, {_size(meta.get('bytes', 0))}",
        markup=False,
        highlight=False,
    )


def cmd_stats(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini stats``: counts per namespace and tier, index and disk sizes."""
    path = Path(args.store)
    with _open_store(path, "stats") as store:
        st, model = store.stats(), store.embed_model()
    if args.json:
        out.print_json(data=st)
    else:
        _print_stats(out, path, st, model)
    return 0


def cmd_compact(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini compact``: reclaim the space of deleted rows."""
    path = Path(args.store)
    with _open_store(path, "compact") as store:
        before = int(store.stats()["bytes_on_disk"]) + int(store.stats()["meta"]["bytes"])
        t0 = time.perf_counter()
        store.compact()
        seconds = time.perf_counter() - t0
        st = store.stats()
        after = int(st["bytes_on_disk"]) + int(st["meta"]["bytes"])
    out.print(f"compacted {path} in {seconds:.1f} s: {_size(before)} -> {_size(after)}")
    return 0


@dataclass
class _Check:
    rows: int
    keyword_docs: int
    vectors: int
    vector_index: int | None
    probe_found: int
    probe_total: int

    @property
    def ok(self) -> bool:
        vec_ok = self.vector_index is None or self.vector_index == self.vectors
        probe_ok = self.probe_found == self.probe_total
        return self.rows == self.keyword_docs and vec_ok and probe_ok


def _vector_probe(store: Store, per_namespace: int = 20) -> tuple[int, int]:
    """Search with a few stored vectors: each must find its own row (or a tie scoring at
    least as high), else the vector index lacks it. Returns (found, probed)."""
    found = probed = 0
    everything = Filter(include_expired=True, include_superseded=True)
    metric = store.stats()["metric"]
    for ns in store.list_namespaces():
        vecs = [(m.id, store.get_embedding(ns, m.id)) for m in store.list(ns, everything, 200)]
        for id_, emb in [(i, e) for i, e in vecs if e is not None][:per_namespace]:
            probed += 1
            hits = store.vector_search(ns, emb, everything, k=10)
            v = emb.astype(np.float64)
            best = float(v @ v) if metric == "ip" else 1.0  # l2: 1/(1+0), cos: 1
            if any(h.memory.id == id_ for h in hits) or (hits and hits[0].score >= best - 1e-6):
                found += 1
    return found, probed


def _check(store: Store) -> _Check:
    st = store.stats()
    vectors = sum(int(c["vectors"]) for c in st["namespaces"].values())
    index = st.get("vector_index_entries")
    found, total = _vector_probe(store)
    return _Check(
        rows=int(st["rows"]),
        keyword_docs=int(st["keyword_docs"]),
        vectors=vectors,
        vector_index=None if index is None else int(index),
        probe_found=found,
        probe_total=total,
    )


def _print_check(out: Console, c: _Check) -> None:
    mark = {True: "ok", False: "MISMATCH"}
    out.print(
        f"rows {c.rows:,} vs keyword index {c.keyword_docs:,} docs: "
        f"{mark[c.rows == c.keyword_docs]}"
    )
    if c.vector_index is None:
        out.print(f"rows with a vector {c.vectors:,}; vector index count not reported by stats()")
    else:
        out.print(
            f"rows with a vector {c.vectors:,} vs vector index {c.vector_index:,}: "
            f"{mark[c.vectors == c.vector_index]}"
        )
    out.print(
        f"vector probe: {c.probe_found}/{c.probe_total} stored vectors find their row: "
        f"{mark[c.probe_found == c.probe_total]}"
    )


def cmd_check(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini check``: compare the rows with the keyword and vector indexes."""
    path = Path(args.store)
    store = _open_store(path, "check")
    try:
        result = _check(store)
    finally:
        store.close()
    _print_check(out, result)
    if not args.repair:
        if result.ok:
            out.print("indexes are consistent with the rows")
            return 0
        out.print("indexes are out of step with the rows: run `memini check --repair`")
        return 2
    # The indexes are derived from the rows: remove them and let open() rebuild them.
    t0 = time.perf_counter()
    for name in ("vectors", "keyword"):
        target = path / name
        if target.is_dir():
            shutil.rmtree(target)
    with _open_store(path, "check --repair") as store:
        after = _check(store)
    out.print(
        f"rebuilt the vector and keyword indexes from the rows in {time.perf_counter() - t0:.1f} s"
    )
    _print_check(out, after)
    return 0 if after.ok else 2


# --------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------


@dataclass
class _Sample:
    records: list[dict[str, Any]]
    vectors: npt.NDArray[np.float32]
    queries: list[tuple[str, npt.NDArray[np.float32]]]
    model: str


def _load_sample() -> _Sample:
    data = importlib.resources.files("memini").joinpath("data")
    with data.joinpath("sample.jsonl.gz").open("rb") as f:
        records = [json.loads(line) for line in gzip.GzipFile(fileobj=f)]
    with data.joinpath("sample.f16.npy.gz").open("rb") as f:
        vectors = np.lib.format.read_array(gzip.GzipFile(fileobj=f)).astype(np.float32)
    meta = json.loads(data.joinpath("sample_queries.json").read_text(encoding="utf-8"))
    queries = [
        (q["text"], np.frombuffer(base64.b64decode(q["embedding_f16"]), "<f2").astype(np.float32))
        for q in meta["queries"]
    ]
    return _Sample(records, vectors, queries, meta["model"])


def _hit_line(h: Scored, store: Store | None = None) -> str:
    """One search hit on one line: score, package name, text, and any supersession."""
    m = h.memory
    text = m.content if len(m.content) <= 60 else m.content[:57] + "..."
    line = f"   {h.score:6.3f}  {m.summary[:24]:<24} {text}"
    if m.superseded_by:
        successor = m.superseded_by
        if store is not None:
            with contextlib.suppress(MeminiError):
                successor = store.get(m.namespace, successor).summary or successor
        when = m.valid_to.date().isoformat() if m.valid_to else "?"
        line += f"\n            (superseded by {successor} on {when})"
    return line


def _timed(fn: Callable[[], list[Scored]]) -> tuple[list[Scored], float]:
    t0 = time.perf_counter()
    hits = fn()
    return hits, (time.perf_counter() - t0) * 1000


def cmd_demo(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini demo``: import the shipped sample into a store and run a few recalls."""
    sample = _load_sample()
    dims = sample.vectors.shape[1]
    path = Path(args.store)
    ns = "pypi"

    def say(text: str = "") -> None:
        out.print(text, markup=False, highlight=False)

    store = _open_new_or_existing(path, dims, "cos")
    with store:
        if not store.embed_model():
            store.set_embed_model(sample.model)
        say(
            f"memini demo: store {path} ({dims} dims, {store.stats()['metric']}), "
            f"sample of {len(sample.records):,} PyPI package summaries ({sample.model})"
        )
        t0 = time.perf_counter()
        imp = _Importer(
            store,
            batch=1000,
            default_ns=ns,
            on_error=lambda n, msg: err.print(f"sample row {n}: {msg}", markup=False),
        )
        with _progress(err) as progress:
            task = progress.add_task("importing sample", total=len(sample.records), rows=0)
            for i, rec in enumerate(sample.records):
                imp.add(i + 1, {**rec, "embedding": sample.vectors[i]})
                if i % 500 == 499:
                    progress.update(task, completed=i + 1, rows=i + 1)
            s = imp.finish()
        secs = time.perf_counter() - t0
        rate = f", {s.memories.inserted / secs:,.0f} rows/s" if s.memories.inserted else ""
        say(
            f"import: {s.memories.inserted:,} inserted, {s.memories.skipped:,} already there, "
            f"{s.bad} bad, in {secs:.1f} s{rate}"
        )
        live = store.count(ns)
        total = store.count(ns, Filter(include_superseded=True, include_expired=True))
        say(f"namespace {ns!r}: {total:,} memories, {live:,} live ({total - live:,} superseded)")

        (q1, v1), (q2, v2) = sample.queries[0], sample.queries[1]
        say()
        hits, ms = _timed(lambda: store.vector_search(ns, v1, k=5))
        say(f"1. vector recall, k=5 ({ms:.1f} ms): {q1!r}")
        for h in hits:
            say(_hit_line(h, store))

        kw = "pdf extract text tables"
        hits, ms = _timed(lambda: store.keyword_search(ns, kw, k=5))
        say(f"2. keyword recall (BM25), k=5 ({ms:.1f} ms): {kw!r}")
        for h in hits:
            say(_hit_line(h, store))

        flt = Filter(
            tags=["cli"],
            tiers=[Tier.PROCEDURAL, Tier.SEMANTIC],
            created_after=datetime(2023, 1, 1, tzinfo=UTC),
        )
        hits, ms = _timed(lambda: store.vector_search(ns, v2, flt, k=5))
        say(
            f"3. filtered vector recall, tag 'cli', tier procedural|semantic, created in 2023 "
            f"or later ({ms:.1f} ms): {q2!r}"
        )
        for h in hits:
            say(_hit_line(h, store))

        q3, v3 = sample.queries[4]
        when = datetime(2022, 1, 1, tzinfo=UTC)
        then = Filter(as_of=when)
        hits_now, ms_now = _timed(lambda: store.vector_search(ns, v3, k=5))
        hits_then, ms_then = _timed(lambda: store.vector_search(ns, v3, then, k=5))
        valid_then = store.count(ns, then)
        say(f"4. time travel: {q3!r}")
        say(f"   now, live rows ({ms_now:.1f} ms):")
        for h in hits_now:
            say(_hit_line(h, store))
        say(f"   as_of {when.date()}, the {valid_then:,} rows valid then ({ms_then:.1f} ms):")
        for h in hits_then:
            say(_hit_line(h, store))
    return 0


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memini",
        description="memini: an embeddable memory store for AI agents.",
        epilog="Exit status: 0 ok; 1 error or bad import lines; 2 check found a mismatch.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress of long work")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def store_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--store", required=True, metavar="DIR", help="store directory")

    sp = sub.add_parser("import", help="bulk-load a JSONL file (export format or plain rows)")
    sp.add_argument("file", metavar="FILE", help="JSONL file, .gz accepted, - for stdin")
    store_arg(sp)
    sp.add_argument(
        "--dims",
        type=_positive,
        help="vector dims of a new store "
        "(default: the export header's, or the first embedding's length)",
    )
    sp.add_argument("--metric", choices=_METRICS, help="metric of a new store (default l2)")
    sp.add_argument("--batch", type=_positive, default=1000, help="rows per commit (1000)")
    sp.add_argument(
        "--namespace", default="default", help="namespace of lines without one (default 'default')"
    )
    sp.set_defaults(func=cmd_import)

    sp = sub.add_parser("export", help="write the whole store as versioned JSONL")
    store_arg(sp)
    sp.add_argument("-o", "--output", metavar="FILE", help="output file (default stdout)")
    sp.set_defaults(func=cmd_export)

    sp = sub.add_parser("stats", help="counts per namespace and tier, index and disk sizes")
    store_arg(sp)
    sp.add_argument("--json", action="store_true", help="print Store.stats() as JSON")
    sp.set_defaults(func=cmd_stats)

    sp = sub.add_parser("compact", help="reclaim the space of deleted rows")
    store_arg(sp)
    sp.set_defaults(func=cmd_compact)

    sp = sub.add_parser("check", help="compare the rows with the vector and keyword indexes")
    store_arg(sp)
    sp.add_argument(
        "--repair",
        action="store_true",
        help="rebuild both indexes from the rows (the store must be closed)",
    )
    sp.set_defaults(func=cmd_check)

    sp = sub.add_parser("demo", help="import the shipped PyPI sample and run a few recalls")
    sp.add_argument(
        "--store",
        default=DEFAULT_DEMO_STORE,
        metavar="DIR",
        help=f"store directory (default {DEFAULT_DEMO_STORE})",
    )
    sp.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    Args:
        argv: The arguments after the program name; None reads ``sys.argv``.
    """
    args = _parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    func = cast("Callable[[argparse.Namespace, Console, Console], int]", args.func)
    try:
        return func(args, out, err)
    except CliError as e:
        err.print(f"memini {args.command}: {e}", markup=False)
        return 1
    except MeminiError as e:
        err.print(f"memini {args.command}: {type(e).__name__}: {e}", markup=False)
        return 1
    except BrokenPipeError:
        return 1
    except KeyboardInterrupt:
        err.print("interrupted; every batch that finished is stored")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
