# wva-adapter developer entry points. Every install step lives here or in pyproject.toml.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PB_DIR := adapter/servers/_keda_pb
PB_STAMP := $(PB_DIR)/externalscaler_pb2.py

.PHONY: install run test unit lint bench bench-sim proto clean fmt prometheus valgrind e2e-bins e2e e2e-kind
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

install: $(STAMP) $(PB_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,sim]'
	touch $(STAMP)

# gRPC stubs are generated from proto/externalscaler.proto, never hand-written or committed.
$(PB_STAMP): proto/externalscaler.proto $(STAMP)
	mkdir -p $(PB_DIR)
	$(BIN)/python -m grpc_tools.protoc -Iadapter/servers/_keda_pb=proto \
		--python_out=. --pyi_out=. --grpc_python_out=. proto/externalscaler.proto
	touch $(PB_DIR)/__init__.py $(PB_STAMP)

proto: $(PB_STAMP)

run: install
	$(BIN)/wva-adapter demo

lint: install
	$(BIN)/ruff check adapter tests
	$(BIN)/ruff format --check adapter tests
	$(BIN)/mypy adapter
	$(BIN)/lint-imports

# Debian's Prometheus (2.42) for tests/e2e_prometheus, which fails (never skips) without it.
prometheus:
	@command -v prometheus >/dev/null || test -x /usr/bin/prometheus || \
		($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends prometheus)

unit: install prometheus
	$(BIN)/pytest -q -m "not e2e_k8s"

# End to end on a real control plane (tests/e2e_k8s, docs/deployment.md): kube-apiserver, kube-controller-manager,
# kubectl and etcd of one pinned Kubernetes release, the KEDA client harness, and helm (the chart tests), built with
# `go` from the Go module proxy into $(KUBE_E2E_CACHE) (outside the repository); each build is skipped when its
# output exists. Cold ~9 min on 2 cores, cached ~0 s. Needs Go >= 1.26 on PATH.
KUBE_E2E_CACHE ?= $(HOME)/.cache/kube-e2e
export KUBE_E2E_CACHE

e2e-bins:
	bash hack/build-k8s-bins.sh
	bash hack/build-kedaclient.sh >/dev/null
	bash hack/build-helm.sh

e2e: install prometheus e2e-bins
	$(BIN)/pytest -q -s -m e2e_k8s tests/e2e_k8s tests/e2e_serve

# The same scenarios against a kind cluster (needs docker and kind; not run in CI). See hack/e2e-kind.sh.
e2e-kind: install prometheus e2e-bins
	bash hack/e2e-kind.sh

test: lint unit e2e

# valgrind (Debian's) for make bench's instruction count of decide (tests/count_instructions.py).
valgrind:
	@command -v valgrind >/dev/null && command -v callgrind_control >/dev/null || \
		($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends valgrind)

bench: install valgrind
	$(BIN)/python -m tests.bench

# The decision-quality benchmark: every policy on every workload -> docs/benchmarks/decision-quality.md
bench-sim: install
	$(BIN)/python -m tests.bench_sim
	$(BIN)/python -m tests.bench_floor
	$(BIN)/python -m tests.bench_forecast

fmt: install
	$(BIN)/ruff format adapter tests
	$(BIN)/ruff check --fix adapter tests

clean:
	rm -rf $(VENV) $(PB_DIR) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
