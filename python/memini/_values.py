"""Argument checks and value conversions shared by the SQLite side (links, keys, events).

Invariants the SQL modules rely on:

* timestamps are stored as ``int`` microseconds since the Unix epoch, UTC; naive datetimes are
  taken as UTC and every datetime handed back is timezone-aware UTC;
* enum-valued fields accept the member or its string value and come back as members;
* JSON documents (event ``detail``) hold JSON types only and are stored as ASCII JSON text, so
  lone surrogates survive the round trip.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from memini.errors import InvalidArgumentError

__all__ = [
    "as_bool",
    "as_int",
    "as_str",
    "coerce_enum",
    "coerce_enum_list",
    "dump_json",
    "from_micros",
    "now_micros",
    "str_list",
    "to_micros",
]

_E = TypeVar("_E", bound=enum.StrEnum)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# JSON nesting deeper than this is refused rather than risking a RecursionError.
_MAX_JSON_DEPTH = 200
# ASCII output keeps lone surrogates as \udXXX escapes, which SQLite's UTF-8 cannot hold raw.
_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def to_micros(value: object, what: str) -> int:
    """Convert a datetime to integer microseconds since the epoch (naive = UTC).

    Args:
        value: The datetime.
        what: The argument's name, for the error message.

    Returns:
        Microseconds since 1970-01-01T00:00:00Z.

    Raises:
        InvalidArgumentError: ``value`` is not a ``datetime``.
    """
    if not isinstance(value, datetime):
        raise InvalidArgumentError(f"{what} must be a datetime, got a {type(value).__name__}")
    if value.utcoffset() is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // _MICROSECOND


def from_micros(us: int) -> datetime:
    """Convert stored microseconds since the epoch back to an aware UTC datetime.

    Args:
        us: Microseconds since 1970-01-01T00:00:00Z.

    Returns:
        The instant as a timezone-aware UTC datetime.
    """
    return _EPOCH + timedelta(microseconds=us)


def now_micros() -> int:
    """The wall clock as microseconds since the epoch."""
    return to_micros(datetime.now(UTC), "now")


def coerce_enum(cls: type[_E], value: object, what: str) -> _E:
    """Return ``value`` as a member of ``cls``; accepts a member or its string value.

    Args:
        cls: The ``StrEnum`` class.
        value: A member of ``cls`` or the string value of one.
        what: The argument's name, for the error message.

    Returns:
        The member.

    Raises:
        InvalidArgumentError: Unknown value or wrong type; the message lists the allowed values.
    """
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value)
        except ValueError:
            pass
        got = repr(str(value))
    else:
        got = f"a {type(value).__name__}"
    allowed = ", ".join(repr(m.value) for m in cls)
    raise InvalidArgumentError(f"{what} must be a {cls.__name__} or one of {allowed}; got {got}")


def _iterable(values: object, what: str) -> Iterable[object]:
    """``values`` as an iterable, refusing a bare string (which would iterate its characters)."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InvalidArgumentError(
            f"{what} must be a list of values, got {type(values).__name__} {values!r:.60}"
        )
    return values


def coerce_enum_list(cls: type[_E], values: object, what: str) -> list[_E]:
    """Coerce a sequence of members or string values, keeping order and duplicates.

    Args:
        cls: The ``StrEnum`` class.
        values: A list, tuple or other iterable (not a bare string).
        what: The argument's name, for the error message.

    Returns:
        The members, in the given order.

    Raises:
        InvalidArgumentError: ``values`` is a string or not iterable, or holds an unknown value.
    """
    return [coerce_enum(cls, v, f"{what}[{i}]") for i, v in enumerate(_iterable(values, what))]


def str_list(values: object, what: str) -> list[str]:
    """Check a sequence of strings (not a bare string) and return it as a list.

    Args:
        values: A list, tuple or other iterable of ``str``.
        what: The argument's name, for the error message.

    Returns:
        The strings, in the given order.

    Raises:
        InvalidArgumentError: ``values`` is a string or not iterable, or holds a non-string.
    """
    return [as_str(v, f"{what}[{i}]") for i, v in enumerate(_iterable(values, what))]


def as_str(value: object, what: str, *, nonempty: bool = False) -> str:
    """Check that ``value`` is a ``str`` (and non-empty when asked).

    Args:
        value: The value to check.
        what: The argument's name, for the error message.
        nonempty: Refuse ``""`` too.

    Returns:
        ``value``, as a plain ``str``.

    Raises:
        InvalidArgumentError: Not a ``str``, or empty when ``nonempty``.
    """
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got a {type(value).__name__}")
    if nonempty and not value:
        raise InvalidArgumentError(f"{what} must not be empty")
    return str(value)


def as_int(value: object, what: str) -> int:
    """Check that ``value`` is an ``int`` (not a bool) within SQLite's signed 64-bit range.

    Args:
        value: The value to check.
        what: The argument's name, for the error message.

    Returns:
        ``value`` as a plain ``int``.

    Raises:
        InvalidArgumentError: Not an ``int``, or out of the 64-bit range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got a {type(value).__name__}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidArgumentError(f"{what} must fit in a signed 64-bit integer, got {value}")
    return int(value)


def as_bool(value: object, what: str) -> bool:
    """Check that ``value`` is a ``bool``.

    Args:
        value: The value to check.
        what: The argument's name, for the error message.

    Returns:
        ``value``.

    Raises:
        InvalidArgumentError: Not a ``bool``.
    """
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{what} must be a bool, got a {type(value).__name__}")
    return value


def _check_json(value: object, path: str, depth: int) -> None:
    """Raise unless ``value`` is made of JSON types only (see `dump_json`)."""
    if depth > _MAX_JSON_DEPTH:
        raise InvalidArgumentError(f"{path} nests deeper than {_MAX_JSON_DEPTH} levels")
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{path} is {value}: NaN and infinity are not JSON")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgumentError(
                    f"{path} has a {type(key).__name__} key {key!r:.60}; JSON keys are strings"
                )
            _check_json(item, f"{path}[{key!r}]", depth + 1)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]", depth + 1)
        return
    raise InvalidArgumentError(
        f"{path} is a {type(value).__name__}; only JSON types are accepted "
        "(dict with str keys, list, str, int, float, bool, None)"
    )


def dump_json(value: Any, what: str) -> str:
    """Serialise a JSON-only dict to compact ASCII JSON text.

    Accepted: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``, finite ``float``,
    ``bool`` and ``None``, nested. Tuples, sets, datetimes, NaN/infinity and everything else
    are refused rather than silently converted, so what is read back equals what was given.

    Args:
        value: The document; its top level must be a ``dict``.
        what: The argument's name, for the error message.

    Returns:
        The JSON text.

    Raises:
        InvalidArgumentError: ``value`` is not a dict or holds a non-JSON value.
    """
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{what} must be a dict, got a {type(value).__name__}")
    if not value:
        return "{}"
    _check_json(value, what, 0)
    return _ENCODER.encode(value)
