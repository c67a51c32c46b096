"""Cross-entropy with label smoothing that returns a numerator and a count.

The caller divides: token-mean divides the summed token losses by the number of valid tokens
of the *whole* (accumulated, possibly multi-process) batch; sequence-mean divides the sum of
per-sequence mean losses by the number of sequences. This keeps gradient accumulation exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from seqcore.contract import IGNORE_INDEX

LossNorm = Literal["token-mean", "sequence-mean", "sum"]


@dataclass(frozen=True)
class LossSum:
    """An unnormalised loss and what it must be divided by.

    Attributes:
        total: scalar, summed loss (per the normalisation: token sum or sum of sequence means).
        nll: scalar, summed token NLL without smoothing (for perplexity).
        tokens: number of valid (labelled) tokens.
        sequences: number of sequences with at least one valid token.
    """

    total: torch.Tensor
    nll: torch.Tensor
    tokens: int
    sequences: int

    def denominator(self, norm: LossNorm) -> int:
        """What ``total`` is divided by under ``norm`` (1 for sum)."""
        return {"token-mean": self.tokens, "sequence-mean": self.sequences, "sum": 1}[norm]


def sequence_loss(
    logits: torch.Tensor, labels: torch.Tensor, norm: LossNorm, smoothing: float,
    excluded: tuple[int, ...],
) -> LossSum:
    """Label-smoothed cross-entropy summed over valid positions.

    Smoothing follows Szegedy et al. (2016) as used by Vaswani et al.: the target distribution
    is ``(1 - eps) * onehot(y) + eps * uniform``, where the uniform part covers the vocabulary
    *except* the ids in ``excluded`` (PAD and BOS: they can never be a correct next token, so
    no mass goes to them). Positions labelled IGNORE_INDEX count in neither numerator nor
    denominator.

    Args:
        logits: (B, T, V) float.
        labels: (B, T) long, IGNORE_INDEX where there is no target.
        norm: how the caller will normalise (decides the per-sequence weighting of ``total``).
        smoothing: eps in [0, 1).
        excluded: ids that receive no smoothing mass.

    Returns:
        LossSum with summed values and counts.
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(f"logits (B,T,V) and labels (B,T) expected, got {logits.shape}, "
                         f"{labels.shape}")
    valid = labels != IGNORE_INDEX  # (B, T)
    logp = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    safe = labels.masked_fill(~valid, 0)
    nll = -logp.gather(-1, safe[..., None])[..., 0]  # (B, T)
    if smoothing > 0:
        allowed = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
        allowed[list(excluded)] = False
        uniform = -(logp * allowed).sum(-1) / allowed.sum()  # (B, T)
        token_loss = (1 - smoothing) * nll + smoothing * uniform
    else:
        token_loss = nll
    token_loss = token_loss * valid
    per_seq_tokens = valid.sum(1)  # (B,)
    has_tokens = per_seq_tokens > 0
    if norm == "sequence-mean":
        per_seq = token_loss.sum(1) / per_seq_tokens.clamp(min=1)
        total = (per_seq * has_tokens).sum()
    else:
        total = token_loss.sum()
    return LossSum(total=total, nll=(nll * valid).sum(), tokens=int(valid.sum()),
                   sequences=int(has_tokens.sum()))
