"""Greedy decoding (seqcore/decoding/greedy.py)."""
from __future__ import annotations

import math

import torch

from seqcore.decoding.greedy import greedy
from tests.factories import IDS, tiny_model


def test_greedy_hypotheses_are_unnormalised_their_norm_score_is_their_score() -> None:
    model = tiny_model(enc_layers=1, dec_layers=1).eval()
    src = torch.randint(4, 10, (3, 5), generator=torch.Generator().manual_seed(0))
    out = greedy(model, src, torch.ones_like(src, dtype=torch.bool), IDS, 4)
    assert [h.norm_score for h in out] == [h.score for h in out]
    assert all(math.isfinite(h.score) for h in out)
