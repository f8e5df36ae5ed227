"""`RemoteStore`'s own HTTP/1.1 client (`memini.client._Connections`) and its per-method
work done once (`memini._wire.Method.bind`): what HTTP allows a server to answer is read
right, connections are kept and dropped as they should be, a call binds its arguments as
``inspect.Signature.bind`` does. The servers here are real: stdlib ``http.server`` handlers
answering in the shapes under test, and `memini serve`'s own app."""

from __future__ import annotations

import asyncio
import http.server
import inspect
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import memini
from memini import AuthError, MeminiError, NotFoundError, UnavailableError, _core
from memini import _wire as wire
from memini.client import (
    _AsyncConnections,
    _AsyncHttpx,
    _Connections,
    _h11_answer,
    _Httpx,
    _kernel_timeout,
    _lean,
    _read_answer,
    _Target,
)
from memini.server import Server, ServerOptions

# Answers HTTP does not allow, or cut short
_BROKEN = {
    "hang-up": b"",
    "junk": b"HTTP/1.1 seven OK\r\n\r\n",
    "short": b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n7",
    "short-chunk": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n7",
}


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers ``POST /v1/count`` with 7 in the shape named by the server's ``mode``; the
    request's path, headers and body are recorded."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        server: Any = self.server
        body = self.rfile.read(int(self.headers["content-length"]))
        headers = {k.lower(): v for k, v in self.headers.items()}
        server.seen.append((self.path, headers, body, self.client_address))
        mode = server.mode
        answer = b"7"
        if mode in _BROKEN:  # written as is, then the connection closed
            self.wfile.write(_BROKEN[mode])
            self.close_connection = True
            return
        if mode == "slow":  # answers after the client gave up
            threading.Event().wait(1.0)
        if mode == "error":
            answer = json.dumps({"error": {"type": "NotFoundError", "message": "gone"}}).encode()
            self.send_response(404)
        elif mode == "plain-error":
            answer = b"busy"
            self.send_response(502, "Bad Gateway")
        else:
            self.send_response(100 if mode == "continue" else 200)
            if mode == "continue":
                self.end_headers()
                self.send_response(200)
        self.send_header("content-type", "application/json")
        if mode == "chunked":
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for part in (answer[:1], answer[1:]):
                if part:
                    self.wfile.write(b"%x;ext=1\r\n%b\r\n" % (len(part), part))
            self.wfile.write(b"0\r\ntrailer: x\r\n\r\n")
            return
        if mode in ("close", "to-eof"):
            self.send_header("connection", "close")
            self.close_connection = True
        if mode != "to-eof":
            self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[Any]:
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.mode = "length"
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: Any, path: str = "") -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


@pytest.mark.parametrize("mode", ["length", "chunked", "close", "to-eof", "continue"])
def test_every_answer_shape_http_allows_is_read(fake: Any, mode: str) -> None:
    fake.mode = mode
    with memini.connect(_url(fake, "/prefix/"), api_key="k", retry_for=0) as s:
        assert s.count("n") == 7
        assert s.count("n") == 7  # the connection kept, or a new one after a close
    path, headers, body, _ = fake.seen[0]
    assert path == "/prefix/v1/count"
    assert json.loads(body) == {"namespace": "n"}
    assert headers["authorization"] == "Bearer k"
    assert headers[wire.VECTOR_FORMAT] == "base64"
    assert headers["host"] == f"127.0.0.1:{fake.server_address[1]}"
    clients = {seen[3] for seen in fake.seen}
    assert len(clients) == (1 if mode in ("length", "chunked", "continue") else 2)


@pytest.mark.parametrize("mode", ["length", "chunked", "close", "to-eof", "continue"])
def test_the_async_client_reads_every_answer_shape(fake: Any, mode: str) -> None:
    fake.mode = mode

    async def main() -> None:
        async with memini.aio.connect(_url(fake, "/prefix"), api_key="k", retry_for=0) as s:
            assert isinstance(s._http, _AsyncConnections)
            assert await s.count("n") == 7
            assert await s.count("n") == 7

    asyncio.run(main())
    path, headers, _, _ = fake.seen[0]
    assert (path, headers[wire.VECTOR_FORMAT]) == ("/prefix/v1/count", "base64")
    assert len({seen[3] for seen in fake.seen}) == (
        1 if mode != "close" and mode != "to-eof" else 2
    )


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("mode", sorted(_BROKEN))
def test_a_broken_answer_is_a_protocol_error_and_the_server_unavailable(
    fake: Any, mode: str, lean: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer HTTP does not allow, or one cut short, is httpx's ``RemoteProtocolError``
    (h11's, in both clients, as through httpx): the server is unavailable, and a write may
    or may not have been applied."""
    monkeypatch.setattr("memini.client._lean", lambda url: lean)
    fake.mode = mode
    unanswered = r"did not answer count\(\) \(RemoteProtocolError: "
    with memini.connect(_url(fake), retry_for=0) as s:
        with pytest.raises(UnavailableError, match=unanswered):
            s.count("n")
        with pytest.raises(UnavailableError, match="may or may not have been applied"):
            s.delete("n", "x")
        fake.mode = "length"
        assert s.count("n") == 7  # on a new connection

    async def main() -> None:
        fake.mode = mode
        async with memini.aio.connect(_url(fake), retry_for=0) as a:
            with pytest.raises(UnavailableError, match=unanswered):
                await a.count("n")
            fake.mode = "length"
            assert await a.count("n") == 7

    asyncio.run(main())


def test_an_answer_later_than_the_timeout_is_a_read_timeout(fake: Any) -> None:
    """The timeout the kernel keeps on a kept connection (`_kernel_timeout`) ends a call
    whose answer is late, as a read timeout (the server unavailable), on time; the next
    call is answered on a new connection."""
    with memini.connect(_url(fake), timeout=0.2, retry_for=0) as s:
        assert s.count("n") == 7
        fake.mode = "slow"
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match="ReadTimeout"):
            s.count("n")
        assert time.monotonic() - t0 < 0.9
        fake.mode = "length"
        assert s.count("n") == 7


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": None}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"retry_for": -0.5}, "retry_for"),
        ({"retry_for": float("nan")}, "retry_for"),
    ],
)
def test_a_timeout_that_is_no_number_of_seconds_is_refused_naming_it(
    kwargs: dict[str, Any], named: str
) -> None:
    """Refused when the client is made, not at its first connection (a 0 would have become a
    1 us kernel timeout, None a TypeError)."""
    for connect in (memini.connect, memini.aio.connect):
        with pytest.raises(memini.InvalidArgumentError, match=f"^{named} must be a number"):
            connect("http://127.0.0.1:9", **kwargs)


def test_a_kernel_refusing_the_timeval_leaves_the_timeout_to_python() -> None:
    """`_kernel_timeout` on a kernel whose ``struct timeval`` is not two longs (32-bit with
    64-bit time): setsockopt fails, and Python's own timeout stays on the socket."""

    class Refusing(socket.socket):
        def setsockopt(self, *args: Any) -> None:
            raise OSError(22, "Invalid argument")

    with Refusing() as sock:
        sock.settimeout(0.25)
        _kernel_timeout(sock, 0.25)
        assert sock.gettimeout() == 0.25


def test_an_async_call_cancelled_mid_answer_closes_its_connection(fake: Any) -> None:
    """A connection whose call was cancelled before its answer came is closed, never reused
    with half an answer in it."""

    async def main() -> None:
        async with memini.aio.connect(_url(fake), retry_for=0) as s:
            assert await s.count("n") == 7
            fake.mode = "slow"
            task = asyncio.ensure_future(s.count("n"))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            fake.mode = "length"
            assert await s.count("n") == 7

    asyncio.run(main())
    assert len({seen[3] for seen in fake.seen}) == 2


def test_the_async_client_says_when_a_server_is_unreachable() -> None:
    async def main() -> None:
        async with memini.aio.connect("http://127.0.0.1:9", retry_for=0) as s:
            with pytest.raises(UnavailableError, match=r"did not answer ping\(\) \(ConnectError"):
                await s.ping()

    asyncio.run(main())


def test_errors_are_read_from_any_answer(fake: Any) -> None:
    fake.mode = "error"
    with memini.connect(_url(fake), retry_for=0) as s:
        with pytest.raises(NotFoundError, match="gone"):
            s.count("n")
        fake.mode = "plain-error"
        with pytest.raises(MeminiError, match="HTTP 502: busy"):
            s.count("n")


def test_a_connection_the_server_closed_while_idle_is_not_reused(tmp_path: Path) -> None:
    opts = ServerOptions(port=0, mcp=False)
    server = Server.open(tmp_path / "store", dims=4, options=opts)
    server.start()
    try:
        with memini.connect(server.url, retry_for=0) as s:
            s.ping()
            conns: Any = s._http
            (idle,) = conns._idle
            idle.sock.shutdown(0)  # as when the server closes it: readable, at EOF
            assert idle.stale()
            s.ping()  # a write would have failed on that connection; it took a new one
            assert conns._idle and conns._idle[0] is not idle
    finally:
        server.stop()


def test_an_unreachable_server_is_unavailable_and_a_write_says_it_never_left() -> None:
    with memini.connect("http://127.0.0.1:9", retry_for=0) as s:
        with pytest.raises(UnavailableError, match=r"did not answer ping\(\) \(ConnectError"):
            s.ping()
        with pytest.raises(UnavailableError, match="may or may not have been applied"):
            s.delete("n", "x")


def test_https_and_proxies_go_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    assert _lean("http://127.0.0.1:8420")
    assert not _lean("https://example.com")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not _lean("http://memory.internal:8420")
    monkeypatch.setenv("NO_PROXY", "memory.internal")
    assert _lean("http://memory.internal:8420")
    with memini.connect("http://other.internal:8420") as s:
        assert isinstance(s._http, _Httpx)
    with memini.connect("http://memory.internal:8420") as s:
        assert isinstance(s._http, _Connections)
    assert isinstance(memini.aio.connect("http://other.internal:8420")._http, _AsyncHttpx)


@pytest.mark.parametrize("key", ["a\rb", "a\nb", "clé", "a\x00b"])
def test_an_api_key_that_cannot_be_a_header_is_refused(key: str) -> None:
    with pytest.raises(AuthError, match="printable ASCII"):
        memini.connect("http://127.0.0.1:9", api_key=key)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        pytest.param(("n", [1.0]), {}, id="positional"),
        pytest.param(("n",), {"vector": [1.0], "k": 3}, id="mixed"),
        pytest.param((), {"namespace": "n", "vector": [1.0]}, id="keywords"),
        pytest.param(("n", [1.0], None, 3), {}, id="all-positional"),
        pytest.param(("n",), {}, id="missing"),
        pytest.param(("n", [1.0]), {"namespace": "m"}, id="twice"),
        pytest.param(("n", [1.0]), {"kk": 3}, id="unknown"),
        pytest.param(("n", [1.0], None, 3, 4), {}, id="too-many"),
    ],
)
def test_bind_is_signature_bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    method = wire.METHODS["vector_search"]
    try:
        want: Any = dict(method.signature.bind(*args, **kwargs).arguments)
    except TypeError as e:
        want = str(e)
    try:
        got: Any = method.bind(args, kwargs)
    except TypeError as e:
        got = str(e)
    assert got == want


def test_every_method_binds_as_its_signature() -> None:
    for method in wire.METHODS.values():
        params = method.signature.parameters.values()
        args = tuple(i for i, p in enumerate(params) if p.kind is p.POSITIONAL_OR_KEYWORD)
        kwargs = {p.name: 0 for p in params if p.kind is p.KEYWORD_ONLY}
        want = dict(method.signature.bind(*args, **kwargs).arguments)
        assert method.bind(args, kwargs) == want, method.name


def test_decoding_keeps_every_value(tmp_path: Path) -> None:
    """Served answers (a memory, hits: read by the core) give what a local store gives."""
    opts = ServerOptions(port=0, mcp=False)
    server = Server.open(tmp_path / "store", dims=4, options=opts)
    server.start()
    try:
        local = server.service.store
        local.upsert(
            memini.Memory(
                id="a",
                namespace="n",
                content="x",
                tags=["t", "u"],
                metadata={"k": [1, {"z": None}]},
                linked_memory_ids=["b"],
                confidence=0.5,
                embedding=np.ones(4, np.float32),
            )
        )
        local.reinforce("n", ["a"], datetime.now(UTC))
        with memini.connect(server.url, retry_for=0) as s:
            remote = s.get("n", "a")
            assert remote == local.get("n", "a")
            assert remote.access_count == 1 and type(remote.access_count) is int
            assert inspect.isclass(type(remote.tier)) and remote.tier is memini.Tier.SEMANTIC
            assert s.vector_search("n", np.ones(4, np.float32)) == local.vector_search(
                "n", np.ones(4, np.float32)
            )
    finally:
        server.stop()


def test_the_httpx_path_answers_as_the_lean_one(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What https and proxied URLs use (httpx) reads answers and errors the same way."""
    monkeypatch.setattr("memini.client._lean", lambda url: False)
    with memini.connect(_url(fake), api_key="k", retry_for=0) as s:
        assert isinstance(s._http, _Httpx)
        assert s.count("n") == 7
        fake.mode = "error"
        with pytest.raises(NotFoundError, match="gone"):
            s.count("n")

    async def main() -> None:
        async with memini.aio.connect(_url(fake), retry_for=0) as a:
            assert isinstance(a._http, _AsyncHttpx)
            fake.mode = "chunked"
            assert await a.count("n") == 7

    asyncio.run(main())
    assert fake.seen[0][1][wire.VECTOR_FORMAT] == "base64"


# The parts answers are made of, HTTP's and not: `_read_answer` must read every answer as h11
# does (its own reading of the common ones included), and refuse what h11 refuses.
_VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"http/1.1", b"HTTP/11"]
_STATUSES = [b"200", b"201", b"100", b"101", b"204", b"304", b"404", b"503", b"20", b"2000"]
_REASONS = [b"", b" OK", b" Not Found", b" \xe9t\xe9", b" a\x00b", b" a\x7fb", b" \t"]
_NAMES = [b"content-length", b"x-a", b"Content-Length", b"transfer-encoding", b"connection",
          b"x-a", b"x a", b"", b"x\xff", b"content-length ", b" x-a"]  # fmt: skip
_VALUES = [b"5", b"0", b"1", b"007", b"5, 5", b"5, 6", b"-1", b"1" * 21, b"chunked",
           b"Chunked", b"gzip", b"close", b"keep-alive, Close", b"upgrade", b"", b"  x  ",
           b"a\tb", b"a\x01b", b"a\rb", b"\xe9"]  # fmt: skip
_ENDS = [b"\r\n", b"\n"]


def _part(parts: list[bytes]) -> st.SearchStrategy[bytes]:
    """One of ``parts``, mostly the first (HTTP's)."""
    return st.sampled_from([parts[0]] * len(parts) * 2 + parts)


@st.composite
def _answers(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Bytes a server may send, made of HTTP's parts and broken ones, and where the reads
    split them."""
    if draw(st.integers(0, 4)) == 0:
        data = draw(st.binary(max_size=80))
    else:
        end = draw(_part(_ENDS))
        head = [draw(_part(_VERSIONS)) + b" " + draw(_part(_STATUSES)) + draw(_part(_REASONS))]
        for _ in range(draw(st.integers(0, 4))):
            name, value = draw(_part(_NAMES)), draw(_part(_VALUES))
            head.append(name + b":" + draw(st.sampled_from([b"", b" ", b"\t "])) + value)
            if draw(st.integers(0, 9)) == 0:  # an obsolete folded line
                head.append(b" folded")
        body = draw(st.one_of(st.binary(min_size=5, max_size=5), st.binary(max_size=12)))
        if draw(st.integers(0, 3)) == 0:  # a chunked body
            size = draw(st.sampled_from([b"%x" % len(body), b"zz", b"%x;ext=1" % len(body)]))
            body = size + b"\r\n" + body + b"\r\n0\r\n" + draw(st.sampled_from([b"", b"t: 1\r\n"]))
            body += b"\r\n"
        data = end.join(head) + end + end + body + draw(_part([b"", b"X", b"HTTP/1.1"]))
        if draw(st.integers(0, 3)) == 0:  # cut short
            data = data[: draw(st.integers(0, len(data)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    return data, cuts


def _read(reader: Any, data: bytes, cuts: list[int], *, end: bool = True) -> Any:
    """What a reader makes of ``data`` read in the pieces ``cuts`` makes, then the
    connection's end (unless not ``end``: then "waits" if it wants more): the answer and
    whether to keep the connection, or the error."""
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    pieces = [p for p in pieces if p] + [b""] * end
    try:
        next(reader)
        for piece in pieces:
            reader.send(piece)
    except StopIteration as done:
        reply, keep = done.value
        return reply.status_code, reply.reason_phrase, reply.content, keep
    except httpx.RemoteProtocolError as e:
        return "refused", str(e)
    if not end:
        return "waits"
    raise AssertionError("the reader wants more after the connection's end")


_START = _Target("http://127.0.0.1:1", {}).request("/v1/count", 2)


@given(_answers())
def test_the_answer_reader_reads_any_bytes_as_h11(answer: tuple[bytes, list[int]]) -> None:
    """Same answer, keep-alive or refusal as h11, with the connection ended after the
    bytes or kept open (the answer read as soon as h11 reads it, never waited for)."""
    data, cuts = answer
    for end in (True, False):
        want = _read(_h11_answer(_START, b"{}", []), data, cuts, end=end)
        assert _read(_read_answer(_START, b"{}"), data, cuts, end=end) == want


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\n{}",
    ],
)
def test_a_head_of_bare_line_feeds_is_read_on_a_kept_connection(data: bytes) -> None:
    """A head whose blank line is not CRLF CRLF (h11 reads bare LFs) is read as soon as it
    has come, not waited on until the read timeout."""
    assert _read(_read_answer(_START, b"{}"), data, [], end=False) == (200, "OK", b"{}", True)


@pytest.mark.parametrize(
    ("data", "want"),
    [
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", (200, b"{}", True),
                     id="length"),
        pytest.param(b"HTTP/1.1 404 \r\nContent-Length:0\r\nx: y\r\n\r\n", (404, b"", True),
                     id="empty"),
        pytest.param(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\n7",
                     (200, b"7", False), id="close"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n7HTTP", (200, b"7", False),
                     id="more-sent"),
    ],
)  # fmt: skip
def test_the_common_answers_are_read_without_h11(
    data: bytes, want: tuple[int, bytes, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers with one Content-Length (every answer of ``memini serve``) are read without
    h11's state machine (~33 us of CPU per call), in one piece or byte by byte (then what
    follows the answer is read after it: a connection found stale when next taken)."""
    monkeypatch.setattr("memini.client._h11_answer", None)  # called: a TypeError
    status, _, body, keep = _read(_read_answer(_START, b"{}"), data, [])
    assert (status, body, keep) == want
    status, _, body, _ = _read(_read_answer(_START, b"{}"), data, list(range(1, len(data))))
    assert (status, body) == want[:2]


_ROW = {"id": "a", "namespace": "n", "content": "x"}


@pytest.mark.parametrize(
    ("value", "hint", "want"),
    [
        pytest.param({**_ROW, "tags": [], "metadata": {}, "linked_memory_ids": [], "level": None},
                     memini.Memory, memini.Memory(id="a", namespace="n", content="x"), id="empty"),
        pytest.param({**_ROW, "tier": "working", "embedding": None}, memini.Memory,
                     memini.Memory(id="a", namespace="n", content="x", tier=memini.Tier.WORKING),
                     id="enum"),
        pytest.param({**_ROW, "access_count": []}, memini.Memory, "must be an integer",
                     id="int-not-array"),
        pytest.param({**_ROW, "tier": "nope"}, memini.Memory,
                     memini.Memory(id="a", namespace="n", content="x", tier="nope"),  # type: ignore[arg-type]
                     id="unknown-enum-value-kept"),
        pytest.param({**_ROW, "created_at": "yesterday"}, memini.Memory,
                     r"result\.created_at must be an ISO 8601 datetime", id="bad-datetime"),
        pytest.param([{"memory": {}, "score": 1.0}], list[memini.Scored],
                     "lacks the required field 'id'", id="empty-memory"),
        pytest.param({**_ROW, "tags": {}}, memini.Memory,
                     r"result\.tags must be a JSON array, got an object", id="list-not-object"),
        pytest.param({"tiers": {}}, memini.Filter,
                     r"result\.tiers must be a JSON array, got an object", id="enums-not-object"),
    ],
)  # fmt: skip
def test_null_and_empty_fields_decode_as_their_decoders_say(
    value: Any, hint: Any, want: Any
) -> None:
    """Null and empty fields, an enum's or a datetime's str decode as the field's decoder
    says, and what it refuses is refused."""
    if isinstance(want, str):
        with pytest.raises(memini.InvalidArgumentError, match=want):
            wire.decode(value, hint, "result")
    else:
        got = wire.decode(value, hint, "result")
        assert got == want and type(got.tier) is type(want.tier)
    vec = wire.decode([], np.ndarray[Any, np.dtype[np.float32]], "result")
    assert isinstance(vec, np.ndarray) and vec.dtype == np.float32 and vec.size == 0


def test_objects_of_every_shape_decode_alike() -> None:
    """A dataclass decodes each object by its own keys and values: the same keys with other
    types, fields left out (300 combinations), unknown ones refused."""
    when = "2026-01-31T12:00:00+00:00"
    optional = {"summary": "s", "importance": 0.5, "tags": ["t"], "metadata": {"k": [1]},
                "confidence": 0.5, "level": None, "superseded_by": "b", "valid_from": when,
                "access_count": 2}  # fmt: skip
    rows = [
        {**_ROW, "expires_at": None, "tags": []},
        {**_ROW, "expires_at": when, "tags": ["t"]},
        {"content": "x", "namespace": "n", "id": "a"},
        *({**_ROW, **{k: v for b, (k, v) in enumerate(optional.items()) if i >> b & 1}}
          for i in range(300)),
    ]  # fmt: skip
    for row in rows * 2:
        got = wire.decode(row, memini.Memory, "m")
        times = {k: datetime.fromisoformat(v) for k, v in row.items() if v == when}
        assert got == memini.Memory(**{**row, **times})
        with pytest.raises(memini.InvalidArgumentError, match="unknown field 'nope'"):
            wire.decode({**row, "nope": 1}, memini.Memory, "m")
        with pytest.raises(memini.InvalidArgumentError, match="lacks the required field 'id'"):
            wire.decode({k: v for k, v in row.items() if k != "id"}, memini.Memory, "m")


# --------------------------------------------------------------------------------------------
# Answers holding memories, read by the core (`_core.read_answer`)
# --------------------------------------------------------------------------------------------

_TEXT = st.text(max_size=6)
_KEY = _TEXT.filter(lambda k: not k.startswith("$memini:"))  # no marker: stored metadata
_FLOAT = st.floats(allow_nan=False, allow_infinity=False)
_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | _FLOAT | _TEXT,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_KEY, kids, max_size=3),
    max_leaves=6,
)
_WHEN = st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat)  # as orjson writes
_ODD_WHEN = st.sampled_from(
    [
        "2026-02-30T00:00:00+00:00",
        "2026-01-31T24:00:00+00:00",
        "0000-01-01T00:00:00+00:00",
        "2026-01-31T12:00:00Z",
        "2026-01-31T12:00:00",
        "2026-01-31T12:00:00.123+00:00",
        "2026-01-31T12:00:00+01:00",
        "2026-01-31 12:00:00+00:00",
        "2026-01-31T12:00:00.1234567+00:00",
        "yesterday",
    ]
)
_MEMORY = st.fixed_dictionaries(
    {
        "id": _TEXT,
        "namespace": _TEXT,
        "content": _TEXT,
        "tier": st.sampled_from([t.value for t in memini.Tier]),
        "level": st.none() | st.sampled_from([level.value for level in memini.Level]),
        "summary": _TEXT,
        "metadata": st.dictionaries(_KEY, _ANY, max_size=3),
        "tags": st.lists(_TEXT, max_size=3),
        "importance": _FLOAT,
        "created_at": _WHEN,
        "updated_at": _WHEN,
        "last_accessed_at": _WHEN,
        "access_count": st.integers(-(2**63), 2**63 - 1),
        "expires_at": st.none() | _WHEN,
        "superseded_by": st.none() | _TEXT,
        "valid_from": st.none() | _WHEN,
        "valid_to": st.none() | _WHEN,
        "confidence": st.none() | st.floats(0, 1),
        "linked_memory_ids": st.lists(_TEXT, max_size=2),
        "embedding": st.none(),
    }
)
_SHAPES: dict[str, tuple[Any, Any]] = {
    "memory": (memini.Memory, _MEMORY),
    "memories": (list[memini.Memory], st.lists(_MEMORY, max_size=3)),
    "hits": (
        list[memini.Scored],
        st.lists(st.fixed_dictionaries({"memory": _MEMORY, "score": _FLOAT}), max_size=3),
    ),
    "hits_many": (
        list[list[memini.Scored]],
        st.lists(
            st.lists(st.fixed_dictionaries({"memory": _MEMORY, "score": _FLOAT}), max_size=2),
            max_size=2,
        ),
    ),
    "recalled": (
        list[memini.Recalled],
        st.lists(
            st.fixed_dictionaries(
                {
                    "memory": _MEMORY,
                    "score": _FLOAT,
                    "vector_score": st.none() | _FLOAT,
                    "keyword_score": st.none() | _FLOAT,
                    "via": _TEXT,
                }
            ),
            max_size=3,
        ),
    ),
}


def _objects(value: Any) -> list[dict[str, Any]]:
    """The JSON objects in ``value``, outermost first (metadata's left out: it is data)."""
    if isinstance(value, list):
        return [o for v in value for o in _objects(v)]
    if isinstance(value, dict) and "metadata" not in value:
        return [value, *_objects(value.get("memory"))]
    return [value] if isinstance(value, dict) else []


@st.composite
def _answer_of(draw: st.DrawFn) -> tuple[str, Any, bytes, bool]:
    """A shape, its return type and an answer's bytes as a server writes them, or changed
    (``True``): a field dropped, added, or given another JSON value or an odd datetime;
    or the bytes cut short."""
    shape = draw(st.sampled_from(sorted(_SHAPES)))
    hint, values = _SHAPES[shape]
    value = draw(values)
    changes = draw(st.integers(0, 3))
    for _ in range(changes):
        objects = _objects(value)
        if not objects:
            value = draw(_ANY)
            continue
        obj = draw(st.sampled_from(objects))
        key = draw(st.sampled_from(sorted(obj) or ["id"]) | _TEXT | st.just("fingerprint"))
        how = draw(st.sampled_from(["drop", "any", "odd-datetime"]))
        if how == "drop":
            obj.pop(key, None)
        else:
            obj[key] = draw(_ANY if how == "any" else _ODD_WHEN)
    data = orjson.dumps(value)
    if draw(st.booleans()) and changes == 0 and len(data) > 1:
        return shape, hint, data[: draw(st.integers(0, len(data) - 1))], True
    return shape, hint, data, changes > 0


@given(_answer_of())
def test_the_core_reads_an_answer_as_the_python_decoder_does(
    answer: tuple[str, Any, bytes, bool],
) -> None:
    """What the core reads of an answer is what the Python decoder of the same return type
    makes of it (the objects a local call returns), and an answer as a server writes it is
    always read; anything else may be refused, never read otherwise (a field unknown,
    missing or of another type, a datetime not in the written form, bytes cut short)."""
    shape, hint, data, changed = answer
    try:
        got = _core.read_answer(data, shape)
    except memini.InvalidArgumentError as e:
        assert changed, f"an answer as written was refused: {e}"
        return
    assert got == wire.decode(orjson.loads(data), hint, "result")


_WRITTEN = orjson.dumps(
    {**_ROW, "tier": "semantic", "summary": "", "metadata": {}, "tags": [], "importance": 0.0,
     "created_at": "2026-01-31T12:00:00+00:00", "updated_at": "2026-01-31T12:00:00+00:00",
     "last_accessed_at": "2026-01-31T12:00:00+00:00", "access_count": 0,
     "linked_memory_ids": [], "embedding": None}
)  # fmt: skip


@pytest.mark.parametrize(
    ("data", "shape", "want"),
    [
        pytest.param(b"", "hits", "EOF while parsing", id="empty"),
        pytest.param(b"[{}]", "nope", 'unknown answer shape "nope"', id="unknown-shape"),
        pytest.param(b'[{"score": 1.0}]', "hits", "missing field `memory`", id="no-memory"),
        pytest.param(b'{"id": "a", "namespace": "n", "content": "x"}', "memory",
                     "missing field `tier`", id="fields-missing"),
        pytest.param(b'{"fingerprint": "ab"}', "memory", "unknown field `fingerprint`",
                     id="fingerprint-not-a-field"),
        pytest.param(b'{"embedding": "AACAPw=="}', "memory", "embedding must be null",
                     id="embedding"),
        pytest.param(b'{"tier": "nope"}', "memory", 'unknown tier "nope"', id="tier"),
        pytest.param(b'{"metadata": [1]}', "memory", "metadata must be a JSON object",
                     id="metadata-not-object"),
        pytest.param(b'{"created_at": "2026-01-31T12:00:00Z"}', "memory",
                     "is not a datetime such as", id="datetime-zulu"),
        pytest.param(b'[{"memory": %b, "score": 9007199254740993}]' % _WRITTEN, "hits",
                     "beyond 2\\*\\*53", id="inexact-float"),
        pytest.param(b'[{"memory": %b, "score": 1.0, "via": "n", "vector_score": null}]'
                     % _WRITTEN, "recalled", "missing field `keyword_score`",
                     id="recalled-field-missing"),
    ],
)  # fmt: skip
def test_the_core_refuses_an_answer_naming_what_is_wrong(
    data: bytes, shape: Any, want: str
) -> None:
    with pytest.raises(memini.InvalidArgumentError, match=want):
        _core.read_answer(data, shape)
