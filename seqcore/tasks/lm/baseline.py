"""The lm task's piece of the baseline stage: none (a G2P baseline converts parallel rows)."""

from __future__ import annotations

from pathlib import Path

from seqcore.artifacts.baseline import BaselineRecord
from seqcore.config import Config
from seqcore.data.records import write_rejects
from seqcore.tasks.base import StageIO

WHY = "task lm has no parallel rows for a G2P baseline to convert"


def baseline(cfg: Config, io: StageIO) -> None:
    """Write the record saying why there is no baseline (and an empty rejects list)."""
    BaselineRecord("none", skipped=WHY).save(cfg.paths.baseline)
    write_rejects(Path(cfg.paths.baseline_rejects), [])
    io.note(f"skipped: {WHY}")
