"""Stage baseline: the classic baseline (Phonetisaurus) trained on the model's train rows;
its predictions for dev and test, scored by evaluate beside the model's.

What the baseline is depends on the task (seqcore.tasks): the pair tasks train Phonetisaurus
(``baseline.kind``); ``task: lm`` has none and writes a record saying so. Its output does not
depend on the sequence contract beyond the encoded rows it reads, so it declares no contract
params (STYLE rule 17).
"""

from __future__ import annotations

import sys

from pipeline.stage import stage_main
from pipeline.task_io import PipelineIO
from seqcore.baselines.phonetisaurus import BaselineError
from seqcore.config import Config
from seqcore.tasks import TaskError, get_task


def run(cfg: Config) -> None:
    """Train the baseline and write its folder (paths.baseline) and rejects."""
    try:
        get_task(cfg.task).baseline(cfg, PipelineIO(cfg, "baseline"))
    except (BaselineError, TaskError) as err:
        sys.exit(f"[baseline] {err}")


if __name__ == "__main__":
    stage_main("baseline", __doc__, run)
