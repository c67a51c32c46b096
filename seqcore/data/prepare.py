"""The prepare step as a function: read a raw file under the bad-row policy and split it."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from seqcore.artifacts.manifests import PrepareCounts
from seqcore.config import DataConfig
from seqcore.data.readers import Format, read_pairs
from seqcore.data.records import Pair, Reject, count_rejects, variant_counts
from seqcore.data.splits import SPLITS, Split, assign_splits


@dataclass(frozen=True)
class Prepared:
    """Split pairs plus every dropped, altered or ignored raw line.

    Attributes:
        splits: pairs by split, in file order.
        rejects: every Reject, in file order.
        read: pairs the reader kept (``data.max_pairs`` then samples among them).
    """

    splits: dict[Split, list[Pair]]
    rejects: list[Reject]
    read: int

    def summary(self) -> PrepareCounts:
        """The manifest's counts: rows and groups per split, rejects by action and reason."""
        kept = [p for s in SPLITS for p in self.splits[s]]
        return PrepareCounts(self.read, len(kept), self.read - len(kept),
                             {s: len(self.splits[s]) for s in SPLITS},
                             {s: len({p.group for p in self.splits[s]}) for s in SPLITS},
                             count_rejects(self.rejects), variant_counts(kept))


def dominant_target(pairs: list[Pair]) -> tuple[str, float]:
    """The most common target of ``pairs`` and the share of the pairs it makes up (the
    first in file order among equals; ``("", 0.0)`` for no pairs)."""
    counts = Counter(p.target for p in pairs)
    if not counts:
        return "", 0.0
    target, n = counts.most_common(1)[0]
    return target, n / len(pairs)


def copy_share(pairs: list[Pair]) -> float:
    """The share of ``pairs`` whose target is its source, spaces and case aside (``c a t``
    copies ``Cat``); 0.0 for no pairs."""
    def bare(text: str) -> str:
        return "".join(text.split()).casefold()
    return sum(bare(p.target) == bare(p.source) for p in pairs) / len(pairs) if pairs else 0.0


def input_format(source: str) -> Format:
    """The reader format for ``data.source`` (the lm task's ``text`` is not a parallel file)."""
    if source not in ("cmudict", "tsv", "jsonl"):
        raise ValueError(f"data.source {source!r} is not a parallel file (cmudict, tsv, jsonl)")
    return source  # type: ignore[return-value] (narrowed by the check above)


def sample_groups(pairs: list[Pair], max_pairs: int, seed: int) -> list[Pair]:
    """At most ``max_pairs`` of ``pairs`` (0: all): whole groups (a word's pronunciations stay
    together) drawn at random under ``seed``, in file order.

    Each group is ranked by a keyed sha256 of its name, salted apart from the split's hash so
    the sample and the split are independent; groups are taken in rank order while they fit.
    The first N rows of a sorted lexicon would be the words of a few initial letters, train
    and test alike: a fair-looking number on a biased sample (issue 55).
    """
    if max_pairs <= 0 or len(pairs) <= max_pairs:
        return pairs
    sizes = Counter(p.group for p in pairs)
    ranked = sorted(sizes, key=lambda g: hashlib.sha256(
        f"{seed}\x00sample\x00{g}".encode("utf-8")).digest())
    chosen, total = set(), 0
    for group in ranked:
        if total + sizes[group] <= max_pairs:
            chosen.add(group)
            total += sizes[group]
            if total == max_pairs:
                break
    return [p for p in pairs if p.group in chosen]


def prepare_pairs(raw: Path, data: DataConfig, label: str | None = None) -> Prepared:
    """Read ``raw`` as ``data.source`` under ``data.bad_rows`` and split by the group hash.

    ``max_pairs`` keeps a seeded random sample of whole groups (:func:`sample_groups`, seed
    ``data.split_seed``) *before* splitting; a group's split is the one it has in the full
    run. The whole file is read, so rejects and ``read`` cover every line.

    Raises:
        BadRowError: under the strict policy, at the first bad row (file:line, reason, row).
        HeaderError: a TSV header with unknown or repeated columns.
    """
    result = read_pairs(raw, input_format(data.source), data.bad_rows, data.normalization,
                        data.casefold, data.keep_stress, label, data.casefold_target)
    kept = sample_groups(result.pairs, data.max_pairs, data.split_seed)
    splits = assign_splits(kept, data.split_seed, data.dev_fraction, data.test_fraction)
    return Prepared(splits, result.rejects, len(result.pairs))
