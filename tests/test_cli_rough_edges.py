"""What a new user hit on the command line (issue 33 of round 3): passwords on the terminal,
text stored without vectors, log noise, traps in the defaults, messages that could not work,
and the ``memini key`` command that replaces key management in open mode."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import memini
from embed_helpers import needs_weights
from memini import Memory, Store, hash_api_key
from memini.cli import main
from memini.embed import LocalEmbedder

MEMINI = [sys.executable, "-m", "memini.cli"]


# ------------------------------------------------------------------------ secrets


@pytest.mark.parametrize("command", ["stats", "compact", "serve", "export", "recall"])
def test_postgres_passwords_never_reach_the_terminal(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql://user:hunter2@127.0.0.1:1/db?password=hunter3&sslmode=disable"
    argv = [command, "--store", url] + (["ns", "text"] if command == "recall" else [])
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "hunter" not in out + err
    assert "PostgreSQL cannot be reached" in err
    if "user:" in err:  # the URL is named: masked
        assert "user:***@127.0.0.1:1" in err and "password=***" in err


def test_shown_location_masks_every_password_form() -> None:
    from memini.store import shown_location

    assert shown_location("postgresql://u:p@h/db") == "postgresql://u:***@h/db"
    assert shown_location("postgres://h/db?password=p&x=1") == "postgres://h/db?password=***&x=1"
    assert shown_location("postgresql://h/db") == "postgresql://h/db"
    assert shown_location(Path("/tmp/a:b@c")) == "/tmp/a:b@c"


# ------------------------------------------------------------------------ embedders


def test_mcp_on_a_new_directory_names_the_flag_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "--store", str(tmp_path / "new"), "--namespace", "ns"]) == 1
    err = capsys.readouterr().err
    assert "--embedder local" in err and "--dims N" in err
    assert not (tmp_path / "new").exists()


@needs_weights
def test_import_of_plain_rows_embeds_them_with_the_stores_model(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", embedder=LocalEmbedder()):
        pass
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "tea", "content": "Alice drinks green tea"}) + "\n")
    assert main(["import", str(rows), "--store", str(tmp_path / "s"), "--namespace", "n"]) == 0
    with Store.open(tmp_path / "s") as s:
        assert s.get_embedding("n", "tea") is not None


# ------------------------------------------------------------------------ noise


def _serve(store: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [*MEMINI, "serve", "--store", str(store), "--port", "0", *extra],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMINI_ADMIN_KEY": "noise-admin"},
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        found = re.search(r"serving .* at (http://\S+)", line)
        if found:
            return proc, found.group(1)
    proc.kill()
    raise AssertionError("memini serve did not start")


def test_serve_logs_refusals_and_no_dependency_chatter(tmp_path: Path) -> None:
    """tantivy's INFO lines at every commit, merge and close filled stderr; refused
    requests were not logged at all."""
    proc, url = _serve(tmp_path / "s", "--dims", "4")
    try:
        auth = {"authorization": "Bearer noise-admin"}
        memories = [
            {"id": f"m{i}", "namespace": "ns", "content": f"row {i}", "embedding": [i, 1, 0, 0]}
            for i in range(50)
        ]
        assert httpx.post(f"{url}/v1/upsert_many", json={"memories": memories}, headers=auth)
        assert httpx.post(f"{url}/v1/compact", json={}, headers=auth).status_code == 200
        r = httpx.post(f"{url}/v1/count", json={"namespace": "ns"})
        assert r.status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, -signal.SIGTERM), err  # uvicorn re-raises it after draining
    assert "tantivy" not in err
    assert "refused count() with 401" in err
    assert "noise-admin" not in err


def test_mcp_over_stdio_says_nothing_of_sockets(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*MEMINI, "mcp", "--store", str(tmp_path / "s"), "--dims", "4", "--namespace", "ns"],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "WITHOUT authentication" not in proc.stderr
    assert "tantivy" not in proc.stderr


# ------------------------------------------------------------------------ defaults


def test_demo_refuses_a_store_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``memini demo --store DIR`` on an existing store added 10,000 rows to it."""
    with Store.open(tmp_path, dims=384, metric="cos") as s:
        s.upsert(Memory(id="mine", namespace="notes", content="my own memory"))
    assert main(["demo", "--store", str(tmp_path)]) == 1
    assert "holds memories of its own" in capsys.readouterr().err
    with Store.open(tmp_path) as s:
        assert s.list_namespaces() == ["notes"] and s.count("notes") == 1


# ------------------------------------------------------------------------ messages


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    version, kernels = capsys.readouterr().out.splitlines()
    assert version == f"memini {memini.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", memini.__version__)
    # the kernels chosen at run time, as a store's stats() shows them
    with Store.open(None, dims=2) as s:
        k = s.stats()["simd"]
    assert kernels == (
        f"SIMD on this CPU: vector graph {k['vector_graph']}, compact scan {k['compact_scan']}, "
        f"embedder {k['embedder']}"
    )
    assert k["compact_scan"] in ("v4", "v3", "neon", "scalar")
    # the embedder's products run on AVX-512 BF16 where the CPU has it, else through pulp
    assert k["embedder"] in ("avx512bf16", k["compact_scan"])
    assert k["vector_graph"]


def test_a_filter_in_the_vector_slot_is_told_where_it_goes() -> None:
    with Store.open(None, dims=2) as s, pytest.raises(memini.InvalidArgumentError, match="filter="):
        s.recall("n", "q", memini.Filter(tags=["x"]))  # type: ignore[arg-type]


def test_recall_command_takes_fusion_and_filters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store.open(tmp_path, dims=2) as s:
        s.upsert_many(
            [
                Memory(id="a", namespace="n", content="green tea", tags=["drink"]),
                Memory(id="b", namespace="n", content="green paint", tier="procedural"),
            ]
        )
    capsys.readouterr()
    argv = ["recall", "--store", str(tmp_path), "n", "green", "--json", "--fusion", "rrf"]
    assert main([*argv, "--tag", "drink"]) == 0
    assert [json.loads(x)["id"] for x in capsys.readouterr().out.splitlines()] == ["a"]
    assert main([*argv, "--tier", "procedural"]) == 0
    assert [json.loads(x)["id"] for x in capsys.readouterr().out.splitlines()] == ["b"]


# ------------------------------------------------------------------------ memini key


def test_key_command_adds_lists_and_deletes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Store.open(tmp_path, dims=2).close()
    assert main(["key", "add", "alice", "--store", str(tmp_path), "--home", "team/a"]) == 0
    secret = capsys.readouterr().out.strip()
    with Store.open(tmp_path) as s:
        key = s.authenticate(secret)
        assert key is not None and key.home_ns == "team/a"
        assert key.hash == hash_api_key(secret)
    assert main(["key", "list", "--store", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "alice" in listed and "team/a" in listed and secret not in listed
    assert main(["key", "add", "alice", "--store", str(tmp_path), "--home", "x"]) == 1
    assert main(["key", "add", "bob", "--store", str(tmp_path)]) == 1  # no --home
    assert main(["key", "delete", "alice", "--store", str(tmp_path)]) == 0
    assert main(["key", "delete", "alice", "--store", str(tmp_path)]) == 1
    with Store.open(tmp_path) as s:
        assert s.list_api_keys() == []
