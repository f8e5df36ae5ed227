"""memini: an embeddable memory store for AI agents.

Memories (facts, episodes, procedures) live in namespaces and are recalled by meaning
(usearch HNSW vector search) and by words (tantivy BM25) under rich filters, on a durable
Rust core. See `Store`.
"""

from memini.errors import (
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

__all__ = [
    "APIKey",
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
    "Scored",
    "Sort",
    "SortKey",
    "Store",
    "StoreClosedError",
    "StoreLockedError",
    "Tier",
    "UnavailableError",
    "fingerprint",
    "grow_confidence",
    "hash_api_key",
    "new_id",
    "normalize_content",
]
