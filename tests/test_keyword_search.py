"""Keyword search: API.md section 4 (BM25, analysis, hostile queries, filters)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from memini import Filter, InvalidArgumentError, Memory, Scored, Store, Tier

NS = "ns"


def mem(id: str, content: str, ns: str = NS, **kw: Any) -> Memory:
    return Memory(id=id, namespace=ns, content=content, **kw)


def found(s: Store, query: str, f: Filter | None = None, k: int = 100, ns: str = NS) -> set[str]:
    return {hit.memory.id for hit in s.keyword_search(ns, query, f, k)}


def assert_well_formed(hits: list[Scored]) -> None:
    scores = [hit.score for hit in hits]
    assert all(isinstance(hit, Scored) and isinstance(hit.score, float) for hit in hits)
    assert all(score > 0 for score in scores), scores
    assert scores == sorted(scores, reverse=True), scores
    assert len({hit.memory.id for hit in hits}) == len(hits)
    assert all(hit.memory.embedding is None for hit in hits)


# ---------------------------------------------------------------------------------------------
# what matches

ANALYSIS_CASES = [
    # English stemming
    pytest.param("the cat sat on the mat", "cats", id="plural-query-finds-singular"),
    pytest.param("so many cats here", "cat", id="singular-query-finds-plural"),
    pytest.param("she was running fast", "runs", id="stemmed-verb"),
    pytest.param("connection pooling matters", "connected", id="stemmed-suffix"),
    # case
    pytest.param("Coffee time", "COFFEE", id="upper-query-lower-text"),
    pytest.param("COFFEE TIME", "coffee", id="lower-query-upper-text"),
    # accents
    pytest.param("un café au lait", "cafe", id="plain-query-accented-text"),
    pytest.param("a cafe downtown", "café", id="accented-query-plain-text"),
    pytest.param("a cafe downtown", "CAFÉ", id="accent-and-case"),
    pytest.param("naïve approach", "naive", id="diaeresis"),
    pytest.param("crème brûlée recipe", "creme brulee", id="several-accents"),
    pytest.param("ÉCOLE primaire", "école", id="accented-capital"),
    pytest.param("un cafe\u0301 noir", "café", id="decomposed-accent-in-text"),
    pytest.param("un café noir", "cafe\u0301", id="decomposed-accent-in-query"),
    # Unicode-aware words
    pytest.param("МОСКВА столица", "москва", id="cyrillic-case"),  # noqa: RUF001
    pytest.param("ΑΘΗΝΑ πόλη", "αθηνα", id="greek-case"),
    pytest.param("東京タワー に 行った", "東京タワー", id="japanese"),
    pytest.param("Straße und Weg", "straße", id="eszett"),
    pytest.param("route 42 north", "42", id="two-digit-number"),
    pytest.param("version v2 released", "v2", id="letters-and-digits"),
    pytest.param("emoji 🙂 smile", "smile", id="emoji-is-a-separator"),
]


@pytest.mark.parametrize(("content", "query"), ANALYSIS_CASES)
def test_analysis(store: Store, content: str, query: str) -> None:
    store.upsert(mem("hit", content))
    store.upsert(mem("miss", "nothing relevant in here at all"))
    hits = store.keyword_search(NS, query)
    assert [hit.memory.id for hit in hits] == ["hit"]
    assert_well_formed(hits)


@pytest.mark.parametrize(
    ("content", "query"),
    [
        pytest.param("na ve thinking", "naïve", id="accented-word-is-one-word"),
        pytest.param("caf society", "café", id="accent-is-not-a-separator"),
        pytest.param("the category", "cat", id="no-prefix-match"),
        pytest.param("concatenate", "cat", id="no-substring-match"),
        pytest.param("tea time", "coffee shop", id="other-words"),
    ],
)
def test_no_false_matches(store: Store, content: str, query: str) -> None:
    store.upsert(mem("row", content))
    assert store.keyword_search(NS, query) == []


@pytest.mark.parametrize(
    ("field", "row"),
    [
        pytest.param("content", mem("r", "zebra crossing"), id="content"),
        pytest.param("summary", mem("r", "unrelated text", summary="zebra crossing"), id="summary"),
        pytest.param("tags", mem("r", "unrelated text", tags=["zebra", "stripes"]), id="tags"),
    ],
)
def test_searches_content_summary_and_tags(store: Store, field: str, row: Memory) -> None:
    store.upsert(row)
    store.upsert(mem("other", "no animals here", summary="none", tags=["horse"]))
    hits = store.keyword_search(NS, "zebra")
    assert [hit.memory.id for hit in hits] == ["r"], field
    assert_well_formed(hits)


def test_metadata_is_not_searched(store: Store) -> None:
    store.upsert(mem("r", "plain text", metadata={"animal": "zebra"}))
    assert store.keyword_search(NS, "zebra") == []


def test_words_are_ored(store: Store) -> None:
    store.upsert_many(
        [
            mem("apple", "an apple a day"),
            mem("zebra", "a zebra crossing"),
            mem("both", "apple and zebra together"),
            mem("neither", "nothing to see"),
        ]
    )
    hits = store.keyword_search(NS, "apple zebra")
    assert {hit.memory.id for hit in hits} == {"apple", "zebra", "both"}
    assert hits[0].memory.id == "both"  # matching both words ranks first
    assert_well_formed(hits)


def test_bm25_ranks_by_term_frequency_and_rarity(store: Store) -> None:
    store.upsert_many(
        [
            mem("many", "kiwi kiwi kiwi banana"),
            mem("one", "kiwi banana melon grape"),
            mem("rare", "durian banana melon grape"),
            mem("common1", "banana melon grape plum"),
            mem("common2", "banana melon grape fig"),
        ]
    )
    hits = store.keyword_search(NS, "kiwi")
    assert [hit.memory.id for hit in hits] == ["many", "one"]
    assert hits[0].score > hits[1].score
    # a rare word weighs more than a common one
    hits = store.keyword_search(NS, "durian banana")
    assert hits[0].memory.id == "rare"
    assert_well_formed(hits)


@pytest.mark.local_only
def test_a_longer_row_loses_little_to_a_shorter_one_matching_the_same_words(store: Store) -> None:
    """Length normalisation scaled down (BM25 in effect k1 = 0.39, b = 0.23): a row three times
    as long matching the same word scores within 10% of the short one, which still ranks first.
    With tantivy's k1 = 1.2, b = 0.75 it scored 0.357 against 0.577."""
    store.upsert_many(
        [
            mem("short", "Carol broke her wrist"),
            mem("long", "Carol broke her wrist skiing down the north slope at dawn with friends"),
            mem("other", "Carol is vegetarian on weekdays"),
        ]
    )
    hits = store.keyword_search(NS, "wrist")
    assert [h.memory.id for h in hits] == ["short", "long"]
    assert hits[1].score > 0.9 * hits[0].score


@pytest.mark.local_only
def test_another_tenants_rows_move_no_keyword_score(store: Store) -> None:
    """The average length BM25 reads is the namespaces' own, like their document counts: long
    rows written to another namespace (before and after a fold of the index) leave the
    scores here as they were. With the index's average length they moved them (0.766 ->
    0.792)."""
    store.upsert_many(
        [
            mem("short", "Carol broke her wrist"),
            mem("long", "Carol broke her wrist skiing down the north slope at dawn with friends"),
            mem("other", "Carol is vegetarian on weekdays"),
        ]
    )
    before = [(h.memory.id, h.score) for h in store.keyword_search(NS, "wrist")]
    for i in range(3):
        store.upsert_many([mem(f"t{i}-{j}", "tenant words " * 40, ns="tenant") for j in range(20)])
        assert [(h.memory.id, h.score) for h in store.keyword_search(NS, "wrist")] == before
        store.compact()
        assert [(h.memory.id, h.score) for h in store.keyword_search(NS, "wrist")] == before
    store.upsert(mem("other", "Carol is vegetarian"))  # a row of the namespace itself changes
    assert [(h.memory.id, h.score) for h in store.keyword_search(NS, "wrist")] != before


def test_word_frequencies_are_those_of_the_namespace_searched(store: Store) -> None:
    """A word in every row of a namespace (a user's name in their own facts) weighs nearly
    nothing there, however rare it is elsewhere, and another namespace's rows do not change
    that."""
    carol = [
        "Carol is vegetarian",
        "Carol broke her wrist skiing",
        "Carol manages the design team",
        "Carol plays chess online at night",
        "Carol takes the train to work",
        "Carol grew up near the coast",
    ]
    store.upsert_many([mem(f"c{i}", text, ns="carol") for i, text in enumerate(carol)])
    store.upsert_many([mem(f"o{i}", f"other row {i} about skiing", ns="other") for i in range(40)])

    def scores() -> dict[str, float]:
        return {h.memory.id: h.score for h in store.keyword_search("carol", "Carol's wrist", k=10)}

    for _ in range(2):
        got = scores()
        assert max(got, key=got.__getitem__) == "c1"
        # the word in every row adds next to nothing to the row that has both
        assert set(got) == {f"c{i}" for i in range(6)}
        assert max(v for i, v in got.items() if i != "c1") < 0.2 * got["c1"], got
        # the same word in another namespace changes nothing of that
        store.upsert_many([mem(f"p{i}", f"no carol here {i}", ns="other") for i in range(40)])


def test_word_weights_follow_the_writes_to_the_namespace(store: Store) -> None:
    """A word that becomes common in a namespace weighs less at the next search there, and
    weighs as before once those rows are deleted (the PostgreSQL backend caches document
    frequencies: it counts a namespace again once this store has written more than a
    sixteenth of its rows since)."""
    store.upsert_many([mem("k", "kettle stove"), mem("t", "teapot handle")])
    store.upsert_many([mem(f"f{i}", f"filler row {i}") for i in range(14)])

    def scores() -> dict[str, float]:
        return {h.memory.id: h.score for h in store.keyword_search(NS, "kettle teapot", k=5)}

    before = scores()
    assert before["k"] == pytest.approx(before["t"])
    store.upsert_many([mem(f"x{i}", f"copper kettle {i}") for i in range(10)])
    common = scores()
    assert common["t"] > common["k"], common
    for i in range(10):
        store.delete(NS, f"x{i}")
    assert scores() == pytest.approx(before)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 9])
def test_top_k_are_the_best_scores(store: Store, k: int) -> None:
    # 1..9 occurrences of "apple" in documents of equal length: scores strictly increase with i
    rows = [mem(f"d{i}", " ".join(["apple"] * i + ["filler"] * (9 - i))) for i in range(1, 10)]
    store.upsert_many(rows)
    hits = store.keyword_search(NS, "apple", k=k)
    assert [h.memory.id for h in hits] == [f"d{i}" for i in range(9, 9 - k, -1)]
    assert_well_formed(hits)


def test_scores_are_deterministic(store: Store) -> None:
    rng = np.random.default_rng(31)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    store.upsert_many([mem(f"d{i:03d}", " ".join(rng.choice(words, size=8))) for i in range(200)])
    first = store.keyword_search(NS, "alpha theta", k=50)
    assert len(first) == 50
    assert_well_formed(first)
    for _ in range(3):
        again = store.keyword_search(NS, "alpha theta", k=50)
        assert [(h.memory.id, h.score) for h in again] == [(h.memory.id, h.score) for h in first]


def test_hits_carry_the_stored_row(store: Store) -> None:
    store.upsert(
        mem(
            "r",
            "the quick brown fox",
            tier=Tier.EPISODIC,
            summary="fox summary",
            metadata={"k": "v"},
            tags=["animal"],
            importance=0.5,
            confidence=0.25,
            embedding=[1, 2, 3, 4],
        )
    )
    [hit] = store.keyword_search(NS, "fox")
    assert hit.memory == store.get(NS, "r")
    assert hit.memory.embedding is None


# ---------------------------------------------------------------------------------------------
# hostile queries: never raise, never syntax

HOSTILE_CORPUS = {
    "foo": "foo alpha",
    "bar": "bar beta",
    "near": "near gamma",
    "quoted": "quoted delta",
    "phrase": "epsilon phrase",
    "col": "col zeta",
    "value": "value eta",
    "xylo": "xylophone theta",
    "cat": "cat iota",
    "toy": "toy kappa",
    "tokyo": "東京タワー lambda",
    "cafe": "cafe mu",
    "naive": "naive nu",
    "drop": "drop xi",
    "table": "table omicron",
    "memories": "memories pi",
    "split-na-ve": "na ve rho",
    "split-caf": "caf sigma",
    "seven": "route 7 tau",
}

HOSTILE = [
    pytest.param("NEAR(foo bar)", {"near", "foo", "bar"}, id="near-operator"),
    pytest.param('"quoted phrase"', {"quoted", "phrase"}, id="phrase-query"),
    pytest.param("col:value AND x* OR (y)", {"col", "value"}, id="field-boolean-wildcard"),
    pytest.param("cat's -toy", {"cat", "toy"}, id="apostrophe-and-negation"),
    pytest.param("東京タワー", {"tokyo"}, id="cjk"),
    pytest.param("café naïve", {"cafe", "naive"}, id="accents"),
    pytest.param("); DROP TABLE memories; --", {"drop", "table", "memories"}, id="sql-injection"),
    pytest.param("+foo", {"foo"}, id="required-operator"),
    pytest.param("foo^2", {"foo"}, id="boost-operator"),
    pytest.param("foo~2", {"foo"}, id="fuzzy-operator"),
    pytest.param("NOT foo", {"foo"}, id="not-operator"),
    pytest.param("foo AND NOT bar", {"foo", "bar"}, id="and-not"),
    pytest.param("[foo TO bar]", {"foo", "bar"}, id="range"),
    pytest.param("{foo TO bar}", {"foo", "bar"}, id="exclusive-range"),
    pytest.param("title:foo", {"foo"}, id="unknown-field"),
    pytest.param("content:bar", {"bar"}, id="known-field"),
    pytest.param("foo*", {"foo"}, id="trailing-star"),
    pytest.param("xyl*", set(), id="prefix-is-not-a-wildcard"),
    pytest.param("/fo.*/", set(), id="regex-is-not-syntax"),
    pytest.param("foo\\ bar", {"foo", "bar"}, id="backslash"),
    pytest.param("'foo", {"foo"}, id="lone-quote"),
    pytest.param('"foo', {"foo"}, id="unbalanced-double-quote"),
    pytest.param("(foo", {"foo"}, id="unbalanced-paren"),
    pytest.param("foo)", {"foo"}, id="unbalanced-close-paren"),
    pytest.param("%foo%", {"foo"}, id="sql-wildcards"),
    pytest.param("\x00", set(), id="nul"),
    pytest.param("\x00foo", None, id="nul-then-word"),
    pytest.param("\ud800", set(), id="lone-surrogate"),
    pytest.param("foo\udfff", None, id="word-then-lone-surrogate"),
    pytest.param("", set(), id="empty"),
    pytest.param("*", set(), id="star"),
    pytest.param(":", set(), id="colon"),
    pytest.param("AND", set(), id="bare-and"),
    pytest.param("OR NOT", set(), id="bare-or-not"),
    pytest.param("\\", set(), id="lone-backslash"),
    # the longest queries allowed (memini.limits.MAX_QUERY_CHARS; longer: tests/test_limits.py)
    pytest.param("foo " * 1024, {"foo"}, id="very-long-query"),
    pytest.param("f" * 4096, set(), id="very-long-word"),
    pytest.param("\u200b\ufeff\u00a0", set(), id="invisible-whitespace"),
    pytest.param("\U0001f600\U0001f600", set(), id="only-emoji"),
]


@pytest.fixture
def hostile_store(store: Store) -> Store:
    store.upsert_many([mem(id, text) for id, text in HOSTILE_CORPUS.items()])
    return store


@pytest.mark.parametrize(("query", "expected"), HOSTILE)
def test_hostile_queries(hostile_store: Store, query: str, expected: set[str] | None) -> None:
    hits = hostile_store.keyword_search(NS, query, k=100)
    assert_well_formed(hits)
    if expected is not None:
        assert {hit.memory.id for hit in hits} == expected
    # nothing was harmed
    assert hostile_store.count(NS) == len(HOSTILE_CORPUS)
    assert found(hostile_store, "memories") == {"memories"}


@pytest.mark.parametrize("query", [pytest.param(p.values[0], id=p.id) for p in HOSTILE])
def test_hostile_queries_with_filter(hostile_store: Store, query: str) -> None:
    f = Filter(tags=[], exclude_ids=["foo"], include_expired=True)
    hits = hostile_store.keyword_search(NS, query, f, k=5)
    assert_well_formed(hits)
    assert "foo" not in {hit.memory.id for hit in hits}


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("a", id="one-letter"),
        pytest.param("I", id="one-capital"),
        pytest.param("x y z", id="several-one-letter-words"),
        pytest.param("a i", id="one-letter-words-in-a-row"),
        pytest.param("7", id="one-digit"),
        pytest.param("é", id="one-accented-letter"),
        pytest.param("!!!", id="punctuation"),
        pytest.param("   \t\n", id="whitespace"),
        pytest.param("- + * ( )", id="operators"),
        pytest.param("", id="empty"),
    ],
)
def test_no_word_of_two_letters_gives_nothing(hostile_store: Store, query: str) -> None:
    hostile_store.upsert(mem("single-letters", "a i x y z é I"))
    assert hostile_store.keyword_search(NS, query) == []


# ---------------------------------------------------------------------------------------------
# filters, k, namespaces


@pytest.fixture
def apples(store: Store) -> Store:
    """40 rows about apples (10 tagged rare, more apple words = higher score), plus noise."""
    rows = []
    for i in range(40):
        rows.append(
            mem(
                f"a{i:02d}",
                " ".join(["apple"] * (1 + i % 5) + ["filler"] * (5 - i % 5)),
                tags=["rare"] if i % 4 == 0 else ["common"],
                tier=Tier.WORKING if i % 2 else Tier.SEMANTIC,
                metadata={"n": str(i)},
                expires_at=datetime(2000, 1, 1, tzinfo=UTC) if i == 39 else None,
                superseded_by="a00" if i == 38 else None,
            )
        )
    rows += [mem(f"noise{i}", "pears and plums") for i in range(10)]
    store.upsert_many(rows)
    store.upsert_many([mem(f"other{i}", "apple apple apple", ns="other") for i in range(30)])
    return store


LIVE_APPLES = {f"a{i:02d}" for i in range(38)}


@pytest.mark.parametrize(
    ("filter_kw", "k", "expected"),
    [
        pytest.param({}, 100, LIVE_APPLES, id="all-live-matches"),
        pytest.param({}, 5, 5, id="k-caps"),
        pytest.param({"tags": ["rare"]}, 100, {f"a{i:02d}" for i in range(0, 38, 4)}, id="rare"),
        pytest.param({"tags": ["rare"]}, 3, 3, id="rare-k-caps"),
        pytest.param(
            {"tiers": [Tier.WORKING], "tags": ["rare"]}, 100, set(), id="no-row-passes-filter"
        ),
        pytest.param({"metadata": {"n": "7"}}, 10, {"a07"}, id="metadata-filter-before-ranking"),
        pytest.param(
            {"include_expired": True, "include_superseded": True},
            100,
            LIVE_APPLES | {"a38", "a39"},
            id="include-everything",
        ),
        pytest.param(
            {"exclude_ids": [f"a{i:02d}" for i in range(4, 40, 5)]},
            100,
            LIVE_APPLES - {f"a{i:02d}" for i in range(4, 40, 5)},
            id="exclude-best-rows",
        ),
        pytest.param(
            {"exclude_ids": [f"a{i:02d}" for i in range(4, 40, 5)]},
            8,
            8,
            id="excluded-rows-cost-no-slot",
        ),
    ],
)
def test_filter_applied_before_ranking(
    apples: Store, filter_kw: dict[str, Any], k: int, expected: set[str] | int
) -> None:
    f = Filter(**filter_kw)
    hits = apples.keyword_search(NS, "apple", f, k)
    assert_well_formed(hits)
    got = {hit.memory.id for hit in hits}
    if isinstance(expected, int):
        assert len(hits) == expected
        everything = {hit.memory.id for hit in apples.keyword_search(NS, "apple", f, 1000)}
        assert got <= everything
        # the best rows are returned: every hit scores at least as well as every miss
        all_hits = apples.keyword_search(NS, "apple", f, 1000)
        kth = hits[-1].score
        assert all(h.score <= kth for h in all_hits if h.memory.id not in got)
    else:
        assert got == expected
        assert len(hits) == len(expected)
    assert all(hit.memory.namespace == NS for hit in hits)


def test_rare_tag_filter(store: Store) -> None:
    """A tag passing few rows is intersected inside tantivy: committed, stale and delta
    documents all obey it, and scores equal the unfiltered ones."""
    rows = [
        mem(f"r{i:03d}", "apple " + "pie " * (i % 7), tags=["needle"] if i % 40 == 0 else ["hay"])
        for i in range(400)
    ]
    rows.append(mem("other", "apple pie", ns="elsewhere", tags=["needle"]))
    store.upsert_many(rows)
    store.compact()  # everything committed into tantivy segments
    store.update(NS, "r040", tags=["hay"])  # loses the tag: its committed document is stale
    store.update(NS, "r041", tags=["needle"])  # gains it: only the delta knows
    store.upsert(mem("r999", "apple", tags=["needle"]))  # new: in the delta
    want = ({f"r{i:03d}" for i in range(0, 400, 40)} - {"r040"}) | {"r041", "r999"}
    every = {h.memory.id: h.score for h in store.keyword_search(NS, "apple pie", k=1000)}
    hits = store.keyword_search(NS, "apple pie", Filter(tags=["needle"]), k=1000)
    assert_well_formed(hits)
    assert {h.memory.id for h in hits} == want
    assert all(h.score == every[h.memory.id] for h in hits)
    top3 = store.keyword_search(NS, "apple pie", Filter(tags=["needle"]), k=3)
    assert [(h.memory.id, h.score) for h in top3] == [(h.memory.id, h.score) for h in hits[:3]]


def test_default_k_is_10(apples: Store) -> None:
    assert len(apples.keyword_search(NS, "apple")) == 10


def test_positional_and_keyword_arguments(apples: Store) -> None:
    f = Filter(tags=["rare"])
    positional = apples.keyword_search(NS, "apple", f, 4)
    named = apples.keyword_search(namespace=NS, query="apple", filter=f, k=4)
    assert [h.memory.id for h in positional] == [h.memory.id for h in named]
    assert len(positional) == 4


def test_namespace_isolation(apples: Store) -> None:
    assert len(apples.keyword_search("other", "apple", k=100)) == 30
    assert all(h.memory.namespace == NS for h in apples.keyword_search(NS, "apple", k=100))
    assert apples.keyword_search("nobody", "apple") == []


# ---------------------------------------------------------------------------------------------
# read-your-writes

READ_YOUR_WRITES = [
    pytest.param(
        lambda s: s.upsert(mem("n", "freshly written words")), "freshly", {"n"}, NS, id="insert"
    ),
    pytest.param(
        lambda s: s.update(NS, "t", content="replacement text"),
        "original",
        set(),
        NS,
        id="update-old-words-gone",
    ),
    pytest.param(
        lambda s: s.update(NS, "t", content="replacement text"),
        "replacement",
        {"t"},
        NS,
        id="update-new-words-found",
    ),
    pytest.param(
        lambda s: s.update(NS, "t", tags=["newtag"]), "newtag", {"t"}, NS, id="update-tags"
    ),
    pytest.param(
        lambda s: s.update(NS, "t", summary="summarised"),
        "summarised",
        {"t"},
        NS,
        id="update-summary",
    ),
    pytest.param(
        lambda s: s.upsert(mem("t", "other words")), "original", set(), NS, id="upsert-replaces"
    ),
    pytest.param(lambda s: s.delete(NS, "t"), "original", set(), NS, id="delete"),
    pytest.param(
        lambda s: s.reassign(NS, ["t"], "to"), "original", set(), NS, id="reassign-leaves"
    ),
    pytest.param(
        lambda s: s.reassign(NS, ["t"], "to"), "original", {"t"}, "to", id="reassign-arrives"
    ),
    pytest.param(lambda s: s.set_superseded(NS, "t", "x"), "original", set(), NS, id="supersede"),
    pytest.param(
        lambda s: (s.set_superseded(NS, "t", "x"), s.restore(NS, "t")),
        "original",
        {"t"},
        NS,
        id="restore",
    ),
    pytest.param(lambda s: s.delete_namespace(NS), "original", set(), NS, id="delete-namespace"),
    pytest.param(
        lambda s: s.upsert_many([mem("t", "batch words"), mem("u", "original batch")]),
        "original",
        {"u"},
        NS,
        id="upsert-many",
    ),
    pytest.param(
        lambda s: s.update(NS, "t", embedding=[1, 2, 3, 4]),
        "original",
        {"t"},
        NS,
        id="vector-change-keeps-words",
    ),
]


@pytest.mark.parametrize(("op", "query", "expected", "ns"), READ_YOUR_WRITES)
def test_read_your_writes(
    store: Store, op: Callable[[Store], Any], query: str, expected: set[str], ns: str
) -> None:
    store.upsert_many([mem(f"bg{i}", f"background row number {i}") for i in range(30)])
    store.upsert(mem("t", "the original words"))
    assert found(store, "original") == {"t"}
    op(store)
    assert found(store, query, ns=ns) == expected


def test_search_right_after_each_write(store: Store) -> None:
    for i in range(60):
        store.upsert(mem(f"w{i}", f"common token{i}"))
        assert found(store, f"token{i}") == {f"w{i}"}
        assert len(store.keyword_search(NS, "common", k=1000)) == i + 1


def test_k_below_one(store: Store) -> None:
    store.upsert(mem("r", "words"))
    for k in (0, -1):
        with pytest.raises(InvalidArgumentError):
            store.keyword_search(NS, "words", k=k)
        with pytest.raises(InvalidArgumentError):
            store.keyword_search(NS, "", k=k)  # k is checked even for a query with no word


def test_a_huge_word_is_not_indexed_and_warns_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with Store.open(None, dims=2) as s:
        s.upsert(Memory(id="a", namespace="n", content="hello " + "x" * 70_000 + " world"))
        assert [h.memory.id for h in s.keyword_search("n", "world")] == ["a"]
        assert s.keyword_search("n", "x" * 4_096) == []  # the longest query allowed
    assert not [r for r in caplog.records if "MAX_TOKEN_LEN" in r.getMessage()]


def test_the_readme_quick_start_run_twice_scores_its_row_the_same(tmp_path: Any) -> None:
    """Issue 33 item 18: the second run (a reopen, the same row written again) scored it
    0.2877 then 0.1823, and stats() counted 4 keyword docs for 2 rows."""
    path = tmp_path / "agent-memory"
    scores, docs = [], []
    for _ in range(3):
        with Store.open(path, dims=4, metric="cos") as s:
            s.upsert(
                Memory(
                    id="m1",
                    namespace="alice",
                    content="Alice prefers green tea",
                    tier=Tier.SEMANTIC,
                    tags=["preference"],
                    embedding=np.ones(4),
                )
            )
            s.upsert(
                Memory(
                    id="m2",
                    namespace="alice",
                    content="Bob likes tea with milk",
                    embedding=np.ones(4),
                )
            )
            scores.append([(h.memory.id, h.score) for h in s.keyword_search("alice", "tea")])
            docs.append(s.stats()["keyword_docs"])
    assert scores[1] == scores[0] and scores[2] == scores[0]
    assert docs == [2, 2, 2]
