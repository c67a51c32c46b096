"""The Transformer (seqcore/models/transformer.py) against Vaswani's layers written out by hand."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional

from seqcore.contract import pad_batch
from seqcore.models.transformer import (
    Transformer, TransformerShape, feed_forward, sinusoidal_positions)
from tests.factories import PAD

V = 12


def vaswani_positions(positions: range | list[int], d: int) -> torch.Tensor:
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)); (P, D)."""
    return torch.tensor([[(math.sin if j % 2 == 0 else math.cos)(p / 10000 ** (2 * (j // 2) / d))
                          for j in range(d)] for p in positions])


def test_sinusoidal_positions_are_vaswanis_formula() -> None:
    got = sinusoidal_positions(torch.tensor([0, 1, 2, 7]), 6)
    torch.testing.assert_close(got, vaswani_positions([0, 1, 2, 7], 6), rtol=0, atol=1e-6)


def test_sinusoidal_positions_are_built_on_the_positions_device() -> None:
    assert sinusoidal_positions(torch.arange(4, device="meta"), 6).device.type == "meta"


def test_feed_forward_is_linear_relu_dropout_on_the_hidden_units_linear() -> None:
    ff = feed_forward(4, 8, 0.5).train()
    lin1, lin2 = ff[0], ff[-1]
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(5)
    got = ff(x)
    torch.manual_seed(5)
    hidden = functional.dropout(torch.relu(x @ lin1.weight.T + lin1.bias), 0.5, training=True)
    torch.testing.assert_close(got, hidden @ lin2.weight.T + lin2.bias, rtol=0, atol=1e-6)


def test_embeddings_start_normal_with_std_inverse_sqrt_d_and_a_zero_pad_row() -> None:
    torch.manual_seed(0)
    model = Transformer(TransformerShape(64, 64, 64, 4, 0, 0, 32, 0.0, True, "sinusoidal", False,
                                         8, PAD))
    for table in (model.src_embed.weight, model.tgt_embed.weight):
        assert not table[PAD].any()
        rest = table[1:].detach()
        assert abs(float(rest.mean())) < 0.02 and 0.115 < float(rest.std()) < 0.135


def layer_norm(x: torch.Tensor, ln: nn.LayerNorm) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def attention(att: nn.Module, xq: torch.Tensor, xkv: torch.Tensor, allowed: torch.Tensor,
              heads: int) -> torch.Tensor:
    """Vaswani's multi-head attention by hand; allowed (B, T, S) bool."""
    b, t, d = xq.shape
    dh = d // heads

    def split(y: torch.Tensor) -> torch.Tensor:
        return y.view(b, y.shape[1], heads, dh).transpose(1, 2)  # (B, H, L, Dh)

    q = split(xq @ att.q.weight.T + att.q.bias)
    kv = xkv @ att.kv.weight.T + att.kv.bias
    k, v = split(kv[..., :d]), split(kv[..., d:])
    scores = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(~allowed[:, None], -math.inf)
    y = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, d)
    return y @ att.out.weight.T + att.out.bias


def block(x: torch.Tensor, f, residual: nn.Module, pre_ln: bool) -> torch.Tensor:
    """Pre-LN x + f(ln(x)) or post-LN ln(x + f(x))."""
    if pre_ln:
        return x + f(layer_norm(x, residual.norm))
    return layer_norm(x + f(x), residual.norm)


def ffn(ff: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ ff[0].weight.T + ff[0].bias) @ ff[3].weight.T + ff[3].bias


def reference_logits(model: Transformer, src: torch.Tensor, mask: torch.Tensor,
                     tgt: torch.Tensor) -> torch.Tensor:
    """The Transformer's teacher-forced logits recomputed with plain torch ops from its
    weights; the positions come from the formula (or the learned table's rows)."""
    s = model.shape
    d, heads = s.d_model, s.n_heads

    def embed(table: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        pos = model.pos.weight[:n] if s.positions == "learned" else vaswani_positions(range(n), d)
        return table.weight[tokens] * math.sqrt(d) + pos

    x = embed(model.src_embed, src)
    enc_allowed = mask[:, None, :].expand(-1, src.shape[1], -1)
    for layer in model.encoder:
        x = block(x, lambda h: attention(layer.attn, h, h, enc_allowed, heads),
                  layer.attn_residual, s.norm_first)
        x = block(x, lambda h: ffn(layer.ff, h), layer.ff_residual, s.norm_first)
    memory = layer_norm(x, model.enc_norm) if s.norm_first else x
    t = tgt.shape[1]
    y = embed(model.tgt_embed, tgt)
    causal = torch.ones(t, t, dtype=torch.bool).tril()[None].expand(tgt.shape[0], -1, -1)
    cross_allowed = mask[:, None, :].expand(-1, t, -1)
    for layer in model.decoder:
        y = block(y, lambda h: attention(layer.self_attn, h, h, causal, heads),
                  layer.self_attn_residual, s.norm_first)
        y = block(y, lambda h: attention(layer.cross_attn, h, memory, cross_allowed, heads),
                  layer.cross_attn_residual, s.norm_first)
        y = block(y, lambda h: ffn(layer.ff, h), layer.ff_residual, s.norm_first)
    if s.norm_first:
        y = layer_norm(y, model.dec_norm)
    return y @ model.proj.weight.T  # the output projection has no bias


@pytest.mark.parametrize(("norm_first", "positions", "tie", "heads"), [
    (True, "sinusoidal", True, 2),
    (False, "learned", False, 4),
    (True, "learned", False, 4),
    (False, "sinusoidal", True, 2),
])
def test_transformer_logits_equal_vaswanis_layers_recomputed_from_its_weights(
        norm_first: bool, positions: str, tie: bool, heads: int) -> None:
    """Pre-LN (Xiong et al., 2020: a final norm per stack) or post-LN (Vaswani), eval mode
    (dropout 0.1 off), teacher-forced and step-wise; LayerNorms given trained-like affines."""
    torch.manual_seed(0)
    model = Transformer(TransformerShape(V, V, 16, heads, 2, 2, 32, 0.1, norm_first, positions,
                                         tie, 16, PAD, "math")).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for ln in (m for m in model.modules() if isinstance(m, nn.LayerNorm)):
            ln.weight.copy_(torch.rand(ln.weight.shape, generator=g) + 0.5)
            ln.bias.copy_(torch.randn(ln.bias.shape, generator=g) * 0.3)
        src, mask = pad_batch([[4, 5, 6, 7, 8], [9, 4, 5]], PAD)
        tgt = torch.tensor([[2, 6, 7, 8], [2, 10, 11, 5]])
        expected = reference_logits(model, src, mask, tgt)
        torch.testing.assert_close(model(src, mask, tgt), expected, rtol=0, atol=2e-5)
        memory = model.encode(src, mask)
        state = model.start(memory)
        for i in range(tgt.shape[1]):
            logits, state = model.step(tgt[:, i], memory, state)
            torch.testing.assert_close(logits, expected[:, i], rtol=0, atol=2e-5)
