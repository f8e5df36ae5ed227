"""Feeding parsed records into an open store.

Every record is checked by the facade's own validators (`memini._convert.memory_to_row`,
`memini.links.prepare_link`, `memini.keys.prepare_api_key`, `memini.events.check_event`)
when its line is read, so a bad line is reported with its number and the same message a
Python caller would get. A record whose identity (memory id in its namespace, link
``src -> dst``, API key name) is stored already, or came earlier in the file, is skipped,
updated or refused, as ``on_existing`` says. Events are a log: one stored already (same id
and content, or same content under another id) is always skipped.

Writing: by default memories land in atomic batches (a row the store refuses is isolated by
splitting its batch, so the rest still lands), links and keys one by one, events all together
at the end so that their ids can be restored. With ``atomic`` nothing is written while the
lines are read; `Importer.finish` writes only when no line was bad, the memories in one
transaction first (the store's last checks, such as an id used in another namespace, refuse
it whole), then the links, keys and events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from memini._convert import memory_to_row
from memini._values import check_int
from memini.cli.common import CliError
from memini.cli.records import (
    EXPORT_TYPE,
    BadRecord,
    dumps,
    event_record,
    json_type,
    memory_identity,
    parse_event,
    parse_key,
    parse_link,
    parse_memory,
)
from memini.errors import (
    CorruptionError,
    DimensionMismatchError,
    MeminiError,
    StoreClosedError,
)
from memini.events import check_event
from memini.keys import prepare_api_key
from memini.links import prepare_link
from memini.store import Store
from memini.types import APIKey, Event, Memory, NamespaceLink

__all__ = ["ON_EXISTING", "ImportSummary", "Importer", "OnExisting"]

OnExisting = Literal["skip", "update", "fail"]
ON_EXISTING: tuple[OnExisting, ...] = ("skip", "update", "fail")
"""What to do with a record stored already: skip it, overwrite it, or report it as bad."""

_Decision = Literal["insert", "update", "skip"]


@dataclass
class _Counts:
    read: int = 0
    inserted: int = 0
    updated: int = 0
    skipped: int = 0
    bad: int = 0

    def add(self, decision: _Decision) -> None:
        if decision == "insert":
            self.inserted += 1
        elif decision == "update":
            self.updated += 1


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
    on_existing: OnExisting = "skip"
    atomic: bool = False
    written: bool = True
    """False when an atomic import found bad lines and wrote nothing."""

    @property
    def bad(self) -> int:
        """Lines not imported because of an error."""
        kinds = (self.memories, self.links, self.api_keys, self.events)
        return self.other_bad + sum(c.bad for c in kinds)


@dataclass
class _Pending:
    """A memory waiting for its batch, and how many lines it counts for when it lands (an
    update of an id repeated in the file replaces the earlier line's memory)."""

    lineno: int
    memory: Memory
    row: dict[str, Any]  # the memory validated (`memini._convert.memory_to_row`)
    inserted: int = 0
    updated: int = 0


class Importer:
    """Feeds records into an open store (see the module docstring for the rules)."""

    def __init__(
        self,
        store: Store,
        *,
        batch: int,
        default_ns: str,
        on_error: Callable[[int, str], None],
        next_event_id: int = 0,
        on_existing: OnExisting = "skip",
        atomic: bool = False,
        fresh: bool = False,
    ) -> None:
        self.store = store
        self.next_event_id = next_event_id  # from the export header; 0 = none
        self.dims = int(store.stats()["dims"])
        self.batch_size = batch
        self.default_ns = default_ns
        self.on_error = on_error
        self.on_existing = on_existing
        self.atomic = atomic
        self.summary = ImportSummary(on_existing=on_existing, atomic=atomic)
        # memories not written yet: the pending batch, or with ``atomic`` the whole file
        self._pending: dict[tuple[str, str], _Pending] = {}
        # ``fresh``: the store held no memory at the start, so the only stored ones are those
        # this import landed, and no line costs a lookup in the store
        self._landed: set[tuple[str, str]] | None = set() if fresh else None
        # identities of the store's and the file's links and keys: the line that brought
        # one, or 0 for one that was stored before the import
        self._links: dict[tuple[str, str], int] | None = None
        self._keys: dict[str, int] | None = None
        self._key_hashes: dict[str, str] = {}  # hash -> key name, of the file's keys
        self._writes: list[tuple[NamespaceLink | APIKey, _Decision]] = []  # atomic only
        self._events: list[tuple[int, Event]] = []

    # ------------------------------------------------------------------ reading

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

    def _decide(self, counts: _Counts, what: str, earlier: int | None) -> _Decision:
        """Apply ``on_existing`` to a record: ``earlier`` is the line that brought its
        identity before, 0 for the store, None when it is new."""
        if earlier is None:
            return "insert"
        if self.on_existing == "skip":
            counts.skipped += 1
            return "skip"
        if self.on_existing == "fail":
            where = "stored already" if earlier == 0 else f"on line {earlier} already"
            raise BadRecord(
                f"{what} is {where} (--on-existing fail; --on-existing update overwrites it, "
                "skip keeps the stored one)"
            )
        return "update"

    def _add_memory(self, lineno: int, obj: dict[str, Any]) -> None:
        counts = self.summary.memories
        given = memory_identity(obj, self.default_ns)
        decision: _Decision = "insert"
        if given is not None:  # decided before parsing: a skipped line costs one lookup
            decision = self._decide(counts, _memory_name(*given), self._memory_seen(given))
            if decision == "skip":
                return
        memory = parse_memory(obj, self.default_ns)
        row = self._validate(memory)
        key = (memory.namespace, memory.id)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending(lineno, memory, row)
        else:  # an update of a memory this file brought: the later line wins
            pending.lineno, pending.memory, pending.row = lineno, memory, row
        pending.inserted += decision == "insert"
        pending.updated += decision == "update"
        if not self.atomic and len(self._pending) >= self.batch_size:
            self.flush()

    def _memory_seen(self, key: tuple[str, str]) -> int | None:
        pending = self._pending.get(key)
        if pending is not None:
            return pending.lineno
        if self._landed is not None:
            return 0 if key in self._landed else None
        ns, id_ = key
        # The id sorts first among the ids it prefixes: one cheap lookup.
        return 0 if self.store.ids_by_prefix(ns, id_, 1) == [id_] else None

    def _validate(self, memory: Memory) -> dict[str, Any]:
        """The store's own checks of a memory, with command-line advice on its dims; the
        row they make, which the write takes as it is."""
        try:
            return memory_to_row(memory, self.dims)
        except DimensionMismatchError:
            n = len(memory.embedding) if memory.embedding is not None else 0
            raise BadRecord(
                f"embedding has {n} dims and the store has {self.dims}: re-embed this row, "
                f"or import the file into a new store (--store NEW_DIR --dims {n})"
            ) from None

    def _add_link(self, lineno: int, obj: dict[str, Any]) -> None:
        link = parse_link(obj)
        prepare_link(link)
        if self._links is None:
            self._links = {(lk.src, lk.dst): 0 for lk in self.store.list_all_links()}
        key = (link.src, link.dst)
        what = f"link {link.src!r} -> {link.dst!r}"
        decision = self._decide(self.summary.links, what, self._links.get(key))
        if decision == "skip":
            return
        if self.atomic:
            self._writes.append((link, decision))
        else:
            self.store.put_link(link)
            self.summary.links.add(decision)
        self._links[key] = lineno

    def _add_key(self, lineno: int, obj: dict[str, Any]) -> None:
        key = parse_key(obj)
        hash_ = prepare_api_key(key)[1]  # validated, in its stored form
        if self._keys is None:
            self._keys = {k.name: 0 for k in self.store.list_api_keys()}
        decision = self._decide(
            self.summary.api_keys, f"API key {key.name!r}", self._keys.get(key.name)
        )
        if decision == "skip":
            return
        if self.atomic:
            self._check_hash_free(key.name, hash_)
            self._writes.append((key, decision))
        else:
            self.store.put_api_key(key)
            self.summary.api_keys.add(decision)
        self._keys[key.name] = lineno
        self._key_hashes[hash_] = key.name

    def _check_hash_free(self, name: str, hash_: str) -> None:
        """Refuse a key whose hash another key holds: the one store rule a valid key can
        still break when written, checked early since an atomic import must not fail once
        it has started writing."""
        owner = self._key_hashes.get(hash_)
        if owner is None:
            stored = self.store.get_api_key_by_hash(hash_)
            owner = None if stored is None else stored.name
        if owner is not None and owner != name:
            raise BadRecord(
                f"API key {name!r}: its hash is already used by key {owner!r} "
                "(generate a new secret, or change that key first)"
            )

    def _add_event(self, lineno: int, obj: dict[str, Any]) -> None:
        event = parse_event(obj)
        check_event(event)  # the store's checks now, so that a bad line is reported alone
        check_int(event.id, "event.id", non_negative=True)  # 0 = none: it gets a new id
        self._events.append((lineno, event))

    # ------------------------------------------------------------------ writing

    def flush(self) -> None:
        """Store the pending batch of memories; a bad row is reported, the others land."""
        batch, self._pending = list(self._pending.values()), {}
        self._land(batch)

    def _land(self, rows: list[_Pending]) -> None:
        """Upsert ``rows`` atomically; on failure split in halves until the bad rows are
        isolated, so everything else still lands (a few extra commits per bad row)."""
        if not rows:
            return
        try:
            self.store._upsert_rows([p.row for p in rows], [p.memory for p in rows])
        except (CorruptionError, StoreClosedError):
            raise
        except MeminiError as e:
            if len(rows) == 1:
                self.bad_line(rows[0].lineno, str(e), self.summary.memories)
                return
            mid = len(rows) // 2
            self._land(rows[:mid])
            self._land(rows[mid:])
            return
        self.summary.memories.inserted += sum(p.inserted for p in rows)
        self.summary.memories.updated += sum(p.updated for p in rows)
        if self._landed is not None:
            self._landed.update((p.memory.namespace, p.memory.id) for p in rows)

    def finish(self, into: Store | None = None) -> ImportSummary:
        """Store what is pending and the buffered events; return the summary.

        Args:
            into: With ``atomic``, the store to write into when it is not the one the lines
                were checked against (an empty in-memory store stands in for a store that is
                only created once the file proved good).

        Raises:
            CliError: An atomic import the store refused; nothing was written.
        """
        if not self.atomic:
            self.flush()
        elif self.summary.bad:
            self.summary.written = False
            return self.summary
        else:
            if into is not None:
                self.store = into
            self._write_all()
        if self._events or self.next_event_id:
            self._restore_events()
        return self.summary

    def _write_all(self) -> None:
        """An atomic import's writes: all memories in one transaction, then the rest."""
        pending = list(self._pending.values())
        self._pending = {}
        try:
            self.store._upsert_rows([p.row for p in pending], [p.memory for p in pending])
        except (CorruptionError, StoreClosedError):
            raise
        except MeminiError as e:
            raise CliError(f"nothing imported: the store refused the memories: {e}") from None
        self.summary.memories.inserted += sum(p.inserted for p in pending)
        self.summary.memories.updated += sum(p.updated for p in pending)
        for record, decision in self._writes:
            if isinstance(record, NamespaceLink):
                self.store.put_link(record)
                self.summary.links.add(decision)
            else:
                self.store.put_api_key(record)
                self.summary.api_keys.add(decision)

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


def _memory_name(namespace: str, id_: str) -> str:
    return f"memory {id_!r} of namespace {namespace!r}"


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
