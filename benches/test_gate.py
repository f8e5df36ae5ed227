"""The regression gate (benches/gate.py) on small synthetic pytest-benchmark JSON files.

Fast and benchmark-free, so the CI smoke run (``pytest benches --benchmark-disable``)
exercises the gate and the committed floors file on every push.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import gate

FLOORS = Path(gate.__file__).resolve().parent / "floors.json"


def _results(values: dict[tuple[str, str], Any]) -> dict[str, Any]:
    """A minimal pytest-benchmark JSON: one benchmark per name, ``extra_info`` from values."""
    benches: dict[str, dict[str, Any]] = {}
    for (bench, key), v in values.items():
        benches.setdefault(bench, {"name": bench, "extra_info": {}})["extra_info"][key] = v
    return {"benchmarks": list(benches.values())}


def _at_bounds(nudge: float) -> dict[tuple[str, str], Any]:
    """Every committed floor's key at its bound, moved by ``nudge`` to the safe side."""
    out = {}
    for f in gate.load_floors(FLOORS).values():
        out[(f["bench"], f["key"])] = f["min"] + nudge if "min" in f else f["max"] - nudge
    return out


def _write(tmp_path: Path, data: dict[str, Any], name: str = "run.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_committed_floors_are_valid() -> None:
    floors = gate.load_floors(FLOORS)
    assert len(floors) >= 10
    for name, f in floors.items():
        bound = f.get("min", f.get("max"))
        assert isinstance(bound, int | float), name
        # each floor sits on the right side of the run it was derived from
        if "measured" in f:
            assert (f["measured"] >= f["min"]) if "min" in f else (f["measured"] <= f["max"])


def test_passes_at_and_above_every_floor(tmp_path: Path) -> None:
    assert gate.main([str(_write(tmp_path, _results(_at_bounds(0.0))))]) == 0
    assert gate.main([str(_write(tmp_path, _results(_at_bounds(0.01))))]) == 0


@pytest.mark.parametrize("which", ["min", "max"])
def test_fails_when_one_number_crosses_its_floor(tmp_path: Path, which: str) -> None:
    values = _at_bounds(0.01)
    floors = gate.load_floors(FLOORS)
    name, f = next((n, f) for n, f in floors.items() if which in f)
    values[(f["bench"], f["key"])] = f[which] - 0.01 if which == "min" else f[which] + 0.01
    path = _write(tmp_path, _results(values))
    assert gate.main([str(path)]) == 1
    checks = gate.check(json.loads(path.read_text()), floors)
    assert [c.name for c in checks if not c.ok] == [name]


def test_missing_number_fails_unless_allowed(tmp_path: Path) -> None:
    values = _at_bounds(0.01)
    values.pop(next(iter(values)))
    path = _write(tmp_path, _results(values))
    assert gate.main([str(path)]) == 1
    assert gate.main([str(path), "--allow-missing"]) == 0


def test_absolute_times_are_not_gated() -> None:
    for f in gate.load_floors(FLOORS).values():
        assert not f["key"].endswith(("_unit", "_ms", "_s")), f["key"]


def test_directory_picks_the_newest_json_and_cli_exit_codes(tmp_path: Path) -> None:
    floors = _write(
        tmp_path,
        {"floors": {"r": {"bench": "test_x[a]", "key": "recall@10_a", "min": 0.9}}},
        "floors.json",
    )
    runs = tmp_path / "runs" / "Linux-CPython"
    runs.mkdir(parents=True)
    good = _write(runs, _results({("test_x[a]", "recall@10_a"): 0.95}), "0001_run.json")
    bad = _write(runs, _results({("test_x[a]", "recall@10_a"): 0.85}), "0002_run.json")
    assert gate.find_results(tmp_path / "runs") == bad
    script = str(Path(gate.__file__).resolve())
    run = [sys.executable, script, "--floors", str(floors)]
    ok = subprocess.run([*run, str(good)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    fail = subprocess.run(
        [*run, str(tmp_path / "runs")], capture_output=True, text=True, check=False
    )
    assert fail.returncode == 1 and "FAIL" in fail.stdout
    broken = subprocess.run([*run, str(tmp_path / "nope.json")], capture_output=True, check=False)
    assert broken.returncode == 2
