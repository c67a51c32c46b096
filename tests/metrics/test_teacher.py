"""Teacher-forced statistics (seqcore/metrics/teacher.py)."""

from __future__ import annotations

import math

import pytest

from seqcore.metrics.teacher import TeacherStats, nll_summary, teacher_forced_stats
from tests.factories import IDS, dropout_modes, eval_nll, examples, tiny_model


# -- issue 32, third mutant tranche; was tests/test_pins_metrics.py -------------------------------

# --- the teacher-forced summary and metrics.json's model part -------------------------------
STATS = [TeacherStats(2.0, 4, 3), TeacherStats(3.0, 2, 1), TeacherStats(0.0, 0, 0)]


def test_the_nll_summary_divides_by_tokens_and_averages_sequences_that_have_tokens() -> None:
    # 5 nats over 6 tokens; per sequence 2/4 and 3/2, the empty one left out
    assert nll_summary(STATS) == pytest.approx({
        "token_nll": 5 / 6, "perplexity": math.exp(5 / 6), "ppl_denominator_tokens": 6,
        "sequence_mean_nll": (0.5 + 1.5) / 2, "sequences": 2, "tf_token_accuracy": 4 / 6})


# -- rules checked where they take effect; was tests/test_callsites.py ----------------------------

#: One layer each way and 16 positions: the smallest Transformer these rules need.
SMALL = {"enc_layers": 1, "dec_layers": 1, "max_len": 16}


# -- eval mode in every no-gradient pass behind a reported number ------------------------------


def test_evaluation_statistics_run_with_dropout_off() -> None:
    model, data = tiny_model(dropout=0.5, **SMALL).train(), examples(6, seed=4, high=10)
    seen = dropout_modes(model)
    stats = teacher_forced_stats(model, data, IDS, 4)
    assert seen and not any(seen)
    assert model.training  # the caller's mode is restored
    assert sum(s.nll for s in stats.values()) == pytest.approx(eval_nll(model, data), rel=1e-5)
