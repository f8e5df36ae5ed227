"""A validated filter spec (`memini._convert.filter_to_spec`) as a SQL condition and order.

Every `Filter` field but ``sort`` (`order_by`) becomes a condition on an indexed column of
``memories``: tiers and levels on their text columns, tags as array containment
(``tags @> ...``, GIN), metadata as JSONB containment of ``{key: "value"}`` (GIN,
``jsonb_path_ops``: a top-level key whose value is that string, as in the embedded store),
the live rule and ``as_of`` on the ``bigint`` microsecond columns. The rule is the one of
``rust/filter.rs``:

* ``expires_at`` must lie after the reference instant (``as_of``, else ``now``) unless
  ``include_expired``;
* with ``as_of``: ``valid_from <= as_of < valid_to`` (None bounds open), whatever
  ``superseded_by``; without: not superseded and ``valid_to`` after the reference instant,
  unless ``include_superseded``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

if TYPE_CHECKING:
    from memini._core import FilterSpec

__all__ = ["LIVE_AT", "ORDER_COLUMNS", "order_by", "where"]

ORDER_COLUMNS = {
    "created_at": "created_at",
    "updated_at": "updated_at",
    "last_accessed_at": "last_accessed_at",
    "access_count": "access_count",
    "importance": "importance",
}
"""The column of each `SortKey` value."""


def order_by(spec: FilterSpec) -> str:
    """The ``ORDER BY`` clause of ``list`` under ``spec`` (its sort; ties by id ascending).

    Together with `where`, it reads every key of the spec: tests/test_filters.py checks
    that a key added to the spec is read here.
    """
    direction = "ASC" if spec["sort_asc"] else "DESC"
    return f"ORDER BY {ORDER_COLUMNS[spec['sort_key']]} {direction}, id ASC"


LIVE_AT = (
    "(expires_at IS NULL OR expires_at > %(ref)s) AND superseded_by IS NULL "
    "AND (valid_to IS NULL OR valid_to > %(ref)s)"
)
"""The default filter at the instant bound to ``ref``."""


def _jsonb_text(v: str) -> str:
    """A string as the ``meta`` column holds it (jsonb refuses U+0000: U+FFFD there)."""
    return v.replace("\x00", "\ufffd")


def where(spec: FilterSpec, params: dict[str, Any], tiers: list[str] | None = None) -> str:
    """The SQL condition of ``spec`` over ``memories``, binding its values into ``params``.

    Args:
        spec: A validated filter spec (``now`` resolved).
        params: Named parameters; the condition's values are added under ``f_*`` names.
        tiers: When given, the tiers a recall source may contribute, intersected with
            ``spec["tiers"]`` (empty: the condition matches nothing).

    Returns:
        A condition, ``TRUE`` when the spec selects everything.
    """
    conds: list[str] = []
    ref = spec["as_of"] if spec["as_of"] is not None else spec["now"]
    params["f_ref"] = ref
    allowed = spec["tiers"]
    if tiers is not None:
        allowed = [t for t in allowed if t in tiers] if allowed else list(tiers)
        if not allowed:
            return "FALSE"
    if allowed:
        conds.append("tier = ANY(%(f_tiers)s)")
        params["f_tiers"] = list(dict.fromkeys(allowed))
    if spec["levels"]:
        named = [lv for lv in spec["levels"] if lv is not None]
        terms = []
        if named:
            terms.append("level = ANY(%(f_levels)s)")
            params["f_levels"] = named
        if None in spec["levels"]:
            terms.append("level IS NULL")
        conds.append(f"({' OR '.join(terms)})")
    if spec["tags"]:
        conds.append("tags @> %(f_tags)s::text[]")
        params["f_tags"] = list(dict.fromkeys(spec["tags"]))
    if spec["metadata"]:
        conds.append("meta @> %(f_meta)s")
        params["f_meta"] = Jsonb({k: _jsonb_text(v) for k, v in spec["metadata"]})
    if spec["exclude_metadata"]:
        conds.append("NOT (meta @> ANY(%(f_xmeta)s::jsonb[]))")
        params["f_xmeta"] = [Jsonb({k: _jsonb_text(v)}) for k, v in spec["exclude_metadata"]]
    if spec["exclude_ids"]:
        conds.append("NOT (id = ANY(%(f_xids)s))")
        params["f_xids"] = list(spec["exclude_ids"])
    if not spec["include_expired"]:
        conds.append("(expires_at IS NULL OR expires_at > %(f_ref)s)")
    if spec["as_of"] is not None:
        conds.append(
            "(valid_from IS NULL OR valid_from <= %(f_ref)s) "
            "AND (valid_to IS NULL OR valid_to > %(f_ref)s)"
        )
    elif not spec["include_superseded"]:
        conds.append("superseded_by IS NULL AND (valid_to IS NULL OR valid_to > %(f_ref)s)")
    if spec["memory_types"]:
        conds.append("meta @> ANY(%(f_types)s::jsonb[])")
        params["f_types"] = [Jsonb({"memory_type": _jsonb_text(t)}) for t in spec["memory_types"]]
    if spec["created_after"] is not None:
        conds.append("created_at >= %(f_created)s")
        params["f_created"] = spec["created_after"]
    if spec["accessed_after"] is not None:
        conds.append("last_accessed_at >= %(f_accessed)s")
        params["f_accessed"] = spec["accessed_after"]
    return " AND ".join(conds) if conds else "TRUE"
