# Two entry points (see README): `make run` brings the system up locally, `make test` checks everything.
# Both install what they need: a virtualenv from the pinned lock file and the Go-built binaries (control
# plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok; the OCI registry;
# kustomize; helm, which the operator runs for chart modules), cached in .cache/bin, so only the first
# run builds them (TEST_ASSET_* name prebuilt ones).

PYTHON ?= python3.11
RUN_ARGS ?=
DEMO_ARGS ?=
BENCH_ARGS ?=
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run demo test lint typecheck unit integration binaries bench agent-lock clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
	$(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]'
	touch $(STAMP)

binaries: $(STAMP)
	$(PY) -m tests.controlplane.binaries
	$(PY) -m tests.registry.binaries
	$(PY) -m tests.kustomize.binaries
	$(PY) -m tests.helm.binaries

run: binaries
	$(PY) -m localrun $(RUN_ARGS)

# The module walk-through of the README scripted and timed, with a 30 s listener outage
# (DEMO_ARGS="--demo-outage 5" for a short one); exits 1 if a step failed.
demo: binaries
	$(PY) -m localrun --demo $(DEMO_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: binaries lint typecheck
	test ! -e operator/__init__.py
	$(VENV)/bin/pytest -q -p no:cacheprovider

unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit

bench: binaries
	$(PY) -m benchmarks $(BENCH_ARGS)

# The agent image's dependency pins (agent/requirements-agent.lock), derived from requirements.lock:
# re-run after changing agent/pyproject.toml's dependencies or their versions in requirements.lock.
agent-lock: $(STAMP)
	$(PY) -m tests.agentdist --lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
