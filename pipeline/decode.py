"""Stage decode: decode one split with the trained model; write predictions and a header.

What decoding means is the task's piece (seqcore.tasks): the pair tasks decode the encoded
split; ``task: lm`` has nothing to decode and writes an empty file with a header saying so.
"""

from __future__ import annotations

import sys

from pipeline.stage import cpu_kernels, stage_main
from pipeline.task_io import PipelineIO
from seqcore.config import Config
from seqcore.determinism import DeviceUnavailable, device_kind
from seqcore.tasks import TaskError, get_task


def run(cfg: Config) -> None:
    """Decode the configured split into predictions/<split>.jsonl and its header."""
    try:
        get_task(cfg.task).decode(cfg, PipelineIO(cfg, "decode"))
    except (DeviceUnavailable, TaskError) as err:
        sys.exit(f"[decode] {err}")


def main(cfg: Config) -> None:
    """The stage on the loaded params: ``run`` under decode's CPU kernel profile."""
    cpu_kernels(cfg.decode.cpu_kernels, device_kind(cfg.decode.device), "decode.cpu_kernels",
                "decode")
    run(cfg)


if __name__ == "__main__":
    stage_main("decode", __doc__, main)
