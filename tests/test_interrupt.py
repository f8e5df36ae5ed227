"""Ctrl-C during a long core call (issue 33 item 16): `KeyboardInterrupt` within a couple of
seconds, and the batch stays all-or-nothing (an interrupted `upsert_many` stores nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from embed_helpers import needs_weights

# Opens a store in argv[1] and runs one `upsert_many` of argv[2] rows ("vectors": 64-d rows
# with their vectors; "embed": texts the local embedder embeds). SIGINT comes 0.3 s after
# the core call starts (the engine's `upsert_many`, or the embedder's `embed`): a thread
# sends it once the main thread releases the GIL. Prints whether KeyboardInterrupt was raised,
# how long after the signal, and how many rows the store then holds.
INTERRUPTED = """
import json, os, signal, sys, threading, time
import numpy as np
from memini import Memory, Store
from memini.embed import LocalEmbedder

path, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sent = []

def interrupt_soon():
    def fire():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Timer(0.3, fire).start()

class Timed:
    def __init__(self, inner):
        self._inner = inner
    def __getattr__(self, name):
        return getattr(self._inner, name)
    def upsert_many(self, rows):
        interrupt_soon()
        return self._inner.upsert_many(rows)

class TimedEmbedder(LocalEmbedder):
    def embed(self, texts):
        interrupt_soon()
        return super().embed(texts)

if mode == "vectors":
    store = Store.open(path, dims=64, metric="cos")
    store._engine = Timed(store._engine)
    vecs = np.random.default_rng(0).random((n, 64), dtype=np.float32)
    ms = [Memory(id=f"m{i}", namespace="ns", content=f"row {i}", embedding=vecs[i])
          for i in range(n)]
else:
    store = Store.open(path, embedder=TimedEmbedder())
    ms = [Memory(id=f"m{i}", namespace="ns", content=f"text number {i} about tea and cake")
          for i in range(n)]
try:
    store.upsert_many(ms)
    raised, after = False, time.monotonic() - sent[0] if sent else None
except KeyboardInterrupt:
    raised, after = True, time.monotonic() - sent[0]
print(json.dumps({"raised": raised, "after": after, "count": store.count("ns")}))
store.close()
"""


def interrupted(tmp_path: Path, n: int, mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, str(tmp_path / "store"), str(n), mode],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def test_ctrl_c_stops_a_large_upsert_many_at_once_storing_nothing(tmp_path: Path) -> None:
    # before: noticed only once all 50,000 rows were stored and indexed
    out = interrupted(tmp_path, 50_000, "vectors")
    assert out["raised"], out
    assert isinstance(out["after"], float) and out["after"] < 2.0, out
    assert out["count"] == 0, out


@needs_weights
def test_ctrl_c_stops_embedding_a_batch_at_once_storing_nothing(tmp_path: Path) -> None:
    # before: noticed once the 3,000 texts were embedded (~20 s), nothing then stored
    out = interrupted(tmp_path, 3_000, "embed")
    assert out["raised"], out
    assert isinstance(out["after"], float) and out["after"] < 2.0, out
    assert out["count"] == 0, out
