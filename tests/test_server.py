"""`memini serve` beyond the store suite (which runs on a `RemoteStore` through conftest's
``remote`` param): auth and namespace isolation, the event log of served calls, bad input
on the wire (with a hypothesis fuzz of the body decoder), health/metrics/OpenAPI, the async
client. Every test talks HTTP to a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memini
from memini import (
    APIKey,
    AuthError,
    DimensionMismatchError,
    EventFilter,
    EventKind,
    Filter,
    InvalidArgumentError,
    Memory,
    NamespaceLink,
    NotFoundError,
    hash_api_key,
)
from memini.server import Server, ServerOptions

ADMIN = "admin-secret-for-tests"
KEY_A = "key-a-secret"
KEY_B = "key-b-secret"


def vec(i: float) -> list[float]:
    return [float(i), 1.0, 0.5, -1.0]


def mem(id: str, ns: str, content: str = "", v: float | None = 1.0) -> Memory:
    return Memory(
        id=id,
        namespace=ns,
        content=content or f"memory {id} about cats",
        embedding=None if v is None else vec(v),
    )


@pytest.fixture(params=[True, False], ids=["front", "no-front"])
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    """A server over an on-disk store with an admin secret, two API keys (homes ``team/a``
    and ``team/b``) and a few rows in ``team/a``, ``team/a/sub``, ``team/ab`` (a prefix
    trap) and ``team/b``; behind the front (the default) and with uvicorn on the public
    socket (``front=False``)."""
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, front=request.param)
    server = Server.open(tmp_path / "store", dims=4, options=opts)
    store = server.service.store
    store.put_api_key(APIKey("a", hash_api_key(KEY_A), home_ns="team/a", default_ns="team/a"))
    store.put_api_key(APIKey("b", hash_api_key(KEY_B), home_ns="team/b"))
    server.service.gate.keys_changed()
    for ns in ("team/a", "team/a/sub", "team/ab", "team/b"):
        store.upsert_many([mem(f"{ns}#{i}", ns, v=float(i)) for i in range(3)])
    store.put_link(NamespaceLink("team/b", "team/ab"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def admin(served: Server) -> Iterator[memini.RemoteStore]:
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as s:
        yield s


@pytest.fixture
def key_a(served: Server) -> Iterator[memini.RemoteStore]:
    with memini.connect(served.url, api_key=KEY_A, retry_for=0) as s:
        yield s


# ------------------------------------------------------------------------------- auth


def test_credentials_are_required_and_checked(served: Server) -> None:
    for key in (None, "wrong", KEY_A + "x"):
        with (
            memini.connect(served.url, api_key=key, retry_for=0) as s,
            pytest.raises(AuthError) as e,
        ):
            s.count("team/a")
        assert "secret" not in str(e.value) or key is None
        if key:
            assert key not in str(e.value)
    r = httpx.post(f"{served.url}/v1/count", json={"namespace": "team/a"})
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "AuthError"
    r = httpx.post(
        f"{served.url}/v1/count", json={"namespace": "x"}, headers={"authorization": "Basic x"}
    )
    assert r.status_code == 401


def test_disabled_key_is_refused_at_once(served: Server, admin: memini.RemoteStore) -> None:
    with memini.connect(served.url, api_key=KEY_A, retry_for=0) as s:
        assert s.count("team/a") == 3
        admin.put_api_key(APIKey("a", hash_api_key(KEY_A), home_ns="team/a", disabled=True))
        with pytest.raises(AuthError, match="unknown or disabled"):
            s.count("team/a")


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s, ns: s.get(ns, f"{ns}#0"), id="get"),
        pytest.param(lambda s, ns: s.get_embedding(ns, f"{ns}#0"), id="get_embedding"),
        pytest.param(lambda s, ns: s.count(ns), id="count"),
        pytest.param(lambda s, ns: s.list(ns), id="list"),
        pytest.param(lambda s, ns: s.vector_search(ns, vec(0)), id="vector_search"),
        pytest.param(lambda s, ns: s.vector_search_many(ns, [vec(0)]), id="vector_search_many"),
        pytest.param(lambda s, ns: s.keyword_search(ns, "cats"), id="keyword_search"),
        pytest.param(lambda s, ns: s.ids_by_prefix(ns, "t", 10), id="ids_by_prefix"),
        pytest.param(lambda s, ns: s.upsert(mem("new", ns)), id="upsert"),
        pytest.param(lambda s, ns: s.upsert_many([mem("new", ns)]), id="upsert_many"),
        pytest.param(lambda s, ns: s.update(ns, f"{ns}#0", summary="x"), id="update"),
        pytest.param(lambda s, ns: s.delete(ns, f"{ns}#0"), id="delete"),
        pytest.param(lambda s, ns: s.delete_namespace(ns), id="delete_namespace"),
        pytest.param(lambda s, ns: s.reassign(ns, [f"{ns}#0"], "team/a"), id="reassign-from"),
        pytest.param(lambda s, ns: s.reassign("team/a", ["team/a#0"], ns), id="reassign-to"),
        pytest.param(lambda s, ns: s.list_links(ns), id="list_links"),
        pytest.param(lambda s, ns: s.put_link(NamespaceLink("team/a", ns)), id="put_link-dst"),
        pytest.param(lambda s, ns: s.delete_link(ns, "team/a"), id="delete_link"),
        pytest.param(lambda s, ns: s.list_events(EventFilter(namespace=ns)), id="list_events"),
        pytest.param(
            lambda s, ns: s.list_events(EventFilter(namespaces=["team/a", ns])),
            id="list_events-namespaces",
        ),
        pytest.param(
            lambda s, ns: s.append_events([memini.Event("op", "recall", ns)]),
            id="append_events",
        ),
        pytest.param(lambda s, ns: s.set_superseded(ns, f"{ns}#0", f"{ns}#1"), id="supersede"),
    ],
)
@pytest.mark.parametrize("other", ["team/b", "team/ab", "team", ""])
def test_a_key_never_touches_another_namespace(
    served: Server, key_a: memini.RemoteStore, admin: memini.RemoteStore, call: Any, other: str
) -> None:
    before = {ns: admin.count(ns) for ns in admin.list_namespaces()}
    with pytest.raises(AuthError) as e:
        call(key_a, other)
    message = str(e.value)
    # the key's own home (or how to name it), and nothing else
    assert "team/a" in message or "must name its namespaces" in message
    for name in ("team/b", "team/ab", "#0", "cats"):
        assert name not in message
    assert {ns: admin.count(ns) for ns in admin.list_namespaces()} == before
    # its own subtree works for the same call
    call(key_a, "team/a/sub")


def test_store_wide_answers_are_confined(key_a: memini.RemoteStore) -> None:
    assert key_a.list_namespaces() == ["team/a", "team/a/sub"]
    assert {a.ns for a in key_a.namespace_activity()} == {"team/a", "team/a/sub"}
    assert key_a.list_all_links() == []
    key_a.put_link(NamespaceLink("team/a", "team/a/sub"))
    assert [(x.src, x.dst) for x in key_a.list_all_links()] == [("team/a", "team/a/sub")]
    with pytest.raises(AuthError, match="API key must name its namespaces"):
        key_a.list_events()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.list_api_keys(),
        lambda s: s.put_api_key(APIKey("c", hash_api_key("c"), home_ns="team/a")),
        lambda s: s.delete_api_key("b"),
        lambda s: s.authenticate(KEY_B),
        lambda s: s.get_api_key_by_hash(hash_api_key(KEY_B)),
        lambda s: s.stats(),
        lambda s: s.sweep_expired(),
        lambda s: s.prune_events(),
        lambda s: s.compact(),
    ],
)
def test_a_key_cannot_manage_keys_or_the_store(key_a: memini.RemoteStore, call: Any) -> None:
    with pytest.raises(AuthError, match="admin secret only"):
        call(key_a)


def test_admin_may_do_everything(admin: memini.RemoteStore) -> None:
    assert [k.name for k in admin.list_api_keys()] == ["a", "b"]
    assert admin.count("team/b") == 3
    assert "team/b" in admin.list_namespaces()


def test_open_access_only_on_loopback_without_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server.open(None, dims=4, options=ServerOptions(port=0, mcp=False))
    assert "WITHOUT authentication" not in caplog.text  # said when the socket opens
    with caplog.at_level(logging.WARNING, "memini.server"):
        url = server.start()
    assert "WITHOUT authentication" in caplog.text
    try:
        with memini.connect(url) as s:
            s.upsert(mem("x", "ns"))
            assert s.count("ns") == 1
            # keys are managed in process (open access may not: test_server_security.py)
            server.service.store.put_api_key(APIKey("k", hash_api_key("k"), home_ns="ns"))
            server.service.gate.keys_changed()
            with pytest.raises(AuthError):  # a key is stored now: open access ends
                s.count("ns")
    finally:
        server.stop()
    with pytest.raises(InvalidArgumentError, match="MEMINI_ADMIN_KEY"):
        Server.open(None, dims=4, options=ServerOptions(host="0.0.0.0", port=0, mcp=False))


def test_secrets_are_never_logged(served: Server, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        for key in (ADMIN, KEY_A, "not-a-key-secret"):
            with (
                memini.connect(served.url, api_key=key, retry_for=0) as s,
                pytest.raises(memini.MeminiError),
            ):
                s.get("team/b", "missing")
    for secret in (ADMIN, KEY_A, "not-a-key-secret"):
        assert secret not in caplog.text


# ------------------------------------------------------------------------------- events


def test_served_searches_and_writes_are_logged(
    served: Server, key_a: memini.RemoteStore, admin: memini.RemoteStore
) -> None:
    hits = key_a.vector_search("team/a", vec(0), k=2)
    key_a.keyword_search("team/a", "cats", k=2)
    key_a.upsert(mem("w1", "team/a"))
    key_a.update("team/a", "w1", summary="changed")
    key_a.delete("team/a", "w1")
    assert served.service.recorder is not None
    served.service.recorder.flush()
    events = admin.list_events(EventFilter(namespace="team/a"))
    by_kind: dict[EventKind, list[memini.Event]] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    recalls = sorted(by_kind[EventKind.RECALL], key=lambda e: (e.op_id, e.rank))
    vector_op = [e for e in recalls if e.detail["method"] == "vector_search"]
    assert [(e.memory_id, e.rank, e.score) for e in vector_op] == [
        (h.memory.id, i, h.score) for i, h in enumerate(hits)
    ]
    assert len({e.op_id for e in vector_op}) == 1
    keyword_op = [e for e in recalls if e.detail["method"] == "keyword_search"]
    assert keyword_op and all(e.query == "cats" for e in keyword_op)
    assert [e.memory_id for e in by_kind[EventKind.REMEMBER]] == ["w1"]
    assert by_kind[EventKind.UPDATE][0].memory_summary == "changed"
    assert by_kind[EventKind.FORGET][0].memory_id == "w1"
    assert all(e.detail["caller"] == "a" for e in events)
    # a key reads its own log only
    assert key_a.list_events(EventFilter(namespace="team/a"))
    with pytest.raises(AuthError):
        key_a.list_events(EventFilter(namespace="team/b"))


def test_overlapping_searches_answer_and_log_as_the_store_does(
    served: Server, key_a: memini.RemoteStore, admin: memini.RemoteStore
) -> None:
    """Searches that overlap start in the core (decoded on the event loop, encoded by the
    core thread): the same answers as the store in process, one logged operation each,
    errors raised as they are, and nothing left counted in flight."""
    store = served.service.store
    queries = [vec(i / 4) for i in range(12)]
    calls = 8 * len(queries)

    def one(i: int) -> tuple[list[str], list[str]]:
        q = queries[i % len(queries)]
        got = [h.memory.id for h in key_a.vector_search("team/a", q, k=3)]
        words = [h.memory.id for h in key_a.keyword_search("team/a", "cats", k=3)]
        with pytest.raises(DimensionMismatchError):
            key_a.vector_search("team/a", [1.0, 2.0], k=3)
        with pytest.raises(AuthError):
            key_a.vector_search("team/b", q, k=3)
        return got, words

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(calls)))
    for i, (got, words) in enumerate(answers):
        q = queries[i % len(queries)]
        assert got == [h.memory.id for h in store.vector_search("team/a", q, k=3)]
        assert words == [h.memory.id for h in store.keyword_search("team/a", "cats", k=3)]
    assert served.service.in_flight == 0
    assert served.service.recorder is not None
    served.service.recorder.flush()
    events = admin.list_events(EventFilter(namespace="team/a", kinds=[EventKind.RECALL]))
    ops: dict[str, list[memini.Event]] = {}
    for e in events:
        ops.setdefault(e.op_id, []).append(e)
    assert len(ops) == 2 * calls  # the refused calls are not logged
    assert all(len(rows) == 3 for rows in ops.values())
    assert all(
        sorted(e.rank for e in rows) == [0, 1, 2] and all(e.memory_id for e in rows)
        for rows in ops.values()
    )


def test_event_log_is_pruned_by_retention(tmp_path: Path) -> None:
    opts = ServerOptions(port=0, mcp=False, event_keep_max=5)
    server = Server.open(None, dims=4, options=opts)
    url = server.start()
    try:
        with memini.connect(url) as s:
            for i in range(4):
                s.upsert_many([mem(f"m{i}-{j}", "ns") for j in range(3)])
            recorder = server.service.recorder
            assert recorder is not None
            recorder.flush()
            assert len(s.list_events()) == 12
            assert recorder.prune() == 7
            assert len(s.list_events()) == 5
    finally:
        server.stop()


# ------------------------------------------------------------------------------- bad input


def _post(url: str, method: str, body: bytes, key: str = ADMIN) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/{method}",
        content=body,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )


@pytest.mark.parametrize(
    ("method", "body", "status"),
    [
        pytest.param("upsert", b"{", 400, id="malformed"),
        pytest.param("upsert", b"[1, 2]", 400, id="not-an-object"),
        pytest.param("count", b'{"namespace": NaN}', 400, id="nan-literal"),
        pytest.param(
            "vector_search", b'{"namespace": "team/a", "vector": [NaN, 1, 1, 1]}', 400, id="nan"
        ),
        pytest.param(
            "vector_search", b'{"namespace": "team/a", "vector": [1e999, 1, 1, 1]}', 400, id="inf"
        ),
        pytest.param("vector_search", b'{"namespace": "team/a", "vector": [1, 1]}', 422, id="dims"),
        pytest.param("count", b'{"namespace": 5}', 400, id="wrong-type"),
        pytest.param("count", b'{"namespace": "x", "nope": 1}', 400, id="unknown-argument"),
        pytest.param("count", b"{}", 400, id="missing-argument"),
        pytest.param(
            "upsert",
            b'{"memory": {"id": "z", "namespace": "team/a", "content": "c", "colour": 1}}',
            400,
            id="unknown-field",
        ),
        pytest.param(
            "upsert", b'{"memory": {"id": "z", "namespace": "team/a"}}', 400, id="missing-field"
        ),
        pytest.param(
            "upsert",
            b'{"memory": {"id": "z", "namespace": "team/a", "content": "c", '
            b'"created_at": "yesterday"}}',
            400,
            id="bad-datetime",
        ),
        pytest.param(
            "upsert",
            b'{"memory": {"id": "z", "namespace": "team/a", "content": "c", '
            b'"embedding": [1, 2, 3]}}',
            422,
            id="wrong-dims-embedding",
        ),
        pytest.param("upsert", '{"memory": "é"}'.encode("latin-1"), 400, id="not-utf8"),
        pytest.param(
            "upsert",
            b'{"memory": {"id": "z", "namespace": "team/a", "content": "c", "metadata": '
            + b'{"a": ' * 1000
            + b"1"
            + b"}" * 1000
            + b"}}",
            400,
            id="metadata-1000-deep",
        ),
        pytest.param(
            "count",
            b'{"namespace": "team/a", "filter": {"metadata": '
            + b'{"a": ' * 1000
            + b"1"
            + b"}" * 1000
            + b"}}",
            400,
            id="filter-1000-deep",
        ),
        pytest.param(
            "vector_search",
            b'{"namespace": "team/a", "vector": ' + b"[" * 1000 + b"]" * 1000 + b"}",
            400,
            id="vector-1000-deep",
        ),
        pytest.param(
            "update",
            b'{"namespace": "team/a", "id": "team/a#0", "fields": {"id": "w"}}',
            400,
            id="update-fields-id",
        ),
        pytest.param(
            "update",
            b'{"namespace": "team/a", "id": "team/a#0", "fields": {"namespace": "team/b"}}',
            400,
            id="update-fields-namespace",
        ),
        pytest.param("no_such_method", b"{}", 404, id="unknown-method"),
        pytest.param("get", b'{"namespace": "team/a", "id": "nope"}', 404, id="not-found"),
    ],
)
def test_bad_input_gets_a_json_error_and_changes_nothing(
    served: Server, admin: memini.RemoteStore, method: str, body: bytes, status: int
) -> None:
    before = admin.list("team/a", Filter(include_expired=True, include_superseded=True))
    r = _post(served.url, method, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] and err["message"]
    assert admin.list("team/a", Filter(include_expired=True, include_superseded=True)) == before
    assert admin.count("team/a") == 3  # still serving


def test_oversized_body_is_413(tmp_path: Path) -> None:
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, max_body=1000)
    server = Server.open(None, dims=4, options=opts)
    url = server.start()
    try:
        with memini.connect(url, api_key=ADMIN, retry_for=0) as s:
            with pytest.raises(InvalidArgumentError, match="limit"):
                s.upsert(mem("big", "ns", content="x" * 2000))
            assert s.count("ns") == 0

            def chunks() -> Iterator[bytes]:  # no content-length: refused while streaming
                yield b'{"memory": {"id": "a", "namespace": "ns", "content": "'
                for _ in range(100):
                    yield b"x" * 100
                yield b'"}}'

            r = httpx.post(
                f"{url}/v1/upsert", content=chunks(), headers={"authorization": f"Bearer {ADMIN}"}
            )
            assert r.status_code == 413
            s.upsert(mem("small", "ns"))
            assert s.count("ns") == 1
    finally:
        server.stop()


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    # a container holds at least one child: hypothesis refuses an `extend` whose draws may
    # never use its argument (HypothesisDeprecationWarning, raised as an error); the empty
    # ones are drawn on their own
    lambda children: (
        st.lists(children, min_size=1, max_size=4)
        | st.dictionaries(st.text(max_size=12), children, min_size=1, max_size=4)
        | st.sampled_from([[], {}])
    ),
    max_leaves=12,
)
_field_names = st.sampled_from(
    [
        "id",
        "namespace",
        "content",
        "tier",
        "embedding",
        "metadata",
        "tags",
        "created_at",
        "vector",
        "k",
        "filter",
        "memory",
        "memories",
        "query",
        "limit",
        "fields",
        "x",
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    method=st.sampled_from(
        [
            "upsert",
            "upsert_many",
            "vector_search",
            "keyword_search",
            "list",
            "update",
            "count",
            "put_link",
            "append_events",
            "get_embedding",
        ]
    ),
    body=st.dictionaries(_field_names, _json_values, max_size=5)
    | st.builds(
        lambda d: {"memory": d},
        st.dictionaries(_field_names, _json_values, max_size=6),
    ),
)
def test_fuzz_the_body_decoder(
    fuzz_server: tuple[str, memini.RemoteStore], method: str, body: Any
) -> None:
    url, admin = fuzz_server
    r = _post(url, method, json.dumps(body).encode())
    assert r.status_code in (200, 400, 404, 409, 422), r.text
    if r.status_code != 200:
        assert set(r.json()["error"]) == {"type", "message"}
    assert admin.count("fuzz-guard") == 1  # the server serves, the guard row is intact


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[tuple[str, memini.RemoteStore]]:
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, events=False)
    server = Server.open(None, dims=4, options=opts)
    url = server.start()
    with memini.connect(url, api_key=ADMIN, retry_for=0) as admin:
        admin.upsert(mem("guard", "fuzz-guard"))
        yield url, admin
    server.stop()


def test_client_side_nan_and_dims_errors(admin: memini.RemoteStore) -> None:
    with pytest.raises(InvalidArgumentError, match="not finite"):
        admin.vector_search("team/a", [math.nan, 1, 1, 1])
    with pytest.raises(DimensionMismatchError, match="3 dims"):
        admin.vector_search("team/a", np.ones(3, np.float32))
    with pytest.raises(NotFoundError):
        admin.get("team/a", "missing")


# ------------------------------------------------------------------------------- endpoints


def test_health_metrics_openapi(served: Server, admin: memini.RemoteStore) -> None:
    admin.count("team/a")
    assert httpx.get(f"{served.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{served.url}/readyz").json() == {"status": "ready"}
    text = httpx.get(f"{served.url}/metrics").text
    assert 'memini_http_requests_total{method="count",status="200"}' in text
    assert "memini_http_request_seconds_bucket" in text
    assert "memini_store_upserts_total" in text
    assert 'memini_memories_active{tier="semantic"}' in text
    doc = httpx.get(f"{served.url}/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    op = doc["paths"]["/v1/vector_search"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["namespace", "vector"]
    assert schema["properties"]["k"] == {"type": "integer", "minimum": 1, "maximum": 10_000}
    assert set(doc["components"]["schemas"]["Memory"]["properties"]) >= {"id", "embedding"}
    for name in memini.client.RemoteStore.__dict__:
        if not name.startswith("_") and name != "close":
            assert f"/v1/{name}" in doc["paths"], name


def _answer(sock: socket.socket, request: bytes) -> tuple[bytes, int]:
    """Send one raw HTTP/1.1 request; the whole answer and how many reads it took."""
    sock.sendall(request)
    data, reads = b"", 0
    while b"\r\n\r\n" not in data or len(data) < _answer_length(data):
        chunk = sock.recv(1 << 20)
        assert chunk, f"the server closed the connection after {data!r}"
        data, reads = data + chunk, reads + 1
    return data, reads


def _answer_length(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return len(head) + 4 + length


def test_an_answer_is_sent_in_one_write(served: Server) -> None:
    """Status line, headers and body leave in one send (`memini.server._http`): the client
    reads a whole answer at once, on a kept-alive connection and on one the client closes."""
    body = json.dumps({"namespace": "team/a", "vector": vec(1), "k": 3}).encode()
    request = (
        b"POST /v1/vector_search HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {ADMIN}\r\ncontent-length: {len(body)}\r\n".encode()
    )
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        for _ in range(3):  # kept alive
            answer, reads = _answer(sock, request + b"\r\n" + body)
            assert answer.startswith(b"HTTP/1.1 200")
            assert len(json.loads(answer.partition(b"\r\n\r\n")[2])) == 3
            assert reads == 1
        answer, reads = _answer(sock, request + b"connection: close\r\n\r\n" + body)
        assert answer.startswith(b"HTTP/1.1 200") and reads == 1
        assert sock.recv(10) == b""  # then closed, after the answer


def test_async_client(served: Server) -> None:
    from memini import aio

    async def main() -> list[int]:
        async with aio.connect(served.url, api_key=KEY_A) as s:
            await s.upsert(mem("async1", "team/a"))
            got = await s.get("team/a", "async1")
            assert got.id == "async1"
            hits = await asyncio.gather(*(s.vector_search("team/a", vec(i)) for i in range(8)))
            with pytest.raises(AuthError):
                await s.count("team/b")
            return [len(h) for h in hits]

    assert asyncio.run(main()) == [4] * 8


def test_remote_clients_have_every_store_method() -> None:
    import inspect

    from memini.client import AsyncRemoteStore, RemoteStore

    public = {
        n for n, _ in inspect.getmembers(memini.Store, inspect.isfunction) if not n.startswith("_")
    } - {"open"}
    for cls in (RemoteStore, AsyncRemoteStore):
        missing = sorted(n for n in public if not callable(getattr(cls, n, None)))
        assert not missing, f"{cls.__name__} lacks {missing}"
        for name in public - {"close", "update"}:
            local = inspect.signature(getattr(memini.Store, name))
            assert inspect.signature(getattr(cls, name)) == local, name
