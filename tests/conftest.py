"""Shared fixtures: every store-level test runs on an on-disk store, an in-memory store and a
`RemoteStore` talking to a live server on 127.0.0.1 (the proof that the client is the Store
API). Tests about opening, locking or closing a directory, or about the in-process `Store`'s
internals, are marked ``local_only`` and skipped for the remote store."""

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
ADMIN = "conftest-admin-secret"
"""The admin secret of the servers behind the ``remote`` stores."""


@pytest.fixture(params=["disk", "memory", "remote"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Factory ``open_store(dims=4, metric=None)`` for a fresh store of the parametrised kind.

    ``remote``: an in-memory store served by `memini.server.Server` on 127.0.0.1 (a free
    port, uvicorn in a thread, the admin secret `ADMIN`, no event log of served calls: the
    tests read the log) and a `RemoteStore` connected to it as admin; one server per store.
    Stores and servers it opened are closed at teardown.
    """
    from memini import Store

    if request.param == "remote" and request.node.get_closest_marker("local_only"):
        pytest.skip("about a local store directory or the in-process Store")
    opened: list[Any] = []
    servers: list[Any] = []

    def factory(dims: int = 4, metric: str | None = None) -> Any:
        if request.param == "remote":
            import memini
            from memini.server import Server, ServerOptions

            options = ServerOptions(port=0, admin_key=ADMIN, mcp=False, events=False)
            server = Server.open(None, dims=dims, metric=metric, options=options)
            servers.append(server)
            s = memini.connect(server.start(), api_key=ADMIN, retry_for=0)
        else:
            path = tmp_path / f"store{len(opened)}" if request.param == "disk" else None
            s = Store.open(path, dims=dims, metric=metric)
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()
    for server in servers:
        server.stop()


@pytest.fixture
def store(open_store: OpenStore) -> Any:
    """A fresh 4-dim l2 store, on disk and in memory."""
    return open_store()
