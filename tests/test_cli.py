"""The ``memini`` command line: import/export round trip, skips, bad lines, locks, check, demo."""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embed_helpers import needs_weights
from memini import (
    APIKey,
    Event,
    EventKind,
    Filter,
    Level,
    MeminiError,
    Memory,
    NamespaceLink,
    Store,
    Tier,
    hash_api_key,
)
from memini.cli import commands, main
from memini.embed import LocalEmbedder

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
        (3, "invalid JSON at column 28"),
        (4, "tags must be a list of strings"),
        (
            5,
            "embedding has 3 dims and the store has 4: re-embed this row, or import the file "
            "into a new store (--store NEW_DIR --dims 3)",
        ),
        (7, "different namespace"),
        (8, "got 'forever'"),
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


def test_repair_deletes_no_index_of_a_store_another_process_opened_meanwhile(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    """Issue 33 item 5: `check --repair` removes the indexes only while it holds the lock.
    Another Store opens the store between the check (which closes it) and the repair."""
    store = tmp_path / "src"
    holder: list[Store] = []
    real_print = commands._print_check

    def open_meanwhile(out: Any, c: Any) -> None:
        real_print(out, c)
        if not holder:
            holder.append(Store.open(store))

    monkeypatch.setattr(commands, "_print_check", open_meanwhile)
    try:
        rc, _, err = run(capsys, "check", "--store", str(store), "--repair")
        assert rc != 0 and "open in another process" in err, err
        assert (store / "vectors").is_dir() and (store / "keyword").is_dir()
        owner = holder[0]
        assert owner.keyword_search("beta", "code07", k=1)[0].memory.id == "b7"
        assert owner.vector_search("beta", _vec(107), k=1)[0].memory.id == "b7"
    finally:
        for s in holder:
            s.close()


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
    assert "line 3: event.id must be between 0 and 2**63-1" in err
    assert "line 4: event.rank must be between -2**63 and 2**63-1" in err
    with Store.open(tmp_path / "s") as s:
        assert [e.id for e in s.list_events()] == [3]


# --------------------------------------------------------------------------------------------
# Settings that contradict the file or the store: refused before anything is written
# --------------------------------------------------------------------------------------------


def _plain(path: Path, *rows: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _store_state(path: Path) -> tuple[int, int, int, int, str]:
    """Rows, links, keys, events and embed model of a store (for "nothing was written")."""
    with Store.open(path) as s:
        st = s.stats()
        meta = st["meta"]
        return st["rows"], meta["links"], meta["api_keys"], meta["events"], s.embed_model()


@pytest.mark.parametrize(
    ("store", "argv", "advice"),
    [
        pytest.param(
            None, ["--dims", "8"], "Omit --dims to use the header's 4", id="dims-vs-header"
        ),
        pytest.param(
            (8, "cos"), [], "import it into a new store (--store NEW_DIR)", id="header-vs-store"
        ),
        pytest.param(
            (4, "cos"), ["--dims", "8"], "--dims 8 does not match the file", id="dims-vs-both"
        ),
        pytest.param((4, "l2"), [], "pass --metric l2 to import into it", id="header-metric"),
        pytest.param(
            (4, "l2"), ["--metric", "ip"], "omit --metric (an existing store", id="metric-option"
        ),
    ],
)
def test_export_settings_that_contradict_are_refused_before_writing(
    store: tuple[int, str] | None,
    argv: list[str],
    advice: str,
    exported: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dst = tmp_path / "dst"
    if store is not None:
        Store.open(dst, dims=store[0], metric=store[1]).close()  # type: ignore[arg-type]
    for extra in ([], ["--atomic"]):
        rc, out, err = run(capsys, "import", str(exported), "--store", str(dst), *argv, *extra)
        assert rc == 1 and out == ""
        assert advice in err
        assert "dims=" not in err and "metric=" not in err  # command-line advice, not Python
    if store is None:
        assert not dst.exists()
    else:
        assert _store_state(dst) == (0, 0, 0, 0, "")


@pytest.mark.parametrize(
    ("store_dims", "argv", "advice"),
    [
        pytest.param(8, ["--dims", "4"], "omit --dims (an existing store keeps", id="dims-option"),
        pytest.param(
            8, [], "import the file into a new store (--store NEW_DIR --dims 4)", id="first-line"
        ),
    ],
)
def test_plain_file_dims_that_contradict_the_store_are_refused(
    store_dims: int,
    argv: list[str],
    advice: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dst = tmp_path / "dst"
    Store.open(dst, dims=store_dims).close()
    src = _plain(
        tmp_path / "in.jsonl",
        {"id": "a", "content": "x", "embedding": [1, 2, 3, 4]},
        {"type": "link", "src": "a", "dst": "b"},
    )
    rc, _, err = run(capsys, "import", str(src), "--store", str(dst), *argv)
    assert rc == 1 and advice in err and "dims=" not in err
    assert _store_state(dst) == (0, 0, 0, 0, "")


def test_header_metric_can_be_overridden_for_an_existing_store(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "dst"
    Store.open(dst, dims=4, metric="l2").close()
    rc, _, err = run(capsys, "import", str(exported), "--store", str(dst), "--metric", "l2")
    assert rc == 0, err
    assert _store_state(dst)[:4] == (28, 2, 2, 5)


# --------------------------------------------------------------------------------------------
# Line errors: where, and in the facade's words
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(
            '{"content": "broken json", ',
            "line 2: invalid JSON at column 28: Expecting property name enclosed in double "
            "quotes (the line ends there: is it cut short?)",
            id="truncated-after-comma",
        ),
        pytest.param(
            '{"content": "cut', "line 2: invalid JSON at column 13: Unterminated string", id="cut"
        ),
        pytest.param(
            '{"content": "a" "b"}',
            "line 2: invalid JSON at column 17: Expecting ',' delimiter",
            id="missing-comma",
        ),
        pytest.param(
            '{"content": "ééé" x}',
            "line 2: invalid JSON at column 19: Expecting ',' delimiter",
            id="column-counts-characters",
        ),
        pytest.param(
            '{"content": "crlf", }\r',
            "line 2: invalid JSON at column 21: Expecting property name",
            id="crlf",
        ),
    ],
)
def test_json_errors_name_line_and_column(
    line: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.jsonl"
    good = json.dumps({"id": "ok", "content": "fine"})
    src.write_bytes(f"{good}\n{line}\n{good.replace('ok', 'ok2')}\n".encode())
    rc, out, err = run(capsys, "import", str(src), "--store", str(tmp_path / "s"), "--dims", "2")
    assert rc == 1
    assert expected in err, err
    assert "1 bad line(s) not imported: 2" in out
    with Store.open(tmp_path / "s") as s:
        assert s.count("default") == 2


def _same_json(a: object, b: object) -> bool:
    """Equal values of equal types (floats bit for bit: -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (a != a and b != b)  # NaN
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same_json, a, b))  # type: ignore[arg-type]
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(_same_json(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(f"[{2**64}, {-(2**63) - 1}, {2**63 - 1}, {2**70}]", id="long-integers"),
        pytest.param('{"n": 18446744073709551616.0, "m": 1e19}', id="long-float"),
        pytest.param("[NaN, Infinity, -Infinity, 1e400, -1e400, 1e-400]", id="not-finite"),
        pytest.param(
            '["\\ud800", "\\udfff x", "\\ud83d\\ude00", "\\u0000\\u0001"]', id="surrogates"
        ),
        pytest.param('{"a": 1, "a": 2, "b": [-0.0, 0, -0, 1E5, 1.5e-7]}', id="duplicates-zeros"),
        pytest.param("\ufeff" + json.dumps({"embedding": [0.1, -3.4e38]}), id="bom"),
        pytest.param(
            json.dumps(
                np.random.default_rng(7).standard_normal(384).astype(np.float32).tolist()
                + np.random.default_rng(8).standard_normal(64).tolist()
            ),
            id="random-floats",
        ),
    ],
)
def test_lines_read_as_json_reads_them(line: str) -> None:
    """orjson reads the lines when installed, but every value is the one json gives (an
    integer beyond 64 bits stays exact, NaN and lone surrogates are accepted)."""
    from memini.cli.records import decode_line

    value, problem = decode_line((line + "\r\n").encode("utf-8", "surrogatepass"))
    assert problem is None
    assert _same_json(value, json.loads(line.lstrip("\ufeff")))


def _facade_message(**fields: Any) -> str:
    """What `Store.upsert` says about a memory with these fields."""
    with Store.open(None, dims=2) as s, pytest.raises(MeminiError) as info:
        s.upsert(Memory(**{"id": "m", "namespace": "n", "content": "c", **fields}))
    return str(info.value)


@pytest.mark.parametrize(
    ("record", "fields"),
    [
        pytest.param({"tags": "solo"}, {"tags": "solo"}, id="tags-not-a-list"),
        pytest.param({"tags": ["a", 1]}, {"tags": ["a", 1]}, id="tag-not-a-string"),
        pytest.param({"tier": "forever"}, {"tier": "forever"}, id="unknown-tier"),
        pytest.param({"level": "sure"}, {"level": "sure"}, id="unknown-level"),
        pytest.param({"importance": "high"}, {"importance": "high"}, id="importance-text"),
        pytest.param({"access_count": -1}, {"access_count": -1}, id="negative-count"),
        pytest.param({"access_count": 1.5}, {"access_count": 1.5}, id="fractional-count"),
        pytest.param({"metadata": {"n": 2**64}}, {"metadata": {"n": 2**64}}, id="int-too-big"),
        pytest.param({"metadata": [1]}, {"metadata": [1]}, id="metadata-not-an-object"),
        pytest.param({"namespace": ""}, {"namespace": ""}, id="empty-namespace"),
        pytest.param({"embedding": [1, "x"]}, {"embedding": [1, "x"]}, id="embedding-text"),
        pytest.param({"embedding": [1e39, 0]}, {"embedding": [1e39, 0]}, id="beyond-float32"),
        pytest.param(
            {"created_at": "0001-01-01T00:00:00+01:00"},
            {"created_at": datetime.fromisoformat("0001-01-01T00:00:00+01:00")},
            id="datetime-out-of-range",
        ),
    ],
)
def test_bad_values_are_refused_in_the_facades_words(
    record: dict[str, Any],
    fields: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = _plain(tmp_path / "in.jsonl", {"id": "m", "namespace": "n", "content": "c", **record})
    rc, _, err = run(capsys, "import", str(src), "--store", str(tmp_path / "s"), "--dims", "2")
    assert rc == 1
    assert f"line 1: {_facade_message(**fields)}\n" in err


# --------------------------------------------------------------------------------------------
# --store "" and other unusable paths
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["import", "in.jsonl", "--dims", "2"], id="import"),
        pytest.param(["export"], id="export"),
        pytest.param(["stats"], id="stats"),
        pytest.param(["compact"], id="compact"),
        pytest.param(["check"], id="check"),
        pytest.param(["demo"], id="demo"),
    ],
)
@pytest.mark.parametrize("empty", ["", "  "])
def test_empty_store_path_is_refused(
    argv: list[str],
    empty: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    _plain(tmp_path / "in.jsonl", {"content": "x"})
    with pytest.raises(SystemExit) as info:
        main([*argv, "--store", empty])
    assert info.value.code == 2
    assert "the store directory must not be empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_export_to_an_unwritable_path(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing-dir" / "out.jsonl"
    rc, _, err = run(capsys, "export", "--store", str(tmp_path / "src"), "-o", str(target))
    assert rc == 1 and f"cannot write {target}" in err


def test_truncated_gzip_reports_where_reading_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"id": f"r{i}", "content": f"row {i} " + "x" * 200} for i in range(200)]
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())
    src = tmp_path / "cut.jsonl.gz"
    src.write_bytes(data[: len(data) // 2])
    rc, out, err = run(capsys, "import", str(src), "--store", str(tmp_path / "a"), "--dims", "2")
    assert rc == 1
    assert "is the file cut short?" in err and "1 bad line(s)" in out
    with Store.open(tmp_path / "a") as s:
        assert 0 < s.count("default") < 200  # the lines before the cut landed
    rc, out, _ = run(
        capsys, "import", str(src), "--store", str(tmp_path / "b"), "--dims", "2", "--atomic"
    )
    assert rc == 1 and "nothing imported (--atomic)" in out
    assert not (tmp_path / "b").exists()


# --------------------------------------------------------------------------------------------
# --atomic and --on-existing
# --------------------------------------------------------------------------------------------


def test_atomic_import_of_a_good_file_is_the_same_as_a_plain_one(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "dst"
    rc, _, err = run(capsys, "import", str(exported), "--store", str(dst), "--atomic")
    assert rc == 0, err
    assert export(capsys, dst, tmp_path / "b.jsonl") == exported.read_bytes()
    rc, out, _ = run(capsys, "import", str(exported), "--store", str(dst), "--atomic")
    assert rc == 0 and "memories: 28 read, 0 inserted, 28 skipped" in " ".join(out.split())


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param('{"content": "cut', id="invalid-json"),
        pytest.param(json.dumps({"content": "x", "tier": "forever"}), id="bad-memory"),
        pytest.param(json.dumps({"type": "link", "src": "", "dst": "b"}), id="bad-link"),
        pytest.param(json.dumps({"type": "event", "op_id": "o", "namespace": "n"}), id="bad-event"),
        pytest.param(
            json.dumps({"type": "api_key", "name": "k9", "hash": hash_api_key("s1")}),
            id="key-hash-taken",
        ),
        pytest.param(json.dumps({"type": "nonsense"}), id="unknown-type"),
    ],
)
@pytest.mark.parametrize("existing", [False, True], ids=["new-store", "existing-store"])
def test_atomic_import_writes_nothing_when_a_line_is_bad(
    bad: str,
    existing: bool,
    exported: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = exported.read_text("ascii").splitlines()
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([*lines, bad]) + "\n")  # the bad line comes last: line 39
    dst = tmp_path / "dst"
    if existing:
        Store.open(dst, dims=4, metric="cos").close()
    rc, out, err = run(capsys, "import", str(src), "--store", str(dst), "--atomic")
    assert rc == 1
    assert "nothing imported (--atomic): 1 bad line(s): 39" in out
    assert "line 39: " in err
    if existing:
        assert _store_state(dst) == (0, 0, 0, 0, "")
    else:
        assert not dst.exists()


def test_atomic_import_the_store_refuses_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "dst"
    with Store.open(dst, dims=2) as s:
        s.upsert(Memory("x", "a", "taken in namespace a"))
    src = _plain(
        tmp_path / "in.jsonl",
        {"id": "y", "namespace": "b", "content": "fine"},
        {"type": "link", "src": "b", "dst": "a"},
        {"id": "x", "namespace": "b", "content": "id taken in another namespace"},
    )
    rc, _, err = run(capsys, "import", str(src), "--store", str(dst), "--atomic")
    assert rc == 1 and "nothing imported" in err and "different namespace" in err
    assert _store_state(dst) == (1, 0, 0, 0, "")


def _seeded(path: Path) -> None:
    with Store.open(path, dims=2) as s:
        s.upsert(Memory("x", "default", "old"))
        s.put_link(NamespaceLink("a", "b", note="old"))
        s.put_api_key(APIKey("k1", hash_api_key("s1"), home_ns="old"))


@pytest.mark.parametrize("atomic", [False, True], ids=["batches", "atomic"])
@pytest.mark.parametrize(
    ("mode", "rc", "content", "summary"),
    [
        pytest.param(
            [], 0, "old", "memories: 2 read, 1 inserted, 1 skipped (already stored)", id="skip"
        ),
        pytest.param(
            ["--on-existing", "update"],
            0,
            "new",
            "memories: 2 read, 1 inserted, 1 updated, 0 skipped",
            id="update",
        ),
        pytest.param(
            ["--on-existing", "fail"],
            1,
            "old",
            "memories: 2 read, 1 inserted, 0 skipped",
            id="fail",
        ),
    ],
)
def test_on_existing(
    mode: list[str],
    rc: int,
    content: str,
    summary: str,
    atomic: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dst = tmp_path / "dst"
    _seeded(dst)
    src = _plain(
        tmp_path / "in.jsonl",
        {"id": "x", "content": "new"},
        {"id": "y", "content": "brand new"},
        {"type": "link", "src": "a", "dst": "b", "note": "new"},
        {"type": "api_key", "name": "k1", "hash": hash_api_key("s1"), "home_ns": "new"},
    )
    argv = ["import", str(src), "--store", str(dst), *mode, *(["--atomic"] if atomic else [])]
    got_rc, out, err = run(capsys, *argv)
    assert got_rc == rc, err
    text = " ".join(out.split())
    with Store.open(dst) as s:
        assert s.get("default", "x").content == content
        assert s.list_links("a")[0].note == content
        assert s.list_api_keys()[0].home_ns == content
        assert s.count("default") == (1 if mode[-1:] == ["fail"] and atomic else 2)
    if mode[-1:] == ["fail"]:
        assert "line 1: memory 'x' of namespace 'default' is stored already" in err
        assert "line 3: link 'a' -> 'b' is stored already" in err
        assert "line 4: API key 'k1' is stored already" in err
        if atomic:
            assert "nothing imported (--atomic): 3 bad line(s): 1, 3, 4" in text
            return
    assert summary in text
    skipped_note = "note: skipped 3 record(s) already stored or earlier in the file"
    assert (skipped_note in text) == (not mode)
    if not mode:
        assert "(1 memories, 1 links, 1 api keys)" in text and "--on-existing update" in text


@pytest.mark.parametrize("atomic", [False, True], ids=["batches", "atomic"])
@pytest.mark.parametrize(
    ("mode", "rc", "stored", "summary"),
    [
        pytest.param([], 0, "first", "2 read, 1 inserted, 1 skipped", id="skip"),
        pytest.param(
            ["--on-existing", "update"], 0, "second", "2 read, 1 inserted, 1 updated", id="update"
        ),
        pytest.param(["--on-existing", "fail"], 1, "first", "2 read, 1 inserted", id="fail"),
    ],
)
@pytest.mark.parametrize("batch", ["1", "1000"])
def test_id_repeated_in_the_file(
    batch: str,
    mode: list[str],
    rc: int,
    stored: str,
    summary: str,
    atomic: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = _plain(
        tmp_path / "in.jsonl", {"id": "x", "content": "first"}, {"id": "x", "content": "second"}
    )
    argv = ["import", str(src), "--store", str(tmp_path / "s"), "--dims", "2", "--batch", batch]
    got_rc, out, err = run(capsys, *argv, *mode, *(["--atomic"] if atomic else []))
    assert got_rc == rc, err
    if rc:
        where = "on line 1 already" if atomic or batch == "1000" else "stored already"
        assert f"line 2: memory 'x' of namespace 'default' is {where}" in err
    if rc and atomic:
        assert not (tmp_path / "s").exists()
        return
    assert summary in " ".join(out.split())
    with Store.open(tmp_path / "s") as s:
        assert s.get("default", "x").content == stored


def test_check_notices_a_lost_meta_db(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "src"
    with Store.open(store) as s:
        assert s.list_all_links() and s.stats()["meta_db_lost"] is None
    (store / "meta.sqlite3").unlink()
    with Store.open(store) as s:  # recreated empty: the loss is recorded with the rows
        assert s.list_all_links() == []
        assert s.stats()["meta_db_lost"] is not None
    rc, out, _ = run(capsys, "check", "--store", str(store))
    assert rc == 2 and "meta.sqlite3" in out and "LOST" in out
    rc, out, _ = run(capsys, "check", "--store", str(store), "--repair")
    assert rc == 0 and "acknowledged" in out
    rc, out, _ = run(capsys, "check", "--store", str(store))
    assert rc == 0 and "consistent" in out


def test_recall_prints_the_best_memories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s"
    with Store.open(path, dims=4) as s:
        s.upsert_many(
            [
                Memory(id="a", namespace="n", content="Alice drinks coffee every morning"),
                Memory(id="b", namespace="n", content="Bob drinks tea", embedding=_vec(1)),
                Memory(id="c", namespace="other", content="Alice drinks coffee too"),
            ]
        )
    assert main(["recall", "--store", str(path), "n", "what does Alice drink?", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"]
    assert rows[0]["namespace"] == "n" and rows[0]["vector_score"] is None
    assert main(["recall", "--store", str(path), "n", "coffee", "-k", "1"]) == 0
    captured = capsys.readouterr()
    assert "n/a" in captured.out and "b" not in captured.out.split("n/a")[1]
    assert "by words alone" in captured.err
    assert main(["recall", "--store", str(tmp_path / "none"), "n", "x"]) == 1
    # an embedder of another model than the store's is refused
    with Store.open(path) as s:
        s.set_embed_model("some/other-model")
    assert (
        main(
            ["recall", "--store", str(path), "n", "x", "--embedder", "openai:http://127.0.0.1:9#m"]
        )
        == 1
    )


@needs_weights
def test_recall_embeds_the_query_with_the_stores_local_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s"
    with Store.open(path, embedder=LocalEmbedder()) as s:
        s.upsert_many(
            [
                Memory(id="a", namespace="n", content="Alice drinks coffee every morning"),
                Memory(id="b", namespace="n", content="The weather was cold in Oslo"),
            ]
        )
    assert (
        main(["recall", "--store", str(path), "n", "what is her favourite beverage", "--json"]) == 0
    )
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert rows[0]["id"] == "a" and rows[0]["vector_score"] is not None
    assert "by words alone" not in captured.err
    assert main(["recall", "--store", str(path), "n", "coffee", "--embedder", "none"]) == 0
    assert "by words alone: --embedder none" in capsys.readouterr().err
