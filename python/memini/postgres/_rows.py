"""Rows of ``memories``: a validated core row (`memini._convert`) in, a `Memory` out.

The write side takes the row dict `memini._convert.memory_to_row` / `fields_to_row` make
(the one home of field validation), stamps the timestamps the store owns and adds what
PostgreSQL indexes: ``meta`` (JSONB of the metadata, for filters) and ``words`` (the text the
``tsvector`` is built from: content, summary and tags, case- and accent-folded here because
the bundled server has no ``unaccent``).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final

import numpy as np

from memini._values import from_micros, json_to_metadata
from memini.types import Level, Memory, Tier

__all__ = [
    "COLUMNS",
    "SELECT",
    "WRITE_COLUMNS",
    "fold",
    "query_words",
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


def fold(text: str) -> str:
    """Lowercase, accents removed (NFKD, combining marks dropped): the keyword text."""
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
    out["words"] = fold(" ".join((row["content"], row["summary"], *row["tags"])))
    return out


def _time(us: int | None) -> Any:
    return None if us is None else from_micros(us)


def to_memory(r: tuple[Any, ...]) -> Memory:
    """A `Memory` from a row of ``SELECT`` (embedding None, as every read)."""
    return Memory(
        id=r[0],
        namespace=r[1],
        content=r[2],
        tier=_TIERS[r[3]],
        level=None if r[4] is None else _LEVELS[r[4]],
        summary=r[5],
        metadata=json_to_metadata(r[6]),
        tags=list(r[7]),
        importance=r[8],
        created_at=from_micros(r[9]),
        updated_at=from_micros(r[10]),
        last_accessed_at=from_micros(r[11]),
        access_count=r[12],
        expires_at=_time(r[13]),
        superseded_by=r[14],
        valid_from=_time(r[15]),
        valid_to=_time(r[16]),
        confidence=r[17],
        linked_memory_ids=list(r[18]),
    )
