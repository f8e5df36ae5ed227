"""The JSONL export format: record builders, parsers, header.

Version 1 is one JSON object per line: a header ``{"type": "memini-export", "version": 1,
"dims": .., "metric": .., "embed_model": .., "next_event_id": ..}`` (the id the store hands
the next event; absent in older exports), then ``"type": "memory"`` records (every `Memory`
field; datetimes ISO-8601 UTC with microseconds; ``embedding`` a list of floats that parse back
to the same float32 values, or null) ordered by namespace then ``created_at``, then ``"link"``,
``"api_key"`` (hashes only) and ``"event"`` records (with their ids, ascending).

Plain lines such as ``{"content": "...", "embedding": [...]}`` are memories too: a missing
``type`` means a memory, a missing ``id`` gets `memini.new_id`, a missing ``namespace`` the
importer's default.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from memini.cli.common import METRICS, CliError, Metric
from memini.types import (
    APIKey,
    Event,
    EventKind,
    Level,
    Memory,
    NamespaceLink,
    Tier,
    new_id,
)

__all__ = [
    "EVENT_FIELDS",
    "EXPORT_TYPE",
    "EXPORT_VERSION",
    "KEY_FIELDS",
    "LINK_FIELDS",
    "MEMORY_FIELDS",
    "BadRecord",
    "Fields",
    "decode_line",
    "dumps",
    "event_record",
    "header_settings",
    "json_type",
    "key_record",
    "link_record",
    "memory_record",
    "parse_event",
    "parse_key",
    "parse_link",
    "parse_memory",
]

EXPORT_TYPE = "memini-export"
"""The ``type`` of the header line of an export."""
EXPORT_VERSION = 1
"""The export format version this module writes and the newest it reads."""

_MAX_EVENT_ID = 2**63 - 1  # SQLite's largest rowid

_E = TypeVar("_E", Tier, Level, EventKind)


# --------------------------------------------------------------------------------------------
# Values -> JSON
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


def dumps(obj: dict[str, Any]) -> str:
    """One record as one line of ASCII JSON (no newline)."""
    return json.dumps(obj, ensure_ascii=True, allow_nan=False)


def memory_record(m: Memory, embedding: npt.NDArray[np.float32] | None) -> dict[str, Any]:
    """The export record of a memory and its vector."""
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


def link_record(link: NamespaceLink) -> dict[str, Any]:
    """The export record of a namespace link."""
    return {
        "type": "link",
        "src": link.src,
        "dst": link.dst,
        "tiers": None if link.tiers is None else [str(t) for t in link.tiers],
        "note": link.note,
        "created_at": _iso(link.created_at),
    }


def key_record(key: APIKey) -> dict[str, Any]:
    """The export record of an API key (its hash, never a secret)."""
    return {
        "type": "api_key",
        "name": key.name,
        "hash": key.hash,
        "home_ns": key.home_ns,
        "default_ns": key.default_ns,
        "created_at": _iso(key.created_at),
        "disabled": key.disabled,
    }


def event_record(e: Event) -> dict[str, Any]:
    """The export record of an event, with its id."""
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


# --------------------------------------------------------------------------------------------
# JSON -> values
# --------------------------------------------------------------------------------------------


class BadRecord(Exception):
    """A line that cannot be imported; the message says why."""


_MISSING: Any = object()


class Fields:
    """Typed, strict access to the fields of one JSON record (unknown fields are an error)."""

    def __init__(self, obj: dict[str, Any], kind: str, allowed: Sequence[str]) -> None:
        unknown = sorted(set(obj) - set(allowed) - {"type"})
        if unknown:
            raise BadRecord(
                f"unknown field(s) {', '.join(map(repr, unknown))} in a {kind} record "
                f"(fields: {', '.join(allowed)})"
            )
        self._obj = obj

    def _get(self, key: str, expected: str) -> Any:
        value = self._obj.get(key, _MISSING)
        if value is _MISSING:
            raise BadRecord(f"missing field {key!r} ({expected})")
        return value

    def text(self, key: str, default: str | None = None, *, nonempty: bool = False) -> str:
        value = self._obj.get(key, default)
        if value is None:
            value = self._get(key, "a string")
        if not isinstance(value, str):
            raise BadRecord(f"field {key!r} must be a string, got {json_type(value)}")
        if nonempty and not value:
            raise BadRecord(f"field {key!r} must not be empty")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self._obj.get(key)
        if value is not None and not isinstance(value, str):
            raise BadRecord(f"field {key!r} must be a string or null, got {json_type(value)}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self._obj.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadRecord(f"field {key!r} must be a number, got {json_type(value)}")
        return float(value)

    def opt_number(self, key: str) -> float | None:
        value = self._obj.get(key)
        return None if value is None else self.number(key, 0.0)

    def integer(self, key: str, default: int) -> int:
        value = self._obj.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRecord(f"field {key!r} must be an integer, got {json_type(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._obj.get(key, default)
        if not isinstance(value, bool):
            raise BadRecord(f"field {key!r} must be true or false, got {json_type(value)}")
        return value

    def moment(self, key: str) -> datetime | None:
        value = self._obj.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise BadRecord(
                f"field {key!r} must be an ISO-8601 string or null, got {json_type(value)}"
            )
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            raise BadRecord(f"field {key!r}: {value!r} is not an ISO-8601 datetime") from None
        return dt.replace(tzinfo=UTC) if dt.utcoffset() is None else dt.astimezone(UTC)

    def texts(self, key: str) -> list[str]:
        value = self._obj.get(key, [])
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise BadRecord(f"field {key!r} must be a list of strings")
        return cast("list[str]", value)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._obj.get(key, {})
        if not isinstance(value, dict):
            raise BadRecord(f"field {key!r} must be an object, got {json_type(value)}")
        return cast("dict[str, Any]", value)

    def enum(self, cls: type[_E], key: str, default: _E | None) -> _E | None:
        value = self._obj.get(key, default)
        if value is None or isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise BadRecord(f"field {key!r}: {value!r} is not one of {allowed}") from None

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
                raise BadRecord(f"field {key!r} must be a list of numbers or null")
            with np.errstate(over="ignore"):
                arr = np.asarray(value, dtype=np.float32)
        if arr.size == 0:
            return None
        if arr.size != dims:
            raise BadRecord(
                f"embedding has {arr.size} dims, the store expects {dims} "
                "(import into a store opened with that many dims, or re-embed)"
            )
        if not np.isfinite(arr).all():
            raise BadRecord("embedding holds NaN or infinite values (or values beyond float32)")
        return arr


def json_type(value: object) -> str:
    """How a JSON value's type reads in a message: "a string", "null", ..."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names |= {list: "a list", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


MEMORY_FIELDS = (
    *("id", "namespace", "content", "tier", "level", "summary", "metadata", "tags"),
    *("importance", "created_at", "updated_at", "last_accessed_at", "access_count"),
    *("expires_at", "superseded_by", "valid_from", "valid_to", "confidence"),
    *("linked_memory_ids", "embedding"),
)
LINK_FIELDS = ("src", "dst", "tiers", "note", "created_at")
KEY_FIELDS = ("name", "hash", "home_ns", "default_ns", "created_at", "disabled")
EVENT_FIELDS = (
    *("id", "op_id", "kind", "namespace", "query", "memory_id", "memory_ns", "memory_tier"),
    *("memory_summary", "rank", "score", "detail", "created_at"),
)


def parse_memory(obj: dict[str, Any], default_ns: str, dims: int) -> Memory:
    """The `Memory` of a memory record (a missing id gets `new_id`)."""
    f = Fields(obj, "memory", MEMORY_FIELDS)
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


def parse_link(obj: dict[str, Any]) -> NamespaceLink:
    """The `NamespaceLink` of a link record."""
    f = Fields(obj, "link", LINK_FIELDS)
    tiers: list[Tier] | None = None
    if obj.get("tiers") is not None:
        try:
            tiers = [Tier(t) for t in f.texts("tiers")]
        except ValueError as e:
            raise BadRecord(f"field 'tiers': {e}") from None
    return NamespaceLink(
        src=f.text("src", nonempty=True),
        dst=f.text("dst", nonempty=True),
        tiers=tiers,
        note=f.text("note", ""),
        created_at=f.moment("created_at"),
    )


def parse_key(obj: dict[str, Any]) -> APIKey:
    """The `APIKey` of an api_key record."""
    f = Fields(obj, "api_key", KEY_FIELDS)
    return APIKey(
        name=f.text("name", nonempty=True),
        hash=f.text("hash", nonempty=True),
        home_ns=f.text("home_ns", ""),
        default_ns=f.text("default_ns", ""),
        created_at=f.moment("created_at"),
        disabled=f.boolean("disabled", False),
    )


def parse_event(obj: dict[str, Any]) -> Event:
    """The `Event` of an event record (id 0 when it has none)."""
    f = Fields(obj, "event", EVENT_FIELDS)
    event_id = f.integer("id", 0)
    if not 0 <= event_id <= _MAX_EVENT_ID:
        raise BadRecord("field 'id' must be between 1 and 2**63-1 (or absent for a new event)")
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


def decode_line(line: bytes) -> tuple[object, str | None]:
    """The JSON value of a line, or an error message."""
    try:
        return json.loads(line), None
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return None, f"invalid JSON: {e.msg} (column {e.colno})"
    except RecursionError:
        return None, "invalid JSON: nested too deeply"


def header_settings(
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
    if metric is None and hmetric in METRICS:
        metric = cast("Metric", hmetric)
    next_event_id = obj.get("next_event_id", 0)
    if isinstance(next_event_id, bool) or not isinstance(next_event_id, int) or next_event_id < 0:
        raise CliError(f"line 1: export header with an invalid next_event_id: {next_event_id!r}")
    return dims, metric, model if isinstance(model, str) else "", next_event_id
