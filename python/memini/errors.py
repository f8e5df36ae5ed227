"""The memini exception tree: every error the package raises derives from `MeminiError`."""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "CorruptionError",
    "DimensionMismatchError",
    "InvalidArgumentError",
    "MeminiError",
    "NotFoundError",
    "StoreClosedError",
    "StoreLockedError",
    "UnavailableError",
]


class MeminiError(Exception):
    """Root of every error raised by memini."""


class NotFoundError(MeminiError, LookupError):
    """The memory (or other object) does not exist in the namespace asked for."""


class ConflictError(MeminiError):
    """The write collides with existing state, e.g. an id that lives in another namespace."""


class InvalidArgumentError(MeminiError, ValueError):
    """An argument is malformed or out of range; the message names the fix."""


class DimensionMismatchError(InvalidArgumentError):
    """A vector's length (or a reopen's dims/metric) differs from the store's."""


class StoreClosedError(MeminiError):
    """The store was closed (or opened before a fork, in the child)."""


class StoreLockedError(MeminiError):
    """Another live Store (this process or another) holds the store directory."""


class CorruptionError(MeminiError):
    """The row store itself is damaged."""


class UnavailableError(MeminiError):
    """A service memini depends on (a remote store, an embedding service) cannot be reached,
    timed out, or kept failing after retries; the same call may succeed later."""
