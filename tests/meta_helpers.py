"""Constants and helpers for the metadata database tests (plain imports, not fixtures)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
"""A fixed instant with a non-zero microsecond part."""


def at(seconds: float) -> datetime:
    """``T0`` shifted by ``seconds``."""
    return T0 + timedelta(seconds=seconds)
