"""Teacher-forced statistics (seqcore/metrics/teacher.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from seqcore.contract import IGNORE_INDEX
from seqcore.data.examples import Example
from seqcore.metrics.teacher import TeacherStats, nll_summary, teacher_forced_stats
from seqcore.sequences import make_batch
from tests.factories import IDS, examples, tiny_model


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
def dropout_modes(model: nn.Module) -> list[bool]:
    """Record ``training`` of every dropout module at each call (forward pre-hooks)."""
    seen: list[bool] = []
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.register_forward_pre_hook(lambda mod, args: seen.append(mod.training))
    return seen


def eval_nll(model: nn.Module, data: list[Example]) -> float:
    m = copy.deepcopy(model).eval()
    b = make_batch(data, IDS)
    with torch.no_grad():
        logp = torch.log_softmax(m(b.src, b.src_mask, b.tf.inputs), -1)
    valid = b.tf.labels != IGNORE_INDEX
    return float(-logp.gather(-1, b.tf.labels.clamp(min=0)[..., None])[..., 0][valid].sum())


def test_evaluation_statistics_run_with_dropout_off() -> None:
    model, data = tiny_model(dropout=0.5, **SMALL).train(), examples(6, seed=4, high=10)
    seen = dropout_modes(model)
    stats = teacher_forced_stats(model, data, IDS, 4)
    assert seen and not any(seen)
    assert model.training  # the caller's mode is restored
    assert sum(s.nll for s in stats.values()) == pytest.approx(eval_nll(model, data), rel=1e-5)
