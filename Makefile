# Set-up and entry points. `make demo` and `make test` start from a fresh Debian machine:
# system packages (apt-get, when run as root), a .venv, speechmt installed into it.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is pinned to the version the machine provides (a local CPU wheel here); a GPU machine can set
# TORCH_SPEC=torch (or any pin) before its first `make setup`. An installed torch is never replaced.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup system-deps python-deps test test-fast lint demo bench peers clean

setup: system-deps python-deps

system-deps:
	@bash scripts/install_system_deps.sh

python-deps: $(VENV)/.installed
	@bash scripts/install_whisper_base.sh "$(VENV)"
	@bash scripts/install_gemma.sh "$(VENV)"

$(VENV)/.installed: pyproject.toml scripts/install_python_deps.sh
	@bash scripts/install_python_deps.sh "$(PYTHON)" "$(VENV)" "$(TORCH_SPEC)"
	@touch $@

test: setup lint
	SPEECHMT_REQUIRE_TORCHAUDIO=1 $(BIN)/python -m pytest -q tests

# ruff (lint rules and the formatter's style in pyproject.toml) over the code, and mypy over the public API
# (speechmt/__init__, api*); `$(BIN)/ruff format speechmt speechmt_corpora tests benchmarks scripts` fixes the style
lint: python-deps
	$(BIN)/ruff check speechmt speechmt_corpora tests benchmarks scripts
	$(BIN)/ruff format --check speechmt speechmt_corpora tests benchmarks scripts
	$(BIN)/mypy

test-fast: python-deps
	$(BIN)/python -m pytest -q -m "not slow" tests

# Translates the example clips with the bundled English->German model (no download, no training).
demo: setup
	@echo "speechmt translate examples/*.flac  (bundled model: speechmt/pretrained/MODEL_CARD.md)"
	@$(BIN)/speechmt translate examples/*.flac --timing | awk -F'\t' \
	    'NR == FNR { ref[$$1] = $$3; next } { f = $$1; sub(".*/", "", f); \
	     printf "%s  (%s)\n  speechmt:  %s\n  reference: %s\n", f, $$3, $$2, ref[f] }' examples/examples.tsv -

bench: python-deps
	$(BIN)/python benchmarks/bench_fbank.py

# The peer benchmark environment .venv-peers (faster-whisper + Whisper base), apart from $(VENV).
peers:
	@bash benchmarks/peers/setup_whisper.sh "$(PYTHON)" .venv-peers

clean:
	rm -rf $(VENV) exp .pytest_cache
