"""Rows of ``memories``: a validated core row (`memini._convert`) in, a `Memory` out; and
the text codec every connection uses.

The write side takes the row dict `memini._convert.memory_to_row` / `fields_to_row` make
(the one home of field validation), stamps the timestamps the store owns and adds what
PostgreSQL indexes: ``meta`` (JSONB of the metadata, for filters) and ``words`` (the text the
``tsvector`` is built from: content, summary and tags, case- and accent-folded here because
the bundled server has no ``unaccent``).

PostgreSQL text cannot hold U+0000, which memini's text may (ids, contents, tags, event
queries, ...). `register_text_codec` makes every connection write text with an escape,
U+0001 -> U+0001 U+0002 and U+0000 -> U+0001 U+0001, and read it back undone: text without
either character is stored as is, the code is prefix-free and keeps code-point order, so
sorting, ``starts_with`` and equality work on the stored form.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final

import numpy as np
from psycopg import pq
from psycopg.abc import AdaptContext
from psycopg.types.string import StrBinaryDumper, StrDumper, StrDumperUnknown, TextLoader

from memini._values import from_micros, json_to_metadata
from memini.types import Level, Memory, Tier

__all__ = [
    "COLUMNS",
    "SELECT",
    "WRITE_COLUMNS",
    "decode_text",
    "decoded",
    "fold",
    "query_words",
    "register_text_codec",
    "to_memory",
    "write_values",
]

# The columns a Memory is read from, in `to_memory`'s order.
COLUMNS: Final = (
    "id",
    "namespace",
    "content",
    "tier",
    "level",
    "summary",
    "metadata",
    "tags",
    "importance",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "access_count",
    "expires_at",
    "superseded_by",
    "valid_from",
    "valid_to",
    "confidence",
    "linked_memory_ids",
)
SELECT: Final = ", ".join(COLUMNS)
# The columns an upsert writes (``words`` is built from its folded text in SQL).
WRITE_COLUMNS: Final = (*COLUMNS, "fingerprint", "meta", "embedding")

_TIERS: Final = {t.value: t for t in Tier}
_LEVELS: Final = {lv.value: lv for lv in Level}
_WORD: Final = re.compile(r"[^\W_]+")
_NUL_ESCAPE: Final = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


_ESCAPED: Final = re.compile("\x01([\x01\x02])")


def encode_text(s: str) -> str:
    """The stored form of ``s`` (see the module docs)."""
    if "\x00" not in s and "\x01" not in s:
        return s
    return s.replace("\x01", "\x01\x02").replace("\x00", "\x01\x01")


def decode_text(s: str) -> str:
    """``s`` from its stored form."""
    if "\x01" not in s:
        return s
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "\x01" else "\x01", s)


# the text columns of a row of ``SELECT`` (`COLUMNS`) that may hold an escape: the others
# are a namespace (no control characters, `memini.limits.check_namespace`), a tier or level
# name (memini's own words) and the metadata JSON, which writes every control character as
# an escape of its own
_TEXTS: Final = tuple(COLUMNS.index(c) for c in ("id", "content", "summary", "superseded_by"))
_TEXT_LISTS: Final = tuple(COLUMNS.index(c) for c in ("tags", "linked_memory_ids"))


def decoded(r: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of ``SELECT`` (`to_memory`'s) read in stored form, its text decoded.

    One test for the whole row (its text joined), where the codec's loader was a Python
    call for each value (61 in a 10-row vector search)."""
    texts = [r[i] for i in _TEXTS if r[i] is not None]
    for i in _TEXT_LISTS:
        texts += r[i]
    if "\x01" not in "".join(texts):
        return r
    out = list(r)
    for i in _TEXTS:
        if out[i] is not None:
            out[i] = decode_text(out[i])
    for i in _TEXT_LISTS:
        out[i] = [decode_text(t) for t in out[i]]
    return tuple(out)


class _Unknown(StrDumperUnknown):
    def dump(self, obj: str) -> bytes:
        return encode_text(obj).encode()


class _Text(StrDumper):
    def dump(self, obj: str) -> bytes:
        return encode_text(obj).encode()


class _TextBinary(StrBinaryDumper):
    def dump(self, obj: str) -> bytes:
        return encode_text(obj).encode()


class _Loader(TextLoader):
    def load(self, data: Any) -> str:
        s = str(data, "utf-8")  # from bytes or a memoryview, without a copy
        return s if "\x01" not in s else decode_text(s)


class _BinaryLoader(_Loader):
    format = pq.Format.BINARY


def register_text_codec(context: AdaptContext) -> None:
    """Write and read every text value of ``context`` (a connection) through the codec."""
    adapters = context.adapters
    adapters.register_dumper(str, _TextBinary)
    adapters.register_dumper(str, _Text)
    adapters.register_dumper(str, _Unknown)  # the last registered is the default
    for name in ("text", "varchar"):
        adapters.register_loader(name, _Loader)
        adapters.register_loader(name, _BinaryLoader)


def fold(text: str) -> str:
    """Lowercase, accents removed (NFKD, combining marks dropped): the keyword text."""
    if text.isascii():  # nothing to decompose, and casefold is lower (most text; 10x faster)
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def query_words(query: str) -> list[str]:
    """The query's words of >= 2 letters/digits, folded, each once, in order."""
    return list(dict.fromkeys(w for w in _WORD.findall(fold(query)) if len(w) >= 2))


def _meta_json(metadata: str) -> str:
    """The metadata JSON for the ``jsonb`` column: PostgreSQL's jsonb refuses ``\\u0000``,
    so a NUL inside a string becomes U+FFFD there (the exact text is kept in ``metadata``)."""
    return _NUL_ESCAPE.sub(r"\1\\ufffd", metadata) if "\\u0000" in metadata else metadata


def write_values(row: dict[str, Any]) -> dict[str, Any]:
    """The named parameters of an upsert of a full core row (timestamps already stamped)."""
    out = {name: row[name] for name in COLUMNS}
    out["fingerprint"] = row["fingerprint"]
    out["meta"] = _meta_json(row["metadata"])
    emb = row.get("embedding")
    out["embedding"] = None if emb is None or len(emb) == 0 else np.asarray(emb, np.float32)
    words = fold(" ".join((row["content"], row["summary"], *row["tags"])))
    out["words"] = words.replace("\x00", " ").replace("\x01", " ")
    return out


def _time(us: int | None) -> Any:
    return None if us is None else from_micros(us)


_NEW: Final = object.__new__


def to_memory(r: tuple[Any, ...]) -> Memory:
    """A `Memory` from a row of ``SELECT`` (embedding None, as every read).

    Built as the core's binding builds the rows it returns (``object.__new__`` and the
    instance dict, no ``__init__``: the values are the store's own), at a third of the cost
    of the constructor, which a search pays for every row it returns.
    """
    created = from_micros(r[9])
    updated = created if r[10] == r[9] else from_micros(r[10])
    accessed = updated if r[11] == r[10] else from_micros(r[11])
    m: Memory = _NEW(Memory)
    m.__dict__.update(
        id=r[0],
        namespace=r[1],
        content=r[2],
        tier=_TIERS[r[3]],
        level=None if r[4] is None else _LEVELS[r[4]],
        summary=r[5],
        metadata={} if r[6] == "{}" else json_to_metadata(r[6]),
        tags=list(r[7]),
        importance=r[8],
        created_at=created,
        updated_at=updated,
        last_accessed_at=accessed,
        access_count=r[12],
        expires_at=_time(r[13]),
        superseded_by=r[14],
        valid_from=_time(r[15]),
        valid_to=_time(r[16]),
        confidence=r[17],
        linked_memory_ids=list(r[18]),
        embedding=None,
    )
    return m
