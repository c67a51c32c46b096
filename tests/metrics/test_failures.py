"""Failure flags (seqcore/metrics/failures.py): empty, truncated, repeated, length ratios."""
from __future__ import annotations

import math
from pathlib import Path

from seqcore.artifacts.predictions import PredictionRow
from seqcore.config import config_from_dict
from seqcore.metrics.failures import FailureRules, failure_modes, has_loop, ngrams
from tests.factories import evaluated_failures, make_rows

#: (id, hypothesis, eos, expected flags) with evaluate.repeat_ngram 2 and repeat_times 3.
FAILURE_ROWS = [
    ("empty", "", True, {"empty"}),
    ("truncated", "K AE", False, {"truncated"}),
    ("bigram-x3", "AH B AH B AH B", True, {"repeated"}),  # (AH B) three times back to back
    ("bigram-x2", "AH B AH B", True, set()),  # twice: just below repeat_times
    ("unigram-x3", "K K K", True, {"repeated"}),
    ("unigram-x2", "K K T", True, set()),
    ("trigram-x3", "AH B K AH B K AH B K", True, set()),  # n-gram longer than repeat_ngram
    ("apart", "K T K T S K T", True, set()),  # (K T) three times, not back to back
    ("clean", "D AO G", True, set()),
]


def failure_rows() -> list[PredictionRow]:
    return make_rows([(id_, id_, "D AO G", hyp, eos, None) for id_, hyp, eos, _ in FAILURE_ROWS])


def test_empty_truncated_and_repeated_rows_get_exactly_their_flags(tmp_path: Path) -> None:
    cfg = config_from_dict({"task": "g2p", "evaluate": {"examples_per_failure": 20}})
    got = evaluated_failures(failure_rows(), cfg, tmp_path)
    n = len(FAILURE_ROWS)
    for kind in ("empty", "truncated", "repeated", "illegal"):
        ids = [id_ for id_, _, _, flags in FAILURE_ROWS if kind in flags]
        assert got["ids"][kind] == ids, kind
        assert got["metrics"][kind] == {"count": len(ids), "rate": len(ids) / n}, kind
    assert got["metrics"]["truncated"]["count"] == 1 and got["metrics"]["repeated"]["count"] == 2


def test_repeat_ngram_and_repeat_times_set_the_repeated_flag(tmp_path: Path) -> None:
    # repeat_ngram 3 also sees (AH B K) x3; repeat_times 2 also sees the rows repeated twice
    # (and K T K T at the start of "apart"); repeat_times 4 sees none (none repeats 4 times).
    cases = {(3, 3): ["bigram-x3", "unigram-x3", "trigram-x3"],
             (2, 2): ["bigram-x3", "bigram-x2", "unigram-x3", "unigram-x2", "apart"],
             (2, 4): []}
    for (ngram, times), ids in cases.items():
        cfg = config_from_dict({"evaluate": {"repeat_ngram": ngram, "repeat_times": times,
                                             "examples_per_failure": 20}})
        got = evaluated_failures(failure_rows(), cfg, tmp_path)
        assert got["ids"]["repeated"] == ids, (ngram, times)


def test_length_ratios_count_strictly_below_half_and_strictly_above_one_and_a_half() -> None:
    rules = FailureRules(repeat_ngram=2, repeat_times=3, examples=1)
    rows = make_rows([(str(i), str(i), ref, hyp, True, None) for i, (ref, hyp) in enumerate(
        [("a b", "a"), ("a b", "a b c"), ("a b", "a b"), ("a b c", "a")])])
    got = failure_modes(rows, rules, None)["length_ratio"]  # ratios 0.5, 1.5, 1, 1/3
    assert got["below_0.5"] == 0.25 and got["above_1.5"] == 0.0
    assert got["median"] == 0.75
    assert math.isnan(failure_modes([], rules, None)["length_ratio"]["median"])


def test_ngrams_are_counted_at_every_start() -> None:
    assert ngrams(["a", "b", "a", "b"], 2) == {("a", "b"): 2, ("b", "a"): 1}
    assert ngrams(["a"], 2) == {}


def test_a_loop_at_the_very_end_of_the_output_is_found() -> None:
    assert has_loop(["x", "a", "a", "a"], n=1, times=3)
    assert has_loop(["x", "a", "b", "a", "b", "a", "b"], n=2, times=3)
    assert not has_loop(["x", "a", "b", "a", "b", "a"], n=2, times=3)
