"""Strict JSON everywhere: an undefined metric is ``null`` with a reason, never a bare NaN, and
the JSON writer refuses NaN outright (issue 13)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from seqcore.artifacts.base import write_json
from seqcore.config import config_from_dict
from seqcore.g2p import is_illegal_phoneme
from seqcore.artifacts.predictions import PredictionRow, Predictions
from seqcore.nulls import null_undefined
from seqcore.metrics.recompute import recompute_metrics


def test_an_undefined_metric_is_null_with_a_reason(tmp_path: Path) -> None:
    # single-token hypotheses: no bigram exists, so the repeated-bigram rate is 0 / 0
    path = tmp_path / "test.jsonl"
    Predictions([PredictionRow(str(i), str(i), f"w{i}", "AH", "<unk>", [1], ["<unk>"], -1.0, -1.0,
                               1, True, []) for i in range(3)]).save(path)
    metrics = recompute_metrics(path, config_from_dict({}), is_illegal_phoneme)
    rep = metrics["failures"]["repeated_ngrams"]
    assert rep == {"count": 0, "ngrams": 0, "rate": None, "rate_null_reason":
                   "no hypothesis has an n-gram of evaluate.repeat_ngram tokens"}
    json.dumps(metrics, allow_nan=False)  # nothing else is undefined or non-finite


def test_nulls_keep_defined_values_and_name_each_undefined_one() -> None:
    tree = {"test_perplexity": math.nan, "bleu": 12.5, "length_ratio": {"median": math.inf},
            "edges": [1.0, math.nan], "n": 0, "ok": True, "s": "x"}
    assert null_undefined(tree) == {
        "test_perplexity": None, "test_perplexity_null_reason": "no target tokens to score",
        "bleu": 12.5, "length_ratio": {"median": None,
                                       "median_null_reason": "no examples in the split"},
        "edges": [1.0, None], "n": 0, "ok": True, "s": "x"}


def test_the_json_writer_refuses_nan(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_json(tmp_path / "m.json", {"x": math.nan})
    write_json(tmp_path / "m.json", null_undefined({"x": math.nan}))
    assert json.loads((tmp_path / "m.json").read_text())["x"] is None


def test_a_non_finite_score_in_a_predictions_row_is_written_as_null(tmp_path: Path) -> None:
    row = PredictionRow("1", "g", "cat", "K AE T", "K AE T", [5, 6, 7], ["K", "AE", "T"],
                        -math.inf, math.nan, 3, True, [{"score": -math.inf, "text": "K"}])
    Predictions([row]).save(tmp_path / "p.jsonl")
    line = (tmp_path / "p.jsonl").read_text()
    assert "NaN" not in line and "Infinity" not in line
    back = json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in {line}"))
    assert (back["score"], back["norm_score"], back["nbest"][0]["score"]) == (None, None, None)
    assert back["hypothesis"] == "K AE T"
