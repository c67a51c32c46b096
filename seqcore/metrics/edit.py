"""Levenshtein distance and edit-distance alignment over token sequences."""

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


def aligned_matches(hyp: Sequence[str], ref: Sequence[str]) -> int:
    """Reference tokens matched by an equal hypothesis token in a minimum-edit alignment.

    Minimum-edit alignments are not unique; among them we take the one with the most matches
    (lexicographic order on (edits, -matches)), so the figure does not depend on tie-breaking.
    This is the free-running counterpart of teacher-forced token accuracy.
    """
    # Each cell holds (edits, -matches); tuple comparison picks fewest edits, then most matches.
    prev = [(j, 0) for j in range(len(ref) + 1)]
    for i, h in enumerate(hyp, start=1):
        cur = [(i, 0)] + [(0, 0)] * len(ref)
        for j, r in enumerate(ref, start=1):
            diag = (prev[j - 1][0] + (h != r), prev[j - 1][1] - (h == r))
            up = (prev[j][0] + 1, prev[j][1])
            left = (cur[j - 1][0] + 1, cur[j - 1][1])
            cur[j] = min(diag, up, left)
        prev = cur
    return -prev[-1][1]
