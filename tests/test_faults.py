"""Storage faults: the store directory turned read-only mid-run, and a full disk.

Each fault must surface as a clear `MeminiError` (never an OSError, a Rust panic or a crash),
leave already-committed rows readable, and the store must reopen afterwards with every
committed row (and none of the writes that failed).

How the faults are made (tests run as root, where chmod does not stop writes):
- read-only: an ext4 image on a loop device, forced read-only mid-run with
  ``mount -o remount,abort`` (the kernel's own "filesystem error" path: every write then fails
  with EROFS). Skipped with a reason when loop mounts are not permitted.
- read-only by permissions: a subprocess that drops root (uid 65534) chmods its store
  directory and files read-only mid-run.
- full disk: a small tmpfs (ENOSPC), and RLIMIT_FSIZE in a subprocess (EFBIG) which needs no
  privileges.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memini import MeminiError, Memory, NotFoundError, Store

pytestmark = pytest.mark.timeout(180)

DIMS = 4


def vec(i: int) -> np.ndarray:
    return np.random.default_rng(i).standard_normal(DIMS).astype(np.float32)


def row(i: int, pad: int = 0) -> Memory:
    return Memory(
        id=f"m{i:05d}",
        namespace="ns",
        content=f"fact number{i} " + "x" * pad,
        embedding=vec(i),
    )


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def expect_memini_error(call: Callable[[], Any], what: str) -> MeminiError | None:
    """Run a call that may fail; a failure must be a MeminiError with a message."""
    try:
        call()
    except MeminiError as e:
        assert str(e).strip(), f"{what}: empty message"
        return e
    except BaseException as e:
        raise AssertionError(f"{what} raised {type(e).__name__}, not MeminiError: {e}") from e
    return None


def verify_reopen(path: Path, committed: list[int], failed: list[str]) -> None:
    with Store.open(path) as s:
        got = {m.id for m in s.list("ns")}
        want = {row(i).id for i in committed}
        assert want <= got, f"lost committed rows: {sorted(want - got)[:10]}"
        for id in failed:
            assert id not in got, f"write {id} raised but its row exists after reopen"
        for i in committed[-5:]:
            assert s.get("ns", row(i).id).content.startswith(f"fact number{i} ")
            assert s.vector_search("ns", vec(i), k=1)[0].memory.id == row(i).id
            assert [h.memory.id for h in s.keyword_search("ns", f"number{i}")] == [row(i).id]
        s.upsert(row(99_999))  # writable again
        assert s.get("ns", row(99_999).id).id == row(99_999).id


# ------------------------------------------------------------------ read-only mid-run


@pytest.fixture
def ext4_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        pytest.skip("loop-mounting an ext4 image needs root and mkfs.ext4")
    img, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with img.open("wb") as f:
        f.truncate(64 * 1024 * 1024)
    if run("mkfs.ext4", "-q", "-F", str(img)).returncode != 0:
        pytest.skip("mkfs.ext4 failed")
    r = run("mount", "-o", "loop,errors=remount-ro", str(img), str(mnt))
    if r.returncode != 0:
        pytest.skip(f"loop mount not permitted here: {r.stderr.strip()}")
    try:
        yield img, mnt
    finally:
        if os.path.ismount(mnt):
            run("umount", "-l", str(mnt))


def remount(img: Path, mnt: Path) -> None:
    """Unmount the aborted filesystem, repair its journal, mount it read-write again."""
    assert run("umount", str(mnt)).returncode == 0
    run("e2fsck", "-fy", str(img))
    r = run("mount", "-o", "loop", str(img), str(mnt))
    assert r.returncode == 0, r.stderr


def test_filesystem_turns_read_only_mid_run(ext4_mount: tuple[Path, Path]) -> None:
    img, mnt = ext4_mount
    path = mnt / "store"
    s = Store.open(path, dims=DIMS)
    committed = list(range(40))
    for i in committed[:20]:
        s.upsert(row(i))
    s.upsert_many([row(i) for i in committed[20:]])
    s.update("ns", row(0).id, content="fact number0 updated")

    r = run("mount", "-o", "remount,abort", str(mnt))
    if r.returncode != 0:
        s.close()
        pytest.skip(f"ext4 'abort' remount unavailable: {r.stderr.strip()}")
    probe = mnt / "probe"
    with pytest.raises(OSError):
        probe.write_text("x")  # the filesystem really is read-only now

    failed = []
    errors = []
    for j, call in enumerate(
        [
            lambda: s.upsert(row(1000)),
            lambda: s.upsert_many([row(1001), row(1002)]),
            lambda: s.upsert(row(1003)),  # a second failure: the writer is not wedged
        ]
    ):
        err = expect_memini_error(call, f"write {j} on a read-only filesystem")
        assert err is not None, f"write {j} on a read-only filesystem returned as durable"
        errors.append(err)
    failed += [row(i).id for i in (1000, 1001, 1002, 1003)]
    for what, call in [
        ("update", lambda: s.update("ns", row(1).id, content="fact number1 lost")),
        ("delete", lambda: s.delete("ns", row(2).id)),
        ("set_superseded", lambda: s.set_superseded("ns", row(3).id, "x")),
        ("compact", s.compact),
        ("set_embed_model", lambda: s.set_embed_model("m")),
    ]:
        err = expect_memini_error(call, what)
        if what != "compact":
            assert err is not None, f"{what} on a read-only filesystem returned as durable"
    msg = str(errors[0]).lower()
    assert "read-only" in msg or "os error 30" in msg, f"unclear message: {errors[0]}"

    # committed rows stay readable and searchable in the open store; failed ones are absent
    assert s.count("ns") == len(committed)
    assert s.get("ns", row(0).id).content == "fact number0 updated"
    assert s.get("ns", row(1).id).content.startswith("fact number1 ")
    for id in failed:
        with pytest.raises(NotFoundError):
            s.get("ns", id)
    assert s.vector_search("ns", vec(5), k=1)[0].memory.id == row(5).id
    assert [h.memory.id for h in s.keyword_search("ns", "number7")] == [row(7).id]
    expect_memini_error(s.close, "close on a read-only filesystem")
    s.close()  # idempotent

    remount(img, mnt)
    verify_reopen(path, committed, failed)
    with Store.open(path) as s2:
        assert s2.get("ns", row(0).id).content == "fact number0 updated"
        assert s2.get("ns", row(2).id).superseded_by is None


CHMOD_CHILD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from memini import MeminiError, Memory, Store

    path = sys.argv[1]
    def row(i):
        v = np.random.default_rng(i).standard_normal(4).astype(np.float32)
        return Memory(id=f"m{i:05d}", namespace="ns", content=f"fact number{i} ", embedding=v)

    s = Store.open(path, dims=4)
    for i in range(20):
        s.upsert(row(i))
        print("ack", i, flush=True)
    for root, dirs, files in os.walk(path):
        for name in files:
            os.chmod(os.path.join(root, name), 0o444)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o555)
    os.chmod(path, 0o555)
    for i in range(1000, 1010):
        try:
            s.upsert(row(i))
        except MeminiError as e:
            print("err", i, type(e).__name__, str(e).replace(chr(10), " "), flush=True)
        else:
            print("ack", i, flush=True)
    for what, call in [("compact", s.compact), ("close", s.close)]:
        try:
            call()
        except MeminiError as e:
            print("err", what, type(e).__name__, flush=True)
    print("done", flush=True)
    """
)


def test_directory_chmod_read_only_as_unprivileged_owner(tmp_path: Path) -> None:
    """Real permission semantics: the child drops root, then makes its store read-only."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch the child to an unprivileged uid")

    def drop() -> None:
        os.setgid(65534)
        os.setuid(65534)

    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import memini"],
            capture_output=True,
            timeout=60,
            preexec_fn=drop,
            check=False,
        )
    except OSError as e:
        pytest.skip(f"uid 65534 cannot run this interpreter ({e}); see the ext4 test")
    if probe.returncode != 0:
        pytest.skip("uid 65534 cannot import memini here; the ext4 'abort' test covers it")
    path = tmp_path / "store"
    path.mkdir()
    os.chown(path, 65534, 65534)
    os.chmod(tmp_path, 0o755)
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", CHMOD_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    acked = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("ack")]
    failed = [
        row(int(line.split()[1])).id
        for line in proc.stdout.splitlines()
        if line.startswith("err") and line.split()[1].isdigit()
    ]
    for root, dirs, files in os.walk(path):
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    os.chmod(path, 0o755)
    verify_reopen(path, acked, failed)


# ------------------------------------------------------------------ full disk


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = run("mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt))
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        run("umount", "-l", str(mnt))


def fill_until_error(s: Store, pad: int, limit: int) -> tuple[list[int], list[str], MeminiError]:
    committed: list[int] = []
    failed: list[str] = []
    for i in range(limit):
        batch = i % 3 == 0
        if batch:
            call: Callable[[], Any] = lambda i=i: s.upsert_many(  # noqa: E731
                [row(i, pad)] + [row(100_000 + 10 * i + j, pad) for j in range(2)]
            )
        else:
            call = lambda i=i: s.upsert(row(i, pad))  # noqa: E731
        err = expect_memini_error(call, f"write {i} on a full disk")
        if err is None:
            committed.append(i)
            if batch:
                committed += [100_000 + 10 * i + j for j in range(2)]
            continue
        failed.append(row(i).id)
        if batch:
            failed += [row(100_000 + 10 * i + j).id for j in range(2)]
        return committed, failed, err
    raise AssertionError(f"{limit} writes of {pad} bytes never filled the disk")


def test_full_disk_tmpfs(small_tmpfs: Path) -> None:
    path = small_tmpfs / "store"
    s = Store.open(path, dims=DIMS)
    # a redb commit writes its header before its pages: one that the full disk cut short is
    # rolled back on reopen because its pages fail their checksums, unless only zero padding
    # went unwritten (then the commit is whole, and the row is there). Rows of ~30 KB fill
    # every page of their 32 KiB leaf, so a cut always takes data (16 KiB rows left the cut
    # in the padding for redb 4's layout)
    committed, failed, err = fill_until_error(s, pad=30_000, limit=2000)
    msg = str(err).lower()
    assert "space" in msg or "os error 28" in msg or "full" in msg, f"unclear message: {err}"
    assert len(committed) > 5
    # still failing, still not wedged, reads fine
    err2 = expect_memini_error(lambda: s.upsert(row(5000, 64 * 1024)), "second write")
    assert err2 is not None
    failed.append(row(5000).id)
    assert s.count("ns") == len(committed)
    for i in committed[-3:]:
        assert s.get("ns", row(i).id).id == row(i).id
        assert s.vector_search("ns", vec(i), k=1)[0].memory.id == row(i).id
    expect_memini_error(s.close, "close on a full disk")
    r = run("mount", "-o", "remount,size=64m", str(small_tmpfs))
    assert r.returncode == 0, r.stderr
    verify_reopen(path, committed, failed)


FSIZE_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    import numpy as np
    from memini import MeminiError, Memory, Store

    path, limit = sys.argv[1], int(sys.argv[2])
    def row(i):
        v = np.random.default_rng(i).standard_normal(4).astype(np.float32)
        return Memory(id=f"m{i:05d}", namespace="ns", content=f"fact number{i} " + "x" * 16384,
                      embedding=v)

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
    s = Store.open(path, dims=4)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    for i in range(5000):
        try:
            s.upsert(row(i))
        except MeminiError as e:
            print("err", i, type(e).__name__, str(e).replace(chr(10), " "), flush=True)
            break
        print("ack", i, flush=True)
    for i in range(5000, 5003):
        try:
            s.upsert(row(i))
            print("ack", i, flush=True)
        except MeminiError as e:
            print("err", i, type(e).__name__, flush=True)
    try:
        s.close()
    except MeminiError as e:
        print("closeerr", type(e).__name__, flush=True)
    print("done", flush=True)
    """
)


def test_full_disk_rlimit_fsize(tmp_path: Path) -> None:
    path = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-c", FSIZE_CHILD, str(path), str(2 * 1024 * 1024)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines and lines[-1] == "done", proc.stdout[-2000:] + proc.stderr[-3000:]
    errs = [line for line in lines if line.startswith("err")]
    assert errs, "RLIMIT_FSIZE never made a write fail"
    assert "File too large" in errs[0] or "os error 27" in errs[0] or "space" in errs[0], errs[0]
    acked = [int(line.split()[1]) for line in lines if line.startswith("ack")]
    failed = [row(int(line.split()[1])).id for line in errs]
    verify_reopen(path, acked, failed)


# --- failures after the commit (the core's test-only failpoints) ---------------------------


@pytest.mark.parametrize("point", ["vector_apply", "keyword_apply"])
def test_a_failed_index_update_is_repaired_before_the_write_returns(
    tmp_path: Path, point: str
) -> None:
    with Store.open(tmp_path / "s", dims=DIMS) as s:
        s.upsert(Memory(id="a", namespace="n", content="apple pie", embedding=vec(1)))
        s._engine.inject_fault(point, 1)
        s.upsert(Memory(id="b", namespace="n", content="banana bread", embedding=vec(2)))
        assert [h.memory.id for h in s.vector_search("n", vec(2), k=1)] == ["b"]
        assert [h.memory.id for h in s.keyword_search("n", "banana")] == ["b"]


def test_an_index_that_cannot_be_repaired_refuses_searches_until_a_write_repairs_it(
    tmp_path: Path,
) -> None:
    with Store.open(tmp_path / "s", dims=DIMS) as s:
        s.upsert(Memory(id="a", namespace="n", content="apple pie", embedding=vec(1)))
        s._engine.inject_fault("vector_apply", 1)
        s._engine.inject_fault("repair", 1)
        with pytest.raises(MeminiError, match="write is stored"):
            s.upsert(Memory(id="b", namespace="n", content="banana bread", embedding=vec(2)))
        assert s.get("n", "b").content == "banana bread"
        assert [h.memory.id for h in s.keyword_search("n", "banana")] == ["b"]
        with pytest.raises(MeminiError, match="out of step"):
            s.vector_search("n", vec(2), k=1)
        s.upsert(Memory(id="c", namespace="n", content="cherry", embedding=vec(3)))
        assert [h.memory.id for h in s.vector_search("n", vec(2), k=1)] == ["b"]
    with Store.open(tmp_path / "s") as s:
        assert {h.memory.id for h in s.vector_search("n", vec(2), k=3)} == {"a", "b", "c"}
