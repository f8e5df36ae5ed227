"""`PgEngine` and `PgMeta`: the PostgreSQL halves behind a `memini.Store`.

`memini.Store` talks to two objects: an engine (memories, vectors, keywords: the Rust core's
`memini._core.Engine` for a directory) and a meta database (links, keys, events:
`memini._sqlite.MetaDB`). For a ``postgresql://`` URL, `open_backend` returns these two
classes instead, with the same methods and the same arguments (validated rows, filter specs
and microseconds from `memini._convert` / `memini._values`), so every argument check, metrics
report, embedder call and the recall arguments stay in `Store`, in one place.

Both share one connection pool (`memini.postgres._pool`). A method that is one statement
runs as one, outside any transaction (one round trip); one that needs several runs them in
one transaction (READ COMMITTED). A write returns after its commit, which PostgreSQL makes
durable with ``synchronous_commit`` on, its default. Any number of processes may use one
database at once: ids are unique by primary key (an upsert is one ``INSERT .. ON CONFLICT``
whose update applies only within the row's namespace, else `ConflictError` and the
transaction rolls back), counters move by row locks. Large batches load through ``COPY``
(`memini.postgres._bulk`).

Searches are one prepared statement each (recall: two), see `memini.postgres._search`: a
vector search walks the HNSW index with the filter applied during the walk (pgvector's
iterative scans) or scans the matching rows exactly, whichever the planner statistics say
is cheaper, and falls back to the exact scan in the same statement when the walk finds
fewer than ``k`` rows, so it returns exactly ``min(k, matching rows with a vector)``. Scores
are recomputed in f64 from the stored float32 vectors, as in the embedded store. Keyword
search: PostgreSQL full-text search (``english`` configuration, ``ts_rank`` times each
word's idf in the namespaces searched), see `PgEngine.keyword_search` for how it differs
from the embedded BM25.
"""

from __future__ import annotations

import builtins
import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import numpy as np
import numpy.typing as npt
import psycopg

from memini import _core
from memini import events as ev
from memini._values import (
    check_int,
    check_key_hash,
    check_text,
    json_to_metadata,
    metadata_to_json,
    now_micros,
    to_micros,
)
from memini.errors import NotFoundError, StoreClosedError
from memini.limits import check_limit, check_namespace
from memini.postgres import _meta
from memini.postgres._bulk import UPSERT, deferred_indexes, recover_deferred, upsert
from memini.postgres._coherence import Coherence
from memini.postgres._filter import LIVE_AT, order_by, where
from memini.postgres._frequencies import Frequencies, Lookup
from memini.postgres._pool import (
    DEFAULT_EF_SEARCH,
    Conn,
    Pool,
    numbered,
    stack_vectors,
    translate,
    use_ef_search,
)
from memini.postgres._rows import (
    SELECT,
    decode_text,
    decoded,
    query_words,
    to_memory,
    write_values,
)
from memini.postgres._schema import HNSW_MAX_DIMS, migrate
from memini.postgres._search import (
    KEYWORD_RANK,
    RECALL_RANK,
    STANDING,
    Sizes,
    counts,
    keyword_sql,
    recall_sql,
    vector_sql,
)
from memini.store import shown_location
from memini.types import (
    APIKey,
    Event,
    EventFilter,
    Memory,
    NamespaceLink,
    Recalled,
    Scored,
    Tier,
    hash_api_key,
)

if TYPE_CHECKING:
    from memini._core import FilterSpec

__all__ = ["PgEngine", "PgMeta", "open_backend", "safe_url"]

_BY_IDS: Final = f"SELECT {SELECT} FROM memories WHERE id = ANY(%(ids)s::text[])"
_RECALL_ATTEMPTS: Final = 3  # a final row deleted after the legs ran: recall again
_HIT_LEGS: Final = frozenset("vek")  # recall's rows of candidates (the others are counts)


def safe_url(url: str) -> str:
    """The URL without its password, for messages and ``repr``
    (`memini.store.shown_location`)."""
    return shown_location(url)


def _not_found(ns: str, id: str) -> NotFoundError:
    return NotFoundError(f"memory not found: id {id!r} in namespace {ns!r}")


def open_backend(
    url: str, dims: int | None, metric: str | None, new_metric: str = "l2"
) -> tuple[PgEngine, PgMeta]:
    """Connect, create or upgrade the schema, and check dims/metric (``metric=None``:
    ``new_metric`` for a new store, the stored one otherwise); build the indexes of a bulk
    load that died.

    Raises:
        UnavailableError: The server cannot be reached.
        InvalidArgumentError: A new store without ``dims``.
        DimensionMismatchError: ``dims``/``metric`` differ from the stored ones.
    """
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=30) as conn:
            stored_dims, stored_metric = migrate(conn, dims, metric, new_metric)
            recover_deferred(conn)
    except psycopg.Error as e:
        raise translate(e) from None
    pool = Pool(url)
    pool.open()
    return PgEngine(pool, stored_dims, stored_metric), PgMeta(pool)


class PgEngine:
    """Memories in PostgreSQL, with the methods (and arguments) of `memini._core.Engine`."""

    def __init__(self, pool: Pool, dims: int, metric: str) -> None:
        self._p = pool
        self._dims = dims
        self._metric = metric
        self._breadth = DEFAULT_EF_SEARCH
        self._sizes = Sizes()
        self._coherence = Coherence()
        self._frequencies = Frequencies()

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def metric(self) -> Literal["l2", "cos", "ip"]:
        return cast("Literal['l2', 'cos', 'ip']", self._metric)

    @property
    def url(self) -> str:
        return safe_url(self._p.url)

    def close(self) -> None:
        self._p.close()

    def ping(self) -> None:
        with self._p.read() as conn:
            conn.execute("SELECT 1")

    def set_search_breadth(self, breadth: int) -> None:
        """``hnsw.ef_search`` of every vector search (at least ``k``)."""
        self._breadth = breadth

    # ------------------------------------------------------------------ writes

    def upsert_many(self, rows: list[dict[str, Any]]) -> list[bool]:
        now = now_micros()
        stamped = []
        for row in rows:
            r = dict(row)
            for name in ("created_at", "updated_at", "last_accessed_at"):
                if r[name] is None:
                    r[name] = now
            stamped.append(r)
        if len(stamped) == 1:  # one statement: its own transaction
            with self._p.read() as conn:
                done = upsert(conn, stamped)
        else:
            with self._p.tx() as conn:
                done = upsert(conn, stamped)
        for ns, n in Counter(r["namespace"] for r in stamped).items():
            self._frequencies.wrote(ns, n)
        return done

    @contextlib.contextmanager
    def bulk_load(self) -> Iterator[bool]:
        """A load of many rows; yields whether the store held none at the start. An empty
        store loads with its secondary indexes dropped, built once at the end
        (`memini.postgres._bulk.deferred_indexes`)."""
        with self._p.read() as conn:
            r = conn.execute("SELECT NOT EXISTS (SELECT FROM memories)").fetchone()
        empty = bool(r and r[0])
        if not empty:
            yield False
            return
        try:
            with deferred_indexes(self._p):
                yield True
        finally:
            self._sizes.forget()
            self._coherence.forget()
            self._frequencies.forget()

    def _load(self, conn: Conn, ns: str, id: str) -> tuple[dict[str, Any], Any]:
        """The row as a core row dict (plus its embedding), locked for update."""
        r = conn.execute(
            f"SELECT {SELECT}, fingerprint, embedding FROM memories "
            "WHERE id = %s AND namespace = %s FOR UPDATE",
            (id, ns),
            binary=True,
        ).fetchone()
        if r is None:
            raise _not_found(ns, id)
        m = to_memory(r)
        row = {name: getattr(m, name) for name in ("id", "namespace")}
        cols = SELECT.split(", ")
        row.update(dict(zip(cols, r[: len(cols)], strict=True)))
        row["tags"], row["linked_memory_ids"] = list(row["tags"]), list(row["linked_memory_ids"])
        row["fingerprint"] = r[len(cols)]
        emb = r[len(cols) + 1]
        return row, emb

    def update(self, namespace: str, id: str, fields: dict[str, Any]) -> Memory:
        with self._p.tx() as conn:
            row, emb = self._load(conn, namespace, id)
            row.update(fields)
            if "embedding" not in fields:
                row["embedding"] = emb
            if "updated_at" not in fields or fields["updated_at"] is None:
                row["updated_at"] = now_micros()
            if row["last_accessed_at"] is None:
                row["last_accessed_at"] = now_micros()
            conn.execute(UPSERT, write_values(row))
            r = conn.execute(f"SELECT {SELECT} FROM memories WHERE id = %s", (id,)).fetchone()
        assert r is not None
        self._frequencies.wrote(namespace, 1)
        return to_memory(r)

    def delete(self, namespace: str, id: str) -> Memory:
        with self._p.read() as conn:
            r = conn.execute(
                f"DELETE FROM memories WHERE id = %s AND namespace = %s RETURNING {SELECT}",
                (id, namespace),
            ).fetchone()
        if r is None:
            raise _not_found(namespace, id)
        self._frequencies.wrote(namespace, 1)
        return to_memory(r)

    def _modify(self, sql: str, params: dict[str, Any], ns: str, id: str) -> None:
        params.update(ns=ns, id=id)
        with self._p.read() as conn:
            n = conn.execute(
                f"UPDATE memories SET {sql} WHERE id = %(id)s AND namespace = %(ns)s", params
            ).rowcount
        if n == 0:
            raise _not_found(ns, id)

    def set_superseded(self, namespace: str, id: str, superseded_by: str, now: int) -> None:
        self._modify(
            "superseded_by = %(by)s, valid_to = coalesce(valid_to, %(now)s)",
            {"by": superseded_by, "now": now},
            namespace,
            id,
        )

    def restore(self, namespace: str, id: str) -> None:
        self._modify("superseded_by = NULL, valid_to = NULL", {}, namespace, id)

    def retier(self, namespace: str, id: str, tier: str, expires_at: int | None) -> None:
        self._modify(
            "tier = %(tier)s, expires_at = %(exp)s",
            {"tier": tier, "exp": expires_at},
            namespace,
            id,
        )

    def set_confidence(self, namespace: str, id: str, confidence: float, now: int) -> None:
        with self._p.tx() as conn:
            r = conn.execute(
                "SELECT valid_to FROM memories WHERE id = %s AND namespace = %s FOR UPDATE",
                (id, namespace),
            ).fetchone()
            if r is None:
                raise _not_found(namespace, id)
            if r[0] is not None and r[0] <= now:
                raise NotFoundError(
                    f"memory not found: id {id!r} in namespace {namespace!r} is no longer "
                    "valid (its valid_to has passed)"
                )
            conn.execute(
                "UPDATE memories SET confidence = %s, updated_at = %s WHERE id = %s",
                (confidence, now, id),
            )

    def mark_contradicted(
        self, namespace: str, id: str, contradicted_by: str, confidence: float, now: int
    ) -> None:
        with self._p.tx() as conn:
            row, emb = self._load(conn, namespace, id)
            meta = json_to_metadata(row["metadata"])
            meta["contradicted_by"] = contradicted_by
            meta["contradicted_prev_confidence"] = row["confidence"]
            row["metadata"] = metadata_to_json(meta)
            row["confidence"] = confidence
            if row["valid_to"] is None:
                row["valid_to"] = now
            row["updated_at"] = now
            row["embedding"] = emb
            conn.execute(UPSERT, write_values(row))

    def reinforce(
        self, namespace: str, ids: list[str], accessed_at: int, new_expiry: int | None
    ) -> None:
        self._reinforce([(namespace, i) for i in ids], accessed_at, new_expiry)

    def reinforce_rows(self, rows: list[tuple[str, str]], accessed_at: int) -> None:
        self._reinforce(rows, accessed_at, None)

    def _reinforce(self, rows: list[tuple[str, str]], at: int, new_expiry: int | None) -> None:
        pairs = sorted(set(rows))  # one access per call and row; a fixed lock order
        if not pairs:
            return
        with self._p.read() as conn:
            conn.execute(
                "UPDATE memories SET access_count = access_count + 1, last_accessed_at = %s, "
                "expires_at = CASE WHEN expires_at IS NOT NULL AND %s::bigint IS NOT NULL "
                "THEN %s ELSE expires_at END "
                "WHERE (namespace, id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
                (at, new_expiry, new_expiry, [p[0] for p in pairs], [p[1] for p in pairs]),
            )

    def delete_if_expired_before(self, namespace: str, id: str, cutoff: int) -> Memory:
        with self._p.read() as conn:
            r = conn.execute(
                f"DELETE FROM memories WHERE id = %s AND namespace = %s AND expires_at <= %s "
                f"RETURNING {SELECT}",
                (id, namespace, cutoff),
            ).fetchone()
        if r is None:
            raise NotFoundError(
                f"memory not found: id {id!r} in namespace {namespace!r} does not expire by "
                "the cutoff"
            )
        self._frequencies.wrote(namespace, 1)
        return to_memory(r)

    def sweep_expired(self, now: int, limit: int) -> list[str]:
        cap = "" if limit <= 0 else f"LIMIT {int(limit)}"
        with self._p.read() as conn:
            # MATERIALIZED: the capped pick runs once (an IN (subquery) may run again)
            rows = conn.execute(
                "WITH picked AS MATERIALIZED (SELECT id FROM memories "
                f"WHERE expires_at <= %(now)s ORDER BY expires_at, id {cap} "
                "FOR UPDATE SKIP LOCKED) DELETE FROM memories m USING picked "
                "WHERE m.id = picked.id AND m.expires_at <= %(now)s RETURNING m.tier",
                {"now": now},
            ).fetchall()
        return [r[0] for r in rows]

    def delete_namespace(self, namespace: str) -> list[str]:
        with self._p.read() as conn:
            rows = conn.execute(
                "DELETE FROM memories WHERE namespace = %s RETURNING tier", (namespace,)
            ).fetchall()
        self._frequencies.forget(namespace)
        return [r[0] for r in rows]

    def reassign(self, from_ns: str, ids: list[str], to_ns: str) -> int:
        check_namespace(to_ns, "to_ns")  # the core's rule, as the embedded engine applies it
        if from_ns == to_ns or not ids:
            return 0
        with self._p.read() as conn:
            moved = conn.execute(
                "UPDATE memories SET namespace = %s WHERE namespace = %s AND id = ANY(%s)",
                (to_ns, from_ns, list(ids)),
            ).rowcount
        self._frequencies.wrote(from_ns, moved)
        self._frequencies.wrote(to_ns, moved)
        return moved

    def setting(self, key: str) -> str | None:
        with self._p.read() as conn:
            r = conn.execute("SELECT value FROM memini_settings WHERE key = %s", (key,)).fetchone()
        return None if r is None else str(r[0])

    def set_setting(self, key: str, value: str) -> None:
        with self._p.read() as conn:
            conn.execute(
                "INSERT INTO memini_settings (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def embed_model(self) -> str:
        return self.setting("embed_model") or ""

    def set_embed_model(self, model: str) -> None:
        self.set_setting("embed_model", model)

    # ------------------------------------------------------------------ reads

    def get(self, namespace: str, id: str) -> Memory:
        with self._p.read() as conn:
            r = conn.execute(
                f"SELECT {SELECT} FROM memories WHERE id = %s AND namespace = %s", (id, namespace)
            ).fetchone()
        if r is None:
            raise _not_found(namespace, id)
        return to_memory(r)

    def get_embedding(self, namespace: str, id: str) -> npt.NDArray[np.float32] | None:
        with self._p.read() as conn:
            r = conn.execute(
                "SELECT embedding FROM memories WHERE id = %s AND namespace = %s",
                (id, namespace),
                binary=True,
            ).fetchone()
        if r is None:
            raise _not_found(namespace, id)
        return cast("npt.NDArray[np.float32] | None", r[0])

    def ids_by_prefix(self, namespace: str, prefix: str, limit: int) -> list[str]:
        if not prefix or limit <= 0:
            return []
        with self._p.read() as conn:
            rows = conn.execute(
                "SELECT id FROM memories WHERE namespace = %s AND starts_with(id, %s) "
                "ORDER BY id LIMIT %s",
                (namespace, prefix, limit),
            ).fetchall()
        return [r[0] for r in rows]

    def predecessor_ids(self, namespace: str, id: str) -> list[str]:
        with self._p.read() as conn:
            rows = conn.execute(
                "SELECT id FROM memories WHERE namespace = %s AND superseded_by = %s ORDER BY id",
                (namespace, id),
            ).fetchall()
        return [r[0] for r in rows]

    def get_by_fingerprint(self, namespace: str, tier: str, fingerprint: str, now: int) -> Memory:
        r = None
        if fingerprint:
            with self._p.read() as conn:
                r = conn.execute(
                    f"SELECT {SELECT} FROM memories WHERE namespace = %(ns)s AND tier = %(tier)s "
                    f"AND fingerprint = %(fp)s AND {LIVE_AT} "
                    "ORDER BY created_at DESC, id DESC LIMIT 1",
                    {"ns": namespace, "tier": tier, "fp": fingerprint, "ref": now},
                ).fetchone()
        if r is None:
            raise NotFoundError(
                f"memory not found: no live {tier} memory with that fingerprint in namespace "
                f"{namespace!r}"
            )
        return to_memory(r)

    def list_expired(self, now: int, limit: int) -> list[Memory]:
        cap = "" if limit <= 0 else f"LIMIT {int(limit)}"
        with self._p.read() as conn:
            rows = conn.execute(
                f"SELECT {SELECT} FROM memories WHERE expires_at <= %s "
                f"ORDER BY expires_at, id {cap}",
                (now,),
            ).fetchall()
        return [to_memory(r) for r in rows]

    def list(
        self, namespace: str, filter: FilterSpec, limit: int, offset: int
    ) -> builtins.list[Memory]:
        params: dict[str, Any] = {"ns": namespace}
        cond = where(filter, params)
        sql = (
            f"SELECT {SELECT} FROM memories WHERE namespace = %(ns)s AND {cond} {order_by(filter)}"
        )
        if limit > 0:
            sql += f" LIMIT {int(limit)}"
        if offset > 0:
            sql += f" OFFSET {int(offset)}"
        with self._p.read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [to_memory(r) for r in rows]

    def count(self, namespace: str, filter: FilterSpec) -> int:
        params: dict[str, Any] = {"ns": namespace}
        cond = where(filter, params)
        with self._p.read() as conn:
            r = conn.execute(
                f"SELECT count(*) FROM memories WHERE namespace = %(ns)s AND {cond}", params
            ).fetchone()
        return int(r[0]) if r else 0

    def list_namespaces(self) -> builtins.list[str]:
        with self._p.read() as conn:
            rows = conn.execute(
                "SELECT DISTINCT namespace FROM memories ORDER BY namespace"
            ).fetchall()
        return [r[0] for r in rows]

    def namespace_activity(self, now: int) -> builtins.list[tuple[str, int, int]]:
        with self._p.read() as conn:
            rows = conn.execute(
                f"SELECT namespace, count(*), max(created_at) FROM memories WHERE {LIVE_AT} "
                "GROUP BY namespace ORDER BY namespace",
                {"ref": now},
            ).fetchall()
        return [(r[0], int(r[1]), int(r[2])) for r in rows]

    def active_by_tier(self, now: int) -> builtins.list[tuple[str, int]]:
        with self._p.read() as conn:
            rows = conn.execute(
                f"SELECT tier, count(*) FROM memories WHERE {LIVE_AT} GROUP BY tier",
                {"ref": now},
            ).fetchall()
        counts = {r[0]: int(r[1]) for r in rows}
        return [(t.value, counts.get(t.value, 0)) for t in Tier]

    def stats(self) -> dict[str, Any]:
        """The embedded store's keys where they mean something here (``rows``,
        ``namespaces`` with per-tier counts, ``bytes_on_disk``: the table with its indexes,
        ``keyword_docs``, ``vector_graphs``: the one HNSW index), plus ``backend`` and the
        ``url`` (without its password)."""
        with self._p.read() as conn:
            rows = conn.execute(
                "SELECT namespace, tier, count(*), count(embedding) FROM memories "
                "GROUP BY namespace, tier ORDER BY namespace, tier"
            ).fetchall()
            sizes = conn.execute(
                "SELECT pg_total_relation_size('memories'), "
                "coalesce(pg_relation_size(to_regclass('memories_hnsw')), 0)"
            ).fetchone()
        namespaces: dict[str, dict[str, int]] = {}
        for ns, tier, n, vectors in rows:
            c = namespaces.setdefault(ns, {"rows": 0, "vectors": 0, **{t.value: 0 for t in Tier}})
            c["rows"] += int(n)
            c["vectors"] += int(vectors)
            c[tier] = int(n)
        total = sum(c["rows"] for c in namespaces.values())
        return {
            "backend": "postgresql",
            "url": self.url,
            "rows": total,
            "namespaces": namespaces,
            "vector_graphs": int(self._dims <= HNSW_MAX_DIMS),
            "vector_flat_partitions": 0,
            "vector_memory_bytes": int(sizes[1]) if sizes else 0,
            "keyword_docs": total,
            "bytes_on_disk": int(sizes[0]) if sizes else 0,
            "dims": self._dims,
            "metric": self._metric,
        }

    def compact(self) -> None:
        """``VACUUM (ANALYZE)`` of the memories (reclaims dead rows and index entries)."""
        if self._p.closed:
            raise StoreClosedError("store is closed")
        try:
            with self._p.pool.connection() as conn:
                conn.execute("VACUUM (ANALYZE) memories")
        except psycopg.Error as e:
            raise translate(e) from None

    def backup(self, path: str) -> None:
        """Copy the whole store (memories, vectors, links, keys, events, settings) into a
        new embedded store directory ``path``, from one consistent snapshot."""
        from memini.postgres._copy import snapshot_to_directory

        with self._p.tx() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            snapshot_to_directory(conn, path, self._dims, self._metric)

    # ------------------------------------------------------------------ search

    def _ranked(
        self, q: npt.NDArray[np.float32], rows: builtins.list[tuple[Any, ...]], k: int
    ) -> builtins.list[tuple[tuple[Any, ...], float]]:
        """A vector statement's answer (its exact rows when the exact scan ran, else the
        walk's), each rescored exactly, best first, ties by id, at most ``k``."""
        exact = [r[1:] for r in rows if r[0]]
        hits = exact or [r[1:] for r in rows]
        if not hits:
            return []
        scores = _core.vector_scores(self._metric, q, stack_vectors([r[-1] for r in hits]))
        return sorted(zip(hits, scores, strict=True), key=lambda t: (-t[1], t[0][0]))[:k]

    def _vector_statement(
        self, conn: Conn, namespace: str, spec: FilterSpec, k: int
    ) -> tuple[str, dict[str, Any]]:
        """The statement of a vector search and its parameters but the vector, the session
        set for its walk."""
        graph, ef = self._sizes.plan(conn, namespace, spec, None, k, self._breadth)
        if graph:
            use_ef_search(conn, ef)
        params: dict[str, Any] = {"ns": namespace}
        cond = where(spec, params)
        return vector_sql(self._metric, self._dims, cond, k, graph), params

    def vector_search(
        self, namespace: str, vector: npt.NDArray[np.float32], filter: FilterSpec, k: int
    ) -> builtins.list[Scored]:
        with self._p.read() as conn:
            sql, params = self._vector_statement(conn, namespace, filter, k)
            params["q"] = vector
            rows = conn.rows(sql, params)
        return [Scored(to_memory(decoded(r)), s) for r, s in self._ranked(vector, rows, k)]

    def vector_search_many(
        self, namespace: str, vectors: npt.NDArray[np.float32], filter: FilterSpec, k: int
    ) -> builtins.list[builtins.list[Scored]]:
        """One statement per query, sent together (one round trip)."""
        if len(vectors) == 0:
            return []
        with self._p.read() as conn:
            sql, params = self._vector_statement(conn, namespace, filter, k)
            with conn.pipeline():
                cursors = [
                    conn.search_cursor().execute(*numbered(sql, {**params, "q": q}), prepare=True)
                    for q in vectors
                ]
            found = [c.fetchall() for c in cursors]
        return [
            [Scored(to_memory(decoded(r)), s) for r, s in self._ranked(q, rows, k)]
            for q, rows in zip(vectors, found, strict=True)
        ]

    def keyword_search(
        self, namespace: str, query: str, filter: FilterSpec, k: int
    ) -> builtins.list[Scored]:
        """PostgreSQL full-text search: the query's words (>= 2 letters/digits, case- and
        accent-folded) OR-ed, English stemming and stopwords (the ``english``
        configuration), ranked by the sum of each word's ``ts_rank`` (its weight in the row,
        no length normalisation) times its inverse document frequency in the namespace
        (BM25's idf, from cached counts, the missing ones counted in the same statement:
        `memini.postgres._frequencies`)."""
        words = query_words(query)
        if not words:
            return []
        with self._p.read() as conn:
            look = self._lookup(conn, [namespace], words)
            terms = len(look.slots)
            while True:
                params = {**look.params, "ns": namespace}
                rows = conn.rows(keyword_sql(where(filter, params), k, terms), params)
                if self._frequencies.learn(look, counts(rows, KEYWORD_RANK)) or not terms:
                    break
                terms = 0  # its words were all stopwords: search them as they are
        hits = [r[2:] for r in rows if r[0] == "k"]
        hits.sort(key=lambda r: (-r[-1], r[0]))
        return [Scored(to_memory(decoded(r)), float(r[-1])) for r in hits]

    def _lookup(
        self, conn: Conn, namespaces: builtins.list[str], words: builtins.list[str]
    ) -> Lookup:
        """The word weights of a search of ``words`` over ``namespaces``
        (`memini.postgres._frequencies`)."""
        return self._frequencies.lookup(
            namespaces, words, partial(self._sizes.rows, conn), self._sizes.total(conn)
        )

    def recall(
        self,
        sources: builtins.list[tuple[str, builtins.list[str] | None]],
        query: str,
        vector: npt.NDArray[np.float32] | None,
        filter: FilterSpec,
        k: int,
        pool: int,
        fusion: Literal["convex", "rrf"],
        fusion_param: float,
        context: float,
        keyword_half: float,
        quality: bool,
        dedup: bool,
    ) -> builtins.list[Recalled]:
        """Both legs of every source and the candidates' timeline neighbours in one
        statement (one snapshot), the core's fusion rule (`memini._core.fuse`, the one the
        embedded recall runs, with each namespace's coherence measured as there:
        `memini.postgres._coherence`), then the full rows of the final ``k`` in a second
        statement. ``keyword_half`` is a BM25 score and the keyword leg's rank is not one
        (``ts_rank`` times idf, on another scale): the keyword leg keeps its full weight
        here.
        A final row deleted between the two makes the recall run again (up to
        `_RECALL_ATTEMPTS` times; then it is left out)."""
        seen: set[str] = set()
        uniq: builtins.list[tuple[int, str, builtins.list[str] | None]] = []
        for i, (ns, tiers) in enumerate(sources):  # a repeated namespace counts once
            if ns not in seen:
                seen.add(ns)
                uniq.append((i, ns, tiers))
        words = query_words(query) if query.strip() else []
        if vector is None and not words:
            return []
        found: builtins.list[Recalled] = []
        for _ in range(_RECALL_ATTEMPTS):
            with self._p.read() as conn:
                order, cand_ids = self._fuse(
                    conn,
                    uniq,
                    words,
                    vector,
                    filter,
                    k,
                    pool,
                    (fusion, fusion_param, context, quality, dedup),
                )
                ids = [cand_ids[n] for n, *_ in order]  # as stored, as the rows read
                wanted = {"ids": [decode_text(id) for id in ids]}
                full = {r[0]: r for r in conn.rows(_BY_IDS, wanted)}
            found = [
                Recalled(
                    memory=to_memory(decoded(full[id])),
                    score=score,
                    vector_score=vs,
                    keyword_score=ks,
                    via=sources[src][0],
                )
                for id, (_, score, vs, ks, src) in zip(ids, order, strict=True)
                if id in full
            ]
            if len(found) == len(order):
                break
        return found

    def _fuse(
        self,
        conn: Conn,
        uniq: builtins.list[tuple[int, str, builtins.list[str] | None]],
        words: builtins.list[str],
        vector: npt.NDArray[np.float32] | None,
        spec: FilterSpec,
        k: int,
        pool: int,
        rule: tuple[Literal["convex", "rrf"], float, float, bool, bool],
    ) -> tuple[builtins.list[tuple[int, float, float | None, float | None, int]], Sequence[str]]:
        """Recall's first statement and the fusion: the final order and the candidates'
        ids, in their stored form (as `Conn.rows` reads them)."""
        fusion, fusion_param, context, quality, dedup = rule
        graph = None
        if vector is not None:
            plans = [
                self._sizes.plan(conn, ns, spec, tiers, pool, self._breadth)
                for _, ns, tiers in uniq
            ]
            graph = [g for g, _ in plans]
            if walks := [ef for g, ef in plans if g]:
                use_ef_search(conn, max(walks))
        # neighbour context weighs each namespace by its coherence: measured only when used,
        # and the neighbours are not read at all when no namespace searched has any
        coherence = [0.0] * (max((i for i, _, _ in uniq), default=0) + 1)
        look = self._lookup(conn, [ns for _, ns, _ in uniq], words) if words else None
        terms = 0 if look is None else len(look.slots)
        recount: builtins.list[int] = []  # the sources whose rows the statement counts
        if context > 0 and vector is not None and look is not None:
            for pos, (i, ns, _) in enumerate(uniq):
                hit = self._coherence.cached(ns)
                if hit is None:
                    coherence[i] = self._coherence.of(conn, ns)
                else:
                    coherence[i] = hit[0]
                    if hit[1]:
                        recount.append(pos)
        for _ in range(_RECALL_ATTEMPTS):
            neighbours = any(c > 0 for c in coherence)
            sql, params = recall_sql(
                self._metric,
                self._dims,
                spec,
                [(ns, tiers) for _, ns, tiers in uniq],
                graph,
                None if look is None else look.params,
                terms,
                pool,
                neighbours,
                recount,
            )
            params["q"] = vector
            rows = conn.rows(sql, params)  # ids as stored: decoded for the final k
            made = counts(rows, RECALL_RANK)
            for leg, pos, _, _, n in made:
                if leg == "c":
                    coherence[uniq[pos][0]] = self._coherence.counted(conn, uniq[pos][1], int(n))
            recount = []
            weighed = look is None or self._frequencies.learn(look, made) or not terms
            if weighed and neighbours == any(c > 0 for c in coherence):
                break
            if not weighed:  # its words were all stopwords: search them as they are
                terms = 0
        # the hits, as indexes into the candidate rows' columns: per source, the exact
        # scan's rows when it ran, else the walk's; the keyword rows. A row found by both legs
        # is there twice (the fusion takes the first row of an id as its candidate).
        found = [r for r in rows if r[0] in _HIT_LEGS]
        if not found:
            return [], []
        cols = list(zip(*found, strict=True))
        legs, srcs, width = cols[0], cols[1], len(STANDING)
        source = [i for i, _, _ in uniq]  # a row's source index, by its position in uniq
        exact = {s for leg, s in zip(legs, srcs, strict=True) if leg == "e"}
        vhits = [
            n
            for n, (leg, s) in enumerate(zip(legs, srcs, strict=True))
            if leg == "e" or (leg == "v" and s not in exact)
        ]
        vleg: builtins.list[tuple[int, float, int]] = []
        if vector is not None and vhits:
            vectors = stack_vectors([cols[2 + width][n] for n in vhits])
            scores = _core.vector_scores(self._metric, vector, vectors)
            vleg = list(zip(vhits, scores, [source[srcs[n]] for n in vhits], strict=True))
        rank = cols[3 + width]
        kleg = [(n, rank[n], source[srcs[n]]) for n, leg in enumerate(legs) if leg == "k"]
        # the fusion's columns: the standing columns, and each row's seq with its timeline
        # neighbours' (when the statement looked them up), binary float8/bigint as read
        unknown = (None,) * len(found)
        prev, next_ = (cols[5 + width], cols[6 + width]) if neighbours else (unknown, unknown)
        st = cols[2 : 2 + width]  # the STANDING columns
        order = _core.fuse(
            (st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], cols[4 + width], prev, next_),
            vleg,
            kleg,
            fusion,
            fusion_param,
            context,
            coherence,
            quality,
            spec["now"],
            dedup,
            k,
        )
        return order, cols[2]


class PgMeta:
    """Links, API keys and events in PostgreSQL, with the methods of `memini._sqlite.MetaDB`."""

    created = False
    path = None
    shared = True  # any number of processes and servers write the same database

    def __init__(self, pool: Pool) -> None:
        self._p = pool

    @property
    def closed(self) -> bool:
        return self._p.closed

    def close(self) -> None:
        self._p.close()

    def ping(self) -> None:
        with self._p.read() as conn:
            conn.execute("SELECT 1")

    def stats(self) -> dict[str, Any]:
        with self._p.read() as conn:
            counts = {
                t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
                for t in ("links", "api_keys", "events")
            }
            counts["next_event_id"] = _meta.next_event_id(conn)
            size = conn.execute(
                "SELECT pg_total_relation_size('links') + pg_total_relation_size('api_keys') "
                "+ pg_total_relation_size('events')"
            ).fetchone()
        counts["bytes"] = int(size[0]) if size else 0
        return counts

    def backup(self, path: str) -> None:
        """Nothing: `PgEngine.backup` copies links, keys and events with the memories."""

    def compact(self) -> None:
        try:
            with self._p.pool.connection() as conn:
                conn.execute("VACUUM (ANALYZE) events")
        except psycopg.Error as e:
            raise translate(e) from None

    def put_link(self, link: NamespaceLink) -> None:
        with self._p.tx() as conn:
            _meta.put_link(conn, link)

    def delete_link(self, src: str, dst: str) -> bool:
        src, dst = check_text(src, "src"), check_text(dst, "dst")
        with self._p.read() as conn:
            return (
                conn.execute("DELETE FROM links WHERE src = %s AND dst = %s", (src, dst)).rowcount
                > 0
            )

    def list_links(self, src: str) -> builtins.list[NamespaceLink]:
        src = check_text(src, "src")
        with self._p.read() as conn:
            return _meta.list_links(conn, src)

    def list_all_links(self) -> builtins.list[NamespaceLink]:
        with self._p.read() as conn:
            return _meta.list_links(conn, None)

    def rename_link_endpoints(self, from_ns: str, to_ns: str) -> None:
        from_ns = check_text(from_ns, "from_ns", non_empty=True)
        to_ns = check_namespace(to_ns, "to_ns")
        with self._p.tx() as conn:
            conn.execute("LOCK TABLE links IN SHARE ROW EXCLUSIVE MODE")
            _meta.rename_link_endpoints(conn, from_ns, to_ns)

    def delete_links_of_namespace(self, namespace: str) -> int:
        namespace = check_text(namespace, "namespace")
        with self._p.read() as conn:
            return _meta.delete_links_of_namespace(conn, namespace)

    def put_api_key(self, key: APIKey) -> None:
        with self._p.tx() as conn:
            conn.execute("LOCK TABLE api_keys IN SHARE ROW EXCLUSIVE MODE")
            _meta.put_api_key(conn, key)

    def authenticate(self, secret: str) -> APIKey | None:
        digest = hash_api_key(secret)
        if not secret:
            return None
        key = self.get_api_key_by_hash(digest)
        return None if key is None or key.disabled else key

    def delete_api_key(self, name: str) -> bool:
        name = check_text(name, "name")
        with self._p.read() as conn:
            return conn.execute("DELETE FROM api_keys WHERE name = %s", (name,)).rowcount > 0

    def list_api_keys(self) -> builtins.list[APIKey]:
        with self._p.read() as conn:
            return _meta.list_api_keys(conn)

    def get_api_key_by_hash(self, hash: str) -> APIKey | None:
        hash = check_key_hash(hash, "hash", lookup=True)
        with self._p.read() as conn:
            return _meta.get_api_key_by_hash(conn, hash)

    def rename_api_key_namespaces(self, from_ns: str, to_ns: str) -> None:
        from_ns = check_text(from_ns, "from_ns", non_empty=True)
        to_ns = check_text(to_ns, "to_ns", non_empty=True)
        with self._p.tx() as conn:
            _meta.rename_api_key_namespaces(conn, from_ns, to_ns)

    def append_events(self, events: Iterable[Event]) -> None:
        self.append_event_rows(ev.prepare_events(events))

    def append_event_rows(
        self, rows: Sequence[ev.EventRow], queries: Sequence[ev.OpQueryRow] = ()
    ) -> None:
        if not rows:
            self.ping()
            return
        with self._p.tx() as conn:
            _meta.append_events(conn, ev.inline_queries(rows, queries) if queries else rows)

    def import_events(self, events: Sequence[Event], *, next_id: int = 0) -> None:
        rows = ev.prepare_imported_events(events)
        next_id = check_int(next_id, "next_id", non_negative=True)
        with self._p.tx() as conn:
            _meta.import_events(conn, rows, next_id)

    def list_events(self, filter: EventFilter | None = None) -> builtins.list[Event]:
        q = ev.prepare_filter(filter)
        with self._p.read() as conn:
            return _meta.list_events(conn, q)

    def prune_events(self, older_than: datetime | None = None, keep_max: int = 0) -> int:
        cutoff = None if older_than is None else to_micros(older_than, "older_than")
        keep = check_limit(keep_max, "keep_max")
        with self._p.tx() as conn:
            return _meta.prune_events(conn, cutoff, keep)
