"""The keyword leg's word weights on PostgreSQL: each word's inverse document frequency in
the namespaces searched, from counts cached per namespace.

A keyword search ranks a row by the sum over the query's words of ``ts_rank`` (the word's
weight in the row) times the word's idf (see `memini.postgres._search`), BM25's
``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the rows of the namespaces searched: a word in
nearly every row there (a user's name in their own facts) weighs nearly nothing. A row
belongs to one namespace, so the counts of several namespaces add up: ``N`` and each
word's ``df`` are cached per namespace, the words as the ``english`` configuration parses
them (a stopword has no lexeme and no weight; two words with one stem count once).

Counting in every search cost half of its speed (a bitmap heap scan per word), so a search
counts only what is not cached, in one statement before its own: ``N`` up to `COUNT_UP_TO`
rows (above, the planner statistics' estimate, `memini.postgres._search.Sizes.rows`) and
each missing word's ``df`` (through the GIN index; in a small namespace, its own index). A
namespace's counts are dropped once this
store has written more than a sixteenth of its rows since they were counted (`wrote`; any
write to a namespace of fewer than 16 rows) and after `memini.postgres._search.
REFRESH_SECONDS` (other processes' writes): then ``N`` and the query's words are counted
again, and the other words' counts kept unless ``N`` has moved by more than a sixteenth.
Stale counts only reorder the matches: which rows match is the statement's, never the
cache's.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from memini.postgres._search import REFRESH_SECONDS, TS_CONFIG

if TYPE_CHECKING:
    from memini.postgres._pool import Conn

__all__ = ["COUNT_UP_TO", "Frequencies"]

COUNT_UP_TO: Final = 4096
"""A namespace's rows are counted up to this many; more, and the planner statistics'
estimate stands in."""
_MAX_WORDS: Final = 65536
"""Cached words (over every namespace) past which the cache starts again."""

# the rows of each namespace of %(n)s (up to COUNT_UP_TO), then for each (namespace, word,
# large) of %(pn)s, %(pw)s, %(pl)s the word's query text (empty: a stopword) and its df
# there: through the GIN index in a large namespace, else through the namespace's index
# (each condition the other index could serve made opaque to the planner)
_COUNT: Final = (
    "SELECT n.ns, NULL::text, NULL::text, (SELECT count(*) FROM (SELECT FROM memories "
    f"WHERE namespace = n.ns LIMIT {COUNT_UP_TO}) x) FROM unnest(%(n)s::text[]) n(ns) "
    "UNION ALL SELECT p.ns, p.w, q::text, CASE WHEN numnode(q) = 0 THEN 0 WHEN p.large "
    "THEN (SELECT count(*) FROM memories WHERE words @@ q "
    "AND CASE WHEN namespace = p.ns THEN true ELSE false END) "
    "ELSE (SELECT count(*) FROM memories WHERE namespace = p.ns "
    "AND CASE WHEN words @@ q THEN true ELSE false END) END "
    "FROM unnest(%(pn)s::text[], %(pw)s::text[], %(pl)s::bool[]) p(ns, w, large), "
    f"to_tsquery('{TS_CONFIG}', p.w) q"
)


@dataclass
class _Counts:
    rows: float
    at: float
    written: int = 0
    words: dict[str, tuple[str, int]] = field(default_factory=dict)  # word -> (query, df)


class Frequencies:
    """Each namespace's row count and its words' document frequencies, cached (see the
    module docs). Thread-safe; shared by a store's connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, _Counts] = {}

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
            if hit is not None:
                hit.written += rows
                if hit.written > hit.rows // 16:
                    del self._cache[namespace]

    def weights(
        self,
        conn: Conn,
        namespaces: Sequence[str],
        words: Sequence[str],
        estimate: Callable[[str], float],
    ) -> list[tuple[str, float]]:
        """The query ``words`` that weigh (one per stem, no stopword) and their idf over
        ``namespaces``, counting what is not cached; ``estimate`` is a namespace's row count
        by the planner statistics (used above `COUNT_UP_TO`)."""
        now = time.monotonic()
        spaces = list(dict.fromkeys(namespaces))
        with self._lock:
            cached = {ns: self._cache.get(ns) for ns in spaces}
        got = {ns: c for ns, c in cached.items() if c is not None and now - c.at < REFRESH_SECONDS}
        fresh = {ns: _Counts(0.0, now) for ns in spaces if ns not in got}
        got.update(fresh)
        pairs = [(ns, w) for ns in spaces for w in words if w not in got[ns].words]
        if pairs:
            # a namespace's size: counted when cached, else the planner statistics' estimate
            large = {
                ns: (estimate(ns) if ns in fresh else got[ns].rows) > COUNT_UP_TO for ns in spaces
            }
            found = conn.execute(
                _COUNT,
                {
                    "n": list(fresh),
                    "pn": [ns for ns, _ in pairs],
                    "pw": [w for _, w in pairs],
                    "pl": [large[ns] for ns, _ in pairs],
                },
                prepare=True,
            ).fetchall()
            for ns, word, query, n in found:
                if word is None:
                    rows = float(n)
                    got[ns].rows = rows if rows < COUNT_UP_TO else max(rows, estimate(ns))
                else:
                    got[ns].words[word] = (query, int(n))
            with self._lock:
                if sum(len(c.words) for c in self._cache.values()) > _MAX_WORDS:
                    self._cache.clear()
                for ns, c in fresh.items():
                    old = cached[ns]
                    # aged out: the other words' counts still hold while N has moved less
                    # than a sixteenth
                    if (
                        old is not None
                        and self._cache.get(ns) is old
                        and abs(c.rows - old.rows) <= old.rows // 16
                    ):
                        c.words = {**old.words, **c.words}
                        c.written = old.written
                    self._cache[ns] = c
        total = sum(c.rows for c in got.values())
        out: dict[str, tuple[str, float]] = {}
        for w in words:
            query = got[spaces[0]].words[w][0]
            if query and query not in out:
                df = sum(c.words[w][1] for c in got.values())
                out[query] = (w, math.log(1 + (max(total, df) - df + 0.5) / (df + 0.5)))
        return list(out.values())
