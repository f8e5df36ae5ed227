"""The wire format of the served Store API, shared by `memini.server` and `memini.client`.

One home for the schema: the annotations of `memini.Store`'s methods and of the dataclasses of
`memini.types` *are* the schema of every endpoint. ``POST /v1/<method>`` takes a JSON object
of the method's arguments by name and answers its return value; `METHODS` reads both from
`Store` with ``typing.get_type_hints`` for every method of `memini._served.SERVED` (the table
of what is served and who may call it), so a method served there is typed here with no
change.

JSON shapes: a dataclass is an object of its fields (an unknown field is refused); a datetime
an ISO 8601 string (naive = UTC, as everywhere; the server answers aware UTC with
microseconds); an enum its string value; metadata plain JSON.

A vector (``embedding``, ``vector``, each row of ``vectors``) is a JSON array of numbers
(float32 values are exact in a JSON double, so embeddings round-trip bit for bit) or a JSON
string of standard base64 (RFC 4648, padded) of its little-endian float32 bytes: ~3.3x
shorter, no number to format or parse (`vector_from_base64`; measured in
``benches/bench_server.py::test_vectors_base64_vs_arrays``). An answer carries its
vectors (``get_embedding``'s) as base64 when the request has the header
``Memini-Vector-Format: base64`` or sent a vector as base64 (`Method.answers_base64`), else
as arrays. The client sends every plain float vector as base64 and the header.

Values JSON cannot carry are sent by the client as *markers*, one-key objects whose key starts
with ``$memini:``, so that the server's `Store` sees (and refuses with its own message) the same
value a local call would: a non-finite float (``{"$memini:float": "nan"}``), a str with a lone
surrogate (``{"$memini:str": "<json text>"}``), a set (``{"$memini:set": [...]}``), and any
other object as a stand-in of the same type name (``{"$memini:object": "bytes"}``), which
every check refuses by its type. The server never parses anything but JSON: raw NaN, inf or
a malformed body are refused before any store call.
"""

from __future__ import annotations

import binascii
import dataclasses
import enum
import functools
import inspect
import json
import math
import os
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from types import NoneType, UnionType
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from memini import _core
from memini._convert import not_updatable
from memini._served import SERVED, Rule
from memini.errors import (
    AuthError,
    ConflictError,
    CorruptionError,
    DimensionMismatchError,
    InvalidArgumentError,
    MeminiError,
    NotFoundError,
    StoreClosedError,
    StoreLockedError,
    UnavailableError,
)
from memini.store import Store
from memini.types import Memory, Recalled, Scored

try:
    import orjson
except ImportError:  # pragma: no cover - orjson ships with memini[server]
    orjson = None  # type: ignore[assignment]

__all__ = [
    "ERRORS",
    "METHODS",
    "STATUS",
    "VECTOR_FORMAT",
    "Method",
    "decode",
    "dumps",
    "dumps_base64",
    "encode",
    "error_body",
    "loads",
    "vector_from_base64",
    "vector_to_base64",
]

_MARK: Final = "$memini:"

# --------------------------------------------------------------------------------------------
# bytes <-> JSON values
# --------------------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def dumps(value: Any) -> bytes:
    """JSON bytes of ``value`` (plain JSON data, dataclasses, datetimes, enums, numpy)."""
    if orjson is not None:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    return json.dumps(value, default=_plain, allow_nan=False, separators=(",", ":")).encode()


def dumps_base64(value: Any) -> bytes:
    """`dumps`, with every float array as the base64 of its little-endian float32 bytes."""
    if orjson is not None:
        return orjson.dumps(value, default=_base64_default)
    return json.dumps(
        value, default=_base64_default, allow_nan=False, separators=(",", ":")
    ).encode()


def _base64_default(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.ndim == 1:
        return vector_to_base64(value)
    return _plain(value)


def _plain(value: Any) -> Any:
    """The stdlib json fallback of what orjson serialises natively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def loads(data: bytes) -> Any:
    """Parse JSON bytes; NaN, Infinity and malformed text raise ``ValueError``."""
    if orjson is not None:
        return orjson.loads(data)
    return json.loads(data, parse_constant=_reject_constant)


# --------------------------------------------------------------------------------------------
# Vectors as base64
# --------------------------------------------------------------------------------------------

VECTOR_FORMAT: Final = "memini-vector-format"
"""The request header (lower case) asking for vectors in the answer as base64."""

_LE_F32: Final = np.dtype("<f4")


def vector_to_base64(vector: npt.NDArray[Any]) -> str:
    """Standard base64 of a 1-D float array's little-endian float32 bytes."""
    return binascii.b2a_base64(vector.astype(_LE_F32, copy=False).tobytes(), newline=False).decode(
        "ascii"
    )


def vector_from_base64(text: str, path: str) -> npt.NDArray[np.float32]:
    """The float32 vector of a base64 string (`vector_to_base64`'s); writable, native order.

    Raises:
        InvalidArgumentError: Not standard padded base64, or not a whole number of float32
            values (4 bytes each); the message names ``path`` and the fix.
    """
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except ValueError as e:  # binascii.Error, or a str that is not ASCII
        raise InvalidArgumentError(
            f"{path} is a string but not valid base64 ({e}): send a vector as a JSON array "
            "of numbers, or as standard base64 (RFC 4648, with padding) of its "
            "little-endian float32 bytes"
        ) from None
    if len(raw) % 4:
        raise InvalidArgumentError(
            f"{path} decodes to {len(raw)} bytes, not a whole number of float32 values (4 "
            "bytes each): encode the vector's little-endian float32 bytes, e.g. "
            "base64.b64encode(np.asarray(v, '<f4').tobytes())"
        )
    return np.frombuffer(bytearray(raw), _LE_F32).astype(np.float32, copy=False)


def _vector_base64(value: Any) -> Any:
    """A vector argument as base64 (one string, or one per row of a batch) when it is one
    the store would read as exactly those float32 values: a non-empty 1-D or 2-D float array,
    or a flat list of numbers, finite once in float32 (a value that overflows keeps its
    form, so the store names it as it would locally); None when not."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f" or value.size == 0 or value.ndim not in (1, 2):
            return None
        arr = value
    elif type(value) is list and value and all(type(x) is float or type(x) is int for x in value):
        try:
            arr = np.asarray(value)
        except OverflowError:  # an int beyond float64: the store says so
            return None
        if arr.dtype.kind != "f":
            return None
    elif type(value) is list and value and all(type(x) is np.ndarray for x in value):
        rows = [_vector_base64(x) if x.ndim == 1 else None for x in value]  # a batch's rows
        return rows if all(type(r) is str for r in rows) else None
    else:
        return None
    if arr.dtype != np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            f32 = arr.astype(np.float32)
        bad = ~np.isfinite(f32)
        if bad.any() and np.isfinite(arr[bad]).any():
            return None
        arr = f32
    if arr.ndim == 1:
        return vector_to_base64(arr)
    return [vector_to_base64(row) for row in arr]


def _vector_encoder(value: Any) -> Any:
    """A vector slot's value: base64 when `_vector_base64` can, else as any argument."""
    b64 = _vector_base64(value)
    return _any(value) if b64 is None else b64


# --------------------------------------------------------------------------------------------
# Python values -> JSON values (the client's side of a call), guided by the annotation
# --------------------------------------------------------------------------------------------

_Enc = Callable[[Any], Any]
_Dec = Callable[[Any, str], Any]


def _is_vector(hint: object) -> bool:
    """Whether ``hint`` is a vector slot: a query (`npt.ArrayLike`, optional or not) or
    ``Memory.embedding``."""
    if hint is npt.ArrayLike:
        return True
    opts, _ = _options(hint)
    if len(opts) == 2:
        return np.ndarray[Any, Any] in opts and Sequence[float] in opts
    return len(opts) > 2 and typing.Union[tuple(opts)] == npt.ArrayLike  # noqa: UP007


def _options(hint: object) -> tuple[list[object], bool]:
    """The members of a union (without None) and whether None is one of them."""
    if typing.get_origin(hint) in (typing.Union, UnionType):
        args = typing.get_args(hint)
        return [a for a in args if a is not NoneType], NoneType in args
    return [hint], False


def _marker(kind: str, value: Any) -> dict[str, Any]:
    return {_MARK + kind: value}


_I64_MIN: Final = -(2**63)
_U64_MAX: Final = 2**64 - 1
# deeper than any JSON reader (and the store's metadata rule, 100 levels) accepts: sent as
# a stand-in, which the store refuses as it refuses the value itself
_MAX_DEPTH: Final = 128


def _int(value: int) -> Any:
    return value if _I64_MIN <= value <= _U64_MAX else _marker("int", str(value))


def _dict(value: dict[Any, Any], enc: Callable[[Any, int], Any], depth: int) -> Any:
    """A dict as a JSON object, or as a ``dict`` marker of pairs when a key is not a plain
    str (an int key, a lone surrogate) or could be read as a marker."""
    if all(isinstance(k, str) and _text(k) is k for k in value) and not (
        len(value) == 1 and next(iter(value)).startswith(_MARK)
    ):
        return {k: enc(v, depth + 1) for k, v in value.items()}
    return _marker("dict", [[_any(k), enc(v, depth + 1)] for k, v in value.items()])


def _json(value: Any, depth: int = 0) -> Any:
    """JSON data (metadata, event detail) as JSON, anything else as a stand-in marker: the
    store refuses a datetime or a numpy scalar inside metadata, so the client sends them as
    what they are, not converted."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _marker("float", repr(value))
    if depth > _MAX_DEPTH:
        return _marker("object", type(value).__name__)
    if isinstance(value, dict):
        return _dict(value, _json, depth)
    if isinstance(value, list):
        return [_json(v, depth + 1) for v in value]
    return _marker("object", type(value).__name__)


def _any(value: Any, depth: int = 0) -> Any:
    """An argument as JSON: numpy values as numbers and arrays, enum members as their
    values, sets as set markers, everything else JSON cannot hold as markers."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _marker("float", repr(value))
    if depth > _MAX_DEPTH:
        return _marker("object", type(value).__name__)
    if isinstance(value, dict):
        return _json(value, depth)
    if isinstance(value, list | tuple):
        return [_any(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        return _marker("set", [_any(v, depth + 1) for v in value])
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        return _marker("array", _array(value))
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer | np.floating):
        return _any(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _any(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, os.PathLike):  # a path on the server's file system (backup)
        return _any(os.fspath(value))
    return _marker("object", type(value).__name__)


def _text(s: str) -> Any:
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return _marker("str", json.dumps(s))
    return s


def _array(a: npt.NDArray[Any]) -> Any:
    """An array's values as nested lists (float32 values are exact in a JSON double)."""
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        return _any(a.tolist())
    if a.dtype.kind in "iu" and a.size and (a.max() > _U64_MAX or a.min() < _I64_MIN):
        return _any(a.tolist())
    return a.tolist()


@cache
def _encoder(hint: object) -> _Enc:
    """The encoder of a value annotated ``hint``: checks what it can (dataclasses by class,
    datetimes) so the server's `Store` refuses exactly what the local one would."""
    if _is_vector(hint):
        return _vector_encoder
    opts, _ = _options(hint)
    dcs = [o for o in opts if isinstance(o, type) and dataclasses.is_dataclass(o)]
    if dcs:
        fields = {cls: _field_encoders(cls) for cls in dcs}

        def enc_dc(v: Any) -> Any:
            if v is None:
                return None
            f = fields.get(type(v))
            if f is None:
                return _marker("object", type(v).__name__)
            return {name: e(getattr(v, name)) for name, e in f}

        return enc_dc
    if datetime in opts:
        return lambda v: v.isoformat() if isinstance(v, datetime) else _any_not_text(v)
    seqs = [o for o in opts if typing.get_origin(o) in (list, Sequence, Iterable)]
    if seqs and typing.get_args(seqs[0]):
        item = _encoder(typing.get_args(seqs[0])[0])

        def enc_seq(v: Any) -> Any:
            if isinstance(v, list | tuple) or (
                isinstance(v, Iterable)
                and not isinstance(v, str | bytes | dict | set)
                and not dataclasses.is_dataclass(v)
                and not isinstance(v, np.ndarray)
                and typing.get_origin(seqs[0]) is Iterable
            ):
                return [item(x) for x in v]
            return _any(v)

        return enc_seq
    if any(o is Any or typing.get_origin(o) in (dict, Mapping) for o in opts):
        return _json_slot
    return _any


def _json_slot(value: Any) -> Any:
    """A metadata / detail slot: a dict goes as strict JSON; anything else as an argument
    (the store refuses it with its own message)."""
    return _json(value) if isinstance(value, dict) else _any(value)


def _any_not_text(v: Any) -> Any:
    """A non-datetime where a datetime belongs: never a str (it would parse as one)."""
    return None if v is None else _marker("object", type(v).__name__)


def _field_encoders(cls: type) -> list[tuple[str, _Enc]]:
    hints = typing.get_type_hints(cls)
    return [(f.name, _encoder(hints[f.name])) for f in dataclasses.fields(cls)]


def encode(value: Any, hint: object) -> Any:
    """``value`` as JSON data for a slot annotated ``hint`` (see the module docs)."""
    return _encoder(hint)(value)


# --------------------------------------------------------------------------------------------
# JSON values -> Python values (the server's arguments, the client's results)
# --------------------------------------------------------------------------------------------


class _Stand:
    """Base of the stand-ins for values JSON cannot carry (named after their type)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} sent by a remote client>"


@cache
def _stand_in(name: str) -> type:
    return type(name, (_Stand,), {})


def _unmark(value: dict[str, Any], path: str) -> Any:
    """A marker's Python value, or the dict itself when it is none."""
    if len(value) != 1:
        return value
    ((key, v),) = value.items()
    if not isinstance(key, str) or not key.startswith(_MARK):
        return value
    kind = key[len(_MARK) :]
    if kind == "float" and v in ("nan", "inf", "-inf"):
        return float(v)
    if kind == "str" and isinstance(v, str):
        try:
            s = json.loads(v)
        except ValueError:
            s = None
        if isinstance(s, str):
            return s
    if kind == "int" and isinstance(v, str) and v.lstrip("-").isdigit():
        return int(v)
    if (
        kind == "dict"
        and isinstance(v, list)
        and all(
            isinstance(p, list) and len(p) == 2 and not isinstance(p[0], list | dict) for p in v
        )
    ):
        return {_plain_any(k, path): _plain_any(x, f"{path}[{k!r}]") for k, x in v}
    if kind == "array" and isinstance(v, list):
        try:
            a = np.asarray(v)  # plain numbers: no walk (the hot path of searches)
            return np.asarray(_plain_any(v, path)) if a.dtype == object else a
        except (ValueError, TypeError):
            raise InvalidArgumentError(f"{path} is not a rectangular array of numbers") from None
    if kind == "set" and isinstance(v, list):
        return {_plain_any(x, path) for x in v if not isinstance(x, list | dict)}
    if kind == "object" and isinstance(v, str) and v.isidentifier():
        return _stand_in(v)()
    raise InvalidArgumentError(f"{path} holds a malformed {key!r} value")


def _plain_any(value: Any, path: str) -> Any:
    """JSON data with markers resolved (metadata, event detail, untyped values)."""
    if isinstance(value, dict):
        got = _unmark(value, path)
        if got is not value:
            return got
        return {k: _plain_any(v, f"{path}[{k!r}]") for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_any(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _dt(value: Any, path: str) -> Any:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise InvalidArgumentError(
                f"{path} must be an ISO 8601 datetime such as '2026-01-31T12:00:00+00:00', "
                f"got {value[:40]!r}"
            ) from None
    return _plain_any(value, path)


def _vector(value: Any, path: str) -> Any:
    """A vector (or a batch of them): numbers and lists pass as they are, the store
    converts and checks them; base64 strings are decoded (`vector_from_base64`) and markers
    (a non-finite value) resolved."""
    if isinstance(value, str):
        return vector_from_base64(value, path)
    if isinstance(value, list):
        if all(type(x) is float or type(x) is int for x in value):
            return value
        return [_vector(x, f"{path}[{i}]") for i, x in enumerate(value)]
    if isinstance(value, bool):  # numpy would read it as 0 or 1
        raise InvalidArgumentError(f"{path} must be a number, got {str(value).lower()}")
    return _plain_any(value, path)  # e.g. an array marker: the ndarray the client had


@cache
def _decoder(hint: object) -> _Dec:
    """The decoder of a JSON value bound for a slot annotated ``hint``.

    It builds what JSON cannot say by itself (dataclasses, datetimes, enum members of a
    return value, float32 arrays of `get_embedding`) and leaves every other value as it is,
    for the `Store` to check with its own messages.
    """
    if hint is Any or hint is object:
        return _plain_any
    if _is_vector(hint):
        return _vector
    opts, _ = _options(hint)
    if len(opts) > 1:
        dcs = [o for o in opts if isinstance(o, type) and dataclasses.is_dataclass(o)]
        arrays = [o for o in opts if typing.get_origin(o) is np.ndarray]
        if dcs:
            return _decoder(dcs[0])
        if datetime in opts:
            return _dt
        if arrays:
            return _decoder(arrays[0])
        return _plain_any  # e.g. Tier | str: the store coerces
    (h,) = opts
    origin = typing.get_origin(h)
    if h is datetime:
        return _dt
    if h is int:
        return _int_value
    if origin is np.ndarray or h is np.ndarray:
        return _array_value
    if isinstance(h, type) and issubclass(h, enum.Enum):
        return _enum_decoder(h)
    if isinstance(h, type) and dataclasses.is_dataclass(h):
        return _dataclass_decoder(h)
    if origin in (list, Sequence, Iterable, tuple) or h is list:
        args = typing.get_args(h)
        item = _decoder(args[0]) if args else _plain_any

        scalars = _as_is(item)

        def dec_list(v: Any, p: str) -> Any:
            if isinstance(v, list):
                if all(type(x) in scalars for x in v):  # e.g. tags: the list itself
                    return v
                return [item(x, f"{p}[{i}]") for i, x in enumerate(v)]
            if isinstance(v, dict) and _unmark(v, p) is v:  # an object is no sequence
                raise InvalidArgumentError(f"{p} must be a JSON array, got an object")
            return _plain_any(v, p)

        return dec_list
    return _plain_any


def _array_value(v: Any, p: str) -> Any:
    """A float32 array (`get_embedding`'s answer): from an array of numbers or base64."""
    if isinstance(v, str):
        return vector_from_base64(v, p)
    return np.asarray(v, dtype=np.float32) if isinstance(v, list) else v


def _int_value(v: Any, p: str) -> Any:
    """An integer: JSON's ``3.0`` is the integer 3 (JSON Schema's ``integer`` admits it);
    an object (not a marker) is refused here, as the store may not read every int it gets
    (an appended event's ``id``)."""
    if type(v) is float and v.is_integer() and abs(v) <= 2**53:  # exact: no rounded giant
        return int(v)
    if isinstance(v, list) or (isinstance(v, dict) and _unmark(v, p) is v):
        raise InvalidArgumentError(f"{p} must be an integer, got a JSON {type(v).__name__}")
    return _plain_any(v, p)


def _enum_decoder(cls: type[enum.Enum]) -> _Dec:
    """A member for a known value (a result); anything else as it is, for the store to
    refuse with the list of allowed values (an argument)."""

    members = {m.value: m for m in cls}  # `cls(v)` costs ~1 us

    def dec(v: Any, p: str) -> Any:
        if isinstance(v, str):
            return members.get(v, v)
        return _plain_any(v, p)

    return dec


def _dataclass_decoder(cls: type) -> _Dec:
    """An object of the dataclass's fields (the optional ones may be left out; an unknown one
    is refused), each decoded by its annotation. The answers of the hot calls, whose
    memories are many, are not decoded here but in the core (`_CORE_ANSWERS`)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: _decoder(hints[f.name]) for f in dataclasses.fields(cls)}
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    required_set, known = frozenset(required), fields.keys()
    name = cls.__name__
    # the JSON types each field's decoder returns as they are: no call, no path made
    as_is = {k: _as_is(d) for k, d in fields.items()}
    # every field given, a class whose __init__ only sets them: its __dict__ set at once
    # (`cls(**out)` is ~4 us of a memory's ~15 in an upsert's body)
    plain_init = _plain_init(cls)

    def dec(v: Any, p: str) -> Any:
        if not isinstance(v, dict):
            return _plain_any(v, p)
        if len(v) == 1 and (got := _unmark(v, p)) is not v:
            return got
        if not v.keys() <= known:
            unknown = next(k for k in v if k not in fields)
            raise InvalidArgumentError(
                f"{p} has an unknown field {unknown!r} for a {name} (fields: {', '.join(fields)})"
            )
        if not required_set <= v.keys():
            missing = next(k for k in required if k not in v)
            raise InvalidArgumentError(f"{p} lacks the required field {missing!r} of a {name}")
        out = {k: x if type(x) in as_is[k] else fields[k](x, f"{p}.{k}") for k, x in v.items()}
        if plain_init and len(out) == len(known):
            obj: Any = _new(cls)
            obj.__dict__ = out
            return obj
        return cls(**out)

    return dec


_new: Final = object.__new__


def _plain_init(cls: type) -> bool:
    """Whether ``cls``'s ``__init__`` does nothing but set each of its dataclass fields
    (a plain, unfrozen ``@dataclass`` without ``__post_init__``, slots or init-only
    parameters)."""
    params = dict(inspect.signature(cls.__init__).parameters)  # type: ignore[misc]
    params.pop("self", None)
    fields = dataclasses.fields(cls)
    return (
        "__post_init__" not in dir(cls)
        and "__slots__" not in cls.__dict__
        and not cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        and cls.__setattr__ is object.__setattr__  # type: ignore[comparison-overlap]
        and list(params) == [f.name for f in fields]
        and all(f.init for f in fields)
    )


_SCALARS: Final = frozenset({str, int, float, bool})
_AS_IS: Final[dict[_Dec, frozenset[type]]] = {
    _plain_any: frozenset({NoneType, *_SCALARS}),
    _int_value: frozenset({NoneType, int}),
}


def _as_is(dec: _Dec) -> frozenset[type]:
    """The JSON types ``dec`` returns as they are (null for every decoder)."""
    return _AS_IS.get(dec, _NULL)


_NULL: Final = frozenset({NoneType})


def decode(value: Any, hint: object, path: str) -> Any:
    """The Python value of JSON data for a slot annotated ``hint`` (see `_decoder`).

    Raises:
        InvalidArgumentError: An unknown or missing dataclass field, a malformed datetime
            string or marker; the message names ``path``.
    """
    return _decoder(hint)(value, path)


# --------------------------------------------------------------------------------------------
# The methods
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """One served `Store` method: its parameters (without ``self``) and return annotation."""

    name: str
    signature: inspect.Signature
    params: dict[str, object]
    returns: object
    rule: Rule
    var_keyword: str | None

    @functools.cached_property
    def path(self) -> str:
        """The URL path of the method: ``/v1/<name>``."""
        return f"/v1/{self.name}"

    @property
    def read_only(self) -> bool:
        """Whether the call changes nothing (`memini._served.Rule.read_only`)."""
        return self.rule.read_only

    def decode_args(self, body: Any) -> dict[str, Any]:
        """The keyword arguments of a call from its JSON body.

        Raises:
            InvalidArgumentError: Not an object, an unknown or missing argument, or a value
                the decoders refuse.
        """
        if not isinstance(body, dict):
            raise InvalidArgumentError(
                f"the body of {self.name} must be a JSON object of its arguments by name"
            )
        out: dict[str, Any] = {}
        decoders = self._decoders
        for key, value in body.items():
            dec = decoders.get(key)
            if dec is not None:
                out[key] = dec(value, key)
            elif key == self.var_keyword:
                if isinstance(value, dict):
                    value = _unmark(value, key)
                if not isinstance(value, dict):
                    raise InvalidArgumentError(f"{key} must be an object of field values")
                for field in value.keys() & self._decoders.keys():
                    # a field named as an argument of the call (update's id or namespace, the
                    # only method with **fields): refused as the store refuses changing it,
                    # where Python's call would fail with a TypeError (a 500)
                    raise not_updatable(field)
                memory_hints = _memory_hints()
                out[key] = {k: decode(v, memory_hints.get(k, Any), k) for k, v in value.items()}
            else:
                raise InvalidArgumentError(
                    f"{self.name}() got an unknown argument {key!r} "
                    f"(arguments: {', '.join(self.params) or 'none'})"
                )
        for name in self._required:
            if name not in out:
                raise InvalidArgumentError(f"{self.name}() lacks the argument {name!r}")
        return out

    @functools.cached_property
    def _decoders(self) -> dict[str, _Dec]:
        """The decoder of each argument but ``**fields`` (looked up once, not per call:
        hashing an annotation such as ``npt.ArrayLike`` costs microseconds)."""
        return {k: _decoder(h) for k, h in self.params.items() if k != self.var_keyword}

    @functools.cached_property
    def _required(self) -> tuple[str, ...]:
        return tuple(
            name
            for name, p in self.signature.parameters.items()
            if p.default is inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD
        )

    def call(self, store: Any, args: Mapping[str, Any]) -> Any:
        """Call the method on ``store`` with decoded arguments."""
        kwargs = dict(args)
        extra = kwargs.pop(self.var_keyword, {}) if self.var_keyword else {}
        return getattr(store, self.name)(**kwargs, **extra)

    def encode_args(self, bound: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON body of a call from its bound arguments (the client's side)."""
        body: dict[str, Any] = {}
        encoders = self._encoders
        for key, value in bound.items():
            if key == self.var_keyword:
                memory_hints = _memory_hints()
                fields = {k: encode(v, memory_hints.get(k, Any)) for k, v in value.items()}
                body[key] = _dict(fields, lambda v, _d: v, 0)
            else:
                body[key] = encoders[key](value)
        return body

    @functools.cached_property
    def _encoders(self) -> dict[str, _Enc]:
        """The encoder of each argument but ``**fields`` (looked up once, as `_decoders`)."""
        return {k: _encoder(h) for k, h in self.params.items() if k != self.var_keyword}

    def decode_answer(self, data: bytes) -> Any:
        """The return value of a call from the JSON bytes of the server's answer.

        Raises:
            InvalidArgumentError: An answer not of the method's return type (a field
                unknown, missing or of another type); the message says where.
            ValueError: Bytes that are not JSON.
        """
        shape = self._core_shape
        if shape is not None:
            return _core.read_answer(data, shape)
        return self._result_decoder(loads(data), "result")

    @functools.cached_property
    def _core_shape(self) -> _core.AnswerShape | None:
        return _CORE_ANSWERS.get(self.returns)

    @functools.cached_property
    def _result_decoder(self) -> _Dec:
        return _decoder(self.returns)

    @functools.cached_property
    def bind(self) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
        """``bind(args, kwargs)``: the arguments of a call by name, as
        ``signature.bind(*args, **kwargs).arguments`` (which raises the same `TypeError` for
        a call that does not fit) but without its per-call work in the common case."""
        sig = self.signature
        params = list(sig.parameters.values())

        def exact(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            return dict(sig.bind(*args, **kwargs).arguments)

        if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
            return exact
        names = tuple(p.name for p in params)
        known = frozenset(names)
        required = [p.name for p in params if p.default is inspect.Parameter.empty]

        def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            bound = dict(zip(names, args, strict=False))  # too many: refused below
            if (
                len(args) <= len(names)
                and kwargs.keys() <= known
                and kwargs.keys().isdisjoint(bound)
            ):
                bound.update(kwargs)
                if all(r in bound for r in required):
                    return bound
            return exact(args, kwargs)

        return bind

    def answers_base64(self, asked: bool, body: Any) -> bool:
        """Whether the answer carries its vectors as base64: it holds vectors, and the
        request ``asked`` (the `VECTOR_FORMAT` header) or sent a vector argument as base64
        (a string, or a batch of them, in its JSON ``body``)."""
        if not self._answers_vectors:
            return False
        if asked:
            return True
        for key in self._vector_params if isinstance(body, dict) else ():
            value = body.get(key)
            if isinstance(value, str) or (
                isinstance(value, list) and value and isinstance(value[0], str)
            ):
                return True
        return False

    @functools.cached_property
    def _answers_vectors(self) -> bool:
        return _decoder(self.returns) is _array_value

    @functools.cached_property
    def _vector_params(self) -> tuple[str, ...]:
        return tuple(k for k, h in self.params.items() if _is_vector(h))


@cache
def _memory_hints() -> dict[str, object]:
    from memini.types import Memory

    return typing.get_type_hints(Memory)


def _method(name: str, fn: Callable[..., Any]) -> Method:
    hints = typing.get_type_hints(fn)
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]  # without self
    var_kw = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    return Method(
        name=name,
        signature=sig.replace(parameters=params),
        params={p.name: hints.get(p.name, Any) for p in params},
        returns=hints.get("return", Any),
        rule=SERVED[name],
        var_keyword=var_kw,
    )


_CORE_ANSWERS: Final[dict[object, _core.AnswerShape]] = {
    Memory: "memory",
    list[Memory]: "memories",
    list[Scored]: "hits",
    list[list[Scored]]: "hits_many",
    list[Recalled]: "recalled",
}
"""The answers holding memories, read by the core (`memini._core.read_answer`, one JSON
reader beside the front's writer in ``rust/serve/wire.rs``) into the objects a local call
returns, by the return type of their methods: a search answer's ten hits cost ~35 us of
the client's CPU through the Python decoders (`benches/bench_server.py::
test_remote_store_client_cpu`)."""

METHODS: Final[dict[str, Method]] = {name: _method(name, getattr(Store, name)) for name in SERVED}
"""Every served `Store` method by name (``POST /v1/<name>``): those of `memini._served.SERVED`."""


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

STATUS: Final[dict[type[MeminiError], int]] = {
    DimensionMismatchError: 422,
    InvalidArgumentError: 400,
    AuthError: 403,
    NotFoundError: 404,
    ConflictError: 409,
    StoreLockedError: 409,
    StoreClosedError: 503,
    UnavailableError: 503,
    CorruptionError: 500,
}
"""HTTP status per error class (the most specific class listed wins; 500 otherwise)."""

_CLASSES: Final[list[type[MeminiError]]] = [MeminiError, *STATUS]
ERRORS: Final[dict[str, type[MeminiError]]] = {cls.__name__: cls for cls in _CLASSES}
"""Error classes by name, to raise in the client what the server raised."""


def status_of(exc: MeminiError) -> int:
    """The HTTP status of a `MeminiError`."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_body(type_name: str, message: str) -> bytes:
    """The JSON body of an error answer: ``{"error": {"type": ..., "message": ...}}``."""
    return dumps({"error": {"type": type_name, "message": message}})
