"""Fixtures for the metadata database tests (links, API keys, events).

Loaded by the test modules through ``pytest_plugins = ["conftest_meta"]``. Every test taking
``meta`` runs twice: against an on-disk `MetaDB` (in ``tmp_path``) and an in-memory one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memini._sqlite import MetaDB

OpenMeta = Callable[[], MetaDB]


@pytest.fixture(params=["disk", "memory"])
def open_meta(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenMeta]:
    """Factory opening the parametrised kind of `MetaDB`; on disk each call reopens one file.

    In memory every call returns the same database (reopening loses an in-memory database).
    Everything opened is closed at teardown.
    """
    opened: list[MetaDB] = []

    def factory() -> MetaDB:
        if request.param == "memory":
            if not opened:
                opened.append(MetaDB.open(None))
            return opened[0]
        db = MetaDB.open(tmp_path / "store")
        opened.append(db)
        return db

    yield factory
    for db in opened:
        db.close()


@pytest.fixture
def meta(open_meta: OpenMeta) -> MetaDB:
    """A fresh `MetaDB`, on disk and in memory."""
    return open_meta()


@pytest.fixture
def disk_meta(tmp_path: Path) -> Iterator[MetaDB]:
    """A fresh on-disk `MetaDB` (for tests about files)."""
    db = MetaDB.open(tmp_path / "store")
    yield db
    db.close()
