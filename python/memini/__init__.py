"""memini: an embeddable memory store for AI agents.

Memories (facts, episodes, procedures) live in namespaces and are recalled by meaning
(usearch HNSW vector search) and by words (tantivy BM25) under rich filters, on a durable
Rust core. See `Store`.
"""

from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

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
from memini.metrics import Metrics, PrometheusMetrics
from memini.store import Store
from memini.types import (
    APIKey,
    Event,
    EventFilter,
    EventKind,
    Filter,
    Level,
    Memory,
    NamespaceActivity,
    NamespaceLink,
    Recalled,
    Scored,
    Sort,
    SortKey,
    Tier,
    fingerprint,
    grow_confidence,
    hash_api_key,
    new_id,
    normalize_content,
)

try:
    __version__: str = _metadata.version("memini")
    """The installed package's version."""
except _metadata.PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

if TYPE_CHECKING:  # imported on first use: `import memini` stays free of httpx
    from memini.client import RemoteStore, connect


def __getattr__(name: str) -> Any:
    """``memini.connect`` and ``memini.RemoteStore``, from `memini.client` on first use."""
    if name in ("RemoteStore", "connect"):
        from memini import client

        return getattr(client, name)
    raise AttributeError(f"module 'memini' has no attribute {name!r}")


__all__ = [
    "APIKey",
    "AuthError",
    "ConflictError",
    "CorruptionError",
    "DimensionMismatchError",
    "Event",
    "EventFilter",
    "EventKind",
    "Filter",
    "InvalidArgumentError",
    "Level",
    "MeminiError",
    "Memory",
    "Metrics",
    "NamespaceActivity",
    "NamespaceLink",
    "NotFoundError",
    "PrometheusMetrics",
    "Recalled",
    "RemoteStore",
    "Scored",
    "Sort",
    "SortKey",
    "Store",
    "StoreClosedError",
    "StoreLockedError",
    "Tier",
    "UnavailableError",
    "__version__",
    "connect",
    "fingerprint",
    "grow_confidence",
    "hash_api_key",
    "new_id",
    "normalize_content",
]
