"""Conversion of core arguments: memories to row dicts, updates to partial rows, filters to specs.

The Python half of the boundary with the Rust core (``memini._core``, see ``_core.pyi``):

* `memory_to_row`: a `Memory` -> a row dict, every field validated, plus ``fingerprint``;
* `fields_to_row`: the keyword arguments of ``Store.update`` -> a partial row, validated as
  in `memory_to_row` (and `not_updatable` for the fields update may not change);
* `filter_to_spec`: a `Filter` -> a filter-spec dict with ``now`` resolved.

The rules of single
values (text, enums, datetimes, vectors, metadata JSON, ...) live in `memini._values`, shared
with the SQLite side; the core builds the `Memory` objects it returns itself, reading stored
metadata with `json_to_metadata` (looked up here by the binding).

This module imports only `memini._values`, `memini.types` and `memini.errors` (never the
compiled core).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, cast

from memini._values import (
    check_bool,
    check_confidence,
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
from memini.types import Filter, Level, Memory, Sort, SortKey, Tier, fingerprint

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

# One validator per writable Memory field: (value, dims) -> the row value. memory_to_row
# runs them all, fields_to_row the named ones, so both validate identically.
_Conv = Callable[[Any, int], Any]


def _ts(name: str) -> _Conv:
    return lambda v, _dims: opt_micros(v, name)


_FIELD_CONVERTERS: Final[dict[str, _Conv]] = {
    "id": lambda v, _d: check_text(v, "id", non_empty=True),
    "namespace": lambda v, _d: check_text(v, "namespace", non_empty=True),
    "content": lambda v, _d: check_text(v, "content"),
    "tier": lambda v, _d: coerce_enum(Tier, v, "tier").value,
    "level": lambda v, _d: None if v is None else coerce_enum(Level, v, "level").value,
    "summary": lambda v, _d: check_text(v, "summary"),
    "metadata": lambda v, _d: metadata_to_json(v),
    "tags": lambda v, _d: check_text_list(v, "tags"),
    "importance": lambda v, _d: check_float(v, "importance"),
    "created_at": _ts("created_at"),
    "updated_at": _ts("updated_at"),
    "last_accessed_at": _ts("last_accessed_at"),
    "access_count": lambda v, _d: check_int(v, "access_count", non_negative=True),
    "expires_at": _ts("expires_at"),
    "superseded_by": lambda v, _d: None if v is None else check_text(v, "superseded_by"),
    "valid_from": _ts("valid_from"),
    "valid_to": _ts("valid_to"),
    "confidence": lambda v, _d: None if v is None else check_confidence(v),
    "linked_memory_ids": lambda v, _d: check_text_list(v, "linked_memory_ids"),
    "embedding": lambda v, dims: embedding_to_array(v, dims),
}

_NOT_UPDATABLE: Final = {
    "id": (
        "id cannot be changed by update(): it identifies the memory (upsert a copy under a "
        "new id, then delete the old one)"
    ),
    "namespace": "namespace cannot be changed by update() (use reassign() to move a memory)",
    "created_at": "created_at cannot be updated (it records when the memory was first stored)",
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
    return cast("Row", row)


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
    return cast("Row", row)


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
            raise InvalidArgumentError(
                f"{what}[{k!r}] must be a str, got {type(v).__name__} (the filter matches "
                f"top-level metadata values that are that exact string; write {str(v)!r} "
                "if the stored value is a string)"
            )
        out.append((key, check_text(v, f"{what}[{k!r}]")))
    return out


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
    if f is None:  # the common case, on every search: a copy of the default spec
        spec = dict(_DEFAULT_SPEC)
        spec["now"] = now_micros() if now is None else to_micros(now, "now")
        return cast("FilterSpec", spec)
    if not isinstance(f, Filter):
        raise InvalidArgumentError(f"filter must be a Filter or None, got {type(f).__name__}")
    if f.now is not None:
        now_us = to_micros(f.now, "filter.now")
    elif now is not None:
        now_us = to_micros(now, "now")
    else:
        now_us = now_micros()
    sort = Sort() if f.sort is None else f.sort
    if not isinstance(sort, Sort):
        raise InvalidArgumentError(f"filter.sort must be a Sort, got {type(sort).__name__}")
    return {
        "tiers": [t.value for t in coerce_enum_list(Tier, f.tiers, "filter.tiers", unordered=True)],
        "levels": [
            None if lv is None else coerce_enum(Level, lv, f"filter.levels[{i}]").value
            for i, lv in enumerate(
                check_sequence(f.levels, "filter.levels", "Level values", unordered=True)
            )
        ],
        "tags": check_text_list(f.tags, "filter.tags", unordered=True),
        "metadata": _pairs(f.metadata, "filter.metadata"),
        "exclude_metadata": _pairs(f.exclude_metadata, "filter.exclude_metadata"),
        "exclude_ids": check_text_list(f.exclude_ids, "filter.exclude_ids", unordered=True),
        "include_expired": check_bool(f.include_expired, "filter.include_expired"),
        "include_superseded": check_bool(f.include_superseded, "filter.include_superseded"),
        "now": now_us,
        "as_of": opt_micros(f.as_of, "filter.as_of"),
        "memory_types": check_text_list(f.memory_types, "filter.memory_types", unordered=True),
        "created_after": opt_micros(f.created_after, "filter.created_after"),
        "accessed_after": opt_micros(f.accessed_after, "filter.accessed_after"),
        "sort_key": coerce_enum(SortKey, sort.key, "filter.sort.key").value,
        "sort_asc": check_bool(sort.asc, "filter.sort.asc"),
    }


# The spec of `Filter()`, copied by filter_to_spec(None), which sets its "now".
_DEFAULT_SPEC: Final = filter_to_spec(Filter(), now=datetime.fromtimestamp(0, UTC))
