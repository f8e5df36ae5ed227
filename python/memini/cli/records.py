"""The JSONL export format: record builders, parsers, header.

Version 1 is one JSON object per line: a header ``{"type": "memini-export", "version": 1,
"dims": .., "metric": .., "embed_model": .., "next_event_id": ..}`` (the id the store hands
the next event; absent in older exports), then ``"type": "memory"`` records ordered by
namespace then ``created_at``, then ``"link"``, ``"api_key"`` (hashes only) and ``"event"``
records (with their ids, ascending).

A record's fields are the fields of its dataclass (`Memory`, `NamespaceLink`, `APIKey`,
`Event`), by name and in order (an event's ``id`` first): adding a field to a dataclass adds
it to the format. Datetimes are ISO-8601 UTC with microseconds, enum members their values,
``embedding`` a list of floats that parse back to the same float32 values, or null. Reading,
a missing or null field takes the dataclass default and an unknown field is an error.

Plain lines such as ``{"content": "...", "embedding": [...]}`` are memories too: a missing
``type`` means a memory, a missing ``id`` gets `memini.new_id`, a missing ``namespace`` the
importer's default.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, cast

import numpy as np
import numpy.typing as npt

from memini.cli.common import METRICS, CliError, Metric
from memini.types import APIKey, Event, Memory, NamespaceLink, new_id

try:
    import orjson
except ImportError:  # pragma: no cover - orjson ships with memini[server] and [postgres]
    orjson = None  # type: ignore[assignment]

__all__ = [
    "EVENT_FIELDS",
    "EXPORT_TYPE",
    "EXPORT_VERSION",
    "KEY_FIELDS",
    "LINK_FIELDS",
    "MEMORY_FIELDS",
    "BadRecord",
    "Header",
    "decode_line",
    "dumps",
    "event_record",
    "json_type",
    "key_record",
    "link_record",
    "memory_identity",
    "memory_record",
    "parse_event",
    "parse_header",
    "parse_key",
    "parse_link",
    "parse_memory",
]

EXPORT_TYPE = "memini-export"
"""The ``type`` of the header line of an export."""
EXPORT_VERSION = 1
"""The export format version this module writes and the newest it reads."""

_Record = Memory | NamespaceLink | APIKey | Event


def _names(cls: type[_Record]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


# A record's fields are the dataclass's fields, in its order (events put their id first).
MEMORY_FIELDS = _names(Memory)
LINK_FIELDS = _names(NamespaceLink)
KEY_FIELDS = _names(APIKey)
EVENT_FIELDS = ("id", *(name for name in _names(Event) if name != "id"))


# --------------------------------------------------------------------------------------------
# Values -> JSON
# --------------------------------------------------------------------------------------------


def _iso(dt: datetime) -> str:
    """ISO-8601 UTC with microseconds and a ``Z``."""
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


def _json_value(value: object) -> object:
    """A field's value as JSON data: datetimes as ISO text, enum members as their values."""
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def _record(kind: str, obj: _Record, names: tuple[str, ...]) -> dict[str, Any]:
    return {"type": kind, **{name: _json_value(getattr(obj, name)) for name in names}}


def dumps(obj: dict[str, Any]) -> str:
    """One record as one line of ASCII JSON (no newline)."""
    return json.dumps(obj, ensure_ascii=True, allow_nan=False)


def memory_record(m: Memory, embedding: npt.NDArray[np.float32] | None) -> dict[str, Any]:
    """The export record of a memory and its vector (rows read back carry no embedding)."""
    record = _record("memory", m, MEMORY_FIELDS)
    record["embedding"] = None if embedding is None else _f32_list(embedding)
    return record


def link_record(link: NamespaceLink) -> dict[str, Any]:
    """The export record of a namespace link."""
    return _record("link", link, LINK_FIELDS)


def key_record(key: APIKey) -> dict[str, Any]:
    """The export record of an API key (its hash, never a secret)."""
    return _record("api_key", key, KEY_FIELDS)


def event_record(e: Event) -> dict[str, Any]:
    """The export record of an event, with its id."""
    return _record("event", e, EVENT_FIELDS)


# --------------------------------------------------------------------------------------------
# JSON -> values
# --------------------------------------------------------------------------------------------
#
# Parsing only translates JSON into the dataclass: ISO text into datetimes, JSON numbers into
# floats where the field is a float, a missing or null field into the dataclass default.
# Whether the values are acceptable is decided by the facade's own validators (the importer
# calls them), so a file and a Python caller meet the same rules and the same messages.


class BadRecord(Exception):
    """A line that cannot be imported; the message says why."""


def json_type(value: object) -> str:
    """How a JSON value's type reads in a message: "a string", "null", ..."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names |= {list: "a list", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _annotation(f: dataclasses.Field[Any]) -> str:
    return f.type if isinstance(f.type, str) else str(f.type)


def _moment(name: str, value: object) -> datetime:
    if not isinstance(value, str):
        raise BadRecord(
            f"field {name!r} must be an ISO-8601 string or null, got {json_type(value)}"
        )
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise BadRecord(f"field {name!r}: {value!r} is not an ISO-8601 datetime") from None
    return dt if dt.utcoffset() is not None else dt.replace(tzinfo=UTC)


def _number(name: str, value: object) -> object:
    """A JSON integer in a float field as a float (other values are left to the validators)."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise BadRecord(f"field {name!r}: {value} is too large for a float") from None
    return value


_Convert = Callable[[str, object], object]


def _converters(cls: type[_Record]) -> dict[str, _Convert | None]:
    out: dict[str, _Convert | None] = {}
    for f in dataclasses.fields(cls):
        kind = _annotation(f).replace(" ", "")
        if "datetime" in kind:
            out[f.name] = _moment
        elif kind in ("float", "float|None"):
            out[f.name] = _number
        else:
            out[f.name] = None
    return out


_CONVERTERS = {cls: _converters(cls) for cls in (Memory, NamespaceLink, APIKey, Event)}
_REQUIRED = {
    cls: {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    for cls in _CONVERTERS
}

_T = TypeVar("_T", Memory, NamespaceLink, APIKey, Event)


def _parse(
    cls: type[_T], kind: str, obj: dict[str, Any], defaults: dict[str, Callable[[], object]]
) -> _T:
    converters = _CONVERTERS[cls]
    unknown = sorted(set(obj) - set(converters) - {"type"})
    if unknown:
        raise BadRecord(
            f"unknown field(s) {', '.join(map(repr, unknown))} for type {kind!r} "
            f"(its fields: {', '.join(converters)})"
        )
    values: dict[str, Any] = {}  # raw JSON values: the validators judge them
    for name, convert in converters.items():
        value = obj.get(name)
        if value is None:
            if name in defaults:
                values[name] = defaults[name]()
            elif name in _REQUIRED[cls]:
                raise BadRecord(f"missing field {name!r} (type {kind!r} requires it)")
            continue  # the dataclass default
        values[name] = value if convert is None else convert(name, value)
    return cls(**values)


def memory_identity(obj: dict[str, Any], default_ns: str) -> tuple[str, str] | None:
    """``(namespace, id)`` of a memory record as given, or None when it has no usable id
    (it then gets a new one, or is refused when parsed)."""
    id_, ns = obj.get("id"), obj.get("namespace")
    ns = default_ns if ns is None else ns
    if isinstance(id_, str) and id_ and isinstance(ns, str) and ns:
        return ns, id_
    return None


def parse_memory(obj: dict[str, Any], default_ns: str) -> Memory:
    """The `Memory` of a memory record: a missing id gets `new_id`, a missing namespace
    ``default_ns``; values are not validated."""
    return _parse(Memory, "memory", obj, {"id": new_id, "namespace": lambda: default_ns})


def parse_link(obj: dict[str, Any]) -> NamespaceLink:
    """The `NamespaceLink` of a link record; values are not validated."""
    return _parse(NamespaceLink, "link", obj, {})


def parse_key(obj: dict[str, Any]) -> APIKey:
    """The `APIKey` of an api_key record; values are not validated."""
    return _parse(APIKey, "api_key", obj, {})


def parse_event(obj: dict[str, Any]) -> Event:
    """The `Event` of an event record (id 0 when it has none); values are not validated."""
    return _parse(Event, "event", obj, {})


# orjson reads an integer beyond 64 bits as a float (json keeps it exact); every number of
# fewer than 19 digits reads the same in both. A line's digits all become "0" (a bytes
# translation: 10 us for a line of 384 floats, a regex search took 74) to find a longer run.
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER: Final = b"0" * 19


def decode_line(line: bytes) -> tuple[object, str | None]:
    """The JSON value of one line of a file, or an error message naming the column.

    The value is json's: orjson, when installed, reads the line first (4x faster on a line
    of 384 floats, a third of an import's client time), and json reads what orjson refuses
    (to name the problem, or to accept ``NaN``, ``1e400`` and lone surrogates as json does)
    and any line with 19 digits in a row (`_LONG_NUMBER`), which orjson could read otherwise."""
    try:
        text = line.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 ({e.reason} at byte {e.start + 1})"
    if orjson is not None and _LONG_NUMBER not in line.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(text), None
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        ends = " (the line ends there: is it cut short?)" if e.pos >= len(text.rstrip()) else ""
        return None, f"invalid JSON at column {e.colno}: {e.msg}{ends}"
    except RecursionError:
        return None, "invalid JSON: nested too deeply"


@dataclass
class Header:
    """What an export header says about the store it came from."""

    dims: int | None = None
    metric: Metric | None = None
    embed_model: str = ""
    next_event_id: int = 0  # 0 = not given


def parse_header(obj: dict[str, Any], *, need_metric: bool) -> Header:
    """The settings of an export header (the first line of a file).

    Args:
        obj: The header record.
        need_metric: Whether the header's metric is used (no ``--metric`` given); an
            unknown one is then an error.

    Raises:
        CliError: A version this memini cannot read, or a malformed setting.
    """
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CliError(f"line 1: export header without a valid version: {version!r}")
    if version > EXPORT_VERSION:
        raise CliError(
            f"line 1: export format version {version} is newer than this memini reads "
            f"({EXPORT_VERSION}); upgrade memini"
        )
    dims, metric, model = obj.get("dims"), obj.get("metric"), obj.get("embed_model", "")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise CliError(f"line 1: export header with an invalid dims: {dims!r}")
    if metric is not None and metric not in METRICS and need_metric:
        raise CliError(
            f"line 1: export header with an unknown metric {metric!r}: pass --metric "
            f"({', '.join(METRICS)})"
        )
    next_event_id = obj.get("next_event_id", 0)
    if isinstance(next_event_id, bool) or not isinstance(next_event_id, int) or next_event_id < 0:
        raise CliError(f"line 1: export header with an invalid next_event_id: {next_event_id!r}")
    return Header(
        dims=dims,
        metric=cast("Metric", metric) if metric in METRICS else None,
        embed_model=model if isinstance(model, str) else "",
        next_event_id=next_event_id,
    )
