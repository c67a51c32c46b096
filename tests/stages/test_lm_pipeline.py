"""The train stage with ``task: lm``: CMUdict documents in, model and perplexities out; a
second run resumes from the final checkpoint."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from seqcore.tasks.lm.documents import cmudict_documents
from tests.factories import REPO, model_file_perplexities
from tests.pipeline_helpers import run_python

pytestmark = pytest.mark.slow  # every test here runs a stage or repro in a subprocess

PARAMS = {
    "task": "lm",
    "data": {"dev_fraction": 0.2, "test_fraction": 0.2},
    "model": {"family": "lstm", "rnn": {"embed_dim": 8, "hidden": 16, "dec_layers": 1}},
    "train": {"batch_size": 2, "max_steps": 6, "bptt_len": 8, "eval_every": 3,
              "checkpoint_every": 3, "schedule": "constant", "lr": 0.01, "warmup_steps": 0,
              "threads": 1, "log_every": 3},
}


def train(work: Path) -> subprocess.CompletedProcess:
    return run_python(work, "-m", "pipeline.train", "--params", str(work / "params.yaml"),
                      env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_lm_train_stage_reports_perplexities_and_resumes_when_run_again(tmp_path: Path) -> None:
    raw = tmp_path / "data/raw/cmudict.dict"
    raw.parent.mkdir(parents=True)
    raw.write_text("".join(f"{c}{w} {c.upper()} AH0\n" for c in "abc"
                           for w in ("x", "yy", "zap", "oo", "ket", "mi") * 3))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    first = train(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "fresh start" in first.stderr and "step 3/6 loss" in first.stderr
    metrics = json.loads((tmp_path / "reports/train_metrics.json").read_text())
    lm = metrics["lm"]
    assert metrics["steps"] == 6 and "selected_step" in metrics
    by_hand = model_file_perplexities(tmp_path / "models/model.pt", cmudict_documents(raw),
                                      0.2, 0.2, PARAMS["train"]["bptt_len"])
    assert {k: lm[k] for k in by_hand} == pytest.approx(by_hand, rel=1e-5)
    log = (tmp_path / "reports/train_log.csv").read_text().splitlines()
    assert log[0].startswith("step,epoch,lr,loss") and len(log) == 1 + 6
    second = train(tmp_path)
    assert second.returncode == 0, second.stderr
    assert "resumed from ckpt-00000006.pt" in second.stderr
    again = json.loads((tmp_path / "reports/train_metrics.json").read_text())
    assert again == metrics
    # the replayed log is the same bytes (no wall-clock column: issue 12)
    assert (tmp_path / "reports/train_log.csv").read_text().splitlines() == log
