"""Deterministic train/dev/test assignment by a keyed hash of the group.

A row's split depends only on its group and the seed, so appending rows never moves an
existing row, and every row of a group lands in the same split.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from seqcore.data.records import Pair

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")


def split_of(group: str, seed: int, dev_fraction: float, test_fraction: float) -> Split:
    """The split of a group: a keyed sha256 mapped to [0, 1), test first, then dev.

    The seed is the key, so a different seed gives an independent split; test takes the lowest
    slice, so changing dev_fraction never moves a test row.
    """
    digest = hashlib.sha256(f"{seed}\x00{group}".encode("utf-8")).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + dev_fraction:
        return "dev"
    return "train"


def assign_splits(
    pairs: list[Pair], seed: int, dev_fraction: float, test_fraction: float
) -> dict[Split, list[Pair]]:
    """Pairs by split, in input order; a pair's split is :func:`split_of` its group."""
    out: dict[Split, list[Pair]] = {s: [] for s in SPLITS}
    for p in pairs:
        out[split_of(p.group, seed, dev_fraction, test_fraction)].append(p)
    return out
