"""Logits processors: pure, composable edits of a next-token score table.

Each processor takes scores (N, V) (log-probabilities or logits; N = rows being decoded) and
returns a new (N, V) tensor; a token a processor forbids gets ``-inf``. They hold no state and
never move tensors between devices. The search masks with the first group (min length,
no-repeat n-gram, banned tokens); sampling then reshapes the distribution with the second
(temperature, top-k, top-p). Composition is plain function application, in that order.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def ban_tokens(scores: torch.Tensor, banned: list[int]) -> torch.Tensor:
    """Forbid the given token ids everywhere.

    Args:
        scores: (N, V).
        banned: token ids in [0, V).

    Returns:
        (N, V), ``-inf`` in the banned columns.
    """
    if not banned:
        return scores
    out = scores.clone()
    out[:, banned] = NEG_INF
    return out


def min_length(scores: torch.Tensor, generated: int, min_len: int, eos: int) -> torch.Tensor:
    """Forbid EOS while fewer than ``min_len`` tokens have been generated.

    Args:
        scores: (N, V), all rows at the same step.
        generated: tokens generated so far (EOS excluded), i.e. the 0-based step index.

    Returns:
        (N, V); an output therefore always has at least ``min_len`` tokens before its EOS.
    """
    if generated >= min_len:
        return scores
    return ban_tokens(scores, [eos])


def no_repeat_ngram(scores: torch.Tensor, prefix: torch.Tensor, n: int) -> torch.Tensor:
    """Forbid any token that would complete an n-gram already present in the row's prefix.

    (Paulus et al., 2017, "A deep reinforced model for abstractive summarization".) With
    ``n = 1`` no token may appear twice.

    Args:
        scores: (N, V).
        prefix: (N, T) generated tokens so far (BOS excluded).
        n: n-gram size; 0 disables the rule.

    Returns:
        (N, V).
    """
    t = prefix.shape[1]
    if n <= 0 or t < n:
        return scores
    windows = prefix.unfold(1, n, 1)  # (N, T-n+1, n)
    tail = prefix[:, t - (n - 1):]  # (N, n-1): the n-gram a next token would complete
    seen = (windows[:, :, : n - 1] == tail[:, None, :]).all(dim=-1)  # (N, T-n+1)
    hits = torch.zeros_like(scores).scatter_add_(1, windows[:, :, n - 1], seen.to(scores.dtype))
    return scores.masked_fill(hits > 0, NEG_INF)


def temperature(scores: torch.Tensor, t: float) -> torch.Tensor:
    """Divide logits by ``t`` > 0 (t < 1 sharpens, t > 1 flattens; t = 1 is the identity)."""
    if t <= 0:
        raise ValueError(f"temperature must be > 0, got {t}")
    return scores if t == 1.0 else scores / t


def top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Keep exactly the ``k`` highest-scoring tokens per row (0 = keep all).

    Ties are broken by the lower token id (a stable sort), as in the search's tie rule, so
    ``k = 1`` keeps exactly the token that ``argmax`` picks.

    Args:
        scores: (N, V).

    Returns:
        (N, V), ``-inf`` outside the kept set.
    """
    if k <= 0 or k >= scores.shape[-1]:
        return scores
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices  # (N, V)
    drop = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, order[:, k:], True)
    return scores.masked_fill(drop, NEG_INF)


def top_p(scores: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter (Holtzman et al., 2020): keep the smallest set whose mass reaches ``p``.

    Tokens are taken in order of decreasing probability (ties: lower id first) until their
    cumulative probability is >= p; the rest are dropped. The top token is always kept.

    Args:
        scores: (N, V) logits or log-probabilities (softmax-normalised here).
        p: in (0, 1]; 1 keeps every token.

    Returns:
        (N, V), ``-inf`` outside the nucleus.
    """
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    if p >= 1.0:
        return scores
    sorted_scores, order = torch.sort(scores, dim=-1, descending=True, stable=True)
    probs = torch.softmax(sorted_scores.float(), dim=-1)  # (N, V)
    cum = torch.cumsum(probs, dim=-1)  # (N, V)
    mass_before = torch.cat([torch.zeros_like(cum[:, :1]), cum[:, :-1]], dim=-1)  # (N, V)
    drop_sorted = mass_before >= p  # the set already reached p without this token
    drop = torch.zeros_like(drop_sorted).scatter_(1, order, drop_sorted)
    return scores.masked_fill(drop, NEG_INF)
