"""Stub of the compiled extension `memini._core` (the Rust core's binding).

Into the core go plain Python values; out of it come `memini.Memory` and `memini.Scored`
objects (built by the core, with enum members, aware UTC datetimes and parsed metadata):

* a *row* to write (``Row``) is a ``dict`` keyed by the `memini.Memory` fields plus
  ``fingerprint``: the fields of the Rust schema (``for_memory_fields!`` in rust/types.rs)
  and ``embedding``;
  timestamps are ``int`` microseconds since the Unix epoch (UTC); ``metadata`` is JSON text;
  ``tier``/``level`` are the enum string values; ``fingerprint`` is the lowercase hex SHA-256
  of the normalised content (computed in Python); ``embedding`` is a float32 array or None.
* a *filter spec* (``FilterSpec``) is a ``dict`` with exactly the keys of the Rust
  ``FilterSpec``; ``now`` is always resolved.
* embeddings are 1-D (queries for ``vector_search_many``: 2-D) C-contiguous ``float32`` arrays.
"""

import builtins
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias, TypeVar, final

import numpy as np
import numpy.typing as npt

from memini.events import EventRow, OpQueryRow, PackedRows
from memini.types import Memory, Recalled, Scored

__all__ = [
    "MAX_K",
    "MAX_LIMIT",
    "MAX_NAMESPACES",
    "MAX_NAMESPACE_CHARS",
    "MAX_POOL",
    "MAX_QUERIES",
    "MAX_QUERY_CHARS",
    "RECALL_ALPHA",
    "RECALL_CONTEXT",
    "RECALL_KEYWORD_HALF",
    "RECALL_MIN_POOL",
    "RECALL_RRF_K",
    "Completions",
    "Engine",
    "Front",
    "LocalModel",
    "build_profile",
    "check_namespace",
    "coherence",
    "coherence_sample",
    "event_summary",
    "fingerprint",
    "fuse",
    "normalize_content",
    "ranking",
    "read_answer",
    "search_event_rows",
    "simd",
    "vector_scores",
]

MAX_K: int
RECALL_ALPHA: float
RECALL_CONTEXT: float
RECALL_KEYWORD_HALF: float
RECALL_RRF_K: float
RECALL_MIN_POOL: int
MAX_POOL: int
MAX_LIMIT: int
MAX_QUERIES: int
MAX_QUERY_CHARS: int
MAX_NAMESPACES: int
MAX_NAMESPACE_CHARS: int

def check_namespace(namespace: str) -> None:
    """Raise `InvalidArgumentError` unless ``namespace`` has the allowed form."""

Row: TypeAlias = dict[str, Any]
"""A row dict whose keys are the `memini.Memory` fields (plus ``fingerprint``), made by
`memini._convert.memory_to_row` (a partial row, by `memini._convert.fields_to_row`)."""

_T = TypeVar("_T")
Done: TypeAlias = Callable[[BaseException | None, _T | None], object]
"""The callback of the ``*_then`` methods: ``done(error, result)``, called with the GIL held
once the call is over (exactly one of the two is None): on the core's thread, or with
``completions``, on the thread that drains them."""

FilterSpec: TypeAlias = dict[str, Any]
"""A filter spec: a dict with one key per field of the Rust ``FilterSpec``
(``for_filter_fields!`` in rust/types.rs), each required (a missing or unknown key is
refused), made by `memini._convert.filter_to_spec` from the `memini.Filter` fields (``sort``
as ``sort_key`` and ``sort_asc``); ``now`` is always resolved. Timestamps are ``int``
microseconds, enums their string values, metadata pairs lists of ``(key, value)``."""

def build_profile() -> Literal["release", "debug"]: ...
def event_summary(summary: str, content: str) -> str:
    """The summary an event row keeps of a memory: ``summary``, else ``content``, cut to 200
    characters with ``…`` as the last one."""

def normalize_content(content: str) -> str:
    """The content with whitespace collapsed and case folded (`memini.normalize_content`)."""

def fingerprint(content: str) -> str:
    """The hex SHA-256 of `normalize_content` (`memini.fingerprint`)."""

AnswerShape: TypeAlias = Literal["memory", "memories", "hits", "hits_many", "recalled"]
"""The answers `read_answer` reads: ``Memory``, ``list[Memory]``, ``list[Scored]``,
``list[list[Scored]]``, ``list[Recalled]``."""

def read_answer(
    data: bytes, shape: AnswerShape
) -> Memory | list[Memory] | list[Scored] | list[list[Scored]] | list[Recalled]:
    """A served answer's JSON of ``shape`` as the objects the local call returns (the
    reader beside the front's writer, ``rust/serve/wire.rs``).

    Raises:
        InvalidArgumentError: Bytes not the JSON of ``shape`` in the forms the server
            writes (see ``crate::serve::wire``), or an unknown ``shape``.
    """

def search_event_rows(
    op_id: str,
    method: str,
    caller: str,
    k_json: str,
    searched: list[str],
    query: str,
    created_at: int,
    results: list[list[tuple[str, str, str, str, float]]],
    fold: Callable[[str], str | None],
    packed: bool = False,
) -> tuple[list[EventRow], list[OpQueryRow], PackedRows | None]:
    """The event rows of one search (one per hit, ``(id, namespace, tier, summary, score)``,
    under its own namespace, or one per namespace in ``searched`` when a query found
    nothing; ``results``: one list per query, several only for ``vector_search_many``) and
    its query's row (none when ``query`` is empty), as `memini.events.event_row` and
    ``event_queries`` store them, under ``op_id``; ``k_json``: ``k`` as JSON; ``fold``
    folds a non-ASCII text (ASCII is folded in the core). With ``packed``: the same rows as
    `memini.events.PackedRows` (both lists empty) unless a value cannot travel so (a NUL,
    a score without its exact form), then as tuples (None)."""

def simd(metric: str) -> dict[str, str]:
    """The SIMD kernels chosen at run time on this CPU for a store of ``metric``:
    ``{"vector_graph": <usearch's>, "compact_scan": <pulp's>, "embedder": <pulp's>}`` (as
    ``stats()["simd"]``)."""

def ranking(
    tier: str,
    importance: float,
    confidence: float | None,
    updated_at: int | None,
    last_accessed_at: int | None,
    access_count: int,
    now: int,
) -> tuple[float, float, float, float, float]:
    """(salience, effective_confidence, durable_score, recency, quality) at ``now``."""

def fuse(
    rows: tuple[
        Sequence[str],
        Sequence[str],
        Sequence[float],
        Sequence[float | None],
        Sequence[int],
        Sequence[int],
        Sequence[int],
        Sequence[str],
        Sequence[int],
        Sequence[int | None],
        Sequence[int | None],
    ],
    vector: list[tuple[int, float, int]],
    keyword: list[tuple[int, float, int]],
    fusion: Literal["convex", "rrf"],
    fusion_param: float,
    context: float,
    coherence: list[float],
    quality: bool,
    now: int,
    dedup: bool,
    k: int,
) -> list[tuple[int, float, float | None, float | None, int]]:
    """Recall's fusion rule (the embedded recall's) over candidates found elsewhere.

    ``rows``: the rows the hits point into, as columns (id, tier, importance, confidence,
    updated_at, last_accessed_at, access_count, fingerprint, seq, previous seq, next seq;
    a seq of None: no neighbour known); a row found by both legs may be there twice, the
    first row of an id is its candidate, and a row's neighbours are the candidates at its
    previous and next seq. Each leg's hits are (row index, score, source index);
    ``coherence[i]`` is source ``i``'s namespace's coherence (`coherence`; missing: 0).
    Returns the ``k`` best as (row index of the candidate's first row, score, vector score,
    keyword score, source index), best first, ties by id.
    """

def coherence_sample(n: int) -> list[int]:
    """The timeline positions (0-based, ascending, one may repeat) whose vectors measure the
    coherence of a namespace of ``n`` rows (none below 8 rows)."""

def coherence(n: int, vectors: list[npt.NDArray[np.float32] | None]) -> float:
    """A namespace's coherence (how much more its time-adjacent rows resemble each other
    than rows far apart) from the vectors at its `coherence_sample` positions, in that
    order (None: a row without a vector)."""

def vector_scores(
    metric: str, query: npt.NDArray[np.float32], vectors: npt.NDArray[np.float32]
) -> list[float]:
    """The API's score of each row of ``vectors`` for ``query`` (the embedded store's f64
    rule: l2 -> 1/(1+distance), cos -> cosine, ip -> inner product)."""

@final
class Engine:
    """The Rust engine: rows, columns, both indexes. Thread-safe; every call releases the GIL."""

    def __new__(
        cls,
        path: str | None,
        dims: int | None,
        metric: str | None,
        *,
        rebuild_indexes: bool = False,
    ) -> Engine: ...
    @property
    def dims(self) -> int: ...
    @property
    def metric(self) -> Literal["l2", "cos", "ip"]: ...
    def close(self) -> None: ...
    def ping(self) -> None: ...
    def inject_fault(
        self,
        point: Literal["vector_apply", "keyword_apply", "repair", "write", "checkpoint"],
        times: int,
    ) -> None: ...
    def set_search_breadth(self, breadth: int) -> None: ...
    def upsert_many(self, rows: list[Row]) -> list[bool]:
        """Atomic batch; returns, per row, True when it was an insert (False: update)."""
    def update(self, namespace: str, id: str, fields: Row) -> Memory:
        """Partial update of the named fields; key "embedding" present = replace (None removes)."""
    def get(self, namespace: str, id: str) -> Memory: ...
    def get_embedding(self, namespace: str, id: str) -> npt.NDArray[np.float32] | None: ...
    def ids_by_prefix(self, namespace: str, prefix: str, limit: int) -> list[str]: ...
    def predecessor_ids(self, namespace: str, id: str) -> list[str]: ...
    def get_by_fingerprint(
        self, namespace: str, tier: str, fingerprint: str, now: int
    ) -> Memory: ...
    def delete(self, namespace: str, id: str) -> Memory:
        """Returns the deleted row (without embedding)."""
    def set_superseded(self, namespace: str, id: str, superseded_by: str, now: int) -> None: ...
    def restore(self, namespace: str, id: str) -> None: ...
    def reinforce(
        self, namespace: str, ids: list[str], accessed_at: int, new_expiry: int | None
    ) -> None: ...
    def delete_if_expired_before(self, namespace: str, id: str, cutoff: int) -> Memory: ...
    def list_expired(self, now: int, limit: int) -> list[Memory]: ...
    def list(
        self, namespace: str, filter: FilterSpec, limit: int, offset: int
    ) -> builtins.list[Memory]: ...
    def count(self, namespace: str, filter: FilterSpec) -> int: ...
    def sweep_expired(self, now: int, limit: int) -> builtins.list[str]:
        """Deletes expired rows; returns the tier of each row deleted."""
    def list_namespaces(self) -> builtins.list[str]: ...
    def delete_namespace(self, namespace: str) -> builtins.list[str]:
        """Deletes every row of the namespace; returns the tier of each row deleted."""
    def reassign(self, from_ns: str, ids: builtins.list[str], to_ns: str) -> int: ...
    def retier(self, namespace: str, id: str, tier: str, expires_at: int | None) -> None: ...
    def set_confidence(self, namespace: str, id: str, confidence: float, now: int) -> None: ...
    def mark_contradicted(
        self, namespace: str, id: str, contradicted_by: str, confidence: float, now: int
    ) -> None: ...
    def namespace_activity(self, now: int) -> builtins.list[tuple[str, int, int]]: ...
    def active_by_tier(self, now: int) -> builtins.list[tuple[str, int]]: ...
    def setting(self, key: str) -> str | None: ...
    def set_setting(self, key: str, value: str) -> None: ...
    def embed_model(self) -> str: ...
    def set_embed_model(self, model: str) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    def backup(self, path: str) -> None: ...
    def compact(self) -> None: ...
    def vector_search(
        self,
        namespace: str,
        vector: npt.NDArray[np.float32],
        filter: FilterSpec,
        k: int,
    ) -> builtins.list[Scored]: ...
    def vector_search_many(
        self,
        namespace: str,
        vectors: npt.NDArray[np.float32],
        filter: FilterSpec,
        k: int,
    ) -> builtins.list[builtins.list[Scored]]: ...
    def keyword_search(
        self, namespace: str, query: str, filter: FilterSpec, k: int
    ) -> builtins.list[Scored]: ...
    def vector_search_then(
        self,
        namespace: str,
        vector: npt.NDArray[np.float32],
        filter: FilterSpec,
        k: int,
        done: Done[builtins.list[Scored]],
        completions: Completions | None = None,
    ) -> None: ...
    def keyword_search_then(
        self,
        namespace: str,
        query: str,
        filter: FilterSpec,
        k: int,
        done: Done[builtins.list[Scored]],
        completions: Completions | None = None,
    ) -> None: ...
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
        """Hybrid recall over (namespace, tiers or None) sources; ``fusion_param`` is alpha
        (convex) or rrf_k; ``context`` the weight of the timeline neighbours (0 = none);
        ``keyword_half`` the BM25 score at which the keyword leg counts half under convex
        fusion (0 = always its full weight)."""
    def reinforce_rows(self, rows: builtins.list[tuple[str, str]], accessed_at: int) -> None:
        """`reinforce` of (namespace, id) pairs across namespaces in one durable batch."""

@final
class Completions:
    """Replies of calls started with ``completions=`` (``Engine.vector_search_then``, ...),
    waiting for the thread that drains them: an asyncio event loop watching ``fileno()``
    with ``loop.add_reader(c.fileno(), c.drain)`` runs every ``done`` callback on its own
    thread, and the core's threads never wait for the GIL, which that loop holds while it
    runs."""

    def __new__(cls) -> Completions: ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...

@final
class Front:
    """The HTTP front of ``memini serve --front`` (rust/serve): bound to ``host:port`` at once,
    serving from ``serve`` (auth from the keys of ``set_keys``; the hot routes answered from
    ``engine``, text recalls with their query embedded by ``embedder`` (the store's local
    model; None: forwarded), every other request forwarded to the app on the Unix socket
    ``app`` with ``token``) until ``stop``; ``idle`` waits up to ``timeout`` s for none of
    the calls it answers itself to be in flight (after ``stop`` none starts), ``wait`` for
    its connections to end; ``observed`` takes the (route, seconds) of the calls it answered
    itself since the last take, and how many more it answered without keeping their latency;
    ``take_events`` the event rows of the searches it answered since the last take (up to
    ``event_rows`` rows queued, none when 0; made as `search_event_rows` makes them, naming
    the admin and open access as ``callers`` says), each operation's id made by ``new_id()``
    and a non-ASCII text folded by ``fold`` (with ``packed``, as `search_event_rows`
    packs them); ``take_writes`` the writes it answered (taken
    after ``take_events``, whose queue bound they share): (method, the caller's name, the
    call's namespace, created_at, one (id, namespace, tier or None, summary) per memory
    touched, the fields an ``update`` named or None); ``written`` their store metrics since
    the last take: the upserts by (op, tier, memory type) with their count, and the deletes;
    ``events_dropped`` the rows a full queue dropped; ``in_flight`` the calls it is
    answering itself now."""

    def __new__(cls, host: str, port: int, backlog: int, admin: str | None) -> Front: ...
    @property
    def port(self) -> int: ...
    def serve(
        self,
        app: str,
        token: str,
        max_body: int,
        body_timeout: float,
        header_timeout: float,
        max_connections: int,
        engine: Engine | None,
        embedder: LocalModel | None,
        unembedded: bool,
        event_rows: int,
        callers: tuple[str, str],
    ) -> None: ...
    def take_events(
        self, new_id: Callable[[], str], fold: Callable[[str], str | None], packed: bool = False
    ) -> tuple[list[EventRow], list[OpQueryRow], PackedRows | None]: ...
    def take_writes(
        self,
    ) -> list[
        tuple[str, str, str, int, list[tuple[str, str, str | None, str]], list[str] | None]
    ]: ...
    def written(self) -> tuple[list[tuple[tuple[str, str, str], int]], int]: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def events_dropped(self) -> int: ...
    def observed(self) -> tuple[list[tuple[str, float]], list[tuple[str, int]]]: ...
    def set_keys(self, open: bool, keys: list[tuple[str, str, str, str, bool]]) -> None: ...
    def stop(self) -> None: ...
    def idle(self, timeout: float) -> bool: ...
    def wait(self, timeout: float) -> bool: ...

@final
class LocalModel:
    """A BERT sentence model (all-MiniLM-L6-v2 unless ``config_json`` says otherwise) loaded
    from its ``model.safetensors`` bytes and its ``tokenizer.json`` bytes (or ``vocab_path``),
    behind the core's batching queue and vector cache; ``embed`` tokenizes and runs the model
    without the GIL. Thread-safe."""

    def __new__(
        cls,
        weights: bytes,
        tokenizer_json: bytes | None = None,
        *,
        vocab_path: str | None = None,
        config_json: str | None = None,
        max_tokens: int = 256,
        batch: int = 64,
        max_wait: float = 0.002,
        cache_size: int = 1024,
    ) -> LocalModel: ...
    @property
    def dims(self) -> int: ...
    @property
    def cached(self) -> int: ...
    @property
    def passes(self) -> int: ...
    def token_ids(self, text: str) -> list[int]: ...
    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """Unit vectors, shape (len(texts), dims)."""
