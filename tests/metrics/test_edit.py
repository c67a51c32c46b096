"""Edit distance and aligned matches (seqcore/metrics/edit.py)."""
from __future__ import annotations

import functools
import itertools

from seqcore.metrics.edit import aligned_matches, levenshtein


def brute_alignments(hyp: tuple[str, ...], ref: tuple[str, ...]) -> list[tuple[int, int]]:
    """(edits, matches) of every alignment of hyp with ref, by plain recursion."""

    @functools.cache
    def walk(i: int, j: int) -> tuple[tuple[int, int], ...]:
        if i == len(hyp) and j == len(ref):
            return ((0, 0),)
        out = []
        if i < len(hyp):  # delete hyp[i]
            out += [(e + 1, m) for e, m in walk(i + 1, j)]
        if j < len(ref):  # insert ref[j]
            out += [(e + 1, m) for e, m in walk(i, j + 1)]
        if i < len(hyp) and j < len(ref):  # match or substitute
            same = hyp[i] == ref[j]
            out += [(e + (not same), m + same) for e, m in walk(i + 1, j + 1)]
        return tuple(out)

    return list(walk(0, 0))


#: every sequence of up to 3 tokens over three symbols and of 4 over two: (a a b, b c c) is
#: the shortest pair where a first column one edit too cheap changes the matches
SHORT = [s for n in range(4) for s in itertools.product("abc", repeat=n)] + list(
    itertools.product("ab", repeat=4))


def test_levenshtein_and_aligned_matches_agree_with_a_brute_force_on_every_short_pair() -> None:
    for hyp, ref in itertools.product(SHORT, SHORT):
        found = brute_alignments(hyp, ref)
        fewest = min(e for e, _ in found)
        assert levenshtein(hyp, ref) == fewest, (hyp, ref)
        assert aligned_matches(hyp, ref) == max(m for e, m in found if e == fewest), (hyp, ref)
