"""The pair tasks' piece of the prepare stage: the splits they score."""

from __future__ import annotations

from seqcore.config import DataConfig

#: How ``data.max_pairs`` cuts the pairs (the data signature's mark): whole groups drawn at
#: random under ``data.split_seed`` (seqcore.data.prepare.sample_groups; issue 55).
SUBSET = "g"


def scored_splits(data: DataConfig) -> dict[str, float]:
    """The prepared splits the pair tasks score, with their ``data.*_fraction``."""
    # Dev picks the checkpoint and test is what evaluate scores: too few rows there and
    # the run either dies late (sacrebleu on an empty split) or reports noise (issue 13).
    return {"dev": data.dev_fraction, "test": data.test_fraction}
