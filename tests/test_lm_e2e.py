"""`task: lm` through the real `dvc repro`: train, the lm decode/evaluate branches, MLflow."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import copy_repo
from tests.test_pipeline_e2e import dvc

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LM_PARAMS = {
    "task": "lm",
    "data": {"max_pairs": 300, "dev_fraction": 0.005, "test_fraction": 0.005},
    "model": {"family": "gru", "rnn": {"embed_dim": 8, "hidden": 16}},
    # data.max_pairs keeps CMUdict's first 300 entries: two documents (' and a), two streams.
    "train": {"batch_size": 2, "max_steps": 4, "bptt_len": 16, "eval_every": 4,
              "checkpoint_every": 2, "schedule": "constant", "lr": 0.01, "warmup_steps": 0},
}


def test_lm_task_reproduces_and_reports_carried_and_reset_perplexity(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path, LM_PARAMS)
    out = dvc(repo, "repro")
    assert "task lm: nothing to decode" in out
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    results = json.loads((repo / "reports/results.json").read_text())
    assert results["task"] == "lm" and results["signature"].startswith("task:lm|")
    trained = json.loads((repo / "reports/train_metrics.json").read_text())
    # The evaluate stage's perplexity is exp(NLL per token) of the selected model: the dev
    # NLL per token that the training loop measured for it, through another code path.
    assert trained["selected_step"] == trained["best_step"] == LM_PARAMS["train"]["max_steps"]
    assert metrics["dev_ppl_carried"] == pytest.approx(math.exp(trained["best_dev_nll"]),
                                                       rel=1e-5)
    # and the model file it read is the one the train stage reported on, for both splits
    assert metrics == pytest.approx(trained["lm"], rel=1e-6)
    assert min(metrics["dev_tokens"], metrics["test_tokens"]) > 0
    assert "up to date" in dvc(repo, "status")
