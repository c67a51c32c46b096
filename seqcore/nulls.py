"""Undefined numbers as JSON ``null`` with a reason: metrics files are strict JSON (issue 13).

Internally an undefined rate or mean is NaN (``scores.ratio``: a rate over zero items is never
reported as 0), which keeps arithmetic, tables and plots simple. JSON has no NaN, and a bare
``NaN`` breaks most readers, so before a metrics mapping is written each non-finite number
becomes ``null`` and a sibling key ``<name>_null_reason`` says why.
"""

from __future__ import annotations

import math
from typing import Any

NULL_REASON_SUFFIX = "_null_reason"

#: Why a metric can be undefined, by its key (the last part of its dotted name).
REASONS: dict[str, str] = {
    "exact_match": "no examples in the split",
    "exact_match_multi_ref": "no examples in the split",
    "word_error_rate": "no examples in the split",
    "token_error_rate": "the references have no tokens",
    "token_error_rate_multi_ref": "the closest references have no tokens",
    "char_error_rate": "the references have no characters",
    "fr_token_accuracy": "no examples in the split",
    "tf_token_accuracy": "no target tokens to score",
    "token_nll": "no target tokens to score",
    "perplexity": "no target tokens to score",
    "sequence_mean_nll": "no non-empty target sequences",
    "exposure_bias_gap": "teacher-forced or free-running accuracy is undefined",
    "best_dev_nll": "no dev evaluation ran (fewer steps than train.eval_every)",
    "best_dev_wer": "no dev decoding ran (train.dev_decode_words is 0, or the task decodes "
                    "nothing)",
    "selected_dev_wer": "the selected step decoded no dev words (train.dev_decode_words is 0, "
                        "or the task decodes nothing)",
    "selected_dev_per": "the selected step decoded no dev words (train.dev_decode_words is 0, "
                        "or the task decodes nothing)",
}
_RATE_OF = {"repeated_ngrams": "no hypothesis has an n-gram of evaluate.repeat_ngram tokens"}
DEFAULT_REASON = "undefined: a rate or mean over zero items"


def reason_for(path: tuple[str, ...]) -> str:
    """The reason recorded for an undefined value at nested key ``path``."""
    name = path[-1]
    for suffix in ("dev_", "test_"):  # dev_perplexity, test_token_nll, ...
        if name.startswith(suffix) and name[len(suffix):] in REASONS:
            return REASONS[name[len(suffix):]]
    if len(path) > 1 and path[-2] in _RATE_OF:
        return _RATE_OF[path[-2]]
    if len(path) > 1 and path[-2] == "length_ratio":
        return "no examples in the split"
    if len(path) > 2 and path[-3] == "interval":
        return "no resample gave a defined value (no rows, no resamples, or undefined metric)"
    return REASONS.get(name, DEFAULT_REASON)


def null_undefined(tree: dict[str, Any], _path: tuple[str, ...] = ()) -> dict[str, Any]:
    """Copy of a nested mapping: each NaN/inf number becomes None plus ``<key>_null_reason``.

    Lists are walked too (their items get None without a reason key: a list has no sibling).
    """
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, float) and not math.isfinite(value):
            out[key] = None
            out[f"{key}{NULL_REASON_SUFFIX}"] = reason_for((*_path, key))
        else:
            out[key] = _walk(value, (*_path, key))
    return out


def _walk(value: Any, path: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return null_undefined(value, path)
    if isinstance(value, (list, tuple)):
        return [None if isinstance(v, float) and not math.isfinite(v) else _walk(v, path)
                for v in value]
    return value
