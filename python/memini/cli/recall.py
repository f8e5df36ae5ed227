"""``memini recall``: hybrid recall from the command line.

The query's words go to the keyword leg; a store opened with an embedder (API.md section 7)
also embeds the query for the vector leg, and without one recall is the keyword leg alone
(the command says so). Results print best first, or as JSON lines with ``--json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from memini.cli.common import open_store
from memini.types import Recalled

__all__ = ["cmd_recall"]


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
    path = Path(args.store)
    with open_store(path, "recall") as store:
        embedder = getattr(store, "embedder", None)
        if embedder is None and not args.json:
            err.print(
                "memini recall: this store has no embedder, so recall uses the words alone "
                "(keyword leg)",
                markup=False,
            )
        found = store.recall(args.namespace, args.text, k=args.k, linked=args.linked)
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
