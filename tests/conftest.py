"""Shared fixtures: every store-level test runs on an on-disk and an in-memory store."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

OpenStore = Callable[..., Any]


@pytest.fixture(params=["disk", "memory"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Factory ``open_store(dims=4, metric=None)`` for a fresh store of the parametrised kind.

    Stores it opened are closed at teardown.
    """
    from memini import Store

    opened: list[Any] = []

    def factory(dims: int = 4, metric: str | None = None) -> Any:
        path = tmp_path / f"store{len(opened)}" if request.param == "disk" else None
        s = Store.open(path, dims=dims, metric=metric)
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()


@pytest.fixture
def store(open_store: OpenStore) -> Any:
    """A fresh 4-dim l2 store, on disk and in memory."""
    return open_store()
