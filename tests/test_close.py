"""`close()` ends everything the store started: no background work outlives it.

After `close()` returns, no file in the store directory changes (tantivy's merges included),
and an interpreter that exits right after writing — with or without `close()` — exits
cleanly: no panic from a background thread that outlived Python.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

# many small commits make many keyword segments, so tantivy merges them in the background
WRITER = textwrap.dedent(
    """
    import sys
    from memini import Memory, Store

    s = Store.open(sys.argv[1], dims=4)
    for batch in range(16):
        s.upsert_many([
            Memory(id=f"m{batch}-{i}", namespace="n",
                   content=" ".join(f"w{(i * 7 + j * 13) % 5003}" for j in range(30)))
            for i in range(5000)
        ])
        s.keyword_search("n", "word1")
    if sys.argv[2] == "close":
        s.close()
    """
)


def snapshot(d: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in d.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("how", ["close", "exit"], ids=["closed", "left-open-at-exit"])
def test_exit_after_writes_is_clean(tmp_path: Path, how: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path / "s"), how],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "panicked" not in run.stderr, run.stderr[-2000:]
    assert "Python interpreter is not initialized" not in run.stderr
    before = snapshot(tmp_path / "s")
    time.sleep(1.5)
    assert snapshot(tmp_path / "s") == before


def test_an_engine_dropped_at_interpreter_exit_closes_quietly(tmp_path: Path) -> None:
    """A core engine nobody closed (a `Store` closes its own at exit) is dropped while the
    interpreter shuts down; its close logs (tantivy releasing its lock), and those records
    must be dropped, not panic attaching to a finalised interpreter."""
    leak = textwrap.dedent(
        """
        import sys
        from memini._core import Engine

        ENGINE = Engine(sys.argv[1], 4, "cos")  # the raw core, which nothing closes at exit
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", leak, str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "panicked" not in run.stderr and "PanicException" not in run.stderr, run.stderr[-2000:]
    from memini._core import Engine

    Engine(str(tmp_path / "s"), 4, "cos").close()  # closed at exit: its lock is free


def test_no_file_changes_after_close(tmp_path: Path) -> None:
    from memini import Memory, Store

    s = Store.open(tmp_path / "s", dims=4)
    for batch in range(16):
        s.upsert_many(
            [
                Memory(
                    id=f"m{batch}-{i}",
                    namespace="n",
                    content=" ".join(f"w{(i * 7 + j * 13) % 5003}" for j in range(30)),
                )
                for i in range(5000)
            ]
        )
    s.close()
    before = snapshot(tmp_path / "s")
    time.sleep(1.5)
    assert snapshot(tmp_path / "s") == before
