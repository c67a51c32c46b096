"""`task: lm` through the real `dvc repro`: train, the lm decode/evaluate branches, MLflow,
and the audit of the result."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.pipeline_helpers import copy_repo, dvc, result_runs, run_audit

pytestmark = pytest.mark.e2e

LM_PARAMS = {
    "task": "lm",
    "data": {"max_pairs": 300, "dev_fraction": 0.005, "test_fraction": 0.005},
    "model": {"family": "gru", "rnn": {"embed_dim": 8, "hidden": 16}},
    # data.max_pairs keeps CMUdict's first 300 entries: two documents (' and a), two streams.
    "train": {"batch_size": 2, "max_steps": 4, "bptt_len": 16, "eval_every": 4,
              "checkpoint_every": 2, "schedule": "constant", "lr": 0.01, "warmup_steps": 0},
}


@pytest.fixture(scope="module")
def lm_result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The lm result of one `dvc repro` and its output (tests copy the folder to change it)."""
    repo = copy_repo(tmp_path_factory.mktemp("lm"), LM_PARAMS)
    return repo, dvc(repo, "repro")


def test_lm_task_reproduces_and_reports_carried_and_reset_perplexity(
        lm_result: tuple[Path, str]) -> None:
    repo, out = lm_result
    assert "task lm: nothing to decode" in out
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    results = json.loads((repo / "reports/results.json").read_text())
    assert results["task"] == "lm" and results["signature"].startswith("task:lm|")
    trained = json.loads((repo / "reports/train_metrics.json").read_text())
    # The evaluate stage's perplexity is exp(NLL per token) of the selected model: the dev
    # NLL per token that the training loop measured for it, through another code path.
    assert trained["selected_step"] == trained["best_step"] == LM_PARAMS["train"]["max_steps"]
    assert metrics["dev_ppl_carried"] == pytest.approx(math.exp(trained["best_dev_nll"]), rel=1e-5)
    # and the model file it read is the one the train stage reported on, for both splits
    assert set(metrics) == set(trained["lm"]) | {"interval"}
    assert {k: metrics[k] for k in trained["lm"]} == pytest.approx(trained["lm"], rel=1e-6)
    assert min(metrics["dev_tokens"], metrics["test_tokens"]) > 0
    # each perplexity has its interval over the split's documents (two here), holding it
    ppl = {k for k in metrics if "_ppl_" in k}
    assert len(ppl) == 4 and set(metrics["interval"]) == ppl
    for key in ppl:
        bounds = metrics["interval"][key]
        assert bounds["low"] <= metrics[key] <= bounds["high"], (key, bounds, metrics[key])
    assert results["interval_signature"] == "ci:95|bs:1000|rs:12345|by:document"
    assert "|decode:none|ci:95|bs:1000|rs:12345|by:document|fmt:" in results["signature"]
    report = (repo / "reports/report.md").read_text()
    assert "| test_ppl_carried |" in report and "resamples of the split's documents" in report
    # the MLflow run has the bounds as metrics and the interval signature as a tag
    (run,) = result_runs(repo, "seqcore-lm")[1]
    logged = {k: v for k, v in run.data.metrics.items() if k.startswith("interval.")}
    assert logged == pytest.approx({f"interval.{k}.{side}": metrics["interval"][k][side]
                                    for k in ppl for side in ("low", "high")}, rel=1e-12)
    assert run.data.tags["metrics.interval_signature"] == results["interval_signature"]
    assert "up to date" in dvc(repo, "status")


def test_the_audit_passes_an_lm_result_and_names_a_perplexity_forged_with_its_lock(
        lm_result: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A consistent forger: a better test perplexity in every report, then `dvc commit`. The
    # redone evaluation and the MLflow run's metrics.json name it; every other check passes:
    # the LM's contract, counts (nothing decoded), the redone stages, the training record and
    # its replay (issue 33: the streams' cursor and carried RNN state resume bit for bit).
    repo = shutil.copytree(lm_result[0], tmp_path / "copy", symlinks=True)
    for name in ("metrics.json", "headline.json"):
        path = repo / "reports" / name
        values = json.loads(path.read_text())
        key = "test_ppl_carried" if name == "metrics.json" else "ppl"
        values[key] = values[key] / 2
        path.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")
    dvc(repo, "commit", "-f")
    report = run_audit(repo, monkeypatch, replay=3)
    assert report.failed() == ["evaluate redone", "mlflow run"], report.render()
    assert report.status["training replay"] == "ok"
    assert "test_ppl_carried" in report.render() and "could not run" not in report.render()
    assert set(report.status.values()) == {"ok", "MISMATCH"}, report.render()
