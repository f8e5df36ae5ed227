"""Crash and load safety of ``memini serve`` (API.md section 8), with real processes.

* SIGKILL the server while 4 client processes write (single upserts and batches) and
  search; after each restart every write that got a 2xx is there and found by vector and by
  keyword search, and a write that got no answer is whole or absent (a batch never half).
* SIGTERM drains: the call in flight finishes with its answer, calls after the signal get
  503 (`UnavailableError`), the process exits 0 and the store closes cleanly.
* A client rides through a restart: reads are retried, a write whose connection was refused
  is retried (it never reached the server), and the client keeps its pool.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import memini
from memini import Memory, UnavailableError

DIMS = 8
NS = "crash"

# One client process: writes (single and batches of 3) and searches until the stop file
# appears, logging "try"/"ack"/"unknown" per write (flushed before the next request).
WORKER = r"""
import os, sys, random, time, hashlib
import numpy as np
import memini
from memini import Memory, MeminiError, UnavailableError

url, wid, log_path, stop_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
pause_path = stop_path + ".pause"

def vec(id):
    seed = int.from_bytes(hashlib.sha256(id.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(8).astype(np.float32)

rng = random.Random(wid)
log = open(log_path, "a", buffering=1)
s = memini.connect(url, retry_for=0.0, timeout=10)
i = 0
while not os.path.exists(stop_path):
    if os.path.exists(pause_path):  # the test is checking: hold still
        time.sleep(0.01)
        continue
    i += 1
    op = rng.random()
    try:
        if op < 0.25:
            s.vector_search("crash", vec(f"q{i}"), k=5)
            s.keyword_search("crash", "row", k=5)
            continue
        n = 1 if op < 0.65 else 3
        ids = [f"w{wid}i{i}n{j}" for j in range(n)]
        ms = [Memory(id=x, namespace="crash", content=f"crash row tok{x}z", embedding=vec(x))
              for x in ids]
        log.write("try " + " ".join(ids) + "\n")
        try:
            s.upsert(ms[0]) if n == 1 else s.upsert_many(ms)
        except UnavailableError:
            log.write("unknown " + " ".join(ids) + "\n")
            time.sleep(0.05)
            continue
        log.write("ack " + " ".join(ids) + "\n")
    except UnavailableError:
        time.sleep(0.05)
    except MeminiError as e:
        log.write(f"error {type(e).__name__} {e}\n")
"""


def vec(id: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(id.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(store: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memini.cli",
            "serve",
            "--store",
            str(store),
            "--dims",
            str(DIMS),
            "--port",
            str(port),
            "--no-mcp",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "MEMINI_ADMIN_KEY"},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("server did not become ready")


def read_logs(logs: list[Path]) -> tuple[set[str], list[list[str]], list[str]]:
    """(acked ids, unanswered batches, errors) from the worker logs."""
    acked: set[str] = set()
    unknown: list[list[str]] = []
    errors: list[str] = []
    for p in logs:
        for line in p.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "ack":
                acked.update(rest.split())
            elif kind == "unknown":
                unknown.append(rest.split())
            elif kind == "error":
                errors.append(rest)
    return acked, unknown, errors


def verify(
    s: memini.RemoteStore | memini.Store,
    acked: set[str],
    unknown: list[list[str]],
    searched: int | None = None,
) -> None:
    """Every acked id is stored, an unanswered batch is whole or absent, and ``searched``
    acked ids (None: all) are found by vector and by keyword search."""
    have = set(s.ids_by_prefix(NS, "w", 10**9))
    missing = acked - have
    assert not missing, f"acknowledged writes lost: {sorted(missing)[:10]}"
    for batch in unknown:
        present = [id in have for id in batch]
        assert all(present) or not any(present), f"half a batch stored: {batch} {present}"
    ids = sorted(acked)
    if searched is not None:
        ids = random.Random(len(ids)).sample(ids, min(searched, len(ids)))
    for id in ids:
        assert s.get(NS, id).content == f"crash row tok{id}z", id
        assert s.vector_search(NS, vec(id), k=1)[0].memory.id == id, id
        assert [h.memory.id for h in s.keyword_search(NS, f"tok{id}z", k=1)] == [id], id


def run_kill_rounds(tmp_path: Path, rounds: int) -> None:
    store, port = tmp_path / "store", free_port()
    url = f"http://127.0.0.1:{port}"
    stop = tmp_path / "stop"
    pause = tmp_path / "stop.pause"
    logs = [tmp_path / f"worker{w}.log" for w in range(4)]
    rng = random.Random(17)
    server = start_server(store, port)
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, url, str(w), str(logs[w]), str(stop)])
        for w in range(4)
    ]
    checked: set[str] = set()
    checked_unknown = 0
    try:
        time.sleep(1.0)  # the workers import and connect
        for _ in range(rounds):
            time.sleep(rng.uniform(0.15, 0.5))
            server.kill()
            assert server.wait(30) == -signal.SIGKILL
            server.stderr.close()  # type: ignore[union-attr]
            server = start_server(store, port)
            pause.touch()
            time.sleep(0.05)  # the workers' calls in flight answer (or fail)
            acked, unknown, errors = read_logs(logs)
            assert not errors, errors[:5]
            with memini.connect(url, retry_for=10) as s:
                verify(s, acked, unknown[checked_unknown:], searched=20)
            pause.unlink()
            checked |= acked
            checked_unknown = len(unknown)
        assert len(checked) > rounds  # the workers did write between the kills
    finally:
        stop.touch()
        for w in workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        server.stderr.close()  # type: ignore[union-attr]
    acked, unknown, _ = read_logs(logs)
    with memini.Store.open(store) as local:  # after a clean stop, in process: all of them
        verify(local, acked, unknown)


def test_sigkill_server_under_load_loses_no_acknowledged_write(tmp_path: Path) -> None:
    run_kill_rounds(tmp_path, 20)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigkill_server_under_load_100_rounds(tmp_path: Path) -> None:
    run_kill_rounds(tmp_path, 100)


@pytest.fixture
def server_proc(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    store, port = tmp_path / "store", free_port()
    proc = start_server(store, port)
    yield proc, f"http://127.0.0.1:{port}", store
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    proc.stderr.close()  # type: ignore[union-attr]


def test_sigterm_drains_in_flight_and_refuses_new(
    server_proc: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    proc, url, store = server_proc
    big = [
        Memory(id=f"b{i}", namespace=NS, content=f"bulk row {i}", embedding=vec(f"b{i}"))
        for i in range(30_000)
    ]
    result: dict[str, object] = {}

    def write() -> None:
        with memini.connect(url, retry_for=0, timeout=120) as s:
            try:
                result["n"] = s.upsert_many(big)
            except Exception as e:
                result["error"] = e

    t = threading.Thread(target=write)
    t.start()
    with memini.connect(url, retry_for=0) as s:
        deadline = time.monotonic() + 30
        # wait until the batch is at the store (its body read and decoded)
        while b"memini_calls_in_flight 1.0" not in httpx.get(f"{url}/metrics").content:
            time.sleep(0.01)
            if time.monotonic() > deadline or not t.is_alive():
                break
        assert t.is_alive(), result
        proc.send_signal(signal.SIGTERM)
        for _ in range(500):  # until the signal is handled (a loaded machine is slow)
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 503:
                    break
            except httpx.TransportError:
                break
            time.sleep(0.01)
        refused = 0
        for _ in range(5):
            try:
                s.count(NS)
            except UnavailableError:
                refused += 1
        assert refused == 5
    t.join(120)
    assert result.get("n") == len(big), result
    assert proc.wait(60) == -signal.SIGTERM  # uvicorn re-raises the signal after draining
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    assert "Traceback" not in err, err[-2000:]
    with memini.Store.open(store) as local:  # the lock is released and every row is there
        assert local.count(NS) == len(big)


def test_client_survives_a_restart(
    server_proc: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    proc, url, store = server_proc
    port = int(re.sub(r".*:", "", url))
    with memini.connect(url, retry_for=20) as s:
        s.upsert(Memory(id="r1", namespace=NS, content="before", embedding=vec("r1")))
        proc.kill()
        proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]
        restarted: list[subprocess.Popen[bytes]] = []

        def restart() -> None:
            time.sleep(0.5)
            restarted.append(start_server(store, port))

        t = threading.Thread(target=restart)
        t.start()
        try:
            # refused connections never reached the server: the write is retried
            s.upsert(Memory(id="r2", namespace=NS, content="after", embedding=vec("r2")))
            assert s.get(NS, "r1").content == "before"
            assert s.count(NS) == 2
        finally:
            t.join()
            for p in restarted:
                p.send_signal(signal.SIGTERM)
                assert p.wait(60) == -signal.SIGTERM
                p.stderr.close()  # type: ignore[union-attr]
    with memini.connect(url, retry_for=0) as s, pytest.raises(UnavailableError):
        s.count(NS)  # nothing listens any more; without a retry window: at once
