"""Greedy decoding: the most probable next token at every step (ties: the lower token id)."""

from __future__ import annotations

import torch

from seqcore.contract import SpecialIds
from seqcore.decoding.search import Hypothesis, Masking, length_caps, run_single
from seqcore.models.base import EncoderDecoder

__all__ = ["Hypothesis", "greedy"]


def _argmax(scores: torch.Tensor, rows: torch.Tensor, step: int) -> torch.Tensor:
    """(N, V) -> (N,); ``argmax`` returns the first maximum, i.e. the lower id on ties."""
    return scores.argmax(dim=-1)


@torch.no_grad()
def greedy(
    model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor, ids: SpecialIds,
    max_len: int | list[int], min_len: int = 0, masking: Masking | None = None,
    use_cache: bool = True,
) -> list[Hypothesis]:
    """Greedy search for a padded source batch.

    Args:
        src, src_mask: (B, S) source ids and mask (True = real).
        max_len: maximum generated tokens, EOS included: one int or one per example.
        min_len: EOS is masked until this many tokens have been generated (used when
            ``masking`` is None; otherwise ``masking.min_len`` applies).
        masking: the token-forbidding rules (see seqcore.decoding.search.Masking).
        use_cache: False re-runs the decoder over the whole prefix at every step.

    Returns:
        B hypotheses; each stops at its own EOS or cap.
    """
    rules = masking if masking is not None else Masking(min_len=min_len)
    caps = length_caps(max_len, src.shape[0], src.device)
    return run_single(model, src, src_mask, ids, caps, rules, _argmax, use_cache)
