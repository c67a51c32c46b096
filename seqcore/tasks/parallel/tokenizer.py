"""The pair tasks' piece of the tokenizer stage: the coverage they refuse to train on."""

from __future__ import annotations

import seqcore.data.coverage
from seqcore.config import Config
from seqcore.data.coverage import SplitCoverage


def coverage_problems(cfg: Config, coverage: dict[str, SplitCoverage]) -> list[str]:
    """One sentence per UNK rate or length-drop rate over its limit, or a split too small."""
    return seqcore.data.coverage.coverage_problems(
        coverage, cfg.tokenizer.max_unk_rate, cfg.sequence.max_drop_rate,
        cfg.data.min_split_rows)
