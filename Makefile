# mltcp: `make demo` and `make test` each install everything they need on a fresh Debian/Ubuntu.
SHELL := /bin/bash
# Debian's python3 (with --system-site-packages) so that Debian's Mininet module is importable.
PYTHON_SYS ?= /usr/bin/python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-fast bench system venv clean

system:
	$(SUDO) bash scripts/install-system.sh

# a new prebuilt p4tools tarball beside the checkout re-runs the install (install-system.sh)
P4TOOLS_TARBALL := $(wildcard ../shared/tools/p4tools-debian12-amd64.tar.gz)

$(STAMP): pyproject.toml scripts/install-system.sh $(P4TOOLS_TARBALL)
	$(MAKE) system
	$(PYTHON_SYS) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[switch,emulate,kernel,ns3,test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mltcp demo --out out/demo

test: $(STAMP)
	$(SUDO) $(PY) -m pytest -q tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not integration" tests

bench: $(STAMP)
	$(PY) bench/bench_sim.py

clean:
	rm -rf out build *.egg-info .pytest_cache   # .tools (unpacked p4c/BMv2) stays: make system
