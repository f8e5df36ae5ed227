"""Smoke test of an installed wheel: run in a fresh venv that has no Rust toolchain."""

import tempfile

import numpy as np

import memini
from memini import Filter, Memory, Store

assert memini._core.build_profile() == "release"
with tempfile.TemporaryDirectory() as d:
    with Store.open(d, dims=4, metric="cos") as s:
        s.upsert(Memory(id="a", namespace="n", content="green tea", tags=["t"], embedding=[1, 0, 0, 0]))
        assert s.vector_search("n", np.array([1, 0, 0, 0]), Filter(tags=["t"]))[0].memory.id == "a"
        assert s.keyword_search("n", "teas")[0].memory.id == "a"
    with Store.open(d) as s:
        assert s.count("n") == 1
print("wheel smoke test passed:", memini.__file__)
