# Two commands do all the set-up (see README "Quick start"):
#   make repro   - venv + locked deps + `dvc repro` on the default params
#   make test    - venv + locked deps + the whole test suite
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# DVC stages run `python -m pipeline.<stage>`: put the venv first on PATH.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: repro test audit mutate install clean-venv

install: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.lock
	$(BIN)/pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

repro: $(STAMP)
	dvc repro

test: $(STAMP)
	python -m pytest -q

# Check the current result end to end (see README "Audit and experiments").
audit: $(STAMP)
	python -m pipeline.audit

# Break every contract rule and parameter wiring on purpose (tools/mutate.py); the tests
# must catch each one (slow, not part of CI; see docs/rules.md).
mutate: $(STAMP)
	python tools/mutate.py

clean-venv:
	rm -rf $(VENV)
