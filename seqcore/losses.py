"""Cross-entropy with label smoothing that returns a numerator and a count.

The caller divides: token-mean divides the summed token losses by the number of valid tokens
of the *whole* (accumulated, possibly multi-process) batch; sequence-mean divides the sum of
per-sequence mean losses by the number of sequences. This keeps gradient accumulation exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch.nn import functional

from seqcore.contract import IGNORE_INDEX

LossNorm = Literal["token-mean", "sequence-mean", "sum"]


@dataclass(frozen=True)
class LossSum:
    """An unnormalised loss and what it must be divided by.

    Attributes:
        total: scalar, summed loss (per the normalisation: token sum or sum of sequence means).
        nll: scalar, summed token NLL without smoothing (for perplexity).
        counts: (2,) long, on the loss's device: valid (labelled) tokens and sequences with at
            least one valid token. Left there so that computing a loss reads nothing back from
            a GPU (issue 53); ``tokens`` and ``sequences`` read them where a number is needed.
    """

    total: torch.Tensor
    nll: torch.Tensor
    counts: torch.Tensor

    @property
    def tokens(self) -> int:
        """Valid (labelled) tokens."""
        return int(self.counts[0])

    @property
    def sequences(self) -> int:
        """Sequences with at least one valid token."""
        return int(self.counts[1])

    def denominator(self, norm: LossNorm) -> int:
        """What ``total`` is divided by under ``norm`` (1 for sum)."""
        return {"token-mean": self.tokens, "sequence-mean": self.sequences, "sum": 1}[norm]


def sequence_loss(
    logits: torch.Tensor, labels: torch.Tensor, norm: LossNorm, smoothing: float,
    excluded: tuple[int, ...],
) -> LossSum:
    """Label-smoothed cross-entropy summed over valid positions.

    Smoothing follows Szegedy et al. (2016) as used by Vaswani et al. (2017): the target
    distribution is ``q(k) = (1 - eps) * [k == y] + eps / K`` for every id k not in
    ``excluded`` and ``q(k) = 0`` for the excluded ids (PAD and BOS: they can never be a
    correct next token), with K = V - len(excluded); the label itself gets
    ``1 - eps + eps / K``. The token loss is the cross-entropy ``-sum_k q(k) log p(k)``.
    Positions labelled IGNORE_INDEX count in neither numerator nor denominator: every
    position is computed and the unlabelled ones are zeroed, where selecting the labelled ones
    first would need their number on the host, a read-back that stalls a GPU step (issue 53).
    The gradients are the selecting form's to the bit (``labelled_nll``; tested); a sum may
    round its last bit differently. An unlabelled position's logits are replaced by zeros
    before any arithmetic, so whatever it holds (even inf or NaN) reaches neither the sums nor
    the gradient (multiplying by a 0/1 mask would not: 0 * NaN = NaN).

    Args:
        logits: (B, T, V) float.
        labels: (B, T) long, IGNORE_INDEX where there is no target.
        norm: how the caller will normalise (decides the per-sequence weighting of ``total``).
        smoothing: eps in [0, 1).
        excluded: ids that receive no smoothing mass.

    Returns:
        LossSum with summed values and counts, all left on the logits' device.
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(f"logits (B,T,V) and labels (B,T) expected, got {logits.shape}, "
                         f"{labels.shape}")
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    valid = labels != IGNORE_INDEX  # (B, T)
    logp = functional.log_softmax(torch.where(valid[..., None], logits, 0).float(), dim=-1)
    picked = logp.gather(-1, torch.where(valid, labels, 0)[..., None])[..., 0]  # (B, T)
    nll = torch.where(valid, -picked, 0)  # (B, T)
    if smoothing > 0:
        allowed = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
        for excluded_id in excluded:  # one fill each: a list index would copy from the host
            allowed[excluded_id] = False
        uniform = -(logp * allowed).sum(-1) / allowed.sum()  # (B, T)
        token_loss = torch.where(valid, (1 - smoothing) * nll + smoothing * uniform, 0)
    else:
        token_loss = nll
    per_seq_tokens = valid.sum(1)  # (B,)
    has_tokens = per_seq_tokens > 0
    if norm == "sequence-mean":
        per_seq = torch.where(has_tokens, token_loss.sum(1) / per_seq_tokens.clamp(min=1), 0)
        total = per_seq.sum()
    else:
        total = token_loss.sum()
    return LossSum(total=total, nll=nll.sum(),
                   counts=torch.stack([per_seq_tokens.sum(), has_tokens.sum()]))


def labelled_nll(logits: torch.Tensor, labels: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The labelled positions: mask (B, T), batch row (N,), log-probabilities (N, V) in
    float32 and the label's NLL (N,), whose terms are ``sequence_loss(...).nll``'s (summed in
    another order: the last bit may differ). For evaluation, which needs the positions by row
    (seqcore.metrics.teacher, seqcore.tasks.lm.feed.stream_nll); selecting reads the count of
    labelled positions back from the device, so a training step uses ``sequence_loss``."""
    valid = labels != IGNORE_INDEX  # (B, T)
    # Select the labelled positions first: whatever a PAD query position holds (even inf or
    # NaN) reaches neither the sums nor the gradient; multiplying by a 0/1 mask would not
    # (0 * NaN = NaN).
    seq_index = valid.nonzero()[:, 0]  # (N,) batch row of each valid token
    logp = functional.log_softmax(logits[valid].float(), dim=-1)  # (N, V)
    return valid, seq_index, logp, -logp.gather(-1, labels[valid][:, None])[:, 0]
