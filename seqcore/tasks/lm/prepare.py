"""The lm task's piece of the prepare stage: no prepared split is scored."""

from __future__ import annotations

from seqcore.config import DataConfig

#: How ``data.max_pairs`` cuts the data (the data signature's mark): the first N text rows,
#: since a document's lines must stay contiguous (seqcore.tasks.lm.documents).
SUBSET = ""


def scored_splits(data: DataConfig) -> dict[str, float]:
    """None: lm holds out the tail of each document, not prepared pairs."""
    return {}
