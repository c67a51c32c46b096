"""Sequence-level metrics from predictions: statistics first, scores from statistics."""

from __future__ import annotations

import math
from dataclasses import dataclass

from seqcore.metrics.edit import levenshtein


@dataclass(frozen=True)
class Prediction:
    """What the metrics need from one predictions.jsonl line."""

    id: str
    group: str
    reference: str
    hypothesis: str
    eos: bool


@dataclass(frozen=True)
class ErrorStats:
    """Additive statistics: sums that merge across shards and buckets."""

    n: int = 0
    exact: int = 0
    token_edits: int = 0
    ref_tokens: int = 0
    char_edits: int = 0
    ref_chars: int = 0

    def __add__(self, other: ErrorStats) -> ErrorStats:
        return ErrorStats(*(a + b for a, b in zip(self._tuple(), other._tuple())))

    def _tuple(self) -> tuple[int, ...]:
        return (self.n, self.exact, self.token_edits, self.ref_tokens, self.char_edits,
                self.ref_chars)

    def scores(self) -> dict[str, float]:
        """exact_match, token_error_rate and char_error_rate (NaN when undefined)."""
        div = lambda a, b: a / b if b else math.nan  # noqa: E731
        return {"exact_match": div(self.exact, self.n),
                "token_error_rate": div(self.token_edits, self.ref_tokens),
                "char_error_rate": div(self.char_edits, self.ref_chars)}


def error_stats(hypothesis: str, reference: str) -> ErrorStats:
    """Statistics of one (hypothesis, reference) pair; tokens are whitespace-separated."""
    h, r = hypothesis.split(), reference.split()
    hc, rc = list(hypothesis), list(reference)
    return ErrorStats(1, int(h == r), levenshtein(h, r), len(r), levenshtein(hc, rc), len(rc))


def perplexity(nll_sum: float, tokens: int) -> float:
    """exp(summed NLL / token count); the count must be reported beside it."""
    return math.exp(nll_sum / tokens) if tokens else math.nan
