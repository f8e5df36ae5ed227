"""The OpenAPI 3.1 document of the served API, derived from `memini._wire.METHODS`.

Schemas come from the same annotations the codec reads, so the document cannot drift from
what the server accepts. What a type does not say (a non-empty id, k >= 1, a confidence in
[0, 1], a vector of the store's dims) comes from `_RULES`, by argument or field name: one
name means one rule everywhere in the API, and the store checks each of them itself.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import NoneType, UnionType
from typing import Any, Final

import numpy as np

from memini import _wire as wire
from memini import limits
from memini.store import Store

__all__ = ["openapi"]


# float32 rounds this double (halfway past its largest value) and any above it to infinity
_F32_BOUND: Final = 2.0**128 - 2.0**103
_NAME: Final = {"string": {"minLength": 1}}

_NAMESPACE: Final = {
    "string": {
        "minLength": 1,
        "maxLength": limits.MAX_NAMESPACE_CHARS,
        # no pattern: JSON Schema's `$` and Python's differ on a final newline
        "description": "a namespace: no control, format or line-separator character (Unicode "
        "Cc, Cf, Zl, Zp), not whitespace alone",
    }
}
_UNIT: Final = {"number": {"minimum": 0, "maximum": 1}}
_COUNT: Final = {"integer": {"minimum": 0}}
_RULES: Final[dict[str, dict[str, dict[str, Any]]]] = {
    # arguments by name
    **dict.fromkeys(("contradicted_by", "path"), _NAME),
    "to_ns": _NAME,
    "reassign.to_ns": _NAMESPACE,
    **dict.fromkeys(("rename_api_key_namespaces.from_ns", "rename_link_endpoints.from_ns"), _NAME),
    **dict.fromkeys(("confidence", "alpha"), _UNIT),
    "rrf_k": {"number": {"exclusiveMinimum": 0}},
    # fields as Class.field (a read of an empty or malformed name finds nothing; a write of
    # one is refused)
    **dict.fromkeys(("Memory.namespace", "NamespaceLink.src", "NamespaceLink.dst"), _NAMESPACE),
    **dict.fromkeys(("Memory.id", "APIKey.name", "Event.op_id"), _NAME),
    "APIKey.hash": {"string": {"pattern": "^[0-9a-f]{64}$"}},
    "Memory.confidence": _UNIT,
    "Memory.access_count": _COUNT,
    "EventFilter.before_id": _COUNT,
    "Event.id": _COUNT,
}
"""JSON Schema keywords of an argument by name (``method.argument`` for one method's), or
of a field as ``Class.field``, by JSON
type, merged into every schema of that type in the slot (the members of a union, the items
of a list): what the store's own checks refuse. The sizes come from
`memini.limits.PARAMETERS`, merged in `_rule`."""


def _rule(name: str) -> dict[str, dict[str, Any]]:
    ours, sizes = _RULES.get(name, {}), limits.PARAMETERS.get(name, {})
    return {kind: {**ours.get(kind, {}), **sizes.get(kind, {})} for kind in {*ours, *sizes}}


@dataclass
class _Doc:
    """What the schemas of one document share: the components so far, the store's dims."""

    dims: int
    components: dict[str, Any] = field(default_factory=dict)

    def vector(self) -> dict[str, Any]:
        """One vector: exactly ``dims`` float32 values, as an array of numbers or as the
        base64 of their little-endian bytes (`memini._wire`)."""
        num = {"type": "number", "exclusiveMinimum": -_F32_BOUND, "exclusiveMaximum": _F32_BOUND}
        array = {"type": "array", "items": num, "minItems": self.dims, "maxItems": self.dims}
        size = 4 * self.dims  # bytes
        pad = -size % 3
        text = {
            "type": "string",
            "format": "byte",
            "description": "base64 of little-endian float32",
            "pattern": f"^[A-Za-z0-9+/]{{{(size + pad) // 3 * 4 - pad}}}={{{pad}}}$",
        }
        return {"oneOf": [array, text]}


def _refine(schema: dict[str, Any], rule: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``schema`` with ``rule``'s keywords for each JSON type added where it has that type."""
    if not rule:
        return schema
    if "anyOf" in schema:
        return {**schema, "anyOf": [_refine(s, rule) for s in schema["anyOf"]]}
    out = {**schema, **rule.get(schema.get("type", ""), {})}
    if out.get("type") == "array" and "items" in out:
        out["items"] = _refine(out["items"], rule)
    return out


def _schema(hint: object, doc: _Doc, name: str = "") -> dict[str, Any]:
    """The schema of a value annotated ``hint`` in the argument or field (``Class.field``)
    called ``name``."""
    if wire._is_vector(hint):
        if name == "vectors":  # vector_search_many's batch, one query per row
            return {"type": "array", "items": doc.vector()}
        if name == "Memory.embedding":  # none, empty (no vector) or one; null when read
            return {"anyOf": [doc.vector(), {"type": "array", "maxItems": 0}, {"type": "null"}]}
        return (
            {"anyOf": [doc.vector(), {"type": "null"}]} if wire._options(hint)[1] else doc.vector()
        )
    return _refine(_plain_schema(hint, doc), _rule(name))


def _plain_schema(hint: object, doc: _Doc) -> dict[str, Any]:
    if hint is Any or hint is object:
        return {}
    origin = typing.get_origin(hint)
    if origin in (typing.Union, UnionType):
        args = typing.get_args(hint)
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        if str in args and enums:  # Tier | str: a member's value, as the store coerces it
            args = tuple(a for a in args if a is not str)
        if os.PathLike[str] in args:  # a path: sent as its str
            args = tuple(a for a in args if a != os.PathLike[str])
        opts = [_plain_schema(a, doc) for a in args if a is not NoneType]
        if NoneType in args:
            opts.append({"type": "null"})
        return opts[0] if len(opts) == 1 else {"anyOf": opts}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:  # every integer of the API is a signed 64-bit one
        return {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
    if hint is float:
        return {"type": "number"}
    if hint is datetime:
        return {"type": "string", "format": "date-time"}
    if origin is np.ndarray or hint is np.ndarray:  # get_embedding's answer
        return doc.vector()
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"type": "string", "enum": [m.value for m in hint]}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _component(hint, doc)
    if origin in (list, Sequence, Iterable, tuple) or hint is list:
        args = typing.get_args(hint)
        return {"type": "array", "items": _plain_schema(args[0], doc) if args else {}}
    if origin in (dict, Mapping) or hint is dict:
        args = typing.get_args(hint)
        value = _plain_schema(args[1], doc) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value}
    return {}


# filters read None in a collection field (and Filter.sort) as its default, no condition
# (and a Memory None metadata as {})
_NULL_AS_EMPTY: Final = frozenset({"Filter", "EventFilter"})
# required fields a request may omit: the server makes a memory's id (API.md section 8)
_SERVER_MADE: Final = frozenset({("Memory", "id")})


def _component(cls: type, doc: _Doc) -> dict[str, Any]:
    """A ``$ref`` to the dataclass's schema, built once per document."""
    name = cls.__name__
    if name not in doc.components:
        doc.components[name] = {}  # recursion guard
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        props = {}
        for f in fields:
            prop = _schema(hints[f.name], doc, f"{name}.{f.name}")
            if (name, f.name) == ("Memory", "metadata") or (
                name in _NULL_AS_EMPTY
                and (f.default_factory is not dataclasses.MISSING or f.default == ())
            ):
                prop = {"anyOf": [prop, {"type": "null"}]}
            props[f.name] = prop
        doc.components[name] = {
            "type": "object",
            "additionalProperties": False,
            "properties": props,
            "required": [
                f.name
                for f in fields
                if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
                and (name, f.name) not in _SERVER_MADE
            ],
            "description": (cls.__doc__ or "").strip().split("\n")[0],
        }
    return {"$ref": f"#/components/schemas/{name}"}


def _update_fields(doc: _Doc) -> dict[str, Any]:
    """``update``'s ``**fields``: the Memory fields an update may change."""
    from memini.types import Memory

    hints = typing.get_type_hints(Memory)
    changeable = [f for f in dataclasses.fields(Memory) if "fixed" not in f.metadata]
    return {
        "type": "object",
        "description": "the Memory fields to change, by name",
        "additionalProperties": False,
        "properties": {f.name: _schema(hints[f.name], doc, f"Memory.{f.name}") for f in changeable},
    }


_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            "required": ["type", "message"],
        }
    },
}
_STATUSES = {
    "400": "invalid argument (malformed JSON, wrong types, unknown fields)",
    "401": "missing, unknown or disabled credential",
    "403": "a namespace or operation outside the key's reach",
    "404": "not found",
    "409": "conflict",
    "413": "body too large",
    "422": "dimension mismatch",
    "503": "shutting down or unavailable",
}


def openapi(version: str, dims: int) -> dict[str, Any]:
    """The OpenAPI document: one ``POST /v1/<method>`` per served `Store` method of a store
    whose vectors have ``dims`` values."""
    ctx = _Doc(dims, {"Error": _ERROR})
    paths: dict[str, Any] = {}
    err = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for name, m in sorted(wire.METHODS.items()):
        props: dict[str, Any] = {}
        required = []
        for pname, p in m.signature.parameters.items():
            if pname == m.var_keyword:
                props[pname] = _update_fields(ctx)
                continue
            schema = _schema(m.params[pname], ctx, pname)
            props[pname] = _refine(schema, _rule(f"{name}.{pname}"))
            if p.default is p.empty:
                required.append(pname)
        doc = (m_doc := getattr(Store, name).__doc__ or "").strip()
        paths[f"/v1/{name}"] = {
            "post": {
                "operationId": name,
                "summary": doc.split("\n")[0],
                "description": m_doc,
                "requestBody": {
                    "required": bool(required),
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": props,
                                "required": required,
                            }
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "the method's return value",
                        "content": {"application/json": {"schema": _schema(m.returns, ctx)}},
                    },
                    **{code: {"description": d, **err} for code, d in _STATUSES.items()},
                },
                "security": [{"bearer": []}],
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "memini",
            "version": version,
            "description": "The memini Store API over HTTP: every method is POST /v1/<name> "
            "with its arguments as a JSON object; errors are "
            '{"error": {"type", "message"}}.',
        },
        "paths": paths,
        "components": {
            "schemas": ctx.components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
