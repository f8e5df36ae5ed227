"""The store on a many-core machine, simulated on this one.

Fleets run memini on 32-128-core servers; here a 64-thread worker pool
(``RAYON_NUM_THREADS=64``, more threads than usearch has slots) and 48 Python threads stand in
for one. Each scenario runs in a fresh interpreter, since the pool is sized once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

SCENARIO = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    import numpy as np
    from memini import Memory, Store

    path, dims, rows = sys.argv[1], 16, 6000
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((rows + 48 * 30, dims)).astype(np.float32)

    def memory(i):
        return Memory(id=f"r{i}", namespace="n", content=f"row {i}", embedding=vectors[i])

    def check(s, expected):
        assert s.count("n") == expected, (s.count("n"), expected)
        for i in range(0, expected, 101):
            hits = s.vector_search("n", vectors[i], k=10)
            assert len(hits) == 10, len(hits)
        assert len(s.keyword_search("n", "row", k=10)) == 10

    with Store.open(path, dims=dims) as s:
        s.upsert_many([memory(i) for i in range(rows)])          # a bulk load into a graph
        check(s, rows)
        errors = []

        def work(t):
            try:
                for j in range(30):
                    if t % 2:
                        s.upsert(memory(rows + t // 2 * 30 + j))
                    else:
                        assert len(s.vector_search("n", vectors[t * 30 + j], k=10)) == 10
                        s.vector_search_many("n", vectors[j : j + 8], k=5)
            except Exception as e:  # reported below: a thread's failure fails the run
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(48)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors[:3]
        total = rows + 24 * 30
        check(s, total)

    with Store.open(path) as s:                                   # loads the checkpoint
        check(s, total)
    Path(path, "vectors", "manifest.json").unlink()
    with Store.open(path) as s:                                   # rebuilds from the rows
        check(s, total)
    print("ok")
    """
)


def test_sixty_four_workers_and_forty_eight_threads(tmp_path: Path) -> None:
    env = {**os.environ, "RAYON_NUM_THREADS": "64"}
    run = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(tmp_path / "store")],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "ok"
    assert "Reserve capacity" not in run.stderr
