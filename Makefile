# strom: make help lists the targets.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
export VIRTUAL_ENV := $(abspath $(VENV))

.DEFAULT_GOAL := help
.PHONY: help venv build test test-rust test-python soak lint clippy fmt docs docs-serve bench bench-sidebyside demo wheel-check clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.dev: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=25.1"
	$(PY) -m pip install -q --group dev
	touch $@

venv: $(VENV)/.dev ## create the dev virtualenv with the test and lint tools

build: venv ## build the native module (release) into the dev virtualenv
	$(VENV)/bin/maturin develop --release --quiet

test: build test-rust test-python ## build, then run the Rust and Python test suites

test-rust: ## cargo test of the pure-Rust core
	cargo test -p strom-core --quiet

# Test processes (pytest-xdist): each worker starts its own brokers, Spark
# session and reference JVM when its first test needs them.
PYTEST_WORKERS ?= 2
test-python: ## pytest (all suites; nothing is skipped) in PYTEST_WORKERS processes
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal --durations=15

soak: build ## the long differential run against Kafka Streams (5,000 cases per family; STROM_DIFF_SEED=... reproduces one)
	$(PY) -m pytest -q -m differential --soak tests/differential

lint: build ## ruff, ruff format, mypy, stubtest, cargo fmt, clippy
	$(VENV)/bin/ruff check python tests benches examples
	$(VENV)/bin/ruff format --check python tests benches examples
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest strom._core $(if $(wildcard stubtest-allowlist.txt),--allowlist stubtest-allowlist.txt)
	cargo fmt --all --check
	$(MAKE) --no-print-directory clippy

# In the release profile, clippy's check build shares the build scripts' work
# (the vendored OpenSSL, curl and librdkafka, most of a cold build) with
# `make build`, where the dev profile would compile them a second time.
clippy: venv ## cargo clippy -D warnings over the workspace, all targets (part of lint)
	cargo clippy --workspace --all-targets --release --quiet -- -D warnings

fmt: venv ## format Python and Rust code in place
	$(VENV)/bin/ruff format python tests benches examples
	$(VENV)/bin/ruff check --fix python tests benches examples
	cargo fmt --all

# mkdocs 1.6 and Material 9.x print a banner about their successors on every build.
export NO_MKDOCS_2_WARNING := 1

docs: venv ## build the documentation site into site/ (mkdocs build --strict, as CI)
	$(PY) -m pip install -q --group docs
	$(VENV)/bin/mkdocs build --strict

docs-serve: venv ## serve the documentation site on http://127.0.0.1:8000 while editing
	$(PY) -m pip install -q --group docs
	$(VENV)/bin/mkdocs serve

bench: build ## run the benchmarks and write docs/benchmarks.md
	$(PY) -m pytest benches --benchmark-enable --benchmark-json=.benchmarks/latest.json -q
	$(PY) benches/report.py .benchmarks/latest.json docs/benchmarks.md

SIDEBYSIDE_ARGS ?=
bench-sidebyside: build ## strom vs Kafka Streams, Quix, Bytewax, Faust (~30 min; SIDEBYSIDE_ARGS=...)
	$(PY) -m pip install -q --group bench
	$(PY) -m benches.sidebyside $(SIDEBYSIDE_ARGS)

demo: ## install strom into a fresh virtualenv with pip and run the word-count demo
	$(PYTHON) -m venv .venv-demo
	.venv-demo/bin/pip install -q .
	.venv-demo/bin/strom demo $(DEMO_ARGS)

wheel-check: venv ## build the release wheel and import it from a fresh virtualenv
	rm -rf dist .venv-wheel
	$(VENV)/bin/maturin build --release --quiet --out dist
	$(PYTHON) -m venv .venv-wheel
	.venv-wheel/bin/pip install -q dist/*.whl
	cd /tmp && $(CURDIR)/.venv-wheel/bin/python -c "import strom, strom._core; print('wheel ok: strom', strom.__version__)"

clean: ## remove build outputs and virtualenvs
	rm -rf target dist site .venv .venv-demo .venv-wheel .benchmarks
