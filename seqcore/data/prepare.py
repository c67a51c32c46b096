"""The prepare step as a function: read a raw file under the bad-row policy and split it."""

from __future__ import annotations

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
        read: pairs the reader kept (reading stops at ``max_pairs``).
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


def prepare_pairs(raw: Path, data: DataConfig, label: str | None = None) -> Prepared:
    """Read ``raw`` as ``data.source`` under ``data.bad_rows`` and split by the group hash.

    ``max_pairs`` keeps the first N pairs in file order *before* splitting, so a smoke run's
    rows sit in the same splits as in the full run. Reading stops at the N-th kept pair (a
    smoke run on CMUdict reads 400 of its 135,000 lines): rejects and ``read`` cover only the
    lines read.

    Raises:
        BadRowError: under the strict policy, at the first bad row (file:line, reason, row).
        HeaderError: a TSV header with unknown or repeated columns.
    """
    result = read_pairs(raw, input_format(data.source), data.bad_rows, data.normalization,
                        data.casefold, data.keep_stress, label, data.casefold_target,
                        data.max_pairs)
    splits = assign_splits(result.pairs, data.split_seed, data.dev_fraction, data.test_fraction)
    return Prepared(splits, result.rejects, len(result.pairs))
