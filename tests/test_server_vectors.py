"""Vectors on the wire (issue 34): a vector travels as a JSON array of numbers or as the
base64 of its little-endian float32 bytes, anywhere one travels; answers carry base64 when
the request asks (``Memini-Vector-Format: base64``) or sent base64 itself; `RemoteStore`
and `AsyncRemoteStore` send base64. Every test talks HTTP to a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import memini
from memini import DimensionMismatchError, InvalidArgumentError, Memory
from memini import _wire as wire
from memini.server import Server, ServerOptions

ADMIN = "vectors-admin-secret"
B64 = {wire.VECTOR_FORMAT: "base64"}

# bit patterns a decimal detour could lose: -0.0, the smallest subnormal, the largest
# subnormal, the smallest normal, float32's extremes, an inexact decimal
EDGES = np.array(
    [
        -0.0,
        np.float32(1e-45),
        np.nextafter(np.float32(np.finfo(np.float32).tiny), np.float32(0)),
        np.finfo(np.float32).tiny,
        np.finfo(np.float32).max,
        np.finfo(np.float32).min,
        np.float32(0.1),
        -np.float32(3.4028235e38),
    ],
    dtype=np.float32,
)
DIMS = len(EDGES)


def b64(v: Any) -> str:
    return base64.b64encode(np.asarray(v, "<f4").tobytes()).decode()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False)
    server = Server.open(tmp_path / "store", dims=DIMS, options=opts)
    server.start()
    yield server
    server.stop()


def post(server: Server, method: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    return httpx.post(
        f"{server.url}/v1/{method}",
        json=body,
        headers={"Authorization": f"Bearer {ADMIN}", **(headers or {})},
    )


def bits(v: Any) -> bytes:
    return np.asarray(v, np.float32).tobytes()


def test_remote_store_round_trips_edge_values_bit_exact(served: Server) -> None:
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as s:
        s.upsert(Memory(id="e", namespace="n", content="edges", embedding=EDGES))
        s.upsert_many([Memory(id="l", namespace="n", content="list", embedding=EDGES.tolist())])
        s.update("n", "e", embedding=EDGES[::-1].copy())
        got = s.get_embedding("n", "e")
        assert got is not None and got.dtype == np.float32
        assert bits(got) == bits(EDGES[::-1])
        got[0] = 1.0  # a writable array, as a local store's
        assert bits(s.get_embedding("n", "l")) == bits(EDGES)
        hits = s.vector_search("n", EDGES, k=2)
        assert {h.memory.id for h in hits} == {"e", "l"}
        assert len(s.vector_search_many("n", np.stack([EDGES, EDGES]), k=1)) == 2
        assert len(s.vector_search_many("n", [EDGES, EDGES[::-1]], k=1)) == 2


def test_the_client_sends_base64_and_the_header() -> None:
    method = wire.METHODS["vector_search"]
    body = method.encode_args(method.bind(("n", EDGES), {}))
    assert body["vector"] == b64(EDGES)
    many = wire.METHODS["vector_search_many"]
    assert (
        many.encode_args(many.bind(("n", np.stack([EDGES, EDGES])), {}))["vectors"]
        == [b64(EDGES)] * 2
    )
    # a list of floats goes as the float32 the store would make of it
    assert method.encode_args(method.bind(("n", [0.1] * 4), {}))["vector"] == b64([0.1] * 4)
    # a value whose float32 overflows keeps its form: the store names the value it got
    assert method.encode_args(method.bind(("n", [1e39] * 4), {}))["vector"] == [1e39] * 4
    with memini.connect("http://127.0.0.1:9", retry_for=0) as s:
        assert s._headers[wire.VECTOR_FORMAT] == "base64"


def test_both_forms_are_accepted_from_plain_http(served: Server) -> None:
    for i, embedding in enumerate((EDGES.tolist(), b64(EDGES))):
        memory = {"id": f"m{i}", "namespace": "n", "content": "x", "embedding": embedding}
        assert post(served, "upsert", {"memory": memory}).status_code == 200
    for vector in (EDGES.tolist(), b64(EDGES)):
        answer = post(served, "vector_search", {"namespace": "n", "vector": vector, "k": 2})
        assert answer.status_code == 200, answer.text
        assert {h["memory"]["id"] for h in answer.json()} == {"m0", "m1"}
    batch = {"namespace": "n", "vectors": [b64(EDGES), EDGES.tolist()], "k": 1}
    assert len(post(served, "vector_search_many", batch).json()) == 2
    recall = {"namespace": "n", "query": "x", "vector": b64(EDGES), "k": 2}
    assert post(served, "recall", recall).status_code == 200
    update = {"namespace": "n", "id": "m0", "fields": {"embedding": b64(EDGES[::-1])}}
    assert post(served, "update", update).status_code == 200
    assert bits(served.service.store.get_embedding("n", "m0")) == bits(EDGES[::-1])
    assert bits(served.service.store.get_embedding("n", "m1")) == bits(EDGES)


def test_get_embedding_answers_in_the_requested_form(served: Server) -> None:
    served.service.store.upsert(Memory(id="e", namespace="n", content="x", embedding=EDGES))
    ask = {"namespace": "n", "id": "e"}
    plain = post(served, "get_embedding", ask).json()
    assert isinstance(plain, list) and bits(plain) == bits(EDGES)
    for value in ("base64", "BASE64"):
        text = post(served, "get_embedding", ask, {"Memini-Vector-Format": value}).json()
        assert text == b64(EDGES)
    # any other value asks for nothing: the default form
    assert isinstance(post(served, "get_embedding", ask, {wire.VECTOR_FORMAT: "x"}).json(), list)
    # a keyword-only row has no vector in either form
    served.service.store.upsert(Memory(id="k", namespace="n", content="x"))
    assert post(served, "get_embedding", {"namespace": "n", "id": "k"}, B64).json() is None


def test_a_base64_request_gets_a_base64_answer() -> None:
    method = wire.METHODS["get_embedding"]
    assert method.answers_base64(True, {"namespace": "n", "id": "e"})
    assert not method.answers_base64(False, {"namespace": "n", "id": "e"})
    assert not wire.METHODS["vector_search"].answers_base64(True, {"vector": "AAAA"})


SHORT = b64(EDGES[:3])  # three float32 values in a store of eight


@pytest.mark.parametrize(
    ("method", "body"),
    [
        pytest.param("vector_search", {"namespace": "n", "vector": SHORT}, id="query"),
        pytest.param(
            "vector_search_many", {"namespace": "n", "vectors": [b64(EDGES), SHORT]}, id="row"
        ),
        pytest.param(
            "upsert",
            {"memory": {"id": "w", "namespace": "n", "content": "x", "embedding": SHORT}},
            id="embedding",
        ),
        pytest.param(
            "update",
            {"namespace": "n", "id": "w", "fields": {"embedding": SHORT}},
            id="update-embedding",
        ),
    ],
)
def test_a_base64_vector_of_the_wrong_length_is_a_dimension_mismatch(
    served: Server, method: str, body: dict[str, Any]
) -> None:
    served.service.store.upsert(Memory(id="w", namespace="n", content="x", embedding=EDGES))
    answer = post(served, method, body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["type"] == "DimensionMismatchError"
    assert bits(served.service.store.get_embedding("n", "w")) == bits(EDGES)  # unchanged


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("AAAAAA", "not valid base64", id="no-padding"),
        pytest.param("AA=A" + b64(EDGES)[4:], "not valid base64", id="padding-inside"),
        pytest.param("AAAA AAA=", "not valid base64", id="space"),
        pytest.param("ÀÀÀÀ", "not valid base64", id="not-ascii"),
        pytest.param(base64.b64encode(b"12345").decode(), "5 bytes", id="not-whole-floats"),
    ],
)
def test_bad_base64_is_a_400_naming_the_fix(served: Server, text: str, why: str) -> None:
    answer = post(served, "vector_search", {"namespace": "n", "vector": text})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "InvalidArgumentError"
    assert why in error["message"] and "little-endian float32" in error["message"]
    assert "vector" in error["message"]


def test_non_finite_base64_is_refused_as_an_array_value_is(served: Server) -> None:
    served.service.store.upsert(Memory(id="w", namespace="n", content="x", embedding=EDGES))
    for bad in (np.nan, np.inf, -np.inf):
        v = EDGES.copy()
        v[2] = bad
        as_array = {"$memini:float": repr(float(bad))}  # how a client sends one in an array
        for form in (b64(v), [*EDGES[:2].tolist(), as_array, *EDGES[3:].tolist()]):
            answer = post(served, "vector_search", {"namespace": "n", "vector": form})
            assert answer.status_code == 400, answer.text
            assert "index 2" in answer.json()["error"]["message"]
            memory = {"id": "w", "namespace": "n", "content": "y", "embedding": form}
            assert post(served, "upsert", {"memory": memory}).status_code == 400
    assert bits(served.service.store.get_embedding("n", "w")) == bits(EDGES)


def test_remote_errors_match_the_local_store(served: Server, tmp_path: Path) -> None:
    """The client's base64 changes no error: what a local store refuses, the remote one
    refuses with the same class and message."""
    bad_values: list[Any] = [
        np.full(DIMS, np.nan, np.float32),
        np.full(DIMS, 1e39),  # overflows float32
        np.array([1.0, 1e39, np.nan] + [1.0] * (DIMS - 3)),  # an overflow named first
        [1.0, 2.0, float("nan")] + [1.0] * (DIMS - 3),
        np.ones(DIMS + 1, np.float32),
        np.ones((2, DIMS), np.float32),
        [1.0] * (DIMS - 1),
    ]
    with (
        memini.Store.open(tmp_path / "local", dims=DIMS) as local,
        memini.connect(served.url, api_key=ADMIN, retry_for=0) as remote,
    ):
        for v in bad_values:
            got = []
            for s in (local, remote):
                with pytest.raises((InvalidArgumentError, DimensionMismatchError)) as e:
                    s.vector_search("n", v)
                got.append((type(e.value), str(e.value)))
            assert got[0] == got[1], v


def test_async_client_sends_base64(served: Server) -> None:
    async def main() -> None:
        async with memini.aio.connect(served.url, api_key=ADMIN, retry_for=0) as s:
            await s.upsert(Memory(id="a", namespace="n", content="x", embedding=EDGES))
            got = await s.get_embedding("n", "a")
            assert bits(got) == bits(EDGES)
            assert [h.memory.id for h in await s.vector_search("n", EDGES, k=1)] == ["a"]

    asyncio.run(main())
