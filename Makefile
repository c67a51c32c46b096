# Two commands do all the set-up (see README "Quick start"):
#   make repro   - venv + locked deps + `dvc repro` on the default params
#   make test    - venv + locked deps + the whole test suite
#   make test-fast - the tests not marked slow (docs/testing.md)
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Which torch build (locks/torch-$(TORCH).txt): cuda where `nvidia-smi -L` lists a GPU, else
# cpu. Override with `make TORCH=cpu test` (docs/scale-out.md).
TORCH ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)
TORCH_LOCK := locks/torch-$(TORCH).txt
# DVC stages run `python -m pipeline.<stage>`: put the venv first on PATH.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: repro relock test test-fast audit mutate mutate-generated full install clean-venv gpu-check

install: $(STAMP)

$(STAMP): requirements.lock $(TORCH_LOCK) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.lock
	$(BIN)/pip install --disable-pip-version-check -q --retries 2 -r $(TORCH_LOCK)
	$(BIN)/pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# `dvc repro`, with the evaluation run (once) even where DVC finds it current: in a fresh
# clone its outs are the committed reports, which match their lock, so plain `dvc repro`
# would recompute no figure (and log no MLflow run). Scoring again makes a clean `git status`
# the check of every committed number, and logs the result's run in this store. validate
# first, as `dvc repro` runs it; the last line runs any stage the others did not reach.
repro: $(STAMP)
	dvc repro validate
	dvc repro decode
	dvc repro --force --single-item evaluate
	dvc repro

# After a code change that must leave every output as it was: dvc repro, then prove each
# out of dvc.lock unchanged (tools/relock.py; exit 1 naming any out that moved).
relock: $(STAMP)
	python tools/relock.py

# A pytest worker per core, each test single-threaded; a file's tests share a worker, so its
# module fixtures are built once (docs/testing.md).
test: $(STAMP)
	python -m pytest -q -n auto --dist loadfile --durations=30

# The inner loop: every test not marked slow (no dvc repro, servers or subprocess training;
# docs/testing.md). `make test` (CI) still runs everything.
test-fast: $(STAMP)
	python -m pytest -q -n auto --dist loadfile -m "not slow"

# The one device check on a GPU machine (issue 53; docs/benchmarks.md): cuda tests, throughput,
# a train-stage run with its ledger replay, decode speed; one Markdown table, < 8 minutes.
gpu-check: $(STAMP)
	python -m benchmarks.gpu --out gpu-check.md

# Check the current result end to end (see README "Audit and experiments").
audit: $(STAMP)
	python -m pipeline.audit

# Break every contract rule and parameter wiring on purpose (tools/mutate.py); the tests
# must catch each one (slow, not part of CI; see docs/rules.md).
mutate: $(STAMP)
	python tools/mutate.py

# Generated mutants (issue 32): mutmut 3 over the modules in pyproject.toml [tool.mutmut],
# each mutant tested by the fast tests that reach it; 6,244 of 6,573 killed (95.0 %) in the
# first three tranches, 658 of 722 (91.1 %) in the fourth, 597 of 630 in the fifth, 173 of
# 194 in the sixth, and
# every survivor with the reason it is equivalent or out of the fast tier's reach is in
# docs/rules.md. Installs the pinned tool first (locks/mutate.txt); slow (over an hour on
# 2 cores), not part of CI. `mutmut results` lists the survivors, `mutmut show NAME` one.
mutate-generated: $(STAMP)
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -r locks/mutate.txt
	$(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut results

# The `full` profile (issues 17 and 28; docs/quality.md): a 3+3-layer d=256 Transformer,
# 12,000 steps (the 18,000-step run's dev NLL was lowest at 12,000-12,500 and flat after),
# rescoring the Phonetisaurus baseline's 10-best like the default, with the beam, alpha and
# weight `python -m pipeline.tune` chose on dev for this model (docs/full-profile/2026-12-05/).
# bf16 where the CPU has avx512_bf16 (native bf16 matmuls: about 80 min of training on 2 AMD
# EPYC cores, 1 h 52 min on 2 Intel Xeon cores), fp32
# elsewhere (bf16 is emulated there, about 20x slower); `make full FULL_AMP=none` forces
# fp32. A DVC experiment from the committed default, so `dvc exp show` sets it beside the
# default run and MLflow records it as its own run; record in docs/full-profile/.
FULL_AMP ?= $(shell grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null && echo bf16 || echo none)
# CPU bf16 runs oneDNN kernels chosen by the CPU: no portable profile pins them, so a bf16
# full run trains with native kernels (reproducible on this CPU kind only; issue 49).
FULL_KERNELS ?= $(if $(filter bf16,$(FULL_AMP)),native,portable)
FULL := -S model.transformer.d_model=256 -S model.transformer.d_ff=1024 \
	-S model.transformer.enc_layers=3 -S model.transformer.dec_layers=3 \
	-S train.max_steps=12000 -S train.warmup_steps=1000 -S train.lr=0.002 \
	-S train.amp=$(FULL_AMP) -S train.cpu_kernels=$(FULL_KERNELS) \
	-S decode.beam_size=3 -S decode.alpha=1.0 -S decode.rescore_weight=0.5
full: $(STAMP)
	dvc exp run -n full $(FULL)

clean-venv:
	rm -rf $(VENV)
