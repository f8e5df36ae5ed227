"""Shared by the LangGraph adapter tests: a deterministic embedder and store factories."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

DIMS = 16


def word_vector(word: str) -> np.ndarray:
    """A fixed pseudo-random vector per lowercase word."""
    rng = np.random.default_rng(zlib.crc32(word.lower().encode()))
    return rng.standard_normal(DIMS)


def embed(texts: Sequence[str]) -> list[list[float]]:
    """Bag of words: the sum of the word vectors (texts sharing words are close); a text
    without words gets a fixed vector of its own."""
    out = []
    for text in texts:
        words = re.findall(r"\w+", text.lower())
        v = sum((word_vector(w) for w in words), np.zeros(DIMS)) if words else word_vector("")
        out.append([float(x) for x in v])
    return out


def index(fields: list[str] | None = None) -> dict[str, object]:
    """An IndexConfig for `embed`, on the ``text`` field unless told."""
    return {"dims": DIMS, "embed": embed, "fields": fields or ["text"]}
