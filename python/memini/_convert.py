"""Conversion of core arguments: memories to row dicts, updates to partial rows, filters to specs.

The Python half of the boundary with the Rust core (``memini._core``, see ``_core.pyi``):

* `memory_to_row`: a `Memory` -> a row dict, every field validated, plus ``fingerprint``;
* `fields_to_row`: the keyword arguments of ``Store.update`` -> a partial row, validated as
  in `memory_to_row` (and `not_updatable` for the fields update may not change);
* `filter_to_spec`: a `Filter` -> a filter-spec dict with ``now`` resolved.

The fields are not listed here: each field's converter is derived from its annotation on the
`Memory` dataclass (`typing.get_type_hints`), with the rules a field's meaning adds beyond its
type read from the field's ``metadata`` (see ``memini.types._rules``). Adding a plain field to
`Memory` (and to the Rust schema, ``for_memory_fields!`` in ``rust/types.rs``) needs no change
here; ``tests/test_types.py`` checks both schemas name the same fields. Likewise a filter
spec's keys and rules are derived from the `Filter` dataclass, and the Rust side
(``for_filter_fields!``) refuses a spec with a key missing or unknown: adding a `Filter` field
of a type `_FILTER_RULES` covers needs no change here. The rules of single
values (text, enums, datetimes, vectors, metadata JSON, ...) live in `memini._values`, shared
with the SQLite side; the core builds the `Memory` objects it returns itself, reading stored
metadata with `json_to_metadata` (looked up here by the binding).

This module imports only `memini._values`, `memini.types` and `memini.errors` (never the
compiled core).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import operator
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import UnionType
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np

from memini._values import (
    check_bool,
    check_float,
    check_int,
    check_sequence,
    check_text,
    check_text_list,
    coerce_enum,
    coerce_enum_list,
    embedding_to_array,
    json_to_metadata,
    metadata_to_json,
    now_micros,
    opt_micros,
    shown,
    to_micros,
)
from memini.errors import InvalidArgumentError
from memini.types import Filter, Level, Memory, SortKey, Tier, fingerprint

if TYPE_CHECKING:
    from memini._core import FilterSpec, Row

__all__ = [
    "check_supersession",
    "fields_to_row",
    "filter_to_spec",
    "json_to_metadata",
    "memory_to_row",
    "not_updatable",
]

# --------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------

# A field's converter: (value, dims) -> the row value. memory_to_row runs every field's,
# fields_to_row the named ones', so both validate identically.
_Conv = Callable[[Any, int], Any]
# A value rule: (value, field name) -> the row value of a given (non-None) value.
_Rule = Callable[[Any, str], Any]

# The rule of each field type a `Memory` field may have, once its ``| None`` is removed (an
# optional field passes None through). Enum fields take their member's value; the vector type
# is the embedding's and also needs the store's dims.
_TYPE_RULES: Final[dict[object, _Rule]] = {
    str: check_text,
    float: check_float,
    int: check_int,
    datetime: to_micros,
    dict[str, Any]: metadata_to_json,  # None is read as {} (update(metadata=None) clears)
    list[str]: check_text_list,
}
_VECTOR: Final = np.ndarray[Any, Any] | Sequence[float]


def _without_none(hint: object) -> tuple[object, bool]:
    """``(T, True)`` for ``T | None`` (T itself maybe a union), else ``(hint, False)``."""
    if typing.get_origin(hint) not in (typing.Union, UnionType):
        return hint, False
    args = typing.get_args(hint)
    if type(None) not in args:
        return hint, False
    rest = [a for a in args if a is not type(None)]
    return functools.reduce(operator.or_, rest), True


def _enum_rule(cls: type[enum.StrEnum]) -> _Rule:
    return lambda v, what: coerce_enum(cls, v, what).value


def _converter(f: dataclasses.Field[Any], hint: object) -> _Conv:
    """The converter of one `Memory` field, from its type and its ``metadata`` rules.

    Raises:
        TypeError: A type no rule covers (at import: add it to ``_TYPE_RULES``).
    """
    name = f.name
    base, optional = _without_none(hint)
    if base == _VECTOR:
        return lambda v, dims: embedding_to_array(v, dims, name)
    rule: _Rule | None = f.metadata.get("check")
    if rule is None:
        if isinstance(base, type) and issubclass(base, enum.StrEnum):
            rule = _enum_rule(base)
        else:
            rule = _TYPE_RULES.get(base)
    if rule is None:
        raise TypeError(
            f"Memory.{name} has type {hint}, for which memini._convert has no rule "
            "(add one to _TYPE_RULES)"
        )
    check = rule
    if optional:
        return lambda v, _dims: None if v is None else check(v, name)
    return lambda v, _dims: check(v, name)


_HINTS: Final = typing.get_type_hints(Memory)
_FIELD_CONVERTERS: Final[dict[str, _Conv]] = {
    f.name: _converter(f, _HINTS[f.name]) for f in dataclasses.fields(Memory)
}
# Fields set on insert that update() may not change, with the error naming what to do.
_NOT_UPDATABLE: Final[dict[str, str]] = {
    f.name: f.metadata["fixed"] for f in dataclasses.fields(Memory) if "fixed" in f.metadata
}
_UPDATABLE: Final = tuple(k for k in _FIELD_CONVERTERS if k not in _NOT_UPDATABLE)


def not_updatable(name: str) -> InvalidArgumentError:
    """The error for an attempt to change ``id``, ``namespace`` or ``created_at`` by update.

    Args:
        name: The field name.
    """
    return InvalidArgumentError(_NOT_UPDATABLE[name])


def check_supersession(id: str, superseded_by: str | None) -> None:
    """Refuse a memory superseded by itself (a validated id and ``superseded_by``).

    Args:
        id: The memory's id.
        superseded_by: The id of the memory replacing it, or None.

    Raises:
        InvalidArgumentError: ``superseded_by == id``.
    """
    if superseded_by == id:
        raise InvalidArgumentError(
            f"memory {shown(id)!r} cannot be superseded by itself: superseded_by names the "
            "memory that replaces it (to retire it without a successor, delete it or set "
            "expires_at)"
        )


def memory_to_row(m: Memory, dims: int) -> Row:
    """Validate a `Memory` and convert it to a core row (every field, plus ``fingerprint``).

    Args:
        m: The memory to write. ``tier``/``level`` may be members or string values; ``tags``
            and ``linked_memory_ids`` may be any sequence of str (not a bare str).
        dims: The store's dimensionality.

    Returns:
        The row: timestamps as int microseconds (None kept), metadata as JSON text, enum
        string values, ``fingerprint`` of the content, ``embedding`` as float32 or None.

    Raises:
        InvalidArgumentError: A field is malformed (the message names it), or
            ``superseded_by == id``.
        DimensionMismatchError: The embedding's length is not ``dims``.
    """
    if not isinstance(m, Memory):
        raise InvalidArgumentError(f"expected a Memory, got {type(m).__name__}")
    row = {name: conv(getattr(m, name), dims) for name, conv in _FIELD_CONVERTERS.items()}
    check_supersession(row["id"], row["superseded_by"])
    row["fingerprint"] = fingerprint(row["content"])
    return row


def fields_to_row(fields: Mapping[str, Any], dims: int, id: str | None = None) -> Row:
    """Validate the keyword arguments of ``Store.update`` and convert them to a partial row.

    Only the named fields appear in the result. ``content`` also adds ``fingerprint``;
    ``embedding`` is kept when present (None or empty = remove the vector).

    Args:
        fields: Field name -> new value, for any `Memory` field but id, namespace and
            created_at.
        dims: The store's dimensionality.
        id: The (validated) id of the memory being updated, to refuse ``superseded_by=id``;
            None skips that check.

    Returns:
        The partial row.

    Raises:
        InvalidArgumentError: An unknown or non-updatable field name, a malformed value, or
            ``superseded_by`` equal to ``id``.
        DimensionMismatchError: The embedding's length is not ``dims``.
    """
    row: dict[str, Any] = {}
    for name, value in fields.items():
        if name in _NOT_UPDATABLE:
            raise not_updatable(name)
        conv = _FIELD_CONVERTERS.get(name)
        if conv is None:
            raise InvalidArgumentError(
                f"update() got an unknown field {name!r}; updatable fields: "
                + ", ".join(_UPDATABLE)
            )
        row[name] = conv(value, dims)
    if id is not None and "superseded_by" in row:
        check_supersession(id, row["superseded_by"])
    if "content" in row:
        row["fingerprint"] = fingerprint(row["content"])
    return row


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------


def _pairs(value: object, what: str) -> list[tuple[str, str]]:
    """A Mapping[str, str] filter field as (key, value) pairs, in the mapping's order."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"{what} must be a mapping of str to str, got {type(value).__name__}"
        )
    out: list[tuple[str, str]] = []
    for k, v in value.items():
        key = check_text(k, f"{what} key")
        if not isinstance(v, str):
            # a scalar's text is the likely intent; a container's repr may be huge or deep
            hint = f"write {str(v)!r} " if isinstance(v, int | float) else "pass a str "
            raise InvalidArgumentError(
                f"{what}[{k!r}] must be a str, got {type(v).__name__} (the filter matches "
                f"top-level metadata values that are that exact string; {hint}"
                "if the stored value is a string)"
            )
        out.append((key, check_text(v, f"{what}[{k!r}]")))
    return out


# The spec is derived from the `Filter` dataclass, the one Python list of a filter's fields:
# each field's value converted by the rule of its type (`_FILTER_RULES`), under the field's
# name; a field whose type is a dataclass (``sort: Sort``) gives its own fields as
# ``<field>_<subfield>`` keys (``sort_key``, ``sort_asc``). The core's declaration
# (``for_filter_fields!`` in rust/types.rs) refuses a spec with a key missing or unknown, so
# the two cannot drift silently; tests/test_filters.py compares them.


def _tier_values(value: object, what: str) -> list[str]:
    return [t.value for t in coerce_enum_list(Tier, value, what, unordered=True)]


def _level_values(value: object, what: str) -> list[str | None]:
    items = check_sequence(value, what, "Level values", unordered=True)
    return [
        None if lv is None else coerce_enum(Level, lv, f"{what}[{i}]").value
        for i, lv in enumerate(items)
    ]


_FILTER_RULES: Final[dict[object, _Rule]] = {
    Sequence[Tier]: _tier_values,
    Sequence[Level | None]: _level_values,
    Sequence[str]: functools.partial(check_text_list, unordered=True),
    Mapping[str, str]: _pairs,
    bool: check_bool,
    datetime | None: opt_micros,
    SortKey: _enum_rule(SortKey),
}


class _SpecPart(NamedTuple):
    """How a spec key is made from a field of a dataclass-typed `Filter` field."""

    attr: str
    key: str
    what: str  # its name in errors
    rule: _Rule


class _SpecField(NamedTuple):
    """How a `Filter` field becomes its spec key (``key`` by ``rule``) or, a dataclass field
    (``sort``), its keys (``rule`` checks the instance, None = the class's default; ``parts``
    make the keys from its fields)."""

    name: str
    default: object  # its default if immutable, else a marker no value is
    what: str  # its name in errors
    key: str
    rule: _Rule
    parts: tuple[_SpecPart, ...] | None


def _rule(owner: type, name: str, hint: object) -> _Rule:
    """The filter rule of field ``owner.name`` of type ``hint``.

    Raises:
        TypeError: A type no rule covers (at import: add it to ``_FILTER_RULES``).
    """
    rule = _FILTER_RULES.get(hint)
    if rule is None:
        raise TypeError(
            f"{owner.__name__}.{name} has type {hint}, for which memini._convert has no "
            "filter rule (add one to _FILTER_RULES)"
        )
    return rule


def _instance_rule(cls: type) -> _Rule:
    """The rule of a dataclass-typed filter field: an instance of ``cls``; None = ``cls()``."""

    def check(value: object, what: str) -> object:
        if value is None:
            return cls()
        if not isinstance(value, cls):
            raise InvalidArgumentError(
                f"{what} must be a {cls.__name__}, got {type(value).__name__}"
            )
        return value

    return check


def _spec_fields() -> tuple[_SpecField, ...]:
    """The entries of the `Filter` fields, in declaration order."""
    hints = typing.get_type_hints(Filter)
    out: list[_SpecField] = []
    for f in dataclasses.fields(Filter):
        hint, what = hints[f.name], f"filter.{f.name}"
        # a default_factory's value is a new object each time: never `is` the marker
        default = object() if f.default is dataclasses.MISSING else f.default
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            inner = typing.get_type_hints(hint)
            parts = tuple(
                _SpecPart(
                    g.name,
                    f"{f.name}_{g.name}",
                    f"{what}.{g.name}",
                    _rule(hint, g.name, inner[g.name]),
                )
                for g in dataclasses.fields(hint)
            )
            out.append(_SpecField(f.name, default, what, "", _instance_rule(hint), parts))
        else:
            out.append(_SpecField(f.name, default, what, f.name, _rule(Filter, f.name, hint), None))
    return tuple(out)


_FILTER_SPEC: Final = _spec_fields()


def _put_parts(spec: dict[str, Any], value: object, parts: tuple[_SpecPart, ...]) -> None:
    """Set the spec keys of a checked dataclass-typed field's value (a `Sort`)."""
    for attr, key, what, rule in parts:
        spec[key] = rule(getattr(value, attr), what)


def filter_to_spec(f: Filter | None, now: datetime | None = None) -> FilterSpec:
    """Validate a `Filter` and convert it to the core's filter spec.

    The reference instant is ``f.now`` if set, else the ``now`` argument if given, else
    the wall clock; it is always resolved here so the core never reads a clock.

    Sequence fields accept a list, tuple or set (None = empty); a bare str (or a single
    enum member) is refused, as everywhere (`check_sequence`). Enum fields accept members
    or string values.

    Args:
        f: The filter; None = ``Filter()`` (the live rows).
        now: Fallback reference instant when ``f.now`` is None (naive = UTC).

    Returns:
        The spec dict: enum string values, micros, ``(key, value)`` pair lists.

    Raises:
        InvalidArgumentError: A malformed field: unknown tier/level/sort key, a bare str
            where a list is expected, a non-str tag, id, memory type or metadata value, a
            non-datetime time, a non-bool flag.
    """
    spec = dict(_DEFAULT_SPEC)  # every key, `now` None; its lists are never mutated
    if f is not None:
        if not isinstance(f, Filter):
            raise InvalidArgumentError(f"filter must be a Filter or None, got {type(f).__name__}")
        for name, default, what, key, rule, parts in _FILTER_SPEC:
            value = getattr(f, name)
            if value is default:  # a field left at its default keeps the default's entry
                continue
            if parts is None:
                spec[key] = rule(value, what)
            else:
                _put_parts(spec, rule(value, what), parts)
    if spec["now"] is None:
        spec["now"] = now_micros() if now is None else to_micros(now, "now")
    return spec


def _default_spec() -> dict[str, Any]:
    """The spec of `Filter()` with ``now`` None, which `filter_to_spec` starts from."""
    spec: dict[str, Any] = {}
    f = Filter()
    for name, _, what, key, rule, parts in _FILTER_SPEC:
        if parts is None:
            spec[key] = rule(getattr(f, name), what)
        else:
            _put_parts(spec, rule(getattr(f, name), what), parts)
    return spec


_DEFAULT_SPEC: Final = _default_spec()
