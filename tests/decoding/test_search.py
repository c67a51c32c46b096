"""The shared search checks (seqcore/decoding/search.py): inputs, length caps, masking."""
from __future__ import annotations

import re

import pytest
import torch

from seqcore.decoding.search import Masking, check_inputs, length_caps, mask_scores
from tests.factories import tiny_model


def test_the_search_refuses_a_training_model_a_non_bool_mask_and_mismatched_shapes() -> None:
    model = tiny_model(enc_layers=1, dec_layers=1)
    src = torch.ones(2, 4, dtype=torch.long)
    with pytest.raises(RuntimeError, match=r"^decode with model.eval\(\): dropout must be off$"):
        check_inputs(model.train(), src, torch.ones(2, 4, dtype=torch.bool))
    model.eval()
    for mask in (torch.ones(2, 4, dtype=torch.long), torch.ones(2, 5, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r"^expected \(B,S\) src and bool mask, got "):
            check_inputs(model, src, mask)


def test_length_caps_need_one_cap_of_at_least_1_per_example() -> None:
    caps = length_caps([3, 1], 2, torch.device("cpu"))
    assert caps.tolist() == [3, 1] and caps.dtype == torch.long
    assert length_caps([], 0, torch.device("cpu")).tolist() == []
    for bad in ([3, 3, 3], [3, 0]):
        with pytest.raises(ValueError, match=rf"^need 2 caps >= 1, got {re.escape(str(bad))}$"):
            length_caps(bad, 2, torch.device("cpu"))


def test_masking_bans_its_tokens_in_every_row() -> None:
    logp = torch.zeros(2, 6)
    out = mask_scores(logp, torch.zeros(2, 0, dtype=torch.long), Masking(banned=(1, 4)), eos=3)
    assert torch.isinf(out[:, [1, 4]]).all() and (out[:, [0, 2, 3, 5]] == 0).all()
