"""The OpenAPI 3.1 document of the served API, derived from `memini._wire.METHODS`.

Schemas come from the same annotations the codec reads, so the document cannot drift from
what the server accepts.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import NoneType, UnionType
from typing import Any

import numpy as np

from memini import _wire as wire
from memini import limits
from memini.store import Store

__all__ = ["openapi"]


def _schema(hint: object, components: dict[str, Any]) -> dict[str, Any]:
    if hint is Any or hint is object:
        return {}
    if wire._is_vector(hint):
        num = {"type": "number"}
        return {
            "anyOf": [
                {"type": "array", "items": num},
                {"type": "array", "items": {"type": "array", "items": num}},
            ]
        }
    origin = typing.get_origin(hint)
    if origin in (typing.Union, UnionType):
        args = typing.get_args(hint)
        opts = [_schema(a, components) for a in args if a is not NoneType]
        if NoneType in args:
            opts.append({"type": "null"})
        return opts[0] if len(opts) == 1 else {"anyOf": opts}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is datetime:
        return {"type": "string", "format": "date-time"}
    if origin is np.ndarray or hint is np.ndarray:
        return {"type": "array", "items": {"type": "number"}}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"type": "string", "enum": [m.value for m in hint]}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        name = hint.__name__
        if name not in components:
            components[name] = {}  # recursion guard
            hints = typing.get_type_hints(hint)
            fields = dataclasses.fields(hint)
            components[name] = {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    f.name: _bounded(_schema(hints[f.name], components), f"{name}.{f.name}")
                    for f in fields
                },
                "required": [
                    f.name
                    for f in fields
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                ],
                "description": (hint.__doc__ or "").strip().split("\n")[0],
            }
        return {"$ref": f"#/components/schemas/{name}"}
    if origin in (list, Sequence, Iterable, tuple) or hint is list:
        args = typing.get_args(hint)
        return {"type": "array", "items": _schema(args[0], components) if args else {}}
    if origin in (dict, Mapping) or hint is dict:
        args = typing.get_args(hint)
        value = _schema(args[1], components) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value}
    return {}


def _bounded(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """``schema`` with the bounds `memini.limits` gives parameter ``name``, on the
    alternative of each bounded JSON type."""
    bounds = limits.PARAMETERS.get(name, {})
    if "anyOf" in schema:
        return {**schema, "anyOf": [_bounded(o, name) for o in schema["anyOf"]]}
    return {**schema, **bounds.get(schema.get("type", ""), {})}


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


def openapi(version: str) -> dict[str, Any]:
    """The OpenAPI document: one ``POST /v1/<method>`` per served `Store` method."""
    components: dict[str, Any] = {"Error": _ERROR}
    paths: dict[str, Any] = {}
    err = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for name, m in sorted(wire.METHODS.items()):
        props: dict[str, Any] = {}
        required = []
        for pname, p in m.signature.parameters.items():
            if pname == m.var_keyword:
                props[pname] = {
                    "type": "object",
                    "description": "the Memory fields to change, by name",
                }
                continue
            props[pname] = _bounded(_schema(m.params[pname], components), pname)
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
                        "content": {"application/json": {"schema": _schema(m.returns, components)}},
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
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
