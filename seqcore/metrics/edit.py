"""Levenshtein distance over token sequences."""

from __future__ import annotations

from collections.abc import Sequence


def levenshtein(hyp: Sequence[str], ref: Sequence[str]) -> int:
    """Minimum number of insertions, deletions and substitutions turning hyp into ref."""
    prev = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, start=1):
        cur = [i] + [0] * len(ref)
        for j, r in enumerate(ref, start=1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (h != r))
        prev = cur
    return prev[-1]
