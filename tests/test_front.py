"""The HTTP front of ``memini serve`` (issue 34): auth decided once, in the core, from the
key snapshot the server pushes; the Python app behind it believes the decision only from
the front; bad bodies never reach the store. Every test talks HTTP to a real server."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memini
from memini import APIKey, Memory, hash_api_key
from memini.server import Server, ServerOptions

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
    """``memini serve`` runs uvicorn on the public socket itself (no app socket behind it);
    ``--front`` puts the front there and the app on a private Unix socket. Both serve, and
    both stop on SIGTERM leaving no private directory."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "memini.cli", "serve", "--store", str(tmp_path / "s")]
    argv += ["--dims", "4", "--port", str(port), *(["--front"] if front else [])]
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
