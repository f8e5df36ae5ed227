"""The served store's security rules (issue 33 of round 3): the explicit table of what is
served and who may call it, the event log confined to each row's own namespace, open mode
never handing the server to the first caller, and served backups confined to one directory.
Every test talks HTTP to a real server on 127.0.0.1."""

from __future__ import annotations

import inspect
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import memini
from memini import (
    APIKey,
    AuthError,
    EventFilter,
    EventKind,
    InvalidArgumentError,
    Memory,
    NamespaceLink,
    hash_api_key,
)
from memini._served import NOT_SERVED, SERVED, Access
from memini.server import Server, ServerOptions

ADMIN = "security-admin-secret"
KEY_A = "security-key-a"


def _mem(id: str, ns: str, content: str, v: float) -> Memory:
    return Memory(id=id, namespace=ns, content=content, embedding=[v, 1.0, 0.5, -1.0])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    """An admin secret, one API key with home ``org/a``, rows in ``org/a``, ``org/a/x`` and
    ``org/b``, and a link ``org/a -> org/b`` (which the key may not follow)."""
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, backup_dir=tmp_path / "backups")
    server = Server.open(tmp_path / "store", dims=4, options=opts)
    store = server.service.store
    store.put_api_key(APIKey("a", hash_api_key(KEY_A), home_ns="org/a"))
    server.service.gate.keys_changed()
    store.upsert_many(
        [
            _mem("a1", "org/a", "alice drinks green tea", 1.0),
            _mem("x1", "org/a/x", "a note about tea in x", 2.0),
            _mem("b1", "org/b", "bob's secret tea recipe", 1.0),
        ]
    )
    store.put_link(NamespaceLink("org/a", "org/b"))
    server.start()
    yield server
    server.stop()


# ------------------------------------------------------------------------ the served table


def test_every_public_store_method_has_an_entry() -> None:
    """A method is served only with an explicit rule: a new `Store` method fails this test
    until it gets an entry in `memini._served.SERVED` (or is listed as not served)."""
    public = {
        n for n, _ in inspect.getmembers(memini.Store, inspect.isfunction) if not n.startswith("_")
    }
    missing = sorted(public - SERVED.keys() - NOT_SERVED)
    assert not missing, f"served without an entry in memini._served.SERVED: {missing}"
    assert not SERVED.keys() - public, "entries for methods the Store lacks"
    assert not SERVED.keys() & NOT_SERVED
    assert set(memini._wire.METHODS) == set(SERVED)


@pytest.mark.parametrize(("name", "rule"), sorted(SERVED.items()), ids=sorted(SERVED))
def test_every_entry_is_complete(name: str, rule: memini._served.Rule) -> None:
    params = memini._wire.METHODS[name].params
    if rule.access is Access.NAMESPACE:
        assert rule.namespaces, "a namespace-scoped method names its namespace arguments"
        for path in rule.namespaces:
            head = path.partition(".")[0].removesuffix("[]")
            assert head in params, f"{path} is not an argument of {name}"
    else:
        assert not rule.namespaces
    if rule.access is Access.CONFINED:
        assert rule.confine is not None, "a server-wide answer needs its confine rule"
    # a method taking a namespace argument is never left unscoped by mistake
    if rule.access in (Access.ANY, Access.CONFINED):
        assert not {"namespace", "src", "dst", "from_ns", "to_ns"} & params.keys()


def _post(url: str, method: str, body: object, key: str | None = ADMIN) -> httpx.Response:
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    return httpx.post(f"{url}/v1/{method}", json=body, headers=headers)


# ------------------------------------------------------------------------ the event log


def test_multi_namespace_recall_is_logged_under_each_hits_namespace(served: Server) -> None:
    """An admin's recall over ``org/a/x`` and ``org/b`` was logged under the joined name
    ``"org/a/x,org/b"``, which the key of ``org/a`` owned by prefix: it read org/b's rows."""
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        hits = admin.recall(["org/a/x", "org/b"], "tea", k=5)
        assert {r.memory.namespace for r in hits} == {"org/a/x", "org/b"}
    assert served.service.recorder is not None
    served.service.recorder.flush()
    with memini.connect(served.url, api_key=KEY_A, retry_for=0) as key:
        with pytest.raises(AuthError):
            key.list_events(EventFilter(namespace="org/b"))
        for ns in ("org/a/x,org/b", "org/a/x"):
            rows = key.list_events(EventFilter(namespace=ns))
            assert all(e.memory_ns in ("", "org/a/x") for e in rows), ns
            assert not any("bob" in e.memory_summary for e in rows)
        (row,) = key.list_events(EventFilter(namespace="org/a/x", kinds=[EventKind.RECALL]))
        assert row.memory_id == "x1"
        assert row.detail["namespaces"] == ["org/a/x", "org/b"]
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        rows = admin.list_events(EventFilter(kinds=[EventKind.RECALL]))
        assert {(e.namespace, e.memory_ns) for e in rows} == {
            ("org/a/x", "org/a/x"),
            ("org/b", "org/b"),
        }


def test_linked_recall_hits_are_logged_under_the_linked_namespace(served: Server) -> None:
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        hits = admin.recall("org/a", "tea", k=5, linked=True)
        assert {r.via for r in hits} == {"org/a", "org/b"}
    assert served.service.recorder is not None
    served.service.recorder.flush()
    with memini.connect(served.url, api_key=KEY_A, retry_for=0) as key:
        rows = key.list_events(EventFilter(namespace="org/a", kinds=[EventKind.RECALL]))
        assert [e.memory_id for e in rows] == ["a1"]


def test_a_search_that_finds_nothing_is_logged_in_each_namespace_searched(
    served: Server,
) -> None:
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        assert admin.keyword_search("org/a", "zebra") == []
        assert admin.recall(["org/a", "org/b"], "zebra", k=3) == []
    assert served.service.recorder is not None
    served.service.recorder.flush()
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        rows = admin.list_events(EventFilter(kinds=[EventKind.RECALL]))
    assert sorted((e.detail["method"], e.namespace) for e in rows) == [
        ("keyword_search", "org/a"),
        ("recall", "org/a"),
        ("recall", "org/b"),
    ]
    assert all(e.query == "zebra" and not e.memory_id for e in rows)


def test_a_key_never_reads_rows_of_another_namespace_filed_under_its_own(
    served: Server,
) -> None:
    """Rows written before the fix (or appended by the admin) that report another
    namespace's memory under the key's namespace are cut from the key's answer."""
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        admin.append_events(
            [
                memini.Event("op1", "recall", "org/a", "q", "a1", "org/a", rank=0),
                memini.Event("op1", "recall", "org/a", "q", "b1", "org/b", rank=1),
            ]
        )
    with memini.connect(served.url, api_key=KEY_A, retry_for=0) as key:
        rows = key.list_events(EventFilter(namespace="org/a"))
    assert [e.memory_id for e in rows] == ["a1"]


# ------------------------------------------------------------------------ open mode


def test_open_mode_never_hands_key_management_to_the_first_caller(tmp_path: Path) -> None:
    server = Server.open(
        tmp_path / "store",
        dims=4,
        options=ServerOptions(port=0, mcp=False, backup_dir=tmp_path / "backups"),
    )
    url = server.start()
    try:
        with memini.connect(url) as anonymous:
            anonymous.upsert(_mem("m", "ns", "open mode still serves data", 1.0))
            assert anonymous.count("ns") == 1
            for call in (
                lambda s: s.put_api_key(APIKey("k", hash_api_key("k"), home_ns="ns")),
                lambda s: s.list_api_keys(),
                lambda s: s.delete_api_key("k"),
                lambda s: s.authenticate("k"),
                lambda s: s.get_api_key_by_hash(hash_api_key("k")),
                lambda s: s.rename_api_key_namespaces("ns", "other"),
                lambda s: s.backup("snap"),
            ):
                with pytest.raises(AuthError, match="needs the admin secret"):
                    call(anonymous)
            assert anonymous.count("ns") == 1  # still open: no key was stored
        assert server.service.store.list_api_keys() == []
        assert not (tmp_path / "backups" / "snap").exists()
    finally:
        server.stop()


# ------------------------------------------------------------------------ backup


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("../escape", id="dot-dot"),
        pytest.param("a/../../escape", id="nested-dot-dot"),
        pytest.param("/tmp/memini-escape", id="absolute-outside"),
        pytest.param("", id="empty"),
        pytest.param(".", id="the-directory-itself"),
    ],
)
def test_served_backup_stays_below_the_backup_dir(
    served: Server, tmp_path: Path, path: str
) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    with (
        memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin,
        pytest.raises(InvalidArgumentError, match="backup"),
    ):
        admin.backup(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("/tmp/memini-escape").exists()


def test_served_backup_symlink_out_of_the_dir_is_refused(served: Server, tmp_path: Path) -> None:
    backups = tmp_path / "backups"
    backups.mkdir()
    (backups / "out").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with (
        memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin,
        pytest.raises(InvalidArgumentError, match="outside"),
    ):
        admin.backup("out/snap")


def test_served_backup_writes_below_the_backup_dir(served: Server, tmp_path: Path) -> None:
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        admin.backup("nightly/one")
    with (
        memini.connect(served.url, api_key=KEY_A, retry_for=0) as key,
        pytest.raises(AuthError, match="admin secret"),
    ):
        key.backup("two")
    with memini.Store.open(tmp_path / "backups" / "nightly" / "one") as copy:
        assert copy.count("org/b") == 1


def test_served_backup_without_a_backup_dir_is_refused(tmp_path: Path) -> None:
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False)
    server = Server.open(None, dims=4, options=opts)
    url = server.start()
    try:
        r = _post(url, "backup", {"path": str(tmp_path / "snap")})
        assert r.status_code == 403
        assert "--backup-dir" in r.json()["error"]["message"]
        assert not (tmp_path / "snap").exists()
    finally:
        server.stop()


def test_backup_to_an_unwritable_path_is_a_400() -> None:
    """A directory nobody can create (here: in /proc, refused even to root) is the caller's
    input, not a store failure: 400, not 500."""
    with (
        memini.Store.open(None, dims=4) as store,
        pytest.raises(InvalidArgumentError, match="cannot create the backup directory"),
    ):
        store.backup("/proc/memini-backup-test")


# ------------------------------------------------------------------------ /metrics


def _active(url: str, headers: dict[str, str] | None = None) -> float:
    text = httpx.get(f"{url}/metrics", headers=headers or {}).text
    line = next(
        x for x in text.splitlines() if x.startswith('memini_memories_active{tier="semantic"}')
    )
    return float(line.split()[-1])


def test_a_scrape_never_walks_the_rows(tmp_path: Path) -> None:
    """The live-row gauges are refreshed in the background every ``metrics_every`` seconds;
    a scrape renders what is there (it walked every row on each scrape)."""
    slow = ServerOptions(port=0, admin_key=ADMIN, mcp=False, metrics_every=3600)
    server = Server.open(None, dims=4, options=slow)
    url = server.start()
    try:
        assert _active(url) == 0
        server.service.store.upsert(_mem("m", "ns", "one row", 1.0))
        assert _active(url) == 0  # not refreshed by the scrape
    finally:
        server.stop()
    fast = ServerOptions(port=0, admin_key=ADMIN, mcp=False, metrics_every=0.05)
    server = Server.open(None, dims=4, options=fast)
    url = server.start()
    try:
        server.service.store.upsert(_mem("m", "ns", "one row", 1.0))
        deadline = time.monotonic() + 10
        while _active(url) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _active(url) == 1
    finally:
        server.stop()


def test_metrics_may_require_the_admin_secret(tmp_path: Path) -> None:
    opts = ServerOptions(port=0, admin_key=ADMIN, mcp=False, metrics_admin_only=True)
    server = Server.open(None, dims=4, options=opts)
    server.service.store.put_api_key(APIKey("a", hash_api_key(KEY_A), home_ns="org/a"))
    server.service.gate.keys_changed()
    url = server.start()
    try:
        assert httpx.get(f"{url}/metrics").status_code == 401
        key = {"authorization": f"Bearer {KEY_A}"}
        assert httpx.get(f"{url}/metrics", headers=key).status_code == 403
        assert _active(url, {"authorization": f"Bearer {ADMIN}"}) == 0
    finally:
        server.stop()


# ------------------------------------------------------------------------ slow clients


def _slow_header(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/count HTTP/1.1\r\nhost: x\r\n")  # and never the rest
    return sock


@pytest.mark.parametrize("front", [True, False])
def test_slow_headers_are_cut_off_and_connections_capped(front: bool) -> None:
    """1,100 connections sending their headers slowly made every normal request fail (with
    the front and with uvicorn on the public socket)."""
    opts = ServerOptions(
        port=0, admin_key=ADMIN, mcp=False, header_timeout=0.5, max_connections=16, front=front
    )
    server = Server.open(None, dims=4, options=opts)
    url = server.start()
    try:
        slow = [_slow_header(server.port) for _ in range(16)]
        # over the cap: answered at once (503), never left hanging
        r = httpx.post(f"{url}/v1/ping", json={}, headers={"authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 503
        for sock in slow:  # each is closed once its headers are late
            sock.settimeout(10)
            assert sock.recv(100) == b""
            sock.close()
        with memini.connect(url, api_key=ADMIN, retry_for=0) as admin:
            admin.ping()
    finally:
        server.stop()


@pytest.mark.parametrize("front", [True, False])
def test_mcp_bodies_have_the_same_limits(tmp_path: Path, front: bool) -> None:
    opts = ServerOptions(port=0, admin_key=ADMIN, max_body=1000, body_timeout=0.5, front=front)
    server = Server.open(None, dims=4, options=opts)
    url = server.start()
    headers = {
        "authorization": f"Bearer {ADMIN}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    try:
        r = httpx.post(f"{url}/mcp", content=b"x" * 2000, headers=headers)
        assert r.status_code == 413
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            head = (
                f"POST /mcp HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN}\r\n"
                "content-type: application/json\r\ncontent-length: 500\r\n\r\n{"
            )
            sock.sendall(head.encode())  # and the rest of the body never comes
            sock.settimeout(10)
            assert b" 408 " in sock.recv(1000).split(b"\r\n")[0] + b" "
    finally:
        server.stop()


# ------------------------------------------------------------------------ the log's size


def test_a_served_query_is_stored_once_per_call(served: Server, tmp_path: Path) -> None:
    """A 1 MB query was stored on every row of a call (one keyword_search grew the meta
    database by ~100 MB): now once, in event_queries, and read back on every row."""
    query = "tea " + "x" * 3000
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        admin.upsert_many([_mem(f"t{i}", "org/a", f"tea number {i}", 1.0) for i in range(8)])
        hits = admin.keyword_search("org/a", query, k=5)
        assert len(hits) == 5
    assert served.service.recorder is not None
    served.service.recorder.flush()
    import sqlite3

    db = sqlite3.connect(tmp_path / "store" / "meta.sqlite3")
    try:
        stored = db.execute("SELECT sum(length(query)) FROM events").fetchone()[0]
        once = db.execute("SELECT count(*), sum(length(query)) FROM event_queries").fetchone()
    finally:
        db.close()
    assert stored == 0 and once == (1, len(query))
    with memini.connect(served.url, api_key=ADMIN, retry_for=0) as admin:
        rows = admin.list_events(EventFilter(namespace="org/a", kinds=[EventKind.RECALL]))
        assert len(rows) == 5 and all(e.query == query for e in rows)
        found = admin.list_events(EventFilter(text="TEA XXX"))  # the text filter sees it
        assert {e.op_id for e in found} == {rows[0].op_id}


def test_the_event_log_is_capped_by_default() -> None:
    opts = ServerOptions()
    assert 0 < opts.event_keep_max <= 10_000_000
    assert opts.event_retention is not None


# ------------------------------------------------------------------------ ids


def test_a_taken_id_is_a_409_that_names_no_other_namespace(served: Server) -> None:
    body = {"memory": {"id": "b1", "namespace": "org/a", "content": "mine now?"}}
    r = _post(served.url, "upsert", body, KEY_A)
    assert r.status_code == 409
    message = r.json()["error"]["message"]
    assert "org/b" not in message and "bob" not in message


def test_the_server_makes_ids_for_memories_sent_without_one(served: Server) -> None:
    """A caller that wants no signal of which ids other tenants hold picks none."""
    r = _post(served.url, "upsert", {"memory": {"namespace": "org/a", "content": "x"}}, KEY_A)
    assert r.status_code == 200
    new = r.json()
    assert isinstance(new, str) and new
    many = {"memories": [{"namespace": "org/a", "content": f"y{i}"} for i in range(3)]}
    assert _post(served.url, "upsert_many", many, KEY_A).json() == 3
    with memini.connect(served.url, api_key=KEY_A, retry_for=0) as key:
        assert key.get("org/a", new).content == "x"
        assert key.count("org/a") == 1 + 1 + 3
        # an explicit empty id stays refused, as by the embedded store
        with pytest.raises(InvalidArgumentError):
            key.upsert(Memory(id="", namespace="org/a", content="z"))
        assert key.upsert(Memory(id="given", namespace="org/a", content="z")) is None
