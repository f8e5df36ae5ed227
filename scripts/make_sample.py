"""Build the demo sample shipped in the wheel (``python/memini/data/``) from pypi-100k.

Deterministic: the same dataset gives byte-identical files (no randomness, gzip mtime 0).

Outputs:

* ``sample.jsonl.gz``: the first 10,000 rows of ``texts.jsonl`` as memory records in the
  ``memini import`` format, without ``embedding`` (id ``pypi-00000``.., namespace ``pypi``);
* ``sample.f16.npy.gz``: their embeddings, float16 (10000, 384) as in the dataset (row i of
  the array belongs to line i of the jsonl), gzip-compressed ``.npy``;
* ``sample_queries.json``: a few held-out rows (from the dataset's last 1,000, the query
  split) with their text and float16 embedding (base64), used as demo queries.

Derived fields (everything from the row number, package name and text, via SHA-256):

* ``tags``: topic names whose keyword list meets a word of the name or text (``web``, ``ml``,
  ``cli``, ...), in ``TOPICS`` order; ``metadata.topic`` is the first tag or ``"other"``;
* ``tier`` from the first hash byte: 5% working, 15% episodic, 15% procedural, 65% semantic;
  ``level`` deduced for 1 in 4 rows; ``importance`` and ``access_count`` from hash bytes;
  ``confidence`` on semantic/procedural rows;
* time line: ``created_at`` (= ``updated_at`` = ``last_accessed_at`` = ``valid_from``) runs
  from 2021-01-01 over 3.5 years in row order;
* supersession: about 1 row in 12 of the first 9,000 is superseded by its nearest neighbour
  (cosine) among the later rows; ``valid_to`` is that successor's ``created_at``, so an
  ``as_of`` recall before then still finds the old row.

Usage: ``python scripts/make_sample.py [--dataset DIR] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROWS = 10_000
NAMESPACE = "pypi"
QUERY_NAMES = ("tiny-vectordb", "hashbang", "pdfpro", "penta", "rdspg")
START = datetime(2021, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=365 * 3 + 182)
_TOPIC_WORDS = {
    "web": "web django flask fastapi http html website server wsgi asgi",
    "api": "api client sdk wrapper rest graphql",
    "data": "data pandas csv dataframe excel json parquet etl xml yaml",
    "database": "database sql postgres postgresql mysql sqlite mongodb redis orm sqlalchemy",
    "ml": "learning neural model models deep machine ai llm nlp transformer pytorch",
    "cli": "cli command terminal shell console",
    "cloud": "aws azure cloud kubernetes docker gcp s3 lambda serverless",
    "testing": "test testing pytest tests mock unittest",
    "async": "async asyncio aiohttp asynchronous",
    "media": "image images video audio pdf photo",
    "science": "scientific physics biology chemistry astronomy genomics bioinformatics",
    "plugin": "plugin extension addon odoo",
}
TOPICS = {topic: frozenset(words.split(" ")) for topic, words in _TOPIC_WORDS.items()}
_WORD = re.compile(r"[a-z0-9]+")


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _tags(name: str, content: str) -> list[str]:
    words = set(_WORD.findall(f"{name} {content}".lower()))
    return [topic for topic, keys in TOPICS.items() if words & keys]


def _record(i: int, name: str, content: str) -> dict[str, Any]:
    h = hashlib.sha256(f"{i}:{name}".encode()).digest()
    u = h[0] / 256
    tier = (
        "working"
        if u < 0.05
        else "episodic"
        if u < 0.20
        else "procedural"
        if u < 0.35
        else "semantic"
    )
    tags = _tags(name, content)
    created = START + SPAN * i / ROWS + timedelta(seconds=h[5] * 60)
    created = created.replace(microsecond=0)
    return {
        "id": f"pypi-{i:05d}",
        "namespace": NAMESPACE,
        "content": content,
        "tier": tier,
        "level": "deduced" if h[4] % 4 == 0 else "explicit",
        "summary": name,
        "metadata": {"package": name, "topic": tags[0] if tags else "other", "row": i},
        "tags": tags,
        "importance": round(h[1] / 255, 2),
        "created_at": _iso(created),
        "updated_at": _iso(created),
        "last_accessed_at": _iso(created),
        "access_count": h[2] % 8,
        "valid_from": _iso(created),
        "confidence": round(0.5 + h[3] / 510, 2) if tier in ("semantic", "procedural") else None,
    }


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def build(dataset: Path, out: Path) -> None:
    """Write the sample files into ``out`` from the pypi-100k directory ``dataset``."""
    with (dataset / "texts.jsonl").open(encoding="utf-8") as f:
        texts = [json.loads(line) for line in f]
    vectors = np.load(dataset / "vectors.f16.npy", mmap_mode="r")
    store_vecs = np.asarray(vectors[:ROWS], dtype=np.float16)
    records = [_record(i, t["name"], t["content"]) for i, t in enumerate(texts[:ROWS])]

    # Supersession: a row replaced by its nearest later neighbour.
    v32 = store_vecs.astype(np.float32)
    for i, rec in enumerate(records[:9000]):
        if hashlib.sha256(f"sup:{i}".encode()).digest()[0] % 12 != 0:
            continue
        later = v32[i + 1 :] @ v32[i]
        j = i + 1 + int(np.argmax(later))
        rec["superseded_by"] = records[j]["id"]
        rec["valid_to"] = records[j]["created_at"]

    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    npy = io.BytesIO()
    np.lib.format.write_array(npy, store_vecs, allow_pickle=False)

    split = len(texts) - 1000
    queries = []
    for name in QUERY_NAMES:
        i = next(k for k in range(split, len(texts)) if texts[k]["name"] == name)
        vec = np.asarray(vectors[i], dtype="<f2")
        queries.append(
            {
                "name": name,
                "text": texts[i]["content"],
                "embedding_f16": base64.b64encode(vec.tobytes()).decode("ascii"),
            }
        )

    out.mkdir(parents=True, exist_ok=True)
    (out / "sample.jsonl.gz").write_bytes(_gzip(lines.encode("utf-8")))
    (out / "sample.f16.npy.gz").write_bytes(_gzip(npy.getvalue()))
    (out / "sample_queries.json").write_text(
        json.dumps(
            {"model": "sentence-transformers/all-MiniLM-L6-v2", "queries": queries}, indent=1
        )
        + "\n",
        encoding="utf-8",
    )
    total = sum(p.stat().st_size for p in out.glob("sample*"))
    print(f"wrote {len(records)} rows, {len(queries)} queries to {out} ({total:,} bytes)")


def main() -> None:
    """Parse the command line and build the sample."""
    root = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--dataset", type=Path, default=root.parent / "shared/datasets/pypi-100k")
    p.add_argument("--out", type=Path, default=root / "python/memini/data")
    args = p.parse_args()
    build(args.dataset, args.out)


if __name__ == "__main__":
    main()
