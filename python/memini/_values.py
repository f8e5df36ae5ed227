"""The value rules: validation and conversion of single values, shared by every store.

One home for each rule a public value follows before it is written anywhere: the Rust core
(through `memini._convert`, which converts whole memories and filters) and ``meta.sqlite3``
(`memini.links`, `memini.keys`, `memini.events`, `memini._sqlite`) and the CLI use these
functions alone, so neither store ever sees a malformed value and every mistake surfaces as
an `InvalidArgumentError` (or `DimensionMismatchError`) whose message names the argument and
the fix:

* datetimes <-> ``int`` microseconds since the Unix epoch, UTC (naive input = UTC; only
  instants inside 0001-01-01 .. 9999-12-31 UTC, so every stored value reads back);
* enum members or their string values -> members (an unknown value lists the allowed ones);
* text -> plain ``str`` that is valid Unicode (no lone surrogates: `check_unicode`, also
  the rule of `memini.normalize_content`/`memini.fingerprint`);
* several values (tags, ids, tiers, ...) -> lists, through `check_sequence` alone: a bare
  ``str`` is refused everywhere ("write tags=['x']"), never split into characters nor
  wrapped into a one-item list;
* ints -> signed 64-bit (limits saturate), floats -> finite, confidences -> [0, 1],
  flags -> ``bool``; API-key hashes -> 64 lowercase hex digits;
* embeddings and query vectors -> C-contiguous ``float32`` arrays of the store's dims;
* metadata and event detail -> compact JSON text, JSON types only (one rule for both), and
  stored metadata JSON back to a dict.

This module imports only `memini.errors`, so `memini.types` can use its rules too.
"""

from __future__ import annotations

import enum
import json
import math
import numbers
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt

from memini.errors import CorruptionError, DimensionMismatchError, InvalidArgumentError

__all__ = [
    "F32Array",
    "check_bool",
    "check_confidence",
    "check_float",
    "check_int",
    "check_key_hash",
    "check_opt_float",
    "check_sequence",
    "check_text",
    "check_text_list",
    "check_unicode",
    "coerce_enum",
    "coerce_enum_list",
    "embedding_to_array",
    "from_micros",
    "json_to_metadata",
    "metadata_to_json",
    "now_micros",
    "opt_micros",
    "queries_to_array",
    "query_to_array",
    "shown",
    "to_micros",
]

E = TypeVar("E", bound=enum.StrEnum)

# --------------------------------------------------------------------------------------------
# Datetimes
# --------------------------------------------------------------------------------------------

_EPOCH_NAIVE: Final = datetime(1970, 1, 1)
_EPOCH_UTC: Final = datetime(1970, 1, 1, tzinfo=UTC)
_US_PER_DAY: Final = 86_400_000_000


def _naive_micros(naive: datetime) -> int:
    """Exact microseconds from the epoch to a naive datetime read as UTC."""
    d = naive - _EPOCH_NAIVE
    return d.days * _US_PER_DAY + d.seconds * 1_000_000 + d.microseconds


_MIN_US: Final = _naive_micros(datetime.min)  # 0001-01-01T00:00:00 UTC
_MAX_US: Final = _naive_micros(datetime.max)  # 9999-12-31T23:59:59.999999 UTC


def to_micros(dt: datetime, what: str = "datetime") -> int:
    """Convert a datetime to integer microseconds since the Unix epoch (UTC), exactly.

    Args:
        dt: Naive (taken as UTC) or aware in any timezone.
        what: The argument's name, for error messages.

    Returns:
        Microseconds since 1970-01-01T00:00:00Z (negative before it).

    Raises:
        InvalidArgumentError: ``dt`` is not a datetime, or its UTC instant lies outside
            0001-01-01 .. 9999-12-31 (an aware time near either end), which could not be
            read back.
    """
    if not isinstance(dt, datetime):
        raise InvalidArgumentError(f"{what} must be a datetime, got {type(dt).__name__}")
    offset = dt.utcoffset()
    # Integer arithmetic on the naive wall time, then the offset: no float rounding and no
    # OverflowError for aware times at the ends of the datetime range.
    us = _naive_micros(dt.replace(tzinfo=None))
    if offset is not None:
        us -= offset // timedelta(microseconds=1)
    if not _MIN_US <= us <= _MAX_US:
        raise InvalidArgumentError(
            f"{what} {dt.isoformat()} is outside the representable range "
            "0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z once converted to UTC"
        )
    return us


def from_micros(us: int) -> datetime:
    """Convert integer microseconds since the Unix epoch to an aware UTC datetime.

    Args:
        us: Microseconds since 1970-01-01T00:00:00Z, as produced by `to_micros`.

    Returns:
        A timezone-aware datetime in UTC.

    Raises:
        CorruptionError: ``us`` is outside the datetime range (the core only stores values
            `to_micros` produced, so this means a damaged row).
    """
    if not _MIN_US <= us <= _MAX_US:
        raise CorruptionError(f"stored timestamp {us} µs is outside the datetime range")
    return _EPOCH_UTC + timedelta(microseconds=us)


def opt_micros(dt: datetime | None, what: str = "datetime") -> int | None:
    """`to_micros`, passing None through.

    Args:
        dt: A datetime or None.
        what: The argument's name, for error messages.
    """
    return None if dt is None else to_micros(dt, what)


def now_micros() -> int:
    """Wall clock in microseconds since the Unix epoch."""
    return time.time_ns() // 1_000


# --------------------------------------------------------------------------------------------
# Scalars
# --------------------------------------------------------------------------------------------


def coerce_enum(cls: type[E], value: object, what: str) -> E:
    """Return ``value`` as a member of the string enum ``cls``.

    Args:
        cls: The enum class (`Tier`, `Level`, `SortKey`, `EventKind`, ...).
        value: A member of ``cls`` or its string value (exact, case-sensitive).
        what: The argument's name, for error messages.

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
        got = type(value).__name__
    allowed = ", ".join(repr(m.value) for m in cls)
    raise InvalidArgumentError(f"{what} must be a {cls.__name__} or one of {allowed}; got {got}")


def check_unicode(s: str, what: str) -> None:
    """Raise unless ``s`` is valid Unicode text: the package's one rule for text.

    A lone surrogate (``"\\ud800"``, e.g. from ``bytes.decode(errors="surrogateescape")``)
    has no UTF-8 encoding, so no store can hold it: every str bound for the core or SQLite
    (`check_text`) and the content given to `memini.normalize_content` and
    `memini.fingerprint` is checked here. NUL and every other code point are fine.

    Args:
        s: The text.
        what: The argument's name, for error messages.

    Raises:
        InvalidArgumentError: ``s`` contains a lone surrogate; the message gives its index.
    """
    if s.isascii():
        return
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"{what} contains a lone surrogate {s[e.start]!r} at index {e.start}, "
            "which is not valid Unicode text (decode the source bytes with "
            "errors='replace' or fix the pairing)"
        ) from None


def check_text(value: object, what: str, *, non_empty: bool = False) -> str:
    """Validate a str bound for Rust or SQLite: valid Unicode (NUL is allowed)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}")
    if non_empty and not value:
        raise InvalidArgumentError(f"{what} must be a non-empty str")
    check_unicode(value, what)
    return str(value)  # a plain str, also for str subclasses such as StrEnum members


def shown(text: str, limit: int = 40) -> str:
    """``text`` shortened for an error message."""
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_sequence(value: object, what: str, of: str, *, unordered: bool = False) -> list[object]:
    """The one rule for an argument holding several values (tags, ids, tiers, ...).

    A list, tuple or other sequence is taken as is, order kept. A bare ``str`` (a single
    tag, id or enum member: `Tier` members are str) is refused everywhere, with the fix in
    the message, rather than split into characters or silently wrapped; bytes, mappings and
    other non-sequences are refused too.

    Args:
        value: The argument.
        what: Its name, for error messages (``"tags"``, ``"filter.tiers"``, ...).
        of: What the items are, for error messages (``"strings"``, ``"Tier values"``).
        unordered: For filter fields, where order carries no meaning: None also means
            "empty" and a set or frozenset is accepted.

    Returns:
        The items as a new list.

    Raises:
        InvalidArgumentError: A bare str, or not a sequence.
    """
    if type(value) is list or type(value) is tuple:  # the common case: no ABC checks
        return list(value)
    if isinstance(value, str):
        raise InvalidArgumentError(
            f"{what} must be a list of {of}, not a str: write {what}=[{shown(str(value))!r}]"
        )
    if unordered:
        if value is None:
            return []
        if isinstance(value, set | frozenset):
            return list(value)
    if isinstance(value, bytes | bytearray) or not isinstance(value, Sequence):
        kinds = "list, tuple or set" if unordered else "list or tuple"
        raise InvalidArgumentError(
            f"{what} must be a list of {of} (a {kinds}), got {type(value).__name__}"
        )
    return list(value)


def check_text_list(value: object, what: str, *, unordered: bool = False) -> list[str]:
    """A sequence of str as a list (see `check_sequence` for the shape rule)."""
    items = check_sequence(value, what, "strings", unordered=unordered)
    return [check_text(v, f"{what}[{i}]") for i, v in enumerate(items)]


def coerce_enum_list(
    cls: type[E], values: object, what: str, *, unordered: bool = False
) -> list[E]:
    """Coerce a sequence of enum members or string values, keeping order and duplicates.

    Args:
        cls: The enum class.
        values: A list or tuple (see `check_sequence`); a bare str or a single member is
            refused.
        what: The argument's name, for error messages.
        unordered: A filter field: None means empty, a set is accepted.

    Raises:
        InvalidArgumentError: Not a sequence, or an unknown value (named by index).
    """
    items = check_sequence(values, what, f"{cls.__name__} values", unordered=unordered)
    return [coerce_enum(cls, v, f"{what}[{i}]") for i, v in enumerate(items)]


def check_float(value: object, what: str) -> float:
    """A finite real number (int or float, numpy scalars included; bool refused)."""
    if type(value) is not float and (  # the common case: no ABC check (16% of an event row)
        isinstance(value, bool) or not isinstance(value, numbers.Real)
    ):
        raise InvalidArgumentError(f"{what} must be a float, got {type(value).__name__}")
    f = float(value)
    if not math.isfinite(f):
        raise InvalidArgumentError(f"{what} must be finite, got {f!r}")
    return f


def check_opt_float(value: object, what: str) -> float | None:
    """`check_float`, passing None through."""
    return None if value is None else check_float(value, what)


def check_confidence(value: object, what: str = "confidence") -> float:
    """A confidence: a finite float in [0, 1] (0 = refuted, 1 = certain).

    The one rule for every confidence written: ``Memory.confidence``, ``update(confidence=)``,
    ``set_confidence`` and ``mark_contradicted``. The ranking helpers clamp to [0, 1] and
    `grow_confidence` stays inside it, so a value outside could only be a mistake (a
    percentage, a raw score).
    """
    c = check_float(value, what)
    if not 0.0 <= c <= 1.0:
        raise InvalidArgumentError(
            f"{what} must be between 0 and 1, got {c!r} (scale it, e.g. a percentage / 100)"
        )
    return c


_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1


def check_int(
    value: object, what: str, *, non_negative: bool = False, saturate: bool = False
) -> int:
    """A 64-bit signed int, or with ``non_negative`` 0 .. 2**63-1 (numpy ints included;
    bool and float refused).

    With ``saturate`` (limits, offsets, ``k``: "more than any store holds" is meaningful) a
    value beyond the 64-bit range is clamped to it instead of refused; a negative value is
    still refused when ``non_negative``.
    """
    if type(value) is int:  # the common case: no ABC check
        n = value
    elif isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{what} must be an int, got {type(value).__name__}")
    else:
        n = int(value)
    if saturate:
        if non_negative and n < 0:
            raise InvalidArgumentError(f"{what} must be >= 0, got {n}")
        return max(min(n, _I64_MAX), _I64_MIN)
    low = 0 if non_negative else _I64_MIN
    if not low <= n <= _I64_MAX:
        bounds = "0" if non_negative else "-2**63"
        raise InvalidArgumentError(f"{what} must be between {bounds} and 2**63-1, got {n}")
    return n


def check_bool(value: object, what: str) -> bool:
    """A flag: ``bool`` or ``numpy.bool_`` (ints refused), as a plain ``bool``."""
    if not isinstance(value, bool | np.bool_):
        raise InvalidArgumentError(f"{what} must be a bool, got {type(value).__name__}")
    return bool(value)


_HEX_SHA256: Final = re.compile(r"[0-9a-fA-F]{64}")


def check_key_hash(value: object, what: str, *, lookup: bool = False) -> str:
    """An API key's hash: exactly 64 hex digits (either case), returned lowercase.

    Only the hash of a secret is ever stored, so anything else (a secret passed by
    mistake) is refused before it could be written in clear; the message never echoes
    the value. With ``lookup`` (``get_api_key_by_hash``) any str is accepted and only a
    well-formed hash is lowercased: a malformed one simply matches no key.

    Raises:
        InvalidArgumentError: Not a str, or (unless ``lookup``) not 64 hex digits.
    """
    text = check_text(value, what)
    if _HEX_SHA256.fullmatch(text):
        return text.lower()
    if lookup:
        return text
    raise InvalidArgumentError(
        f"{what} must be the 64 hex digits of hash_api_key(secret), got a str of "
        f"{len(text)} characters that is not one (never pass the secret itself: only its "
        "hash is stored)"
    )


# --------------------------------------------------------------------------------------------
# Vectors
# --------------------------------------------------------------------------------------------

F32Array = npt.NDArray[np.float32]


def _as_numeric_array(value: object, what: str) -> npt.NDArray[Any]:
    """``value`` as a numpy array of a real numeric dtype (no copy for an ndarray)."""
    if isinstance(value, np.ndarray):
        arr: npt.NDArray[Any] = value
    elif isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(
        value, Sequence | memoryview
    ):
        from memini.types import Filter  # memini.types builds on this module

        hint = ""
        if isinstance(value, Filter):  # recall(ns, "q", Filter(...)): one slot too early
            hint = " (a Filter goes in the filter argument: pass it as filter=...)"
        raise InvalidArgumentError(
            f"{what} must be a numpy array or a sequence of floats, got "
            f"{type(value).__name__}{hint}"
        )
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as e:  # ragged nesting, unconvertible items
            raise InvalidArgumentError(f"{what} must be a flat sequence of floats ({e})") from None
    if arr.dtype.kind not in "iuf":
        raise InvalidArgumentError(
            f"{what} must hold real numbers, got dtype {arr.dtype} "
            "(convert with np.asarray(x, dtype=np.float32))"
        )
    return arr


def _to_f32(arr: npt.NDArray[Any], what: str) -> F32Array:
    """C-contiguous float32 copy of ``arr`` only when needed; NaN/inf refused."""
    out: F32Array
    if arr.dtype == np.float32 and arr.flags.c_contiguous:
        out = arr  # nothing to convert: no overflow to silence (errstate costs ~2 us)
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # reported below, not warned
            out = np.ascontiguousarray(arr, dtype=np.float32)
    finite = np.isfinite(out)
    if not finite.all():
        bad = tuple(int(i) for i in np.argwhere(~finite)[0])
        where = f"index {bad[0]}" if len(bad) == 1 else f"row {bad[0]}, index {bad[1]}"
        original = float(arr[bad])
        why = (
            f"{original!r} overflows float32"
            if math.isfinite(original)
            else f"{original!r} is not finite"
        )
        raise InvalidArgumentError(f"{what} has a bad value at {where}: {why}")
    return out


def embedding_to_array(value: object, dims: int, what: str = "embedding") -> F32Array | None:
    """Validate a memory's embedding and convert it for the core.

    Args:
        value: A 1-D numpy array or a sequence of floats; None or empty = no vector (a
            keyword-only row).
        dims: The store's dimensionality.
        what: The argument's name, for error messages.

    Returns:
        A 1-D C-contiguous float32 array (the input itself when it already is one), or None.

    Raises:
        DimensionMismatchError: Non-empty with a length other than ``dims``.
        InvalidArgumentError: Not 1-D, not numeric, or holds NaN/inf (or a value that
            overflows float32).
    """
    if value is None:
        return None
    arr = _as_numeric_array(value, what)
    if arr.ndim != 1:
        raise InvalidArgumentError(
            f"{what} must be 1-D, got shape {arr.shape} (pass one vector, e.g. x.ravel())"
        )
    if arr.size == 0:
        return None
    if arr.shape[0] != dims:
        raise DimensionMismatchError(
            f"{what} has {arr.shape[0]} dims, store expects {dims} (embed it with the store's "
            f"model; {arr.shape[0]}-d vectors belong in a store of their own)"
        )
    return _to_f32(arr, what)


def _query_mismatch(got: int, dims: int, what: str) -> DimensionMismatchError:
    return DimensionMismatchError(
        f"{what} has {got} dims, store expects {dims} "
        "(embed queries with the model that produced the stored vectors)"
    )


def query_to_array(value: object, dims: int, what: str = "query vector") -> F32Array:
    """Validate one search query vector and convert it for the core.

    Args:
        value: A 1-D numpy array or a sequence of floats.
        dims: The store's dimensionality.
        what: The argument's name, for error messages.

    Returns:
        A 1-D C-contiguous float32 array of length ``dims``.

    Raises:
        DimensionMismatchError: Its length is not ``dims`` (an empty query included).
        InvalidArgumentError: None, not 1-D, not numeric, or holds NaN/inf.
    """
    if value is None:
        raise InvalidArgumentError(f"{what} must be a vector of {dims} floats, got None")
    arr = _as_numeric_array(value, what)
    if arr.ndim != 1:
        raise InvalidArgumentError(
            f"{what} must be 1-D, got shape {arr.shape} "
            "(use vector_search_many for several queries)"
        )
    if arr.shape[0] != dims:
        raise _query_mismatch(arr.shape[0], dims, what)
    return _to_f32(arr, what)


def _not_a_batch(what: str, dims: int, got: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{what} must be a 2-D array of shape (n, {dims}), one query per row; got {got} "
        "(wrap a single query as [vector], or use vector_search)"
    )


def queries_to_array(values: object, dims: int, what: str = "query vectors") -> F32Array:
    """Validate a batch of query vectors (``vector_search_many``) and convert it for the core.

    Args:
        values: A 2-D numpy array of shape ``(n, dims)`` or a sequence of vectors.
            An empty sequence is an empty batch.
        dims: The store's dimensionality.
        what: The argument's name, for error messages.

    Returns:
        A 2-D C-contiguous float32 array of shape ``(n, dims)``.

    Raises:
        DimensionMismatchError: A query's length is not ``dims``.
        InvalidArgumentError: Not 2-D (a single 1-D vector, as an array or a flat list of
            numbers, included: the message asks for shape ``(n, dims)``), ragged, not
            numeric, or holds NaN/inf.
    """
    if isinstance(values, memoryview):  # a buffer: read it as the array it describes
        values = np.asarray(values)
    if isinstance(values, np.ndarray):
        arr = _as_numeric_array(values, what)
        if arr.ndim != 2:
            raise _not_a_batch(what, dims, f"shape {arr.shape}")
        if arr.shape[1] != dims:
            raise _query_mismatch(arr.shape[1], dims, what)
        return _to_f32(arr, what)
    if isinstance(values, str | bytes | bytearray) or not isinstance(values, Sequence):
        raise _not_a_batch(what, dims, f"a {type(values).__name__}")
    if len(values) == 0:
        return np.empty((0, dims), dtype=np.float32)
    rows: list[npt.NDArray[Any]] = []
    for i, v in enumerate(values):
        if isinstance(v, numbers.Number):  # one query as a flat list
            raise _not_a_batch(what, dims, f"a flat sequence of {len(values)} numbers")
        row = _as_numeric_array(v, f"{what}[{i}]")
        if row.ndim != 1:
            raise InvalidArgumentError(f"{what}[{i}] must be a 1-D vector, got shape {row.shape}")
        if row.shape[0] != dims:
            raise _query_mismatch(row.shape[0], dims, f"{what}[{i}]")
        rows.append(row)
    return _to_f32(np.stack(rows), what)


# --------------------------------------------------------------------------------------------
# Metadata (JSON)
# --------------------------------------------------------------------------------------------

# serde_json (the core's JSON reader) refuses nesting deeper than 128; stay well inside it.
# The same bound turns a self-referencing dict into a clear error instead of a RecursionError.
_MAX_JSON_DEPTH: Final = 100
_JSON_INT_MIN: Final = -(2**63)
_JSON_INT_MAX: Final = 2**64 - 1
_JSON_TYPES_HINT: Final = "use str, int, float, bool, None, list, or dict with str keys"


def _check_json(value: object, path: str, depth: int, open_ids: set[int]) -> None:
    """Raise InvalidArgumentError naming ``path`` unless ``value`` is plain JSON data.

    ``open_ids`` holds the ids of the containers on the path, to report a cycle as such.
    """
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        check_text(value, path)
        return
    if isinstance(value, int):
        if not _JSON_INT_MIN <= value <= _JSON_INT_MAX:
            raise InvalidArgumentError(
                f"{path} = {value} does not fit in 64 bits, so JSON readers would not keep it "
                "exact (store it as a str)"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(
                f"{path} is {value!r}, which JSON cannot represent (use None or a str)"
            )
        return
    if isinstance(value, dict | list):
        if id(value) in open_ids:
            raise InvalidArgumentError(f"{path} contains itself; JSON cannot represent a cycle")
        if depth > _MAX_JSON_DEPTH:
            shown = path if len(path) <= 80 else f"{path[:60]}...{path[-16:]}"
            raise InvalidArgumentError(
                f"{shown} nests deeper than {_MAX_JSON_DEPTH} levels, more than JSON readers accept"
            )
        open_ids.add(id(value))
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_json(item, f"{path}[{i}]", depth + 1, open_ids)
        else:
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidArgumentError(
                        f"{path} has a key {key!r} of type {type(key).__name__}; "
                        "JSON object keys must be str"
                    )
                check_text(key, f"{path} key {key!r}")
                _check_json(item, f"{path}[{key!r}]", depth + 1, open_ids)
        open_ids.discard(id(value))
        return
    raise InvalidArgumentError(
        f"{path} has type {type(value).__name__}, which is not a JSON type "
        f"({_JSON_TYPES_HINT}; e.g. datetime.isoformat() or list(...))"
    )


def metadata_to_json(m: Mapping[str, Any] | None, what: str = "metadata") -> str:
    """Validate metadata (or event detail) and serialise it as compact JSON text.

    Deterministic: the same dict (same key order) always gives the same text; key order is
    preserved, not sorted. Non-ASCII text is kept as UTF-8 (not ``\\u`` escaped).

    Args:
        m: A dict of JSON data: str keys; values str, int (64-bit), float (finite), bool,
            None, list or dict of the same, nested at most 100 levels. None means ``{}``.
        what: The argument's name, for error messages.

    Returns:
        The JSON text of an object, e.g. ``'{"a":1,"b":[true,null]}'``.

    Raises:
        InvalidArgumentError: Anything else (a datetime, tuple, set, bytes, NaN/inf, a
            non-str key, a lone surrogate, ...); the message names the key path, e.g.
            ``metadata['a'][2]``.
    """
    if m is None:
        return "{}"
    if not isinstance(m, dict):
        raise InvalidArgumentError(f"{what} must be a dict with str keys, got {type(m).__name__}")
    if not m:  # the common case of a memory (json.dumps costs ~2 us per row)
        return "{}"
    _check_json(m, what, 0, set())
    return json.dumps(m, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_to_metadata(s: str) -> dict[str, Any]:
    """Parse metadata JSON text from the core.

    Args:
        s: JSON text of an object; ``""`` is read as ``{}``.

    Returns:
        The metadata dict.

    Raises:
        CorruptionError: The text is not a JSON object (a damaged row).
    """
    if not s:
        return {}
    try:
        value = json.loads(s)
    except ValueError as e:
        raise CorruptionError(f"stored metadata is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise CorruptionError(f"stored metadata is a JSON {type(value).__name__}, not an object")
    return value
