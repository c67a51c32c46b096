"""Recompute the prediction-derived part of metrics.json from a predictions file alone.

An audit compares every key returned here with the same key of ``reports/metrics.json``:
the two must be equal. The teacher-forced figures (perplexity, teacher-forced accuracy and
the exposure-bias gap) need the model and are not part of this recomputation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from seqcore.artifacts.predictions import Predictions
from seqcore.config import Config
from seqcore.metrics.evaluation import (
    EvalSpec, evaluate_predictions, prediction_metrics)
from seqcore.metrics.bootstrap import Resampling
from seqcore.metrics.failures import FailureRules
from seqcore.nulls import null_undefined


def eval_spec(cfg: Config, illegal_symbol: Callable[[str], bool] | None) -> EvalSpec:
    """The evaluation settings of a config's ``evaluate`` section, with the task's target
    alphabet check (``illegal_symbol``; None when the task has none: seqcore.tasks)."""
    ev = cfg.evaluate
    return EvalSpec(ev.bucket_edges,
                    FailureRules(ev.repeat_ngram, ev.repeat_times, ev.examples_per_failure),
                    ev.group_by, illegal_symbol, resampling(cfg))


def resampling(cfg: Config) -> Resampling:
    """The bootstrap settings of the ``evaluate`` section."""
    ev = cfg.evaluate
    return Resampling(ev.bootstrap_samples, ev.bootstrap_seed, ev.confidence)


def recompute_metrics(predictions_path: str | Path, settings: Config,
                      illegal_symbol: Callable[[str], bool] | None) -> dict[str, Any]:
    """metrics.json keys that follow from the predictions alone (nested like the file).

    Args:
        predictions_path: a ``predictions/<split>.jsonl`` file.
        settings: the validated config (its ``evaluate`` section is used).
        illegal_symbol: the task's target alphabet check (seqcore.tasks), or None.
    """
    rows = Predictions.load(predictions_path).rows
    # no intervals: they are not part of prediction_metrics (the evaluate stage adds them)
    spec = replace(eval_spec(settings, illegal_symbol), resampling=Resampling(samples=0))
    return null_undefined(prediction_metrics(evaluate_predictions(rows, spec)))
