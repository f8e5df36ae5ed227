"""Domain types of the public API (shared/API.md section 2): enums, dataclasses, helpers.

Datetimes: a naive datetime is taken as UTC wherever one is accepted.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import numpy as np

from memini import _core
from memini._core import ranking
from memini._values import (
    check_confidence,
    check_int,
    check_text,
    check_unicode,
    coerce_enum,
    to_micros,
)
from memini.errors import InvalidArgumentError
from memini.limits import check_namespace

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
    "Recalled",
    "Scored",
    "Sort",
    "SortKey",
    "Tier",
    "fingerprint",
    "grow_confidence",
    "hash_api_key",
    "new_id",
    "normalize_content",
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


# The rules of a `Memory` field beyond its type, declared with the field (`field(metadata=
# _rules(...))`) so that the dataclass is the one Python list of a memory's fields and
# everything particular to each: `memini._convert` derives each field's conversion for the
# core from its annotation (``str``, ``float | None``, ``Tier``, ...) and reads these keys.
# Kept here rather than in a table beside the converters so that adding or changing a field,
# rules included, is one Python edit, as the Rust side declares `fixed` next to each field.
_NON_EMPTY_TEXT = partial(check_text, non_empty=True)
_COUNT = partial(check_int, non_negative=True)


def _rules(
    *, check: Callable[[Any, str], object] | None = None, fixed: str | None = None
) -> dict[str, object]:
    """The ``metadata`` of a `Memory` field with a rule its type does not state.

    Args:
        check: ``check(value, field_name)`` validates and converts a given (non-None) value
            for the core in place of the rule of the field's type: a non-empty id, a
            confidence in [0, 1], a non-negative count.
        fixed: The field may be set on insert but never changed by ``Store.update``; this is
            the error message, naming the way to do it instead.
    """
    rules: dict[str, object] = {}
    if check is not None:
        rules["check"] = check
    if fixed is not None:
        rules["fixed"] = fixed
    return rules


@dataclass
class Memory:
    """One memory row. ``embedding`` is write-only: rows read back carry ``None``.

    The store validates every field on write (``upsert``, ``upsert_many``, ``update``) and
    raises `InvalidArgumentError` naming the field and the fix. Beyond the types above:

    * ``id`` is non-empty; ``namespace`` is 1-256 characters with no control, invisible or
      line-separator character and not only whitespace (`memini.limits.check_namespace`);
      text fields are valid Unicode (no lone surrogate, see `normalize_content`);
    * ``tags`` and ``linked_memory_ids`` are lists (or tuples) of str. A bare ``str`` is
      refused, as everywhere a sequence of strings is expected (it is never split into
      characters nor wrapped): write ``tags=["x"]``, not ``tags="x"``;
    * ``confidence`` is None (not tracked) or a finite float in [0, 1];
    * ``superseded_by`` never names the memory itself (a row cannot replace itself);
    * ``importance`` is any finite float (the ranking helpers clamp it to [0, 1]).
    """

    id: str = field(
        metadata=_rules(
            check=_NON_EMPTY_TEXT,
            fixed="id cannot be changed by update(): it identifies the memory (upsert a copy "
            "under a new id, then delete the old one)",
        )
    )
    namespace: str = field(
        metadata=_rules(
            check=check_namespace,
            fixed="namespace cannot be changed by update() (use reassign() to move a memory)",
        )
    )
    content: str
    tier: Tier = Tier.SEMANTIC
    level: Level | None = None
    summary: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    importance: float = 0.0
    created_at: datetime | None = field(
        default=None,
        metadata=_rules(
            fixed="created_at cannot be updated (it records when the memory was first stored)"
        ),
    )
    updated_at: datetime | None = None
    last_accessed_at: datetime | None = None
    access_count: int = field(default=0, metadata=_rules(check=_COUNT))
    expires_at: datetime | None = None
    superseded_by: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    confidence: float | None = field(default=None, metadata=_rules(check=check_confidence))
    linked_memory_ids: list[str] = field(default_factory=list)
    embedding: np.ndarray[Any, Any] | Sequence[float] | None = None

    # Ranking helpers (API.md section 2). They read the fields as they are, accept ``tier``
    # as a member or its string value, and take naive datetimes as UTC.

    def expired(self, now: datetime) -> bool:
        """Whether the memory's TTL has passed at ``now``.

        Args:
            now: The reference instant (naive = UTC).

        Returns:
            True when ``expires_at`` is set and ``expires_at <= now``.
        """
        if self.expires_at is None:
            return False
        return _as_utc(self.expires_at, "expires_at") <= _as_utc(now, "now")

    def salience(self) -> float:
        """Base, time-independent quality in [0, 1]: the tier weight modulated by importance.

        ``clamp01(w_tier * (0.5 + 0.5 * clamp01(importance)))`` with tier weights
        procedural 0.95, semantic 0.90, episodic 0.55, working 0.30.

        Raises:
            InvalidArgumentError: ``tier`` is not a known tier.
        """
        return self._ranking(None)[0]

    def effective_confidence(self, now: datetime) -> float:
        """Corroboration of a durable memory at ``now``, decayed lazily since last confirmed.

        1.0 for working/episodic memories and when ``confidence`` is None (not tracked).
        Otherwise ``clamp01(confidence)``, unchanged during the first week after
        ``max(updated_at, last_accessed_at)``, then reduced continuously by 0.05 per week
        (``c - 0.05 * (weeks - 1)``) down to a floor of 0.05. A timestamp that is None
        (not stamped by the store yet) does not anchor the decay; with both None there is
        no decay.

        Args:
            now: The reference instant (naive = UTC).

        Raises:
            InvalidArgumentError: ``tier`` is not a known tier.
        """
        return self._ranking(now)[1]

    def durable_score(self, now: datetime) -> float:
        """Rank as durable knowledge: salience x corroboration x reinforcement, no recency.

        ``salience() * effective_confidence(now) * (1 + ln(1 + access_count))``; a negative
        ``access_count`` counts as 0.

        Args:
            now: The reference instant (naive = UTC).
        """
        return self._ranking(now)[2]

    def quality(self, now: datetime) -> float:
        """Score for recall ranking and lifecycle decisions (higher = worth keeping).

        Semantic/procedural memories: ``durable_score(now)``. Working/episodic memories:
        ``salience() * (1 + ln(1 + access_count)) * recency(now)``.

        Args:
            now: The reference instant (naive = UTC).
        """
        return self._ranking(now)[4]

    def recency(self, now: datetime) -> float:
        """Exponential recency factor ``exp(-age / H)`` in (0, 1], H = 7 days.

        ``age`` is the time since ``last_accessed_at``, clamped at 0 (an access in the
        future counts as now). ``last_accessed_at=None`` (not stamped yet; the store stamps
        "now") gives 1.0. Note the formula is ``exp``, not ``2**``: the factor is 1/e after
        H, as API.md defines it.

        Args:
            now: The reference instant (naive = UTC).
        """
        return self._ranking(now)[3]

    def _ranking(self, now: datetime | None) -> tuple[float, float, float, float, float]:
        """(salience, effective_confidence, durable_score, recency, quality) at ``now``,
        computed by the core: the one implementation, shared with `Store.recall`'s rerank."""
        return ranking(
            coerce_enum(Tier, self.tier, "tier").value,
            float(self.importance),
            None if self.confidence is None else float(self.confidence),
            _opt_micros(self.updated_at, "updated_at"),
            _opt_micros(self.last_accessed_at, "last_accessed_at"),
            min(max(int(self.access_count), 0), _I64_MAX),
            0 if now is None else to_micros(now, "now"),
        )


@dataclass
class Scored:
    """A search hit: the memory and its score (higher is better)."""

    memory: Memory
    score: float


@dataclass(frozen=True)
class Recalled:
    """A `Store.recall` result: the memory, its final score (higher is better) and how each
    search leg scored it (None: that leg did not find it), and the namespace it came from."""

    memory: Memory
    score: float
    vector_score: float | None
    keyword_score: float | None
    via: str


@dataclass
class Sort:
    """Ordering for `Store.list`; ties are broken by id ascending."""

    key: SortKey = SortKey.CREATED_AT
    asc: bool = False


# The one Python list of a filter's fields: the core's filter spec (`memini._convert.
# filter_to_spec`, a rule per field type), the wire format and the OpenAPI schema derive from
# it. The Rust list is ``for_filter_fields!`` in rust/types.rs, whose binding refuses a spec
# with a key missing or unknown; tests/test_filters.py checks that the two agree and that every
# field has cases run on every backend.
@dataclass
class Filter:
    """Which rows a list, count or search considers. The default selects the live rows.

    Sequence fields (``tiers``, ``levels``, ``tags``, ``exclude_ids``, ``memory_types``)
    take a list, tuple or set; None or empty means "no condition". A bare ``str`` (or a
    single enum member) is refused, as everywhere a sequence is expected: write
    ``Filter(tags=["x"])``, not ``Filter(tags="x")``.
    """

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
    """Selects event-log rows for `Store.list_events`.

    ``namespaces``, ``kinds`` and ``tiers`` take a list, tuple or set (None or empty = no
    condition); a bare ``str`` is refused, as in `Filter`.
    """

    namespace: str = ""
    namespaces: Sequence[str] = ()
    kinds: Sequence[EventKind] = ()
    tiers: Sequence[Tier] = ()
    text: str = ""
    since: datetime | None = None
    before: datetime | None = None
    before_id: int = 0
    limit: int = 0


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

_I64_MAX = 2**63 - 1


def _opt_micros(dt: datetime | None, what: str) -> int | None:
    return None if dt is None else to_micros(dt, what)


def _clamp01(x: float) -> float:
    """Clamp to [0, 1] (NaN passes through, as in the upstream Go code)."""
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


def _as_utc(dt: datetime, what: str) -> datetime:
    """Return ``dt`` as an aware UTC datetime; naive input is taken as UTC."""
    if not isinstance(dt, datetime):
        raise InvalidArgumentError(f"{what} must be a datetime, got a {type(dt).__name__}")
    if dt.utcoffset() is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def grow_confidence(c: float) -> float:
    """Raise a confidence toward 1 on corroboration: ``clamp01(c + 0.1 * (1 - c))``.

    Each re-observation closes 10% of the remaining gap, so repeated growth approaches 1
    without overshooting.

    Args:
        c: The current confidence.

    Returns:
        The grown confidence, in [0, 1].
    """
    return _clamp01(c + 0.1 * (1.0 - c))


def normalize_content(s: str) -> str:
    """Collapse whitespace and case so trivially different restatements compare equal.

    Splits on runs of Unicode whitespace (the White_Space property: ASCII ``\\t\\n\\v\\f\\r``
    and space, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F,
    U+3000; unlike ``str.split()``, *not* U+001C-U+001F), joins the words with single spaces
    and lowercases every code point with the Unicode *simple* lowercase mapping (one code
    point to one code point, no context), which is what Go's ``strings.ToLower`` does:
    U+0130 (capital I with dot above) becomes ``"i"`` and U+03A3 (capital sigma) always
    becomes U+03C3, where Python's ``str.lower()`` gives ``"i"`` + U+0307 and, at the end of
    a word, the final sigma U+03C2. Those two are the only code points where Python's full
    mapping differs from the simple one. The rule's one home is the core
    (`memini._core.normalize_content`; the HTTP front fingerprints the memories it writes),
    with its Unicode tables.

    Content follows the store's one text rule: it must be valid Unicode, so a lone
    surrogate (which no stored memory can contain) is refused here as in ``upsert``, and
    `fingerprint` refuses exactly the same strings.

    Args:
        s: The content.

    Returns:
        The normalised string.

    Raises:
        InvalidArgumentError: ``s`` is not a str, or contains a lone surrogate.
    """
    if not isinstance(s, str):
        raise InvalidArgumentError(f"content must be a str, got a {type(s).__name__}")
    check_unicode(s, "content")
    return _core.normalize_content(s)


def fingerprint(content: str) -> str:
    """Content key for exact-restatement dedup.

    The lowercase hex SHA-256 of the UTF-8 of ``normalize_content(content)``, so contents
    differing only in case or whitespace collide. Accepts exactly what `normalize_content`
    (and a memory's ``content``) accepts: a lone surrogate is refused.

    Args:
        content: The memory content.

    Returns:
        64 lowercase hex digits.

    Raises:
        InvalidArgumentError: ``content`` is not a str, or contains a lone surrogate.
    """
    if not isinstance(content, str):
        raise InvalidArgumentError(f"content must be a str, got a {type(content).__name__}")
    check_unicode(content, "content")
    return _core.fingerprint(content)


def hash_api_key(secret: str) -> str:
    """Hash an API key secret for storage and lookup: the hex SHA-256 of its UTF-8.

    Args:
        secret: The API key secret (lone surrogates are hashed with ``surrogatepass``, so
            any str is accepted; it simply matches no key).

    Returns:
        64 lowercase hex digits.

    Raises:
        InvalidArgumentError: ``secret`` is not a str.
    """
    if not isinstance(secret, str):
        raise InvalidArgumentError(f"secret must be a str, got a {type(secret).__name__}")
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


# new_id: ULIDs (https://github.com/ulid/spec) with the spec's monotonic mode. 26 Crockford
# base32 characters: 48 bits of Unix milliseconds, then 80 random bits; within one
# millisecond (or when the clock steps back) the previous random part is incremented, so
# ids from one process are strictly increasing. base64.b32encode does the bit packing; its
# alphabet is then mapped onto Crockford's, which sorts like the numbers it encodes.
_RFC4648 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_CROCKFORD = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TO_CROCKFORD = bytes.maketrans(_RFC4648, _CROCKFORD)
_RANDOM_BITS = 80
_RANDOM_LIMIT = 1 << _RANDOM_BITS


class _IdState:
    """The last id's parts; guarded by ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ms = -1
        self.rand = 0


_ids = _IdState()


def _now_ms() -> int:
    """Wall clock in Unix milliseconds (a seam for tests)."""
    return time.time_ns() // 1_000_000


def _reseed_after_fork() -> None:
    """In a forked child: fresh lock, and a random jump so parent and child never collide.

    The jump keeps the child's ids above the ones it inherited; the parent keeps stepping
    by 1 from the same point, so a collision would need 2**64 parent ids in one millisecond.
    """
    _ids.lock = threading.Lock()
    _ids.rand += 1 + int.from_bytes(os.urandom(8), "big")
    if _ids.rand >= _RANDOM_LIMIT:
        _ids.ms += 1
        _ids.rand = int.from_bytes(os.urandom(9), "big")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_after_fork)


def new_id() -> str:
    """A new unique id that sorts (as a string) by creation time.

    A ULID: 26 characters of Crockford base32 (``0-9A-Z`` without ``I L O U``), the first 10
    encoding the Unix time in milliseconds. Ids made by one process are strictly increasing,
    also within one millisecond, across threads, and when the wall clock steps back (they
    then keep the last timestamp); a forked child continues above its parent's last id on a
    different random sequence. Thread-safe.

    Returns:
        The id, e.g. ``"01JDQ3V8ZK4TQ5R6W1N0B3C2XA"``.
    """
    with _ids.lock:
        ms = _now_ms()
        if ms > _ids.ms:
            _ids.ms = ms
            _ids.rand = int.from_bytes(os.urandom(10), "big")
        else:
            _ids.rand += 1
            if _ids.rand >= _RANDOM_LIMIT:  # 2**80 ids in one millisecond: borrow the next
                _ids.ms += 1
                _ids.rand = int.from_bytes(os.urandom(9), "big")
        value = (_ids.ms << _RANDOM_BITS) | _ids.rand
    # 20 bytes = 32 base32 digits; the top 30 bits are zero padding, the last 26 digits
    # carry the 128-bit value.
    encoded = base64.b32encode(value.to_bytes(20, "big")).translate(_TO_CROCKFORD)
    return encoded[6:].decode("ascii")
