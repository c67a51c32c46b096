"""Transformer encoder-decoder (Vaswani et al., 2017) with pre-LN by default (Xiong et al., 2020).

Attention uses ``scaled_dot_product_attention`` with boolean masks from seqcore.contract, with
the kernel PyTorch picks (``attention_kernel: auto``; a fused flash kernel on CPU) or its
unfused reference computation (``math``: QK^T, softmax, AV as plain matmuls). For the short
sequences of G2P the math kernel trains faster on CPU (the fused CPU kernel's backward is
slow: 33 % of a bf16 step at 2x2-256; docs/quality.md); the two differ in rounding, so the
choice is part of the model contract.
Incremental decoding keeps per-layer self-attention keys/values and computes the encoder
memory's cross-attention keys/values once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Literal, Self

import torch
from torch import nn
from torch.nn import functional
from torch.nn.attention import SDPBackend, sdpa_kernel

from seqcore.contract import attention_mask, causal_mask
from seqcore.models.base import EncoderDecoder


@dataclass(frozen=True)
class TransformerShape:
    """Sizes of a Transformer encoder-decoder."""

    src_vocab: int
    tgt_vocab: int
    d_model: int
    n_heads: int
    enc_layers: int
    dec_layers: int
    d_ff: int
    dropout: float
    norm_first: bool
    positions: Literal["sinusoidal", "learned"]
    tie_embeddings: bool
    max_len: int
    pad_id: int
    attention_kernel: Literal["auto", "math"] = "auto"


@dataclass
class TransformerMemory:
    """Encoder output. states: (B, S, D); mask: (B, S) bool, True on real tokens."""

    states: torch.Tensor
    mask: torch.Tensor

    def reorder(self, index: torch.Tensor) -> Self:
        return TransformerMemory(self.states.index_select(0, index), self.mask.index_select(0, index))


@dataclass
class TransformerCache:
    """Per-layer keys/values, each (B, H, T_or_S, Dh); cross ones are computed once."""

    self_k: list[torch.Tensor]
    self_v: list[torch.Tensor]
    cross_k: list[torch.Tensor]
    cross_v: list[torch.Tensor]

    @property
    def length(self) -> int:
        return self.self_k[0].shape[2] if self.self_k else 0

    def reorder(self, index: torch.Tensor) -> Self:
        def pick(ts: list[torch.Tensor]) -> list[torch.Tensor]:
            return [t.index_select(0, index) for t in ts]

        return TransformerCache(pick(self.self_k), pick(self.self_v), pick(self.cross_k),
                                pick(self.cross_v))


def sinusoidal_positions(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """(T,) int positions -> (T, D) sinusoidal encodings (sin on even, cos on odd dims)."""
    half = torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device)
    freq = torch.exp(-math.log(10000.0) * half / dim)
    angles = positions.float()[:, None] * freq[None, :]
    out = torch.zeros(positions.shape[0], dim, device=positions.device)
    out[:, 0::2] = torch.sin(angles)
    out[:, 1::2] = torch.cos(angles)
    return out


class Attention(nn.Module):
    """Multi-head attention split into key/value projection and attending, for caching."""

    def __init__(self, d_model: int, n_heads: int, dropout: float,
                 kernel: Literal["auto", "math"] = "auto") -> None:
        super().__init__()
        self.n_heads, self.dropout, self.kernel = n_heads, dropout, kernel
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S, D) -> keys and values, each (B, H, S, Dh)."""
        k, v = self.kv(x).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def forward(
        self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Queries from x (B, T, D) over k, v (B, H, S, Dh) with mask (B, 1, T, S) -> (B, T, D)."""
        q = self._heads(self.q(x))
        p = self.dropout if self.training else 0.0
        with sdpa_kernel(SDPBackend.MATH) if self.kernel == "math" else nullcontext():
            y = functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        b, h, t, dh = y.shape
        return self.out(y.transpose(1, 2).reshape(b, t, h * dh))  # (B, T, D)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return x.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2)  # (B, H, S, Dh)


class Residual(nn.Module):
    """Pre-LN ``x + f(ln(x))`` or post-LN ``ln(x + f(x))`` around a sublayer.

    It holds the norm and dropout, not the sublayer: a layer registers its sublayers first
    and their residuals after them, so the parameter order (which fixes the summation order
    of the global gradient norm) is the same as in earlier versions.
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.norm_first = norm_first

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.norm_first else x

    def post(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        y = x + self.drop(fx)
        return y if self.norm_first else self.norm(y)


def feed_forward(d_model: int, d_ff: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(d_ff, d_model))


KeysValues = tuple[torch.Tensor, torch.Tensor]


class EncoderLayer(nn.Module):
    """Self-attention block, then feed-forward block."""

    def __init__(self, s: TransformerShape) -> None:
        super().__init__()
        self.attn = Attention(s.d_model, s.n_heads, s.dropout, s.attention_kernel)
        self.ff = feed_forward(s.d_model, s.d_ff, s.dropout)
        self.attn_residual = Residual(s.d_model, s.dropout, s.norm_first)
        self.ff_residual = Residual(s.d_model, s.dropout, s.norm_first)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, S, D), mask (B, 1, S, S) -> (B, S, D)."""
        h = self.attn_residual.pre(x)
        k, v = self.attn.keys_values(h)
        x = self.attn_residual.post(x, self.attn(h, k, v, mask))
        return self.ff_residual.post(x, self.ff(self.ff_residual.pre(x)))


class DecoderLayer(nn.Module):
    """Causal self-attention block, cross-attention block, then feed-forward block."""

    def __init__(self, s: TransformerShape) -> None:
        super().__init__()
        self.self_attn = Attention(s.d_model, s.n_heads, s.dropout, s.attention_kernel)
        self.cross_attn = Attention(s.d_model, s.n_heads, s.dropout, s.attention_kernel)
        self.ff = feed_forward(s.d_model, s.d_ff, s.dropout)
        self.self_attn_residual = Residual(s.d_model, s.dropout, s.norm_first)
        self.cross_attn_residual = Residual(s.d_model, s.dropout, s.norm_first)
        self.ff_residual = Residual(s.d_model, s.dropout, s.norm_first)

    def self_keys_values(self, x: torch.Tensor) -> KeysValues:
        """Self-attention keys and values of the layer input x (B, T, D): (B, H, T, Dh) each."""
        return self.self_attn.keys_values(self.self_attn_residual.pre(x))

    def cross_keys_values(self, states: torch.Tensor) -> KeysValues:
        """Cross-attention keys and values of the encoder states (B, S, D): (B, H, S, Dh)."""
        return self.cross_attn.keys_values(states)

    def forward(
        self, x: torch.Tensor, self_kv: KeysValues, self_mask: torch.Tensor,
        cross_kv: KeysValues, cross_mask: torch.Tensor,
    ) -> torch.Tensor:
        """x (B, T, D); self_kv over all visible target positions; cross_kv over the source."""
        x = self.self_attn_residual.post(
            x, self.self_attn(self.self_attn_residual.pre(x), *self_kv, self_mask))
        x = self.cross_attn_residual.post(
            x, self.cross_attn(self.cross_attn_residual.pre(x), *cross_kv, cross_mask))
        return self.ff_residual.post(x, self.ff(self.ff_residual.pre(x)))


class Transformer(EncoderDecoder):
    """Transformer encoder-decoder returning logits."""

    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.shape = shape
        d = shape.d_model
        self.src_embed = nn.Embedding(shape.src_vocab, d, padding_idx=shape.pad_id)
        self.tgt_embed = nn.Embedding(shape.tgt_vocab, d, padding_idx=shape.pad_id)
        self.pos = nn.Embedding(shape.max_len, d) if shape.positions == "learned" else None
        self.drop = nn.Dropout(shape.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(shape) for _ in range(shape.enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(shape) for _ in range(shape.dec_layers))
        # Pre-LN needs a final norm on each stack; post-LN layers already end normalised.
        self.enc_norm = nn.LayerNorm(d) if shape.norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(d) if shape.norm_first else nn.Identity()
        self.proj = nn.Linear(d, shape.tgt_vocab, bias=False)
        # N(0, d^-1/2) embeddings, scaled by sqrt(d) on input (Vaswani et al. 3.4; fairseq):
        # unit-scale inputs, and unit-scale logits when the output projection is tied.
        for table in (self.src_embed, self.tgt_embed):
            nn.init.normal_(table.weight, mean=0.0, std=d**-0.5)
            nn.init.zeros_(table.weight[shape.pad_id])
        if shape.tie_embeddings:
            self.proj.weight = self.tgt_embed.weight

    @property
    def max_positions(self) -> int:
        return self.shape.max_len

    def _embed(self, table: nn.Embedding, tokens: torch.Tensor, offset: int) -> torch.Tensor:
        last = offset + tokens.shape[1] - 1  # known on the host: nothing read back
        if tokens.shape[1] and last >= self.shape.max_len:
            raise ValueError(f"position {last} >= max_len {self.shape.max_len}")
        positions = torch.arange(offset, offset + tokens.shape[1], device=tokens.device)
        pos = self.pos(positions) if self.pos is not None else sinusoidal_positions(
            positions, self.shape.d_model)
        return self.drop(table(tokens) * math.sqrt(self.shape.d_model) + pos[None])

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> TransformerMemory:
        x = self._embed(self.src_embed, src, 0)
        mask = attention_mask(src_mask, src.shape[1], causal=False)
        for layer in self.encoder:
            x = layer(x, mask)
        return TransformerMemory(self.enc_norm(x), src_mask)

    def _decoder_stack(
        self, x: torch.Tensor, attend: Callable[[int, KeysValues], KeysValues],
        self_mask: Callable[[KeysValues], torch.Tensor],
        cross_kv: Callable[[int, DecoderLayer], KeysValues], cross_mask: torch.Tensor,
    ) -> torch.Tensor:
        """The decoder layers over x (B, T, D), then the final norm and projection.

        Args:
            attend: (layer index, the new positions' self keys/values) -> the keys/values
                to attend to (the new ones alone, or appended to a cache).
            self_mask: the self-attention mask for those keys/values, (1, 1, T, T_all).
            cross_kv: the layer's cross-attention keys/values of the encoder memory.

        Returns:
            (B, T, V) logits.
        """
        for i, layer in enumerate(self.decoder):
            kv = attend(i, layer.self_keys_values(x))
            x = layer(x, kv, self_mask(kv), cross_kv(i, layer), cross_mask)
        return self.proj(self.dec_norm(x))

    def decode(self, tgt_in: torch.Tensor, memory: TransformerMemory) -> torch.Tensor:
        x = self._embed(self.tgt_embed, tgt_in, 0)
        t = tgt_in.shape[1]
        causal = causal_mask(t, tgt_in.device)[None, None]  # (1, 1, T, T)
        cross_mask = attention_mask(memory.mask, t, causal=False)
        return self._decoder_stack(
            x, lambda i, kv: kv, lambda kv: causal,
            lambda i, layer: layer.cross_keys_values(memory.states), cross_mask)

    def start(self, memory: TransformerMemory) -> TransformerCache:
        cross = [layer.cross_keys_values(memory.states) for layer in self.decoder]
        b = memory.states.shape[0]
        empty = memory.states.new_zeros(b, self.shape.n_heads, 0,
                                        self.shape.d_model // self.shape.n_heads)
        n = len(self.decoder)
        return TransformerCache([empty] * n, [empty] * n, [k for k, _ in cross],
                                [v for _, v in cross])

    def step(
        self, tokens: torch.Tensor, memory: TransformerMemory, state: TransformerCache
    ) -> tuple[torch.Tensor, TransformerCache]:
        offset = state.length
        x = self._embed(self.tgt_embed, tokens[:, None], offset)  # (B, 1, D)
        cross_mask = attention_mask(memory.mask, 1, causal=False)
        new_k: list[torch.Tensor] = []
        new_v: list[torch.Tensor] = []

        def append(i: int, kv: KeysValues) -> KeysValues:
            k = torch.cat([state.self_k[i], kv[0]], dim=2)
            v = torch.cat([state.self_v[i], kv[1]], dim=2)
            new_k.append(k)
            new_v.append(v)
            return k, v

        def visible(kv: KeysValues) -> torch.Tensor:  # one new position sees every cached one
            return torch.ones(1, 1, 1, kv[0].shape[2], dtype=torch.bool, device=x.device)

        logits = self._decoder_stack(
            x, append, visible, lambda i, layer: (state.cross_k[i], state.cross_v[i]),
            cross_mask)[:, 0]  # (B, V)
        return logits, TransformerCache(new_k, new_v, state.cross_k, state.cross_v)
