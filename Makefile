# CI and humans call the same targets. `make help` lists them.
VENV ?= .venv
PY := $(VENV)/bin/python
export CARGO_TARGET_DIR ?= $(CURDIR)/target

.PHONY: help venv install test test-rust test-py lint bench demo wheel clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

venv: $(PY)  ## create the virtualenv and install the Python dev dependencies
	$(PY) -m pip install -q -e '.[dev]' --no-build-isolation --no-deps 2>/dev/null || true
	$(PY) -m pip install -q maturin numpy prometheus_client pytest pytest-timeout pytest-benchmark hypothesis

install: venv  ## build the Rust core (release) and install the package into the venv
	$(VENV)/bin/maturin develop --release -q

test-rust:  ## cargo tests of the core, on the same release target
	cargo test --release -q

test-py: install  ## pytest suite
	$(PY) -m pytest -q

test: install test-rust  ## everything CI runs
	$(PY) -m pytest -q

demo: install  ## the main job: import a sample into ./memini-data and recall from it
	$(VENV)/bin/memini demo
