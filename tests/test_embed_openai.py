"""OpenAIEmbedder against a real HTTP server on 127.0.0.1 speaking the OpenAI embeddings
protocol and serving LocalEmbedder vectors (stdlib http.server in a thread), scripted to
fail in the ways real services do: 429, 5xx, slow answers, wrong dimensions, down."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from embed_helpers import needs_weights
from memini import Memory, Store
from memini.embed import LocalEmbedder, OpenAIEmbedder
from memini.errors import DimensionMismatchError, InvalidArgumentError, UnavailableError

pytestmark = needs_weights


@dataclass
class Service:
    """What the server does: each request pops the next scripted answer ("ok" when empty)."""

    local: LocalEmbedder
    url: str = ""
    script: list[str] = field(default_factory=list)
    delay: float = 0.0
    dims: int | None = None  # answer vectors cut to this length
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(svc: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up (timeout test)
                self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with svc.lock:
                svc.requests.append(body)
                svc.headers.append(dict(self.headers))
                action = svc.script.pop(0) if svc.script else "ok"
            if self.path != "/v1/embeddings":
                self._send(404, {"error": {"message": "not found"}}, {})
            elif action == "429":
                self._send(429, {"error": {"message": "rate limited"}}, {"Retry-After": "0"})
            elif action in ("500", "503"):
                self._send(int(action), {"error": {"message": "overloaded"}}, {})
            elif action == "401":
                self._send(401, {"error": {"message": "invalid api key"}}, {})
            elif action == "garbage":
                self._send(200, {"object": "not embeddings"}, {})
            else:
                if action == "slow" or svc.delay:
                    time.sleep(svc.delay or 1.0)
                vecs = svc.local.embed(body["input"])
                if svc.dims is not None:
                    vecs = vecs[:, : svc.dims]
                data = [
                    {"object": "embedding", "index": i, "embedding": v.tolist()}
                    for i, v in enumerate(vecs)
                ]
                data.reverse()  # the index, not the position, orders the answer
                self._send(200, {"object": "list", "data": data, "model": body["model"]}, {})

    return Handler


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.fixture
def service(local: LocalEmbedder) -> Iterator[Service]:
    svc = Service(local)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(svc))
    server.daemon_threads = True
    svc.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield svc
    server.shutdown()
    server.server_close()
    t.join()


@pytest.fixture
def client() -> Iterator[Any]:
    """``client(url, model, **kw)`` makes OpenAIEmbedders, closed at teardown."""
    made: list[OpenAIEmbedder] = []

    def make(*args: Any, **kwargs: Any) -> OpenAIEmbedder:
        made.append(OpenAIEmbedder(*args, **kwargs))
        return made[-1]

    yield make
    for e in made:
        e.close()


TEXTS = [f"memory number {i}: alice prefers green tea" for i in range(7)]


def test_vectors_batches_and_order(service: Service, local: LocalEmbedder, client: Any) -> None:
    with client(service.url, "minilm", dims=384, batch=3, api_key="sk-test") as e:
        got = e.embed(TEXTS)
    assert got.dtype == np.float32 and got.shape == (7, 384)
    np.testing.assert_array_equal(got, local.embed(TEXTS))
    assert [len(r["input"]) for r in service.requests] == [3, 3, 1]
    assert all(r["model"] == "minilm" for r in service.requests)
    assert service.headers[0]["Authorization"] == "Bearer sk-test"


def test_dims_learnt_from_the_service(service: Service, client: Any) -> None:
    e = client(service.url, "minilm")
    assert e.dims == 384
    assert len(service.requests) == 1
    assert e.embed([]).shape == (0, 384)
    assert "Authorization" not in service.headers[0]


def test_429_and_5xx_are_retried(service: Service, local: LocalEmbedder, client: Any) -> None:
    service.script = ["429", "503", "500"]
    e = client(service.url, "minilm", dims=384, retries=3, backoff=0.01)
    np.testing.assert_array_equal(e.embed(TEXTS[:2]), local.embed(TEXTS[:2]))
    assert len(service.requests) == 4


def test_retries_give_up_with_unavailable(service: Service, client: Any) -> None:
    service.script = ["503"] * 3
    e = client(service.url, "minilm", dims=384, retries=2, backoff=0.01)
    with pytest.raises(UnavailableError, match=r"after 3 attempts: HTTP 503"):
        e.embed(TEXTS[:1])
    assert len(service.requests) == 3


def test_timeout(service: Service, local: LocalEmbedder, client: Any) -> None:
    service.delay = 1.0
    e = client(service.url, "minilm", dims=384, timeout=0.2, retries=0)
    with pytest.raises(UnavailableError, match=r"no answer within 0\.2 s"):
        e.embed(TEXTS[:1])
    service.delay = 0.0
    service.script = ["slow"]  # the first attempt times out, the retry answers
    e = client(service.url, "minilm", dims=384, timeout=0.3, retries=1, backoff=0.01)
    np.testing.assert_array_equal(e.embed(TEXTS[:1]), local.embed(TEXTS[:1]))


def test_service_down(client: Any) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = client(f"http://127.0.0.1:{port}/v1", "minilm", dims=384, retries=1, backoff=0)
    with pytest.raises(UnavailableError, match="cannot connect"):
        e.embed(TEXTS[:1])


def test_wrong_dims(service: Service, client: Any) -> None:
    service.dims = 100
    e = client(service.url, "minilm", dims=384)
    with pytest.raises(DimensionMismatchError, match="answered 100-d vectors, expected 384"):
        e.embed(TEXTS[:1])


def test_refusal_and_garbage(service: Service, client: Any) -> None:
    service.script = ["401", "garbage"]
    e = client(service.url, "minilm", dims=384, backoff=0)
    with pytest.raises(InvalidArgumentError, match=r"HTTP 401.*invalid api key"):
        e.embed(TEXTS[:1])
    with pytest.raises(UnavailableError, match="not an embeddings response"):
        e.embed(TEXTS[:1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"base_url": "localhost:1234"}, "http", id="no-scheme"),
        pytest.param({"model": ""}, "model", id="empty-model"),
        pytest.param({"dims": 0}, "dims", id="dims-0"),
        pytest.param({"batch": 0}, "batch", id="batch-0"),
        pytest.param({"timeout": 0}, "timeout", id="timeout-0"),
        pytest.param({"retries": -1}, "retries", id="retries-negative"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"base_url": "http://127.0.0.1:9/v1", "model": "m", **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        OpenAIEmbedder(**args)


def test_store_with_a_service_embedder(service: Service, local: LocalEmbedder, client: Any) -> None:
    with Store.open(None, embedder=client(service.url, "minilm"), metric="cos") as s:
        assert s.stats()["dims"] == 384 and s.embed_model() == "minilm"
        s.upsert_many(
            [
                Memory(id="a", namespace="n", content="Alice prefers green tea"),
                Memory(id="b", namespace="n", content="The deploy runs on Fridays"),
            ]
        )
        q = s._embed_query("what does Alice drink?")
        assert q is not None
        np.testing.assert_array_equal(q, local.embed(["what does Alice drink?"])[0])
        assert s.vector_search("n", q, k=1)[0].memory.id == "a"
