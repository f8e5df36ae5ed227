"""Smoke test of an installed wheel: run in a fresh venv that has no Rust toolchain.

Writes, searches (graph, compact scan, keyword), recalls and reopens, and prints the SIMD
kernels chosen at run time. With ``MEMINI_SMOKE_NO_AVX2=1`` (`make wheels` runs it so under
``qemu-x86_64 -cpu Nehalem``) it also checks that no AVX2 kernel was chosen: a wheel built
for the baseline CPU must pick kernels the CPU has, never die of SIGILL.
"""

import os
import tempfile

import numpy as np

import memini
from memini import Filter, Memory, Store

ROWS = 3000  # above the size where a namespace's vectors become an HNSW graph (2048)

assert memini._core.build_profile() == "release"
rng = np.random.default_rng(7)
vectors = rng.standard_normal((ROWS, 16)).astype(np.float32)
with tempfile.TemporaryDirectory() as d:
    with Store.open(d, dims=16, metric="cos") as s:
        s.upsert(Memory(id="a", namespace="t", content="green tea", tags=["t"], embedding=[1] * 16))
        assert s.keyword_search("t", "teas")[0].memory.id == "a"
        s.upsert_many(
            Memory(id=f"r{i}", namespace="n", content=f"row {i}", tags=["odd"] if i % 2 else [],
                   embedding=v)
            for i, v in enumerate(vectors)
        )
        # the graph, then the compact scan or an exact scan under a filter
        assert s.vector_search("n", vectors[10], k=3)[0].memory.id == "r10"
        assert s.vector_search("n", vectors[11], Filter(tags=["odd"]), k=3)[0].memory.id == "r11"
        hits = s.recall("n", "row 12", vectors[12], k=3)
        assert hits[0].memory.id == "r12", hits
        stats = s.stats()
    with Store.open(d) as s:
        assert s.count("n") == ROWS and s.count("t") == 1
        assert s.vector_search("n", vectors[20], k=1)[0].memory.id == "r20"
simd = stats["simd"]
print("simd:", simd, "graphs:", stats["vector_graphs"], "routes:", stats["vector_routes"])
if os.environ.get("MEMINI_SMOKE_NO_AVX2") == "1":
    assert simd["compact_scan"] == "scalar", simd
    # usearch's names of kernels that need AVX2 or later (numkong's x86 targets)
    avx2_and_later = {"haswell", "skylake", "icelake", "genoa", "sapphire", "sapphireamx",
                      "graniteamx", "diamond", "turin", "alder", "sierra"}
    assert simd["vector_graph"] not in avx2_and_later, simd
print("wheel smoke test passed:", memini.__file__)
