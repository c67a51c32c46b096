"""Teacher-forced statistics (seqcore/metrics/teacher.py)."""
from __future__ import annotations

import math

import pytest

from seqcore.metrics.teacher import nll_summary, teacher_forced_stats
from tests.factories import IDS, STATS, dropout_modes, eval_nll, examples, tiny_model


def test_the_nll_summary_divides_by_tokens_and_averages_sequences_that_have_tokens() -> None:
    # 5 nats over 6 tokens; per sequence 2/4 and 3/2, the empty one left out
    assert nll_summary(STATS) == pytest.approx({
        "token_nll": 5 / 6, "perplexity": math.exp(5 / 6), "ppl_denominator_tokens": 6,
        "sequence_mean_nll": (0.5 + 1.5) / 2, "sequences": 2, "tf_token_accuracy": 4 / 6})


def test_evaluation_statistics_run_with_dropout_off() -> None:
    # one layer each way and 16 positions: the smallest Transformer this rule needs
    model = tiny_model(dropout=0.5, enc_layers=1, dec_layers=1, max_len=16).train()
    data = examples(6, seed=4, high=10)
    seen = dropout_modes(model)
    stats = teacher_forced_stats(model, data, IDS, 4)
    assert seen and not any(seen)
    assert model.training  # the caller's mode is restored
    assert sum(s.nll for s in stats.values()) == pytest.approx(eval_nll(model, data), rel=1e-5)
