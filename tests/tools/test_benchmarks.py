"""The analytic FLOP count behind benchmarks/train.py's MFU (issue 17) agrees with torch's
FLOP counter on a real forward and backward pass."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.train import forward_flops
from seqcore.config import config_from_dict
from seqcore.models import build_model

SRC_VOCAB, TGT_VOCAB, B, S, T = 20, 30, 4, 5, 6


def counted_and_analytic(model_section: dict) -> tuple[int, float]:
    """FlopCounterMode's count of one training pass and 3 x the analytic forward count."""
    cfg = config_from_dict({"model": model_section}).model
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB, 0, 40)
    src = torch.randint(4, SRC_VOCAB, (B, S))
    tgt = torch.randint(4, TGT_VOCAB, (B, T))
    with FlopCounterMode(display=False) as counter:
        model(src, torch.ones(B, S, dtype=torch.bool), tgt).sum().backward()
    return counter.get_total_flops(), 3 * forward_flops(
        cfg, TGT_VOCAB, torch.full((B,), float(S)), torch.full((B,), float(T)))


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize(("dropout", "kernel"), [(0.1, "auto"), (0.0, "math")])
def test_transformer_flop_count_equals_torch_flop_counter(tie: bool, dropout: float,
                                                          kernel: str) -> None:
    counted, analytic = counted_and_analytic({"family": "transformer", "transformer": {
        "d_model": 16, "n_heads": 2, "enc_layers": 2, "dec_layers": 3, "d_ff": 24,
        "dropout": dropout, "tie_embeddings": tie, "attention_kernel": kernel}})
    # Dropout > 0 (as in training) or attention_kernel math takes SDPA's math path, whose
    # matmuls the counter sees; auto without dropout runs the CPU flash-attention kernel,
    # which the counter does not see.
    assert counted == analytic


@pytest.mark.parametrize("attention", ["dot", "general", "additive"])
def test_gru_flop_count_matches_torch_flop_counter(attention: str) -> None:
    # (nn.LSTM runs as one fused CPU op that the counter does not see: no LSTM case.)
    counted, analytic = counted_and_analytic({"family": "gru", "rnn": {
        "embed_dim": 8, "hidden": 16, "enc_layers": 2, "dec_layers": 2, "dropout": 0.0,
        "attention": attention}})
    # The backward skips the gradient of the encoder's zero initial state (one recurrent
    # product per layer and direction): under 2% here, less at real lengths.
    assert 0.98 * analytic <= counted <= analytic
