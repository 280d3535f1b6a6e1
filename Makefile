# Set-up and entry points. `make demo` and `make test` start from a fresh Debian machine:
# system packages (apt-get, when run as root), a .venv, speechmt installed into it.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is pinned to the version the machine provides (a local CPU wheel here); a GPU machine can set
# TORCH_SPEC=torch (or any pin) before its first `make setup`. An installed torch is never replaced.
TORCH_SPEC ?= torch==2.13.0
DEMO_DIR ?= exp/demo

.PHONY: setup system-deps python-deps test test-fast demo bench clean

setup: system-deps python-deps

system-deps:
	@bash scripts/install_system_deps.sh

python-deps: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/install_python_deps.sh
	@bash scripts/install_python_deps.sh "$(PYTHON)" "$(VENV)" "$(TORCH_SPEC)"
	@touch $@

test: setup
	SPEECHMT_REQUIRE_TORCHAUDIO=1 $(BIN)/python -m pytest -q tests

test-fast: python-deps
	$(BIN)/python -m pytest -q -m "not slow" tests

demo: setup
	$(BIN)/speechmt synth --corpus mustc --size tiny --out $(DEMO_DIR)/mustc-mini
	$(BIN)/speechmt prepare mustc --root $(DEMO_DIR)/mustc-mini --tgt-lang de --out $(DEMO_DIR)/data/mustc-en-de
	@echo "Manifests, features and the preparation summary are in $(DEMO_DIR)/data/mustc-en-de"

bench: python-deps
	$(BIN)/python benchmarks/bench_fbank.py

clean:
	rm -rf $(VENV) exp .pytest_cache
