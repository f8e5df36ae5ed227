"""The search statements of a PostgreSQL store: one round trip a call, plans that keep the
indexes, and the choice between the HNSW graph and an exact scan.

Every search is one prepared statement (see `memini.postgres._pool` for the session: generic
plans, relaxed iterative scans), built per filter shape with ``k`` written into its text:

- **vector**: a graph walk with an exact scan behind it, or the exact scan alone (when
  `Sizes` finds it cheaper: a statement without the walk). The walk (the ``g`` CTE)
  orders by distance through the HNSW index with the whole filter wrapped in ``CASE WHEN
  ... THEN true ELSE false END``: no other index can serve that condition and the planner
  takes it as passing half the rows, so the generic plan is the HNSW scan whatever the
  filter (written plainly, a tag filter's generic plan sorts the GIN index's rows
  instead). The exact scan orders by ``distance + 0`` (no index gives that order) with the
  filter written plainly, so the planner reads the rows through the GIN (tags, metadata) or
  namespace index. Behind the walk, it runs when the walk found fewer than ``k`` rows (a
  filter passing few rows; in recall, also when ``graph`` is false), so a search returns
  exactly ``min(k, matching rows with a vector)``.
- **keyword**: full-text match through the GIN index on ``words``, ranked by the sum over
  the query's words of ``ts_rank`` (the word's weight in the row) times the word's inverse
  document frequency in the namespaces searched (`memini.postgres._frequencies`: cached
  counts passed as parameters, the missing ones counted in the statement, ``_WEIGHTS``,
  and returned after its answer, `counts`): a word in nearly every row there (a user's
  name in their own facts) weighs nearly nothing.
- **recall**: both legs of every source namespace and the candidates' timeline neighbours in
  one statement, returning only what the fusion needs (the candidates' standing columns and
  the vector leg's vectors) and the counts it made (the keyword weights', a namespace's
  rows for its coherence); a second statement reads the full rows of the final ``k``.

`Sizes` chooses between the walk and the exact scan from PostgreSQL's own planner
statistics (row count, namespace and tag frequencies), refreshed at most every
`REFRESH_SECONDS`: the exact scan when the rows it reads cost less than the walk the filter
needs, whose breadth (``hnsw.ef_search``) grows as the filter passes fewer rows so that the
walk's recall stays that of an unfiltered search.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from memini.postgres._filter import where
from memini.postgres._rows import COLUMNS
from memini.postgres._schema import HNSW_MAX_DIMS, OPERATORS

if TYPE_CHECKING:
    from memini._core import FilterSpec
    from memini.postgres._pool import Conn

__all__ = [
    "COUNT_UP_TO",
    "KEYWORD_RANK",
    "MAX_EF_SEARCH",
    "RECALL_RANK",
    "REFRESH_SECONDS",
    "STANDING",
    "TS_CONFIG",
    "Sizes",
    "counts",
    "keyword_sql",
    "recall_sql",
    "vector_sql",
]

MAX_EF_SEARCH: Final = 1000
"""pgvector's largest ``hnsw.ef_search``."""
REFRESH_SECONDS: Final = 60.0
"""The age at which `Sizes` reads the planner statistics again."""
# The cost of a graph walk per unit of ef_search, in rows an exact scan reads for the same
# time (measured with benches/bench_postgres.py: an unfiltered walk at ef_search 64 costs
# what an exact scan of ~800 rows does)
_WALK_COST: Final = 12.0
TS_CONFIG: Final = "english"
"""The text search configuration of the keyword index and its queries."""
# a query of stopwords alone (empty in the english configuration) searches its words as
# they are, unindexed (as the embedded store keeps them when nothing else is left)
_PLAIN_DOC: Final = (
    "to_tsvector('simple', content || ' ' || summary || ' ' || array_to_string(tags, ' '))"
)

STANDING: Final = (
    "id",
    "tier",
    "importance",
    "confidence",
    "updated_at",
    "last_accessed_at",
    "access_count",
    "fingerprint",
)
"""The columns recall's fusion ranks a candidate by (`memini._core.fuse`), in its order."""
# where a candidate sits in its namespace's timeline (for its neighbours)
_PLACE: Final = ("namespace", "created_at", "seq")
_CANDIDATE: Final = ", ".join((*STANDING, *_PLACE))


def _opaque(cond: str) -> str:
    """``cond`` in a form no index serves and the planner estimates at one half."""
    return f"CASE WHEN {cond} THEN true ELSE false END"


def _exact(op: str, cols: Sequence[str], cond: str, k: int) -> str:
    """The exact scan: the SELECT of the ``cols`` of the ``k`` rows under ``cond`` nearest
    ``%(q)s``, in no order.

    It orders by ``distance + 0`` (no index gives that order) with ``cond`` written plainly,
    so the planner reads the rows through the GIN (tags, metadata) or namespace index; it
    sorts the matching rows' positions (``ctid``) alone and reads the ``cols`` of the best
    ``k`` after: a sort carrying whole rows cost twice as much at a 10% filter of 20,000
    rows."""
    return (
        f"SELECT {', '.join(f'm.{c}' for c in cols)} FROM "
        f"(SELECT ctid AS t FROM memories WHERE {cond} "
        f"ORDER BY (embedding {op} %(q)s) + 0, id LIMIT {k}) x "
        "JOIN memories m ON m.ctid = x.t"
    )


def _vector_ctes(
    name: str, op: str, cols: Sequence[str], cond: str, k: int, graph: str, graphs: bool
) -> tuple[str, str]:
    """The graph walk (``{name}g``) and exact scan (``{name}e``, `_exact`) of one vector
    search, as CTEs, and the SELECT of their rows with a leading ``exact`` flag.

    Args:
        name: A prefix naming the CTEs.
        op: The pgvector distance operator.
        cols: The columns to return.
        cond: The condition over ``memories`` (namespace included).
        k: How many rows.
        graph: The SQL of the boolean choosing the walk (a parameter, or ``true``: the
            exact scan runs only when the walk comes up short).
        graphs: Whether the store has an HNSW index at all.
    """
    gate = f"(NOT {graph} OR (SELECT count(*) FROM {name}g) < {k}) AND " if graphs else ""
    exact = f"{name}e AS MATERIALIZED ({_exact(op, cols, gate + cond, k)})"
    if not graphs:
        return exact, f"SELECT true, * FROM {name}e"
    walk = (
        f"{name}g AS MATERIALIZED (SELECT {', '.join(cols)} FROM memories WHERE {graph} AND "
        f"{_opaque(cond)} ORDER BY embedding {op} %(q)s LIMIT {k})"
    )
    return f"{walk}, {exact}", f"SELECT false, * FROM {name}g UNION ALL SELECT true, * FROM {name}e"


@functools.lru_cache(maxsize=256)
def vector_sql(metric: str, dims: int, cond: str, k: int, graph: bool) -> str:
    """The vector search of one namespace (``%(ns)s``, ``%(q)s`` and the filter's
    parameters): rows of ``SELECT`` plus the vector, each led by its ``exact`` flag; the
    exact rows are the answer when there are any.

    A search that walks the graph (``graph``, `Sizes.plan`) is the walk with the exact
    scan behind it, for when the walk comes up short; one that does not is the exact scan
    alone, a statement of its own. Behind the walk's CTE, the exact scan's gate put a
    ``Result`` node between the scan and the sort, a step for every matching row: alone,
    a search under a 10% tag filter of 20,000 rows ran 1.11-1.21x as fast, under a 1%
    filter 1.09x (benches/bench_postgres.py's rows and queries, old and new alternating)."""
    op, cols = OPERATORS[metric], (*COLUMNS, "embedding")
    cond = f"namespace = %(ns)s AND embedding IS NOT NULL AND {cond}"
    if not graph or dims > HNSW_MAX_DIMS:
        return f"SELECT true, * FROM ({_exact(op, cols, cond, k)}) e"
    ctes, rows = _vector_ctes("", op, cols, cond, k, "true", True)
    return f"WITH {ctes} {rows}"


COUNT_UP_TO: Final = 4096
"""A namespace's rows are counted up to this many for its words' weights; more, and the
planner statistics' estimate stands in (`memini.postgres._frequencies`)."""

# The keyword leg's weights (`memini.postgres._frequencies.Lookup.params`): the words it
# weighs, ``kq`` (slot ``j`` from 1, the word, its query and the query's text: empty for a
# stopword); each namespace's rows, ``kn`` (``i`` from 0): the cached count, else counted up
# to COUNT_UP_TO (above, the larger of that and the planner's estimate); each (namespace,
# slot) pair's df, ``kc``: the cached one (``kpd``, namespace by namespace), else counted
# through the GIN index in a ``large`` namespace, else through the namespace's index (each
# condition the other index could serve made opaque to the planner); each slot's idf,
# ``ki``: BM25's over the namespaces' sums, none for a stopword or a stem an earlier slot
# has. An array of NULLs may be passed as NULL (shorter arrays pad with NULLs).
_WEIGHTS: Final = (
    "kq AS MATERIALIZED (SELECT u.j, u.w, q, q::text AS qt FROM unnest(%(kw)s::text[]) "
    f"WITH ORDINALITY u(w, j), to_tsquery('{TS_CONFIG}', u.w) q), "
    "kn AS MATERIALIZED (SELECT n.i - 1 AS i, n.ns, n.large, n.rows IS NULL AS counted, "
    f"coalesce(n.rows, (SELECT CASE WHEN c < {COUNT_UP_TO} THEN c ELSE greatest(c, n.est) END "
    "FROM (SELECT count(*)::float8 AS c FROM (SELECT FROM memories WHERE namespace = n.ns "
    f"LIMIT {COUNT_UP_TO}) x) y)) AS rows "
    "FROM unnest(%(knn)s::text[], %(knr)s::float8[], %(kne)s::float8[], %(knl)s::bool[]) "
    "WITH ORDINALITY n(ns, rows, est, large, i)), "
    "kc AS MATERIALIZED (SELECT n.i, kq.j, kq.w, kq.qt, p.df IS NULL AS counted, "
    "CASE WHEN p.df IS NOT NULL THEN p.df WHEN numnode(kq.q) = 0 THEN 0 WHEN n.large "
    "THEN (SELECT count(*) FROM memories WHERE words @@ kq.q "
    "AND CASE WHEN namespace = n.ns THEN true ELSE false END) "
    "ELSE (SELECT count(*) FROM memories WHERE namespace = n.ns "
    "AND CASE WHEN words @@ kq.q THEN true ELSE false END) END AS df "
    "FROM kn n CROSS JOIN kq, "
    "LATERAL (SELECT (%(kpd)s::int8[])[n.i * cardinality(%(kw)s::text[]) + kq.j] AS df) p), "
    "ki AS MATERIALIZED (SELECT kq.j, kq.q, CASE WHEN kq.qt = '' OR EXISTS (SELECT FROM kq e "
    "WHERE e.qt = kq.qt AND e.j < kq.j) THEN 0::float8 "
    "ELSE ln(1 + (greatest(t.n, d.df) - d.df + 0.5) / (d.df + 0.5)) END AS idf "
    "FROM kq, (SELECT sum(rows) AS n FROM kn) t, "
    "LATERAL (SELECT sum(df)::float8 AS df FROM kc WHERE kc.j = kq.j) d)"
)


def _counted(width: int, rank_at: int) -> str:
    """The counts the `_WEIGHTS` CTEs made (not passed in), as ``UNION ALL`` rows of a
    statement of ``width`` columns: leg ``w`` (a word's df) or ``n`` (a namespace's rows),
    the namespace's index, the word, its query text, and the count in the column at
    ``rank_at`` (`counts`)."""

    def row(leg: str, word: str, qt: str, n: str) -> str:
        cols = [f"'{leg}'", "i", word, qt, *["NULL"] * (width - 4)]
        cols[rank_at] = f"{n}::float8"
        return ", ".join(cols)

    return (
        f" UNION ALL SELECT {row('w', 'w', 'qt', 'df')} FROM kc WHERE counted"
        f" UNION ALL SELECT {row('n', 'NULL', 'NULL', 'rows')} FROM kn WHERE counted"
    )


def counts(rows: Sequence[tuple[Any, ...]], rank_at: int) -> list[tuple[Any, ...]]:
    """The count rows of a keyword or recall statement (legs other than its answer's:
    ``w``/``n`` of `_counted`, ``c`` of recall's coherence counts) as (leg, index, word,
    query text, count)."""
    return [(r[0], r[1], r[2], r[3], r[rank_at]) for r in rows if r[0] in _COUNT_LEGS]


_COUNT_LEGS: Final = frozenset("wnc")
KEYWORD_RANK: Final = 2 + len(COLUMNS)
"""The column of a keyword statement's rank: its rows are the leg (``k``), 0, the
`COLUMNS` and the rank, then the `counts`."""


def _keyword_ranked(cond: str, k: int, terms: int, cols: Sequence[str]) -> str:
    """The keyword leg over ``cond`` (namespace included): ``cols`` and the rank of the best
    ``k`` rows, each of the ``terms`` slots' ``ts_rank`` times its weight (`_WEIGHTS`).

    The query is parsed once, in ``FROM``, and each slot's query and weight once, as the
    plan's parameters (scalar subqueries of ``ki``); the rows come from the GIN index on
    ``words`` (``cond`` is opaque, see `_opaque`: written plainly, the generic plan of a
    large namespace read the whole namespace through its btree index instead). Each row's
    ``words`` is read once, into ``d`` (a copy, kept from the planner by ``OFFSET 0``):
    long rows keep it out of line, and each word's ``ts_rank`` read it from there again
    (6% of a two-word statement's time, 20% at seven words). The ``cols`` are read for the
    best ``k`` alone, by their ``ctid``. A query of stopwords alone (``terms`` 0) searches
    its words as they are, unindexed, ranked by ``ts_rank`` alone, as the embedded store
    keeps them when nothing else is left."""
    if terms == 0:
        ranked = (
            f"SELECT ctid AS t, ts_rank({_PLAIN_DOC}, q)::float8 AS rank FROM memories, "
            f"to_tsquery('simple', %(tsq)s) q WHERE {_PLAIN_DOC} @@ q AND {cond} "
            f"ORDER BY rank DESC, id LIMIT {k}"
        )
    else:
        rank = " + ".join(
            f"ts_rank(d, (SELECT q FROM ki WHERE j = {j})) * (SELECT idf FROM ki WHERE j = {j})"
            for j in range(1, terms + 1)
        )
        ranked = (
            f"SELECT t, ({rank})::float8 AS rank FROM (SELECT ctid AS t, id AS o, "
            f"setweight(words, 'D') AS d FROM memories, to_tsquery('{TS_CONFIG}', %(tsq)s) q "
            f"WHERE words @@ q AND {_opaque(cond)} OFFSET 0) x ORDER BY rank DESC, o LIMIT {k}"
        )
    return (
        f"SELECT {', '.join(f'm.{c}' for c in cols)}, x.rank FROM ({ranked}) x "
        "JOIN memories m ON m.ctid = x.t"
    )


@functools.lru_cache(maxsize=256)
def keyword_sql(cond: str, k: int, terms: int) -> str:
    """The keyword search of one namespace (``%(ns)s``, the `memini.postgres._frequencies.
    Lookup.params` of ``terms`` slots, the filter's parameters): rows of ``k``, 0,
    ``SELECT`` and the rank, in no order (best first is by rank descending, then id), then
    the `counts` it made."""
    ranked = _keyword_ranked(f"namespace = %(ns)s AND {cond}", k, terms, COLUMNS)
    sql = f"SELECT 'k', 0, {ranked.removeprefix('SELECT ')}"
    if terms == 0:
        return sql
    return f"WITH {_WEIGHTS} {sql}{_counted(KEYWORD_RANK + 1, KEYWORD_RANK)}"


RECALL_RANK: Final = 3 + len(STANDING)
"""The column of a recall statement's keyword rank (`recall_sql`)."""


def recall_sql(
    metric: str,
    dims: int,
    spec: FilterSpec,
    sources: Sequence[tuple[str, list[str] | None]],
    graph: Sequence[bool] | None,
    keyword: dict[str, Any] | None,
    terms: int,
    pool: int,
    context: bool,
    count: Sequence[int] = (),
) -> tuple[str, dict[str, Any]]:
    """Recall's first statement: every leg of every source and the timeline neighbours.

    Args:
        metric: The store's metric.
        dims: The store's dims.
        spec: The filter (the same for every source).
        sources: (namespace, the tiers it may contribute or None for all), each namespace once.
        graph: Per source, whether its vector leg walks the graph; None: no vector leg.
        keyword: The keyword leg's `memini.postgres._frequencies.Lookup.params`; None: no
            keyword leg.
        terms: The keyword leg's slots (0: stopwords alone).
        pool: Candidates per leg and source.
        context: Whether to add each candidate's timeline neighbours.
        count: The sources whose rows it counts (for their coherence,
            `memini.postgres._coherence`).

    Returns:
        The SQL and its parameters (``%(q)s``, the vector, is left to the caller). Its rows:
        ``leg`` ('v' graph, 'e' exact, 'k' keyword), source index, the `STANDING` columns,
        the vector ('v'/'e' rows), the keyword rank ('k' rows, `RECALL_RANK`), the row's
        ``seq``, then with ``context`` the ``seq`` of the previous and next rows in the
        namespace's timeline when they are candidates too (else NULL); then the `counts`
        (the keyword leg's, and leg 'c': a ``count`` source's rows). The SQL is built once
        per shape (`_recall_text`) and is the same string object each time.
    """
    params: dict[str, Any] = {}
    cond = where(spec, params)
    for i, (ns, tiers) in enumerate(sources):
        params[f"ns{i}"] = ns
        if tiers is not None:
            params[f"tiers{i}"] = tiers
        if graph is not None:
            params[f"graph{i}"] = graph[i]
    if keyword is not None:
        params.update(keyword)
    sql = _recall_text(
        metric,
        dims,
        cond,
        tuple(tiers is not None for _, tiers in sources),
        graph is not None,
        keyword is not None,
        terms,
        pool,
        context,
        tuple(count),
    )
    return sql, params


@functools.lru_cache(maxsize=256)
def _recall_text(
    metric: str,
    dims: int,
    cond: str,
    tiered: tuple[bool, ...],
    vector: bool,
    keyword: bool,
    terms: int,
    pool: int,
    context: bool,
    count: tuple[int, ...],
) -> str:
    """The SQL of `recall_sql` for its shape: ``cond`` the filter's condition, ``tiered``
    per source whether it binds its tiers, ``vector``/``keyword`` whether the leg runs.
    Built per call, it cost 0.01 ms of client CPU (benches/bench_postgres.py's rows)."""
    ctes: list[str] = [_WEIGHTS] if keyword and terms > 0 else []
    legs: list[str] = []
    for i, has_tiers in enumerate(tiered):
        scond = f"namespace = %(ns{i})s AND {cond}"
        if has_tiers:
            scond += f" AND tier = ANY(%(tiers{i})s::text[])"
        if vector:
            c, rows = _vector_ctes(
                f"v{i}",
                OPERATORS[metric],
                (*STANDING, *_PLACE, "embedding"),
                f"embedding IS NOT NULL AND {scond}",
                pool,
                f"%(graph{i})s",
                dims <= HNSW_MAX_DIMS,
            )
            ctes.append(c)
            legs.append(
                f"SELECT CASE WHEN x THEN 'e' ELSE 'v' END AS leg, {i} AS src, {_CANDIDATE}, "
                f"embedding, NULL::float8 AS rank "
                f"FROM ({rows}) v{i}(x, {_CANDIDATE}, embedding)"
            )
        if keyword:
            ranked = _keyword_ranked(scond, pool, terms, (*STANDING, *_PLACE))
            ctes.append(f"k{i} AS MATERIALIZED ({ranked})")
            legs.append(
                f"SELECT 'k' AS leg, {i} AS src, {_CANDIDATE}, NULL::vector AS embedding, "
                f"rank FROM k{i}"
            )
    out = ", ".join(f"l.{c}" for c in STANDING)
    width = RECALL_RANK + 2 + 2 * context
    tail = _counted(width, RECALL_RANK) if keyword and terms > 0 else ""
    for i in count:
        cols = ["'c'", str(i), *["NULL"] * (width - 2)]
        cols[RECALL_RANK] = f"(SELECT count(*) FROM memories WHERE namespace = %(ns{i})s)::float8"
        tail += f" UNION ALL SELECT {', '.join(cols)}"
    sql = (
        f"WITH {', '.join(ctes)}, legs AS ({' UNION ALL '.join(legs)}) "
        f"SELECT l.leg, l.src, {out}, l.embedding, l.rank, l.seq"
    )
    if not context:
        return f"{sql} FROM legs l{tail}"
    # the fusion uses a neighbour only when it is a candidate too: two candidates next to
    # each other in their namespace's timeline (created_at, then seq) are neighbours when no
    # row lies between them, one probe of the timeline index per pair (where looking up
    # each candidate's two neighbours took two)
    return (
        f"WITH {', '.join(ctes)}, legs AS ({' UNION ALL '.join(legs)}), "
        "places AS (SELECT DISTINCT namespace, created_at, seq FROM legs), "
        "pairs AS (SELECT namespace, created_at, seq, "
        "lag(created_at) OVER w AS before_at, lag(seq) OVER w AS before FROM places "
        "WINDOW w AS (PARTITION BY namespace ORDER BY created_at, seq)), "
        "near AS (SELECT before AS prev, seq AS next FROM pairs p WHERE before IS NOT NULL "
        "AND NOT EXISTS (SELECT FROM memories m WHERE m.namespace = p.namespace "
        "AND (m.created_at, m.seq) > (p.before_at, p.before) "
        "AND (m.created_at, m.seq) < (p.created_at, p.seq))) "
        f"SELECT l.leg, l.src, {out}, l.embedding, l.rank, l.seq, a.prev, b.next "
        f"FROM legs l LEFT JOIN near a ON a.next = l.seq LEFT JOIN near b ON b.prev = l.seq{tail}"
    )


# ------------------------------------------------------------------------------ plan choice

_STATS_SQL: Final = """
SELECT c.reltuples::float8,
       (SELECT count(*) FROM (SELECT FROM memories LIMIT 100000) s) AS counted,
       ns.most_common_vals::text::text[], ns.most_common_freqs, ns.n_distinct, ns.null_frac,
       tg.most_common_elems::text::text[], tg.most_common_elem_freqs,
       tr.most_common_vals::text::text[], tr.most_common_freqs
FROM pg_class c
LEFT JOIN pg_stats ns ON ns.schemaname = current_schema() AND ns.tablename = 'memories'
     AND ns.attname = 'namespace'
LEFT JOIN pg_stats tg ON tg.schemaname = current_schema() AND tg.tablename = 'memories'
     AND tg.attname = 'tags'
LEFT JOIN pg_stats tr ON tr.schemaname = current_schema() AND tr.tablename = 'memories'
     AND tr.attname = 'tier'
WHERE c.oid = 'memories'::regclass
"""
_STATS_COUNTED: Final = _STATS_SQL.replace(
    "(SELECT count(*) FROM (SELECT FROM memories LIMIT 100000) s)", "NULL::bigint"
)
# PostgreSQL's own guess for an array element its statistics do not list (array_selfuncs.c)
_DEFAULT_CONTAIN_SEL: Final = 0.005


@dataclass
class _Snapshot:
    at: float = -math.inf
    rows: float = 0.0
    ns: dict[str, float] = field(default_factory=dict)  # share of the rows
    ns_other: float = 1.0  # share of a namespace the statistics do not list
    tags: dict[str, float] | None = None  # None: no statistics
    tag_other: float = 1.0
    tiers: dict[str, float] | None = None


class Sizes:
    """Row-count estimates from PostgreSQL's planner statistics, to choose each vector
    search's plan (see the module docs). Thread-safe; shared by a store's connections."""

    def __init__(self) -> None:
        self._snap = _Snapshot()
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Read the statistics again at the next search (after a bulk load)."""
        with self._lock:
            self._snap = _Snapshot()

    def _snapshot(self, conn: Conn) -> _Snapshot:
        snap = self._snap
        if time.monotonic() - snap.at < REFRESH_SECONDS:
            return snap
        fresh = _Snapshot(at=time.monotonic())
        r = conn.execute(_STATS_COUNTED).fetchone()
        if r is not None and r[0] < 0:  # never analyzed: count (up to a bound) instead
            r = conn.execute(_STATS_SQL).fetchone()
        if r is None:
            return snap
        reltuples, counted, ns_vals, ns_freqs, ns_distinct, ns_null, tg_vals, tg_freqs = r[:8]
        tr_vals, tr_freqs = r[8:]
        fresh.rows = float(counted) if reltuples < 0 else float(reltuples)
        if ns_distinct is not None:
            if ns_vals is not None and ns_freqs is not None:
                fresh.ns = dict(zip(ns_vals, ns_freqs, strict=True))
            distinct = ns_distinct if ns_distinct >= 0 else -ns_distinct * fresh.rows
            rest = max(0.0, 1.0 - sum(fresh.ns.values()) - (ns_null or 0.0))
            fresh.ns_other = rest / max(1.0, distinct - len(fresh.ns))
        if reltuples >= 0:  # analyzed: a tag without statistics is on no row
            fresh.tags, fresh.tag_other = {}, 0.0
            if tg_vals is not None and tg_freqs is not None:
                fresh.tags = dict(zip(tg_vals, tg_freqs[: len(tg_vals)], strict=True))
                fresh.tag_other = min(_DEFAULT_CONTAIN_SEL, tg_freqs[len(tg_vals)] / 2)
            if tr_vals is not None and tr_freqs is not None:
                fresh.tiers = dict(zip(tr_vals, tr_freqs, strict=True))
        with self._lock:
            self._snap = fresh
        return fresh

    def rows(self, conn: Conn, namespace: str) -> float:
        """The estimated row count of ``namespace``."""
        snap = self._snapshot(conn)
        return snap.ns.get(namespace, snap.ns_other) * snap.rows

    def total(self, conn: Conn) -> float:
        """The estimated row count of the table."""
        return self._snapshot(conn).rows

    def plan(
        self,
        conn: Conn,
        ns: str,
        spec: FilterSpec,
        tiers: list[str] | None,
        k: int,
        breadth: int,
    ) -> tuple[bool, int]:
        """Whether a vector search of ``ns`` under ``spec`` (and a recall source's
        ``tiers``) walks the graph, and the ``hnsw.ef_search`` its walk needs.

        The exact scan reads the namespace's rows, or the rows of its rarest tag when that
        is fewer; the walk needs a breadth of ``max(breadth, k)`` divided by the share of
        the index's rows the filter passes (at most `MAX_EF_SEARCH`), at `_WALK_COST` rows
        per unit. The cheaper wins; the exact scan on a tie.
        """
        snap = self._snapshot(conn)
        base = max(breadth, k)
        share = snap.ns.get(ns, snap.ns_other)
        exact_rows = share * snap.rows
        if spec["tags"] and snap.tags is not None:
            rarest = min(snap.tags.get(t, snap.tag_other) for t in spec["tags"])
            exact_rows = min(exact_rows, rarest * snap.rows)
            share *= rarest
        allowed = [t for t in (spec["tiers"] or tiers or []) if tiers is None or t in tiers]
        if allowed and snap.tiers is not None:
            share *= min(1.0, sum(snap.tiers.get(t, 0.0) for t in set(allowed)))
        ef = min(MAX_EF_SEARCH, max(base, math.ceil(base / max(share, 1e-9))))
        return exact_rows > _WALK_COST * ef, ef
