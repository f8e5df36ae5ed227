"""The largest sizes and names a caller may give (README "Limits", API.md section 8).

The numbers and the namespace rule live in the Rust core (``rust/limits.rs``); this module
reads them from there so `memini.Store` (both backends), the server's OpenAPI document and
the CLI state the same numbers. Every size a caller sends is checked here before anything
is sized by it; a refusal is an `InvalidArgumentError` (HTTP 400) naming the argument and its
maximum.

Attributes:
    MAX_K: Results of one search or recall (``k``).
    MAX_POOL: Candidates per leg and namespace of a recall (``pool``).
    MAX_LIMIT: ``limit``, ``offset`` and ``keep_max`` (2**31-1).
    MAX_QUERIES: Queries of one ``vector_search_many`` call.
    MAX_QUERY_CHARS: Characters of a query string.
    MAX_NAMESPACES: Namespaces one ``recall`` names.
    MAX_NAMESPACE_CHARS: Characters of a namespace name.
"""

from __future__ import annotations

from typing import Final

from memini import _core
from memini._values import check_int, check_text
from memini.errors import InvalidArgumentError

__all__ = [
    "MAX_K",
    "MAX_LIMIT",
    "MAX_NAMESPACES",
    "MAX_NAMESPACE_CHARS",
    "MAX_POOL",
    "MAX_QUERIES",
    "MAX_QUERY_CHARS",
    "PARAMETERS",
    "check_at_most",
    "check_k",
    "check_limit",
    "check_namespace",
    "check_pool",
    "check_query",
]

MAX_K: Final = _core.MAX_K
MAX_POOL: Final = _core.MAX_POOL
MAX_LIMIT: Final = _core.MAX_LIMIT
MAX_QUERIES: Final = _core.MAX_QUERIES
MAX_QUERY_CHARS: Final = _core.MAX_QUERY_CHARS
MAX_NAMESPACES: Final = _core.MAX_NAMESPACES
MAX_NAMESPACE_CHARS: Final = _core.MAX_NAMESPACE_CHARS

PARAMETERS: Final[dict[str, dict[str, dict[str, int]]]] = {
    "k": {"integer": {"minimum": 1, "maximum": MAX_K}},
    "pool": {"integer": {"minimum": 1, "maximum": MAX_POOL}},
    "limit": {"integer": {"maximum": MAX_LIMIT}},
    "offset": {"integer": {"minimum": 0, "maximum": MAX_LIMIT}},
    "keep_max": {"integer": {"maximum": MAX_LIMIT}},
    "query": {"string": {"maxLength": MAX_QUERY_CHARS}},
    "namespace": {"array": {"minItems": 1, "maxItems": MAX_NAMESPACES}},  # recall's list
    "EventFilter.limit": {"integer": {"maximum": MAX_LIMIT}},
}
"""The JSON-schema bounds of the served methods' parameters of these names (and of the
dataclass fields named ``Class.field``), by JSON type: the server's OpenAPI document states
them; every served method gives a parameter name one meaning."""


def _too_large(what: str, maximum: int, value: object) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} must be at most {maximum}, got {value}")


def check_at_most(value: int, what: str, maximum: int) -> int:
    """``value`` when it is at most ``maximum``, else `InvalidArgumentError` naming both."""
    if value > maximum:
        raise _too_large(what, maximum, value)
    return value


def _size(value: object, what: str, maximum: int, *, non_negative: bool = False) -> int:
    n = check_int(value, what, non_negative=non_negative, saturate=True)  # type and sign
    if n > maximum:  # named as given: 2**64 is not shown clamped to 2**63-1
        raise _too_large(what, maximum, value)
    return n


def check_k(k: object, what: str = "k") -> int:
    """A search's or recall's ``k``: an int in 1 .. `MAX_K`."""
    n = _size(k, what, MAX_K)
    if n < 1:
        raise InvalidArgumentError(f"{what} must be >= 1, got {n}")
    return n


def check_pool(pool: object, k: int) -> int:
    """A recall's ``pool``: an int in ``k`` .. `MAX_POOL`."""
    n = _size(pool, "pool", MAX_POOL)
    if n < k:
        raise InvalidArgumentError(f"pool must be >= k, got pool={n} and k={k}")
    return n


def check_limit(value: object, what: str, *, non_negative: bool = False) -> int:
    """A ``limit``, ``offset`` or ``keep_max``: an int up to `MAX_LIMIT` (<= 0 keeps the
    meaning the method gives it, unless ``non_negative``)."""
    return _size(value, what, MAX_LIMIT, non_negative=non_negative)


def check_query(query: object, what: str = "query") -> str:
    """A query string of at most `MAX_QUERY_CHARS` characters, any content (lone surrogates,
    which cannot cross into the core and are no letters, become U+FFFD)."""
    if not isinstance(query, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgumentError(
            f"{what} must be at most {MAX_QUERY_CHARS} characters, got {len(query)} "
            "(search with the question, not the document)"
        )
    return query if query.isascii() else query.encode("utf-8", "replace").decode("utf-8")


def check_namespace(namespace: object, what: str = "namespace") -> str:
    """A namespace name to write: 1 .. `MAX_NAMESPACE_CHARS` characters, no control,
    format/invisible or line-separator character, not only whitespace (the core's rule,
    ``rust/limits.rs``)."""
    ns = check_text(namespace, what)
    try:
        _core.check_namespace(ns)
    except InvalidArgumentError as e:
        if what == "namespace":
            raise
        raise InvalidArgumentError(f"{what}: {e}") from None
    return ns
