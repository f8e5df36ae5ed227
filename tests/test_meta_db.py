"""The metadata database itself: file settings, schema versions, backup, closing, fork, threads."""

from __future__ import annotations

import os
import sqlite3
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from memini import _sqlite
from memini._sqlite import FILE_NAME, SCHEMA_VERSION, MetaDB
from memini.errors import CorruptionError, InvalidArgumentError, StoreClosedError
from memini.types import APIKey, Event, EventKind, NamespaceLink, Tier, hash_api_key
from meta_helpers import T0

pytest_plugins = ["conftest_meta"]


def fill(db: MetaDB) -> None:
    """One row of each kind."""
    db.put_link(NamespaceLink("a", "b", [Tier.SEMANTIC], "n", T0))
    db.put_api_key(APIKey("k", hash_api_key("s"), "h", "d", T0))
    db.append_events([Event("op", EventKind.RECALL, "a", query="q", created_at=T0)])


def contents(db: MetaDB) -> tuple[Any, ...]:
    """Everything a MetaDB holds."""
    return (db.list_all_links(), db.list_api_keys(), db.list_events())


def test_file_is_meta_sqlite3_in_wal_with_full_sync(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path / "new" / "dir")
    try:
        assert db.path == str(tmp_path / "new" / "dir" / FILE_NAME)
        with db._locked() as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        db.close()


def test_memory_database_is_one_database_shared_by_threads() -> None:
    db = MetaDB.open(None)
    try:
        assert db.path is None
        t = threading.Thread(target=fill, args=(db,))
        t.start()
        t.join()
        assert [x.src for x in db.list_all_links()] == ["a"]
        assert len(db.list_events()) == 1
        other = MetaDB.open(None)
        assert other.list_all_links() == []  # each open(None) is its own database
        other.close()
    finally:
        db.close()


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path)
    fill(db)
    before = contents(db)
    db.close()
    db = MetaDB.open(tmp_path)
    try:
        assert contents(db) == before
    finally:
        db.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    MetaDB.open(tmp_path).close()
    with sqlite3.connect(tmp_path / FILE_NAME) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(InvalidArgumentError, match="upgrade memini"):
        MetaDB.open(tmp_path)


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / FILE_NAME) as conn:
        conn.execute("CREATE TABLE other (x)")
    with pytest.raises(InvalidArgumentError, match="did not create"):
        MetaDB.open(tmp_path)


def test_garbage_file_is_corruption(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"this is not a database" * 200)
    with pytest.raises(CorruptionError):
        MetaDB.open(tmp_path)


def test_schema_is_migrated_forward_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = MetaDB.open(tmp_path)
    fill(db)
    before = contents(db)
    db.close()
    v2 = (
        "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT)",
        "INSERT INTO settings VALUES ('migrated', 'yes')",
    )
    monkeypatch.setattr(_sqlite, "_MIGRATIONS", (*_sqlite._MIGRATIONS, v2))
    db = MetaDB.open(tmp_path)
    try:
        assert contents(db) == before
        with db._locked() as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
            assert conn.execute("SELECT value FROM settings").fetchall() == [("yes",)]
    finally:
        db.close()
    db = MetaDB.open(tmp_path)  # already at v2: nothing runs twice
    db.close()


def test_failed_migration_leaves_the_file_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    MetaDB.open(tmp_path).close()
    broken = ("CREATE TABLE half (x)", "THIS IS NOT SQL")
    monkeypatch.setattr(_sqlite, "_MIGRATIONS", (*_sqlite._MIGRATIONS, broken))
    with pytest.raises(Exception, match="syntax error"):
        MetaDB.open(tmp_path)
    monkeypatch.undo()
    db = MetaDB.open(tmp_path)
    try:
        with db._locked() as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert (
                conn.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchall() == []
            )
    finally:
        db.close()


@pytest.mark.parametrize("kind", ["disk", "memory"])
def test_backup_is_a_consistent_openable_copy(tmp_path: Path, kind: str) -> None:
    db = MetaDB.open(tmp_path / "src" if kind == "disk" else None)
    try:
        fill(db)
        db.append_events([Event("op2", EventKind.GET, "a", created_at=T0) for _ in range(50)])
        db.prune_events(keep_max=10)  # the id sequence must travel with the copy
        db.backup(tmp_path / "copy")
        copy = MetaDB.open(tmp_path / "copy")
        try:
            assert contents(copy) == contents(db)
            copy.append_events([Event("after", EventKind.GET, "a")])
            assert copy.list_events()[0].id == 52
        finally:
            copy.close()
        with pytest.raises(InvalidArgumentError, match="already exists"):
            db.backup(tmp_path / "copy")
        assert sorted(p.name for p in (tmp_path / "copy").iterdir() if "partial" in p.name) == []
    finally:
        db.close()
    with pytest.raises(StoreClosedError):
        db.backup(tmp_path / "later")
    assert not (tmp_path / "later").exists()


def test_backup_while_writers_run(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path / "src")
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            db.append_events([Event(f"op{i}", EventKind.RECALL, "n", rank=r) for r in range(5)])
            i += 1

    t = threading.Thread(target=write)
    t.start()
    try:
        for n in range(3):
            db.backup(tmp_path / f"copy{n}")
    finally:
        stop.set()
        t.join()
    try:
        for n in range(3):
            copy = MetaDB.open(tmp_path / f"copy{n}")
            rows = copy.list_events()
            copy.close()
            assert len(rows) % 5 == 0  # whole batches only
            by_op: dict[str, int] = {}
            for e in rows:
                by_op[e.op_id] = by_op.get(e.op_id, 0) + 1
            assert set(by_op.values()) <= {5}
    finally:
        db.close()


def test_close_is_idempotent_and_closed_reports(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path)
    assert not db.closed and "closed" not in repr(db)
    db.close()
    db.close()
    assert db.closed and "closed" in repr(db)
    for call in (db.ping, db.stats, db.compact, db.list_all_links):
        with pytest.raises(StoreClosedError):
            call()


def test_stats_ping_compact(meta: MetaDB) -> None:
    fill(meta)
    meta.ping()
    stats = meta.stats()
    assert {k: stats[k] for k in ("links", "api_keys", "events", "next_event_id")} == {
        "links": 1,
        "api_keys": 1,
        "events": 1,
        "next_event_id": 2,
    }
    assert stats["bytes"] >= 0
    before = contents(meta)
    meta.compact()
    assert contents(meta) == before


def test_backup_and_compact_keep_the_event_id_sequence(meta: MetaDB, tmp_path: Path) -> None:
    meta.append_events([Event("op", EventKind.GET, "a", created_at=T0) for _ in range(3)])
    meta.import_events([], next_id=10)
    assert meta.prune_events(keep_max=1) == 2
    meta.compact()
    meta.backup(tmp_path / "copy")
    copy = MetaDB.open(tmp_path / "copy")
    try:
        assert copy.stats()["next_event_id"] == meta.stats()["next_event_id"] == 10
    finally:
        copy.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_sees_a_closed_database(tmp_path: Path) -> None:
    db = MetaDB.open(tmp_path)
    fill(db)
    r, w = os.pipe()
    with warnings.catch_warnings():  # 3.12+ warns about forking a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            try:
                db.list_events()
                code = 1
            except StoreClosedError:
                pass
            db.close()  # detaches only
            if not db.closed:
                code = 2
        except BaseException:
            code = 3
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    status = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    try:
        assert status == b"\x00"
        assert len(db.list_events()) == 1  # the parent's connection still works
        db.append_events([Event("after-fork", EventKind.GET, "a")])
    finally:
        db.close()
