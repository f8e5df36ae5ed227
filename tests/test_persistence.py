"""What survives close/reopen, backup and compact (API.md sections 1 and 4)."""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import memini
from memini import (
    APIKey,
    DimensionMismatchError,
    Event,
    EventKind,
    Filter,
    InvalidArgumentError,
    Level,
    Memory,
    NamespaceLink,
    NotFoundError,
    Store,
    StoreLockedError,
    Tier,
)

NS = "ns"
T0 = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
EVERYTHING = Filter(include_expired=True, include_superseded=True)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def vec(i: int, dims: int = 4) -> np.ndarray:
    return np.random.default_rng(1000 + i).standard_normal(dims).astype(np.float32)


def every_kind_of_row() -> list[Memory]:
    rows = [
        Memory(
            id="full",
            namespace=NS,
            content="common full row with every field",
            tier=Tier.PROCEDURAL,
            level=Level.DEDUCED,
            summary="the summary",
            metadata={"memory_type": "decision", "nested": {"list": [1, 2.5, None, True]}},
            tags=["z", "a", "Ü"],
            importance=0.1 + 0.2,
            created_at=at(0),
            updated_at=at(1),
            last_accessed_at=at(2),
            access_count=9,
            expires_at=datetime(2099, 1, 1, tzinfo=UTC),
            valid_from=at(-5),
            valid_to=datetime(2098, 1, 1, tzinfo=UTC),
            confidence=1 / 3,
            linked_memory_ids=["minimal", "keyword-only"],
            embedding=vec(0),
        ),
        Memory(id="minimal", namespace=NS, content="common minimal"),
        Memory(id="keyword-only", namespace=NS, content="common keyword only", embedding=None),
        Memory(
            id="expired",
            namespace=NS,
            content="common expired",
            expires_at=at(-1),
            embedding=vec(1),
        ),
        Memory(
            id="superseded",
            namespace=NS,
            content="common superseded",
            superseded_by="full",
            valid_to=at(3),
            embedding=vec(2),
        ),
        Memory(
            id="special-vector",
            namespace=NS,
            content="common special",
            embedding=np.array([-0.0, 1e-45, 3.4028235e38, -1.1754944e-38], np.float32),
        ),
        Memory(
            id="unicode",
            namespace="名前空間/ü",
            content="common Ünïcödé 東京 🙂 nul\x00",
            summary="résumé",
            tags=["日本"],
            metadata={"clé": "välue"},
            embedding=vec(3),
        ),
    ]
    for i, tier in enumerate(Tier):
        for j, level in enumerate([None, Level.EXPLICIT, Level.DEDUCED]):
            rows.append(
                Memory(
                    id=f"t{i}{j}",
                    namespace=f"ns-{tier.value}",
                    content=f"common tier {tier.value} level {level}",
                    tier=tier,
                    level=level,
                    created_at=at(i * 3 + j),
                    updated_at=at(i * 3 + j),
                    last_accessed_at=at(i * 3 + j),
                    confidence=None if j == 0 else j / 4,
                    embedding=vec(10 + i * 3 + j),
                )
            )
    return rows


def snapshot(s: Store) -> dict[str, Any]:
    """Everything observable about a store's content."""
    rows = {}
    for ns in s.list_namespaces():
        for m in s.list(ns, EVERYTHING):
            emb = s.get_embedding(ns, m.id)
            rows[(ns, m.id)] = (m, None if emb is None else (emb.dtype.str, emb.tobytes()))
            assert s.get(ns, m.id) == m
    return {
        "namespaces": s.list_namespaces(),
        "rows": rows,
        "embed_model": s.embed_model(),
        "links": s.list_all_links(),
        "keys": s.list_api_keys(),
        "events": s.list_events(),
    }


def searches(s: Store, dims: int = 4) -> dict[str, Any]:
    """Search results in every namespace: vector hits with scores, keyword hits as a set."""
    q = np.linspace(-1, 1, dims, dtype=np.float32)
    out: dict[str, Any] = {}
    for ns in s.list_namespaces():
        for f_name, f in (("live", Filter()), ("everything", EVERYTHING)):
            out[f"{ns}/{f_name}/vector"] = [
                (h.memory.id, h.score) for h in s.vector_search(ns, q, f, k=1000)
            ]
            out[f"{ns}/{f_name}/keyword"] = {
                h.memory.id for h in s.keyword_search(ns, "common", f, k=1000)
            }
    return out


def reopen(path: Path) -> Store:
    return Store.open(path)


# ---------------------------------------------------------------------------------------------
# close / reopen


def test_every_kind_of_row_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        s.upsert_many(every_kind_of_row()[:3])
        for row in every_kind_of_row()[3:]:
            s.upsert(row)
        s.set_embed_model("model-x")
        before, found_before = snapshot(s), searches(s)
    assert len(before["rows"]) == len(every_kind_of_row())
    for _ in range(3):  # several cycles, nothing drifts
        with reopen(path) as s:
            assert snapshot(s) == before
            assert searches(s) == found_before


def test_embeddings_bit_exact_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    rng = np.random.default_rng(41)
    vectors = {f"v{i}": rng.standard_normal(8).astype(np.float32) * 10.0**i for i in range(-5, 6)}
    with Store.open(path, dims=8, metric="cos") as s:
        s.upsert_many(
            [Memory(id=k, namespace=NS, content=k, embedding=v) for k, v in vectors.items()]
        )
    with reopen(path) as s:
        for k, v in vectors.items():
            got = s.get_embedding(NS, k)
            assert got is not None and got.dtype == np.float32
            assert got.tobytes() == v.tobytes(), k


def _seed(s: Store) -> None:
    s.upsert_many(every_kind_of_row())
    s.upsert_many(
        [
            Memory(
                id=f"bulk{i}",
                namespace="bulk",
                content=f"common bulk {i}",
                embedding=vec(100 + i),
                tier=Tier.WORKING if i % 2 else Tier.SEMANTIC,
                expires_at=at(i) if i % 3 == 0 else None,
            )
            for i in range(60)
        ]
    )
    s.put_link(NamespaceLink(NS, "bulk", tiers=[Tier.SEMANTIC], note="n", created_at=T0))
    s.put_link(NamespaceLink("bulk", NS, tiers=None, created_at=T0))
    s.put_api_key(APIKey("key", memini.hash_api_key("secret"), home_ns=NS, created_at=T0))
    s.append_events([Event("op1", EventKind.RECALL, NS, query="q", created_at=T0)])


OPERATIONS = [
    pytest.param(lambda s: None, id="nothing"),
    pytest.param(
        lambda s: s.upsert_many(
            [
                Memory(
                    id=f"new{i}", namespace=NS, content=f"common new {i}", embedding=vec(500 + i)
                )
                for i in range(20)
            ]
        ),
        id="upsert_many",
    ),
    pytest.param(lambda s: [s.delete("bulk", f"bulk{i}") for i in range(0, 60, 2)], id="deletes"),
    pytest.param(lambda s: s.set_superseded(NS, "minimal", "full"), id="supersede"),
    pytest.param(
        lambda s: (s.set_superseded(NS, "minimal", "full"), s.restore(NS, "minimal")),
        id="supersede-restore",
    ),
    pytest.param(lambda s: s.restore(NS, "superseded"), id="restore"),
    pytest.param(lambda s: s.reinforce("bulk", ["bulk0", "bulk1"], at(50), at(60)), id="reinforce"),
    pytest.param(lambda s: s.retier(NS, "full", Tier.WORKING, at(99)), id="retier"),
    pytest.param(lambda s: s.update(NS, "full", content="common edited"), id="update-content"),
    pytest.param(lambda s: s.update(NS, "full", embedding=None), id="update-drop-vector"),
    pytest.param(lambda s: s.update(NS, "minimal", embedding=vec(7)), id="update-add-vector"),
    pytest.param(lambda s: s.reassign("bulk", ["bulk1", "bulk2"], "moved"), id="reassign"),
    pytest.param(lambda s: s.delete_namespace("bulk"), id="delete-namespace"),
    pytest.param(lambda s: s.mark_contradicted(NS, "full", "x", 0.1, at(9)), id="contradicted"),
    pytest.param(lambda s: s.set_confidence(NS, "full", 0.9, at(9)), id="set-confidence"),
    pytest.param(lambda s: s.sweep_expired(at(30)), id="sweep-expired"),
    pytest.param(lambda s: s.delete_if_expired_before(NS, "expired", at(0)), id="delete-expired"),
    pytest.param(lambda s: s.set_embed_model("model-y"), id="embed-model"),
    pytest.param(lambda s: s.compact(), id="compact"),
    pytest.param(
        lambda s: (
            [s.delete("bulk", f"bulk{i}") for i in range(50)],
            s.compact(),
            s.upsert(
                Memory(id="after", namespace="bulk", content="common after", embedding=vec(9))
            ),
        ),
        id="delete-compact-write",
    ),
    pytest.param(
        lambda s: [
            s.upsert(
                Memory(id="churn", namespace=NS, content=f"common churn {i}", embedding=vec(i))
            )
            for i in range(30)
        ],
        id="rewrite-same-id",
    ),
]


@pytest.mark.parametrize("op", OPERATIONS)
def test_writes_survive_reopen(tmp_path: Path, op: Callable[[Store], Any]) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        _seed(s)
        op(s)
        before, found_before = snapshot(s), searches(s)
    with reopen(path) as s:
        assert snapshot(s) == before
        assert searches(s) == found_before
        # and the reopened store keeps working
        s.upsert(Memory(id="post", namespace=NS, content="common post", embedding=vec(8)))
        assert s.get(NS, "post").content == "common post"


# ---------------------------------------------------------------------------------------------
# backup


def test_backup_round_trip(open_store: Callable[..., Store], tmp_path: Path) -> None:
    s = open_store(dims=4, metric="cos")
    _seed(s)
    s.set_embed_model("model-b")
    before, found_before = snapshot(s), searches(s)
    target = tmp_path / "backup"
    assert s.backup(target) is None
    assert target.is_dir()

    # writes after the backup stay out of it
    s.upsert(Memory(id="later", namespace=NS, content="common later", embedding=vec(5)))
    s.delete(NS, "minimal")

    with Store.open(target) as b:
        assert snapshot(b) == before
        assert searches(b) == found_before
        b.upsert(Memory(id="in-backup", namespace=NS, content="x", embedding=vec(6)))
    assert s.get(NS, "later").content == "common later"
    with pytest.raises(NotFoundError):
        s.get(NS, "in-backup")

    # the backup carries dims and metric
    with pytest.raises(DimensionMismatchError):
        Store.open(target, dims=8)
    with pytest.raises(DimensionMismatchError):
        Store.open(target, metric="l2")
    with Store.open(target, dims=4, metric="cos") as b:
        assert b.get(NS, "in-backup").content == "x"


def test_backup_of_reopened_store(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        _seed(s)
    with reopen(path) as s:
        before = snapshot(s)
        s.backup(tmp_path / "backup")
    with Store.open(tmp_path / "backup") as b:
        assert snapshot(b) == before


@pytest.mark.parametrize(
    "make_target",
    [
        pytest.param(lambda p: p.mkdir(), id="existing-empty-dir"),
        pytest.param(lambda p: (p.mkdir(), (p / "keep.txt").write_text("mine")), id="existing-dir"),
        pytest.param(lambda p: p.write_text("a file"), id="existing-file"),
    ],
)
def test_backup_target_must_not_exist(
    open_store: Callable[..., Store], tmp_path: Path, make_target: Callable[[Path], Any]
) -> None:
    s = open_store()
    _seed(s)
    target = tmp_path / "target"
    make_target(target)
    listing = sorted(p.name for p in target.iterdir()) if target.is_dir() else None
    # API.md: the directory "must not exist yet"; it names no error class for this case
    with pytest.raises((InvalidArgumentError, FileExistsError)):
        s.backup(target)
    if listing is not None:
        assert sorted(p.name for p in target.iterdir()) == listing
        if listing:
            assert (target / "keep.txt").read_text() == "mine"
    else:
        assert target.read_text() == "a file"
    s.ping()


def test_backup_of_own_directory_refused(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        _seed(s)
        before = snapshot(s)
        with pytest.raises((InvalidArgumentError, FileExistsError)):
            s.backup(path)
        assert snapshot(s) == before


def test_backup_is_not_locked_by_original(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        _seed(s)
        s.backup(tmp_path / "backup")
        with Store.open(tmp_path / "backup") as b:  # the original stays open and locked
            b.ping()
        with pytest.raises(StoreLockedError):
            Store.open(path)


# ---------------------------------------------------------------------------------------------
# compact


def test_compact_keeps_content(open_store: Callable[..., Store]) -> None:
    s = open_store(dims=8)
    rng = np.random.default_rng(42)
    rows = [
        Memory(
            id=f"c{i:03d}",
            namespace=NS if i % 3 else "b",
            content=f"common compact {i}",
            tags=[f"t{i % 7}"],
            embedding=rng.standard_normal(8).astype(np.float32),
        )
        for i in range(500)
    ]
    s.upsert_many(rows)
    for i in range(0, 500, 5):
        if i % 2:
            s.delete(rows[i].namespace, rows[i].id)
        else:
            s.update(rows[i].namespace, rows[i].id, embedding=None)
    for i in (i for i in range(1, 500, 7) if i % 5):  # rows not deleted above
        s.update(rows[i].namespace, rows[i].id, content=f"common rewritten {i}", updated_at=T0)
    before, found_before = snapshot(s), searches(s, dims=8)
    assert s.compact() is None
    assert snapshot(s) == before
    assert searches(s, dims=8) == found_before
    s.compact()  # twice is fine
    assert snapshot(s) == before
    assert isinstance(s.stats(), dict)


def test_compact_then_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        _seed(s)
        for i in range(0, 60, 2):
            s.delete("bulk", f"bulk{i}")
        s.compact()
        before, found_before = snapshot(s), searches(s)
    with reopen(path) as s:
        assert snapshot(s) == before
        assert searches(s) == found_before


def _file_size(p: Path) -> tuple[int, int]:
    """A file's length and the bytes the filesystem holds for it (less inside holes)."""
    st = p.stat()
    return st.st_size, st.st_blocks * 512


def _holes_supported(d: Path) -> bool:
    """Whether files under ``d`` can have holes (a file grown by ``truncate`` is sparse)."""
    f = d / "sparse-probe"
    with f.open("wb") as out:
        out.truncate(8 << 20)
    try:
        return _file_size(f)[1] < 4 << 20
    finally:
        f.unlink()


# rows.redb after compact() vs after close and after a reopen with 5 small writes: +20 KiB
# measured (2k to 10k 64-d rows; redb's allocator state written at close), +84-116 KiB
# allocated during the writing session; the file doubled before (redb grows a full file by
# doubling it, and a compacted file is full)
COMPACT_MARGIN = 256 << 10


def test_compaction_savings_survive_close_and_writes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    rows = path / "rows.redb"
    rng = np.random.default_rng(11)

    def mems(ns: str, n: int) -> list[Memory]:
        return [
            Memory(
                id=f"{ns}{i}",
                namespace=ns,
                content=f"compaction savings row {i}",
                embedding=rng.standard_normal(64).astype(np.float32),
            )
            for i in range(n)
        ]

    with Store.open(path, dims=64) as s:
        s.upsert_many(mems(NS, 2000))
        s.upsert_many(mems("gone", 2000))
        s.delete_namespace("gone")
        before = _file_size(rows)[0]
        s.compact()
        compacted = _file_size(rows)[0]
    assert compacted < before / 2, (before, compacted)
    assert _file_size(rows)[0] <= compacted + COMPACT_MARGIN, "close undid the compaction"
    with Store.open(path) as s:
        assert _file_size(rows)[0] <= compacted + COMPACT_MARGIN, "open grew the file"
        for m in mems("new", 5):
            s.upsert(m)
        if _holes_supported(tmp_path):
            # the growth of these writes is a hole until close gives it back
            assert _file_size(rows)[1] <= compacted + COMPACT_MARGIN
        assert s.count(NS) == 2000
    assert _file_size(rows)[0] <= compacted + COMPACT_MARGIN, "a few writes undid the compaction"
    with Store.open(path) as s:
        assert s.count(NS) == 2000 and s.count("new") == 5


def test_a_compacted_store_reopens_without_rebuilding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # compaction merges the keyword segments, purging deleted documents: a segment with none
    # has no deletes file, though tantivy lists one (the open check took it for a lost file)
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        s.upsert_many(
            Memory(id=f"r{i}", namespace=NS, content=f"word{i}", embedding=vec(i))
            for i in range(3000)
        )
        for i in range(0, 3000, 7):
            s.delete(NS, f"r{i}")
        s.compact()
    caplog.set_level(logging.INFO, logger="memini")
    caplog.clear()  # only the reopen's records: the writes above may log a graph build
    with Store.open(path) as s:
        assert [h.memory.id for h in s.keyword_search(NS, "word17")] == ["r17"]
    rebuilt = [r.getMessage() for r in caplog.records if "build" in r.getMessage()]
    assert rebuilt == []


# ---------------------------------------------------------------------------------------------
# derived indexes: missing or damaged ones are rebuilt from the rows, with progress logged


def _damage(index_dir: Path, how: str) -> None:
    if how == "deleted":
        shutil.rmtree(index_dir)
        return
    for f in index_dir.rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage" if how == "garbage" else b"")


@pytest.mark.parametrize("how", ["deleted", "garbage", "truncated"])
def test_damaged_indexes_are_rebuilt_from_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    path = tmp_path / "store"
    with Store.open(path, dims=4) as s:
        _seed(s)
        before, found_before = snapshot(s), searches(s)
    # DESIGN.md: the row store is the source of truth; the vector and keyword indexes are
    # derived and live beside it (here: every subdirectory of the store directory)
    index_dirs = [d for d in path.iterdir() if d.is_dir()]
    if not index_dirs:
        pytest.skip("no index directories in this layout")
    for d in index_dirs:
        _damage(d, how)
    caplog.set_level(logging.DEBUG, logger="memini")
    with Store.open(path) as s:
        assert snapshot(s) == before
        assert searches(s) == found_before
    # API.md section 1: a rebuild of an index on open logs progress on the "memini" logger
    memini_records = [r for r in caplog.records if r.name.split(".")[0] == "memini"]
    assert memini_records, "no progress logged on the memini logger for an index rebuild"


@pytest.mark.parametrize(
    ("pattern", "how"),
    [
        pytest.param("keyword/*.idx", "deleted", id="keyword-idx-deleted"),
        pytest.param("keyword/*.term", "deleted", id="keyword-term-deleted"),
        pytest.param("keyword/*.store", "deleted", id="keyword-store-deleted"),
        pytest.param("keyword/*.fast", "truncated", id="keyword-fast-emptied"),
        pytest.param("keyword/*.pos", "halved", id="keyword-pos-halved"),
        pytest.param("keyword/*.fieldnorm", "garbage", id="keyword-fieldnorm-garbage"),
        pytest.param("keyword/meta.json", "garbage", id="keyword-meta-garbage"),
        pytest.param("vectors/manifest.json", "garbage", id="vector-manifest-garbage"),
        pytest.param("vectors/*.graph", "halved", id="vector-graph-halved"),
        pytest.param("vectors/*.graph", "deleted", id="vector-graph-deleted"),
    ],
)
def test_one_damaged_index_file_is_healed_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, pattern: str, how: str
) -> None:
    path, n = tmp_path / "store", 3000  # enough vectors for a graph partition
    vectors = np.random.default_rng(7).standard_normal((n, 4)).astype(np.float32)
    with Store.open(path, dims=4) as s:
        s.upsert_many(
            Memory(id=f"r{i}", namespace="ns", content=f"shared word{i}", embedding=vectors[i])
            for i in range(n)
        )
    files = sorted(path.glob(pattern))
    assert files, f"no {pattern} in the store"
    for f in files:
        data = f.read_bytes()
        if how == "deleted":
            f.unlink()
        else:
            f.write_bytes({"truncated": b"", "halved": data[: len(data) // 2]}.get(how, b"junk"))
    caplog.set_level(logging.INFO, logger="memini")
    caplog.clear()  # only the reopen's records: the writes above may log a graph build
    with Store.open(path) as s:
        assert len(s.keyword_search("ns", "shared", k=n)) == n
        assert [h.memory.id for h in s.keyword_search("ns", "word17")] == ["r17"]
        for i in range(0, n, 97):
            assert s.vector_search("ns", vectors[i], k=1)[0].memory.id == f"r{i}"
    assert any("rebuild" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]


def test_a_healthy_store_reopens_without_rebuilding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store"
    vectors = np.random.default_rng(3).standard_normal((3000, 4)).astype(np.float32)
    with Store.open(path, dims=4) as s:
        s.upsert_many(
            Memory(id=f"r{i}", namespace="ns", content=f"word{i}", embedding=vectors[i])
            for i in range(3000)
        )
        for i in range(0, 3000, 7):  # deletes: segments with a deletes file
            s.delete("ns", f"r{i}")
    caplog.set_level(logging.INFO, logger="memini")
    caplog.clear()  # only the reopen's records: the writes above may log a graph build
    with Store.open(path) as s:
        assert s.count("ns") == 3000 - len(range(0, 3000, 7))
    rebuilt = [r.getMessage() for r in caplog.records if "build" in r.getMessage()]
    assert rebuilt == []


_CHANGE_AND_DIE = """
import os, sys
import numpy as np
from memini import Memory, Store
vectors = np.load(sys.argv[2])
s = Store.open(sys.argv[1])
for i in range(0, 3000, 5):
    s.delete("ns", f"r{i}")
for i in range(1, 3000, 5):
    s.upsert(Memory(id=f"r{i}", namespace="ns", content="moved", embedding=-vectors[i]))
os._exit(0)  # no close: no checkpoint covers these changes
"""


def test_vectors_changed_after_the_last_checkpoint_survive_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint holds the graph without the vectors the rows hold (they are put back on
    open); the vectors of rows deleted or re-embedded after it are gone from the rows, and the
    store still opens without a rebuild and finds exactly the rows as they are."""
    path, n = tmp_path / "store", 3000  # enough vectors for a graph partition
    vectors = np.random.default_rng(11).standard_normal((n, 4)).astype(np.float32)
    np.save(tmp_path / "v.npy", vectors)
    with Store.open(path, dims=4) as s:
        s.upsert_many(
            Memory(id=f"r{i}", namespace="ns", content=f"w{i}", embedding=vectors[i])
            for i in range(n)
        )
    code = [sys.executable, "-c", _CHANGE_AND_DIE, str(path), str(tmp_path / "v.npy")]
    subprocess.run(code, check=True, timeout=300)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="memini")
    caplog.clear()  # only the reopen's records: the writes above may log a graph build
    with Store.open(path) as s:
        assert [r.getMessage() for r in caplog.records if "build" in r.getMessage()] == []
        assert s.count("ns") == n - n // 5
        for i in range(n):
            hits = s.vector_search("ns", vectors[i], k=1)
            if i % 5 == 0:
                assert hits[0].memory.id != f"r{i}"
            elif i % 5 == 1:
                assert s.vector_search("ns", -vectors[i], k=1)[0].memory.id == f"r{i}"
            else:
                assert hits[0].memory.id == f"r{i}", i
        found = s.vector_search("ns", vectors[7], k=n)
        assert sorted(h.memory.id for h in found) == sorted(f"r{i}" for i in range(n) if i % 5 != 0)


# ---------------------------------------------------------------------------------------------
# durability: a SIGKILLed writer loses no acknowledged write and no batch half-way

WRITER = """
import sys
import numpy as np
from memini import Memory, Store
s = Store.open(sys.argv[1], dims=4)
print("open", flush=True)
b = 0
while True:
    rows = [Memory(id=f"b{b}-{j}", namespace="ns", content=f"common batch{b} row{j}",
                   tags=[f"batch{b}"], embedding=np.full(4, b + j, np.float32))
            for j in range(5)]
    s.upsert_many(rows)
    print(b, flush=True)
    b += 1
"""


def _run_until_killed(script: str, path: Path, acks: int) -> int:
    """Run a writer script on ``path``, SIGKILL it once it has acknowledged ``acks`` steps
    (one integer per line on stdout); return the last step acknowledged."""
    writer = subprocess.Popen(
        [sys.executable, "-c", script, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acknowledged = -1
    try:
        assert writer.stdout is not None
        while acknowledged < acks:
            line = writer.stdout.readline()
            if not line:
                break
            if line.strip().isdigit():
                acknowledged = int(line)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        err = writer.stderr.read() if writer.stderr else ""
        for stream in (writer.stdout, writer.stderr):
            if stream is not None:
                stream.close()
    assert acknowledged >= acks, err
    return acknowledged


def test_sigkilled_writer_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    path = tmp_path / "store"
    acknowledged = _run_until_killed(WRITER, path, 30)

    with Store.open(path) as s:
        batches: dict[int, int] = {}
        for m in s.list("ns", Filter(include_expired=True, include_superseded=True)):
            b = int(m.id[1:].split("-")[0])
            batches[b] = batches.get(b, 0) + 1
        # every acknowledged batch is there, and every batch is whole
        assert set(range(acknowledged + 1)) <= set(batches)
        assert all(n == 5 for n in batches.values()), batches
        assert set(batches) <= set(range(acknowledged + 2))
        # the indexes agree with the rows after recovery
        for b in range(acknowledged + 1):
            assert {h.memory.id for h in s.keyword_search("ns", f"batch{b}", k=10)} >= {
                f"b{b}-{j}" for j in range(5)
            }
            q = np.full(4, b, np.float32)
            [hit] = s.vector_search("ns", q, Filter(tags=[f"batch{b}"]), k=1)
            assert hit.memory.id == f"b{b}-0" and hit.score == 1.0
        total = sum(batches.values())
        assert s.count("ns") == total
        assert len(s.vector_search("ns", np.zeros(4, np.float32), k=10_000)) == total


# ---------------------------------------------------------------------------------------------
# a state machine: writes, searches and reopens against a brute-force model

WORDS = ["apple", "banana", "cherry"]
POOL = [f"m{i}" for i in range(6)]


class StoreMachine(RuleBasedStateMachine):
    """Drives upsert/update/delete/supersede/reopen; every step compares with a dict model."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="memini-machine-"))
        self.store = Store.open(self.dir / "store", dims=4)
        # id -> (word, vector or None, superseded)
        self.model: dict[str, tuple[str, np.ndarray | None, bool]] = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(id=st.sampled_from(POOL), word=st.sampled_from(WORDS), seed=st.integers(0, 3) | st.none())
    def upsert(self, id: str, word: str, seed: int | None) -> None:
        v = None if seed is None else vec(seed * 10 + POOL.index(id))
        self.store.upsert(Memory(id=id, namespace=NS, content=f"{word} row", embedding=v))
        self.model[id] = (word, v, False)

    @rule(id=st.sampled_from(POOL), seed=st.integers(0, 3) | st.none())
    def update_vector(self, id: str, seed: int | None) -> None:
        v = None if seed is None else vec(seed * 10 + POOL.index(id) + 5)
        if id not in self.model:
            with pytest.raises(NotFoundError):
                self.store.update(NS, id, embedding=v)
            return
        self.store.update(NS, id, embedding=v)
        word, _, superseded = self.model[id]
        self.model[id] = (word, v, superseded)

    @rule(id=st.sampled_from(POOL))
    def delete(self, id: str) -> None:
        if id not in self.model:
            with pytest.raises(NotFoundError):
                self.store.delete(NS, id)
            return
        self.store.delete(NS, id)
        del self.model[id]

    @rule(id=st.sampled_from(POOL), superseded=st.booleans())
    def supersede_or_restore(self, id: str, superseded: bool) -> None:
        if id not in self.model:
            return
        if superseded:
            self.store.set_superseded(NS, id, "other")
        else:
            self.store.restore(NS, id)
        word, v, _ = self.model[id]
        self.model[id] = (word, v, superseded)

    @rule(ids=st.lists(st.sampled_from(POOL), unique=True))
    def reassign_away_and_back(self, ids: list[str]) -> None:
        moved = self.store.reassign(NS, ids, "elsewhere")
        assert moved == len([i for i in ids if i in self.model])
        assert self.store.reassign("elsewhere", ids, NS) == moved

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = Store.open(self.dir / "store")

    @rule()
    def compact(self) -> None:
        self.store.compact()

    @invariant()
    def matches_model(self) -> None:
        s, model = self.store, self.model
        assert sorted(m.id for m in s.list(NS, Filter(include_superseded=True))) == sorted(model)
        live = {i for i, (_, _, sup) in model.items() if not sup}
        assert s.count(NS) == len(live)
        q = np.array([0.5, -0.5, 1.0, 0.0], dtype=np.float32)
        hits = s.vector_search(NS, q, k=100)
        with_vector = {i for i in live if model[i][1] is not None}
        assert {h.memory.id for h in hits} == with_vector
        for h in hits:
            v = model[h.memory.id][1]
            assert v is not None
            want = 1 / (1 + np.sqrt(((q.astype(np.float64) - v.astype(np.float64)) ** 2).sum()))
            assert abs(h.score - want) <= 1e-9
        for i, (_, v, _) in model.items():
            got = s.get_embedding(NS, i)
            assert (got is None) == (v is None)
            assert got is None or v is None or got.tobytes() == v.tobytes()
        for word in WORDS:
            want_ids = {i for i in live if model[i][0] == word}
            assert {h.memory.id for h in s.keyword_search(NS, word, k=100)} == want_ids
        assert s.list_namespaces() == ([NS] if model else [])


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(
    max_examples=15, stateful_step_count=25, deadline=None, derandomize=True
)


MIXED_WRITER = """
import sys
import numpy as np
from memini import Memory, Store
s = Store.open(sys.argv[1], dims=4)
i = 0
while True:
    s.upsert(Memory(id=f"r{i}", namespace="ns", content=f"common fresh{i}",
                    embedding=np.full(4, i, np.float32)))
    if i >= 3:
        s.delete("ns", f"r{i - 3}")
    if i >= 2:
        s.update("ns", f"r{i - 2}", content=f"common edited{i - 2}", embedding=None)
    if i >= 1:
        s.set_superseded("ns", f"r{i - 1}", f"r{i}")
        s.restore("ns", f"r{i - 1}")
        s.reassign("ns", [f"r{i - 1}"], "other")
        s.reassign("other", [f"r{i - 1}"], "ns")
    print(i, flush=True)
    i += 1
"""


def test_sigkilled_mixed_writer_indexes_match_rows(tmp_path: Path) -> None:
    """After a crash, replayed indexes agree with the rows: no deleted or stale entry returns."""
    path = tmp_path / "store"
    acknowledged = _run_until_killed(MIXED_WRITER, path, 40)

    with Store.open(path) as s:
        rows = {m.id: m for ns in s.list_namespaces() for m in s.list(ns, EVERYTHING)}
        n = acknowledged
        # every acknowledged iteration's effects are there; iteration n + 1 may have been
        # partly or wholly durable when the writer died (it deletes r{n-2}, edits r{n-1},
        # supersedes r{n} and moves it away and back)
        for i in range(n - 2):
            assert f"r{i}" not in rows, i
        if f"r{n - 2}" in rows:
            assert rows[f"r{n - 2}"].content == f"common edited{n - 2}"
            assert s.get_embedding("ns", f"r{n - 2}") is None
        assert rows[f"r{n - 1}"].namespace == "ns"
        assert rows[f"r{n - 1}"].content in (f"common fresh{n - 1}", f"common edited{n - 1}")
        assert rows[f"r{n}"].content == f"common fresh{n}"
        assert set(rows) <= {f"r{i}" for i in range(n - 2, n + 2)}
        # and both indexes agree with the rows, in every namespace
        for ns in ("ns", "other"):
            mine = {i for i, m in rows.items() if m.namespace == ns}
            with_vector = {i for i in mine if s.get_embedding(ns, i) is not None}
            hits = s.vector_search(ns, np.zeros(4, np.float32), EVERYTHING, k=10_000)
            assert {h.memory.id for h in hits} == with_vector
            for h in hits:
                assert h.memory == rows[h.memory.id]
            found = s.keyword_search(ns, "common", EVERYTHING, k=10_000)
            assert {h.memory.id for h in found} == mine
            for i in mine:
                word = rows[i].content.split()[1]
                assert {h.memory.id for h in s.keyword_search(ns, word, EVERYTHING)} == {i}
