"""The RNN language model (seqcore/models/rnnlm.py)."""
from __future__ import annotations

import warnings

import pytest
import torch

from seqcore.models.rnnlm import RNNLM, RNNLMShape
from tests.factories import IDS, tiny_lm

META = torch.device("meta")  # a device without storage, on any machine


def test_the_pad_embedding_is_zero_and_gets_no_gradient() -> None:
    m = tiny_lm("gru").train()
    assert m.embed.weight[IDS.pad].abs().sum() == 0
    tokens = torch.tensor([[IDS.bos, 5, IDS.pad, IDS.pad]])
    logits, _ = m(tokens, m.initial_state(1))
    logits.sum().backward()
    assert m.embed.weight.grad[IDS.pad].abs().sum() == 0
    assert m.embed.weight.grad[5].abs().sum() > 0


def test_a_stacked_lm_drops_out_between_layers_in_training_and_a_single_layer_has_no_such_dropout(
) -> None:
    # torch warns when an RNN of one layer is given inter-layer dropout: it has no layer
    # boundary to drop at; the model passes 0 there
    with warnings.catch_warnings(action="error"):
        RNNLM(RNNLMShape("gru", 12, 8, 8, 1, 0.5, IDS.pad))
        RNNLM(RNNLMShape("lstm", 12, 8, 8, 1, 0.5, IDS.pad))
    torch.manual_seed(0)
    stacked = RNNLM(RNNLMShape("gru", 12, 8, 8, 2, 0.5, IDS.pad))
    x, h0 = torch.randn(1, 6, 8), torch.zeros(2, 1, 8)
    stacked.train()
    assert not torch.equal(stacked.rnn(x, h0)[0], stacked.rnn(x, h0)[0])
    stacked.eval()
    assert torch.equal(stacked.rnn(x, h0)[0], stacked.rnn(x, h0)[0])


@pytest.mark.parametrize("cell,parts", [("gru", 1), ("lstm", 2)])
def test_the_initial_state_is_zero_h_or_h_c_on_the_parameters_device_and_dtype(
        cell: str, parts: int) -> None:
    m = tiny_lm(cell, layers=2, hidden=5)
    state = m.initial_state(3)
    assert len(state) == parts
    assert all(t.shape == (2, 3, 5) and t.dtype == torch.float32 and not t.any() for t in state)
    moved = m.to(device=META, dtype=torch.float64).initial_state(3)
    assert len(moved) == parts
    assert all(t.device == META and t.dtype == torch.float64 for t in moved)


def test_the_lm_refuses_tokens_of_another_batch_than_its_state() -> None:
    m = tiny_lm("gru")
    with pytest.raises(ValueError, match=r"^tokens \(B,K\) and state \(L,B,H\) expected, got "
                                         r"torch.Size\(\[2, 4\]\), torch.Size\(\[1, 3, 8\]\)$"):
        m(torch.full((2, 4), 5), m.initial_state(3))
