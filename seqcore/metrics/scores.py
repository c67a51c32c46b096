"""Sequence-level metric statistics from predictions: statistics first, scores from statistics.

Units (stated once, here):
- token: a whitespace-separated token of the detokenised text (an ARPAbet phoneme for G2P,
  where the target tokenizer is word-level and tokens equal SentencePiece pieces);
- char: a Unicode code point of the detokenised text, spaces included;
- free-running token accuracy: reference tokens plus one EOS, matched in a minimum-edit
  alignment against the hypothesis tokens plus EOS when the decoder produced it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from seqcore.metrics.edit import aligned_matches, levenshtein

#: Stand-in for the end-of-sequence label in free-running alignments (never a text token).
EOS_MARK = "\x00eos"
#: What SentencePiece decodes a UNK id to (U+2047); in a hypothesis it is an unknown token.
UNK_SURFACE = "\u2047"
#: What a hypothesis UNK is compared as: a control character, which no reference can hold
#: (the readers reject them), so a UNK never counts as correct (issue 13).
UNK_MARK = "\x00"


@dataclass(frozen=True)
class ErrorStats:
    """Additive statistics: sums that merge across shards, buckets and groups.

    Attributes:
        n: sequences.
        exact: hypotheses equal to their own reference (token-wise).
        exact_multi: hypotheses equal to any reference of their group.
        token_edits, ref_tokens: Levenshtein distance over tokens and reference tokens.
        token_edits_multi, ref_tokens_multi: the same against the closest reference of the
            group (fewest edits; ties go to the pair's own reference, then to the first in
            text order), the multi-reference PER that goes with multi-reference exact match.
        char_edits, ref_chars: Levenshtein distance over characters and reference characters.
        fr_matches, fr_tokens: free-running aligned matches and reference tokens + EOS.
    """

    n: int = 0
    exact: int = 0
    exact_multi: int = 0
    token_edits: int = 0
    ref_tokens: int = 0
    token_edits_multi: int = 0
    ref_tokens_multi: int = 0
    char_edits: int = 0
    ref_chars: int = 0
    fr_matches: int = 0
    fr_tokens: int = 0

    def __add__(self, other: ErrorStats) -> ErrorStats:
        return ErrorStats(*(getattr(self, f.name) + getattr(other, f.name)
                            for f in fields(self)))

    def scores(self) -> dict[str, float]:
        """Rates from the sums (NaN when a denominator is 0)."""
        return {"exact_match": ratio(self.exact, self.n),
                "exact_match_multi_ref": ratio(self.exact_multi, self.n),
                "word_error_rate": ratio(self.n - self.exact, self.n),
                "token_error_rate": ratio(self.token_edits, self.ref_tokens),
                "token_error_rate_multi_ref": ratio(self.token_edits_multi,
                                                    self.ref_tokens_multi),
                "char_error_rate": ratio(self.char_edits, self.ref_chars),
                "fr_token_accuracy": ratio(self.fr_matches, self.fr_tokens)}


def ratio(num: float, den: float) -> float:
    """num / den, NaN when den is 0 (an undefined rate is never reported as 0)."""
    return num / den if den else math.nan


def error_stats(hypothesis: str, reference: str, eos: bool = True,
                references: frozenset[str] = frozenset()) -> ErrorStats:
    """Statistics of one (hypothesis, reference) pair.

    Args:
        hypothesis, reference: detokenised text; tokens are whitespace-separated. A UNK in the
            hypothesis (U+2047) never matches anything, a ``⁇`` in a reference included.
        eos: whether the decoder produced EOS (a truncated output has none to align).
        references: every reference of the pair's group (multi-reference exact match and
            PER); the pair's own reference always counts.
    """
    hypothesis = hypothesis.replace(UNK_SURFACE, UNK_MARK)
    h, r = hypothesis.split(), reference.split()
    candidates = [r] + [other.split() for other in sorted(references - {reference})]
    distances = [levenshtein(h, c) for c in candidates]
    best = distances.index(min(distances))  # the first of equals: own, then text order
    edits, multi = distances[0], distances[best] == 0
    fr_h = h + ([EOS_MARK] if eos else [])
    return ErrorStats(
        n=1, exact=int(h == r), exact_multi=int(multi), token_edits=edits,
        ref_tokens=len(r), token_edits_multi=distances[best],
        ref_tokens_multi=len(candidates[best]),
        char_edits=levenshtein(list(hypothesis), list(reference)),
        ref_chars=len(reference), fr_matches=aligned_matches(fr_h, r + [EOS_MARK]),
        fr_tokens=len(r) + 1)


def perplexity(nll_sum: float, tokens: int) -> float:
    """exp(summed NLL / token count); the count must be reported beside it."""
    return math.exp(nll_sum / tokens) if tokens else math.nan
