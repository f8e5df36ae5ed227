"""Domain types of the public API (shared/API.md section 2): enums, dataclasses, helpers."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

__all__ = [
    "APIKey",
    "Event",
    "EventFilter",
    "EventKind",
    "Filter",
    "Level",
    "Memory",
    "NamespaceActivity",
    "NamespaceLink",
    "Scored",
    "Sort",
    "SortKey",
    "Tier",
]


class Tier(enum.StrEnum):
    """Memory tier: how long a memory is meant to live and how much it weighs in ranking."""

    WORKING = "working"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"

    @property
    def term(self) -> str:
        """``"short"`` for working/episodic tiers, ``"long"`` otherwise."""
        return "short" if self in (Tier.WORKING, Tier.EPISODIC) else "long"

    @property
    def default_ttl(self) -> timedelta | None:
        """Suggested TTL for the tier (the store never applies it by itself)."""
        return _DEFAULT_TTL[self]


_DEFAULT_TTL = {
    Tier.WORKING: timedelta(hours=72),
    Tier.EPISODIC: timedelta(days=30),
    Tier.SEMANTIC: None,
    Tier.PROCEDURAL: None,
}


class Level(enum.StrEnum):
    """How a memory was obtained: stated explicitly or deduced."""

    EXPLICIT = "explicit"
    DEDUCED = "deduced"


class SortKey(enum.StrEnum):
    """Sort keys honoured by `Store.list`."""

    CREATED_AT = "created_at"
    UPDATED_AT = "updated_at"
    LAST_ACCESSED_AT = "last_accessed_at"
    ACCESS_COUNT = "access_count"
    IMPORTANCE = "importance"


class EventKind(enum.StrEnum):
    """Kinds of entries in the event log."""

    RECALL = "recall"
    GET = "get"
    BRIEFING = "briefing"
    REMEMBER = "remember"
    UPDATE = "update"
    FORGET = "forget"
    SUPERSEDE = "supersede"
    PIN = "pin"
    UNPIN = "unpin"
    SETTINGS = "settings"
    INJECT = "inject"


@dataclass
class Memory:
    """One memory row. ``embedding`` is write-only: rows read back carry ``None``."""

    id: str
    namespace: str
    content: str
    tier: Tier = Tier.SEMANTIC
    level: Level | None = None
    summary: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    importance: float = 0.0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_accessed_at: datetime | None = None
    access_count: int = 0
    expires_at: datetime | None = None
    superseded_by: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    confidence: float | None = None
    linked_memory_ids: list[str] = field(default_factory=list)
    embedding: np.ndarray[Any, Any] | Sequence[float] | None = None


@dataclass
class Scored:
    """A search hit: the memory and its score (higher is better)."""

    memory: Memory
    score: float


@dataclass
class Sort:
    """Ordering for `Store.list`; ties are broken by id ascending."""

    key: SortKey = SortKey.CREATED_AT
    asc: bool = False


@dataclass
class Filter:
    """Which rows a list, count or search considers. The default selects the live rows."""

    tiers: Sequence[Tier] = ()
    levels: Sequence[Level | None] = ()
    tags: Sequence[str] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    exclude_metadata: Mapping[str, str] = field(default_factory=dict)
    exclude_ids: Sequence[str] = ()
    include_expired: bool = False
    include_superseded: bool = False
    now: datetime | None = None
    as_of: datetime | None = None
    memory_types: Sequence[str] = ()
    created_after: datetime | None = None
    accessed_after: datetime | None = None
    sort: Sort = field(default_factory=Sort)


@dataclass
class NamespaceLink:
    """A directed link between namespaces, optionally limited to some tiers."""

    src: str
    dst: str
    tiers: list[Tier] | None = None
    note: str = ""
    created_at: datetime | None = None


@dataclass
class APIKey:
    """An API key record: the SHA-256 hash of the secret, never the secret."""

    name: str
    hash: str
    home_ns: str = ""
    default_ns: str = ""
    created_at: datetime | None = None
    disabled: bool = False


@dataclass
class NamespaceActivity:
    """Live row count and newest live ``created_at`` of one namespace."""

    ns: str
    total: int
    last_write: datetime


@dataclass
class Event:
    """One row of the event log. ``id`` is assigned by the store."""

    op_id: str
    kind: EventKind
    namespace: str
    query: str = ""
    memory_id: str = ""
    memory_ns: str = ""
    memory_tier: Tier | None = None
    memory_summary: str = ""
    rank: int = 0
    score: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    id: int = 0


@dataclass
class EventFilter:
    """Selects event-log rows for `Store.list_events`."""

    namespace: str = ""
    namespaces: Sequence[str] = ()
    kinds: Sequence[EventKind] = ()
    tiers: Sequence[Tier] = ()
    text: str = ""
    since: datetime | None = None
    before: datetime | None = None
    before_id: int = 0
    limit: int = 0
