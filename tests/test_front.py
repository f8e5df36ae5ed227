"""The HTTP front of ``memini serve`` (issue 34): auth decided once, in the core, from the
key snapshot the server pushes; the Python app behind it believes the decision only from
the front; bad bodies never reach the store. Every test talks HTTP to a real server."""

from __future__ import annotations

import base64
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import memini
from memini import APIKey, EventFilter, Memory, hash_api_key
from memini import _wire as wire
from memini.server import Server, ServerOptions
from memini.server._app import _call_json
from memini.server._auth import ADMIN as ADMIN_PRINCIPAL
from memini.server._auth import Principal

ADMIN = "front-admin-secret"
KEY_A = "front-key-a"
KEY_OFF = "front-key-disabled"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An admin secret, a key with home ``org/a``, a disabled key, one row in ``org/a`` and
    one in ``org/b``."""
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, max_body=4096, front=True)
    server = Server.open(tmp_path_factory.mktemp("front") / "store", dims=4, options=opts)
    store = server.service.store
    store.put_api_key(APIKey("a", hash_api_key(KEY_A), home_ns="org/a"))
    store.put_api_key(APIKey("off", hash_api_key(KEY_OFF), home_ns="org/a", disabled=True))
    server.service.gate.keys_changed()
    for id, ns in (("a1", "org/a"), ("b1", "org/b")):
        store.upsert(Memory(id=id, namespace=ns, content=id, embedding=[1.0, 0.0, 0.0, 0.0]))
    server.start()
    yield server
    server.stop()


def _post(server: Server, method: str, body: object, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/{method}", json=body, headers=headers)


def _bearer(secret: str) -> str:
    return f"Bearer {secret}"


def test_unknown_and_disabled_keys_are_401(served: Server) -> None:
    for secret in ("no-such-key", KEY_OFF):
        r = _post(served, "count", {"namespace": "org/a"}, authorization=_bearer(secret))
        assert r.status_code == 401
        assert r.json()["error"] == {"type": "AuthError", "message": "unknown or disabled API key"}
    r = _post(served, "count", {"namespace": "org/a"})
    assert r.status_code == 401
    assert "requires a credential" in r.json()["error"]["message"]
    r = _post(served, "count", {"namespace": "org/a"}, authorization="Basic x")
    assert r.status_code == 401
    assert "malformed" in r.json()["error"]["message"]


def test_another_namespace_is_403_naming_none_of_it(served: Server) -> None:
    r = _post(served, "count", {"namespace": "org/b"}, authorization=_bearer(KEY_A))
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "AuthError"
    assert "org/b" not in r.json()["error"]["message"]
    r = _post(served, "count", {"namespace": "org/a"}, authorization=_bearer(KEY_A))
    assert (r.status_code, r.json()) == (200, 1)


def test_a_forged_principal_header_is_ignored(served: Server) -> None:
    """A client's own ``memini-principal`` and ``memini-front-token`` never reach the app:
    the front replaces both with its decision."""
    forged = {"memini-principal": "admin", "memini-front-token": "guess"}
    r = _post(served, "count", {"namespace": "org/b"}, **forged)
    assert r.status_code == 401
    r = _post(served, "count", {"namespace": "org/b"}, authorization=_bearer(KEY_A), **forged)
    assert r.status_code == 403
    r = _post(served, "stats", {}, authorization=_bearer(KEY_A), **forged)
    assert r.status_code == 403


def test_the_app_is_reachable_only_through_the_front(served: Server) -> None:
    """The app listens on a Unix socket in a directory only the server's user may enter,
    and refuses a request that did not come through the front (no token)."""
    private = served._private
    assert private is not None
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
    transport = httpx.HTTPTransport(uds=os.path.join(private, "app.sock"))
    with httpx.Client(transport=transport) as direct:
        r = direct.post(
            "http://app/v1/count",
            json={"namespace": "org/b"},
            headers={"authorization": _bearer(ADMIN), "memini-principal": "admin"},
        )
    assert r.status_code == 401
    assert "front" in r.json()["error"]["message"]


def test_a_key_change_reaches_the_front_at_once(served: Server) -> None:
    secret = "front-key-new"
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        admin.put_api_key(APIKey("new", hash_api_key(secret), home_ns="org/a"))
        r = _post(served, "count", {"namespace": "org/a"}, authorization=_bearer(secret))
        assert r.status_code == 200
        admin.put_api_key(APIKey("new", hash_api_key(secret), home_ns="org/a", disabled=True))
        r = _post(served, "count", {"namespace": "org/a"}, authorization=_bearer(secret))
        assert r.status_code == 401
        assert admin.delete_api_key("new")


@pytest.mark.parametrize(
    ("change", "status"), [({"disabled": True}, 401), ({"home_ns": "org/c"}, 403)]
)
def test_a_key_changed_while_its_body_arrives_is_decided_as_changed(
    served: Server, change: dict[str, object], status: int
) -> None:
    """The front decides a request once its body has arrived, from the keys of that moment
    (as the app decides what it is forwarded): a key disabled, or moved to another home,
    while a client still sends its body writes nothing in its former home."""
    secret = "front-key-moving"
    memory = {"id": "moving", "namespace": "org/a/m", "content": "c", "embedding": [1, 0, 0, 0]}
    body = wire.dumps({"memory": memory})
    head = (
        f"POST /v1/upsert HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {secret}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    key = {"name": "moving", "hash": hash_api_key(secret), "home_ns": "org/a"}
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        admin.put_api_key(APIKey(**key))  # type: ignore[arg-type]
        try:
            with socket.create_connection(("127.0.0.1", served.port)) as sock:
                sock.sendall(head)
                time.sleep(0.5)  # the front has the request's head, and waits for its body
                admin.put_api_key(APIKey(**{**key, **change}))  # type: ignore[arg-type]
                sock.sendall(body)
                sock.settimeout(10)
                assert sock.recv(100).startswith(f"HTTP/1.1 {status} ".encode())
        finally:
            admin.delete_api_key("moving")
    assert served.service.store.count("org/a/m") == 0


def test_body_limits_apply_in_the_front(served: Server) -> None:
    auth = {"authorization": _bearer(ADMIN)}
    big = {"namespace": "org/a", "pad": "x" * 5000}
    r = _post(served, "count", big, **auth)
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "InvalidArgumentError"
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(
            b"POST /v1/count HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"1000\r\n"
            + b"x" * 4096
            + b"\r\n1000\r\n"
            + b"x" * 4096
            + b"\r\n0\r\n\r\n"
        )
        sock.settimeout(10)
        assert sock.recv(100).startswith(b"HTTP/1.1 413 ")


def test_count_is_answered_by_the_front_as_the_app_answers_it(served: Server) -> None:
    """``count`` without a filter is answered in the core (no GIL); its answer is the bytes
    the app gives, it appears in ``/metrics`` as before, and every other form of the call
    (a filter, another tenant's namespace, a malformed name) still gets the app's answer."""
    front = served.service.front
    assert front is not None
    front.observed()  # forget earlier calls
    store = served.service.store
    for key, ns in ((ADMIN, "org/a"), (ADMIN, "org/b"), (KEY_A, "org/a"), (KEY_A, "org/a/x")):
        r = _post(served, "count", {"namespace": ns}, authorization=_bearer(key))
        assert r.status_code == 200
        assert r.content == memini._wire.dumps(store.count(ns))
        assert r.headers["content-type"] == "application/json"
    observed, unobserved = front.observed()
    assert [route for route, _ in observed] == ["count"] * 4
    assert not unobserved
    # forwarded: the app answers
    r = _post(served, "count", {"namespace": "org/a", "filter": {"tiers": ["semantic"]}})
    assert r.status_code == 401
    r = _post(
        served,
        "count",
        {"namespace": "org/a", "filter": {"tiers": ["semantic"]}},
        authorization=_bearer(KEY_A),
    )
    assert (r.status_code, r.json()) == (200, 1)
    for other in ("org/b", "org/ab", "org"):  # "org/ab" is not below "org/a"
        r = _post(served, "count", {"namespace": other}, authorization=_bearer(KEY_A))
        assert r.status_code == 403
    r = _post(served, "count", {"namespace": "a\u202eb"}, authorization=_bearer(ADMIN))
    assert (r.status_code, r.json()) == (200, 0)  # a read may name it; the app says so
    r = _post(served, "count", {"namespace": 7}, authorization=_bearer(ADMIN))
    assert r.status_code == 400
    r = _post(served, "count", {"namespace": "org/a", "k": 1}, authorization=_bearer(ADMIN))
    assert r.status_code == 400
    assert not front.observed()[0]


def test_calls_the_front_answers_are_in_the_metrics(served: Server) -> None:
    def served_counts() -> float:
        text = httpx.get(f"{served.url}/metrics").text
        line = 'memini_http_requests_total{method="count",status="200"} '
        return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(line))

    before = served_counts()
    for _ in range(3):
        r = _post(served, "count", {"namespace": "org/a"}, authorization=_bearer(ADMIN))
        assert r.status_code == 200
    assert served_counts() == before + 3


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(1 << 63), (1 << 63) - 1)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)
_ARGS = st.fixed_dictionaries(
    {},
    optional={
        "namespace": _JSON | st.just("org/a"),
        "embedding": _JSON | st.just([1.0, 0.0, 0.0]) | st.just("AACAPw=="),
        "k": _JSON | st.integers(-5, 1 << 40),
        "query": _JSON,
        "memory": _JSON,
        "memories": _JSON,
        "id": _JSON,
        "filter": _JSON,
    },
)
_BODIES = (
    st.binary(max_size=200)
    | _ARGS.map(lambda a: memini._wire.dumps(a))
    | st.sampled_from([b"{", b"[]", b"null", b'{"k": NaN}', b'{"namespace": "org/a"', b"\xff"])
)
_METHODS = ["vector_search", "keyword_search", "count", "get", "list", "recall", "upsert", "delete"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(method=st.sampled_from(_METHODS), body=_BODIES)
def test_malformed_bodies_are_json_errors_and_change_nothing(
    served: Server, method: str, body: bytes
) -> None:
    r = httpx.post(
        f"{served.url}/v1/{method}",
        content=body,
        headers={"authorization": _bearer(KEY_A), "content-type": "application/json"},
    )
    if r.status_code != 200:
        assert 400 <= r.status_code < 500, r.text
        assert set(r.json()["error"]) == {"type", "message"}
    store = served.service.store
    assert store.count("org/b") == 1  # another tenant's rows never change
    assert httpx.get(f"{served.url}/healthz").status_code == 200


@pytest.mark.parametrize("front", [False, True])
def test_serve_puts_the_front_before_the_app_only_with_front(tmp_path: Path, front: bool) -> None:
    """``memini serve --no-front`` runs uvicorn on the public socket itself (no app socket
    behind it); ``--front`` (the default) puts the front there and the app on a private
    Unix socket. Both serve, and both stop on SIGTERM leaving no private directory."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "memini.cli", "serve", "--store", str(tmp_path / "s")]
    argv += ["--dims", "4", "--port", str(port), "--front" if front else "--no-front"]
    proc = subprocess.Popen(
        argv, stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(tmp_path)}
    )
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert httpx.post(f"{url}/v1/count", json={"namespace": "default"}).json() == 0
        private = [
            c.laddr
            for c in psutil.Process(proc.pid).net_connections("unix")
            if "memini-serve-" in c.laddr
        ]
        assert len(private) == (1 if front else 0)
        assert list(tmp_path.glob("memini-serve-*")) == ([Path(private[0]).parent] if front else [])
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert not list(tmp_path.glob("memini-serve-*"))


# --------------------------------------------------------------------------------------------
# vector_search answered by the front (no GIL), its event rows queued in the core
# --------------------------------------------------------------------------------------------

_ROWS = [
    Memory(
        id="m1",
        namespace="org/a",
        content='héllo \x01 \u2028 "quoted" \\ wörld 🧠',
        metadata={
            "f": 1e-7,
            "big": 2.5e20,
            "n": [1, -3, True, None, 0.1],
            "m": {"z": 1, "a": "é\n"},
        },
        tags=["t", "ü"],
        importance=0.3,
        confidence=0.123456789,
        level=memini.Level.DEDUCED,
        tier=memini.Tier.EPISODIC,
        expires_at=datetime(2100, 1, 1, tzinfo=UTC),
        valid_from=datetime(2000, 1, 1, 1, 1, 1, 5, tzinfo=UTC),
        valid_to=datetime(2200, 5, 6, tzinfo=UTC),
        linked_memory_ids=["m2"],
        embedding=[1.0, 0.5, 0.0, 0.0],
    ),
    Memory(id="m2", namespace="org/a", content="x" * 300, embedding=[0.1, 0.2, 0.3, 0.4]),
    Memory(
        id="m3", namespace="org/a/sub", content="below", summary="s" * 201, embedding=[0, 1, 0, 0]
    ),
    Memory(id="m4", namespace="org/b", content="other tenant", embedding=[1.0, 0.5, 0.0, 0.0]),
]


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`served`'s keys over rows of every field's kind (floats, datetimes, metadata,
    unicode), in ``org/a``, ``org/a/sub`` and ``org/b``."""
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, front=True)
    server = Server.open(tmp_path_factory.mktemp("search") / "store", dims=4, options=opts)
    store = server.service.store
    store.put_api_key(APIKey("a", hash_api_key(KEY_A), home_ns="org/a"))
    server.service.gate.keys_changed()
    store.upsert_many(_ROWS)
    server.start()
    yield server
    server.stop()


def _principal(server: Server, secret: str) -> Principal:
    if secret == ADMIN:
        return ADMIN_PRINCIPAL
    key = server.service.store.get_api_key_by_hash(hash_api_key(secret))
    assert key is not None
    return Principal(key, key.name)


def _app_answer(server: Server, secret: str, method: str, raw: bytes) -> bytes:
    """What the app answers for this body, served in-process (its events logged too)."""
    return _call_json(server.service, _principal(server, secret), wire.METHODS[method], raw, False)


def _native(server: Server, secret: str, method: str, raw: bytes) -> tuple[httpx.Response, bool]:
    """The answer through the front, and whether the front answered it itself."""
    front = server.service.front
    assert front is not None
    front.observed()
    r = httpx.post(
        f"{server.url}/v1/{method}", content=raw, headers={"authorization": _bearer(secret)}
    )
    return r, [route for route, _ in front.observed()[0]] == [method]


def _assert_same_answer(method: str, body: object, got: bytes, want: bytes) -> None:
    """The front's answer is the app's, byte for byte; for a recall reranked by quality
    (which decays with the wall clock, read by each call) up to the scores' last digits."""
    reranked = method == "recall" and isinstance(body, dict) and body.get("rerank", 1)
    if not reranked:
        assert got == want
        return
    g, w = wire.loads(got), wire.loads(want)
    assert [r["score"] for r in g] == pytest.approx([r["score"] for r in w], rel=1e-6)
    for r in g + w:
        r["score"] = 0
    assert g == w


def _b64(v: list[float]) -> str:
    return base64.b64encode(np.asarray(v, "<f4").tobytes()).decode()


@pytest.mark.parametrize(
    ("secret", "method", "body"),
    [
        (ADMIN, "keyword_search", {"namespace": "org/a", "query": "héllo wörld quoted"}),
        (KEY_A, "keyword_search", {"namespace": "org/a", "query": "xxx héllo", "k": 1}),
        (ADMIN, "keyword_search", {"namespace": "org/a", "query": "the"}),
        (ADMIN, "keyword_search", {"namespace": "org/a", "query": "", "filter": None}),
        (ADMIN, "get", {"namespace": "org/a", "id": "m1"}),
        (KEY_A, "get", {"namespace": "org/a/sub", "id": "m3"}),
        (
            ADMIN,
            "vector_search_many",
            {"namespace": "org/a", "vectors": [[1, 0, 0, 0], _b64([0, 1, 0, 0])], "k": 2},
        ),
        (KEY_A, "vector_search_many", {"namespace": "org/a/sub", "vectors": [[1, 1, 1, 1]]}),
        (ADMIN, "recall", {"namespace": "org/a", "query": "héllo", "vector": [1, 0, 0, 0]}),
        # no embedder: a text recall is keyword-only, in the front as in the app
        (ADMIN, "recall", {"namespace": "org/a", "query": "héllo"}),
        (KEY_A, "recall", {"namespace": ["org/a/sub", "org/a"], "query": "below xxx", "k": 2}),
        (ADMIN, "recall", {"namespace": ["org/a", "org/b"], "query": "tenant", "rerank": None}),
        (
            KEY_A,
            "recall",
            {"namespace": ["org/a/sub", "org/a", "org/a/sub"], "vector": _b64([0, 1, 0, 0])},
        ),
        (
            ADMIN,
            "recall",
            {
                "namespace": ["org/a", "org/b"],
                "query": "other tenant",
                "vector": [1, 0.5, 0, 0],
                "k": 3,
                "rerank": None,
                "dedup": False,
                "linked": False,
                "reinforce": False,
                "alpha": None,
            },
        ),
    ],
)
def test_other_routes_are_answered_by_the_front_as_the_app_answers_them(
    searched: Server, secret: str, method: str, body: dict[str, object]
) -> None:
    raw = wire.dumps(body)
    r, native = _native(searched, secret, method, raw)
    assert native
    assert r.status_code == 200
    _assert_same_answer(method, body, r.content, _app_answer(searched, secret, method, raw))


@pytest.mark.parametrize(
    ("secret", "method", "body", "status"),
    [
        (KEY_A, "keyword_search", {"namespace": "org/b", "query": "other"}, 403),
        (ADMIN, "keyword_search", {"namespace": "org/a", "query": "x" * 4097}, 400),
        (ADMIN, "keyword_search", {"namespace": "org/a", "query": 7}, 400),
        (ADMIN, "keyword_search", {"namespace": "org/a", "query": "x", "k": 0}, 400),
        (ADMIN, "keyword_search", {"namespace": "org/a", "query": "x", "filter": {}}, 200),
        (KEY_A, "get", {"namespace": "org/b", "id": "m4"}, 403),
        (KEY_A, "get", {"namespace": "org/a", "id": "m4"}, 404),
        (ADMIN, "get", {"namespace": "org/a", "id": "nope"}, 404),
        (ADMIN, "get", {"namespace": "org/a"}, 400),
        (KEY_A, "vector_search_many", {"namespace": "org/b", "vectors": [[1, 0, 0, 0]]}, 403),
        (ADMIN, "vector_search_many", {"namespace": "org/a", "vectors": []}, 200),
        (ADMIN, "vector_search_many", {"namespace": "org/a", "vectors": [[1, 0, 0, 0], [1]]}, 422),
        (ADMIN, "vector_search_many", {"namespace": "org/a", "vectors": [1, 0, 0, 0]}, 400),
        (KEY_A, "recall", {"namespace": ["org/a", "org/b"], "vector": [1, 0, 0, 0]}, 403),
        (ADMIN, "recall", {"namespace": [], "vector": [1, 0, 0, 0]}, 400),
        (ADMIN, "recall", {"namespace": "org/a", "vector": [1, 0, 0, 0], "alpha": 0.5}, 200),
        (ADMIN, "recall", {"namespace": "org/a", "vector": [1, 0, 0, 0], "linked": True}, 200),
        (ADMIN, "recall", {"namespace": "org/a", "vector": [1, 0, 0, 0], "rerank": "x"}, 400),
        (ADMIN, "recall", {"namespace": "org/a", "vector": [1, 0, 0, 0], "dedup": None}, 400),
    ],
)
def test_other_routes_the_front_is_unsure_of_go_to_the_app(
    searched: Server, secret: str, method: str, body: dict[str, object], status: int
) -> None:
    r, native = _native(searched, secret, method, wire.dumps(body))
    assert not native
    assert r.status_code == status, r.text
    assert "org/b" not in r.text or status == 200


@pytest.mark.parametrize(
    ("secret", "body"),
    [
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, 0.1]}),
        (ADMIN, {"namespace": "org/a", "vector": _b64([0.3, 0.1, 0.2, 0.9]), "k": 1}),
        (ADMIN, {"namespace": "org/b", "vector": [1e-7, 2.5, -1, 3], "filter": None, "k": 3}),
        (ADMIN, {"namespace": "nobody", "vector": [1, 0, 0, 0]}),
        (KEY_A, {"namespace": "org/a", "vector": [0.1, 0.2, 0.3, 0.4], "k": 10000}),
        (KEY_A, {"namespace": "org/a/sub", "vector": _b64([0, 1, 0, 0])}),
    ],
)
def test_vector_search_is_answered_by_the_front_as_the_app_answers_it(
    searched: Server, secret: str, body: dict[str, object]
) -> None:
    raw = wire.dumps(body)
    r, native = _native(searched, secret, "vector_search", raw)
    assert native
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.content == _app_answer(searched, secret, "vector_search", raw)


@pytest.mark.parametrize(
    ("secret", "body", "status"),
    [
        (KEY_A, {"namespace": "org/b", "vector": [1, 0, 0, 0]}, 403),
        (KEY_A, {"namespace": "org/ab", "vector": [1, 0, 0, 0]}, 403),
        ("no-such-key", {"namespace": "org/a", "vector": [1, 0, 0, 0]}, 401),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0]}, 422),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, {"$memini:float": "nan"}]}, 400),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, 1e39]}, 400),
        (ADMIN, {"namespace": "org/a", "vector": "AACAPw", "k": 1}, 400),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, 0], "k": 0}, 400),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, 0], "k": None}, 400),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, 0], "k": 10001}, 400),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, 0], "k": 2.0}, 200),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, 0], "kk": 2}, 400),
        (ADMIN, {"namespace": "", "vector": [1, 0, 0, 0]}, 200),
        (ADMIN, {"namespace": "org/a", "vector": [1, 0, 0, 0], "filter": {"tags": ["t"]}}, 200),
        (ADMIN, {"namespace": "a\u202eb", "vector": [1, 0, 0, 0]}, 200),
    ],
)
def test_vector_search_the_front_is_unsure_of_goes_to_the_app(
    searched: Server, secret: str, body: dict[str, object], status: int
) -> None:
    """Anything but a plain call the caller may make (another tenant's namespace, a bad
    vector or ``k``, an unknown argument, a filter, a name the engine refuses) is answered
    by the app, errors and their messages included."""
    r, native = _native(searched, secret, "vector_search", wire.dumps(body))
    assert not native
    assert r.status_code == status, r.text
    if status == 403:
        assert "org/b" not in r.text


def _rows(store: memini.Store, op_ids: set[str]) -> list[tuple[object, ...]]:
    """The logged rows of these operations, without what differs per call (ids, times),
    the score last."""
    return sorted(
        (e.namespace, e.memory_id, e.memory_ns, e.memory_tier, e.memory_summary, e.rank,
         e.query, e.kind, e.detail["caller"], e.detail["k"], e.detail["namespaces"],
         e.detail.get("query_index"), e.score)
        for e in store.list_events(EventFilter())
        if e.op_id in op_ids
    )  # fmt: skip


def _assert_same_rows(got: list[tuple[object, ...]], want: list[tuple[object, ...]]) -> None:
    """Equal rows; scores up to their last digits (a recall's quality rerank decays with
    the wall clock, which each call reads)."""
    assert [r[:-1] for r in got] == [r[:-1] for r in want]
    assert [r[-1] is None for r in got] == [r[-1] is None for r in want]
    scores = [[float(r[-1] or 0.0) for r in rows] for rows in (got, want)]  # type: ignore[arg-type]
    assert scores[0] == pytest.approx(scores[1], rel=1e-6)


def test_the_front_logs_the_rows_the_app_logs(searched: Server) -> None:
    """A search the front answers logs the rows `Service.finish` logs for the same call:
    one per hit under the hit's namespace (summary cut to 200 characters), or one per
    namespace searched when nothing was found; the caller is the key's name, the query
    stored once."""
    store = searched.service.store
    recorder = searched.service.recorder
    assert recorder is not None
    for secret, method, body in [
        (KEY_A, "vector_search", {"namespace": "org/a", "vector": [0.1, 0.2, 0.3, 0.4], "k": 2}),
        (ADMIN, "vector_search", {"namespace": "org/a/sub", "vector": [0, 1, 0, 0]}),
        (ADMIN, "vector_search", {"namespace": "empty/ns", "vector": [0, 1, 0, 0]}),
        (KEY_A, "keyword_search", {"namespace": "org/a", "query": "Héllo xxx", "k": 3}),
        (ADMIN, "keyword_search", {"namespace": "org/a", "query": "nothing matches"}),
        (KEY_A, "vector_search_many", {"namespace": "org/a", "vectors": [[1, 0, 0, 0]] * 2}),
        (KEY_A, "recall", {"namespace": ["org/a", "org/a"], "query": "x", "vector": [1, 1, 0, 0]}),
        (KEY_A, "recall", {"namespace": ["org/a", "org/a/sub"], "query": "Héllo below"}),
        (ADMIN, "recall", {"namespace": "empty/ns", "query": "nothing stored here"}),
    ]:
        raw = wire.dumps(body)
        recorder.flush()
        before = {e.op_id for e in store.list_events(EventFilter())}
        _, native = _native(searched, secret, method, raw)
        assert native
        recorder.flush()
        by_front = {e.op_id for e in store.list_events(EventFilter())} - before
        _app_answer(searched, secret, method, raw)
        recorder.flush()
        by_app = {e.op_id for e in store.list_events(EventFilter())} - before - by_front
        assert len(by_front) == len(by_app) == 1
        _assert_same_rows(_rows(store, by_front), _rows(store, by_app))
        assert _rows(store, by_front)


def test_a_full_event_queue_drops_rows_and_counts_them(tmp_path: Path) -> None:
    """A call whose rows do not fit the front's queue is answered, its rows dropped and
    counted in the served ``stats()`` and ``/metrics``; it never waits."""
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, front=True, event_queue=1)
    server = Server.open(tmp_path / "s", dims=4, options=opts)
    server.service.store.upsert_many(_ROWS[:2])
    server.start()
    try:
        body = wire.dumps({"namespace": "org/a", "vector": [1, 0, 0, 0]})  # two hits: two rows
        r, native = _native(server, ADMIN, "vector_search", body)
        assert native and r.status_code == 200 and len(r.json()) == 2
        assert server.service.recorder is not None
        server.service.recorder.flush()
        assert not server.service.store.list_events(EventFilter(namespace="org/a"))
        stats = _post(server, "stats", {}, authorization=_bearer(ADMIN)).json()
        assert stats["events_dropped"] == 2
        metrics = httpx.get(f"{server.url}/metrics").text
        assert "memini_event_rows_dropped 2.0" in metrics
    finally:
        server.stop()


def test_a_stop_under_load_logs_every_call_the_front_answered(tmp_path: Path) -> None:
    """A clean stop waits for the calls the front is answering itself before the event log
    closes: after it, the rows of every call answered 200 are in the log (the calls here
    last long enough to be in flight when the stop begins; before the fix their rows were
    queued after the recorder's last batch and lost)."""
    dims, rows, queries = 2_048, 4_000, 1_024  # a call: ~0.3 s in the front, 1,024 rows
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, front=True, event_queue=1 << 24)
    server = Server.open(tmp_path / "s", dims=dims, options=opts)
    rng = np.random.default_rng(34)
    vectors = rng.random((rows, dims), dtype=np.float32).tolist()
    server.service.store.upsert_many(
        [
            Memory(id=f"m{i}", namespace="load", content="x", embedding=v)
            for i, v in enumerate(vectors)
        ]
    )
    body = wire.dumps(
        {"namespace": "load", "vectors": rng.random((queries, dims)).tolist(), "k": 1}
    )
    url = f"{server.start()}/v1/vector_search_many"
    logged: list[int] = []  # the rows each answered call logs: one per hit

    def client() -> None:
        with httpx.Client(timeout=120, headers={"authorization": _bearer(ADMIN)}) as c:
            while True:
                try:
                    r = c.post(url, content=body)
                except httpx.TransportError:
                    return
                if r.status_code != 200:
                    return
                logged.append(r.content.count(b'"score":'))  # not parsed: the GIL stays free

    clients = [threading.Thread(target=client) for _ in range(4)]
    for t in clients:
        t.start()
    front, deadline = server.service.front, time.monotonic() + 60
    assert front is not None
    while time.monotonic() < deadline and not (logged and not front.idle(0.0)):
        time.sleep(0.001)  # until a call is answered and another just began in the front
    server.stop()
    for t in clients:
        t.join()
    assert logged
    with memini.Store.open(tmp_path / "s") as store:
        assert len(store.list_events(EventFilter(namespace="load"))) == sum(logged)


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
_META = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(1 << 63), (1 << 63) - 1)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_TIMES = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
_FLOAT32 = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    content=_TEXT.filter(str.strip),
    summary=_TEXT,
    metadata=st.dictionaries(_TEXT, _META, max_size=4),
    tags=st.lists(_TEXT, max_size=3),
    importance=st.floats(-1e300, 1e300, allow_nan=False),
    confidence=st.none() | st.floats(0, 1),
    created=_TIMES,
    valid_to=st.none() | _TIMES,
    query=st.lists(_FLOAT32, min_size=4, max_size=4),
    as_base64=st.booleans(),
)
def test_fuzz_front_vector_search_answers_as_the_app(
    searched: Server,
    content: str,
    summary: str,
    metadata: dict[str, object],
    tags: list[str],
    importance: float,
    confidence: float | None,
    created: datetime,
    valid_to: datetime | None,
    query: list[float],
    as_base64: bool,
) -> None:
    store = searched.service.store
    m = Memory(
        id="fuzz", namespace="org/a/fuzz", content=content, summary=summary, metadata=metadata,
        tags=tags, importance=importance, confidence=confidence, created_at=created,
        updated_at=created, last_accessed_at=created, valid_to=valid_to,
        embedding=[0.5, 0.5, 0.5, 0.5],
    )  # fmt: skip
    try:
        store.upsert(m)
    except memini.MeminiError:
        return  # refused by the store: nothing to search
    vector: object = _b64(query) if as_base64 else query
    raw = wire.dumps({"namespace": "org/a/fuzz", "vector": vector, "k": 2})
    r, native = _native(searched, ADMIN, "vector_search", raw)
    assert r.status_code == 200
    if any(query):  # a zero query is refused by a cosine store: the app says so
        assert native
    assert r.content == _app_answer(searched, ADMIN, "vector_search", raw)


_SEARCH_ARGS = st.fixed_dictionaries(
    {},
    optional={
        "namespace": _JSON | st.sampled_from(["org/a", "org/b", "org/a/sub"]),
        "vector": _JSON
        | st.lists(_JSON | _FLOAT32, min_size=4, max_size=4)
        | st.just("AACAPwAAAAAAAAAAAAAAAA==")
        | st.text("AB=+/", max_size=24),
        "k": _JSON | st.integers(-5, 20_000),
        "filter": st.none() | _JSON,
        "query": _JSON | _TEXT,
        "id": _JSON | st.sampled_from(["m1", "m3", "m4"]),
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=st.sampled_from([ADMIN, KEY_A]),
    method=st.sampled_from(
        ["vector_search", "keyword_search", "get", "vector_search_many", "recall"]
    ),
    args=_SEARCH_ARGS,
)
def test_fuzz_front_native_bodies(
    searched: Server, secret: str, method: str, args: dict[str, object]
) -> None:
    """Whatever the body, an answer the front gives itself is the app's, byte for byte;
    the rest are the app's own answers (JSON errors for bad input)."""
    if method == "get":  # most bodies name the right arguments
        args = {k: v for k, v in args.items() if k in ("namespace", "id")}
    elif method == "keyword_search":
        args = {k: v for k, v in args.items() if k != "vector" and k != "id"}
    elif method == "recall":
        args = {k: v for k, v in args.items() if k != "id"}
    elif method == "vector_search_many":
        args = {k: v for k, v in args.items() if k != "query" and k != "id"}
        if "vector" in args:
            vector = args.pop("vector")
            args["vectors"] = [vector, vector] if isinstance(vector, list | str) else vector
    else:
        args = {k: v for k, v in args.items() if k != "query" and k != "id"}
    raw = wire.dumps(args)
    r, native = _native(searched, secret, method, raw)
    if native:
        assert r.status_code == 200
        _assert_same_answer(method, args, r.content, _app_answer(searched, secret, method, raw))
    elif r.status_code != 200:
        assert 400 <= r.status_code < 500, r.text
        assert set(r.json()["error"]) == {"type", "message"}
    assert searched.service.store.count("org/b") == 1


# ------------------------------------------------------------------------ list and writes


def _answer_or_error(server: Server, secret: str, method: str, raw: bytes) -> tuple[int, bytes]:
    """The app's (status, body) for this body, served in-process (its events logged)."""
    try:
        return 200, _app_answer(server, secret, method, raw)
    except memini.MeminiError as e:
        return wire.status_of(e), b""


def _stored(store: memini.Store, ns: str, id: str) -> tuple[bytes, bytes | None]:
    """A stored row's JSON without what differs per write (its id, its stamps), and the
    bytes of its vector."""
    m = store.get(ns, id)
    m.id, m.created_at, m.updated_at, m.last_accessed_at = "", None, None, None
    v = store.get_embedding(ns, id)
    return wire.dumps(m), None if v is None else v.tobytes()


def _with_ids(body: dict[str, object], method: str, id: str) -> dict[str, object]:
    """A write's body with its memories' ids replaced by ``id``-0, ``id``-1, ..."""
    if method == "upsert":
        return {**body, "memory": {**body["memory"], "id": f"{id}-0"}}  # type: ignore[dict-item]
    ms = body["memories"]
    return {**body, "memories": [{**m, "id": f"{id}-{i}"} for i, m in enumerate(ms)]}  # type: ignore[union-attr]


def _assert_written_as_the_app_writes(
    server: Server, secret: str, method: str, body: dict[str, object], native: bool | None
) -> bool:
    """The same write through the front (ids ``f-...``) and the app (ids ``a-...``): the same
    answer (up to the ids), the same rows stored, the same event rows (up to the ids);
    ``native``: whether the front must answer it itself (None: either)."""
    store = server.service.store
    recorder = server.service.recorder
    assert recorder is not None
    tag = f"{time.monotonic_ns()}"
    front_body, app_body = _with_ids(body, method, f"f{tag}"), _with_ids(body, method, f"a{tag}")
    recorder.flush()
    before = {e.op_id for e in store.list_events(EventFilter())}
    r, answered = _native(server, secret, method, wire.dumps(front_body))
    if native is not None:
        assert answered == native, r.text
    recorder.flush()
    by_front = {e.op_id for e in store.list_events(EventFilter())} - before
    status, want = _answer_or_error(server, secret, method, wire.dumps(app_body))
    recorder.flush()
    by_app = {e.op_id for e in store.list_events(EventFilter())} - before - by_front
    assert r.status_code == status, r.text
    if status != 200:
        assert not answered and not by_front and not by_app
        return answered
    assert r.content.replace(b'"f' + tag.encode(), b'"a' + tag.encode()) == want
    memories = [body["memory"]] if method == "upsert" else body["memories"]
    for i, m in enumerate(memories):  # type: ignore[union-attr]
        ns = m["namespace"]  # type: ignore[index]
        assert _stored(store, ns, f"f{tag}-{i}") == _stored(store, ns, f"a{tag}-{i}")
    rows = [
        sorted(
            (e.kind, e.namespace, e.memory_id[1:], e.memory_ns, e.memory_tier,
             e.memory_summary, e.rank, e.score, e.query, e.detail)
            for e in store.list_events(EventFilter())
            if e.op_id in ops
        )
        for ops in (by_front, by_app)
    ]  # fmt: skip
    assert rows[0] == rows[1] and rows[0]
    return answered


def _memory(**fields: object) -> dict[str, object]:
    return {"id": "x", "namespace": "org/a/w", "content": "Hello  Wörld", **fields}


@pytest.mark.parametrize(
    ("secret", "method", "body"),
    [
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0.5])}),
        (KEY_A, "upsert", {"memory": _memory(embedding=_b64([0.1, 0.2, 0.3, 0.4]))}),
        (
            ADMIN,
            "upsert",
            {
                "memory": _memory(
                    embedding=[1e-7, 2.5, -1, 3],
                    tier="working",
                    level="deduced",
                    summary='s\u0001"é',
                    metadata={
                        "z": [1, None, True],
                        "a": {"b": "c"},
                        "memory_type": "decision",
                        "big": 18446744073709551615,
                    },
                    tags=["t", "é"],
                    importance=0.7,
                    access_count=3,
                    superseded_by="y",
                    confidence=1,
                    linked_memory_ids=["q"],
                    created_at=None,
                    expires_at=None,
                )
            },
        ),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], metadata=None)}),
        # blank content without an embedding: keyword-only, with or without an embedder
        (ADMIN, "upsert", {"memory": _memory(content=" \t\u3000\x1c")}),
        (KEY_A, "upsert", {"memory": _memory(content="", embedding=None, tags=["t"])}),
        (
            ADMIN,
            "upsert_many",
            {"memories": [_memory(embedding=[1, 0, 0, 0]), _memory(content="\n", embedding=None)]},
        ),
        (
            KEY_A,
            "upsert_many",
            {
                "memories": [
                    _memory(embedding=[1, 0, 0, 0]),
                    _memory(namespace="org/a", content="İΣ x", embedding=_b64([0, 1, 0, 0])),
                ]
            },
        ),
    ],
)
def test_writes_are_answered_by_the_front_as_the_app_answers_them(
    searched: Server, secret: str, method: str, body: dict[str, object]
) -> None:
    _assert_written_as_the_app_writes(searched, secret, method, body, True)


@pytest.mark.parametrize(
    ("secret", "method", "body", "status"),
    [
        (KEY_A, "upsert", {"memory": _memory(namespace="org/b", embedding=[1, 0, 0, 0])}, 403),
        (ADMIN, "upsert", {"memory": _memory()}, 200),  # no vector: the app's embedder rule
        (ADMIN, "upsert", {"memory": _memory(embedding=None)}, 200),
        (ADMIN, "upsert", {"memory": _memory(content="\u200b")}, 200),  # not blank to Python
        (
            ADMIN,
            "upsert_many",
            {"memories": [_memory(content=" "), _memory(content="x", embedding=None)]},
            200,
        ),
        (ADMIN, "upsert", {"memory": _memory(embedding=[])}, 200),  # keyword-only
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0])}, 422),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 1e39])}, 400),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], metadata={"f": 1.5})}, 200),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], importance=None)}, 400),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], access_count=2.0)}, 200),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], access_count=-1)}, 400),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], confidence=1.5)}, 400),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], tier="x")}, 400),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], tags="t")}, 400),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], superseded_by="x")}, 400),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], namespace="")}, 400),
        (ADMIN, "upsert", {"memory": _memory(embedding=[1, 0, 0, 0], zz=1)}, 400),
        (
            ADMIN,
            "upsert",
            {"memory": _memory(embedding=[1, 0, 0, 0], expires_at="2030-01-01T00:00:00+00:00")},
            200,
        ),
        (ADMIN, "upsert_many", {"memories": []}, 200),
        (
            KEY_A,
            "upsert_many",
            {
                "memories": [
                    _memory(embedding=[1, 0, 0, 0]),
                    _memory(namespace="org/b", embedding=[1, 0, 0, 0]),
                ]
            },
            403,
        ),
    ],
)
def test_writes_the_front_is_unsure_of_go_to_the_app(
    searched: Server, secret: str, method: str, body: dict[str, object], status: int
) -> None:
    """Anything but a memory the front reads exactly (another tenant's namespace, no
    vector for content that is not blank with no embedder of the core's, a float in the
    metadata, a timestamp, a bad field) is written or refused by the app, as before;
    nothing is written by the front."""
    memories = [body["memory"]] if method == "upsert" else body["memories"]
    if status == 200 and memories and all(m.get("id") == "x" for m in memories):  # type: ignore[attr-defined]
        _assert_written_as_the_app_writes(searched, secret, method, body, False)
        return
    r, native = _native(searched, secret, method, wire.dumps(body))
    assert not native
    assert r.status_code == status, r.text
    if status == 403:
        assert "org/b" not in r.text
    assert searched.service.store.count("org/b") == 1


def test_a_memory_without_an_id_gets_one_from_the_app(searched: Server) -> None:
    body = {"memory": {"namespace": "org/a/w", "content": "c", "embedding": [1, 0, 0, 0]}}
    r, native = _native(searched, ADMIN, "upsert", wire.dumps(body))
    assert (r.status_code, native) == (200, False)
    assert searched.service.store.get("org/a/w", r.json()).content == "c"


def test_delete_is_answered_by_the_front_as_the_app_answers_it(searched: Server) -> None:
    store = searched.service.store
    recorder = searched.service.recorder
    assert recorder is not None
    for id in ("del-f", "del-a"):
        store.upsert(Memory(id=id, namespace="org/a/d", content=id, embedding=[1, 0, 0, 0]))
    recorder.flush()
    before = {e.op_id for e in store.list_events(EventFilter())}
    raw = wire.dumps({"namespace": "org/a/d", "id": "del-f"})
    r, native = _native(searched, KEY_A, "delete", raw)
    assert native and (r.status_code, r.content) == (200, b"null")
    recorder.flush()
    by_front = {e.op_id for e in store.list_events(EventFilter())} - before
    assert (
        _app_answer(searched, KEY_A, "delete", wire.dumps({"namespace": "org/a/d", "id": "del-a"}))
        == r.content
    )
    recorder.flush()
    by_app = {e.op_id for e in store.list_events(EventFilter())} - before - by_front
    rows = [
        [
            (e.kind, e.namespace, e.memory_id[:4], e.memory_ns, e.memory_tier, e.rank, e.detail)
            for e in store.list_events(EventFilter())
            if e.op_id in ops
        ]
        for ops in (by_front, by_app)
    ]
    assert rows[0] == rows[1] and len(rows[0]) == 1
    assert store.count("org/a/d") == 0
    for secret, body, status in [
        (ADMIN, {"namespace": "org/a/d", "id": "del-f"}, 404),  # gone
        (KEY_A, {"namespace": "org/b", "id": "m4"}, 403),
        (ADMIN, {"namespace": "org/a/d"}, 400),
    ]:
        r, native = _native(searched, secret, "delete", wire.dumps(body))
        assert (r.status_code, native) == (status, False), r.text
    assert store.count("org/b") == 1


@pytest.mark.parametrize(
    ("secret", "body", "native"),
    [
        (ADMIN, {"namespace": "org/a"}, True),
        (KEY_A, {"namespace": "org/a", "limit": 1, "offset": 1}, True),
        (KEY_A, {"namespace": "org/a/sub", "filter": None, "limit": -3}, True),
        (ADMIN, {"namespace": "nobody", "offset": 5}, True),
        (ADMIN, {"namespace": "org/a", "filter": {"tags": ["t"]}}, False),
        (ADMIN, {"namespace": "org/a", "limit": 2.0}, False),
        (ADMIN, {"namespace": "org/a", "offset": -1}, False),
        (ADMIN, {"namespace": "org/a", "limit": 2147483648}, False),
        (KEY_A, {"namespace": "org/b"}, False),
    ],
)
def test_list_is_answered_by_the_front_as_the_app_answers_it(
    searched: Server, secret: str, body: dict[str, object], native: bool
) -> None:
    raw = wire.dumps(body)
    r, answered = _native(searched, secret, "list", raw)
    assert answered == native
    status, want = _answer_or_error(searched, secret, "list", raw)
    assert r.status_code == status
    if status == 200:
        assert r.content == want


def test_writes_the_front_answers_are_in_the_store_metrics(searched: Server) -> None:
    def counted() -> dict[str, float]:
        text = httpx.get(f"{searched.url}/metrics").text
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("memini_store_upserts_total", "memini_store_deletes_total"))
        }

    before = counted()
    m = _memory(id="metric-1", embedding=[1, 0, 0, 0], metadata={"memory_type": "problem"})
    for _ in range(2):  # an insert, then an update
        assert _native(searched, ADMIN, "upsert", wire.dumps({"memory": m}))[1]
    assert _native(
        searched, ADMIN, "delete", wire.dumps({"namespace": "org/a/w", "id": "metric-1"})
    )[1]
    after = counted()
    for op in ("insert", "update"):
        key = f'memini_store_upserts_total{{memory_type="problem",op="{op}",tier="semantic"}}'
        assert after[key] == before.get(key, 0.0) + 1
    key = "memini_store_deletes_total"
    assert after[key] == before[key] + 1


_WRITE_FIELDS = st.fixed_dictionaries(
    {
        "namespace": st.sampled_from(["org/a/fz", "org/a", "org/c", ""]),
        "content": _TEXT,
        "embedding": st.lists(_FLOAT32, min_size=4, max_size=4)
        | st.lists(_FLOAT32, min_size=4, max_size=4).map(_b64),
    },
    optional={
        "tier": st.sampled_from(["working", "semantic", "x"]),
        "level": st.sampled_from(["explicit", None]),
        "summary": _TEXT,
        "metadata": st.none() | st.dictionaries(_TEXT, _META, max_size=4),
        "tags": st.lists(_TEXT, max_size=3),
        "importance": st.floats(-1e300, 1e300, allow_nan=False)
        | st.integers(-(1 << 63), (1 << 64) - 1),
        "access_count": st.integers(-3, (1 << 64) - 1),
        "confidence": st.none() | st.floats(-0.5, 1.5) | st.integers(-1, 2),
        "superseded_by": st.none() | st.sampled_from(["y", "x"]),
        "linked_memory_ids": st.lists(_TEXT, max_size=2),
        "created_at": st.none() | _TIMES.map(datetime.isoformat),
        "valid_to": st.none(),
    },
)
_SPOIL = st.none() | st.tuples(
    st.sampled_from(["namespace", "content", "embedding", "tier", "metadata", "tags", "id"]),
    _JSON,
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=st.sampled_from([ADMIN, KEY_A]),
    many=st.booleans(),
    memories=st.lists(_WRITE_FIELDS, min_size=1, max_size=3),
    spoil=_SPOIL,
)
def test_fuzz_front_writes_as_the_app(
    searched: Server,
    secret: str,
    many: bool,
    memories: list[dict[str, object]],
    spoil: tuple[str, object] | None,
) -> None:
    """Whatever the memory, a write the front answers itself stores what the app stores and
    answers what it answers (its event rows too); the rest are the app's own answers; the
    other tenant's rows never change."""
    memories = [{"id": "x", **m} for m in memories]
    if spoil is not None:  # one field of the last memory made anything JSON
        memories[-1][spoil[0]] = spoil[1]
    body: dict[str, object] = {"memories": memories} if many else {"memory": memories[-1]}
    method = "upsert_many" if many else "upsert"
    answered = _assert_written_as_the_app_writes(searched, secret, method, body, None)
    event(f"answered by the front: {answered}")
    assert searched.service.store.count("org/b") == 1


def _without_stamps(answer: bytes) -> object:
    m = wire.loads(answer)
    for name in ("id", "created_at", "updated_at", "last_accessed_at"):
        m[name] = None
    return m


def _assert_updated_as_the_app_updates(
    server: Server, secret: str, fields: dict[str, object] | None, native: bool | None
) -> bool:
    """The same update of two equal rows, one through the front and one by the app: the
    same status, answer and stored row (up to ids and stamps), and event rows."""
    store = server.service.store
    recorder = server.service.recorder
    assert recorder is not None
    tag = f"{time.monotonic_ns()}"
    for who in ("f", "a"):
        m = Memory(
            id=f"{who}{tag}", namespace="org/a/u", content="old", embedding=[1, 0, 0, 0],
            metadata={"memory_type": "problem"}, tags=["t"], confidence=0.5,
        )  # fmt: skip
        store.upsert(m)
    recorder.flush()
    before = {e.op_id for e in store.list_events(EventFilter())}
    bodies = [
        {"namespace": "org/a/u", "id": f"{who}{tag}"}
        | ({} if fields is None else {"fields": fields})
        for who in ("f", "a")
    ]
    r, answered = _native(server, secret, "update", wire.dumps(bodies[0]))
    if native is not None:
        assert answered == native, r.text
    recorder.flush()
    by_front = {e.op_id for e in store.list_events(EventFilter())} - before
    status, want = _answer_or_error(server, secret, "update", wire.dumps(bodies[1]))
    recorder.flush()
    by_app = {e.op_id for e in store.list_events(EventFilter())} - before - by_front
    assert r.status_code == status, r.text
    assert _stored(store, "org/a/u", f"f{tag}") == _stored(store, "org/a/u", f"a{tag}")
    if status != 200:
        assert not answered and not by_front and not by_app
        return answered
    assert _without_stamps(r.content) == _without_stamps(want)
    rows = [
        [
            (e.kind, e.namespace, e.memory_ns, e.memory_tier, e.memory_summary, e.rank, e.detail)
            for e in store.list_events(EventFilter())
            if e.op_id in ops
        ]
        for ops in (by_front, by_app)
    ]
    assert rows[0] == rows[1] and len(rows[0]) == 1
    return answered


@pytest.mark.parametrize(
    ("secret", "fields", "native"),
    [
        (ADMIN, None, True),
        (ADMIN, {}, True),
        (KEY_A, {"tier": "working", "summary": "s", "importance": 3}, True),
        (
            ADMIN,
            {
                "content": "New  Content",
                "embedding": _b64([0, 1, 0, 0]),
                "metadata": {"b": [1, None], "memory_type": "decision"},
                "level": None,
                "superseded_by": None,
                "confidence": None,
                "tags": [],
                "linked_memory_ids": ["z"],
                "access_count": 7,
            },
            True,
        ),
        (ADMIN, {"metadata": None, "level": "explicit", "confidence": 1}, True),
        (ADMIN, {"embedding": [1, 2, 3, 4]}, True),
        (ADMIN, {"content": "no vector"}, False),  # may need the server's embedder
        (ADMIN, {"embedding": None}, False),
        (ADMIN, {"embedding": [1, 2, 3]}, False),
        (ADMIN, {"metadata": {"f": 0.5}}, False),
        (ADMIN, {"updated_at": "2030-01-01T00:00:00+00:00"}, False),
        (ADMIN, {"created_at": None}, False),
        (ADMIN, {"tier": None}, False),
        (ADMIN, {"confidence": 2}, False),
        (ADMIN, {"superseded_by": "SELF"}, False),
        (ADMIN, {"nope": 1}, False),
        (ADMIN, {"access_count": 1.0}, False),
    ],
)
def test_update_is_answered_by_the_front_as_the_app_answers_it(
    searched: Server, secret: str, fields: dict[str, object] | None, native: bool
) -> None:
    if fields is not None and fields.get("superseded_by") == "SELF":
        # the same id in each body: the row's own
        r, answered = _native(
            searched, ADMIN, "update",
            wire.dumps({"namespace": "org/a", "id": "m1", "fields": {"superseded_by": "m1"}}),
        )  # fmt: skip
        assert (r.status_code, answered) == (400, False)
        return
    _assert_updated_as_the_app_updates(searched, secret, fields, native)


def test_update_the_front_is_unsure_of_goes_to_the_app(searched: Server) -> None:
    for secret, body, status in [
        (KEY_A, {"namespace": "org/b", "id": "m4", "fields": {"tier": "working"}}, 403),
        (ADMIN, {"namespace": "org/a", "id": "absent", "fields": {"tier": "working"}}, 404),
        (ADMIN, {"namespace": "org/a", "id": "m1", "fields": None}, 400),
    ]:
        r, native = _native(searched, secret, "update", wire.dumps(body))
        assert (r.status_code, native) == (status, False), r.text
        if status == 403:
            assert "org/b" not in r.text
    assert searched.service.store.get("org/b", "m4").tier != "working"


_UPDATE_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "content": _TEXT,
        "embedding": st.lists(_FLOAT32, min_size=4, max_size=4)
        | st.lists(_FLOAT32, min_size=4, max_size=4).map(_b64)
        | st.none(),
        "tier": st.sampled_from(["working", "procedural", "x"]),
        "level": st.sampled_from(["explicit", None]),
        "summary": _TEXT,
        "metadata": st.none() | st.dictionaries(_TEXT, _META, max_size=4),
        "tags": st.lists(_TEXT, max_size=3),
        "importance": st.floats(-1e300, 1e300, allow_nan=False)
        | st.integers(-(1 << 63), (1 << 64) - 1),
        "access_count": st.integers(-3, (1 << 64) - 1),
        "confidence": st.none() | st.floats(-0.5, 1.5),
        "superseded_by": st.none() | st.just("y"),
        "linked_memory_ids": st.lists(_TEXT, max_size=2),
        "expires_at": st.none() | _TIMES.map(datetime.isoformat),
    },
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=st.sampled_from([ADMIN, KEY_A]),
    fields=_UPDATE_FIELDS,
    spoil=st.none() | st.tuples(st.sampled_from(["content", "tags", "metadata", "tier"]), _JSON),
)
def test_fuzz_front_updates_as_the_app(
    searched: Server, secret: str, fields: dict[str, object], spoil: tuple[str, object] | None
) -> None:
    """Whatever the fields, an update the front answers itself stores and answers what the
    app does (its event row too); the rest are the app's own answers."""
    if spoil is not None:
        fields = {**fields, spoil[0]: spoil[1]}
    answered = _assert_updated_as_the_app_updates(searched, secret, fields, None)
    event(f"answered by the front: {answered}")


def test_a_store_recording_a_model_it_cannot_load_is_keyword_only_in_the_front(
    tmp_path: Path,
) -> None:
    """A store that recorded an embed model and is opened without an embedder (the model's
    weights are not the built-in ones): the front answers its text recalls keyword-only, as
    the app does, and writes blank contents keyword-only; a memory to embed is the app's,
    which refuses it naming the fix, and nothing is stored."""
    path = tmp_path / "s"
    with memini.Store.open(path, dims=4) as store:
        store.set_embed_model("someone/else-4d")
        store.upsert_many(_ROWS)
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, front=True)
    server = Server.open(path, options=opts)
    assert server.service.store._embedder is None
    server.start()
    try:
        for body in [
            {"namespace": "org/a", "query": "héllo"},
            {"namespace": ["org/a", "org/a/sub"], "query": "below", "rerank": None},
        ]:
            raw = wire.dumps(body)
            r, native = _native(server, ADMIN, "recall", raw)
            assert native and r.status_code == 200 and r.json()
            _assert_same_answer(
                "recall", body, r.content, _app_answer(server, ADMIN, "recall", raw)
            )
        blank = {"memory": _memory(id="b", content=" ")}
        _assert_written_as_the_app_writes(server, ADMIN, "upsert", blank, True)
        before = server.service.store.count("org/a/w")
        for body in [
            {"memory": _memory(id="t")},
            {"memories": [_memory(id="u", content=" "), _memory(id="t", embedding=None)]},
        ]:
            method = "upsert" if "memory" in body else "upsert_many"
            r, native = _native(server, ADMIN, method, wire.dumps(body))
            assert not native and r.status_code == 400
            assert "embedder=" in r.json()["error"]["message"]
        assert server.service.store.count("org/a/w") == before
    finally:
        server.stop()
