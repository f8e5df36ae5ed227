"""Event log benchmarks: ``append_events`` batches and ``list_events`` over a large log.

* ``append_events`` of 100 rows per operation (one batch = one op_id), on disk (WAL,
  ``synchronous=FULL``: every call is a durable commit) and in memory;
* a batch of the served log (the rows of 200 k=10 searches) packed by the core against the
  same rows as tuples, on disk: CPU per row;
* ``list_events`` over ``MEMINI_BENCH_EVENTS`` events (default 1,000,000) with a text filter
  (rare, common and absent text) and with a keyset cursor deep in the log (alone, with one
  namespace, several namespaces, kinds, and text).

Each benchmark records the ``EXPLAIN QUERY PLAN`` of what it runs in ``extra_info["plan"]``
and checks that the plan reads through the indexes it is meant to use. CI smoke-runs this with
a small ``MEMINI_BENCH_EVENTS`` and ``--benchmark-disable``.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memini import events as events_module
from memini._sqlite import MetaDB
from memini.types import Event, EventFilter, EventKind, Tier

N_EVENTS = int(os.environ.get("MEMINI_BENCH_EVENTS", "1000000"))
ROWS_PER_OP = 10  # a recall: one row per returned memory
N_NAMESPACES = 20
T0 = datetime(2025, 1, 1, tzinfo=UTC)
STEP = timedelta(milliseconds=7)  # distinct, increasing created_at per row

RARE = "quokka"  # in about 50 operations, wherever the log's size
COMMON = "espresso"  # in every 5th operation
ABSENT = "zyzzyva"

_VOCABULARY = """
user prefers dark mode coffee tea deadline friday meeting project rust python database memory
vector search keyword agent summary notes travel berlin budget invoice review design api
latency cache index backup release plan sprint bug fix test deploy team
"""
_WORDS = _VOCABULARY.split()


def make_op(i: int, rng: random.Random, n_ops: int) -> list[Event]:
    """Operation ``i``: ten rows sharing a query, each with a memory summary."""
    words = rng.choices(_WORDS, k=5)
    if i % 5 == 0:
        words.append(COMMON)
    every = max(1, n_ops // 50)
    if i % every == every // 2:
        words.append(RARE)
    rng.shuffle(words)
    query = " ".join(words).capitalize()
    namespace = f"ns{rng.randrange(N_NAMESPACES):02d}"
    kind = EventKind.RECALL if i % 4 else EventKind.BRIEFING
    base = T0 + STEP * (i * ROWS_PER_OP)
    return [
        Event(
            op_id=f"op{i:09d}",
            kind=kind,
            namespace=namespace,
            query=query,
            memory_id=f"m{rng.randrange(10**6)}",
            memory_ns=namespace,
            memory_tier=rng.choice(list(Tier)),
            memory_summary=" ".join(rng.choices(_WORDS, k=8)).capitalize(),
            rank=r,
            score=rng.random(),
            detail={"k": 10} if r == 0 else {},
            created_at=base + STEP * r,
        )
        for r in range(ROWS_PER_OP)
    ]


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetaDB]:
    """An on-disk log of ``N_EVENTS`` events, built through the public API in big batches."""
    rng = random.Random(20250101)
    db = MetaDB.open(tmp_path_factory.mktemp("events"))
    n_ops = max(1, N_EVENTS // ROWS_PER_OP)
    started = time.perf_counter()
    batch: list[Event] = []
    for i in range(n_ops):
        batch += make_op(i, rng, n_ops)
        if len(batch) >= 20_000:
            db.append_events(batch)
            batch = []
    if batch:
        db.append_events(batch)
    elapsed = time.perf_counter() - started
    print(f"\nbuilt a log of {n_ops * ROWS_PER_OP} events in {elapsed:.1f}s: {db.stats()}")
    yield db
    db.close()


def check_plan(plan: list[str], wanted: list[str], forbidden: tuple[str, ...] = ()) -> None:
    """Fail when a plan does not use the expected access paths."""
    text = "\n".join(plan)
    for w in wanted:
        assert w in text, f"expected {w!r} in the plan:\n{text}"
    for f in forbidden:
        assert f not in text, f"unexpected {f!r} in the plan:\n{text}"


# -- append_events ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["disk", "memory"])
def test_append_events_100_rows_per_op(benchmark: Any, tmp_path: Path, where: str) -> None:
    db = MetaDB.open(tmp_path if where == "disk" else None)
    rng = random.Random(1)
    ops = itertools.count()
    batches = [make_op(i, rng, 1000) for i in range(10)]

    def one_op() -> None:
        # 100 rows of one operation: ten recall groups relabelled to one op_id.
        i = next(ops)
        db.append_events(
            [
                Event(**{**e.__dict__, "op_id": f"bench{i}", "created_at": None, "id": 0})
                for b in batches
                for e in b
            ]
        )

    try:
        benchmark.group = "append_events"
        benchmark(one_op)
        benchmark.extra_info["rows_per_op"] = 100
        benchmark.extra_info["durable"] = where == "disk"
        assert db.stats()["events"] == 100 * next(ops)
    finally:
        db.close()


def _served_batch(searches: int, rng: random.Random) -> tuple[Any, ...]:
    """The rows of ``searches`` served k=10 searches as the server's log takes them from the
    core, one operation: as tuples and as one `memini.events.PackedRows`."""
    from memini._core import search_event_rows
    from memini.types import new_id

    def hit() -> tuple[str, str, str, str, float]:
        summary = " ".join(rng.choices(_WORDS, k=12)).capitalize()  # folded: a 2nd text
        return new_id(), "ns00", "semantic", summary, float(np.float32(rng.random()))

    results = [[hit() for _ in range(ROWS_PER_OP)] for _ in range(searches)]
    call = (new_id(), "vector_search_many", "open", "10", ["ns00"], "", 1, results)
    rows, queries, _ = search_event_rows(*call, events_module.fold, False)
    _, _, packed = search_event_rows(*call, events_module.fold, True)
    assert packed is not None and packed[2] == len(rows)
    return rows, queries, packed


def test_append_served_search_rows(benchmark: Any, tmp_path: Path) -> None:
    """One batch of the served log (``memini.server._events.EventRecorder``): the rows of 200
    k=10 searches appended on disk (a durable commit), packed by the core as one JSON text
    that SQLite expands (the served path: the GIL is not held per row) against the same rows
    bound as tuples; CPU per row of each, alternating. The plan reads each packed row once
    (``MATERIALIZE``: a row's 17 ``json_extract`` calls on ``json_each``'s ``value`` each
    rendered the row again)."""
    db = MetaDB.open(tmp_path)
    rows, queries, packed = _served_batch(200, random.Random(7))
    times: dict[str, list[float]] = {"packed": [], "tuples": []}

    def run() -> None:
        for _ in range(5):
            for how in times:
                c0 = time.process_time()
                if how == "packed":
                    db.append_event_rows([], [], packed)
                else:
                    db.append_event_rows(rows, queries)
                times[how].append(time.process_time() - c0)

    try:
        benchmark.group = "append_events"
        benchmark.pedantic(run, rounds=1, iterations=1)
        explain = f"EXPLAIN QUERY PLAN {events_module._UNPACK_ROWS}"
        plan = [r[3] for r in db._conn.execute(explain, ("[]", 1))]
        check_plan(plan, ["MATERIALIZE"])
        per_row = {k: 1e6 * sorted(v)[len(v) // 2] / len(rows) for k, v in times.items()}
        benchmark.extra_info.update(
            {f"{k}_cpu_us_per_row": round(v, 2) for k, v in per_row.items()}
            | {"rows_per_batch": len(rows), "plan": plan}
        )
        print(f"\nserved batch of {len(rows)} rows, CPU per row (us): {per_row}")
        assert db.stats()["events"] == 2 * len(rows) * len(times["packed"])
    finally:
        db.close()


# -- list_events with a text filter -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expect_rows"),
    [
        pytest.param(RARE, True, id="rare"),
        pytest.param(COMMON.upper(), True, id="common"),
        pytest.param(ABSENT, False, id="absent"),
    ],
)
def test_list_events_text_filter(
    benchmark: Any, big_log: MetaDB, text: str, expect_rows: bool
) -> None:
    flt = EventFilter(text=text, limit=50)
    plan = big_log.explain_list_events(flt)
    benchmark.group = "list_events text"
    rows = benchmark(big_log.list_events, flt)
    benchmark.extra_info.update(n_events=N_EVENTS, rows=len(rows), plan=plan)
    assert bool(rows) == expect_rows
    check_plan(plan, ["SCAN events"])  # step 1: one pass, no index can answer a substring
    if rows:
        n_ops = int(next(line for line in plan if "operations match" in line).split()[1])
        if n_ops > events_module.PROBE_MAX_OPS:
            check_plan(plan, ["SCAN events USING INDEX events_by_time"])  # walk newest first
        else:
            check_plan(plan, ["SEARCH events USING INDEX events_by_op (op_id=?)"])  # probe


# -- list_events with a keyset cursor -----------------------------------------------------------

CURSOR_FILTERS: dict[str, tuple[Callable[[datetime, int], EventFilter], list[str]]] = {
    "cursor": (
        lambda b, i: EventFilter(before=b, before_id=i, limit=50),
        ["SEARCH events USING INDEX events_by_time (created_at<?)"],
    ),
    "cursor+namespace": (
        lambda b, i: EventFilter(namespace="ns07", before=b, before_id=i, limit=50),
        ["SEARCH events USING INDEX events_by_ns_time (namespace=? AND created_at<?)"],
    ),
    "cursor+3-namespaces": (
        lambda b, i: EventFilter(
            namespaces=["ns01", "ns02", "ns03"], before=b, before_id=i, limit=50
        ),
        ["USING INDEX events_by_ns_time (namespace=? AND created_at<?)"],
    ),
    "cursor+kind": (
        lambda b, i: EventFilter(kinds=[EventKind.BRIEFING], before=b, before_id=i, limit=50),
        ["SEARCH events USING INDEX events_by_time (created_at<?)"],
    ),
    "cursor+since": (
        lambda b, i: EventFilter(since=b - timedelta(hours=1), before=b, before_id=i, limit=50),
        ["SEARCH events USING INDEX events_by_time (created_at>? AND created_at<?)"],
    ),
    "cursor+text": (
        lambda b, i: EventFilter(text=COMMON, before=b, before_id=i, limit=50),
        ["SCAN events"],
    ),
}


@pytest.mark.parametrize("case", list(CURSOR_FILTERS))
def test_list_events_keyset_cursor(benchmark: Any, big_log: MetaDB, case: str) -> None:
    # The cursor sits in the middle of the log: the page must start there, not scan to it.
    middle = big_log.list_events(EventFilter(before=T0 + STEP * (N_EVENTS // 2), limit=1))[0]
    assert middle.created_at is not None
    make, wanted = CURSOR_FILTERS[case]
    flt = make(middle.created_at, middle.id)
    plan = big_log.explain_list_events(flt)
    benchmark.group = "list_events cursor"
    rows = benchmark(big_log.list_events, flt)
    benchmark.extra_info.update(n_events=N_EVENTS, rows=len(rows), plan=plan)
    assert rows and len(rows) <= 50
    assert all((r.created_at, r.id) < (middle.created_at, middle.id) for r in rows if r.created_at)
    check_plan(plan, wanted)
    if case != "cursor+3-namespaces" and case != "cursor+text":
        check_plan(plan, [], forbidden=("TEMP B-TREE",))  # index order, no sort
