"""Text recall answered by the HTTP front (issues 34 and 36): with the core's `LocalEmbedder`
the front embeds the query itself, through the store's own embedder (its batching queue and
cache), without the GIL, and answers and logs exactly as the app does; with any other
embedder, or none, a text recall is the app's. Every test talks HTTP to a real server."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from embed_helpers import needs_weights
from memini import APIKey, EventFilter, Memory, hash_api_key
from memini import _wire as wire
from memini.embed import LocalEmbedder, Vectors
from memini.server import Server, ServerOptions
from test_front import (
    ADMIN,
    KEY_A,
    _app_answer,
    _assert_same_answer,
    _assert_same_rows,
    _native,
    _rows,
)

pytestmark = needs_weights

_TEXTS = [
    ("p1", "org/a", "A fast JSON parser and serializer written in Rust"),
    ("p2", "org/a", "Plotting library for interactive charts in the browser"),
    ("p3", "org/a", "A fast JSON parser and serializer written in Rust"),  # a duplicate
    ("p4", "org/a/sub", "Asynchronous HTTP client with connection pooling"),
    ("p5", "org/b", "Another tenant's private notes about JSON"),
]


def _open(path: Path, embedder: object, memories: list[Memory] | None = None) -> Server:
    """A server of a store with ``embedder``, `test_front`'s keys and ``memories`` (default:
    the package descriptions of `_TEXTS`, embedded by the store)."""
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, front=True)
    server = Server.open(path, options=opts, embedder=embedder)
    store = server.service.store
    store.put_api_key(APIKey("a", hash_api_key(KEY_A), home_ns="org/a"))
    server.service.gate.keys_changed()
    if memories is None:
        memories = [Memory(id=i, namespace=ns, content=c) for i, ns, c in _TEXTS]
    store.upsert_many(memories)
    server.start()
    return server


@pytest.fixture(scope="module")
def texted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A store embedding with the core's `LocalEmbedder`; `test_front`'s keys; a few
    package descriptions in ``org/a``, ``org/a/sub`` and ``org/b``."""
    server = _open(tmp_path_factory.mktemp("text") / "store", LocalEmbedder())
    yield server
    server.stop()


class _PythonEmbedder:
    """An embedder the core cannot run itself (any `memini.embed.Embedder`)."""

    def __init__(self) -> None:
        self.inner = LocalEmbedder()
        self.model, self.dims = self.inner.model, self.inner.dims
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        return self.inner.embed(texts)


@pytest.mark.parametrize(
    ("secret", "body"),
    [
        (ADMIN, {"namespace": "org/a", "query": "rust json library"}),
        (ADMIN, {"namespace": "org/a", "query": "charts", "vector": None, "k": 1}),
        (KEY_A, {"namespace": ["org/a/sub", "org/a"], "query": "http client, async"}),
        (ADMIN, {"namespace": ["org/a", "org/b"], "query": "JSON", "k": 3, "dedup": False}),
        (ADMIN, {"namespace": "org/a", "query": "Ünïcödé plots 📈", "rerank": None}),
        (ADMIN, {"namespace": "org/a", "query": "x" * 4096}),
        (ADMIN, {"namespace": "org/a", "query": " \t\x1c\u3000"}),  # blank: no vector
        (ADMIN, {"namespace": "org/a"}),
        (ADMIN, {"namespace": "nobody", "query": "anything"}),
    ],
)
def test_text_recall_is_answered_by_the_front_as_the_app_answers_it(
    texted: Server, secret: str, body: dict[str, object]
) -> None:
    raw = wire.dumps(body)
    r, native = _native(texted, secret, "recall", raw)
    assert native
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    _assert_same_answer("recall", body, r.content, _app_answer(texted, secret, "recall", raw))


@pytest.mark.parametrize(
    ("secret", "body", "status"),
    [
        (KEY_A, {"namespace": "org/b", "query": "json"}, 403),
        (KEY_A, {"namespace": ["org/a", "org/b"], "query": "json"}, 403),
        (ADMIN, {"namespace": "org/a", "query": "x" * 4097}, 400),
        (ADMIN, {"namespace": "org/a", "query": 7}, 400),
        (ADMIN, {"namespace": "org/a", "query": "json", "k": 0}, 400),
        (ADMIN, {"namespace": "org/a", "query": "json", "vector": "AACAPw"}, 400),
        (ADMIN, {"namespace": "org/a", "query": "json", "filter": {"tags": ["t"]}}, 200),
        (ADMIN, {"namespace": "org/a", "query": "json", "fusion": "rrf"}, 200),
        (ADMIN, {"namespace": "org/a", "query": "json", "reinforce": True}, 200),
        (ADMIN, {"namespace": "org/a", "query": "json", "quary": "typo"}, 400),
    ],
)
def test_text_recall_the_front_is_unsure_of_goes_to_the_app(
    texted: Server, secret: str, body: dict[str, object], status: int
) -> None:
    r, native = _native(texted, secret, "recall", wire.dumps(body))
    assert not native
    assert r.status_code == status, r.text
    if status == 403:
        assert "org/b" not in r.text


def test_the_front_logs_a_text_recalls_rows_as_the_app_does(texted: Server) -> None:
    """The query text is logged once, the hits as the app logs them, the caller named."""
    store = texted.service.store
    recorder = texted.service.recorder
    assert recorder is not None
    for secret, body in [
        (KEY_A, {"namespace": ["org/a", "org/a/sub"], "query": "fast parser", "k": 2}),
        (ADMIN, {"namespace": "empty/ns", "query": "nothing stored here"}),
    ]:
        raw = wire.dumps(body)
        recorder.flush()
        before = {e.op_id for e in store.list_events(EventFilter())}
        _, native = _native(texted, secret, "recall", raw)
        assert native
        recorder.flush()
        by_front = {e.op_id for e in store.list_events(EventFilter())} - before
        _app_answer(texted, secret, "recall", raw)
        recorder.flush()
        by_app = {e.op_id for e in store.list_events(EventFilter())} - before - by_front
        assert len(by_front) == len(by_app) == 1
        _assert_same_rows(_rows(store, by_front), _rows(store, by_app))
        assert {r[6] for r in _rows(store, by_front)} == {body["query"]}


def test_the_front_embeds_with_the_stores_own_embedder(texted: Server) -> None:
    """The front's text recalls go through the store's `LocalEmbedder`: its cache fills,
    and concurrent recalls share its forward passes (batched by its queue)."""
    embedder = texted.service.store._embedder
    assert isinstance(embedder, LocalEmbedder) and embedder._core is not None
    cached = embedder.cached
    _, native = _native(texted, ADMIN, "recall", wire.dumps({"namespace": "org/a", "query": "q0"}))
    assert native and embedder.cached == cached + 1
    passes = embedder._core.passes
    queries = [f"concurrent question number {i} about packages" for i in range(64)]
    errors: list[int] = []

    def client(part: list[str]) -> None:
        import httpx

        with httpx.Client(headers={"authorization": f"Bearer {ADMIN}"}) as c:
            for q in part:
                r = c.post(f"{texted.url}/v1/recall", json={"namespace": "org/a", "query": q})
                if r.status_code != 200:
                    errors.append(r.status_code)

    threads = [threading.Thread(target=client, args=(queries[i::16],)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert embedder._core.passes - passes < len(queries)


def _front_threads() -> set[int]:
    """The ids of this process's threads of the front's runtime (its workers and its
    blocking threads share the name)."""
    tasks = Path("/proc/self/task")
    return {
        int(t.name) for t in tasks.iterdir() if (t / "comm").read_text().strip() == "memini-front"
    }


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_only_a_recall_that_embeds_leaves_the_fronts_workers(tmp_path: Path) -> None:
    """With the core's embedder, a recall with a vector (or a blank query) is answered on the
    runtime's worker that read it, as without an embedder: only a query to embed (which
    waits in the embedder's queue) goes to a blocking thread, the first one started then."""
    server = _open(tmp_path / "s", LocalEmbedder())
    try:
        before = _front_threads()
        v = np.asarray(LocalEmbedder().embed(["charts"])[0], np.float32)
        bodies = [
            {"namespace": "org/a", "query": "charts", "vector": v.tolist()},
            {"namespace": "org/a", "query": "charts", "vector": wire.vector_to_base64(v)},
            {"namespace": "org/a", "query": " "},
        ]
        for body in bodies * 3:
            r, native = _native(server, ADMIN, "recall", wire.dumps(body))
            assert native and r.status_code == 200, r.text
        assert _front_threads() <= before
        r, native = _native(
            server, ADMIN, "recall", wire.dumps({"namespace": "org/a", "query": "q"})
        )
        assert native and r.status_code == 200
        assert _front_threads() - before
    finally:
        server.stop()


def test_text_recall_with_another_embedder_goes_to_the_app(tmp_path: Path) -> None:
    """A store whose embedder is Python's (not the core's model): its text recalls are the
    app's (the embedder is called once per recall); a blank query needs no embedder and is
    answered by the front."""
    embedder = _PythonEmbedder()
    server = _open(tmp_path / "s", embedder)
    try:
        calls = embedder.calls
        raw = wire.dumps({"namespace": "org/a", "query": "rust json library"})
        r, native = _native(server, ADMIN, "recall", raw)
        assert not native and r.status_code == 200
        assert embedder.calls == calls + 1
        assert r.json()
        r, native = _native(server, ADMIN, "recall", wire.dumps({"namespace": "org/a"}))
        assert native and r.status_code == 200 and r.json() == []
        assert embedder.calls == calls + 1
        v = np.asarray(embedder.embed(["charts"])[0], np.float32).tolist()
        r, native = _native(
            server, ADMIN, "recall", wire.dumps({"namespace": "org/a", "vector": v})
        )
        assert native and r.json()[0]["memory"]["id"] == "p2"
    finally:
        server.stop()


def test_weights_that_do_not_load_leave_text_recall_to_the_app(tmp_path: Path) -> None:
    """A `LocalEmbedder` whose weights cannot be read does not stop the server: its text
    recalls go to the app, which names the fix; vector recalls are still the front's."""
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"not safetensors")
    row = Memory(id="v", namespace="org/a", content="v", embedding=[1.0] + [0.0] * 383)
    server = _open(tmp_path / "s", LocalEmbedder(path=weights), [row])
    try:
        r, native = _native(
            server, ADMIN, "recall", wire.dumps({"namespace": "org/a", "query": "q"})
        )
        assert not native and r.status_code == 400
        assert "cannot be read" in r.json()["error"]["message"]
        body = {"namespace": "org/a", "vector": [1.0] + [0.0] * 383}
        r, native = _native(server, ADMIN, "recall", wire.dumps(body))
        assert native and r.status_code == 200 and len(r.json()) == 1
    finally:
        server.stop()
