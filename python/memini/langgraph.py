"""`MeminiStore`: LangGraph's long-term memory store (`BaseStore`) on a memini `Store`.

Install with ``pip install 'memini[langgraph]'``; ``import memini`` never imports this module.

```python
from memini import Store
from memini.langgraph import MeminiStore

store = MeminiStore(Store.open("./memory", dims=384, metric="cos"),
                    index={"dims": 384, "embed": embed_texts, "fields": ["text"]},
                    ttl={"default_ttl": 60 * 24, "refresh_on_read": True})
graph = builder.compile(store=store)
```

It behaves like LangGraph's `InMemoryStore` on the same operations (scores aside, see
`MeminiStore.batch` for the few documented differences), and it keeps nothing in Python:
every item is a memini row, durable when ``put`` returns, found by the core's filters and
indexes. Only the `Store` API is used, so a served store (``memini.connect``) works too.

How an item is stored (one home for the layout; a test reads rows back through it):

- namespace tuple ``("users", "a/b")`` -> memini namespace ``"users/a%2Fb"``: labels joined
  with ``/`` (so an API key whose home namespace is ``users`` reaches ``("users", ...)``),
  ``%`` and ``/`` inside a label escaped as ``%25`` and ``%2F``. Reversible.
- the item is the row with id ``'["<namespace>", "<key>"]'`` (JSON: unique across
  namespaces, as memini ids must be) and ``metadata["memory_type"] = "langgraph"``; the value
  is kept as exact JSON text in ``metadata["$value"]`` (ints, floats, big ints and key order
  round-trip), each top-level string field of at most 256 characters also as
  ``metadata["value.<field>"]`` so that equality filters on it run in the core;
  ``content`` is the indexed text (the ``fields`` texts, one per line: the keyword leg of
  `Store.recall` searches it); the embedding is the first text's vector; ``expires_at`` =
  the last write or refresh + ``metadata["$ttl"]`` minutes.
- an item with more than one indexed text (several ``fields``, or a ``[*]`` path) has one
  more row per extra text (id ``'["<namespace>", "<key>", i]'``, ``memory_type``
  ``"langgraph-vector"``, the same ``value.*`` mirrors): a search keeps each item's best
  text (max pooling, as LangGraph's stores do).
- ``created_at`` is kept across puts of the same key (as LangGraph's SQLite and Postgres
  stores do); ``updated_at`` is the last put.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import threading
import weakref
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from memini import limits
from memini.aio import _in_pool, _pool, _Workers
from memini.embed import Embedder
from memini.errors import InvalidArgumentError, NotFoundError
from memini.store import Store
from memini.types import Filter, Memory, Sort, SortKey

__all__ = ["MeminiStore", "namespace_from_tuple", "namespace_to_tuple"]

ITEM = "langgraph"
VECTOR = "langgraph-vector"
_VALUE = "$value"
_TTL = "$ttl"
_INDEXED = "$indexed"  # "yes" when the item has at least one vector
_FIELD = "value."  # prefix of the mirrored top-level string fields
_MIRROR_MAX = 256  # longer strings (texts) are not mirrored: filters on them run in Python
_INDEX_KEYS = frozenset({"dims", "embed", "fields", "recall"})
_RECALL_KEYS = frozenset({"fusion", "alpha", "rrf_k", "pool"})
_TTL_KEYS = frozenset({"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"})
_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


# ---------------------------------------------------------------------- namespaces and ids


def namespace_from_tuple(namespace: tuple[str, ...]) -> str:
    """The memini namespace of a LangGraph namespace tuple (labels joined by ``/``, with
    ``%`` and ``/`` in a label escaped as ``%25`` and ``%2F``)."""
    return "/".join(label.replace("%", "%25").replace("/", "%2F") for label in namespace)


def namespace_to_tuple(namespace: str) -> tuple[str, ...] | None:
    """The LangGraph namespace tuple of a memini namespace; None when it is not one that
    `namespace_from_tuple` makes (an empty label, a stray ``%``)."""
    labels = namespace.split("/")
    out = []
    for label in labels:
        plain = label.replace("%2F", "/").replace("%25", "%")
        if not plain or namespace_from_tuple((plain,)) != label:
            return None
        out.append(plain)
    return tuple(out)


def _item_id(ns: str, key: str) -> str:
    return json.dumps([ns, key], ensure_ascii=False)


def _vector_id(ns: str, key: str, i: int) -> str:
    return json.dumps([ns, key, i], ensure_ascii=False)


def _vector_prefix(ns: str, key: str) -> str:
    return _item_id(ns, key)[:-1] + ", "


def _check_labels(namespace: tuple[str, ...]) -> None:
    """LangGraph's label rules, raised as LangGraph's `InvalidNamespaceError`."""
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(
            f"Namespace must be a tuple of strings, got {type(namespace).__name__}"
        )
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {namespace}: labels must be strings,"
                f" got {type(label).__name__}"
            )
        if not label:
            raise InvalidNamespaceError(f"Namespace labels cannot be empty strings: {namespace}")
        if "." in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {namespace}: labels cannot contain '.'"
            )
        if "\x00" in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {namespace}: labels cannot contain NUL"
            )


def _check_put_namespace(namespace: tuple[str, ...]) -> None:
    """A put's namespace: LangGraph's label rules and at least one label. (The reserved
    root label ``"langgraph"`` is refused by `BaseStore.put` itself, as in LangGraph: a
    `PutOp` passed to `batch` may use it.)"""
    _check_labels(namespace)
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")


# ---------------------------------------------------------------------- filters


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics for one field (as its InMemoryStore and Postgres store):
    a dict of ``$`` operators applies each; another dict matches a dict field by field; a
    list matches a list element by element; anything else is equality. A comparison whose
    operands are not numbers (a missing field, a word) matches nothing instead of raising."""
    if isinstance(wanted, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_compare(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_matches(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _compare(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    try:
        a, b = float(value), float(arg)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    return a <= b  # "$lte"; others are refused by _split_filter


def _mirrored(value: Any) -> bool:
    """Whether a top-level field value is mirrored into the row's metadata (short strings)."""
    return isinstance(value, str) and len(value) <= _MIRROR_MAX


def _split_filter(flt: dict[str, Any] | None) -> tuple[dict[str, str], dict[str, str], bool]:
    """The parts of a LangGraph filter the core can evaluate exactly — string equality
    (``metadata``) and string inequality (``exclude_metadata``) on top-level fields — and
    whether anything is left that only the exact Python check can decide."""
    eq: dict[str, str] = {}
    ne: dict[str, str] = {}
    rest = False
    for key, wanted in (flt or {}).items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"filter keys must be str, got {key!r}")
        ops = (
            wanted if isinstance(wanted, dict) and any(str(k)[:1] == "$" for k in wanted) else None
        )
        if ops is None:
            if _mirrored(wanted) and key not in eq:
                eq[key] = wanted
            else:
                rest = True
            continue
        for op, arg in ops.items():
            if op not in _OPERATORS:
                raise InvalidArgumentError(
                    f"unsupported filter operator {op!r} on {key!r} "
                    f"(use one of {', '.join(sorted(_OPERATORS))})"
                )
            if op == "$eq" and _mirrored(arg) and key not in eq:
                eq[key] = arg
            elif op == "$ne" and _mirrored(arg) and key not in ne:
                ne[key] = arg
            else:
                rest = True
    return (
        {_FIELD + k: v for k, v in eq.items()},
        {_FIELD + k: v for k, v in ne.items()},
        rest,
    )


def _passes(value: dict[str, Any], flt: dict[str, Any] | None) -> bool:
    return all(_matches(value.get(k), v) for k, v in (flt or {}).items())


# ---------------------------------------------------------------------- embeddings


class _MeminiEmbeddings(Embeddings):
    """A memini `Embedder` (`memini.embed.LocalEmbedder`, ...) seen as LangChain
    `Embeddings`."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return cast(list[list[float]], np.asarray(self.embedder.embed(texts)).tolist())

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def _embeddings(embed: Any) -> Embeddings:
    if isinstance(embed, Embeddings):
        return embed
    if not callable(embed) and isinstance(embed, Embedder):
        return _MeminiEmbeddings(embed)
    if isinstance(embed, str) or callable(embed):
        return ensure_embeddings(embed)
    raise InvalidArgumentError(
        f"index['embed'] must be a LangChain Embeddings, a function texts -> vectors, a "
        f"memini embedder (.model, .dims, .embed(texts)) or a provider string, got "
        f"{type(embed).__name__}"
    )


def _as_matrix(vectors: Any, n: int, what: str) -> npt.NDArray[np.float32]:
    out = np.asarray(vectors, dtype=np.float32)
    if n == 0:
        return out.reshape(0, out.shape[-1] if out.ndim == 2 else 0)
    if out.ndim != 2 or out.shape[0] != n:
        raise InvalidArgumentError(
            f"{what} returned {np.shape(out)} for {n} texts (want one vector per text)"
        )
    return out


# ---------------------------------------------------------------------- the plan of a batch


@dataclass
class _Put:
    ns: str
    op: PutOp
    value_json: str = ""
    texts: list[str] = field(default_factory=list)  # texts to embed, in path order
    vectors: npt.NDArray[np.float32] | None = None


@dataclass
class _Plan:
    """A validated batch: what to embed before anything is read or written."""

    ops: list[Op]
    puts: dict[tuple[tuple[str, ...], str], _Put]
    queries: dict[str, npt.NDArray[np.float32] | None]


@dataclass(frozen=True)
class _Hit:
    memory: Memory
    score: float | None


class MeminiStore(BaseStore):
    """LangGraph's `BaseStore` over a memini `Store` (or any object with the `Store` API).

    Args:
        store: The memini store; the caller keeps owning it (`close` does not close it).
            With ``index``, open it with ``metric="cos"`` (LangGraph ranks by cosine).
        index: LangGraph's ``IndexConfig``: ``dims`` (the store's dims), ``embed`` (a
            LangChain ``Embeddings``, a function ``texts -> vectors`` (sync or async), a
            memini embedder with ``.model``, ``.dims``, ``.embed(texts)``, or a provider
            string LangChain resolves) and ``fields`` (JSON paths of the texts to embed,
            default ``["$"]``: the whole value). ``put(..., index=False)`` stores an item
            without vectors, ``index=[paths]`` overrides ``fields`` for one put. One key of
            memini's own (as LangGraph's Postgres store has its ``ann_index_config``):
            ``recall``, options of `Store.recall` for searches with a query (``fusion``,
            ``alpha``, ``rrf_k``, ``pool``); the default ranks as LangGraph's own stores
            do, each item by the cosine of its best field's vector (``{"alpha": 1.0}``:
            the scores are InMemoryStore's), and e.g. ``{"alpha": 0.5}`` or
            ``{"fusion": "rrf"}`` ranks by vectors and BM25 fused (`Store.recall`).
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes, for puts that pass no
            ``ttl``), ``refresh_on_read`` (default True: a get or search that returns an
            item restarts its TTL), ``sweep_interval_minutes`` (a daemon thread runs
            `sweep_ttl` that often; `stop_ttl_sweeper` or `close` stops it) and
            ``omit_expired`` (default False, as in LangGraph: an expired item is still
            returned until a sweep deletes it; True hides it at once).

    Raises:
        InvalidArgumentError: An unknown key in ``index``/``ttl``, ``index`` without
            ``embed``, ``index["dims"]`` different from the store's, or a store whose
            metric is not ``"cos"`` with an index.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: Store,
        *,
        index: IndexConfig | dict[str, Any] | None = None,
        ttl: TTLConfig | dict[str, Any] | None = None,
    ) -> None:
        """Wrap ``store``; see the class docstring."""
        self._store = store
        self.index_config: IndexConfig | None = None
        self.embeddings: Embeddings | None = None
        self._fields: list[tuple[str, str | list[str]]] = []
        self._recall: dict[str, Any] = {}
        if index is not None:
            self._configure_index(dict(index))
        self.ttl_config: TTLConfig | None = None
        if ttl is not None:
            unknown = set(ttl) - _TTL_KEYS
            if unknown:
                raise InvalidArgumentError(
                    f"unknown ttl keys {sorted(unknown)} (TTLConfig has {sorted(_TTL_KEYS)})"
                )
            self.ttl_config = cast(TTLConfig, dict(ttl))
        self._pool: _Workers | None = None
        self._pool_lock = threading.Lock()
        self._sweeper: threading.Thread | None = None
        self._stop_sweeper = threading.Event()
        weakref.finalize(self, self._stop_sweeper.set)
        if self.ttl_config and self.ttl_config.get("sweep_interval_minutes"):
            self.start_ttl_sweeper()

    def _configure_index(self, index: dict[str, Any]) -> None:
        unknown = set(index) - _INDEX_KEYS
        if unknown:
            raise InvalidArgumentError(
                f"unknown index keys {sorted(unknown)} (IndexConfig has {sorted(_INDEX_KEYS)})"
            )
        if index.get("embed") is None:
            raise InvalidArgumentError(
                "index needs 'embed': a LangChain Embeddings, a function texts -> vectors "
                "or a memini embedder"
            )
        # a served store (RemoteStore) may not report stats: then the store checks at use
        stats = self._store.stats() if hasattr(self._store, "stats") else {}
        dims = index.get("dims")
        if dims is not None and stats.get("dims") not in (None, dims):
            raise InvalidArgumentError(
                f"index['dims'] is {dims} but the store holds {stats['dims']}-d vectors "
                "(open a store with that many dims, or fix index['dims'])"
            )
        if stats.get("metric") not in (None, "cos"):
            raise InvalidArgumentError(
                f"the store's metric is {stats['metric']!r}; LangGraph ranks by cosine "
                "similarity: open the store with metric='cos'"
            )
        recall = dict(index.get("recall") or {})
        if set(recall) - _RECALL_KEYS:
            raise InvalidArgumentError(
                f"unknown index['recall'] keys {sorted(set(recall) - _RECALL_KEYS)} "
                f"(Store.recall options: {sorted(_RECALL_KEYS)})"
            )
        # the store checks the options (an empty recall: nothing to search, nothing read)
        self._store.recall(namespace_from_tuple(("-",)), "", None, None, 1, **recall)
        self._recall = recall
        self.embeddings = _embeddings(index["embed"])
        paths = index.get("fields") or ["$"]
        self._fields = [(p, p if p == "$" else tokenize_path(p)) for p in paths]
        self.index_config = cast(IndexConfig, index)

    # ------------------------------------------------------------------ lifecycle

    def sweep_ttl(self) -> int:
        """Delete expired items now (`Store.sweep_expired`: every namespace of the store);
        return how many rows were deleted."""
        return self._store.sweep_expired()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Run `sweep_ttl` every ``sweep_interval_minutes`` (default: the ttl config's, else
        5) on a daemon thread, until `stop_ttl_sweeper`. A running sweeper is kept."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return
        minutes = float(
            sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        )
        self._stop_sweeper.clear()
        store, stop = self._store, self._stop_sweeper

        def loop() -> None:  # holds no reference to self: the store can be collected
            import logging

            while not stop.wait(minutes * 60):
                try:
                    store.sweep_expired()
                except Exception:  # a closed store, a full disk: retried next interval
                    logging.getLogger("memini").exception("MeminiStore TTL sweep failed")

        self._sweeper = threading.Thread(target=loop, name="memini-ttl-sweeper", daemon=True)
        self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True when it has stopped (or never ran)."""
        self._stop_sweeper.set()
        if self._sweeper is None:
            return True
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    def close(self) -> None:
        """Stop the TTL sweeper and the async worker pool; the memini store stays open."""
        self.stop_ttl_sweeper()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    # ------------------------------------------------------------------ batch

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order, as LangGraph's `InMemoryStore` does: every get, search and
        list sees the store as it was before the batch; then the batch's puts are applied,
        the last put per (namespace, key) winning.

        The writes of a batch are one atomic memini commit (deletes follow it, each
        durable). Differences from `InMemoryStore`, all deliberate: a search without a
        query lists items newest update first (as LangGraph's SQLite and Postgres stores);
        a namespace is listed while it holds an item (`InMemoryStore` keeps
        listing one after its last delete, and after a mere get); values must be JSON
        (`InvalidArgumentError` otherwise) and a range operator on a missing or non-number
        field matches nothing (`InMemoryStore` raises `TypeError`).
        """
        plan = self._plan(ops)
        if self.embeddings is not None:
            self._embed_sync(plan, self.embeddings)
        return self._run(plan)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` for asyncio: embeds with the embedder's async methods, and runs the store
        work on a worker thread so the event loop is never blocked."""
        plan = self._plan(ops)
        if self.embeddings is not None:
            await self._embed_async(plan, self.embeddings)
        with self._pool_lock:
            if self._pool is None:
                self._pool = _pool(None, "memini-langgraph")
            pool = self._pool
        return await _in_pool(pool, self._run, plan)

    # ------------------------------------------------------------------ plan and embed

    def _plan(self, ops: Iterable[Op]) -> _Plan:
        """Validate every op (nothing is read or written before the whole batch passed)."""
        listed = list(ops)
        puts: dict[tuple[tuple[str, ...], str], _Put] = {}
        queries: dict[str, npt.NDArray[np.float32] | None] = {}
        for op in listed:
            if isinstance(op, GetOp):
                _check_labels(op.namespace)
            elif isinstance(op, SearchOp):
                _check_labels(op.namespace_prefix)
                _split_filter(op.filter)
                if op.query and self.embeddings is not None:
                    queries[op.query] = None
            elif isinstance(op, ListNamespacesOp):
                for cond in op.match_conditions or ():
                    if cond.match_type not in ("prefix", "suffix"):
                        raise InvalidArgumentError(
                            f"unknown match type {cond.match_type!r} (prefix or suffix)"
                        )
                    _check_labels(tuple(cond.path))
            elif isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = self._plan_put(op)
            else:
                raise InvalidArgumentError(f"unknown operation {type(op).__name__}")
        return _Plan(listed, puts, queries)

    def _plan_put(self, op: PutOp) -> _Put:
        _check_put_namespace(op.namespace)
        if not isinstance(op.key, str):
            raise InvalidArgumentError(f"key must be a str, got {type(op.key).__name__}")
        put = _Put(namespace_from_tuple(op.namespace), op)
        if op.value is None:
            return put
        if not isinstance(op.value, Mapping):
            raise InvalidArgumentError(
                f"value of {op.namespace}/{op.key!r} must be a dict, got {type(op.value).__name__}"
            )
        try:
            put.value_json = json.dumps(dict(op.value), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"value of {op.namespace}/{op.key!r} is not JSON ({e}): store JSON types only"
            ) from None
        if op.ttl is not None and (isinstance(op.ttl, bool) or not isinstance(op.ttl, int | float)):
            raise InvalidArgumentError(f"ttl must be minutes (a number), got {op.ttl!r}")
        if self.embeddings is not None and op.index is not False:
            paths = (
                self._fields
                if op.index is None
                else [(p, p if p == "$" else tokenize_path(p)) for p in op.index]
            )
            for _, tokens in paths:
                put.texts.extend(get_text_at_path(op.value, tokens))
        return put

    def _embed_inputs(self, plan: _Plan) -> tuple[list[str], list[str]]:
        return [t for p in plan.puts.values() for t in p.texts], list(plan.queries)

    def _embed_sync(self, plan: _Plan, emb: Embeddings) -> None:
        texts, queries = self._embed_inputs(plan)
        docs = emb.embed_documents(texts) if texts else []
        qs = [emb.embed_query(q) for q in queries]
        self._attach(plan, docs, qs)

    async def _embed_async(self, plan: _Plan, emb: Embeddings) -> None:
        texts, queries = self._embed_inputs(plan)
        docs = await emb.aembed_documents(texts) if texts else []
        qs = list(await asyncio.gather(*(emb.aembed_query(q) for q in queries)))
        self._attach(plan, docs, qs)

    def _attach(self, plan: _Plan, docs: Any, queries: list[Any]) -> None:
        texts, names = self._embed_inputs(plan)
        matrix = _as_matrix(docs, len(texts), "the embedder")
        start = 0
        for put in plan.puts.values():
            put.vectors = matrix[start : start + len(put.texts)]
            start += len(put.texts)
        for name, vec in zip(names, queries, strict=True):
            plan.queries[name] = _as_matrix([vec], 1, "the embedder")[0]

    # ------------------------------------------------------------------ run

    def _run(self, plan: _Plan) -> list[Result]:
        results: list[Result] = []
        refresh: list[Memory] = []
        for op in plan.ops:
            if isinstance(op, GetOp):
                got = self._get(op)
                results.append(None if got is None else _item(got))
                if got is not None and op.refresh_ttl:
                    refresh.append(got)
            elif isinstance(op, SearchOp):
                hits = self._search(op, plan)
                results.append([_item(h.memory, h.score) for h in hits])
                if op.refresh_ttl:
                    refresh.extend(h.memory for h in hits)
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                results.append(None)
        self._refresh(refresh)
        self._write(plan)
        return results

    def _now(self) -> datetime:
        return datetime.now(UTC)

    def _live(self, m: Memory) -> bool:
        omit = bool((self.ttl_config or {}).get("omit_expired", False))
        return not (omit and m.expires_at is not None and m.expires_at <= self._now())

    def _get(self, op: GetOp) -> Memory | None:
        ns = namespace_from_tuple(op.namespace)
        if not ns:
            return None
        try:
            m = self._store.get(ns, _item_id(ns, str(op.key)))
        except NotFoundError:
            return None
        ok = m.metadata.get("memory_type") == ITEM and m.superseded_by is None
        return m if ok and self._live(m) else None

    def _refresh(self, rows: list[Memory]) -> None:
        """Restart the TTL of the items read (one `reinforce` per namespace and TTL). An item
        already expired stays expired: reading it does not bring it back."""
        groups: dict[tuple[str, float], list[str]] = defaultdict(list)
        now = self._now()
        for m in rows:
            minutes = m.metadata.get(_TTL)
            if isinstance(minutes, int | float) and m.expires_at is not None and m.expires_at > now:
                groups[(m.namespace, float(minutes))].append(m.id)
        for (ns, minutes), ids in groups.items():
            self._store.reinforce(ns, sorted(set(ids)), now, now + timedelta(minutes=minutes))

    def _filter(
        self, flt: dict[str, Any] | None, *types: str, indexed: bool | None = None
    ) -> Filter:
        eq, ne, _ = _split_filter(flt)
        if indexed is not None:
            eq[_INDEXED] = "yes" if indexed else "no"
        return Filter(
            memory_types=list(types),
            metadata=eq,
            exclude_metadata=ne,
            include_expired=not (self.ttl_config or {}).get("omit_expired", False),
            sort=Sort(SortKey.UPDATED_AT, asc=False),
        )

    def _namespaces(self, prefix: tuple[str, ...]) -> list[str]:
        n = len(prefix)
        out = []
        for ns in self._store.list_namespaces():
            t = namespace_to_tuple(ns)
            if t is not None and t[:n] == prefix:
                out.append(ns)
        return out

    def _listing(
        self, namespaces: list[str], flt: dict[str, Any] | None, want: int, indexed: bool | None
    ) -> Iterator[Memory]:
        """Items of ``namespaces`` passing ``flt``, newest update first (ties by id), lazily:
        each namespace is read in pages, merged across namespaces."""
        core = self._filter(flt, ITEM, indexed=indexed)
        exact = _split_filter(flt)[2]
        page = max(64, 2 * want)

        def pages(ns: str) -> Iterator[Memory]:
            offset = 0
            while True:
                rows = self._store.list(ns, core, page, offset)
                yield from rows
                if len(rows) < page:
                    return
                offset += page

        merged = heapq.merge(
            *(pages(ns) for ns in namespaces),
            key=lambda m: (-_micros(m.updated_at), m.id),
        )
        for m in merged:
            if not exact or _passes(_value(m), flt):
                yield m

    def _search(self, op: SearchOp, plan: _Plan) -> list[_Hit]:
        namespaces = self._namespaces(tuple(op.namespace_prefix))
        limit, offset = max(op.limit, 0), max(op.offset, 0)
        if not namespaces or limit == 0:
            return []
        vector = plan.queries.get(op.query) if op.query else None
        if vector is None:
            rows = self._listing(namespaces, op.filter, offset + limit, None)
            return [_Hit(m, None) for m in itertools.islice(rows, offset, offset + limit)]
        ranked = self._ranked(namespaces, op, vector, offset + limit)[offset:]
        if len(ranked) < limit:  # as InMemoryStore: top up with the items without vectors
            rest = self._listing(namespaces, op.filter, limit - len(ranked), False)
            ranked.extend(_Hit(m, None) for m in itertools.islice(rest, limit - len(ranked)))
        return ranked

    def _ranked(
        self, namespaces: list[str], op: SearchOp, vector: npt.NDArray[np.float32], want: int
    ) -> list[_Hit]:
        """The best ``want`` items by ``op.query``: each item's best row (its own or one of
        its extra texts'), widening the search until ``want`` items pass the filter or the
        rows run out."""
        core = self._filter(op.filter, ITEM, VECTOR)
        exact = _split_filter(op.filter)[2]
        # widened x4 while extra-text rows or exact filters eat results, up to the most one
        # recall returns (a search asking for more gets that many)
        k = min(max(want, 1), limits.MAX_K)
        while True:
            hits, exhausted = self._query_rows(namespaces, op.query or "", vector, core, k)
            best: dict[tuple[str, str], _Hit] = {}
            for memory, score in hits:
                ns_key = _ns_key(memory)
                if ns_key is not None and ns_key not in best:
                    best[ns_key] = _Hit(memory, score)
            items = self._resolve(list(best.values()))
            if exact:
                items = [h for h in items if _passes(_value(h.memory), op.filter)]
            if len(items) >= want or exhausted or k == limits.MAX_K:
                return items[:want]
            k = min(k * 4, limits.MAX_K)

    def _query_rows(
        self,
        namespaces: list[str],
        query: str,
        vector: npt.NDArray[np.float32],
        core: Filter,
        k: int,
    ) -> tuple[list[tuple[Memory, float]], bool]:
        """Rows ranked for the query by `Store.recall`, best first, and whether fewer than
        ``k`` were found (nothing more to widen to). Namespaces beyond 64 are recalled 64
        at a time and merged by score."""
        out: list[tuple[Memory, float]] = []
        exhausted = True
        # LangGraph's ranking unless configured: each field's own vector, an item scored by
        # its best field's cosine (the fields' texts embedded as one text scored an exact
        # match of one field 0.63, and ranked otherwise than LangGraph's stores); fused,
        # the bare convex formula (an item's rows carry no conversation order)
        options = {"fusion": "convex", "alpha": 1.0, **self._recall}
        if options.get("fusion", "convex") == "convex" and options.get("alpha") == 1.0:
            # the words weigh nothing: the vector leg alone, k candidates, cosine scores
            query, options = "", {"pool": k}
        for i in range(0, len(namespaces), limits.MAX_NAMESPACES):
            chunk = namespaces[i : i + limits.MAX_NAMESPACES]
            found = self._store.recall(
                chunk, query, vector, core, k, rerank=None, dedup=False, **options
            )
            out.extend((r.memory, r.score) for r in found)
            exhausted &= len(found) < k
        out.sort(key=lambda h: (-h[1], h[0].id))
        return out, exhausted

    def _resolve(self, hits: list[_Hit]) -> list[_Hit]:
        """Hits on an item's extra-text rows replaced by the item's own row."""
        out = []
        for h in hits:
            if h.memory.metadata.get("memory_type") == ITEM:
                out.append(h)
                continue
            ns_key = _ns_key(h.memory)
            if ns_key is None:
                continue
            try:
                item = self._store.get(ns_key[0], _item_id(*ns_key))
            except NotFoundError:
                continue  # deleted meanwhile
            if item.metadata.get("memory_type") == ITEM and self._live(item):
                out.append(_Hit(item, h.score))
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found = set()
        for ns in self._store.list_namespaces():
            t = namespace_to_tuple(ns)
            if t is None or not all(_ns_matches(c, t) for c in op.match_conditions or ()):
                continue
            if (self.ttl_config or {}).get("omit_expired") and not self._store.count(
                ns, self._filter(None, ITEM)
            ):
                continue
            found.add(t if op.max_depth is None else t[: op.max_depth])
        ordered = sorted(found)
        return ordered[max(op.offset, 0) : max(op.offset, 0) + max(op.limit, 0)]

    # ------------------------------------------------------------------ write

    def _write(self, plan: _Plan) -> None:
        rows: list[Memory] = []
        stale: list[tuple[str, str]] = []  # (namespace, id) to delete
        for (_, key), put in plan.puts.items():
            # extra-text rows exist only where an index was configured (now or before)
            may_have = self.embeddings is not None or put.op.value is None
            prefix = _vector_prefix(put.ns, key)
            old = self._store.ids_by_prefix(put.ns, prefix, 1 << 20) if may_have else []
            if put.op.value is None:
                stale.append((put.ns, _item_id(put.ns, key)))
                stale.extend((put.ns, i) for i in old)
                continue
            new = self._rows(put, key)
            rows.extend(new)
            keep = {m.id for m in new}
            stale.extend((put.ns, i) for i in old if i not in keep)
        if rows:
            self._store.upsert_many(rows)
        for ns, id in stale:
            with contextlib.suppress(NotFoundError):
                self._store.delete(ns, id)

    def _rows(self, put: _Put, key: str) -> list[Memory]:
        value = put.op.value or {}
        ttl = put.op.ttl
        now = self._now()
        mirrors = {_FIELD + k: v for k, v in value.items() if _mirrored(v)}
        meta: dict[str, Any] = {"memory_type": ITEM, _VALUE: put.value_json, **mirrors}
        if ttl is not None:
            meta[_TTL] = ttl
        vectors = put.vectors if put.vectors is not None else np.zeros((0, 0), np.float32)
        meta[_INDEXED] = "yes" if len(vectors) else "no"
        expires = None if ttl is None else now + timedelta(minutes=float(ttl))
        rows = [
            Memory(
                id=_item_id(put.ns, key),
                namespace=put.ns,
                content="\n".join(put.texts),
                metadata=meta,
                embedding=vectors[0] if len(vectors) else None,
                expires_at=expires,
            )
        ]
        for i in range(1, len(vectors)):
            rows.append(
                Memory(
                    id=_vector_id(put.ns, key, i),
                    namespace=put.ns,
                    content=put.texts[i],
                    metadata={"memory_type": VECTOR, **mirrors},
                    embedding=vectors[i],
                    expires_at=expires,
                )
            )
        return rows


# ---------------------------------------------------------------------- rows -> items


def _micros(t: datetime | None) -> int:
    return 0 if t is None else int(t.timestamp() * 1_000_000)


def _value(m: Memory) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(m.metadata.get(_VALUE, "{}")))


def _ns_key(m: Memory) -> tuple[str, str] | None:
    """(memini namespace, key) of an item or extra-text row; None for a foreign row."""
    try:
        parts = json.loads(m.id)
    except ValueError:
        return None
    if not isinstance(parts, list) or len(parts) not in (2, 3) or parts[0] != m.namespace:
        return None
    return m.namespace, str(parts[1])


def _item(m: Memory, score: float | Literal[False] | None = False) -> Item:
    """The LangGraph item of an item row (a plain `Item` for get, else a `SearchItem`)."""
    ns_key = _ns_key(m)
    namespace = namespace_to_tuple(m.namespace)
    if ns_key is None or namespace is None or m.created_at is None or m.updated_at is None:
        raise InvalidArgumentError(f"row {m.id!r} in {m.namespace!r} is not a LangGraph item")
    if score is False:
        return Item(
            namespace=namespace,
            key=ns_key[1],
            value=_value(m),
            created_at=m.created_at,
            updated_at=m.updated_at,
        )
    return SearchItem(namespace, ns_key[1], _value(m), m.created_at, m.updated_at, score)


def _ns_matches(cond: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if cond.match_type == "prefix" else namespace[-len(path) :]
    if not path:
        return True
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))
