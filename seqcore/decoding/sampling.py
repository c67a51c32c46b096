"""Ancestral sampling with temperature, top-k and top-p, reproducible per example.

Batch invariance: each example owns a ``torch.Generator`` seeded from sha256(seed, example
id), and draws its uniforms for all of its steps up front (as many as its own length cap).
At step t the token is found by inverse-CDF lookup of the example's t-th uniform in the
processed distribution. The output of an example therefore depends only on the seed, its id
and the model, never on the batch size or on the other examples in the batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from seqcore.config import DecodeConfig
from seqcore.contract import SpecialIds
from seqcore.decoding.processors import temperature, top_k, top_p
from seqcore.decoding.search import Chooser, Hypothesis, Masking, length_caps, run_single
from seqcore.models.base import EncoderDecoder


@dataclass(frozen=True)
class SamplingSettings:
    """How the next-token distribution is shaped before drawing, and the seed.

    Attributes:
        temperature: > 0; logits are divided by it.
        top_k: keep the k most probable tokens (0 = all).
        top_p: keep the smallest set whose probability reaches p (1 = all).
        seed: combined with each example id to seed that example's generator.

    The defaults are the decode section's (seqcore.config.DecodeConfig).
    """

    temperature: float = DecodeConfig.temperature
    top_k: int = DecodeConfig.top_k
    top_p: float = DecodeConfig.top_p
    seed: int = DecodeConfig.seed


def example_seed(seed: int, example_id: str) -> int:
    """A 63-bit generator seed from (seed, id); stable across runs and Python versions."""
    digest = hashlib.sha256(f"{seed}\x00{example_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def draw_uniforms(seed: int, example_ids: list[str], caps: list[int]) -> torch.Tensor:
    """(B, max cap) uniforms in [0, 1); row i holds example i's own stream (zeros after)."""
    out = torch.zeros(len(example_ids), max(caps, default=0))
    for i, (eid, cap) in enumerate(zip(example_ids, caps, strict=True)):
        gen = torch.Generator().manual_seed(example_seed(seed, eid))
        out[i, :cap] = torch.rand(cap, generator=gen)
    return out


def inverse_cdf(scores: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draw one token per row from softmax(scores) using uniforms u.

    Args:
        scores: (N, V) processed logits (``-inf`` = forbidden, probability exactly 0).
        u: (N,) uniforms in [0, 1).

    Returns:
        (N,) the first token whose cumulative probability exceeds u (a forbidden token can
        never be drawn: its cumulative probability equals its predecessor's).
    """
    cdf = torch.cumsum(torch.softmax(scores.float(), dim=-1), dim=-1)  # (N, V)
    x = (u.to(cdf.device) * cdf[:, -1])[:, None]  # (N, 1) rescaled for rounding
    tok = torch.searchsorted(cdf, x, right=True)[:, 0]
    return tok.clamp(max=scores.shape[-1] - 1)


def sampler(settings: SamplingSettings, uniforms: torch.Tensor) -> Chooser:
    """The chooser for ``run_single``: temperature -> top-k -> top-p -> inverse CDF."""

    def choose(scores: torch.Tensor, rows: torch.Tensor, step: int) -> torch.Tensor:
        shaped = top_p(top_k(temperature(scores, settings.temperature), settings.top_k),
                       settings.top_p)
        return inverse_cdf(shaped, uniforms[rows.cpu(), step])

    return choose


@torch.no_grad()
def sample(
    model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor, ids: SpecialIds,
    example_ids: list[str], max_len: int | list[int], settings: SamplingSettings,
    masking: Masking = Masking(), use_cache: bool = True,
) -> list[Hypothesis]:
    """Sample one output per example.

    Args:
        src, src_mask: (B, S) source ids and mask (True = real).
        example_ids: B ids; with ``settings.seed`` they fix each example's random stream.
        max_len: maximum generated tokens, EOS included: one int or one per example.

    Returns:
        B hypotheses; score = the model's log-probability of the sample (before shaping).
    """
    caps = length_caps(max_len, src.shape[0], src.device)
    uniforms = draw_uniforms(settings.seed, example_ids, caps.tolist())
    return run_single(model, src, src_mask, ids, caps, masking, sampler(settings, uniforms),
                      use_cache)
