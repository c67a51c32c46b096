"""Beam search (seqcore/decoding/beam.py): the hypothesis pool and early stopping."""
from __future__ import annotations

import pytest
import torch

from seqcore.decoding import beam
from seqcore.decoding.beam import BeamSettings, _Pool
from seqcore.decoding.search import Hypothesis
from tests.factories import IDS, tiny_model


def hyp(norm: float) -> Hypothesis:
    return Hypothesis([4], norm * 2, norm, True)


def test_the_pool_s_nth_best_is_the_nth_highest_normalised_score() -> None:
    pool = _Pool([hyp(-0.5), hyp(-0.1), hyp(-0.3)])
    assert [pool.nth_best(n) for n in (1, 2, 3)] == [-0.1, -0.3, -0.5]
    assert pool.nth_best(4) == float("-inf")


def test_an_empty_pool_s_best_is_one_empty_truncated_hypothesis_scoring_minus_inf() -> None:
    assert _Pool([]).best(2) == [Hypothesis([], float("-inf"), float("-inf"), False)]
    pool = _Pool([hyp(-0.5), hyp(-0.1), hyp(-0.1)])
    assert [h.norm_score for h in pool.best(2)] == [-0.1, -0.1]


@pytest.mark.parametrize("norm", ["gnmt", "avg", "none"])
def test_beam_search_stopping_early_returns_what_searching_to_the_cap_returns(
        norm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The early stop (beam._done) ends an example once no live hypothesis can beat its n-th
    # best finished one; too tight a bound stops early. Reference: the stop switched off.
    settings = BeamSettings(beam_size=3, n_best=2, length_norm=norm, alpha=0.6)
    runs = []
    for stop in (True, False):
        if not stop:
            monkeypatch.setattr(beam, "_done", lambda pools, examples, live, *rest: torch.zeros(
                live.shape[0], dtype=torch.bool))
        out = []
        for seed in range(6):
            model = tiny_model(enc_layers=1, dec_layers=1, seed=seed).eval()
            src = torch.randint(4, 10, (4, 5), generator=torch.Generator().manual_seed(seed))
            found = beam.beam_search(model, src, torch.ones_like(src, dtype=torch.bool), IDS,
                                     [3, 5, 8, 8], settings)
            out.append([[(h.tokens, round(h.norm_score, 5)) for h in hyps] for hyps in found])
        runs.append(out)
    assert runs[0] == runs[1]
