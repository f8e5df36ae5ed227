"""Opening, locking and closing a store (API.md section 1)."""

from __future__ import annotations

import errno
import itertools
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memini
from embed_helpers import needs_weights
from memini import (
    APIKey,
    DimensionMismatchError,
    Event,
    EventKind,
    Filter,
    InvalidArgumentError,
    Memory,
    NamespaceLink,
    Store,
    StoreClosedError,
    StoreLockedError,
    Tier,
)

NS = "ns"
NOW = datetime(2030, 1, 1, tzinfo=UTC)

# A stored vector and a query whose score differs for every metric:
# l2 -> 1 / (1 + sqrt(2)), cos -> 2 / sqrt(5), ip -> 2.
PROBE_STORED = [1.0, 0.0, 0.0, 0.0]
PROBE_QUERY = np.array([2.0, 1.0, 0.0, 0.0], dtype=np.float32)
PROBE_SCORE = {"l2": 1.0 / (1.0 + math.sqrt(2.0)), "cos": 2.0 / math.sqrt(5.0), "ip": 2.0}

# Every method API.md defines on Store (sections 1, 4 and 5).
API_METHODS = [
    "open", "close", "ping", "stats", "backup", "compact", "embed_model", "set_embed_model",
    "upsert", "upsert_many", "update", "get", "get_embedding", "ids_by_prefix",
    "predecessor_ids", "get_by_fingerprint", "delete", "set_superseded", "restore",
    "vector_search", "vector_search_many", "keyword_search", "reinforce",
    "delete_if_expired_before", "list_expired", "list", "count", "sweep_expired",
    "list_namespaces", "delete_namespace", "reassign", "retier", "set_confidence",
    "mark_contradicted", "namespace_activity", "put_link", "delete_link", "list_links",
    "list_all_links", "rename_link_endpoints", "put_api_key", "authenticate", "delete_api_key",
    "list_api_keys", "get_api_key_by_hash", "rename_api_key_namespaces", "append_events",
    "list_events", "prune_events", "refresh_active_counts",
]  # fmt: skip


def mem(id: str, ns: str = NS, **kw: Any) -> Memory:
    kw.setdefault("content", f"content of {id}")
    return Memory(id=id, namespace=ns, **kw)


def probe_score(s: Store) -> float:
    """Score of PROBE_QUERY against PROBE_STORED: tells which metric the store uses."""
    s.upsert(mem("probe", ns="probe-ns", embedding=PROBE_STORED))
    [hit] = s.vector_search("probe-ns", PROBE_QUERY, k=1)
    return hit.score


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter of this venv (a separate process, its own locks)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,  # a guard against a blocking open, not a timing assertion
        check=False,
    )


# Prints the class name of the exception a second open raises, or "opened".
TRY_OPEN = """
import sys
import time
from memini import Store
try:
    s = Store.open(sys.argv[1])
except Exception as e:
    print(type(e).__name__)
else:
    s.close()
    print("opened")
"""

# Opens the store, writes one row, says "ready" and holds the store until killed.
HOLD_OPEN = """
import sys
import time
from memini import Memory, Store
s = Store.open(sys.argv[1], dims=4)
s.upsert(Memory(id="held", namespace="ns", content="written by the holder", embedding=[1, 2, 3, 4]))
print("ready", flush=True)
sys.stdin.read()
"""


def open_from_subprocess(path: Path) -> str:
    proc = run_python(TRY_OPEN, str(path))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ---------------------------------------------------------------------------------------------
# dims and metric


@pytest.mark.parametrize("kind", ["disk", "memory"])
def test_new_store_requires_dims(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "store" if kind == "disk" else None
    with pytest.raises(InvalidArgumentError):
        Store.open(path)
    # The failed open left nothing locked or half-created behind.
    with Store.open(path, dims=4) as s:
        s.upsert(mem("a"))
        assert s.get(NS, "a").content == "content of a"


@pytest.mark.parametrize("kind", ["disk", "memory"])
@pytest.mark.parametrize("dims", [0, -1, -384])
def test_dims_must_be_at_least_one(tmp_path: Path, kind: str, dims: int) -> None:
    path = tmp_path / "store" if kind == "disk" else None
    with pytest.raises(InvalidArgumentError):
        Store.open(path, dims=dims)


def test_one_dim_store_works(open_store: Callable[..., Store]) -> None:
    s = open_store(dims=1)
    s.upsert(mem("a", embedding=[0.5]))
    [hit] = s.vector_search(NS, np.array([1.5], dtype=np.float32), k=1)
    assert hit.memory.id == "a"
    assert hit.score == pytest.approx(1.0 / 2.0, abs=1e-12)


def test_options_are_keyword_only(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        Store.open(tmp_path / "store", 4)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        pytest.param(None, "l2", id="default-is-l2"),
        pytest.param("l2", "l2", id="l2"),
        pytest.param("cos", "cos", id="cos"),
        pytest.param("ip", "ip", id="ip"),
    ],
)
def test_metric_of_new_store(
    open_store: Callable[..., Store], metric: str | None, expected: str
) -> None:
    s = open_store(metric=metric)
    assert probe_score(s) == pytest.approx(PROBE_SCORE[expected], abs=1e-9)


@pytest.mark.parametrize("kind", ["disk", "memory"])
@pytest.mark.parametrize("metric", ["cosine", "euclidean", "dot", "", "l1"])
def test_unknown_metric_rejected(tmp_path: Path, kind: str, metric: str) -> None:
    path = tmp_path / "store" if kind == "disk" else None
    with pytest.raises(InvalidArgumentError):
        Store.open(path, dims=4, metric=metric)  # type: ignore[arg-type]


def test_unknown_metric_on_reopen_rejected(tmp_path: Path) -> None:
    path = tmp_path / "store"
    Store.open(path, dims=4).close()
    with pytest.raises(InvalidArgumentError):
        Store.open(path, metric="cosine")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dims", "metric"),
    [
        pytest.param(None, None, id="both-none"),
        pytest.param(8, None, id="same-dims"),
        pytest.param(None, "cos", id="same-metric"),
        pytest.param(8, "cos", id="same-both"),
    ],
)
def test_reopen_uses_stored_dims_and_metric(
    tmp_path: Path, dims: int | None, metric: str | None
) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=8, metric="cos") as s:
        s.upsert(mem("a", embedding=[1, 0, 0, 0, 0, 0, 0, 0]))
    with Store.open(path, dims=dims, metric=metric) as s:  # type: ignore[arg-type]
        with pytest.raises(DimensionMismatchError):
            s.upsert(mem("b", embedding=[1, 0, 0, 0]))
        s.upsert(mem("b", embedding=[0, 1, 0, 0, 0, 0, 0, 0]))
        q = np.array([2, 1, 0, 0, 0, 0, 0, 0], dtype=np.float32)
        hits = s.vector_search(NS, q, k=2)
        # cosine, not l2: the stored metric is in force
        assert [h.memory.id for h in hits] == ["a", "b"]
        assert hits[0].score == pytest.approx(2 / math.sqrt(5), abs=1e-9)
        assert hits[1].score == pytest.approx(1 / math.sqrt(5), abs=1e-9)


@pytest.mark.parametrize(
    ("stored", "asked", "words"),
    [
        pytest.param({"dims": 4}, {"dims": 8}, ["4", "8"], id="dims-4-then-8"),
        pytest.param({"dims": 384}, {"dims": 383}, ["384", "383"], id="dims-384-then-383"),
        pytest.param(
            {"dims": 4, "metric": "cos"}, {"metric": "ip"}, ["cos", "ip"], id="cos-then-ip"
        ),
        pytest.param({"dims": 4}, {"metric": "cos"}, ["l2", "cos"], id="default-l2-then-cos"),
        pytest.param(
            {"dims": 4, "metric": "ip"}, {"dims": 4, "metric": "l2"}, ["ip", "l2"], id="ip-then-l2"
        ),
    ],
)
def test_reopen_with_other_dims_or_metric(
    tmp_path: Path, stored: dict[str, Any], asked: dict[str, Any], words: list[str]
) -> None:
    path = tmp_path / "store"
    with Store.open(path, **stored) as s:
        s.upsert(mem("a", embedding=[1.0] * stored["dims"]))
    with pytest.raises(DimensionMismatchError) as info:
        Store.open(path, **asked)
    message = str(info.value)
    for word in words:
        assert re.search(rf"\b{re.escape(word)}\b", message), (word, message)
    # Nothing was changed or left locked by the refused open.
    with Store.open(path) as s:
        assert s.get(NS, "a").content == "content of a"
        np.testing.assert_array_equal(s.get_embedding(NS, "a"), [1.0] * stored["dims"])


# ---------------------------------------------------------------------------------------------
# the directory


@pytest.mark.parametrize(
    "make_path",
    [
        pytest.param(lambda tmp: tmp / "store", id="missing-dir"),
        pytest.param(lambda tmp: tmp / "a" / "b" / "store", id="missing-parents"),
        pytest.param(lambda tmp: tmp, id="existing-empty-dir"),
        pytest.param(lambda tmp: str(tmp / "as-str"), id="str-path"),
    ],
)
def test_directory_is_created(tmp_path: Path, make_path: Callable[[Path], Any]) -> None:
    path = make_path(tmp_path)
    with Store.open(path, dims=4) as s:
        s.upsert(mem("a"))
    assert Path(path).is_dir()
    with Store.open(path) as s:
        assert s.get(NS, "a").content == "content of a"


@pytest.mark.parametrize(
    ("path", "match"),
    [
        pytest.param("", r"^path is empty: name a directory \(write '\.'", id="empty-str"),
        pytest.param(
            "file",
            r"^path '.*/file' must be a directory, but it is an existing file",
            id="existing-file",
        ),
        pytest.param(
            Path("file"), r"^path '.*/file' must be a directory", id="existing-file-pathlike"
        ),
        pytest.param(
            "file/sub",
            r"^path '.*/file/sub' must be a directory, but '.*/file' is an existing file",
            id="below-a-file",
        ),
        pytest.param("a\x00b", r"^path contains a NUL character", id="nul"),
    ],
)
def test_path_that_cannot_be_a_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any, match: str
) -> None:
    """Nothing is created (an empty path would have made a store in the current directory)
    and the file is untouched."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("not a store")
    with pytest.raises(InvalidArgumentError, match=match):
        Store.open(path, dims=4)
    assert [p.name for p in tmp_path.iterdir()] == ["file"]
    assert (tmp_path / "file").read_text() == "not a store"
    backup_match = match.replace("^path", "^backup path")  # backup() follows the same rule
    with Store.open(None, dims=4) as s, pytest.raises(InvalidArgumentError, match=backup_match):
        s.backup(path)
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_an_unwritable_directory_raises_with_the_os_error_as_cause(tmp_path: Path) -> None:
    """A storage failure is a MeminiError whose __cause__ is the OSError of its errno, so a
    caller tells a refused permission from a full disk without reading the message."""
    ro = tmp_path / "read-only"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        # root ignores permission bits: then a directory of sysfs, which refuses everyone
        writable = os.access(ro, os.W_OK)
        path = Path("/sys/memini-test-store") if writable else ro / "store"
        with pytest.raises(memini.MeminiError) as raised:
            Store.open(path, dims=4)
    finally:
        ro.chmod(0o755)
    assert type(raised.value) is memini.MeminiError
    assert isinstance(raised.value.__cause__, PermissionError)
    assert raised.value.__cause__.errno in {errno.EACCES, errno.EPERM}


def test_dot_is_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Store.open(".", dims=4) as s:
        s.upsert(mem("a"))
    with Store.open(tmp_path) as s:
        assert s.get(NS, "a").content == "content of a"


@pytest.mark.parametrize(
    ("breadth", "match"),
    [
        pytest.param(0, r"^search_breadth must be between 1 and 2\*\*24, got 0", id="zero"),
        pytest.param(-1, r"between 1 and 2\*\*24, got -1", id="negative"),
        pytest.param(2**24 + 1, r"between 1 and 2\*\*24, got 16777217", id="too-big"),
        pytest.param(2**70, r"between 1 and 2\*\*24", id="beyond-64-bits"),
        pytest.param(True, r"^search_breadth must be an int, got bool", id="bool"),
        pytest.param(64.0, r"^search_breadth must be an int, got float", id="float"),
        pytest.param("64", r"^search_breadth must be an int, got str", id="str"),
    ],
)
def test_search_breadth_out_of_range(tmp_path: Path, breadth: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        Store.open(tmp_path / "s", dims=4, search_breadth=breadth)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("breadth", [1, np.int64(16), 2**24])
def test_search_breadth_in_range(breadth: int) -> None:
    with Store.open(None, dims=4, search_breadth=breadth) as s:
        s.upsert(mem("a", embedding=[1, 0, 0, 0]))
        assert [h.memory.id for h in s.vector_search(NS, [1, 0, 0, 0], k=1)] == ["a"]


def test_in_memory_store_writes_nothing_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with Store.open(None, dims=4) as s:
        s.upsert(mem("a", embedding=[1, 2, 3, 4]))
        s.set_embed_model("m")
        assert s.get(NS, "a").content == "content of a"
    assert list(tmp_path.iterdir()) == []


def test_in_memory_stores_are_independent() -> None:
    with Store.open(None, dims=4) as a, Store.open(None, dims=4) as b:
        a.upsert(mem("x"))
        assert a.count(NS) == 1
        assert b.count(NS) == 0
        assert b.list_namespaces() == []


# ---------------------------------------------------------------------------------------------
# context manager, close, closed store


def test_context_manager_closes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        assert isinstance(s, Store)
        s.upsert(mem("a"))
    with pytest.raises(StoreClosedError):
        s.ping()
    # closed means unlocked
    with Store.open(path) as again:
        assert again.get(NS, "a").content == "content of a"


def test_context_manager_closes_on_exception(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with pytest.raises(KeyError, match="boom"), Store.open(path, dims=4) as s:
        s.upsert(mem("a"))
        raise KeyError("boom")
    with pytest.raises(StoreClosedError):
        s.get(NS, "a")
    with Store.open(path) as again:
        assert again.get(NS, "a").content == "content of a"


def test_close_is_idempotent(open_store: Callable[..., Store]) -> None:
    s = open_store()
    assert s.close() is None
    assert s.close() is None
    with pytest.raises(StoreClosedError):
        s.ping()


def test_close_is_idempotent_via_context_manager(tmp_path: Path) -> None:
    with Store.open(tmp_path / "store", dims=4) as s:
        s.close()
    s.close()


def test_store_has_every_api_method() -> None:
    missing = [name for name in API_METHODS if not callable(getattr(Store, name, None))]
    assert missing == []


def _closed_calls(tmp: Path) -> list[Any]:
    q = np.ones(4, dtype=np.float32)
    calls: list[tuple[str, Callable[[Store], Any]]] = [
        ("ping", lambda s: s.ping()),
        ("stats", lambda s: s.stats()),
        ("backup", lambda s: s.backup(tmp / "backup")),
        ("compact", lambda s: s.compact()),
        ("embed_model", lambda s: s.embed_model()),
        ("set_embed_model", lambda s: s.set_embed_model("m")),
        ("upsert", lambda s: s.upsert(mem("new"))),
        ("upsert_many", lambda s: s.upsert_many([mem("new")])),
        ("update", lambda s: s.update(NS, "a", content="changed")),
        ("get", lambda s: s.get(NS, "a")),
        ("get_embedding", lambda s: s.get_embedding(NS, "a")),
        ("ids_by_prefix", lambda s: s.ids_by_prefix(NS, "a", 10)),
        ("predecessor_ids", lambda s: s.predecessor_ids(NS, "a")),
        (
            "get_by_fingerprint",
            lambda s: s.get_by_fingerprint(NS, Tier.SEMANTIC, memini.fingerprint("content of a")),
        ),
        ("delete", lambda s: s.delete(NS, "a")),
        ("set_superseded", lambda s: s.set_superseded(NS, "a", "b")),
        ("restore", lambda s: s.restore(NS, "a")),
        ("vector_search", lambda s: s.vector_search(NS, q)),
        ("vector_search_many", lambda s: s.vector_search_many(NS, np.ones((2, 4), np.float32))),
        ("keyword_search", lambda s: s.keyword_search(NS, "content")),
        ("reinforce", lambda s: s.reinforce(NS, ["a"], NOW)),
        ("delete_if_expired_before", lambda s: s.delete_if_expired_before(NS, "a", NOW)),
        ("list_expired", lambda s: s.list_expired(NOW, 0)),
        ("list", lambda s: s.list(NS)),
        ("list-with-filter", lambda s: s.list(NS, Filter(), 10, 0)),
        ("count", lambda s: s.count(NS)),
        ("sweep_expired", lambda s: s.sweep_expired(NOW)),
        ("list_namespaces", lambda s: s.list_namespaces()),
        ("delete_namespace", lambda s: s.delete_namespace(NS)),
        ("reassign", lambda s: s.reassign(NS, ["a"], "other")),
        ("retier", lambda s: s.retier(NS, "a", Tier.WORKING, None)),
        ("set_confidence", lambda s: s.set_confidence(NS, "a", 0.5, NOW)),
        ("mark_contradicted", lambda s: s.mark_contradicted(NS, "a", "b", 0.1, NOW)),
        ("namespace_activity", lambda s: s.namespace_activity()),
        ("put_link", lambda s: s.put_link(NamespaceLink(NS, "other"))),
        ("delete_link", lambda s: s.delete_link(NS, "other")),
        ("list_links", lambda s: s.list_links(NS)),
        ("list_all_links", lambda s: s.list_all_links()),
        ("rename_link_endpoints", lambda s: s.rename_link_endpoints(NS, "other")),
        ("put_api_key", lambda s: s.put_api_key(APIKey("k", memini.hash_api_key("secret")))),
        ("authenticate", lambda s: s.authenticate("secret")),
        ("delete_api_key", lambda s: s.delete_api_key("k")),
        ("list_api_keys", lambda s: s.list_api_keys()),
        ("get_api_key_by_hash", lambda s: s.get_api_key_by_hash(memini.hash_api_key("secret"))),
        ("rename_api_key_namespaces", lambda s: s.rename_api_key_namespaces(NS, "other")),
        ("append_events", lambda s: s.append_events([Event("op", EventKind.GET, NS)])),
        ("list_events", lambda s: s.list_events()),
        ("prune_events", lambda s: s.prune_events()),
        ("refresh_active_counts", lambda s: s.refresh_active_counts()),
    ]
    return calls


CLOSED_CALL_NAMES = [name for name, _ in _closed_calls(Path("unused"))]


@pytest.mark.parametrize("name", CLOSED_CALL_NAMES)
def test_every_method_raises_after_close(
    open_store: Callable[..., Store], tmp_path: Path, name: str
) -> None:
    s = open_store()
    s.upsert(mem("a", embedding=[1, 2, 3, 4]))
    s.close()
    call = dict(_closed_calls(tmp_path))[name]
    with pytest.raises(StoreClosedError):
        call(s)
    assert not (tmp_path / "backup").exists()


def test_closed_store_releases_lock_and_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "store"
    s = Store.open(path, dims=4)
    s.upsert(mem("a", embedding=[1, 2, 3, 4]))
    s.close()
    with pytest.raises(StoreClosedError):
        s.upsert(mem("b"))
    with Store.open(path) as again:
        assert again.count(NS) == 1
        np.testing.assert_array_equal(again.get_embedding(NS, "a"), [1, 2, 3, 4])


# ---------------------------------------------------------------------------------------------
# the directory lock


@pytest.mark.parametrize(
    "second_path",
    [
        pytest.param(lambda store_dir: store_dir, id="same-path"),
        pytest.param(lambda store_dir: str(store_dir), id="same-path-as-str"),
        pytest.param(lambda store_dir: str(store_dir) + "/", id="trailing-slash"),
        pytest.param(
            lambda store_dir: store_dir.parent / "sub" / ".." / store_dir.name, id="dot-dot"
        ),
        pytest.param("symlink", id="via-symlink"),
        pytest.param("relative", id="relative-path"),
    ],
)
def test_second_open_in_process_is_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second_path: Any
) -> None:
    store_dir = tmp_path / "store"
    (tmp_path / "sub").mkdir()
    first = Store.open(store_dir, dims=4)
    try:
        first.upsert(mem("a", embedding=[1, 2, 3, 4]))
        if second_path == "symlink":
            other: Any = tmp_path / "link"
            other.symlink_to(store_dir, target_is_directory=True)
        elif second_path == "relative":
            monkeypatch.chdir(tmp_path)
            other = "store"
        else:
            other = second_path(store_dir)
        for kwargs in ({}, {"dims": 4}, {"dims": 4, "metric": "l2"}):
            with pytest.raises(StoreLockedError):
                Store.open(other, **kwargs)
        # the holder is unharmed and keeps working
        first.upsert(mem("b"))
        assert first.get(NS, "a").content == "content of a"
        assert [h.memory.id for h in first.vector_search(NS, np.ones(4, np.float32), k=1)] == ["a"]
    finally:
        first.close()
    with Store.open(store_dir) as again:
        assert sorted(m.id for m in again.list(NS)) == ["a", "b"]


def test_second_open_from_another_process_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        s.upsert(mem("a"))
        assert open_from_subprocess(path) == "StoreLockedError"
        s.upsert(mem("b"))
        assert s.count(NS) == 2
    assert open_from_subprocess(path) == "opened"


def test_lock_released_when_owner_is_sigkilled(tmp_path: Path) -> None:
    path = tmp_path / "store"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_OPEN, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        if line != "ready\n":
            holder.kill()
            _, err = holder.communicate()
            pytest.fail(f"holder did not start: {line!r} {err}")
        with pytest.raises(StoreLockedError):
            Store.open(path)
        assert open_from_subprocess(path) == "StoreLockedError"
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for stream in (holder.stdin, holder.stdout, holder.stderr):
            if stream is not None:
                stream.close()
    assert holder.returncode == -signal.SIGKILL
    with Store.open(path) as s:
        # the write that returned before the kill is there, vector included
        assert s.get(NS, "held").content == "written by the holder"
        np.testing.assert_array_equal(s.get_embedding(NS, "held"), [1, 2, 3, 4])
        [hit] = s.vector_search(NS, np.array([1, 2, 3, 4], np.float32), k=1)
        assert hit.memory.id == "held"


def test_in_memory_stores_do_not_lock_each_other() -> None:
    with Store.open(None, dims=4), Store.open(None, dims=4) as b:
        b.ping()


# ---------------------------------------------------------------------------------------------
# fork


def _child_probe(s: Store) -> dict[str, str]:
    """Runs in the fork child: what each call does there."""

    def outcome(call: Callable[[], Any]) -> str:
        try:
            call()
        except BaseException as e:  # report anything, including a hang-breaking signal
            return type(e).__name__
        return "returned"

    q = np.ones(4, dtype=np.float32)
    report = {
        "get": outcome(lambda: s.get(NS, "a")),
        "upsert": outcome(lambda: s.upsert(mem("child"))),
        "list": outcome(lambda: s.list(NS)),
        "count": outcome(lambda: s.count(NS)),
        "vector_search": outcome(lambda: s.vector_search(NS, q)),
        "keyword_search": outcome(lambda: s.keyword_search(NS, "content")),
        "delete": outcome(lambda: s.delete(NS, "a")),
        "ping": outcome(lambda: s.ping()),
        "list_links": outcome(lambda: s.list_links(NS)),
        "close": outcome(lambda: s.close()),
        "close-again": outcome(lambda: s.close()),
        "get-after-close": outcome(lambda: s.get(NS, "a")),
    }
    return report


def _fork(probe: Callable[[], dict[str, str]]) -> dict[str, str]:
    """Fork; the child runs ``probe``; returns its report (the child never returns)."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        # Python >= 3.12 warns about forking a process that has threads; that is the point here.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            signal.alarm(60)  # a hang in the child kills it instead of the test run
            try:
                report = probe()
            except BaseException as e:  # reported to the parent, which fails the test
                report = {"child raised": f"{type(e).__name__}: {e}"}
            os.write(w, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child status {status}, wrote {data!r}"
    report: dict[str, str] = json.loads(data)
    return report


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["disk", "memory"])
def test_fork_child_finds_store_closed_parent_keeps_it(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "store" if kind == "disk" else None
    s = Store.open(path, dims=4)
    try:
        s.upsert(mem("a", embedding=[1, 2, 3, 4]))
        report = _fork(lambda: _child_probe(s))
        expected = dict.fromkeys(report, "StoreClosedError")
        expected["close"] = expected["close-again"] = "returned"
        assert report == expected

        # the parent's store is untouched and keeps working
        assert s.get(NS, "a").content == "content of a"
        with pytest.raises(memini.NotFoundError):
            s.get(NS, "child")
        s.upsert(mem("b", embedding=[4, 3, 2, 1]))
        assert sorted(m.id for m in s.list(NS)) == ["a", "b"]
        [hit] = s.vector_search(NS, np.array([1, 2, 3, 4], np.float32), k=1)
        assert hit.memory.id == "a"
        assert [h.memory.id for h in s.keyword_search(NS, "content")] != []

        if path is not None:
            # and keeps its lock: the child's close() released nothing
            with pytest.raises(StoreLockedError):
                Store.open(path)
            assert open_from_subprocess(path) == "StoreLockedError"
    finally:
        s.close()
    if path is not None:
        with Store.open(path) as again:
            assert sorted(m.id for m in again.list(NS)) == ["a", "b"]


def _use_core_threads() -> dict[str, str]:
    """Work on the core's threads: a bulk insert and a parallel search on its worker pool, and
    searches awaited through `memini.aio` (the binding's own threads)."""
    import asyncio

    from memini.aio import AsyncStore

    rng = np.random.default_rng(0)
    s = Store.open(None, dims=8)
    s.upsert_many(
        [mem(f"m{i}", embedding=rng.random(8).tolist()) for i in range(3000)]  # graph inserts
    )
    many = s.vector_search_many(NS, rng.random((64, 8), dtype=np.float32), k=3)

    async def awaited() -> int:
        async with AsyncStore(s) as a:
            hits = await asyncio.gather(
                *(a.vector_search(NS, rng.random(8, dtype=np.float32), k=2) for _ in range(4))
            )
            return sum(len(h) for h in hits)

    return {
        "rows": str(s.count(NS)),
        "many": str(len(many)),
        "awaited": str(asyncio.run(awaited())),
    }


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_starts_its_own_core_threads() -> None:
    """Threads do not survive fork: a child forked after the parent used the core's worker
    pool and aio threads must start its own, not hand work to threads that are gone (it
    waited forever: multiprocessing's fork start method after the parent used a store)."""
    parent = _use_core_threads()
    assert parent == {"rows": "3000", "many": "64", "awaited": "8"}
    assert _fork(_use_core_threads) == parent
    assert _use_core_threads() == parent  # and the parent's threads still serve it


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_finds_an_async_store_closed() -> None:
    """An `AsyncStore` opened before fork raises in the child as its `Store` does; its worker
    pool's threads are gone there, and a call queued for them waited forever."""
    import asyncio

    from memini.aio import AsyncStore

    a = AsyncStore(Store.open(None, dims=4))
    q = np.ones(4, dtype=np.float32)

    async def calls() -> dict[str, str]:
        report = {}
        for name, call in (
            ("upsert", lambda: a.upsert(mem("x", embedding=[1, 2, 3, 4]))),  # worker pool
            ("get", lambda: a.get(NS, "x")),
            ("vector_search", lambda: a.vector_search(NS, q)),  # the core's threads
        ):
            try:
                await call()
                report[name] = "returned"
            except Exception as e:
                report[name] = type(e).__name__
        return report

    try:
        assert asyncio.run(calls()) == dict.fromkeys(("upsert", "get", "vector_search"), "returned")
        closed = _fork(lambda: asyncio.run(calls()))
        assert closed == dict.fromkeys(("upsert", "get", "vector_search"), "StoreClosedError")
        assert asyncio.run(calls())["get"] == "returned"  # the parent's keeps working
    finally:
        asyncio.run(a.close())


@needs_weights
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_of_a_process_that_embedded_refuses_to_embed() -> None:
    """The core's thread pool (under the local embedder) does not survive fork: a child forked
    after its parent ran the model gets UnavailableError at once (it waited forever), from a
    new embedder and from the parent's; a child forked before any embed, and the parent,
    embed as usual."""
    from memini.embed import LocalEmbedder

    texts = [f"memory number {i} about forks, threads and pools" for i in range(8)]

    def child() -> dict[str, str]:
        report = {}
        for name, make in (("new", LocalEmbedder), ("inherited", lambda: e)):
            try:
                report[name] = str(make().embed(texts).shape)
            except memini.UnavailableError as err:
                report[name] = f"UnavailableError: {'spawn' in str(err)}"
        return report

    e = LocalEmbedder()
    before = _fork(child)  # nothing embedded yet in this process... unless an earlier test did
    vectors = e.embed(texts)
    after = _fork(child)
    assert after == dict.fromkeys(("new", "inherited"), "UnavailableError: True")
    assert before in (after, dict.fromkeys(("new", "inherited"), "(8, 384)"))
    assert np.array_equal(e.embed(texts), vectors)  # the parent keeps embedding


# ---------------------------------------------------------------------------------------------
# ping, stats, embed model, logging


def test_ping(open_store: Callable[..., Store]) -> None:
    assert open_store().ping() is None


def test_stats_is_a_dict(open_store: Callable[..., Store]) -> None:
    s = open_store()
    assert isinstance(s.stats(), dict)
    s.upsert_many([mem(f"m{i}", embedding=[i, 1, 2, 3]) for i in range(5)])
    s.upsert(mem("other", ns="ns2", tier=Tier.WORKING))
    stats = s.stats()
    assert isinstance(stats, dict)
    assert stats


@pytest.mark.parametrize(
    "models",
    [
        pytest.param(["text-embedding-3-small"], id="set-once"),
        pytest.param(["a", "b"], id="overwrite"),
        pytest.param(["all-MiniLM-L6-v2", ""], id="back-to-empty"),
        pytest.param(["模型/ü-1"], id="unicode"),
    ],
)
def test_embed_model_round_trip(open_store: Callable[..., Store], models: list[str]) -> None:
    s = open_store()
    assert s.embed_model() == ""
    for model in models:
        assert s.set_embed_model(model) is None
        assert s.embed_model() == model


def test_embed_model_persists(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        assert s.embed_model() == ""
        s.set_embed_model("text-embedding-3-small")
    with Store.open(path) as s:
        assert s.embed_model() == "text-embedding-3-small"
        s.set_embed_model("nomic-embed-text")
    with Store.open(path) as s:
        assert s.embed_model() == "nomic-embed-text"


def test_library_installs_no_log_handler(tmp_path: Path) -> None:
    with Store.open(tmp_path / "store", dims=4) as s:
        s.upsert(mem("a"))
    with Store.open(tmp_path / "store") as s:
        s.compact()
    assert logging.getLogger("memini").handlers == []


# Races to create (then reopen) the stores in argv[1:-2]: from time argv[-2] (time.time()),
# one path a second, each process opens the store whenever it can, writes one row and holds
# the store 20 ms. Prints the rows it was acknowledged, the times it owned each store
# (CLOCK_MONOTONIC, system-wide) and any error other than StoreLockedError.
RACE_TO_CREATE = """
import json, sys, time
from memini import Memory, Store, StoreLockedError
*paths, start, me = sys.argv[1:]
acked, owned, errors = [], [], []
for i, path in enumerate(paths):
    t = float(start) + i
    time.sleep(max(0.0, t - time.time() - 0.02))
    while time.time() < t:
        pass
    n = 0
    while time.time() < t + 0.8:
        try:
            s = Store.open(path, dims=4)
        except StoreLockedError:
            continue
        except Exception as e:
            errors.append(repr(e))
            continue
        t0 = time.monotonic()
        try:
            mid = f"{me}-{n}"
            s.upsert(Memory(id=mid, namespace="ns", content=mid, embedding=[1.0, 0, 0, 0]))
            acked.append([path, mid])
            n += 1
            time.sleep(0.02)
        except Exception as e:
            errors.append(repr(e))
        finally:
            owned.append([path, t0, time.monotonic()])
            s.close()
print(json.dumps({"acked": acked, "owned": owned, "errors": errors}))
"""


def test_processes_racing_to_create_one_store_share_it_one_at_a_time(tmp_path: Path) -> None:
    """Issue 33 item 5: the process that loses the race to create a store removed the
    directory, the winner's rows and LOCK file with it (acknowledged writes lost, and a third
    process could lock a new LOCK file while the winner still held the old one)."""
    paths = [str(tmp_path / f"store{i}") for i in range(3)]
    start = time.time() + 6.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE_TO_CREATE, *paths, str(start), f"p{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out))
    assert [e for r in reports for e in r["errors"]] == []
    for path in paths:
        acked = sorted(mid for r in reports for p, mid in r["acked"] if p == path)
        assert acked, "nobody opened the store"
        owned = sorted((a, b) for r in reports for p, a, b in r["owned"] if p == path)
        overlaps = [(x, y) for x, y in itertools.pairwise(owned) if y[0] < x[1]]
        assert overlaps == [], "two processes owned the store at once"
        with Store.open(path) as s:
            assert sorted(m.id for m in s.list(NS)) == acked
