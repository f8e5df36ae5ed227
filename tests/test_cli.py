"""The ``memini`` command line: import/export round trip, skips, bad lines, locks, check, demo."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memini import (
    APIKey,
    Event,
    EventKind,
    Filter,
    Level,
    Memory,
    NamespaceLink,
    Store,
    Tier,
    hash_api_key,
)
from memini.cli import main

T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
EVERYTHING = Filter(include_expired=True, include_superseded=True)


def _vec(seed: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.random.default_rng(seed).standard_normal(4).astype(np.float32)


def populate(path: Path) -> None:
    """A small store using every kind of record and awkward values."""
    with Store.open(path, dims=4, metric="cos") as s:
        s.set_embed_model("test-model")
        tricky = np.array([0.1, -0.0, 1e-45, 3.4028235e38], dtype=np.float32)
        s.upsert_many(
            [
                Memory(
                    id="m1",
                    namespace="alpha",
                    content="the user likes coffee ☕",
                    tier=Tier.SEMANTIC,
                    level=Level.EXPLICIT,
                    summary="coffee",
                    metadata={"memory_type": "preference", "nested": {"a": [1, 2.5, None]}},
                    tags=["food", "drink"],
                    importance=0.1 + 0.2,
                    created_at=T0,
                    updated_at=T0 + timedelta(hours=1),
                    last_accessed_at=T0 + timedelta(days=1),
                    access_count=3,
                    confidence=0.7,
                    linked_memory_ids=["m2"],
                    embedding=tricky,
                ),
                Memory(
                    id="m2",
                    namespace="alpha",
                    content="keyword only row",
                    tier=Tier.WORKING,
                    created_at=T0 - timedelta(days=3),
                    expires_at=T0,  # expired
                ),
                Memory(
                    id="m3",
                    namespace="alpha",
                    content="an old fact",
                    tier=Tier.PROCEDURAL,
                    level=Level.DEDUCED,
                    created_at=T0 - timedelta(days=10),
                    valid_from=T0 - timedelta(days=10),
                    valid_to=T0 - timedelta(days=1),
                    superseded_by="m1",
                    embedding=_vec(3),
                ),
                *[
                    Memory(
                        id=f"b{i}",
                        namespace="beta",
                        content=f"beta memory number {i} code{i:02d}",
                        tier=Tier.EPISODIC,
                        created_at=T0 + timedelta(minutes=i),
                        embedding=_vec(100 + i),
                    )
                    for i in range(25)
                ],
            ]
        )
        s.put_link(NamespaceLink("alpha", "beta", tiers=None, note="all", created_at=T0))
        s.put_link(NamespaceLink("beta", "alpha", tiers=[Tier.SEMANTIC, Tier.WORKING]))
        s.put_api_key(APIKey("k1", hash_api_key("s1"), home_ns="alpha", created_at=T0))
        s.put_api_key(APIKey("k2", hash_api_key("s2"), default_ns="beta", disabled=True))
        # Events with id gaps: ids 1..8, then the old ones 2, 3 and 6 pruned.
        old = T0 - timedelta(days=400)
        stamps = [T0, old, old, T0, T0, old, T0, T0]
        s.append_events(
            [
                Event(
                    op_id=f"op{i // 2}",
                    kind=EventKind.RECALL if i % 2 else EventKind.REMEMBER,
                    namespace="alpha",
                    query=f"query {i}",
                    memory_id="m1",
                    memory_ns="alpha",
                    memory_tier=Tier.SEMANTIC if i % 3 else None,
                    memory_summary="coffee",
                    rank=i,
                    score=None if i == 4 else i / 3,
                    detail={"i": i, "why": ["x", {"y": True}]},
                    created_at=t + timedelta(microseconds=i),
                )
                for i, t in enumerate(stamps[:5])
            ]
        )
        s.append_events(
            [
                Event(op_id="op9", kind=EventKind.GET, namespace="beta", created_at=t)
                for t in stamps[5:]
            ]
        )
        assert s.prune_events(older_than=T0 - timedelta(days=1)) == 3


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def export(capsys: pytest.CaptureFixture[str], store: Path, dest: Path) -> bytes:
    rc, _, err = run(capsys, "export", "--store", str(store), "-o", str(dest))
    assert rc == 0, err
    return dest.read_bytes()


@pytest.fixture
def exported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    populate(tmp_path / "src")
    dump = tmp_path / "a.jsonl"
    export(capsys, tmp_path / "src", dump)
    return dump


def test_export_format(exported: Path) -> None:
    lines = [json.loads(x) for x in exported.read_text("ascii").splitlines()]
    assert lines[0] == {
        "type": "memini-export",
        "version": 1,
        "dims": 4,
        "metric": "cos",
        "embed_model": "test-model",
        "next_event_id": 9,
    }
    kinds = [x["type"] for x in lines[1:]]
    assert kinds == ["memory"] * 28 + ["link"] * 2 + ["api_key"] * 2 + ["event"] * 5
    m1 = next(x for x in lines if x.get("id") == "m1")
    assert m1["created_at"] == "2024-05-01T12:00:00.123456Z"
    assert np.array_equal(
        np.asarray(m1["embedding"], dtype=np.float32).view(np.uint32),
        np.array([0.1, -0.0, 1e-45, 3.4028235e38], dtype=np.float32).view(np.uint32),
    )
    assert next(x for x in lines if x.get("id") == "m2")["embedding"] is None
    assert [x["id"] for x in lines if x["type"] == "event"] == [1, 4, 5, 7, 8]


def test_round_trip_is_byte_identical(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = run(capsys, "import", str(exported), "--store", str(tmp_path / "dst"))
    assert rc == 0, err
    again = export(capsys, tmp_path / "dst", tmp_path / "b.jsonl")
    assert again == exported.read_bytes()
    with Store.open(tmp_path / "dst") as s:  # the exported ids, gaps included
        assert sorted(e.id for e in s.list_events()) == [1, 4, 5, 7, 8]
        s.append_events([Event(op_id="new", kind=EventKind.GET, namespace="alpha")])
        assert max(e.id for e in s.list_events()) == 9


def test_reimport_skips_everything(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = str(tmp_path / "dst")
    assert run(capsys, "import", str(exported), "--store", dst)[0] == 0
    rc, out, _ = run(capsys, "import", str(exported), "--store", dst, "--batch", "7")
    assert rc == 0
    text = " ".join(out.split())
    assert "memories: 28 read, 0 inserted, 28 skipped (already stored), 0 bad" in text
    assert "links: 2 read, 0 inserted, 2 skipped" in text
    assert "api keys: 2 read, 0 inserted, 2 skipped" in text
    assert "events: 5 read, 0 inserted, 5 skipped" in text
    assert export(capsys, tmp_path / "dst", tmp_path / "b.jsonl") == exported.read_bytes()


def test_export_to_stdout_matches_file(exported: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "memini.cli", "export", "--store", str(tmp_path / "src")],
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert proc.stdout == exported.read_bytes()


def test_bad_lines_reported_rest_lands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows: list[str] = [
        json.dumps({"id": "x", "namespace": "a", "content": "one", "embedding": [1, 2, 3, 4]}),
        json.dumps({"content": "no id, default namespace", "embedding": [0, 1, 0, 0]}),
        '{"content": "broken json", ',
        json.dumps({"id": "t", "content": "wrong type", "tags": "not-a-list"}),
        json.dumps({"id": "d", "content": "wrong dims", "embedding": [1, 2, 3]}),
        "",
        json.dumps({"id": "x", "namespace": "b", "content": "id taken in namespace a"}),
        json.dumps({"id": "e", "content": "bad tier", "tier": "forever"}),
        json.dumps({"id": "y", "namespace": "a", "content": "last good one"}),
        json.dumps([1, 2]),
    ]
    src = tmp_path / "in.jsonl.gz"
    src.write_bytes(gzip.compress("\n".join(rows).encode() + b"\n"))
    store = tmp_path / "s"
    rc, out, err = run(capsys, "import", str(src), "--store", str(store), "--namespace", "inbox")
    assert rc == 1
    for lineno, why in [
        (3, "invalid JSON"),
        (4, "field 'tags' must be a list of strings"),
        (5, "embedding has 3 dims, the store expects 4"),
        (7, "different namespace"),
        (8, "'forever' is not one of"),
        (10, "expected a JSON object"),
    ]:
        assert f"line {lineno}: " in err and why in err.split(f"line {lineno}: ")[1].split("\n")[0]
    assert "line 1:" not in err and "line 2:" not in err and "line 9:" not in err
    assert "6 bad line(s)" in out
    with Store.open(store) as s:
        assert s.stats()["dims"] == 4  # taken from the first line's embedding
        assert s.ids_by_prefix("a", "x", 5) == ["x"]
        assert s.get("a", "y").content == "last good one"
        (inbox,) = s.list("inbox", EVERYTHING)
        assert inbox.content == "no id, default namespace"
        assert s.list_namespaces() == ["a", "inbox"]


def test_new_store_without_dims_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"content": "no embedding"}) + "\n")
    rc, _, err = run(capsys, "import", str(src), "--store", str(tmp_path / "s"))
    assert rc == 1 and "pass --dims" in err
    rc, _, _ = run(capsys, "import", str(src), "--store", str(tmp_path / "s"), "--dims", "8")
    assert rc == 0
    with Store.open(tmp_path / "s") as s:
        assert s.stats()["dims"] == 8 and s.count("default") == 1


@pytest.mark.parametrize("command", ["export", "stats", "check", "compact"])
def test_commands_refuse_a_locked_store(
    command: str, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store.open(tmp_path / "src"):
        rc, out, err = run(capsys, command, "--store", str(tmp_path / "src"))
    assert rc == 1
    assert "is open in another process" in err and "Store.backup" in err
    assert out == ""


def test_export_of_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "export", "--store", str(tmp_path / "nope"))
    assert rc == 1 and "no store at" in err
    assert not (tmp_path / "nope").exists()


def test_stats_and_compact(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(capsys, "stats", "--store", str(tmp_path / "src"))
    assert rc == 0 and "28 memories" in out and "beta" in out
    rc, out, _ = run(capsys, "stats", "--store", str(tmp_path / "src"), "--json")
    assert rc == 0 and json.loads(out)["rows"] == 28
    rc, out, _ = run(capsys, "compact", "--store", str(tmp_path / "src"))
    assert rc == 0 and "compacted" in out


def test_check_and_repair(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    store = tmp_path / "src"
    rc, out, _ = run(capsys, "check", "--store", str(store))
    assert rc == 0 and "consistent" in out and "vector probe: 22/22" in out

    real_stats = Store.stats

    def lagging_stats(self: Store) -> dict[str, Any]:
        st = real_stats(self)
        st["keyword_docs"] -= 1
        return st

    with monkeypatch.context() as m:
        m.setattr(Store, "stats", lagging_stats)
        rc, out, _ = run(capsys, "check", "--store", str(store))
    assert rc == 2 and "MISMATCH" in out and "--repair" in out

    rc, out, _ = run(capsys, "check", "--store", str(store), "--repair")
    assert rc == 0, out
    assert "rebuilt the vector and keyword indexes" in out
    assert (store / "vectors").is_dir() and (store / "keyword").is_dir()
    with Store.open(store) as s:
        assert s.keyword_search("beta", "code07", k=1)[0].memory.id == "b7"
        assert s.vector_search("beta", _vec(107), k=1)[0].memory.id == "b7"
    assert export(capsys, store, tmp_path / "b.jsonl") == exported.read_bytes()


def test_demo_runs_and_reruns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "demo")
    rc, out, err = run(capsys, "demo", "--store", store)
    assert rc == 0, err
    assert "import: 10,000 inserted, 0 already there, 0 bad" in out
    for section in ("1. vector recall", "2. keyword recall", "3. filtered", "4. time travel"):
        assert section in out
    assert "superseded by" in out
    rc, out, err = run(capsys, "demo", "--store", store)
    assert rc == 0, err
    assert "import: 0 inserted, 10,000 already there, 0 bad" in out


def test_events_into_a_store_with_events(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "dst"
    with Store.open(dst, dims=4, metric="cos") as s:
        s.append_events(
            [Event(op_id=f"local{i}", kind=EventKind.GET, namespace="x") for i in range(2)]
        )
    rc, out, err = run(capsys, "import", str(exported), "--store", str(dst))
    assert rc == 0, err
    assert "1 event(s) got new ids" in out
    with Store.open(dst) as s:
        by_id = {e.id: e for e in s.list_events()}
    assert sorted(by_id) == [1, 2, 4, 5, 7, 8, 9]  # exported 4..8 kept, exported 1 -> 9
    assert by_id[1].op_id == "local0" and by_id[9].query == "query 0"
    rc, out, _ = run(capsys, "import", str(exported), "--store", str(dst))
    assert "events: 5 read, 0 inserted, 5 skipped" in " ".join(out.split())


@pytest.mark.parametrize("batch", ["1", "1000"])
def test_repeated_id_in_file_is_skipped(
    batch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.jsonl"
    rows = [{"id": "x", "content": "first"}, {"id": "x", "content": "second"}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc, out, _ = run(capsys, "import", str(src), "--store", str(tmp_path / "s"), "--dims", "2")
    assert rc == 0
    assert "memories: 2 read, 1 inserted, 1 skipped" in " ".join(out.split())
    with Store.open(tmp_path / "s") as s:
        assert s.get("default", "x").content == "first"


def test_next_event_id_round_trips_when_the_newest_events_were_pruned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store.open(tmp_path / "src", dims=2) as s:
        s.append_events([Event(f"op{i}", EventKind.GET, "a", created_at=T0) for i in range(6)])
        s.append_events([Event("late", EventKind.GET, "a", created_at=T0 + timedelta(days=1))])
        assert s.prune_events(older_than=T0 + timedelta(hours=1)) == 6  # ids 1..6 go
        s.prune_events(keep_max=0)
    dump = tmp_path / "a.jsonl"
    first = export(capsys, tmp_path / "src", dump)
    assert json.loads(first.splitlines()[0])["next_event_id"] == 8
    assert run(capsys, "import", str(dump), "--store", str(tmp_path / "dst"))[0] == 0
    assert export(capsys, tmp_path / "dst", tmp_path / "b.jsonl") == first
    with Store.open(tmp_path / "dst") as s:
        assert [e.id for e in s.list_events()] == [7]
        s.append_events([Event("new", EventKind.GET, "a")])
        assert max(e.id for e in s.list_events()) == 8


def test_events_whose_ids_this_store_used_before_get_new_ids(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "dst"
    with Store.open(dst, dims=4, metric="cos") as s:  # ids 1..5 handed out, then pruned
        s.append_events([Event(f"x{i}", EventKind.GET, "x", created_at=T0) for i in range(5)])
        assert s.prune_events(older_than=T0 + timedelta(days=1)) == 5
    rc, out, err = run(capsys, "import", str(exported), "--store", str(dst))
    assert rc == 0, err
    assert "3 event(s) got new ids" in " ".join(out.split())
    with Store.open(dst) as s:
        assert sorted(e.id for e in s.list_events()) == [7, 8, 9, 10, 11]  # 7, 8 kept


def test_export_without_next_event_id_still_imports(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = exported.read_text("ascii").splitlines()
    header = json.loads(lines[0])
    del header["next_event_id"]
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", "ascii")
    assert run(capsys, "import", str(old), "--store", str(tmp_path / "dst"))[0] == 0
    with Store.open(tmp_path / "dst") as s:
        assert sorted(e.id for e in s.list_events()) == [1, 4, 5, 7, 8]


def test_bad_event_line_is_reported_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = {"type": "event", "id": 3, "op_id": "a", "kind": "get", "namespace": "n"}
    rows = [
        good,
        {**good, "id": 4, "detail": {"x": "\udc80"}},
        {**good, "id": 2**63},
        {**good, "id": 5, "rank": 2**63},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc, _, err = run(capsys, "import", str(src), "--store", str(tmp_path / "s"), "--dims", "2")
    assert rc == 1
    assert "line 2: event.detail['x'] contains a lone surrogate" in err
    assert "line 3: field 'id' must be between 1 and 2**63-1" in err
    assert "line 4: event.rank must be between -2**63 and 2**63-1" in err
    with Store.open(tmp_path / "s") as s:
        assert [e.id for e in s.list_events()] == [3]
