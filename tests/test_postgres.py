"""The PostgreSQL backend beyond the shared store suite (which runs on it as the ``postgres``
parameter of `open_store`): several processes on one database at once, its open/close and
URL handling, backup into an embedded store, and ``memini export``/``import`` moving a store
between the embedded and the PostgreSQL backends in both directions.

The concurrency tests start real processes (``python -c``) that open the same database and
write and search at once, then check the invariants in the database: no lost update, no id
in two namespaces, `ConflictError` as embedded, read-your-writes, `upsert_many` atomic,
contiguous event ids per batch.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memini import (
    APIKey,
    DimensionMismatchError,
    Event,
    EventKind,
    Filter,
    InvalidArgumentError,
    Memory,
    NamespaceLink,
    Store,
    StoreClosedError,
    hash_api_key,
)
from memini.metrics import NullMetrics

pytestmark = pytest.mark.timeout(600)

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
PROCESSES = 3

WORKER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from memini import ConflictError, Event, EventKind, Memory, Store
    url, role, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = np.random.default_rng(me)
    out = {"conflicts": 0, "inserted": 0, "ryw_misses": 0, "batch_conflicts": 0}
    with Store.open(url) as s:
        for i in range(rounds):
            ns = f"p{me}"
            if role == "contend":
                # every process tries the same ids, each in its own namespace
                m = Memory(id=f"shared-{i}", namespace=ns, content=f"shared {i} by {me}",
                           embedding=rng.standard_normal(4))
                try:
                    s.upsert(m)
                    out["inserted"] += 1
                except ConflictError:
                    out["conflicts"] += 1
                # an own row, then read it back at once: by id, by vector, by words
                v = rng.standard_normal(4).astype(np.float32)
                own = Memory(id=f"own-{me}-{i}", namespace=ns, content=f"zq{me}x{i} own",
                             embedding=v)
                s.upsert(own)
                hits = s.vector_search(ns, v, k=1)
                words = s.keyword_search(ns, f"zq{me}x{i}", k=1)
                if (s.get(ns, own.id).id != own.id or hits[0].memory.id != own.id
                        or [h.memory.id for h in words] != [own.id]):
                    out["ryw_misses"] += 1
                # a batch whose last row conflicts: all or nothing
                batch = [Memory(id=f"batch-{me}-{i}-{j}", namespace=ns, content="b")
                         for j in range(3)]
                batch.append(Memory(id="shared-0", namespace=f"other{me}", content="x"))
                try:
                    s.upsert_many(batch)
                except ConflictError:
                    out["batch_conflicts"] += 1
            elif role == "reinforce":
                s.reinforce("hot", ["counter"], accessed_at=__import__("datetime").datetime.now())
            elif role == "events":
                s.append_events([Event(op_id=f"{me}-{i}", kind=EventKind.RECALL, namespace="e",
                                       rank=j) for j in range(5)])
    print(json.dumps(out))
    """
)


def run_workers(url: str, role: str, rounds: int) -> list[dict[str, int]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, role, str(me), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(PROCESSES)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture
def pg_url(pg_database: Any) -> Any:
    url = pg_database.new()
    yield url
    pg_database.drop(url)


def test_processes_contending_for_ids_conflict_as_embedded(pg_url: str) -> None:
    with Store.open(pg_url, dims=4):
        pass  # created once; the workers open it with its stored settings
    rounds = 15
    results = run_workers(pg_url, "contend", rounds)
    with Store.open(pg_url) as s:
        owners: Counter[str] = Counter()
        for ns in s.list_namespaces():
            for m in s.list(ns, Filter(include_expired=True, include_superseded=True)):
                owners[m.id] += 1
        assert max(owners.values()) == 1, "an id lives in two namespaces"
        # each shared id was inserted by exactly one process; the others got ConflictError
        assert sum(r["inserted"] for r in results) >= rounds
        shared = [i for i in owners if i.startswith("shared-")]
        assert len(shared) == rounds
        assert sum(r["conflicts"] for r in results) + sum(r["inserted"] for r in results) == (
            PROCESSES * rounds
        )
        # every process saw its own writes at once, by id, vector and words
        assert all(r["ryw_misses"] == 0 for r in results)
        # every batch ended in a conflicting row: none of them is stored
        assert all(r["batch_conflicts"] == rounds for r in results)
        assert not [i for i in owners if i.startswith("batch-")]
        assert sum(1 for i in owners if i.startswith("own-")) == PROCESSES * rounds


def test_no_lost_update_across_processes(pg_url: str) -> None:
    with Store.open(pg_url, dims=4) as s:
        s.upsert(Memory(id="counter", namespace="hot", content="c"))
    rounds = 40
    run_workers(pg_url, "reinforce", rounds)
    with Store.open(pg_url) as s:
        assert s.get("hot", "counter").access_count == PROCESSES * rounds


def test_event_batches_get_contiguous_ids_across_processes(pg_url: str) -> None:
    with Store.open(pg_url, dims=4):
        pass
    rounds = 20
    run_workers(pg_url, "events", rounds)
    with Store.open(pg_url) as s:
        events = s.list_events()
    assert len(events) == PROCESSES * rounds * 5
    assert len({e.id for e in events}) == len(events)
    by_op: dict[str, list[Event]] = {}
    for e in events:
        by_op.setdefault(e.op_id, []).append(e)
    for batch in by_op.values():
        ids = sorted((e.rank, e.id) for e in batch)
        assert [i for _, i in ids] == list(range(ids[0][1], ids[0][1] + 5)), "not contiguous"


def test_two_stores_open_at_once_see_each_other(pg_url: str) -> None:
    with Store.open(pg_url, dims=4, metric="cos") as a, Store.open(pg_url) as b:
        a.upsert(Memory(id="m", namespace="n", content="x", embedding=[1, 0, 0, 0]))
        assert b.get("n", "m").content == "x"
        b.put_link(NamespaceLink("n", "o"))
        assert [lk.dst for lk in a.list_links("n")] == ["o"]
        assert b.vector_search("n", [1, 0, 0, 0])[0].score == pytest.approx(1.0)


def test_keyword_weights_follow_another_stores_writes_after_the_refresh(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another store's writes match at once (which rows match is never cached) and move the
    words' weights once this store's counts are older than REFRESH_SECONDS."""
    from memini.postgres import _frequencies

    def mems(*rows: tuple[str, str]) -> list[Memory]:
        return [Memory(id=i, namespace="n", content=c) for i, c in rows]

    with Store.open(pg_url, dims=4) as a, Store.open(pg_url) as b:
        a.upsert_many(mems(("k", "kettle stove"), ("t", "teapot handle")))
        a.upsert_many(mems(*((f"f{i}", f"filler row {i}") for i in range(14))))

        def ranked() -> list[str]:
            return [h.memory.id for h in b.keyword_search("n", "kettle teapot", k=20)]

        assert ranked() == ["k", "t"]  # one weight each: a tie, by id
        a.upsert_many(mems(*((f"x{i}", f"copper kettle {i}") for i in range(10))))
        assert set(ranked()) == {"k", "t", *(f"x{i}" for i in range(10))}
        monkeypatch.setattr(_frequencies, "REFRESH_SECONDS", 0.0)
        assert ranked()[0] == "t"  # kettle is in 11 rows of 26 now


def _statements(store: Store, call: Any) -> int:
    """The statements ``call()`` sends on the store's one connection (libpq's trace: a
    ``Bind`` or ``Query`` message is a statement)."""
    import tempfile

    from psycopg import pq

    pool = store._engine._p.pool  # type: ignore[union-attr]
    with tempfile.TemporaryFile("w+") as log:
        with pool.connection() as conn:
            conn.pgconn.trace(log.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        call()
        with pool.connection() as conn:
            conn.pgconn.untrace()
        assert pool.get_stats()["pool_size"] == 1
        log.seek(0)
        sent = [f[2] for f in (line.rstrip("\n").split("\t") for line in log) if f[0] == "F"]
    return sum(m in ("Bind", "Query") for m in sent)


def test_a_search_of_new_words_is_one_statement(pg_url: str) -> None:
    """A keyword search is one statement and a recall two (its legs, then its final rows),
    whether the query's words were counted before or not: the statement counts what the
    cache misses (words, a namespace's rows for its coherence) and returns the counts; the
    answers are those of the same search with every count cached."""
    rng = np.random.default_rng(9)
    words = ["kettle", "teapot", "copper", "stove", "handle", "spout", "lid", "cup"]
    with Store.open(pg_url, dims=4) as s:
        s.upsert_many(
            Memory(
                id=f"m{i:03d}",
                namespace="n",
                content=f"{words[i % 8]} and {words[i % 5]} row {i}",
                embedding=rng.standard_normal(4),
            )
            for i in range(200)
        )
        q = rng.standard_normal(4)
        s.recall("n", "row", q, k=5)  # the session set, the namespace's coherence measured

        def searches() -> list[list[tuple[str, float]]]:
            return [
                [(h.memory.id, h.score) for h in s.keyword_search("n", "kettle the spout", k=5)],
                [(h.memory.id, h.score) for h in s.recall("n", "copper lid cup", q, k=5)],
            ]

        cold: list[list[tuple[str, float]]] = []
        assert _statements(s, lambda: cold.extend(searches())) == 1 + 2
        warm: list[list[tuple[str, float]]] = []
        assert _statements(s, lambda: warm.extend(searches())) == 1 + 2
        assert warm == cold and all(len(found) == 5 for found in cold)
        s._engine._frequencies.forget()  # type: ignore[union-attr]
        assert _statements(s, lambda: s.keyword_search("n", "stove handle", k=5)) == 1


def test_weights_counted_in_part_rank_as_counted_at_once(pg_url: str) -> None:
    """A search over namespaces of which some have their words' counts cached and some not
    (and words of which some were parsed before: a stopword, two words of one stem) ranks
    as the same search by a store that counts everything in that statement."""
    rows = [
        Memory(id=f"{ns}{i:02d}", namespace=ns, content=text)
        for ns, texts in (
            ("a", ["kettle on the stove", "copper kettles", "a teapot", "stove top", "cups"]),
            ("b", ["teapot and kettle", "the copper pot", "kettle", "spoons", "saucers", "jam"]),
        )
        for i, text in enumerate(texts)
    ]
    query = "the kettles kettle copper teapot"
    with Store.open(pg_url, dims=4) as warm, Store.open(pg_url) as cold:
        warm.upsert_many(rows)
        warm.keyword_search("a", "the kettle teapot", k=10)  # a's counts of these words
        warm.keyword_search("b", "copper", k=10)  # b's count of copper
        got = [(h.memory.id, h.score) for h in warm.recall(["a", "b"], query, k=10)]
        want = [(h.memory.id, h.score) for h in cold.recall(["a", "b"], query, k=10)]
        assert got == want and len(got) >= 6
        got_kw = [(h.memory.id, h.score) for h in warm.keyword_search("b", query, k=10)]
        want_kw = [(h.memory.id, h.score) for h in cold.keyword_search("b", query, k=10)]
        assert got_kw == want_kw and len(got_kw) >= 3


def test_counts_kept_past_the_parsed_words_cap_still_weigh(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once more words were parsed than are kept (`_MAX_WORDS`, 3 here), a namespace whose
    words' counts stay cached still ranks a search of them by their idf, as before."""
    monkeypatch.setattr("memini.postgres._frequencies._MAX_WORDS", 3)
    texts = ["apple pie", "apple tart apple", "banana bread", "cherry apple", "honey banana"]
    with Store.open(pg_url, dims=4) as s, Store.open(pg_url) as cold:
        s.upsert_many([Memory(id=f"n{i}", namespace="n", content=t) for i, t in enumerate(texts)])
        s.upsert_many([Memory(id=f"m{i}", namespace="m", content=t) for i, t in enumerate(texts)])
        want = [(h.memory.id, h.score) for h in cold.keyword_search("n", "apple banana", k=10)]
        assert [(h.memory.id, h.score) for h in s.keyword_search("n", "apple banana", k=10)] == want
        s.keyword_search("m", "cherry pie", k=10)  # 4 words parsed; m's counts cached
        s.upsert(Memory(id="m9", namespace="m", content="fig"))  # m's counts dropped
        s.keyword_search("m", "fig", k=10)  # past the cap: n's counts kept
        got = [(h.memory.id, h.score) for h in s.keyword_search("n", "apple banana", k=10)]
        assert got == want and len(got) == 5


def test_linked_recall_sees_links_another_store_writes(pg_url: str) -> None:
    with Store.open(pg_url, dims=4, metric="cos") as a, Store.open(pg_url) as b:
        a.upsert_many(
            [
                Memory(
                    id=f"{ns}1", namespace=ns, content=f"shared fact {ns}", embedding=[1, 0, 0, 0]
                )
                for ns in ("home", "team")
            ]
        )

        def vias() -> set[str]:
            return {r.via for r in a.recall("home", "shared fact", [1, 0, 0, 0], linked=True)}

        assert vias() == {"home"}
        b.put_link(NamespaceLink("home", "team"))
        assert vias() == {"home", "team"}
        assert b.delete_link("home", "team")
        assert vias() == {"home"}


def test_open_checks_dims_and_metric(pg_url: str) -> None:
    with pytest.raises(InvalidArgumentError, match="dims is required"):
        Store.open(pg_url)
    Store.open(pg_url, dims=4, metric="ip").close()
    with pytest.raises(DimensionMismatchError, match="dims=4"):
        Store.open(pg_url, dims=5)
    with pytest.raises(DimensionMismatchError, match="'ip'"):
        Store.open(pg_url, metric="l2")
    s = Store.open(pg_url)
    assert repr(s).startswith("<memini.Store postgresql://") and "dims=4" in repr(s)
    s.close()
    s.close()
    with pytest.raises(StoreClosedError):
        s.get("n", "x")


def test_repr_and_messages_hide_the_password() -> None:
    from memini.postgres import safe_url

    assert safe_url("postgresql://u:s3cret@db:5432/x") == "postgresql://u:***@db:5432/x"
    assert safe_url("postgresql://u@db/x") == "postgresql://u@db/x"


def test_an_unreachable_server_is_unavailable(tmp_path: Path) -> None:
    from memini import UnavailableError

    with pytest.raises(UnavailableError, match="cannot be reached"):
        Store.open(f"postgresql://nobody@/x?host={tmp_path}&connect_timeout=2", dims=4)


def test_filtered_search_returns_min_k_matches_past_the_index(pg_url: str) -> None:
    """A filter passing 3 rows out of 3,000 in the HNSW index still gives all 3."""
    rng = np.random.default_rng(7)
    with Store.open(pg_url, dims=8) as s:
        s.upsert_many(
            Memory(
                id=f"m{i:04d}",
                namespace="n",
                content=f"row {i}",
                tags=["rare"] if i % 1000 == 0 else [],
                embedding=rng.standard_normal(8),
            )
            for i in range(3000)
        )
        hits = s.vector_search("n", rng.standard_normal(8), Filter(tags=["rare"]), k=10)
        assert sorted(h.memory.id for h in hits) == ["m0000", "m1000", "m2000"]
        assert len(s.vector_search("n", rng.standard_normal(8), k=25)) == 25


def test_searches_on_one_connection_answer_as_embedded_around_a_large_answer(
    pg_url: str,
) -> None:
    """The searches of one connection share its cursor (`Conn.rows`); an answer of more
    rows than it keeps closes it, and the searches after it get a new one: vector answers
    (text escaping included) are the embedded store's, and the others the same as before."""
    from memini.postgres._pool import _KEEP_ROWS

    rng = np.random.default_rng(5)
    rows = [
        Memory(
            id=f"m{i:04d}\x00" if i % 7 == 0 else f"m{i:04d}",
            namespace="n",
            content=f"row {i} word{i % 3} \x01 text",
            tags=["t\x00"] if i % 2 else [],
            created_at=T0,
            updated_at=T0,
            last_accessed_at=T0,
            embedding=rng.standard_normal(4),
        )
        for i in range(_KEEP_ROWS + 100)
    ]
    queries = rng.standard_normal((3, 4))

    def vector(s: Store, k: int) -> list[Any]:
        return [
            [(h.memory, round(h.score, 6)) for h in s.vector_search("n", q, k=k)] for q in queries
        ]

    def others(s: Store) -> list[Any]:
        return [
            [h.memory for h in s.keyword_search("n", "word1 text", Filter(tags=["t\x00"]), k=9)],
            [r.memory for r in s.recall("n", "word2", queries[0], k=9)],
        ]

    with (
        Store.open(pg_url, dims=4, metric="cos") as pg,
        Store.open(None, dims=4, metric="cos") as emb,
    ):
        pg.upsert_many(rows)
        emb.upsert_many(rows)
        before = others(pg)
        assert vector(pg, 5) == vector(emb, 5)
        assert vector(pg, _KEEP_ROWS + 50) == vector(emb, _KEEP_ROWS + 50)
        assert vector(pg, 7) == vector(emb, 7)
        assert others(pg) == before
        assert all(before)


def test_recall_ranks_escaped_ids_as_embedded(pg_url: str) -> None:
    """Recall ranks its candidates by their ids in the stored form (as `Conn.rows` reads
    them: the escape of U+0000/U+0001 kept, decoded for the final ``k``): ids that
    escape, tied on every score, come back decoded and in the embedded store's order, with
    its scores, and with and without the keyword leg as before."""
    ids = ["a\x01", "a\x00", "a", "a\x02", "a\x00b", "a\x01\x01", "b\x00"]
    rows = [
        Memory(
            id=id,
            namespace="n",
            content=f"shared words {i}",
            created_at=T0,
            updated_at=T0,
            last_accessed_at=T0,
            embedding=np.ones(4),
        )
        for i, id in enumerate(ids)
    ]
    with (
        Store.open(pg_url, dims=4, metric="cos") as pg,
        Store.open(None, dims=4, metric="cos") as emb,
    ):
        pg.upsert_many(rows)
        emb.upsert_many(rows)
        for k in (3, len(ids)):
            got = [(r.memory.id, round(r.score, 9)) for r in pg.recall("n", "", np.ones(4), k=k)]
            want = [(r.memory.id, round(r.score, 9)) for r in emb.recall("n", "", np.ones(4), k=k)]
            assert got == want
            assert [m for m, _ in got] == sorted(ids)[:k]
        hybrid = pg.recall("n", "shared words", np.ones(4), k=len(ids))
        assert sorted(r.memory.id for r in hybrid) == sorted(ids)
        assert all(r.memory.content.startswith("shared") for r in hybrid)


@pytest.mark.parametrize("text", ["\x00", "\x01", "\x01\x02", "a\x00\x01b\x01\x01"])
def test_searches_decode_every_escaped_text_column(pg_url: str, text: str) -> None:
    """Searches read text in its stored form (`Conn.rows`) and decode a row once
    (`memini.postgres._rows.decoded`): every text column that can hold U+0000/U+0001 (id,
    content, summary, tags, superseded_by, linked ids; metadata beside them)
    comes back as the embedded store's, from every search (a namespace holds neither)."""
    ns = "n"
    rows = [
        Memory(
            id=f"m{i}{text}" if i % 2 else f"m{i}",
            namespace=ns,
            content=f"shared words {i}{text}",
            summary=f"sum{text}" if i % 3 else "",
            tags=[f"t{text}", "plain"] if i % 2 == 0 else [],
            metadata={"k": f"v{text}"},
            superseded_by=f"m9{text}" if i == 4 else None,
            linked_memory_ids=[f"m1{text}", "m0"] if i % 4 == 1 else [],
            created_at=T0,
            updated_at=T0,
            last_accessed_at=T0,
            embedding=np.arange(4) + i,
        )
        for i in range(6)
    ]
    everything = Filter(include_superseded=True)
    q = np.ones(4)

    def found(s: Store) -> list[Any]:
        return [
            [(h.memory, round(h.score, 6)) for h in s.vector_search(ns, q, everything, k=6)],
            [[h.memory for h in hits] for hits in s.vector_search_many(ns, [q], everything, k=6)],
            sorted((h.memory.id, h.memory) for h in s.keyword_search(ns, "shared", everything)),
            [(r.memory, round(r.score, 6)) for r in s.recall(ns, "", q, everything, k=6)],
            sorted((r.memory.id, r.memory) for r in s.recall(ns, "shared", q, everything, k=6)),
        ]

    with (
        Store.open(pg_url, dims=4, metric="cos") as pg,
        Store.open(None, dims=4, metric="cos") as emb,
    ):
        pg.upsert_many(rows)
        emb.upsert_many(rows)
        got = found(pg)
        assert got == found(emb)
        assert len(got[0]) == 6 and any(m.superseded_by for m, _ in got[0])


def test_search_statements_run_with_numbered_placeholders(pg_url: str) -> None:
    """`Conn.rows` numbers a statement's named placeholders once per text (a name used
    twice binds one parameter, ``%%`` is a percent sign) and reads text as stored."""
    from memini.postgres._pool import numbered

    sql = "SELECT %(a)s::int8 + %(b)s::int8, %(a)s::int8 %% 5, %(t)s::text, '%%'"
    text, args = numbered(sql, {"b": 1, "t": "x\x00", "a": 12, "unused": 0})
    assert text == b"SELECT $1::int8 + $2::int8, $1::int8 % 5, $3::text, '%'"
    assert args == [12, 1, "x\x00"]
    assert numbered(sql, {"a": 0, "b": 0, "t": ""})[0] is text  # numbered once
    with Store.open(pg_url, dims=4) as s, s._engine._p.read() as conn:
        assert conn.rows(sql, {"a": 12, "b": 1, "t": "x\x00"}) == [(13, 2, "x\x01\x01", "%")]


def test_recall_statement_is_built_once_per_shape() -> None:
    """`recall_sql` builds the text once per shape (the same string object, so psycopg and
    `numbered` find it in their caches) and binds each call's values as parameters."""
    from memini._convert import filter_to_spec
    from memini.postgres._search import recall_sql

    def sql(ns: str, tags: list[str], tiers: list[str] | None, context: bool) -> Any:
        spec = filter_to_spec(Filter(tags=tags) if tags else None)
        return recall_sql("cos", 4, spec, [(ns, tiers)], [True], None, 0, 50, context)

    a, pa = sql("n", ["x"], None, True)
    b, pb = sql("other", ["y", "z"], None, True)
    assert a is b
    assert (pa["ns0"], pa["f_tags"], pb["ns0"], pb["f_tags"]) == ("n", ["x"], "other", ["y", "z"])
    shapes = [sql("n", [], None, True)[0], sql("n", ["x"], ["semantic"], True)[0]]
    shapes.append(sql("n", ["x"], None, False)[0])
    assert len({a, *shapes}) == 4


def test_fuse_takes_the_rows_as_columns_one_candidate_per_id() -> None:
    """`memini._core.fuse` takes recall's rows as columns, hits as row indexes: an id found
    by both legs (two rows) is one candidate, its first row; neighbours are the candidates
    at a row's previous/next seq; columns of unequal length or an index past them are
    refused."""
    from memini import _core

    def rows(prev: tuple[int | None, ...], nxt: tuple[int | None, ...]) -> Any:
        n = 4
        fps = ("fa", "fb", "fa", "fc")
        return (("a", "b", "a", "c"), ("semantic",) * n, (0.5,) * n, (None,) * n, (1,) * n,
                (1,) * n, (0,) * n, fps, (10, 20, 10, 30), prev, nxt)  # fmt: skip

    vleg, kleg = [(0, 0.9, 0), (1, 0.8, 0)], [(2, 3.0, 0), (3, 1.0, 0)]
    alone = (None,) * 4

    def fused(r: Any, context: float = 0.0) -> list[Any]:
        return _core.fuse(r, vleg, kleg, "convex", 0.5, context, [1.0], False, 0, False, 10)

    out = fused(rows(alone, alone))
    assert sorted(o[0] for o in out) == [0, 1, 3]
    assert next(o for o in out if o[0] == 0)[2:] == (0.9, 3.0, 0)
    linked = rows((None, 10, None, None), (20, None, 20, None))  # a and b: neighbours
    assert fused(linked, 0.5) != fused(rows(alone, alone), 0.5)
    assert fused(linked) == out  # no context: neighbours unused
    with pytest.raises(InvalidArgumentError, match="differ in length"):
        fused((*rows(alone, alone)[:10], (None,) * 3))
    with pytest.raises(InvalidArgumentError, match="out of range"):
        _core.fuse(rows(alone, alone), [(4, 1.0, 0)], [], "rrf", 60, 0, [], False, 0, False, 3)


def test_search_rows_carry_the_stored_vectors_bit_for_bit(pg_url: str) -> None:
    """`Conn.rows` reads vectors as bytes and `stack_vectors` converts them all at once:
    the same float32 values as stored (signed zeros, subnormals, extremes)."""
    from memini.postgres._pool import stack_vectors

    f32 = np.finfo(np.float32)
    special = np.array([-0.0, f32.smallest_subnormal, -f32.max, f32.max, 1e-38, 1.0], np.float32)
    vectors = np.random.default_rng(9).standard_normal((20, 6)).astype(np.float32)
    vectors[::3] = special
    with Store.open(pg_url, dims=6) as s:
        s.upsert_many(
            Memory(id=f"m{i:02d}", namespace="n", content="c", embedding=v)
            for i, v in enumerate(vectors)
        )
        with s._engine._p.read() as conn:
            rows = conn.rows("SELECT embedding FROM memories ORDER BY id", {})
        got = stack_vectors([r[0] for r in rows])
    assert got.dtype == np.float32 and got.flags.c_contiguous
    assert got.tobytes() == vectors.tobytes()


def _fill(s: Store) -> None:
    rng = np.random.default_rng(3)
    s.set_embed_model("test-model")
    s.upsert_many(
        Memory(
            id=f"m{i}",
            namespace=f"ns{i % 3}",
            content=f"memory number {i} \x00 ü",
            tags=["t", f"t{i}"],
            metadata={"i": i, "f": 0.1 * i, "s": "x"},
            importance=i / 7,
            created_at=T0 + timedelta(seconds=i),
            updated_at=T0 + timedelta(seconds=2 * i),
            last_accessed_at=T0 + timedelta(seconds=3 * i),
            expires_at=None if i % 2 else T0 + timedelta(days=400),
            embedding=None if i == 4 else rng.standard_normal(4).astype(np.float32),
        )
        for i in range(9)
    )
    s.put_link(NamespaceLink("ns0", "ns1", tiers=None, note="n", created_at=T0))
    s.put_api_key(APIKey("k", hash_api_key("secret"), home_ns="ns0", created_at=T0))
    s.append_events([Event(op_id="o", kind=EventKind.RECALL, namespace="ns0", created_at=T0)])
    s.prune_events(keep_max=1)  # ids are never reused: the next id stays 2


def _snapshot(s: Store) -> dict[str, Any]:
    everything = Filter(include_expired=True, include_superseded=True)
    rows = {}
    for ns in s.list_namespaces():
        for m in s.list(ns, everything):
            e = s.get_embedding(ns, m.id)
            rows[m.id] = (m, None if e is None else e.tobytes())
    return {
        "rows": rows,
        "links": s.list_all_links(),
        "keys": s.list_api_keys(),
        "events": s.list_events(),
        "model": s.embed_model(),
        "next_event_id": s.stats()["meta"]["next_event_id"],
    }


def _memini(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memini.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_export_import_between_backends_both_ways(pg_url: str, tmp_path: Path) -> None:
    """embedded -> JSONL -> PostgreSQL -> JSONL -> embedded: everything equal, vectors
    bit-exact, event ids and the next event id kept."""
    src = tmp_path / "src"
    with Store.open(src, dims=4) as s:
        _fill(s)
        before = _snapshot(s)
    first = tmp_path / "a.jsonl"
    assert _memini("export", "--store", str(src), "-o", str(first)).returncode == 0
    done = _memini("import", str(first), "--store", pg_url)
    assert done.returncode == 0, done.stderr
    with Store.open(pg_url) as pg:
        assert _snapshot(pg) == before
    second = tmp_path / "b.jsonl"
    done = _memini("export", "--store", pg_url, "-o", str(second))
    assert done.returncode == 0, done.stderr
    assert second.read_text() == first.read_text()
    back = tmp_path / "back"
    assert _memini("import", str(second), "--store", str(back)).returncode == 0
    with Store.open(back) as s:
        assert _snapshot(s) == before


def test_backup_writes_an_embedded_store(pg_url: str, tmp_path: Path) -> None:
    with Store.open(pg_url, dims=4) as pg:
        _fill(pg)
        before = _snapshot(pg)
        pg.backup(tmp_path / "copy")
        with pytest.raises(InvalidArgumentError, match="exists"):
            pg.backup(tmp_path / "copy")
    with Store.open(tmp_path / "copy") as s:
        assert _snapshot(s) == before


def test_two_servers_serve_one_database(pg_url: str) -> None:
    """Two `memini serve` instances (here in one process) on one database: a write through
    one is read through the other, and both log the calls they served into the same log."""
    import memini
    from memini.server import Server, ServerOptions

    servers = [
        Server.open(pg_url, dims=4, options=ServerOptions(port=0, admin_key="k", mcp=False))
        for _ in range(2)
    ]
    try:
        a, b = (memini.connect(s.start(), api_key="k", retry_for=0) for s in servers)
        with a, b:
            a.upsert(Memory(id="m", namespace="n", content="green tea", embedding=[1, 0, 0, 0]))
            assert b.get("n", "m").content == "green tea"
            assert [h.memory.id for h in b.keyword_search("n", "tea")] == ["m"]
            deadline = time.monotonic() + 10  # the servers append their logs in batches
            while EventKind.REMEMBER not in {e.kind for e in b.list_events()}:
                assert time.monotonic() < deadline, "the write was never logged"
                time.sleep(0.1)
    finally:
        for s in servers:
            s.stop()


# ---------------------------------------------------------------------------------------------
# large batches (COPY), bulk loads, plans


class _Ops(NullMetrics):
    """Records the op of every upsert a store reports (insert or update)."""

    def __init__(self) -> None:
        self.ops: list[str] = []

    def upsert(self, op: str, tier: str, memory_type: str) -> None:
        self.ops.append(op)


def _rows_of(s: Store) -> dict[str, Any]:
    every = Filter(include_expired=True, include_superseded=True)
    return {
        m.id: (m, s.get_embedding(m.namespace, m.id))
        for ns in s.list_namespaces()
        for m in s.list(ns, every)
    }


def test_large_batches_load_as_sequential_upserts(pg_url: str) -> None:
    """Batches past the COPY threshold (repeated ids, stored rows, vectors dropped, created_at
    given or stamped) leave the same rows and report the same inserts and updates as the
    embedded store."""
    from memini.postgres._bulk import COPY_MIN

    rng = np.random.default_rng(11)
    first = [
        Memory(
            id=f"m{i}",
            namespace="n",
            content=f"stored {i}",
            created_at=T0,
            updated_at=T0,
            last_accessed_at=T0,
            embedding=[i, 1, 0, 0],
        )
        for i in range(10)
    ]
    batch = []
    for j in range(3 * COPY_MIN):
        i = int(rng.integers(0, 2 * COPY_MIN))  # repeats, and ids stored by `first`
        batch.append(
            Memory(
                id=f"m{i}",
                namespace="n",
                content=f"row {j} of {i}",
                tags=[f"t{j % 3}"],
                created_at=None if j % 4 else T0 + timedelta(seconds=j),
                updated_at=T0 + timedelta(seconds=j),
                last_accessed_at=T0,
                embedding=None if j % 5 == 0 else rng.standard_normal(4),
            )
        )
    # ids whose first row in the batch had no created_at and that were not stored before:
    # each store stamps its own "now" on them
    firsts: dict[str, Memory] = {}
    for m in batch:
        firsts.setdefault(m.id, m)
    stamped = {i for i, m in firsts.items() if m.created_at is None} - {m.id for m in first}
    started = datetime.now(UTC)
    stores = []
    for target in (pg_url, None):
        ops = _Ops()
        s = Store.open(target, dims=4, metrics=ops)
        s.upsert_many(first)
        s.upsert_many(batch)
        stores.append((s, ops))
    (pg, pg_ops), (emb, emb_ops) = stores
    with pg, emb:
        assert pg_ops.ops == emb_ops.ops
        got, want = _rows_of(pg), _rows_of(emb)
        assert got.keys() == want.keys()
        for id_, (m, e) in want.items():
            if id_ in stamped:
                assert got[id_][0].created_at >= started
                m = dataclasses.replace(m, created_at=got[id_][0].created_at)
            assert got[id_][0] == m
            assert (got[id_][1] is None) == (e is None)
            if e is not None:
                assert got[id_][1].tobytes() == e.tobytes()


@pytest.mark.parametrize("conflict", ["repeat-in-two-namespaces", "stored-in-other-namespace"])
def test_a_large_batch_with_a_conflict_writes_nothing(pg_url: str, conflict: str) -> None:
    from memini import ConflictError
    from memini.postgres._bulk import COPY_MIN

    with Store.open(pg_url, dims=4) as s:
        s.upsert(Memory(id="taken", namespace="other", content="x"))
        batch = [Memory(id=f"m{i}", namespace="n", content="x") for i in range(2 * COPY_MIN)]
        if conflict == "repeat-in-two-namespaces":
            batch.insert(COPY_MIN, Memory(id="m3", namespace="elsewhere", content="y"))
        else:
            batch.append(Memory(id="taken", namespace="n", content="y"))
        with pytest.raises(ConflictError, match="m3" if "repeat" in conflict else "taken"):
            s.upsert_many(batch)
        assert s.list_namespaces() == ["other"]


def _index_defs(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as c:
        return sorted(
            r[0]
            for r in c.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'memories' "
                "AND schemaname = current_schema()"
            )
        )


def test_import_into_an_empty_store_builds_the_indexes_once(pg_url: str, tmp_path: Path) -> None:
    """``memini import`` into an empty PostgreSQL store drops the secondary indexes for the
    load and builds them again; the rows are searchable through them after."""
    with Store.open(pg_url, dims=4) as s:
        indexes = _index_defs(pg_url)
    src = tmp_path / "src"
    with Store.open(src, dims=4) as e:
        _fill(e)
        before = _snapshot(e)
    dump = tmp_path / "a.jsonl"
    assert _memini("export", "--store", str(src), "-o", str(dump)).returncode == 0
    done = _memini("import", str(dump), "--store", pg_url, "--batch", "4")
    assert done.returncode == 0, done.stderr
    assert _index_defs(pg_url) == indexes
    with Store.open(pg_url) as s:
        assert _snapshot(s) == before
        import psycopg

        with psycopg.connect(pg_url) as c:
            assert c.execute(
                "SELECT count(*) FROM memini_settings WHERE key = 'deferred_indexes'"
            ).fetchone() == (0,)


LOADER = textwrap.dedent(
    """
    import os, sys
    from memini import Memory, Store
    with Store.open(sys.argv[1], dims=4) as s:
        with s._bulk_load() as empty:
            assert empty
            s.upsert_many([Memory(id=f"m{i}", namespace="n", content="row",
                                  embedding=[i, 1, 0, 0]) for i in range(100)])
            print("loaded", flush=True)
            os._exit(1)  # dies with the indexes dropped
    """
)


def test_a_bulk_load_that_dies_gets_its_indexes_at_the_next_open(pg_url: str) -> None:
    with Store.open(pg_url, dims=4):
        indexes = _index_defs(pg_url)
    done = subprocess.run(
        [sys.executable, "-c", LOADER, pg_url], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "loaded", done.stderr
    assert _index_defs(pg_url) != indexes  # the load died before building them
    with Store.open(pg_url) as s:
        assert _index_defs(pg_url) == indexes
        assert len(s.vector_search("n", [3, 1, 0, 0], k=5)) == 5


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan."""
    out = [node]
    for child in node.get("Plans", []):
        out += _plan_nodes(child)
    return out


def test_the_graph_walk_plans_with_the_graph_in_a_small_table(pg_url: str) -> None:
    """A search that walks the graph (a namespace of 1,500 rows, the whole table) plans its
    walk as the HNSW scan, not a read of every row and a sort (the planner's choice at
    PostgreSQL's default ``random_page_cost``, 4)."""
    import psycopg

    rng = np.random.default_rng(11)
    with Store.open(pg_url, dims=16) as s:
        s.upsert_many(
            Memory(
                id=f"m{i}",
                namespace="n",
                content=f"row {i} of {i % 7} kettles",
                embedding=rng.standard_normal(16),
            )
            for i in range(1500)
        )
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute("ANALYZE memories")
        s._engine._sizes.forget()  # type: ignore[union-attr]
        q = rng.standard_normal(16)
        assert len(s.vector_search("n", q, k=10)) == 10
        assert len(s.recall("n", "kettles", q, k=10)) == 10
        pool = s._engine._p.pool  # type: ignore[union-attr]
        with pool.connection() as conn:
            prepared = conn.execute(
                "SELECT name, statement, cardinality(parameter_types) FROM pg_prepared_statements"
            ).fetchall()
            walks = 0
            for name, statement, n in prepared:
                if "<->" not in statement or "CASE WHEN" not in statement:
                    continue
                [(plan,)] = conn.execute(
                    f"EXPLAIN (FORMAT JSON) EXECUTE {name}({', '.join(['NULL'] * n)})"
                )
                nodes = _plan_nodes(plan[0]["Plan"])
                assert any(
                    nd.get("Index Name") == "memories_hnsw" and "Order By" in nd for nd in nodes
                ), statement
                walks += 1
    assert walks == 2  # vector_search's and recall's


def test_every_search_statement_plans_with_the_indexes(pg_url: str) -> None:
    """Each statement a search prepares, EXPLAINed as the generic plan it runs on a
    populated database (many namespaces, analyzed): vector searches walk the HNSW index with
    an exact scan behind, or (small namespaces, rare tags) are the exact scan alone, through
    the tag GIN or the namespace index; keyword searches use the words
    GIN index, recall's final rows the primary key, the keyword weights' counts the words
    GIN index in a large namespace and the namespace index in a small one (inside the
    keyword and recall statements); no statement
    reads ``memories`` sequentially, but for the keyword search of stopwords alone (the
    words as they are, unindexed)."""
    import psycopg

    rng = np.random.default_rng(5)
    words = ["alpha", "beta", "gamma", "delta", "omega"]
    with Store.open(pg_url, dims=8) as s:
        s.upsert_many(
            Memory(
                id=f"m{i}",
                namespace=f"ns{i % 40}",
                content=f"{words[i % 5]} row {i}",
                tags=["common"] + (["rare"] if i % 50 == 0 else []),
                metadata={"kind": "a" if i % 2 else "b"},
                embedding=rng.standard_normal(8),
            )
            for i in range(8000)
        )
        s.upsert_many(
            Memory(
                id=f"big{i}",
                namespace="big",
                content=f"{words[i % 5]} big {i}",
                embedding=rng.standard_normal(8),
            )
            for i in range(4000)
        )
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute("ANALYZE memories")
        s._engine._sizes.forget()  # type: ignore[union-attr]
        q = rng.standard_normal(8)
        s.vector_search("big", q, k=10)  # the walk
        s.vector_search("ns3", q, k=10)  # a small namespace: exact
        s.vector_search("big", q, Filter(tags=["rare"]), k=5)
        s.vector_search("big", q, Filter(metadata={"kind": "a"}), k=5)
        s.vector_search_many("big", np.stack([q, q]), k=3)
        s.keyword_search("big", "alpha gamma", k=5)
        s.keyword_search("ns3", "beta", Filter(tags=["common"]), k=5)
        s.keyword_search("ns4", "the of", k=5)
        s.recall("big", "alpha", q, k=5)
        s.recall("big", "beta", q, k=5)  # its coherence known: its rows counted in the statement
        s.recall(["ns1", "ns2"], "delta", q, k=5, fusion="rrf")
        pool = s._engine._p.pool  # type: ignore[union-attr]
        assert pool.get_stats()["pool_size"] == 1  # every statement went through one session
        with pool.connection() as conn:
            prepared = conn.execute(
                "SELECT name, statement, cardinality(parameter_types) FROM pg_prepared_statements"
            ).fetchall()
            plans = {}
            for name, statement, n in prepared:
                args = ", ".join(["NULL"] * n)
                [(plan,)] = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE {name}({args})")
                plans[statement] = _plan_nodes(plan[0]["Plan"])
    kinds = Counter()
    for statement, nodes in plans.items():
        used = {n.get("Index Name") for n in nodes}
        if "to_tsvector('simple'" in statement:  # stopwords alone
            kinds["stopwords"] += 1
            continue
        for node in nodes:
            if node.get("Relation Name") == "memories" and node["Node Type"] == "Seq Scan":
                raise AssertionError(f"a sequential scan of memories in: {statement}")
        if "kc AS MATERIALIZED" in statement:
            # the keyword weights it counts: through the words GIN index in a large
            # namespace, the namespace index in a small one
            assert {"memories_words", "memories_ns_id"} <= used, statement
            kinds["frequencies"] += 1
        if "SELECT 'c'" in statement:  # recall counting a namespace's rows for its coherence
            kinds["recounts"] += 1
        if statement.startswith("SELECT count(*)") or "row_number()" in statement:
            # a namespace's coherence: its rows counted, its sample read, by namespace
            assert used - {None} and used <= {"memories_ns_time", "memories_ns_id", None}
            kinds["coherence"] += 1
            continue
        if "<=>" not in statement and "<->" not in statement and "ts_rank" not in statement:
            assert used == {"memories_pkey"}, statement  # recall's final rows
            kinds["rows"] += 1
            continue
        if "ts_rank" in statement:
            assert "memories_words" in used, statement
            kinds["keyword"] += 1
        if "<->" in statement:
            exact = used - {"memories_hnsw", "memories_pkey", "memories_words", None}
            assert exact, f"no index for the exact scan in: {statement}"
            if "tags @>" in statement:
                assert "memories_tags" in exact, statement
            walks = [n for n in nodes if n.get("Index Name") == "memories_hnsw" and "Order By" in n]
            if "CASE WHEN" in statement:  # a walk (its filter opaque), the exact scan behind it
                assert walks, f"no HNSW walk in: {statement}"
                kinds["vector"] += 1
            else:  # the exact scan alone: no walk to pay for
                assert not walks and "memories_hnsw" not in used, statement
                kinds["exact"] += 1
    assert kinds["rows"] >= 1 and kinds["keyword"] >= 3 and kinds["vector"] >= 4, kinds
    # a small namespace and a rare tag scan exactly, each a statement without the walk
    assert kinds["exact"] == 2, kinds
    assert kinds["coherence"] == 2 and kinds["stopwords"] == 1, kinds
    assert kinds["frequencies"] == kinds["keyword"] == 5 and kinds["recounts"] == 1, kinds
