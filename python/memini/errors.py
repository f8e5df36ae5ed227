"""The memini exception tree: every error the package raises derives from `MeminiError`."""

from __future__ import annotations

__all__ = [
    "AuthError",
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
    """A service memini depends on (a served store, an embedding service) cannot be
    reached, timed out, kept failing after retries, or is shutting down; the same call may
    succeed later. From a `memini.client.RemoteStore` write it means the outcome is unknown:
    the write may or may not have been applied (see `memini.client`)."""


class AuthError(MeminiError):
    """A refused or insufficient credential: unknown or disabled key (HTTP 401), or a
    namespace or operation outside what the key may touch (HTTP 403)."""
