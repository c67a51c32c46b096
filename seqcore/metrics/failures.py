"""Failure modes of decoded outputs: empty, truncated, repeated, illegal, length ratio.

Each rule is stated once in words, in :meth:`FailureRules.describe` (report.md prints
that text), and checked once, in :func:`failure_kinds` (the modes) and
:func:`failure_modes` (the unlicensed-repeat rate and the length ratio).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from seqcore.artifacts.predictions import PredictionRow
from seqcore.metrics.scores import ratio
from seqcore.text import SPECIAL_PIECES

KINDS = ("empty", "truncated", "repeated", "illegal")


@dataclass(frozen=True)
class FailureRules:
    """How failure modes are detected (recorded with the results)."""

    repeat_ngram: int
    repeat_times: int
    examples: int

    def describe(self) -> dict[str, str]:
        """The exact rules in words, for metrics and the report."""
        return {
            "empty": "hypothesis has no token",
            "truncated": "maximum length reached without EOS",
            "repeated": f"a token n-gram of size 1..{self.repeat_ngram} occurs "
                        f"{self.repeat_times} times back to back",
            "illegal": "a special piece (`<unk>`, `<s>`, `</s>`, `<pad>`) or a token outside "
                       "the task's target alphabet",
            "repeated_ngram_rate": f"sum over hypotheses of max(0, H[g] - max(R[g], 1)) over "
                                   f"{self.repeat_ngram}-grams g / hypothesis "
                                   f"{self.repeat_ngram}-grams",
            "length_ratio": "hypothesis tokens / max(reference tokens, 1)"}


def has_loop(tokens: Sequence[str], n: int, times: int) -> bool:
    """True if some token n-gram (size 1..n) occurs ``times`` times back to back.

    E.g. n=2, times=3 flags ``A B A B A B`` and ``K K K`` but not ``A B A B``.
    """
    for size in range(1, n + 1):
        for start in range(len(tokens) - size * times + 1):
            gram = tokens[start : start + size]
            if all(tokens[start + k * size : start + (k + 1) * size] == gram
                   for k in range(1, times)):
                return True
    return False


def ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    """Multiset of the token n-grams of a sequence."""
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def unlicensed_repeats(hyp: Sequence[str], ref: Sequence[str], n: int) -> tuple[int, int]:
    """(repeated n-grams the reference does not license, hypothesis n-grams).

    A hypothesis n-gram g occurring H[g] times repeats H[g] - 1 times; the reference licenses
    R[g] - 1 of those repeats, so the unlicensed count is max(0, H[g] - max(R[g], 1)).
    """
    h, r = ngrams(hyp, n), ngrams(ref, n)
    return sum(max(0, c - max(r[g], 1)) for g, c in h.items()), sum(h.values())


def failure_kinds(row: PredictionRow, rules: FailureRules,
                  illegal: Callable[[str], bool] | None) -> set[str]:
    """The failure modes one prediction shows (possibly several)."""
    toks = row.hypothesis.split()
    found = set()
    if not toks:
        found.add("empty")
    if not row.eos:
        found.add("truncated")
    if has_loop(toks, rules.repeat_ngram, rules.repeat_times):
        found.add("repeated")
    if any(p in SPECIAL_PIECES for p in row.pieces) or (
            illegal is not None and any(illegal(t) for t in toks)):
        found.add("illegal")
    return found


def distinct_sources(rows: list[PredictionRow]) -> list[PredictionRow]:
    """The first row of each source: a word with several references fails the same way
    under each of them, and one example of it is enough."""
    first: dict[str, PredictionRow] = {}
    for r in rows:
        first.setdefault(r.source, r)
    return list(first.values())


def failure_modes(rows: list[PredictionRow], rules: FailureRules,
                  illegal: Callable[[str], bool] | None) -> dict[str, dict]:
    """Counts, rates and up to ``rules.examples`` examples of each mode, the rate of
    unlicensed repeated n-grams and the length-ratio distribution."""
    hits: dict[str, list[PredictionRow]] = {k: [] for k in KINDS}
    rep, grams, ratios = 0, 0, []
    for r in rows:
        for kind in failure_kinds(r, rules, illegal):
            hits[kind].append(r)
        hyp, ref = r.hypothesis.split(), r.reference.split()
        u, g = unlicensed_repeats(hyp, ref, rules.repeat_ngram)
        rep, grams = rep + u, grams + g
        ratios.append(len(hyp) / max(len(ref), 1))
    out: dict[str, dict] = {
        kind: {"count": len(found), "rate": ratio(len(found), len(rows)),
               "examples": [{"id": r.id, "source": r.source, "reference": r.reference,
                             "hypothesis": r.hypothesis}
                            for r in distinct_sources(found)[: rules.examples]]}
        for kind, found in hits.items()}
    out["repeated_ngrams"] = {"count": rep, "ngrams": grams, "rate": ratio(rep, grams)}
    out["length_ratio"] = {
        "mean": ratio(sum(ratios), len(ratios)),
        "median": statistics.median(ratios) if ratios else float("nan"),
        "below_0.5": ratio(sum(x < 0.5 for x in ratios), len(ratios)),
        "above_1.5": ratio(sum(x > 1.5 for x in ratios), len(ratios))}
    return out
