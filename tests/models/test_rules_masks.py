"""Mask rules: causal in every layer (2), masks act on keys and PAD queries reach no
reduction (3), fully masked rows never produce NaN (6)."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional

from seqcore.contract import IGNORE_INDEX, attention_mask, masked_softmax, pad_batch
from seqcore.losses import sequence_loss
from seqcore.models.rnn import RNNSeq2Seq
from seqcore.models.transformer import Transformer
from tests.factories import FAMILIES, PAD, tiny_model


def layer_outputs(model: torch.nn.Module, src: torch.Tensor, mask: torch.Tensor,
                  tgt: torch.Tensor) -> list[torch.Tensor]:
    """The (B, T, ...) output of every decoder layer, then the logits."""
    layers = list(model.decoder) if isinstance(model, Transformer) else [model.decoder]
    seen: list[torch.Tensor] = []

    def keep(_m: torch.nn.Module, _i: object, out: object) -> None:
        seen.append(out[0] if isinstance(out, tuple) else out)  # RNNs return (out, state)

    hooks = [layer.register_forward_hook(keep) for layer in layers]
    try:
        logits = model(src, mask, tgt)
    finally:
        for h in hooks:
            h.remove()
    assert len(seen) == len(layers)
    return [*seen, logits]


@pytest.mark.parametrize("family", FAMILIES)
def test_causal_mask_future_tokens_change_no_earlier_output_in_any_layer(family: str) -> None:
    model = tiny_model(family)
    src, mask = pad_batch([[4, 5, 6], [7, 8]], PAD)
    tgt = torch.tensor([[2, 4, 5, 6, 7], [2, 8, 9, 10, 11]])
    base = layer_outputs(model, src, mask, tgt)
    for t in range(tgt.shape[1] - 1):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.tensor([9, 4])[:, None]  # a different future
        other = layer_outputs(model, src, mask, changed)
        for depth, (a, b) in enumerate(zip(base, other)):
            torch.testing.assert_close(b[:, : t + 1], a[:, : t + 1], rtol=0, atol=1e-6,
                                       msg=f"layer {depth}, t={t}")
            # the future is visible from position t+1 on: the check could fail
            assert not torch.allclose(b[:, t + 1], a[:, t + 1]), f"layer {depth}, t={t}"


def test_masks_act_on_keys_pad_key_gets_zero_weight() -> None:
    key_mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    allowed = attention_mask(key_mask, queries=3, causal=False)  # (B, 1, T, S)
    scores = torch.randn(2, 1, 3, 4)
    weights = masked_softmax(scores, allowed)
    assert (weights[0, ..., 2:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1, 3))
    # scaled_dot_product_attention with the same mask ignores the PAD keys' values entirely
    q, k, v = torch.randn(3, 2, 1, 4, 8).unbind(0)
    out = functional.scaled_dot_product_attention(q[:, :, :3], k, v, attn_mask=allowed)
    real = key_mask[:, None, :, None]  # (B, 1, S, 1): junk in row 0's PAD keys and values
    k_junk, v_junk = torch.where(real, k, -1e4), torch.where(real, v, 1e4)
    out_junk = functional.scaled_dot_product_attention(q[:, :, :3], k_junk, v_junk,
                                                       attn_mask=allowed)
    torch.testing.assert_close(out_junk, out)


@pytest.mark.parametrize("family", FAMILIES)
def test_masks_act_on_keys_source_pad_content_is_never_read(family: str) -> None:
    model = tiny_model(family)
    src, mask = pad_batch([[4, 5, 6, 7], [8, 9]], PAD)
    tgt = torch.tensor([[2, 4, 5], [2, 6, 7]])
    junk = src.masked_fill(~mask, 11)  # real-looking tokens where the mask says PAD
    torch.testing.assert_close(model(src, mask, tgt), model(junk, mask, tgt), rtol=0, atol=1e-6)
    if isinstance(model, RNNSeq2Seq):
        weights = model.attend(torch.randn(2, 3, model.shape.hidden), model.encode(src, mask))
        assert (weights[1, :, 2:] == 0).all()


def test_masks_act_on_keys_pad_query_positions_reach_no_reduction() -> None:
    """Outputs at unlabelled (PAD) query positions change no loss sum, count or gradient."""
    labels = torch.tensor([[5, 6, 3], [7, 3, IGNORE_INDEX]])
    logits = torch.randn(2, 3, 9)
    junk = logits.clone()
    junk[1, 2] = torch.tensor([float("nan"), float("inf")] + [-float("inf")] * 7)
    junk.requires_grad_(True)
    for norm in ("token-mean", "sequence-mean", "sum"):
        ref = sequence_loss(logits, labels, norm, 0.1, (0, 2))
        got = sequence_loss(junk, labels, norm, 0.1, (0, 2))
        torch.testing.assert_close(got.total, ref.total)
        torch.testing.assert_close(got.nll, ref.nll)
        assert (got.tokens, got.sequences) == (5, 2)
        junk.grad = None
        got.total.backward()
        assert torch.isfinite(junk.grad).all()
        assert (junk.grad[1, 2] == 0).all()


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
def test_fully_masked_rows_never_nan_in_masked_softmax(dtype: torch.dtype) -> None:
    scores = torch.randn(2, 3, 4).to(dtype)
    allowed = torch.tensor([[False] * 4, [True, False, False, False]])[:, None, :]
    weights = masked_softmax(scores, allowed)
    assert torch.isfinite(weights.float()).all()
    assert (weights[1, :, 1:] == 0).all()


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("family", FAMILIES)
def test_fully_masked_rows_never_nan_in_models(family: str, dtype: torch.dtype) -> None:
    """An empty source (every key masked) gives finite logits, in fp32 and under bf16."""
    model = tiny_model(family)
    src, mask = pad_batch([[], [4, 5, 6]], PAD)
    tgt = torch.tensor([[2, 4, 5], [2, 6, PAD]])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        logits = model(src, mask, tgt)
        memory = model.encode(src, mask)
        step_logits, _ = model.step(tgt[:, 0], memory, model.start(memory))
    assert torch.isfinite(logits.float()).all()
    assert torch.isfinite(step_logits.float()).all()
