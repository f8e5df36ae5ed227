"""A namespace's coherence on PostgreSQL: the embedded store's measure, read with SQL.

Recall weighs a candidate's timeline neighbours by its namespace's coherence (how much more
time-adjacent rows resemble each other than rows far apart; see the README's "Recall
quality"). The rule is the core's (`memini._core.coherence_sample` picks the timeline
positions, `memini._core.coherence` measures their vectors), so both backends measure the
same number for the same rows; here one statement reads the sampled rows' vectors by their
place in the timeline (``created_at``, then ``seq``: the neighbours' order).

Cached per namespace as the embedded store caches it, and measured again once the row count
has moved by more than a sixteenth. Counting the rows is an index-only scan of the namespace,
so a namespace of `COUNT_ALWAYS_BELOW` rows or more is counted at most every
`memini.postgres._search.REFRESH_SECONDS` (other processes may write it meanwhile), a smaller
one on every recall that uses neighbours: by recall's own statement once the namespace was
measured (`cached`, then `counted`; a recall whose neighbours that count turns on or off runs
again), else before it (`of`).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Final

from memini import _core
from memini.postgres._search import REFRESH_SECONDS

if TYPE_CHECKING:
    from memini.postgres._pool import Conn

__all__ = ["COUNT_ALWAYS_BELOW", "Coherence"]

COUNT_ALWAYS_BELOW: Final = 4096
"""Namespaces smaller than this are counted on every recall that uses neighbours."""

_COUNT: Final = "SELECT count(*) FROM memories WHERE namespace = %(ns)s"
_SAMPLE: Final = (
    "SELECT pos, embedding FROM (SELECT row_number() OVER "
    "(ORDER BY created_at, seq) - 1 AS pos, embedding FROM memories "
    "WHERE namespace = %(ns)s) t WHERE pos = ANY(%(pos)s)"
)


class Coherence:
    """Each namespace's coherence, cached. Thread-safe; shared by a store's connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # namespace -> (row count measured at, coherence, monotonic time counted)
        self._cache: dict[str, tuple[int, float, float]] = {}

    def forget(self) -> None:
        """Measure every namespace again at its next recall (after a bulk load)."""
        with self._lock:
            self._cache.clear()

    def cached(self, namespace: str) -> tuple[float, bool] | None:
        """``namespace``'s cached coherence and whether its rows are due a count (then
        `counted` with it); None when never measured (`of`)."""
        with self._lock:
            hit = self._cache.get(namespace)
        if hit is None:
            return None
        fresh = hit[0] >= COUNT_ALWAYS_BELOW and time.monotonic() - hit[2] < REFRESH_SECONDS
        return hit[1], not fresh

    def of(self, conn: Conn, namespace: str) -> float:
        """``namespace``'s coherence (0 below 8 rows), measured again when stale."""
        hit = self.cached(namespace)
        if hit is not None and not hit[1]:
            return hit[0]
        row = conn.execute(_COUNT, {"ns": namespace}, prepare=True).fetchone()
        return self.counted(conn, namespace, int(row[0]) if row is not None else 0)

    def counted(self, conn: Conn, namespace: str, n: int) -> float:
        """``namespace``'s coherence now that its rows were counted (``n``): the cached one
        while the count has moved by at most a sixteenth, else measured again."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(namespace)
        if hit is not None and abs(n - hit[0]) <= hit[0] // 16:
            c = hit[1]
            n = hit[0]
        else:
            c = self._measure(conn, namespace, n)
        with self._lock:
            self._cache[namespace] = (n, c, now)
        return c

    @staticmethod
    def _measure(conn: Conn, namespace: str, n: int) -> float:
        positions = _core.coherence_sample(n)
        if not positions:
            return 0.0
        rows = conn.execute(
            _SAMPLE, {"ns": namespace, "pos": sorted(set(positions))}, binary=True, prepare=True
        ).fetchall()
        at = {int(p): v for p, v in rows}
        # a row deleted meanwhile shifts the timeline: measured on what is there
        return _core.coherence(n, [at.get(p) for p in positions])
