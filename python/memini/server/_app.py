"""The ASGI app: REST under ``/v1``, OpenAPI, health, Prometheus metrics, MCP at ``/mcp``.

Thin, as STYLE.md asks: decode and validate the body (`memini._wire`, the schema shared with
the client), hand the call to `Service.invoke` in a worker thread, encode the answer. One
handler maps `MeminiError` subclasses to status codes (`memini._wire.STATUS`). Bad input
never reaches the store: a body over ``max_body`` bytes is refused with 413 as it streams
in, one that does not arrive within ``body_timeout`` seconds with 408, malformed JSON
(NaN and Infinity included), unknown arguments or fields and malformed datetimes with 400.

``POST /v1/<method>`` (every store call) is served by a bare ASGI handler in front of
Starlette, which serves every other path: no router, middleware stack or request objects
per call, and the call goes to the worker threads as `memini.aio` sends its calls (the
worker completes the awaited future) rather than with anyio's ``to_thread`` (a cancel scope,
a capacity limiter and a chained future per call). Measured through the app without
sockets (20k rows, k=10 vector_search): the event loop's CPU per call 136 -> 86 us.

A read (a search, ``get``, ...) that is the only request in the server runs on the event
loop itself: handing it to a worker and back costs two thread wake-ups, a GIL handover and
an event-loop wake-up (measured ~100-200 us of server CPU per call, most of it in the
kernel), which a lone caller waits through. The store releases the GIL while it searches,
and nothing else is waiting, so nothing is lost; as soon as two requests overlap (counted
after one turn of the loop, which lets every request that arrived together start) they go
to the workers and run in parallel. Writes always go to the workers (concurrent writes share
a group commit), and so do large bodies and methods whose previous call took 5 ms or more,
so that the loop (and ``/healthz``) is never held long. Measured with one client process
(20k rows, k=10 vector_search, loaded 2-core machine, same run): p50 3.25 -> 2.48 ms.

Overlapping ``vector_search`` and ``keyword_search`` calls of an embedded store skip the
worker threads: decoded and checked on the loop, they start in the core
(`memini.aio._native`), whose thread searches without the GIL and then, in one GIL take,
builds the hits, encodes the answer and queues the event rows (`_start_in_core`). A Python
worker took the GIL twice per call, first while the loop that had just woken it still
held it. Measured with 4 client processes (20k rows, loaded 2-core machine, the bench's
server CPU per request minus the in-process search's CPU): 0.73 -> 0.44 ms, together with
the cheaper event rows (`memini.server._events`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memini import _wire as wire
from memini.aio import _in_pool, _native, _native_calls, _pool, default_workers
from memini.errors import InvalidArgumentError, MeminiError
from memini.server._auth import Principal, Unauthenticated
from memini.server._openapi import openapi
from memini.server._service import Service
from memini.types import new_id

__all__ = ["create_app"]

_LOG = logging.getLogger("memini.server")
_JSON: Final = "application/json"
_JSON_HEADER: Final = (b"content-type", b"application/json")
_V1: Final = "/v1/"
_VECTOR_FORMAT: Final = wire.VECTOR_FORMAT.encode()
# the HTTP front's decision and its token (`memini.server._auth.Gate.principal`)
_PRINCIPAL: Final = b"memini-principal"
_TOKEN: Final = b"memini-front-token"
# Worker threads for store calls: the AsyncStore default (twice the cores), and at least
# anyio's default 40 (the pool Starlette used), so that up to 40 concurrent writes share one
# group commit even on a small machine.
_WORKERS: Final = max(40, default_workers())
# A read runs on the event loop, not a worker thread, when it is the only request in the
# server, its body is at most _INLINE_BODY bytes and the method's previous call took less
# than _INLINE_SECONDS (see the module docs).
_INLINE_BODY: Final = 64 << 10
_INLINE_SECONDS: Final = 0.005


class _BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_Answer = tuple[int, bytes]


def _error_answer(status: int, type_name: str, message: str) -> _Answer:
    return status, wire.error_body(type_name, message)


def _meminierror_answer(exc: MeminiError) -> _Answer:
    if isinstance(exc, Unauthenticated):
        return _error_answer(401, "AuthError", str(exc))
    cls = type(exc)
    name = cls.__name__ if cls.__name__ in wire.ERRORS else "MeminiError"
    return _error_answer(wire.status_of(exc), name, str(exc))


def _principal(service: Service, request: Request) -> Principal:
    """The caller of a request outside ``/v1`` (`memini.server._auth.Gate.principal`)."""
    headers = request.headers
    token, decided = headers.get("memini-front-token"), headers.get("memini-principal")
    return service.gate.principal(
        headers.get("authorization"),
        None if token is None else token.encode("latin-1"),
        None if decided is None else decided.encode("latin-1"),
    )


def _error(status: int, type_name: str, message: str) -> Response:
    return Response(wire.error_body(type_name, message), status, media_type=_JSON)


def _meminierror(exc: MeminiError) -> Response:
    status, body = _meminierror_answer(exc)
    return Response(body, status, media_type=_JSON)


async def _body(receive: Receive, declared: bytes | None, limit: int, timeout: float) -> bytes:
    """The request body, refused (`_BodyError`) when over ``limit`` bytes (by its declared
    length before reading, or as it streams in) or not complete within ``timeout`` s."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BodyError(
            413, f"the body has {declared.decode()} bytes, more than the limit {limit}"
        )
    chunks: list[bytes] = []
    size = 0
    # asyncio.timeout's work without its bookkeeping (a tenth of the loop thread's Python
    # per call): one timer that cancels the task while it waits for the body
    task = asyncio.current_task()
    assert task is not None
    expired: list[bool] = []
    timer = asyncio.get_running_loop().call_later(timeout, _expire, task, expired)
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _BodyError(400, "the client disconnected before its body arrived")
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _BodyError(413, f"the body is larger than the limit of {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
    except asyncio.CancelledError:
        if not expired:
            raise
        task.uncancel()
        raise _BodyError(408, f"the body did not arrive within {timeout} s") from None
    finally:
        timer.cancel()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _expire(task: asyncio.Task[Any], expired: list[bool]) -> None:
    expired.append(True)
    task.cancel()


class _McpRoute:
    """``/mcp``: the caller authenticated like any request, its body read under the same
    size and arrival-time limits as a REST call's, then handed to the MCP transport with
    its `Principal` in the request state (the tools read it there)."""

    def __init__(self, service: Service, mcp: Any, max_body: int, body_timeout: float) -> None:
        self._service = service
        self._mcp = mcp
        self._max_body = max_body
        self._body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            principal: Principal = _principal(self._service, request)
        except MeminiError as e:
            _LOG.warning("refused /mcp with 401: %s", e)
            await _meminierror(e)(scope, receive, send)
            return
        if self._service.draining:
            await _error(503, "UnavailableError", "the server is shutting down")(
                scope, receive, send
            )
            return
        scope.setdefault("state", {})["memini_principal"] = principal
        if scope["method"] == "POST":
            try:
                raw = await _body(
                    receive,
                    request.headers.get("content-length", "").encode() or None,
                    self._max_body,
                    self._body_timeout,
                )
            except _BodyError as e:
                await _error(e.status, "InvalidArgumentError", str(e))(scope, receive, send)
                return
            receive = _replay(raw, receive)
        await self._mcp.handle(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` (read already) once, then what ``receive`` gives
    (the client's disconnect)."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


# The argument holding the memories of a write: a memory sent without an ``id`` field gets
# a new one from the server (`new_id`; ``""`` stays refused, as by `Store`), so a caller
# that wants no signal of which ids other tenants took (a 409) need not pick any;
# ``upsert`` answers the id.
_NEW_IDS: Final = {"upsert": "memory", "upsert_many": "memories"}


def _parse(method: wire.Method, raw: bytes) -> Any:
    """A call's JSON body, a memory without an ``id`` given a new one.

    Raises:
        InvalidArgumentError: Malformed JSON (nothing reached the store).
    """
    try:
        data = wire.loads(raw) if raw else {}
    except ValueError as e:
        raise InvalidArgumentError(f"the body is not valid JSON: {e}") from None
    slot = _NEW_IDS.get(method.name)
    if slot is not None and isinstance(data, dict):
        given = data.get(slot)
        for m in given if isinstance(given, list) else [given]:
            if isinstance(m, dict) and "id" not in m:
                m["id"] = new_id()
    return data


def _args(method: wire.Method, raw: bytes) -> dict[str, Any]:
    """A call's arguments from its body.

    Raises:
        InvalidArgumentError: Malformed JSON or arguments (nothing reached the store).
    """
    return method.decode_args(_parse(method, raw))


def _call_json(
    service: Service, principal: Principal, method: wire.Method, raw: bytes, base64: bool
) -> bytes:
    """Decode a call's body, serve it, encode its answer (in a worker thread); vectors in
    the answer as base64 when the request asked (``base64``: the `wire.VECTOR_FORMAT`
    header) or sent its own so (`wire.Method.answers_base64`).

    Raises:
        InvalidArgumentError: Malformed JSON or arguments (nothing reached the store).
        MeminiError: What the call raised.
    """
    data = _parse(method, raw)
    args = method.decode_args(data)
    result = service.invoke(principal, method, args)
    if method.name == "upsert":  # the id, which the server may have made
        result = args["memory"].id
    if method.answers_base64(base64, data):
        return wire.dumps_base64(result)
    return wire.dumps(result)


def _start_in_core(
    service: Service, principal: Principal, method: wire.Method, raw: bytes, core: Any
) -> asyncio.Future[bytes]:
    """`_call_json` of a search the core runs on its own threads (`memini.aio._native`):
    decoded and checked here, on the event loop; its answer encoded and its event rows
    queued by the core thread that built the hits, in the same GIL take.

    Raises:
        InvalidArgumentError: Malformed JSON or arguments (nothing reached the store).
        MeminiError: What the checks raised (the search's own errors fail the future).
    """
    args = _args(method, raw)

    def after(error: BaseException | None, result: Any) -> bytes:
        try:
            if error is not None:
                raise error
            return wire.dumps(service.finish(principal, method, args, result))
        finally:
            service.leave()

    service.enter(principal, method, args)
    try:
        future: asyncio.Future[bytes] = _native(service.store, core, (), args, after)
    except BaseException:
        service.leave()
        raise
    return future


def create_app(
    service: Service,
    *,
    max_body: int = 64 << 20,
    body_timeout: float = 30.0,
    registry: CollectorRegistry | None = None,
    mcp: Any = None,
    version: str = "",
    metrics_every: float = 15.0,
    metrics_admin_only: bool = False,
) -> ASGIApp:
    """The ASGI app serving ``service``.

    Args:
        service: The store with its gate and event recorder; closed when the app shuts down.
        max_body: Largest accepted request body in bytes (413 above).
        body_timeout: Seconds a request body may take to arrive (408 after).
        registry: Prometheus registry for ``/metrics`` (the store's metrics should report
            into it); None = a new one with the HTTP metrics only.
        mcp: A `memini.server._mcp.McpEndpoint` to serve at ``/mcp``, or None.
        version: The package version, for the OpenAPI document.
        metrics_every: Seconds between refreshes of the live-row gauges
            (``memini_memories_active``), done in the background: a scrape only renders
            the registry, whatever the store's size.
        metrics_admin_only: ``/metrics`` needs the admin secret (401/403 otherwise).
    """
    reg = registry if registry is not None else CollectorRegistry()
    requests = Counter(
        "memini_http_requests", "HTTP requests served", ["method", "status"], registry=reg
    )
    latency = Histogram(
        "memini_http_request_seconds",
        "HTTP request latency by method",
        ["method"],
        registry=reg,
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
    )
    Gauge("memini_calls_in_flight", "Store calls being served now", registry=reg).set_function(
        lambda: service.in_flight + (0 if service.front is None else service.front.in_flight)
    )
    Gauge(
        "memini_event_rows_dropped",
        "Event rows of served calls dropped since the start (the front's queue was full)",
        registry=reg,
    ).set_function(lambda: 0 if service.recorder is None else service.recorder.dropped)
    # the labelled children, looked up once per (method, status) rather than per request
    counted: dict[tuple[str, int], Any] = {}
    timed: dict[str, Any] = {}
    pool = _pool(_WORKERS, "memini-serve")
    in_core = _native_calls(service.store)  # searches the core runs on its own threads
    doc: dict[str, Any] = {}
    active = [0]  # requests inside `call` now
    took: dict[str, float] = {}  # seconds of each method's last served call

    def observe(label: str, status: int, seconds: float) -> None:
        counter = counted.get((label, status))
        if counter is None:
            counter = counted[label, status] = requests.labels(label, str(status))
        histogram = timed.get(label)
        if histogram is None:
            histogram = timed[label] = latency.labels(label)
        counter.inc()
        histogram.observe(seconds)

    async def call(scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /v1/<method>``: one store call, bare ASGI (the hot path)."""
        t0 = time.perf_counter()
        name = scope["path"][len(_V1) :]
        method = wire.METHODS.get(name)
        active[0] += 1
        try:
            status, body = await _serve(scope, receive, method, name)
        finally:
            active[0] -= 1
        observe(name if method is not None else "unknown", status, time.perf_counter() - t0)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [_JSON_HEADER, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _serve(
        scope: Scope, receive: Receive, method: wire.Method | None, name: str
    ) -> _Answer:
        if method is None:
            return _error_answer(404, "NotFoundError", f"no method {name!r} (see /openapi.json)")
        if service.draining:
            return _error_answer(503, "UnavailableError", "the server is shutting down")
        authorization: bytes | None = None
        declared: bytes | None = None
        base64 = False
        token: bytes | None = None
        decided: bytes | None = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization = value
            elif key == b"content-length":
                declared = value
            elif key == _VECTOR_FORMAT:
                base64 = value.lower() == b"base64"
            elif key == _PRINCIPAL:
                decided = value
            elif key == _TOKEN:
                token = value
        try:
            principal = service.gate.principal(
                None if authorization is None else authorization.decode("latin-1"),
                token,
                decided,
            )
            raw = await _body(receive, declared, max_body, body_timeout)
            t0 = time.perf_counter()
            small = len(raw) <= _INLINE_BODY
            if (
                method.read_only
                and small
                and took.get(name, 0.0) < _INLINE_SECONDS
                and await _alone()
            ):
                body = _call_json(service, principal, method, raw, base64)
            elif small and (core := in_core.get(name)) is not None:
                body = await _start_in_core(service, principal, method, raw, core)
            else:
                # a large batch or a slow call: never on the event loop
                body = await _in_pool(pool, _call_json, service, principal, method, raw, base64)
            took[name] = time.perf_counter() - t0
            return 200, body
        except MeminiError as e:
            answer = _meminierror_answer(e)
            if answer[0] in (401, 403):  # refusals are worth an operator's eye (no secret)
                _LOG.warning("refused %s() with %d: %s", name, answer[0], e)
            return answer
        except _BodyError as e:
            return _error_answer(e.status, "InvalidArgumentError", str(e))
        except RecursionError:  # JSON nested ~1,000 deep in metadata or a filter
            return _error_answer(
                400,
                "InvalidArgumentError",
                f"the body of {name} nests too deeply: metadata, details and filters hold "
                "JSON up to 100 levels deep",
            )
        except Exception:
            _LOG.exception("%s() failed inside the server", name)
            return _error_answer(500, "MeminiError", f"{name}() failed inside the server (logged)")

    async def _alone() -> bool:
        """Whether this request is the only one in the server, once every request that
        arrived with it has started (one turn of the loop lets them in; not taken when
        another request is in already)."""
        if active[0] > 1 or service.in_flight:
            return False
        await asyncio.sleep(0)
        return active[0] == 1 and service.in_flight == 0

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if service.draining:
            return JSONResponse({"status": "draining"}, 503)
        try:
            await _in_pool(pool, service.store.ping)
        except MeminiError as e:
            return JSONResponse({"status": "unavailable", "reason": str(e)}, 503)
        return JSONResponse({"status": "ready"})

    async def metrics(request: Request) -> Response:
        if metrics_admin_only:
            try:
                principal = _principal(service, request)
            except MeminiError as e:
                return _meminierror(e)
            if not principal.secret:
                return _error(403, "AuthError", "/metrics needs the admin secret on this server")
        if service.front is not None:  # the calls the front answered itself, as if here
            observed, unobserved = service.front.observed()
            for route, seconds in observed:
                observe(route, 200, seconds)
            for route, n in unobserved:
                requests.labels(route, "200").inc(n)
            service.report_front_writes()
        return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST)

    async def refresh_gauges() -> None:
        """The live-row gauges (`Store.refresh_active_counts`), off the scrape's path."""
        with contextlib.suppress(MeminiError):
            await _in_pool(pool, service.store.refresh_active_counts)

    async def keep_gauges_fresh() -> None:
        while True:
            await asyncio.sleep(metrics_every)
            await refresh_gauges()

    async def openapi_json(request: Request) -> Response:
        if not doc:
            doc.update(openapi(version, service.store.stats()["dims"]))
        return Response(wire.dumps(doc), media_type=_JSON)

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        # other HTTP methods on /v1/<method> (405); POST never reaches the router
        Route("/v1/{method}", call, methods=["POST"]),
    ]
    if mcp is not None:
        routes.append(
            Route(
                "/mcp",
                _McpRoute(service, mcp, max_body, body_timeout),
                methods=["GET", "POST", "DELETE"],
            )
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if mcp is not None:
                await stack.enter_async_context(mcp.run())
            await refresh_gauges()
            gauges = asyncio.get_running_loop().create_task(keep_gauges_fresh())
            try:
                yield
            finally:
                gauges.cancel()
                try:
                    await _in_pool(pool, service.close)
                finally:
                    pool.shutdown(wait=False)

    rest = Starlette(routes=routes, lifespan=lifespan)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].startswith(_V1):
            await call(scope, receive, send)
        else:
            await rest(scope, receive, send)

    return app
