"""Store.recall: API.md section 6 (both legs, fusion, rerank, dedup, namespaces, reinforce)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import OpenStore
from embed_helpers import needs_weights
from memini import (
    DimensionMismatchError,
    Filter,
    InvalidArgumentError,
    Level,
    MeminiError,
    Memory,
    NamespaceLink,
    Recalled,
    Store,
    Tier,
)
from memini.embed import LocalEmbedder

NS = "ns"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def vec(*xs: float) -> list[float]:
    return [*xs, *([0.0] * (4 - len(xs)))]


def mem(id: str, content: str, ns: str = NS, **kw: Any) -> Memory:
    kw.setdefault("embedding", vec(1.0, 0.1 * len(id), 0.0, 0.0))
    return Memory(id=id, namespace=ns, content=content, **kw)


def ids(rs: list[Recalled]) -> list[str]:
    return [r.memory.id for r in rs]


def assert_well_formed(rs: list[Recalled]) -> None:
    assert all(isinstance(r, Recalled) for r in rs)
    assert all(r.vector_score is not None or r.keyword_score is not None for r in rs)
    keys = [(-r.score, r.memory.id) for r in rs]
    assert keys == sorted(keys), keys
    assert len(set(ids(rs))) == len(rs)


# ---------------------------------------------------------------------------------------------
# the two legs and their fusion


def test_both_legs_find_and_score_rows(store: Store) -> None:
    store.upsert_many(
        [
            mem("a", "Alice drinks coffee every morning", embedding=vec(1, 0)),
            mem("b", "Bob prefers green tea", embedding=vec(0, 1)),
            mem("c", "the weather was cold", embedding=vec(0.9, 0.2)),
            Memory(id="d", namespace=NS, content="Alice drinks only water at night"),
        ]
    )
    rs = store.recall(NS, "what does Alice drink", vec(1, 0), k=10)
    assert_well_formed(rs)
    by = {r.memory.id: r for r in rs}
    assert set(by) == {"a", "b", "c", "d"}
    assert by["a"].vector_score == pytest.approx(1.0) and by["a"].keyword_score is not None
    # a keyword-only row (no vector) is recalled by its words
    assert by["d"].vector_score is None and by["d"].keyword_score is not None
    assert by["b"].keyword_score is None and by["c"].keyword_score is None
    assert ids(rs)[0] == "a"
    assert all(r.via == NS for r in rs)
    assert all(r.memory.embedding is None for r in rs)


def test_convex_and_rrf_follow_the_formulas(store: Store) -> None:
    rng = np.random.default_rng(7)
    words = ["apple", "pear", "plum", "fig", "kiwi", "lime"]
    rows = [
        mem(
            f"r{i:02d}",
            " ".join(rng.choice(words, size=int(rng.integers(2, 8)))),
            embedding=rng.normal(size=4),
        )
        for i in range(30)
    ]
    store.upsert_many(rows)
    q, v = "apple plum", rng.normal(size=4)
    vhits = store.vector_search(NS, v, k=20)
    khits = store.keyword_search(NS, q, k=20)

    def norm(hits: list[Any]) -> dict[str, float]:
        lo, hi = min(h.score for h in hits), max(h.score for h in hits)
        return {h.memory.id: (h.score - lo) / (hi - lo) if hi > lo else 1.0 for h in hits}

    vn, kn = norm(vhits), norm(khits)
    for alpha in (0.0, 0.3, 1.0):
        rs = store.recall(
            NS, q, v, k=20, pool=20, fusion="convex", alpha=alpha, rerank=None, dedup=False
        )
        want = {i: alpha * vn.get(i, 0.0) + (1 - alpha) * kn.get(i, 0.0) for i in {*vn, *kn}}
        assert {r.memory.id: r.score for r in rs} == pytest.approx(
            dict(sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:20])
        )

    def ranks(hits: list[Any]) -> dict[str, int]:
        order = sorted(hits, key=lambda h: (-h.score, h.memory.id))
        return {h.memory.id: i for i, h in enumerate(order)}

    vr, kr = ranks(vhits), ranks(khits)
    rs = store.recall(NS, q, v, k=20, pool=20, fusion="rrf", rrf_k=3, rerank=None, dedup=False)
    want = {
        i: (1 / (3 + vr[i]) if i in vr else 0) + (1 / (3 + kr[i]) if i in kr else 0)
        for i in {*vr, *kr}
    }
    got = {r.memory.id: r.score for r in rs}
    top = dict(sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:20])
    assert got == pytest.approx(top)
    assert_well_formed(rs)
    # vector and keyword scores are exactly those of the single searches
    vs = {h.memory.id: h.score for h in vhits}
    ks = {h.memory.id: h.score for h in khits}
    for r in rs:
        assert r.vector_score == vs.get(r.memory.id)
        assert r.keyword_score == ks.get(r.memory.id)


@pytest.mark.parametrize("metric", ["l2", "cos", "ip"])
def test_one_leg_alone_equals_that_search(open_store: OpenStore, metric: str) -> None:
    s = open_store(metric=metric)
    rng = np.random.default_rng(3)
    rows = [
        mem(
            f"r{i:02d}",
            f"common word {'rare' if i % 3 == 0 else ''} {i}",
            embedding=rng.normal(size=4),
        )
        for i in range(40)
    ]
    rows.append(Memory(id="zz", namespace=NS, content="common rare words, no vector"))
    s.upsert_many(rows)
    v = rng.normal(size=4)
    for k in (1, 7, 40):
        plain = dict(rerank=None, dedup=False)
        single = s.vector_search(NS, v, k=k)
        rs = s.recall(NS, "", v, k=k, **plain)
        assert [(r.memory.id, r.score, r.vector_score) for r in rs] == [
            (h.memory.id, h.score, h.score) for h in single
        ]
        assert all(r.keyword_score is None for r in rs)
        single = s.keyword_search(NS, "common rare", k=k)
        rs = s.recall(NS, "common rare", None, k=k, **plain)
        assert [(r.memory.id, r.score, r.keyword_score) for r in rs] == [
            (h.memory.id, h.score, h.score) for h in single
        ]
        # a query with no word of >= 2 letters is no keyword leg
        rs = s.recall(NS, "a ?!", v, k=k, **plain)
        assert ids(rs) == ids_of(s.vector_search(NS, v, k=k))
        # with the default rerank and equal qualities, the order is the same
        assert ids(s.recall(NS, "", v, k=k, dedup=False)) == ids_of(s.vector_search(NS, v, k=k))
        assert ids(s.recall(NS, "common rare", k=k, dedup=False)) == ids_of(
            s.keyword_search(NS, "common rare", k=k)
        )
    assert s.recall(NS, "", None) == []
    assert s.recall(NS, "   ") == []
    assert s.recall("missing", "common", v) == []


def ids_of(hits: list[Any]) -> list[str]:
    return [h.memory.id for h in hits]


def test_k_results_when_rows_suffice_and_ties_by_id(store: Store) -> None:
    # identical scores everywhere: ties rank by id whatever the insertion order
    names = [f"t{i:02d}" for i in range(20)]
    store.upsert_many([mem(n, f"same text {n}", embedding=vec(1, 1)) for n in reversed(names)])
    for k in (1, 5, 20):
        rs = store.recall(NS, "same", vec(1, 1), k=k, dedup=False)
        assert len(rs) == k
        assert ids(rs) == names[:k]
        assert rs == store.recall(NS, "same", vec(1, 1), k=k, dedup=False)
    assert len(store.recall(NS, "same", vec(1, 1), k=50)) == 20


# ---------------------------------------------------------------------------------------------
# rerank and dedup


def test_quality_rerank_prefers_better_memories(store: Store) -> None:
    store.upsert_many(
        [
            mem("low", "shared words one", embedding=vec(1, 0), importance=0.0),
            mem("high", "shared words two", embedding=vec(1, 0), importance=1.0),
            mem("tiny", "shared words six", embedding=vec(1, 0), tier=Tier.WORKING),
        ]
    )
    now = datetime.now(UTC)
    rs = store.recall(NS, "shared words", vec(1, 0), filter=Filter(now=now))
    assert ids(rs)[0] == "high" and ids(rs)[-1] == "tiny"
    q = {i: store.get(NS, i).quality(now) for i in ("low", "high", "tiny")}
    plain = {r.memory.id: r.score for r in store.recall(NS, "shared words", vec(1, 0), rerank=None)}
    best = max(plain.values())
    for r in rs:
        want = plain[r.memory.id] / best * (0.8 + 0.2 * q[r.memory.id] / max(q.values()))
        assert r.score == pytest.approx(want)


def test_dedup_keeps_the_best_row_per_normalised_content(store: Store) -> None:
    store.upsert_many(
        [
            mem("a", "Alice likes  COFFEE", embedding=vec(1, 0)),
            mem("b", "alice likes coffee", embedding=vec(0, 1)),
            mem("c", "Alice likes tea", embedding=vec(0.5, 0.5)),
        ]
    )
    rs = store.recall(NS, "alice coffee", vec(0, 1))
    assert ids(rs) == ["b", "c"]
    rs = store.recall(NS, "alice coffee", vec(0, 1), dedup=False)
    assert set(ids(rs)) == {"a", "b", "c"}
    # dedup never costs a result slot the rows could fill
    assert len(store.recall(NS, "alice", vec(1, 0), k=2)) == 2


# ---------------------------------------------------------------------------------------------
# filters: every field, on both legs

_TAGGED = {"tags": ["red", "blue"]}


def _filter_rows(now: datetime) -> list[Memory]:
    past, future = now - timedelta(days=1), now + timedelta(days=1)
    old = now - timedelta(days=30)
    specs: list[dict[str, Any]] = [
        {"tier": Tier.EPISODIC},
        {"tier": Tier.WORKING, "level": Level.EXPLICIT},
        {"level": Level.DEDUCED},
        _TAGGED,
        {"tags": ["red"]},
        {"metadata": {"memory_type": "decision", "team": "x"}},
        {"metadata": {"memory_type": "problem"}},
        {"metadata": {"team": "y"}},
        {"expires_at": past},
        {"expires_at": future},
        {"superseded_by": "other"},
        {"valid_to": past, "valid_from": old},
        {"valid_from": future},
        {"created_at": old},
        {"last_accessed_at": old},
        {},
    ]
    rows = []
    for i, extra in enumerate(specs):
        rows.append(mem(f"v{i:02d}", f"needle row {i}", embedding=vec(1, i / 10), **extra))
        # a keyword-only twin: found by the words alone
        rows.append(Memory(id=f"w{i:02d}", namespace=NS, content=f"needle text {i}", **extra))
    return rows


def _filters(now: datetime) -> list[Filter]:
    return [
        Filter(now=now),
        Filter(now=now, tiers=[Tier.EPISODIC, Tier.WORKING]),
        Filter(now=now, levels=[Level.DEDUCED]),
        Filter(now=now, levels=[None]),
        Filter(now=now, tags=["red", "blue"]),
        Filter(now=now, tags=["red"]),
        Filter(now=now, metadata={"team": "x"}),
        Filter(now=now, exclude_metadata={"team": "y"}),
        Filter(now=now, exclude_ids=["v00", "w03", "v15"]),
        Filter(now=now, include_expired=True),
        Filter(now=now, include_superseded=True),
        Filter(now=now + timedelta(days=2)),
        Filter(now=now, as_of=now - timedelta(days=10)),
        Filter(now=now, as_of=now + timedelta(days=2)),
        Filter(now=now, memory_types=["decision", "problem"]),
        Filter(now=now, created_after=now - timedelta(days=2)),
        Filter(now=now, accessed_after=now - timedelta(days=2)),
    ]


def test_every_filter_field_is_honoured_on_both_legs(store: Store) -> None:
    now = datetime.now(UTC)
    store.upsert_many(_filter_rows(now))
    for f in _filters(now):
        allowed = {m.id for m in store.list(NS, f)}
        with_vec = {i for i in allowed if i.startswith("v")}
        # large enough pools: each leg finds every row it can, so recall returns exactly them
        rs = store.recall(NS, "needle", vec(1, 0), f, k=100, dedup=False)
        assert set(ids(rs)) == allowed, f
        assert {r.memory.id for r in rs if r.vector_score is not None} == with_vec, f
        assert {r.memory.id for r in rs if r.keyword_score is not None} == allowed, f
        assert set(ids(store.recall(NS, "", vec(1, 0), f, k=100))) == with_vec, f
        assert set(ids(store.recall(NS, "needle", None, f, k=100, dedup=False))) == allowed, f
        for fusion in ("convex", "rrf"):
            small = store.recall(NS, "needle", vec(1, 0), f, k=3, fusion=fusion)
            assert set(ids(small)) <= allowed, f


# ---------------------------------------------------------------------------------------------
# namespaces and links


def test_several_namespaces_rank_together_and_say_where(store: Store) -> None:
    store.upsert_many(
        [
            mem("a1", "project alpha deadline", ns="a", embedding=vec(1, 0)),
            mem("b1", "project alpha budget", ns="b", embedding=vec(0.9, 0.1)),
            mem("c1", "project alpha secret", ns="c", embedding=vec(1, 0)),
        ]
    )
    rs = store.recall(["a", "b", "a"], "alpha", vec(1, 0))
    assert ids(rs) == ["a1", "b1"]
    assert {r.memory.id: r.via for r in rs} == {"a1": "a", "b1": "b"}
    assert ids(store.recall(("b",), "alpha", vec(1, 0))) == ["b1"]
    # the merged ranking equals one namespace holding both rows
    one = store.recall("a", "alpha", vec(1, 0))
    assert one[0].score == rs[0].score


def test_linked_follows_links_and_their_tiers_and_nothing_else(store: Store) -> None:
    rows = []
    for ns in ("home", "team", "org", "stranger", "far"):
        for tier in Tier:
            rows.append(
                mem(f"{ns}-{tier.value}", f"shared fact {ns} {tier.value}", ns=ns, tier=tier)
            )
    store.upsert_many(rows)
    store.put_link(NamespaceLink(src="home", dst="team", tiers=[Tier.EPISODIC, Tier.SEMANTIC]))
    store.put_link(NamespaceLink(src="home", dst="org"))  # None = semantic and procedural
    store.put_link(NamespaceLink(src="org", dst="far"))  # two hops away: not followed
    store.put_link(NamespaceLink(src="stranger", dst="home"))  # incoming: not followed
    rs = store.recall("home", "shared fact", vec(1, 0), k=100, linked=True)
    got = {(r.via, r.memory.tier) for r in rs}
    want = {("home", t) for t in Tier} | {
        ("team", Tier.EPISODIC),
        ("team", Tier.SEMANTIC),
        ("org", Tier.SEMANTIC),
        ("org", Tier.PROCEDURAL),
    }
    assert got == want
    assert all(r.memory.namespace == r.via for r in rs)
    # without linked, only home; the filter's tiers intersect the link's
    assert {r.via for r in store.recall("home", "shared", vec(1, 0), k=100)} == {"home"}
    f = Filter(tiers=[Tier.SEMANTIC, Tier.WORKING])
    rs = store.recall("home", "shared", vec(1, 0), f, k=100, linked=True)
    assert {(r.via, r.memory.tier) for r in rs} == {
        ("home", Tier.SEMANTIC),
        ("home", Tier.WORKING),
        ("team", Tier.SEMANTIC),
        ("org", Tier.SEMANTIC),
    }
    # a linked namespace also listed is searched whole
    rs = store.recall(["home", "org"], "shared", vec(1, 0), k=100, linked=True)
    assert {r.memory.tier for r in rs if r.via == "org"} == set(Tier)


def test_linked_recall_sees_every_link_write_at_once(store: Store) -> None:
    store.upsert_many([mem(f"{ns}1", f"shared fact {ns}", ns=ns) for ns in ("home", "a", "b")])

    def vias() -> set[str]:
        return {r.via for r in store.recall("home", "shared fact", vec(1, 0), linked=True)}

    assert vias() == {"home"}
    store.put_link(NamespaceLink(src="home", dst="a"))
    assert vias() == {"home", "a"}
    store.put_link(NamespaceLink(src="home", dst="a", tiers=[Tier.WORKING]))
    assert vias() == {"home"}  # the link's tiers changed: a's semantic row is out
    store.put_link(NamespaceLink(src="home", dst="a"))
    store.rename_link_endpoints("a", "b")
    assert vias() == {"home", "b"}
    assert store.delete_link("home", "b")
    assert vias() == {"home"}
    store.put_link(NamespaceLink(src="home", dst="b"))
    assert vias() == {"home", "b"}
    store.delete_namespace("b")
    assert vias() == {"home"}


def test_the_keyword_leg_over_namespaces_scores_with_their_statistics(
    store: Store, request: pytest.FixtureRequest
) -> None:
    words = ["apple", "river", "stone", "cloud", "agent", "memory", "garden", "window"]
    rows = [
        mem(
            f"{ns}-{i}",
            " ".join(words[(i * 7 + j * j) % len(words)] for j in range(3 + i % 5)),
            ns=ns,
            tier=Tier.EPISODIC if i % 4 == 0 else Tier.SEMANTIC,
            embedding=None,
        )
        for ns in ("a", "b", "c")
        for i in range(40)
    ]
    # "all" holds a copy of every row: its statistics are those of a, b and c together
    copies = [dataclasses.replace(r, id=f"all/{r.id}", namespace="all") for r in rows]
    store.upsert_many([*rows, *copies])
    store.put_link(NamespaceLink(src="a", dst="c"))  # semantic and procedural rows of c
    for query in ("apple", "river stone", "garden window agent"):
        rs = store.recall(["a", "b"], query, k=120, rerank=None, dedup=False, linked=True)
        together = {
            h.memory.id.removeprefix("all/"): h.score
            for h in store.keyword_search("all", query, k=120)
        }
        want = {
            id: score
            for id, score in together.items()
            if not id.startswith("c") or int(id[2:]) % 4 != 0
        }
        got = {r.memory.id: r.keyword_score for r in rs}
        # equal up to f32 rounding: tantivy sums term scores in another order when the
        # namespaces searched hold most rows (see KeywordIndex::search_many)
        assert got == pytest.approx(want, rel=1e-6)
        # the same words weigh differently in one namespace alone (its own statistics;
        # PostgreSQL's ts_rank has no document frequencies)
        alone = {h.memory.id: h.score for h in store.keyword_search("a", query, k=120)}
        assert alone.keys() == {id for id in want if id.startswith("a")}
        if "postgres" not in request.node.name:
            assert alone != {id: want[id] for id in alone}


# ---------------------------------------------------------------------------------------------
# reinforce


def test_reinforce_counts_one_access_per_returned_row_durably(
    open_store: OpenStore, tmp_path: Path
) -> None:
    path = tmp_path / "reinforced"
    now = T0 + timedelta(days=400)
    with Store.open(path, dims=4) as s:
        s.upsert_many(
            [
                mem(f"a{i}", f"topic words {i}", ns="a", created_at=T0, last_accessed_at=T0)
                for i in range(5)
            ]
            + [
                mem(f"b{i}", f"topic words {i}", ns="b", created_at=T0, last_accessed_at=T0)
                for i in range(5)
            ]
        )
        s.put_link(NamespaceLink(src="a", dst="b", tiers=None))
        rs = s.recall(
            "a", "topic", vec(1, 0), Filter(now=now), k=4, linked=True, reinforce=True, dedup=False
        )
        assert len(rs) == 4
        # the results show the rows as found
        assert all(r.memory.access_count == 0 for r in rs)
        hit = {(r.via, r.memory.id) for r in rs}
    with Store.open(path) as s:
        for ns in ("a", "b"):
            for m in s.list(ns):
                touched = (ns, m.id) in hit
                assert m.access_count == (1 if touched else 0), m.id
                assert m.last_accessed_at == (now if touched else T0), m.id
        # no reinforce: nothing changes
        s.recall("a", "topic", vec(1, 0), Filter(now=now), linked=True)
        assert sum(m.access_count for m in s.list("a") + s.list("b")) == 4


@pytest.mark.local_only  # injects a fault into the in-process engine
def test_a_failed_reinforce_changes_nothing_and_raises(store: Store) -> None:
    store.upsert_many([mem(f"a{i}", f"topic {i}") for i in range(4)])
    store._engine.inject_fault("write", 1)
    with pytest.raises(MeminiError):
        store.recall(NS, "topic", vec(1, 0), reinforce=True)
    assert all(m.access_count == 0 for m in store.list(NS))
    store.recall(NS, "topic", vec(1, 0), reinforce=True)
    assert all(m.access_count == 1 for m in store.list(NS))


# ---------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k": 0},
        {"k": -3},
        {"k": 10, "pool": 9},
        {"alpha": 1.5},
        {"alpha": -0.1},
        {"alpha": float("nan")},
        {"rrf_k": 0},
        {"rrf_k": -1.0},
        {"rrf_k": float("inf")},
        {"fusion": "max"},
        {"rerank": "llm"},
        {"namespace": []},
        {"namespace": [f"n{i}" for i in range(65)]},
        {"query": 3},
        {"filter": "tiers"},
        {"linked": "yes"},
    ],
)
def test_bad_arguments_raise_invalid_argument(store: Store, kwargs: dict[str, Any]) -> None:
    store.upsert(mem("a", "words"))
    args: dict[str, Any] = {"namespace": NS, "query": "words", "vector": vec(1, 0)}
    args.update(kwargs)
    with pytest.raises(InvalidArgumentError):
        store.recall(**args)


def test_a_vector_of_the_wrong_length_raises_dimension_mismatch(store: Store) -> None:
    store.upsert(mem("a", "words"))
    with pytest.raises(DimensionMismatchError):
        store.recall(NS, "words", [1.0, 0.0])


def test_signature_is_the_contract(store: Store) -> None:
    store.upsert(mem("a", "words here"))
    # positional up to k, the rest keyword-only
    assert ids(store.recall(NS, "words", vec(1, 0), None, 5)) == ["a"]
    with pytest.raises(TypeError):
        store.recall(NS, "words", vec(1, 0), None, 5, "rrf")  # type: ignore[misc]
    assert len(store.recall([NS] * 64, "words")) == 1


# ---------------------------------------------------------------------------------------------
# the defaults: neighbour context, stopwords


def topic(axis: int, i: int) -> Memory:
    """Turn ``i`` of a chat about one topic: near its axis, far from the other topic's."""
    far = (0.9, 0.0)[:: 1 - 2 * axis]
    return mem(f"t{axis}{i}", f"chatter {i}", embedding=[0.0, 0.05 * i + 0.02 * axis, *far])


def test_default_fusion_credits_timeline_neighbours(store: Store) -> None:
    # a conversation (turns resemble the turns around them: its namespace is coherent) with
    # a question and its answer, stored one after the other; the answer shares no word with
    # the query and is as close to its vector as an unrelated row
    store.upsert_many(
        [
            *(topic(0, i) for i in range(4)),
            mem("q1", "did you enjoy the lake trip", embedding=vec(1, 0.2)),
            mem("a1", "yes, we swam every single day", embedding=vec(0.5, 0.5)),
            Memory(id="z1", namespace=NS, content="no vector, no matching word"),
            mem("x1", "groceries are expensive now", embedding=vec(0.5, 0.5)),
            Memory(id="z2", namespace=NS, content="no vector, no matching word either"),
            mem("y1", "the lake was frozen in winter", embedding=vec(0, 1)),
            *(topic(1, i) for i in range(4)),
        ]
    )
    plain = store.recall(NS, "lake trip", vec(1, 0), fusion="convex", alpha=0.4, dedup=False)
    by = {r.memory.id: r.score for r in plain}
    assert by["a1"] == by["x1"]  # the bare formula cannot tell them apart
    by = {r.memory.id: r.score for r in store.recall(NS, "lake trip", vec(1, 0), dedup=False)}
    assert by["a1"] > by["x1"]
    # without its neighbour among the candidates, no credit
    f = Filter(exclude_ids=["q1"])
    rs = store.recall(NS, "lake trip", vec(1, 0), f, dedup=False)
    by = {r.memory.id: r.score for r in rs}
    assert by["a1"] == by["x1"]
    # one leg alone is that search, whatever the defaults
    assert ids(store.recall(NS, "", vec(1, 0), dedup=False)) == ids_of(
        store.vector_search(NS, vec(1, 0))
    )


def test_default_fusion_weighs_the_keyword_leg_by_its_best_score(
    store: Store, request: pytest.FixtureRequest
) -> None:
    if "postgres" in request.node.name:
        pytest.skip("ts_rank is not BM25: the PostgreSQL keyword leg keeps its full weight")
    # under 8 rows: no coherence, no neighbour context; the defaults are convex 0.4 with the
    # keyword leg's min-max scores times top / (top + 0.2), top its best BM25 score.
    # Facts about one user, each naming her
    store.upsert_many(
        [
            mem("a", "dana likes green tea", embedding=vec(1, 0.1)),
            mem("b", "dana broke her wrist while skiing", embedding=vec(1, 0.6)),
            mem("c", "dana sings", embedding=vec(0, 1)),
            mem("d", "dana walks her dog", embedding=vec(0.2, 1)),
            mem("e", "dana reads on a rainy morning", embedding=vec(0.5, 0.5)),
            mem("f", "dana works as a nurse", embedding=vec(0.3, 0.8)),
            mem("g", "dana grows tomatoes", embedding=vec(0.1, 0.9)),
        ]
    )
    v = vec(1, 0.6)
    for query in ("dana", "dana wrist", "green tea"):
        vn = minmax({h.memory.id: h.score for h in store.vector_search(NS, v, k=50)})
        khits = store.keyword_search(NS, query, k=50)
        kn = minmax({h.memory.id: h.score for h in khits})
        top = khits[0].score
        want = {
            i: 0.4 * vn.get(i, 0.0) + 0.6 * top / (top + 0.2) * kn.get(i, 0.0) for i in {*vn, *kn}
        }
        rs = store.recall(NS, query, v, rerank=None, dedup=False)
        assert {r.memory.id: r.score for r in rs} == pytest.approx(want)
        if query == "dana":  # in every row: it weighs little, the best vector match wins
            assert top < 0.15  # 1.69 ln(1 + 0.5 / 7.5) ~ 0.11
            assert ids(rs)[0] == "b"


def minmax(scores: dict[str, float]) -> dict[str, float]:
    lo, hi = min(scores.values()), max(scores.values())
    return {i: (s - lo) / (hi - lo) if hi > lo else 1.0 for i, s in scores.items()}


def test_no_neighbour_credit_where_storage_order_means_nothing(store: Store) -> None:
    # the same rows, the two topics' turns alternating: time-adjacent rows resemble each
    # other less than random pairs do, and the answer gains nothing from the question
    # stored just before it
    chatter = [topic(i % 2, i // 2) for i in range(8)]
    store.upsert_many(
        [
            *chatter[:6],
            mem("q1", "did you enjoy the lake trip", embedding=vec(1, 0.2)),
            mem("a1", "yes, we swam every single day", embedding=vec(0.5, 0.5)),
            Memory(id="z1", namespace=NS, content="no vector, no matching word"),
            mem("x1", "groceries are expensive now", embedding=vec(0.5, 0.5)),
            Memory(id="z2", namespace=NS, content="no vector, no matching word either"),
            mem("y1", "the lake was frozen in winter", embedding=vec(0, 1)),
            *chatter[6:],
        ]
    )
    by = {r.memory.id: r.score for r in store.recall(NS, "lake trip", vec(1, 0), dedup=False)}
    assert by["a1"] == by["x1"]
    # a conversation carries on in the namespace: its coherence is measured again as it
    # grows, and the answer now gains from the question before it
    store.upsert_many(
        [
            mem(f"u{b}{i:02d}", f"more chatter {i}", embedding=topic(b % 2, i).embedding)
            for b in range(4)
            for i in range(10)
        ]
    )
    by = {r.memory.id: r.score for r in store.recall(NS, "lake trip", vec(1, 0), dedup=False)}
    assert by["a1"] > by["x1"]


def test_keyword_queries_drop_stopwords_unless_nothing_else(store: Store) -> None:
    store.upsert_many(
        [
            mem("a", "the cat ate the fish"),
            mem("b", "what a day it was"),
            mem("c", "a cat, a dog"),
        ]
    )
    for q, same in (("what did the cat eat", "cat eat"), ("The CAT ate?", "cat ate")):
        hits = store.keyword_search(NS, q)
        assert [(h.memory.id, h.score) for h in hits] == [
            (h.memory.id, h.score) for h in store.keyword_search(NS, same)
        ], q
    # stopwords alone still search
    assert ids_of(store.keyword_search(NS, "what was it")) == ["b"]


# ---------------------------------------------------------------------------------------------
# facts: rows whose storage order means nothing, every row naming its user

FACTS = {
    "alice": [
        "Alice is debugging a memory leak in the payments service",
        "Alice drinks her tea without sugar",
        "Alice wants to give a talk about vector databases",
        "Alice lives in Lisbon with her partner",
        "Alice runs five kilometres every Sunday",
        "Alice's sister is a nurse in Porto",
        "Alice is learning to play the cello",
        "Alice prefers window seats on long flights",
        "Alice reads science fiction before bed",
        "Alice adopted a grey cat named Pixel",
        "Alice's birthday is in late October",
        "Alice keeps her notes in plain text files",
    ],
    "carol": [
        "Carol is vegetarian on weekdays",
        "Carol broke her wrist skiing in February",
        "Carol manages the design team",
        "Carol grew up near the coast",
        "Carol plays chess online at night",
        "Carol is saving money for a new bicycle",
        "Carol speaks Spanish and Portuguese",
        "Carol bakes sourdough bread on Saturdays",
        "Carol's favourite band is from Iceland",
        "Carol volunteers at an animal shelter",
        "Carol takes the train to work",
        "Carol is afraid of deep water",
    ],
}


@needs_weights
@pytest.mark.parametrize(
    ("namespace", "query", "want"),
    [
        ("alice", "green tea", "Alice drinks her tea without sugar"),
        ("alice", "what pet does Alice have?", "Alice adopted a grey cat named Pixel"),
        ("carol", "which languages does Carol speak", "Carol speaks Spanish and Portuguese"),
        ("carol", "Carol's injuries", "Carol broke her wrist skiing in February"),
    ],
)
def test_the_obvious_fact_ranks_first_whatever_the_storage_order(
    tmp_path: Path, namespace: str, query: str, want: str
) -> None:
    """Facts about each user, stored in an arbitrary order, every one naming its user: the
    defaults rank the obvious answer first (neighbour context does not lift an unrelated
    fact stored next to a good hit, and the user's name, in every row, weighs nothing)."""
    with Store.open(tmp_path / "s", embedder=LocalEmbedder(), metric="cos") as s:
        s.upsert_many(
            [
                Memory(id=f"{ns}{i:02d}", namespace=ns, content=text)
                for ns, texts in FACTS.items()
                for i, text in enumerate(texts)
            ]
        )
        got = s.recall(namespace, query, k=4)
        assert got[0].memory.content == want, [r.memory.content for r in got]


def test_the_coherence_rule_refuses_a_sample_of_the_wrong_size() -> None:
    from memini import _core
    from memini.errors import InvalidArgumentError

    assert _core.coherence_sample(7) == []
    assert _core.coherence(7, []) == 0.0
    positions = _core.coherence_sample(100)
    assert positions == sorted(positions) and len(positions) == 2 * 99
    with pytest.raises(InvalidArgumentError, match="198 positions"):
        _core.coherence(100, [None] * 10)
