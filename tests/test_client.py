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
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memini
from memini import AuthError, MeminiError, NotFoundError, UnavailableError
from memini import _wire as wire
from memini.client import _AsyncConnections, _AsyncHttpx, _Connections, _Httpx, _lean
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
    """The decoder's shortcuts (scalars, ints and lists as they are, a dataclass built from
    its fields) give what a local store gives."""
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
