"""The lm task's piece of the prepare stage: no prepared split is scored."""

from __future__ import annotations

from seqcore.config import DataConfig


def scored_splits(data: DataConfig) -> dict[str, float]:
    """None: lm holds out the tail of each document, not prepared pairs."""
    return {}
