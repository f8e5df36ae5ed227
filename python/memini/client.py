"""`RemoteStore` and `AsyncRemoteStore`: the `Store` API of a store served by ``memini serve``.

Every method of `Store` (API.md sections 4-6) is here with the same signature, return type
and exceptions: the method's annotations are the wire schema (`memini._wire`), so the client
and the server cannot drift apart. Vectors travel as base64 of their float32 bytes. One
HTTP/1.1 connection pool (keep-alive) per client, safe to share between threads
(`RemoteStore`) or tasks (`AsyncRemoteStore`).

Both clients keep their own HTTP/1.1 connections (`_Connections` on sockets,
`_AsyncConnections` on asyncio streams) for a plain ``http://`` URL reached without a proxy:
httpx's client spent ~400-850 us of CPU per call (URL parsing, header models, pools,
tracing), more than the server's work for a search. h11 checks and renders each request's
head once per path and body length (`_Start`); `_read_answer` reads the common answer (one
Content-Length) itself and leaves every other one, malformed ones included, to h11 (its
state machine was ~33 us of a call's CPU hot, more in a client's loop). The answers holding
memories (searches, recall, ``get``, ``list``, ``update``) are read by the core into the
objects a local call returns (`memini._wire.Method.decode_answer`); the socket's timeout is
kept by the kernel, not polled for before each send and receive (`_kernel_timeout`). Client
CPU per call against a live ``memini serve`` (5k rows, 384-d, k=10; process CPU time of a
client process over 300 calls, best of 3;
`benches/bench_server.py::test_remote_store_client_cpu`, six runs alternating with the
previous client on a loaded 2-core machine): `RemoteStore` ``vector_search`` 99-112 us (was
123-137: hits decoded in Python; 227-229 with h11 on every answer), ``count`` 28-36 us (was
32-35); `AsyncRemoteStore` 134-163 and 51-60 us (was 155-170 and 50-64); httpx, at 20k rows:
705, 432 and 1,047 us. An ``https://`` URL, or one a proxy variable (``HTTP_PROXY``,
``ALL_PROXY``; not ``NO_PROXY``) applies to, goes through httpx, which does TLS and proxies.

Failures and what to do about them:

* A `MeminiError` raised by the server's store is raised here as the same class with the
  same message (``NotFoundError`` is ``NotFoundError``); a refused credential is an
  `AuthError` (401: unknown or disabled key; 403: a namespace or operation the key may not
  touch).
* The server cannot be reached, or answers 503 while it shuts down: `UnavailableError`.
  Calls that change nothing (searches, ``get``, ``list``, ...) are retried with backoff for
  up to ``retry_for`` seconds first, so a client rides through a server restart. A write is
  retried only when its request provably never reached the server (the connection was
  refused). **A write that got no answer may or may not have been applied**: the server may
  have made it durable just before the connection broke. Repeating an ``upsert`` /
  ``upsert_many`` with the same ids is safe (an upsert of the same row is idempotent); for
  other writes read the row (``get``) to see whether it took effect before repeating it.
* A 2xx answer to a write means the write is durable on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import os
import re
import select
import socket
import struct
import sys
import threading
import time
import urllib.request
import weakref
from collections.abc import Callable, Coroutine, Generator, Mapping
from types import NoneType, TracebackType
from typing import Any, Concatenate, Final, ParamSpec, Protocol, Self, TypeVar
from urllib.parse import urlsplit

import h11
import httpx

from memini import _wire as wire
from memini.errors import (
    AuthError,
    InvalidArgumentError,
    MeminiError,
    StoreClosedError,
    UnavailableError,
)
from memini.store import Store, _key_fields_are_not_updates
from memini.types import Memory

__all__ = ["AsyncRemoteStore", "RemoteStore", "connect"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_JSON: Final = {"content-type": "application/json", wire.VECTOR_FORMAT: "base64"}
_BACKOFF_FIRST: Final = 0.05
_BACKOFF_MAX: Final = 1.0


def _headers(api_key: str | None) -> dict[str, str]:
    if api_key is None:
        return {}
    if (
        not isinstance(api_key, str)
        or not api_key
        or not api_key.isascii()
        or not api_key.isprintable()
    ):
        raise AuthError(
            "api_key must be a non-empty str of printable ASCII (the secret, not its hash)"
        )
    return {"authorization": f"Bearer {api_key}"}


def _base_url(url: str) -> str:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise MeminiError(f"url must be an http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


def _seconds(name: str, value: object, *, zero: bool) -> float:
    """``value`` as seconds: a finite number above 0 (or equal to it when ``zero``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        bound = "0 or more" if zero else "above 0"
        raise InvalidArgumentError(f"{name} must be a number of seconds {bound}, got {value!r}")
    return float(value)


class _Answer(Protocol):
    """What the client reads of an HTTP answer (an `httpx.Response` is one)."""

    @property
    def status_code(self) -> int: ...

    @property
    def reason_phrase(self) -> str: ...

    @property
    def content(self) -> bytes: ...


def _answer(method: wire.Method, response: _Answer) -> Any:
    """The result of a call from the server's answer, or the server's error raised."""
    if response.status_code < 300:
        if method.returns is NoneType:  # e.g. upsert, whose answer is the stored id
            return None
        return method.decode_answer(response.content)
    raise _error(response)


def _error(response: _Answer) -> MeminiError:
    status = response.status_code
    try:
        err = wire.loads(response.content)["error"]
        type_name, message = str(err["type"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        text = response.content[:200].decode("utf-8", "replace")
        type_name, message = "", text or response.reason_phrase
    cls = wire.ERRORS.get(type_name)
    if cls is None:
        cls = AuthError if status in (401, 403) else MeminiError
        if status == 503:
            cls = UnavailableError
        message = f"HTTP {status}: {message}"
    return cls(message)


def _unanswered(method: wire.Method, url: str, exc: Exception) -> UnavailableError:
    what = f"the server at {url} did not answer {method.name}() ({type(exc).__name__}: {exc})"
    if method.read_only:
        return UnavailableError(what)
    return UnavailableError(
        f"{what}; the write may or may not have been applied: read it back (or repeat an "
        "upsert with the same ids, which is safe) before retrying"
    )


def _retryable(method: wire.Method, exc: Exception | None, status: int) -> bool:
    """Whether a failed attempt may be repeated: any read; a write only when its request
    never left (connection refused) or the server refused it unread (503 while draining)."""
    if method.read_only:
        return exc is not None or status == 503
    return isinstance(exc, httpx.ConnectError) or status == 503


class _Reply:
    """An HTTP answer read by `_Connections`."""

    __slots__ = ("content", "reason_phrase", "status_code")

    def __init__(self, status_code: int, reason_phrase: str, content: bytes) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.content = content


_MAX_HEAD: Final = 64 << 10  # bytes of an answer's head (status line and headers)
_READ: Final = 64 << 10  # bytes asked of the connection at once


class _Start:
    """The start of a request: h11's event (which checked its target and headers) and its
    bytes, rendered by h11 once."""

    __slots__ = ("event", "head")

    def __init__(self, event: h11.Request) -> None:
        self.event = event
        self.head: bytes = h11.Connection(h11.CLIENT).send(event) or b""


# The answers `_read_answer` reads itself, every other one h11 reads: HTTP/1.1, a final
# status but 204 / 304, header lines of a token, a colon and a value (RFC 9110 5.5, without
# control characters), one Content-Length, no Transfer-Encoding. A subset of what h11 reads
# alike (tests/test_client.py checks that both readers agree on any bytes). Possessive
# quantifiers: linear time whatever the bytes.
_VALUE: Final = rb"(?:[\x21-\x7e\x80-\xff]++(?:[\t ]++[\x21-\x7e\x80-\xff]++)*+)?"
_NAME: Final = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]++"
_HEAD: Final = re.compile(
    rb"HTTP/1\.1 ([0-9]{3})(?: ([\t\x20-\x7e\x80-\xff]*+))?\r\n(?:%b:[\t ]*+%b[\t ]*+\r\n)*+"
    % (_NAME, _VALUE)
)
_FIELD: Final = re.compile(rb"\n(%b):[\t ]*+(%b)" % (_NAME, _VALUE))
_BLANK: Final = re.compile(rb"\n\r?\n")
"""The end of an answer's head where h11 finds it: its first blank line, CRLF or a bare LF
(h11 reads those: a head found only at CRLF CRLF was waited on until the read timeout)."""


def _framing(head: bytes) -> tuple[int, bytes, int, bool] | None:
    """Status, reason, body length and keep-alive of an answer's head (up to its blank
    line's CRLF), or None when `_read_answer` leaves it to h11."""
    m = _HEAD.fullmatch(head)
    if m is None:
        return None
    status = int(m[1])
    if status < 200 or status in (204, 304):
        return None
    length, keep = -1, True
    for name, value in _FIELD.findall(head, m.end(1)):
        name = name.lower()
        if name == b"content-length":
            if length >= 0 or not value.isdigit() or len(value) > 20:
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            return None
        elif name == b"connection":
            keep = keep and b"close" not in [t.strip().lower() for t in value.split(b",")]
    if length < 0:
        return None
    return status, m[2] or b"", length, keep


def _read_answer(start: _Start, content: bytes) -> Generator[None, bytes, tuple[_Reply, bool]]:
    """Reads the answer to the request ``start`` + ``content`` from the bytes sent in
    (``b""`` = the connection's end); returns it and whether the connection may be kept
    (a whole answer, keep-alive, nothing more sent).

    The common answer (`_framing`) is read here: a k=10 search answer with h11's state
    machine (the request's events included) took 36.9 us of CPU, here 4.1 us (hot loop,
    best of 5; ~100 us less per call in a client's loop together with the faster hit
    decoding of the time, `benches/bench_server.py::test_remote_store_client_cpu`). Any
    other answer, malformed ones included, is replayed read by read into h11, to read or
    refuse.

    Raises:
        httpx.RemoteProtocolError: A malformed answer, or the connection ended early.
    """
    data = yield
    got = [data]
    size = len(data)
    blank = _BLANK.search(data)
    # (a first byte not HTTP's goes to h11 at once: it refuses one below 0x21 unread)
    while blank is None and data and got[0][:1] == b"H" and size <= _MAX_HEAD:
        data = yield
        got.append(data)
        size += len(data)
        blank = _BLANK.search(b"".join(got))
    # the head up to its last line's CRLF, if a CRLF blank line ends it (`_framing` refuses
    # a bare LF within it): any other head is h11's to read
    head_end = -1 if blank is None or len(blank[0]) != 3 else blank.start() - 1
    framing = _framing(b"".join(got)[: head_end + 2]) if head_end >= 0 else None
    if framing is not None:
        status, reason, length, keep = framing
        end = head_end + 4 + length
        while size < end and data:
            data = yield
            got.append(data)
            size += len(data)
        if size >= end:
            whole = b"".join(got) if len(got) > 1 else got[0]
            body = whole[head_end + 4 : end]
            return _Reply(status, reason.decode("latin-1"), body), keep and size == end
    return (yield from _h11_answer(start, content, got))


def _h11_answer(
    start: _Start, content: bytes, received: list[bytes]
) -> Generator[None, bytes, tuple[_Reply, bool]]:
    """`_read_answer` by h11, given the reads so far (``b""`` = the connection's end); h11's
    protocol errors are raised as httpx's, as httpx's own clients raise them."""
    h = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
    h.send(start.event)
    h.send(h11.Data(data=content))
    h.send(h11.EndOfMessage())
    status, reason, parts = 0, b"", []
    received.reverse()
    try:
        while True:
            event = h.next_event()
            if event is h11.NEED_DATA:
                h.receive_data(received.pop() if received else (yield))
            elif type(event) is h11.Data:
                parts.append(event.data)
            elif type(event) is h11.Response:
                status, reason = event.status_code, event.reason
            elif type(event) is h11.EndOfMessage:
                break
            elif type(event) is h11.ConnectionClosed:  # h11 raises before an end: a guard
                raise httpx.RemoteProtocolError("the server closed the connection")
            # else an interim answer (100 Continue; none is asked for): the next one
    except h11.RemoteProtocolError as e:
        raise httpx.RemoteProtocolError(f"malformed or unfinished answer: {e}") from e
    keep = h.our_state is h.their_state is h11.DONE and not h.trailing_data[0]
    return _Reply(status, reason.decode("latin-1"), b"".join(parts)), keep


class _Connection:
    """One keep-alive connection: its socket (and a poll of it, where there is poll)."""

    __slots__ = ("poll", "sock")

    def __init__(self, address: tuple[str, int], timeout: float) -> None:
        try:
            self.sock = socket.create_connection(address, timeout)
        except TimeoutError as e:
            raise httpx.ConnectTimeout(str(e)) from e
        except OSError as e:  # refused, unreachable, unknown host: the request never left
            raise httpx.ConnectError(str(e)) from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _kernel_timeout(self.sock, timeout)
        self.poll: Any = None
        if hasattr(select, "poll"):  # any descriptor number (select's stop at 1024)
            self.poll = select.poll()
            self.poll.register(self.sock, select.POLLIN)

    def stale(self) -> bool:
        """Whether the idle connection was closed by the server (readable = EOF or junk)."""
        try:
            if self.poll is not None:
                return bool(self.poll.poll(0))
            return bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def exchange(self, start: _Start, content: bytes) -> tuple[_Reply, bool]:
        """Send one request, read its answer; the answer and whether to keep the
        connection."""
        try:
            self.sock.sendall(start.head + content)
        except (TimeoutError, BlockingIOError) as e:  # BlockingIOError: `_kernel_timeout`'s
            raise httpx.WriteTimeout(str(e)) from e
        except OSError as e:
            raise httpx.WriteError(str(e)) from e
        answer = _read_answer(start, content)
        recv = self.sock.recv
        try:
            next(answer)
            while True:
                answer.send(recv(_READ))
        except StopIteration as done:
            reply: tuple[_Reply, bool] = done.value
            return reply
        except (TimeoutError, BlockingIOError) as e:
            raise httpx.ReadTimeout(str(e)) from e
        except OSError as e:
            raise httpx.ReadError(str(e)) from e

    def close(self) -> None:
        self.sock.close()


def _kernel_timeout(sock: socket.socket, timeout: float) -> None:
    """On Linux, ``sock`` made blocking with ``timeout`` kept by the kernel (SO_RCVTIMEO,
    SO_SNDTIMEO; a send or receive that times out raises `BlockingIOError`): Python's own
    timeout polls the socket before every send and receive, two system calls more per call
    (~3-7 us of a call's CPU, `benches/bench_server.py::test_remote_store_client_cpu`).
    Elsewhere, or where the kernel refuses two longs as a ``struct timeval``, Python keeps it.
    The kernel times each send: a large body accepted slowly but steadily may take longer."""
    if not sys.platform.startswith("linux"):
        return
    micros = max(1, round(timeout * 1e6))
    tv = struct.pack("@ll", micros // 1_000_000, micros % 1_000_000)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    except OSError:  # a kernel whose timeval is not two longs (32-bit with 64-bit time)
        return
    sock.settimeout(None)


class _Target:
    """The server of `_Connections` and `_AsyncConnections`: its address, and the start of
    a request (h11 checks and renders its headers once per path and body length, not per
    call)."""

    _KEPT: Final = 256  # requests kept (most calls repeat a path and a body length)

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        self.address = (parts.hostname, parts.port or 80)
        host = parts.netloc.rpartition("@")[2]
        self._prefix = parts.path
        self._headers = list({"host": host, **headers}.items())
        self._requests: dict[tuple[str, int], _Start] = {}

    def request(self, path: str, length: int) -> _Start:
        """The start of ``POST path`` with a JSON body of ``length`` bytes.

        Raises:
            httpx.LocalProtocolError: A target or header HTTP does not allow.
        """
        start = self._requests.get((path, length))
        if start is None:
            try:
                start = _Start(
                    h11.Request(
                        method="POST",
                        target=self._prefix + path,
                        headers=[*self._headers, ("content-length", str(length))],
                    )
                )
            except h11.LocalProtocolError as e:
                raise httpx.LocalProtocolError(str(e)) from e
            if len(self._requests) >= self._KEPT:
                self._requests.clear()
            self._requests[path, length] = start
        return start


class _Connections:
    """`RemoteStore`'s HTTP/1.1 client for a plain ``http://`` server (see the module docs):
    keep-alive connections (at most ``limit`` at once, ``idle`` kept between calls), each
    request sent in one write (no Nagle delay), its answer read by `_read_answer`. Failures are
    httpx's exceptions
    (`httpx.ConnectError` when the request never left), as `_Httpx`'s are."""

    def __init__(
        self, url: str, timeout: float, headers: Mapping[str, str], limit: int, idle: int
    ) -> None:
        self._target = _Target(url, headers)
        self._timeout = timeout
        self._idle: list[_Connection] = []
        self._max_idle = idle
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self._closed = False

    def post(self, path: str, content: bytes) -> _Reply:
        """``POST path`` with a JSON body; the answer."""
        start = self._target.request(path, len(content))
        if not self._slots.acquire(timeout=self._timeout):
            raise httpx.PoolTimeout(f"no connection free within {self._timeout} s")
        try:
            conn = self._take()
            try:
                reply, keep = conn.exchange(start, content)
            except BaseException:
                conn.close()
                raise
            self._give(conn, keep)
            return reply
        finally:
            self._slots.release()

    def _take(self) -> _Connection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return _Connection(self._target.address, self._timeout)
            if not conn.stale():
                return conn
            conn.close()

    def _give(self, conn: _Connection, keep: bool) -> None:
        with self._lock:
            if keep and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections (and each busy one as its call ends)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _httpx_options(
    url: str, timeout: float, headers: Mapping[str, str], limit: int, idle: int
) -> dict[str, Any]:
    """The options of `_Httpx`'s and `_AsyncHttpx`'s httpx clients."""
    return {
        "base_url": url,
        "timeout": timeout,
        "headers": headers,
        "limits": httpx.Limits(max_connections=limit, max_keepalive_connections=idle),
    }


class _Httpx:
    """`RemoteStore`'s HTTP client through httpx: for ``https://`` and proxies."""

    def __init__(
        self, url: str, timeout: float, headers: Mapping[str, str], limit: int, idle: int
    ) -> None:
        self._client = httpx.Client(**_httpx_options(url, timeout, headers, limit, idle))

    def post(self, path: str, content: bytes) -> httpx.Response:
        return self._client.post(path, content=content)

    def close(self) -> None:
        self._client.close()


class _AsyncConnection:
    """`_Connection` for asyncio: one keep-alive connection's streams, on one event loop."""

    __slots__ = ("loop", "reader", "writer")

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, loop: object
    ) -> None:
        self.reader, self.writer, self.loop = reader, writer, loop

    @classmethod
    async def open(cls, address: tuple[str, int], timeout: float) -> _AsyncConnection:
        try:
            async with asyncio.timeout(timeout):
                # asyncio sets TCP_NODELAY on its TCP sockets
                reader, writer = await asyncio.open_connection(*address, limit=_READ)
        except TimeoutError as e:
            raise httpx.ConnectTimeout(str(e)) from e
        except OSError as e:
            raise httpx.ConnectError(str(e)) from e
        return cls(reader, writer, asyncio.get_running_loop())

    def stale(self) -> bool:
        """Whether the idle connection was closed by the server, or belongs to another
        event loop (one ``asyncio.run`` after another)."""
        return (
            self.loop is not asyncio.get_running_loop()
            or self.reader.at_eof()
            or self.writer.is_closing()
        )

    async def exchange(self, start: _Start, content: bytes, timeout: float) -> tuple[_Reply, bool]:
        """Send one request, read its answer (within ``timeout`` s); the answer and whether
        to keep the connection."""
        data = start.head + content
        answer = _read_answer(start, content)
        read = self.reader.read
        try:
            async with asyncio.timeout(timeout):
                self.writer.write(data)
                await self.writer.drain()
                next(answer)
                while True:
                    answer.send(await read(_READ))
        except StopIteration as done:
            reply: tuple[_Reply, bool] = done.value
            return reply
        except TimeoutError as e:
            raise httpx.ReadTimeout(f"no answer within {timeout} s") from e
        except OSError as e:
            raise httpx.ReadError(str(e)) from e

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # its event loop is closed: nothing to do
            self.writer.close()


class _AsyncConnections:
    """`_Connections` for `AsyncRemoteStore`: keep-alive asyncio streams, at most ``limit``
    at once, ``idle`` kept between calls; httpx's exceptions, as `_AsyncHttpx`'s."""

    def __init__(
        self, url: str, timeout: float, headers: Mapping[str, str], limit: int, idle: int
    ) -> None:
        self._target = _Target(url, headers)
        self._timeout = timeout
        self._idle: list[_AsyncConnection] = []
        self._max_idle = idle
        self._slots = asyncio.Semaphore(limit)
        self._closed = False

    async def post(self, path: str, content: bytes) -> _Reply:
        """``POST path`` with a JSON body; the answer."""
        start = self._target.request(path, len(content))
        if self._slots.locked():  # every connection busy: wait for one
            try:
                await asyncio.wait_for(self._slots.acquire(), self._timeout)
            except TimeoutError as e:
                raise httpx.PoolTimeout(f"no connection free within {self._timeout} s") from e
        else:
            await self._slots.acquire()
        try:
            conn = None
            while self._idle and conn is None:
                conn = self._idle.pop()
                if conn.stale():
                    conn.close()
                    conn = None
            if conn is None:
                conn = await _AsyncConnection.open(self._target.address, self._timeout)
            try:
                reply, keep = await conn.exchange(start, content, self._timeout)
            except BaseException:  # cancelled mid-answer included: the stream is unusable
                conn.close()
                raise
            if keep and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
            else:
                conn.close()
            return reply
        finally:
            self._slots.release()

    async def aclose(self) -> None:
        """Close the idle connections (and each busy one as its call ends)."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _AsyncHttpx:
    """`AsyncRemoteStore`'s HTTP client through httpx: for ``https://`` and proxies."""

    def __init__(
        self, url: str, timeout: float, headers: Mapping[str, str], limit: int, idle: int
    ) -> None:
        self._client = httpx.AsyncClient(**_httpx_options(url, timeout, headers, limit, idle))

    async def post(self, path: str, content: bytes) -> httpx.Response:
        return await self._client.post(path, content=content)

    async def aclose(self) -> None:
        await self._client.aclose()


def _lean(url: str) -> bool:
    """Whether `_Connections` can reach ``url``: plain http, no proxy applies to it."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        return False
    proxies = urllib.request.getproxies_environment()
    if not ({"http", "all"} & proxies.keys()):
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))  # NO_PROXY


# Clients opened in this process, closed in a forked child (their connections belong to the
# parent), as a `Store` is.
_clients: weakref.WeakSet[_Base] = weakref.WeakSet()
_clients_lock = threading.Lock()


def _after_fork_in_child() -> None:
    for c in list(_clients):
        c._forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Base:
    """What both clients share: the URL, credentials, retry window and closed state."""

    _closed: bool

    def __init__(self, url: str, api_key: str | None, timeout: float, retry_for: float) -> None:
        self._url = _base_url(url)
        self._headers = {**_JSON, **_headers(api_key)}
        self._timeout = _seconds("timeout", timeout, zero=False)
        self._retry_for = _seconds("retry_for", retry_for, zero=True)
        self._closed = False
        self._forked = False
        with _clients_lock:
            _clients.add(self)

    def _check(self) -> None:
        if self._closed or self._forked:
            raise StoreClosedError(
                "the remote store client is closed"
                if self._closed
                else "the remote store client was opened before fork() and is closed in "
                "this child process; connect again here"
            )

    def _prepare(self, method: wire.Method, bound: Mapping[str, Any]) -> bytes:
        self._check()
        return wire.dumps(method.encode_args(bound))

    def _pause(
        self,
        method: wire.Method,
        failed: _Answer | Exception,
        deadline: float,
        attempt: int,
    ) -> float:
        """The pause before retrying a call whose `attempt`-th try (0-based) got a 503 or no
        answer (`failed`); raises the call's error when it is not to be retried (nor is any
        call once the client is closing)."""
        exc = failed if isinstance(failed, Exception) else None
        status = 0 if isinstance(failed, Exception) else failed.status_code
        pause: float = min(_BACKOFF_FIRST * 2.0 ** min(attempt, 16), _BACKOFF_MAX)
        if (
            self._closed
            or not _retryable(method, exc, status)
            or time.monotonic() + pause > deadline
        ):
            if isinstance(failed, Exception):
                raise _unanswered(method, self._url, failed) from failed
            raise _error(failed)
        return pause

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<memini.{type(self).__name__} {self._url} {state}>"


def _remote(fn: Callable[Concatenate[Store, _P], _R]) -> Callable[Concatenate[RemoteStore, _P], _R]:
    """The `RemoteStore` method of a `Store` method: same signature, called over HTTP."""
    method = wire.METHODS[fn.__name__]
    bind = method.bind

    @functools.wraps(fn)
    def call(self: RemoteStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        result: _R = self._call(method, bind(args, kwargs))
        return result

    return call


def _aremote(
    fn: Callable[Concatenate[Store, _P], _R],
) -> Callable[Concatenate[AsyncRemoteStore, _P], Coroutine[Any, Any, _R]]:
    """The `AsyncRemoteStore` coroutine method of a `Store` method."""
    method = wire.METHODS[fn.__name__]
    bind = method.bind

    @functools.wraps(fn)
    async def call(self: AsyncRemoteStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        result: _R = await self._call(method, bind(args, kwargs))
        return result

    return call


class RemoteStore(_Base):
    """A `Store` served by ``memini serve``, reached over HTTP. Use `memini.connect`.

    Has every method of `Store` but ``open`` (API.md sections 4-6), with the same
    signatures, results and exceptions; ``close()`` closes this client (never the served
    store) and is idempotent; usable as a context manager; safe to share between threads.
    See the module docs for `UnavailableError` and what to do with an unanswered write.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry_for: float = 10.0,
    ) -> None:
        """Internal: use `memini.connect`."""
        super().__init__(url, api_key, timeout, retry_for)
        client = _Connections if _lean(self._url) else _Httpx
        self._http: _Connections | _Httpx = client(self._url, timeout, self._headers, 64, 32)
        # calls in flight, which `close` waits for before closing their connections
        self._calls = 0
        self._idle = threading.Condition()

    def _call(self, method: wire.Method, bound: Mapping[str, Any]) -> Any:
        body = self._prepare(method, bound)
        path = method.path
        with self._idle:
            self._check()
            self._calls += 1
        try:
            deadline = time.monotonic() + self._retry_for
            for attempt in itertools.count():
                failed: _Answer | Exception
                try:
                    failed = response = self._http.post(path, body)
                except httpx.TransportError as e:
                    failed = e
                else:
                    if response.status_code != 503:
                        return _answer(method, response)
                time.sleep(self._pause(method, failed, deadline, attempt))
            raise AssertionError("unreachable")
        finally:
            with self._idle:
                self._calls -= 1
                if self._closed:  # `close` waits for the last call
                    self._idle.notify_all()

    def close(self) -> None:
        """Close this client's connections (the served store stays open) once the calls in
        flight have their answers; calls made meanwhile raise `StoreClosedError`, and one
        between retries stops with its last error. Idempotent.

        In a process forked from the one that connected this is a no-op.
        """
        with self._idle:
            if self._forked:
                return
            self._closed = True
            self._idle.wait_for(lambda: self._calls == 0)
            self._http.close()

    def __enter__(self) -> Self:
        self._check()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    stats = _remote(Store.stats)
    compact = _remote(Store.compact)
    backup = _remote(Store.backup)
    acknowledge_meta_db_loss = _remote(Store.acknowledge_meta_db_loss)
    ping = _remote(Store.ping)
    upsert = _remote(Store.upsert)
    upsert_many = _remote(Store.upsert_many)

    @_key_fields_are_not_updates
    def update(self, /, namespace: str, id: str, **fields: Any) -> Memory:
        """`Store.update` over HTTP: change only the named fields; return the stored row."""
        result: Memory = self._call(
            wire.METHODS["update"], {"namespace": namespace, "id": id, "fields": fields}
        )
        return result

    delete = _remote(Store.delete)
    set_superseded = _remote(Store.set_superseded)
    restore = _remote(Store.restore)
    reinforce = _remote(Store.reinforce)
    delete_if_expired_before = _remote(Store.delete_if_expired_before)
    sweep_expired = _remote(Store.sweep_expired)
    delete_namespace = _remote(Store.delete_namespace)
    reassign = _remote(Store.reassign)
    retier = _remote(Store.retier)
    set_confidence = _remote(Store.set_confidence)
    mark_contradicted = _remote(Store.mark_contradicted)
    set_embed_model = _remote(Store.set_embed_model)
    get = _remote(Store.get)
    get_embedding = _remote(Store.get_embedding)
    ids_by_prefix = _remote(Store.ids_by_prefix)
    predecessor_ids = _remote(Store.predecessor_ids)
    get_by_fingerprint = _remote(Store.get_by_fingerprint)
    list_expired = _remote(Store.list_expired)
    list = _remote(Store.list)
    count = _remote(Store.count)
    list_namespaces = _remote(Store.list_namespaces)
    namespace_activity = _remote(Store.namespace_activity)
    embed_model = _remote(Store.embed_model)
    refresh_active_counts = _remote(Store.refresh_active_counts)
    vector_search = _remote(Store.vector_search)
    vector_search_many = _remote(Store.vector_search_many)
    keyword_search = _remote(Store.keyword_search)
    recall = _remote(Store.recall)
    put_link = _remote(Store.put_link)
    delete_link = _remote(Store.delete_link)
    list_links = _remote(Store.list_links)
    list_all_links = _remote(Store.list_all_links)
    rename_link_endpoints = _remote(Store.rename_link_endpoints)
    put_api_key = _remote(Store.put_api_key)
    authenticate = _remote(Store.authenticate)
    delete_api_key = _remote(Store.delete_api_key)
    list_api_keys = _remote(Store.list_api_keys)
    get_api_key_by_hash = _remote(Store.get_api_key_by_hash)
    rename_api_key_namespaces = _remote(Store.rename_api_key_namespaces)
    append_events = _remote(Store.append_events)
    list_events = _remote(Store.list_events)
    prune_events = _remote(Store.prune_events)


class AsyncRemoteStore(_Base):
    """`RemoteStore` for asyncio: every method is a coroutine. Use `memini.aio.connect`.

    ``await close()`` (or ``async with``) closes this client; safe to share between tasks.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry_for: float = 10.0,
    ) -> None:
        """Internal: use `memini.aio.connect`."""
        super().__init__(url, api_key, timeout, retry_for)
        client = _AsyncConnections if _lean(self._url) else _AsyncHttpx
        self._http: _AsyncConnections | _AsyncHttpx = client(
            self._url, timeout, self._headers, 64, 32
        )

    async def _call(self, method: wire.Method, bound: Mapping[str, Any]) -> Any:
        body = self._prepare(method, bound)
        deadline = time.monotonic() + self._retry_for
        for attempt in itertools.count():
            failed: _Answer | Exception
            try:
                failed = response = await self._http.post(method.path, body)
            except httpx.TransportError as e:
                self._check()
                failed = e
            except RuntimeError as e:
                self._check()
                raise UnavailableError(str(e)) from e
            else:
                if response.status_code != 503:
                    return _answer(method, response)
            await asyncio.sleep(self._pause(method, failed, deadline, attempt))
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close this client's connections (the served store stays open). Idempotent."""
        if not self._closed:
            self._closed = True
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        self._check()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    stats = _aremote(Store.stats)
    compact = _aremote(Store.compact)
    backup = _aremote(Store.backup)
    acknowledge_meta_db_loss = _aremote(Store.acknowledge_meta_db_loss)
    ping = _aremote(Store.ping)
    upsert = _aremote(Store.upsert)
    upsert_many = _aremote(Store.upsert_many)

    @_key_fields_are_not_updates
    async def update(self, /, namespace: str, id: str, **fields: Any) -> Memory:
        """`Store.update` over HTTP: change only the named fields; return the stored row."""
        result: Memory = await self._call(
            wire.METHODS["update"], {"namespace": namespace, "id": id, "fields": fields}
        )
        return result

    delete = _aremote(Store.delete)
    set_superseded = _aremote(Store.set_superseded)
    restore = _aremote(Store.restore)
    reinforce = _aremote(Store.reinforce)
    delete_if_expired_before = _aremote(Store.delete_if_expired_before)
    sweep_expired = _aremote(Store.sweep_expired)
    delete_namespace = _aremote(Store.delete_namespace)
    reassign = _aremote(Store.reassign)
    retier = _aremote(Store.retier)
    set_confidence = _aremote(Store.set_confidence)
    mark_contradicted = _aremote(Store.mark_contradicted)
    set_embed_model = _aremote(Store.set_embed_model)
    get = _aremote(Store.get)
    get_embedding = _aremote(Store.get_embedding)
    ids_by_prefix = _aremote(Store.ids_by_prefix)
    predecessor_ids = _aremote(Store.predecessor_ids)
    get_by_fingerprint = _aremote(Store.get_by_fingerprint)
    list_expired = _aremote(Store.list_expired)
    list = _aremote(Store.list)
    count = _aremote(Store.count)
    list_namespaces = _aremote(Store.list_namespaces)
    namespace_activity = _aremote(Store.namespace_activity)
    embed_model = _aremote(Store.embed_model)
    refresh_active_counts = _aremote(Store.refresh_active_counts)
    vector_search = _aremote(Store.vector_search)
    vector_search_many = _aremote(Store.vector_search_many)
    keyword_search = _aremote(Store.keyword_search)
    recall = _aremote(Store.recall)
    put_link = _aremote(Store.put_link)
    delete_link = _aremote(Store.delete_link)
    list_links = _aremote(Store.list_links)
    list_all_links = _aremote(Store.list_all_links)
    rename_link_endpoints = _aremote(Store.rename_link_endpoints)
    put_api_key = _aremote(Store.put_api_key)
    authenticate = _aremote(Store.authenticate)
    delete_api_key = _aremote(Store.delete_api_key)
    list_api_keys = _aremote(Store.list_api_keys)
    get_api_key_by_hash = _aremote(Store.get_api_key_by_hash)
    rename_api_key_namespaces = _aremote(Store.rename_api_key_namespaces)
    append_events = _aremote(Store.append_events)
    list_events = _aremote(Store.list_events)
    prune_events = _aremote(Store.prune_events)


def connect(
    url: str, *, api_key: str | None = None, timeout: float = 30.0, retry_for: float = 10.0
) -> RemoteStore:
    """Connect to a store served by ``memini serve`` (API.md section 8).

    Nothing is sent until the first call (``ping()`` checks the server and the key).

    Args:
        url: The server's base URL, e.g. ``"http://127.0.0.1:8420"``.
        api_key: The admin secret or an API key's secret, sent as ``Authorization: Bearer``;
            None for a server open on loopback.
        timeout: Seconds to wait for connecting and for each answer.
        retry_for: Seconds during which calls that change nothing are retried while the
            server cannot be reached (a restart); 0 = never retry.

    Returns:
        A `RemoteStore`; close it (or use ``with``) to release its connections.
    """
    return RemoteStore(url, api_key=api_key, timeout=timeout, retry_for=retry_for)


def aconnect(
    url: str, *, api_key: str | None = None, timeout: float = 30.0, retry_for: float = 10.0
) -> AsyncRemoteStore:
    """`connect` for asyncio (``memini.aio.connect``): an `AsyncRemoteStore`."""
    return AsyncRemoteStore(url, api_key=api_key, timeout=timeout, retry_for=retry_for)
