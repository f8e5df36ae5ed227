"""The keyword leg's word weights on PostgreSQL: each word's inverse document frequency in
the namespaces searched, from counts cached per namespace and made by the search itself.

A keyword search ranks a row by the sum over the query's words of ``ts_rank`` (the word's
weight in the row) times the word's idf (see `memini.postgres._search`), BM25's
``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the rows of the namespaces searched: a word in
nearly every row there (a user's name in their own facts) weighs nearly nothing. A row
belongs to one namespace, so the counts of several namespaces add up: ``N`` and each
word's ``df`` are cached per namespace, the words as the ``english`` configuration parses
them (a stopword has no lexeme and no weight; two words with one stem count once).

Counting in every search cost half of its speed (a bitmap heap scan per word), so a search
passes what is cached as parameters and its own statement counts only the rest (the
``_WEIGHTS`` CTEs of `memini.postgres._search`: ``N`` up to `COUNT_UP_TO` rows, above it
the planner statistics' estimate, `memini.postgres._search.Sizes.rows`; each missing
word's ``df`` through the GIN index, in a small namespace through its own index) and
returns those counts as rows of their own, which `Lookup.learn` caches: a search is one
statement whether its words are cached or not (a counting statement before it cost a cold
word a round trip). A word not parsed yet (not cached in any namespace) is weighed as the
statement parses it: nothing for a stopword, or for a stem an earlier word of the query
has. A namespace's counts are dropped once this store has written more than a sixteenth of
its rows since they were counted (`wrote`; any write to a namespace of fewer than 16 rows)
and after `memini.postgres._search.REFRESH_SECONDS` (other processes' writes): then ``N``
and the query's words are counted again, and the other words' counts kept unless ``N`` has
moved by more than a sixteenth. Stale counts only reorder the matches: which rows match is
the statement's, never the cache's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from memini.postgres._search import COUNT_UP_TO, REFRESH_SECONDS

__all__ = ["COUNT_UP_TO", "Frequencies", "Lookup"]

_MAX_WORDS: Final = 65536
"""Cached words (over every namespace), or words parsed, past which both start again."""


@dataclass
class _Counts:
    rows: float | None  # None: counted by the search under way
    at: float
    written: int = 0
    words: dict[str, tuple[str, int]] = field(default_factory=dict)  # word -> (query, df)


@dataclass
class Lookup:
    """One search's word weights: the words its statement weighs (``slots``, in the query's
    order; none: the words are all known stopwords) and ``params``, its parameters (the
    cached counts, and what to count)."""

    slots: list[str]
    params: dict[str, Any]
    spaces: list[str]
    cached: dict[str, _Counts | None]
    fresh: dict[str, _Counts]
    parsed: dict[str, str]  # word -> its query text, of the words parsed


class Frequencies:
    """Each namespace's row count and its words' document frequencies, cached (see the
    module docs). Thread-safe; shared by a store's connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, _Counts] = {}
        self._parsed: dict[str, str] = {}  # word -> its query text ('' for a stopword)

    def forget(self, namespace: str | None = None) -> None:
        """Count ``namespace`` (None: every namespace) again at its next search."""
        with self._lock:
            if namespace is None:
                self._cache.clear()
            else:
                self._cache.pop(namespace, None)

    def wrote(self, namespace: str, rows: int) -> None:
        """This store wrote (inserted, changed or deleted) ``rows`` rows of ``namespace``."""
        with self._lock:
            hit = self._cache.get(namespace)
            if hit is not None and hit.rows is not None:
                hit.written += rows
                if hit.written > hit.rows // 16:
                    del self._cache[namespace]

    def lookup(
        self,
        namespaces: Sequence[str],
        words: Sequence[str],
        estimate: Callable[[str], float],
        total: float,
    ) -> Lookup:
        """The weights of the query ``words`` over ``namespaces`` (their order numbers them
        in the statement, from 0): the cached counts and what the statement counts;
        ``estimate`` is a namespace's row count by the planner statistics (used above
        `COUNT_UP_TO`), ``total`` the table's.

        A word's df in a namespace is counted through the GIN index (reading the word's
        rows) when the namespace is large or holds a quarter of the table or more, else
        through the namespace's index (reading the namespace's rows): a keyword search
        of new words in a namespace of 2,000 rows, the whole table, cost 1.9-2.1 ms of
        server CPU counting them that way (a statement of its own), 0.6 ms through the
        GIN index in its statement (benches/bench_postgres.py's rows and keyword queries,
        100 queries, old and new alternating)."""
        now = time.monotonic()
        spaces = list(dict.fromkeys(namespaces))
        with self._lock:
            cached = {ns: self._cache.get(ns) for ns in spaces}
            parsed = {w: self._parsed[w] for w in words if w in self._parsed}
        got = {ns: c for ns, c in cached.items() if c is not None and now - c.at < REFRESH_SECONDS}
        fresh = {ns: _Counts(None, now) for ns in spaces if ns not in got}
        got.update(fresh)
        # the words that weigh, once per stem, and those not parsed yet
        slots: list[str] = []
        stems: set[str] = set()
        for w in words:
            query = parsed.get(w)
            if query is None:
                slots.append(w)
            elif query and query not in stems:
                stems.add(query)
                slots.append(w)
        # a namespace's size: counted when cached, else the planner statistics' estimate
        rows = [got[ns].rows for ns in spaces]
        size = [estimate(ns) if n is None else n for ns, n in zip(spaces, rows, strict=True)]
        df = [_df(got[ns], w) for ns in spaces for w in slots]
        # arrays of NULLs go as NULL: an array costs the client ~3 us to send
        params: dict[str, Any] = {
            "tsq": " | ".join(words),
            "kw": slots,
            "knn": spaces,
            "knr": rows if any(n is not None for n in rows) else None,
            "kne": size if None in rows else None,
            "knl": [n > COUNT_UP_TO or 4 * n >= total for n in size] if None in df else None,
            "kpd": df if any(d is not None for d in df) else None,
        }
        return Lookup(slots, params, spaces, cached, fresh, parsed)

    def learn(self, lookup: Lookup, counted: Sequence[tuple[Any, ...]]) -> bool:
        """Cache the counts a statement made for ``lookup`` (`memini.postgres._search.
        counts`: leg ``w`` a word's df, ``n`` a namespace's rows). Returns whether the
        statement weighed the query as it is: False when its slots, not parsed before,
        are all stopwords (search again, as stopwords alone)."""
        spaces, fresh = lookup.spaces, lookup.fresh
        made = [r for r in counted if r[0] in ("w", "n")]
        if made:  # (a fresh namespace's rows come back whenever the statement weighs words)
            with self._lock:
                # both start again at once: a cached count of a word no longer parsed
                # (`lookup` slots it as new, the statement counts nothing for it) made
                # `learn` take it for a stopword, and the search ran without its weights
                if (
                    len(self._parsed) > _MAX_WORDS
                    or sum(len(c.words) for c in self._cache.values()) > _MAX_WORDS
                ):
                    self._parsed.clear()
                    self._cache.clear()
                for leg, i, word, query, n in made:
                    c = fresh.get(spaces[i]) or lookup.cached[spaces[i]]
                    if c is None:
                        continue
                    if leg == "n":
                        c.rows = float(n)
                    else:
                        c.words[word] = (query, int(n))
                        self._parsed[word] = lookup.parsed[word] = query
                for ns, c in fresh.items():
                    old = lookup.cached[ns]
                    if c.rows is None:  # not counted: the statement weighed no word
                        continue
                    # aged out: the other words' counts still hold while N has moved less
                    # than a sixteenth
                    if (
                        old is not None
                        and old.rows is not None
                        and self._cache.get(ns) is old
                        and abs(c.rows - old.rows) <= old.rows // 16
                    ):
                        c.words = {**old.words, **c.words}
                        c.written = old.written
                    self._cache[ns] = c
        return not lookup.slots or any(lookup.parsed.get(w) for w in lookup.slots)


def _df(counts: _Counts, word: str) -> int | None:
    hit = counts.words.get(word)
    return None if hit is None else hit[1]
