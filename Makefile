# mltcp: on a fresh Debian/Ubuntu, `make demo` installs what the demo needs (python3 + venv + the
# base package) and `make test` everything (every extra, compilers, Mininet, BPF tools).
SHELL := /bin/bash
# Debian's python3 (with --system-site-packages) so that Debian's Mininet module is importable.
PYTHON_SYS ?= /usr/bin/python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Two stamps: the demo's venv (the base package) and the full one (every extra, the test suite).
# `make test` after `make demo` upgrades the same venv; the full stamp implies the demo's.
STAMP_DEMO := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-fast lint format bench system system-demo venv venv-demo clean

system:
	$(SUDO) bash scripts/install-system.sh

system-demo:
	$(SUDO) bash scripts/install-system.sh --demo

# a new prebuilt p4tools tarball beside the checkout re-runs the install (install-system.sh)
P4TOOLS_TARBALL := $(wildcard ../shared/tools/p4tools-debian12-amd64.tar.gz)

$(STAMP_DEMO): pyproject.toml scripts/install-system.sh
	$(MAKE) system-demo
	$(PYTHON_SYS) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(STAMP_DEMO)

$(STAMP): pyproject.toml scripts/install-system.sh $(P4TOOLS_TARBALL)
	$(MAKE) system
	$(PYTHON_SYS) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[switch,emulate,kernel,ns3,test]'
	touch $(STAMP) $(STAMP_DEMO)

venv-demo: $(STAMP_DEMO)

venv: $(STAMP)

demo: $(STAMP_DEMO)
	$(VENV)/bin/mltcp demo --out out/demo

test: $(STAMP) lint
	$(SUDO) $(PY) -m pytest -q tests

# ruff's lint and format check (pyproject.toml [tool.ruff]); `make format` rewrites the tree
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff format .

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not integration" tests

bench: $(STAMP)
	$(PY) bench/bench_sim.py

clean:
	rm -rf out build *.egg-info .pytest_cache   # .tools (unpacked p4c/BMv2) stays: make system
