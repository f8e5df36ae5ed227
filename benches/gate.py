"""The benchmark regression gate: fail when a stored ratio or recall drops below its floor.

Usage: ``python benches/gate.py RESULTS [--floors benches/floors.json] [--allow-missing]``.
``RESULTS`` is a pytest-benchmark JSON (``--benchmark-json=...`` or a file that
``--benchmark-save`` wrote), or a directory such as ``.benchmarks``, in which case the newest
``*.json`` under it is read.

``benches/floors.json`` maps a readable name to where the number lives and its bound::

    "vector.recall_at_10.filter_1pct": {"bench": "test_vector_search[p1]",
                                        "key": "recall@10_p1_(1%)", "min": 0.97}

``bench`` is the benchmark's ``name`` in the JSON (the test id), ``key`` a key of its
``extra_info`` as `_data.report` writes it (``<measure name, spaces -> _>``, plus ``_ratio``
for the memini/peer ratio), and the bound is ``min`` (the value must be >= it) or ``max``
(<=, for lower-is-better ratios such as RSS). Only ratios measured side by side and quality
numbers (recall, exactness, overlap) are gated; absolute times never are, because this
machine is shared and its speed moves. The floors were set a little below a 100k-row
``make bench`` run; a run at other sizes (the 10k smoke run) is not comparable.

Exit status: 0 when every floor holds, 1 when one is broken (or, without
``--allow-missing``, when a gated number is absent from the results), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FLOORS = Path(__file__).resolve().parent / "floors.json"


@dataclass
class Check:
    """One floor checked against the results."""

    name: str
    value: float | None
    bound: float
    kind: str  # "min" | "max"
    ok: bool
    why: str = ""


def find_results(path: Path) -> Path:
    """The JSON file itself, or the newest ``*.json`` under a directory."""
    if path.is_dir():
        files = sorted(path.rglob("*.json"), key=lambda p: p.stat().st_mtime)
        if not files:
            raise FileNotFoundError(f"no *.json under {path}")
        return files[-1]
    return path


def load_floors(path: Path) -> dict[str, dict[str, Any]]:
    """The ``floors`` mapping of a floors file, validated."""
    floors = json.loads(path.read_text(encoding="utf-8"))["floors"]
    for name, f in floors.items():
        if not isinstance(f.get("bench"), str) or not isinstance(f.get("key"), str):
            raise ValueError(f"floor {name!r}: needs string 'bench' and 'key'")
        if ("min" in f) == ("max" in f):
            raise ValueError(f"floor {name!r}: needs exactly one of 'min' and 'max'")
    return floors


def check(results: dict[str, Any], floors: dict[str, dict[str, Any]]) -> list[Check]:
    """Every floor against the benchmarks' ``extra_info``."""
    by_name: dict[str, dict[str, Any]] = {}
    for b in results.get("benchmarks", []):
        by_name[b["name"]] = b.get("extra_info") or {}
    out = []
    for name, f in floors.items():
        kind = "min" if "min" in f else "max"
        bound = float(f[kind])
        info = by_name.get(f["bench"])
        if info is None:
            out.append(Check(name, None, bound, kind, False, f"benchmark {f['bench']} missing"))
            continue
        raw = info.get(f["key"])
        if isinstance(raw, bool) or not isinstance(raw, int | float) or math.isnan(raw):
            out.append(Check(name, None, bound, kind, False, f"{f['key']!r} missing"))
            continue
        value = float(raw)
        ok = value >= bound if kind == "min" else value <= bound
        out.append(Check(name, value, bound, kind, ok))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the gate; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="pytest-benchmark JSON, or a directory of them")
    ap.add_argument("--floors", type=Path, default=FLOORS)
    ap.add_argument(
        "--allow-missing", action="store_true", help="skip floors absent from the results"
    )
    args = ap.parse_args(argv)
    try:
        path = find_results(args.results)
        results = json.loads(path.read_text(encoding="utf-8"))
        floors = load_floors(args.floors)
    except (OSError, ValueError, KeyError) as e:
        print(f"gate: cannot read input: {e}", file=sys.stderr)
        return 2
    checks = check(results, floors)
    failed = 0
    print(f"gate: {path} against {args.floors}")
    for c in checks:
        op = ">=" if c.kind == "min" else "<="
        if c.value is None:
            status = "skip" if args.allow_missing else "FAIL"
            failed += not args.allow_missing
            print(f"  {status:<4} {c.name:<48} {c.why}")
            continue
        failed += not c.ok
        print(f"  {'ok' if c.ok else 'FAIL':<4} {c.name:<48} {c.value:>10.4f} {op} {c.bound:<8.4g}")
    print(f"gate: {len(checks) - failed}/{len(checks)} floors hold" + (" -> FAIL" * bool(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
