"""``memini serve``: one process owns a store and serves it to a fleet (API.md section 8).

REST/JSON under ``/v1`` (one ``POST /v1/<method>`` per `Store` method, arguments by name),
``/openapi.json``, ``/healthz``, ``/readyz``, ``/metrics`` and MCP (streamable HTTP) at
``/mcp``; `memini.client.RemoteStore` is the client. Needs the ``memini[server]`` extra
(Starlette, uvicorn, orjson, mcp); ``import memini`` never imports this package.

The stack, chosen by measurement (README, "Serving"): the HTTP front in the core
(`memini._core.Front`, rust/serve: hyper on a tokio runtime with a thread per core) listens
on the public address (``front=True``, the default): it decides auth once per request from
the key snapshot the gate pushes to it (`Gate.attach`), applies the body and header limits
and the connection cap, answers ``count``, ``get``, the searches and ``recall`` with a
vector itself, without the GIL, and forwards the rest to the app: Starlette on uvicorn
(uvloop + httptools, each answer sent in one write: `memini.server._http`), bodies with
orjson, on a Unix socket in a private (0700) directory, believing the front's decision only
beside a per-process random token. With ``front=False`` (``memini serve --no-front``)
uvicorn listens on the public address itself.
SIGTERM/SIGINT stop accepting, answer 503 to new calls on open connections, finish those in
flight (the front's own included), write the queued event rows and close the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

import memini
from memini._core import Engine, Front, LocalModel
from memini.embed import LocalEmbedder
from memini.errors import InvalidArgumentError, MeminiError
from memini.metrics import PrometheusMetrics
from memini.server._app import create_app
from memini.server._auth import ADMIN, ADMIN_KEY_ENV, OPEN, Gate, is_loopback
from memini.server._events import EventRecorder
from memini.server._service import Service
from memini.store import Store

__all__ = ["ADMIN_KEY_ENV", "Server", "ServerOptions", "create_app"]

_LOG = logging.getLogger("memini.server")


@dataclass
class ServerOptions:
    """How a `Server` serves (every ``memini serve`` option but the store's own).

    Attributes:
        host: Address to bind; open access (no credential) only on loopback.
        port: TCP port (0 = any free one, see `Server.port`).
        admin_key: The admin secret; None reads ``MEMINI_ADMIN_KEY`` (unset or empty = none).
        max_body: Largest request body in bytes (413 above), on every route (``/mcp`` too).
        body_timeout: Seconds a request body may take to arrive (408 after), every route.
        header_timeout: Seconds a request's headers may take to arrive (the connection is
            closed after).
        max_connections: Open connections (and calls) at once; more are answered 503.
        events: Log every served recall, search and write in the store's event log.
        event_retention: Prune event rows older than this (None = keep by age).
        event_keep_max: Keep at most this many event rows (0 = no cap), 1,000,000 by
            default: with 30 days of retention alone a busy server's log had no bound.
        mcp: Serve MCP at ``/mcp``.
        mcp_namespace: Namespace of MCP tools for the admin / open access (an API key uses
            its own ``default_ns`` or ``home_ns``).
        drain_timeout: Seconds SIGTERM waits for calls in flight.
        backup_dir: The directory served ``backup`` calls write below (None: refused).
        metrics_every: Seconds between refreshes of the live-row gauges of ``/metrics``.
        metrics_admin_only: ``/metrics`` needs the admin secret.
        front: Listen with the HTTP front in the core (auth, limits and the hot routes
            there, the rest forwarded to the app); False: uvicorn on the public address.
        event_queue: Event rows the front queues between two batches of the event log
            (every 0.2 s); the rows of a call that does not fit are dropped, never waited
            for, and counted in the served ``stats()["events_dropped"]`` and ``/metrics``.
    """

    host: str = "127.0.0.1"
    port: int = 8420
    admin_key: str | None = None
    max_body: int = 64 << 20
    body_timeout: float = 30.0
    header_timeout: float = 10.0
    max_connections: int = 2048
    events: bool = True
    event_retention: timedelta | None = timedelta(days=30)
    event_keep_max: int = 1_000_000
    mcp: bool = True
    mcp_namespace: str = "default"
    drain_timeout: float = 30.0
    backup_dir: str | os.PathLike[str] | None = None
    metrics_every: float = 15.0
    metrics_admin_only: bool = False
    front: bool = True
    event_queue: int = 65_536


class _Uvicorn(uvicorn.Server):
    """uvicorn, with the service set draining the moment a stop signal arrives (new calls
    on open connections get 503 while the listener closes)."""

    service: Service
    ended: Callable[[], None]  # `Server._ended`

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, with the server's listener ended before uvicorn re-raises a captured
        stop signal (which ends the process before any ``finally`` of `Server.run`)."""
        with super().capture_signals():
            try:
                yield
            finally:
                self.ended()

    def handle_exit(self, sig: int, frame: types.FrameType | None) -> None:
        self.service.draining = True
        if self.service.front is not None:
            self.service.front.stop()  # no new connections; open ones close once answered
        super().handle_exit(sig, frame)


def _local_model(embedder: object) -> LocalModel | None:
    """The core's model behind the store's ``embedder`` when it is a `LocalEmbedder`, loaded
    now, for the front's text recalls and memories to embed (they share its batches and
    cache with every other caller); None for any other embedder, or none, and for weights
    that do not load: text is then the app's (which names that error on each), but for a
    store without an embedder, whose text recalls the front answers keyword-only."""
    if type(embedder) is not LocalEmbedder:
        return None
    try:
        return embedder._model()
    except MeminiError:
        return None


class Server:
    """A store served over HTTP. Owns the store from here on (closes it on stop).

    Args:
        store: The open store; opened with ``metrics=PrometheusMetrics(registry)`` its
            counters appear at ``/metrics``.
        options: How to serve.
        registry: The registry ``/metrics`` exports (the store's metrics and the HTTP ones).

    Raises:
        InvalidArgumentError: A non-loopback address with no admin secret and no API key
            stored (every request would be refused).
    """

    def __init__(
        self,
        store: Store,
        options: ServerOptions | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.options = opts = options or ServerOptions()
        admin = opts.admin_key if opts.admin_key is not None else os.environ.get(ADMIN_KEY_ENV)
        loopback = is_loopback(opts.host)
        gate = Gate(store, admin or None, loopback)
        if not admin and not loopback and not gate.open and not store.list_api_keys():
            raise InvalidArgumentError(
                f"serving on {opts.host} with no admin secret and no API key would refuse "
                f"every request: set {ADMIN_KEY_ENV}, or bind 127.0.0.1"
            )
        recorder = (
            EventRecorder(store, retention=opts.event_retention, keep_max=opts.event_keep_max)
            if opts.events
            else None
        )
        self._admin = admin or None
        self.service = Service(store, gate, recorder, opts.backup_dir)
        mcp = None
        if opts.mcp:
            from memini.server._mcp import McpEndpoint

            mcp = McpEndpoint(self.service, opts.mcp_namespace, host=opts.host)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.app = create_app(
            self.service,
            max_body=opts.max_body,
            body_timeout=opts.body_timeout,
            registry=self.registry,
            mcp=mcp,
            version=memini.__version__,
            metrics_every=opts.metrics_every,
            metrics_admin_only=opts.metrics_admin_only,
        )
        self._listener: socket.socket | Front | None = None
        self._private: str | None = None  # the directory of the app's Unix socket
        self._uvicorn: _Uvicorn | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None,
        *,
        dims: int | None = None,
        metric: Any = None,
        options: ServerOptions | None = None,
        **open_options: Any,
    ) -> Server:
        """Open the store at ``path`` with Prometheus metrics and wrap it in a `Server`."""
        registry = CollectorRegistry()
        store = Store.open(
            path, dims=dims, metric=metric, metrics=PrometheusMetrics(registry), **open_options
        )
        try:
            return cls(store, options, registry)
        except BaseException:
            store.close()
            raise

    def bind(self) -> socket.socket | Front:
        """Bind the public address now (``port=0`` picks a free port, see `port`): the
        listening socket, or the HTTP front listening there (``front``), which serves from
        `run` or `start`."""
        if self._listener is None:
            opts = self.options
            if opts.front:
                self._listener = Front(opts.host, opts.port, 2048, self._admin)
            else:
                family = socket.AF_INET6 if ":" in opts.host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((opts.host, opts.port))
                sock.listen(2048)
                sock.set_inheritable(True)
                self._listener = sock
            if self.service.gate.open:  # said when a socket opens (not for MCP over stdio)
                _LOG.warning(
                    "no %s and no API key stored: serving WITHOUT authentication on "
                    "loopback %s (key management and backup still need the admin secret)",
                    ADMIN_KEY_ENV,
                    opts.host,
                )
        return self._listener

    @property
    def port(self) -> int:
        """The bound port."""
        listener = self.bind()
        return listener.port if isinstance(listener, Front) else int(listener.getsockname()[1])

    @property
    def url(self) -> str:
        """The base URL clients connect to."""
        host = self.options.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    def _launch(self) -> tuple[_Uvicorn, socket.socket]:
        """uvicorn and the socket it serves: the public one, or behind the front."""
        listener = self.bind()
        opts = self.options
        if isinstance(listener, Front):
            sock = self._behind(listener)
            # the front's connections: one per client connection, which the front caps and
            # times out
            keep_alive, cap = 3600, None
        else:
            sock = listener
            # beyond the cap, new connections are answered 503 at once (a descriptor each)
            keep_alive, cap = 30, opts.max_connections
        config = uvicorn.Config(
            self.app,
            http=_http_protocol(opts.header_timeout),
            # nothing here reads the client's address: no X-Forwarded-* rewriting per request
            proxy_headers=False,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=int(opts.drain_timeout),
            timeout_keep_alive=keep_alive,
            limit_concurrency=cap,
        )
        server = _Uvicorn(config)
        server.service = self.service
        server.ended = self._ended
        self._uvicorn = server
        return server, sock

    def _behind(self, front: Front) -> socket.socket:
        """The app's Unix socket in a new private directory, and the front serving in front
        of it (its requests wait in the socket's backlog until uvicorn runs)."""
        opts = self.options
        self._private = tempfile.mkdtemp(prefix="memini-serve-")  # mode 0700
        path = os.path.join(self._private, "app.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen(2048)
        token = secrets.token_urlsafe(32)
        self.service.gate.attach(front, token.encode())
        store = self.service.store
        engine = store._engine
        recorder = self.service.recorder
        if recorder is not None:
            recorder.attach(front)
        # the store's own decision, made at open: without an embedder its text recalls are
        # keyword-only (`Store._embed_query`), and the front answers them so
        front.serve(
            path, token, opts.max_body, opts.body_timeout, opts.header_timeout,
            opts.max_connections, engine if isinstance(engine, Engine) else None,
            _local_model(store._embedder), store._embedder is None,
            opts.event_queue if recorder is not None else 0, (ADMIN.name, OPEN.name),
        )  # fmt: skip
        self.service.front = front
        return sock

    def _ended(self) -> None:
        """After uvicorn: the listening socket closed, or the front's last connections gone
        and the private directory too."""
        listener, self._listener = self._listener, None
        if isinstance(listener, Front):
            listener.stop()
            listener.wait(self.options.drain_timeout)
        elif listener is not None:
            listener.close()
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (in the main thread), then drain and close the store."""
        server, sock = self._launch()
        _LOG.info("memini serving %s", self.url)
        try:
            server.run(sockets=[sock])
        finally:
            self._ended()

    def start(self) -> str:
        """Serve from a background thread (tests, notebooks); return the URL. `stop` ends it."""
        server, sock = self._launch()
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="memini-server", daemon=True
        )
        self._thread.start()
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server thread stopped while starting (see the log)")
            threading.Event().wait(0.005)
        return self.url

    def stop(self) -> None:
        """Stop a `start`-ed server as SIGTERM would: drain, close the store. Idempotent."""
        if self._uvicorn is not None and self._thread is not None:
            self._uvicorn.handle_exit(signal.SIGTERM, None)
            self._thread.join()
            self._thread = None
        self._ended()


def _http_protocol(header_timeout: float) -> Any:
    """uvicorn's httptools protocol sending each answer in one write and timing out slow
    headers (`_http`), or uvicorn's own choice where httptools is not installed."""
    try:
        from memini.server._http import with_header_timeout
    except ImportError:  # pragma: no cover - httptools ships with uvicorn[standard]
        return "auto"
    return with_header_timeout(header_timeout)
