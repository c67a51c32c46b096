"""The model's figures do not change with ``decode.rescore`` (issue 52, item 0): decode and
evaluate once re-ranking with the baseline's n-best and once the model alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipeline import decode, evaluate
from seqcore.artifacts.predictions import Predictions, model_rows_path
from seqcore.config import load_config

#: The model's figures (seqcore/metrics/model_output.py) at the top of metrics.json.
MODEL_KEYS = ("fr_token_accuracy", "fr_accuracy_tokens", "exposure_bias_gap", "failures",
              "length_ratio", "hypothesis_unk", "model_output", "tf_token_accuracy")


def metrics_under(repo: Path, rescore: str) -> dict:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["decode"]["rescore"] = rescore
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    cfg = load_config("params.yaml")
    decode.run(cfg)
    evaluate.run(cfg)
    return json.loads((repo / "reports/metrics.json").read_text())


@pytest.mark.slow
def test_the_models_figures_are_the_same_with_and_without_rescoring(
        result_files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = result_files
    monkeypatch.chdir(repo)
    rescored = metrics_under(repo, "baseline")
    own = Predictions.load(model_rows_path(repo / "predictions/test.jsonl")).rows
    system = Predictions.load(repo / "predictions/test.jsonl").rows
    assert [r.hypothesis for r in own] != [r.hypothesis for r in system]  # two systems
    alone = metrics_under(repo, "none")
    assert not model_rows_path(repo / "predictions/test.jsonl").exists()  # one system
    assert {k: rescored[k] for k in MODEL_KEYS} == {k: alone[k] for k in MODEL_KEYS}
    assert "system_output" in rescored and "system_output" not in alone
    # the model alone's scores are the scores of the run without rescoring
    assert {k: alone[k] for k in ("word_error_rate", "token_error_rate", "exact_match")} == {
        k: alone["model_output"][k] for k in ("word_error_rate", "token_error_rate",
                                              "exact_match")}
    assert rescored["word_error_rate"] != rescored["model_output"]["word_error_rate"]
