"""Deterministic train/dev/test assignment by a keyed hash of the group.

A row's split depends only on its group and the seed, so appending rows never moves an
existing row, and every row of a group lands in the same split.
"""

from __future__ import annotations

import hashlib
from typing import Literal

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")


def split_of(group: str, seed: int, dev_fraction: float, test_fraction: float) -> Split:
    """The split of a group: a keyed sha256 mapped to [0, 1), test first, then dev."""
    digest = hashlib.sha256(f"{seed}\x00{group}".encode("utf-8")).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + dev_fraction:
        return "dev"
    return "train"
