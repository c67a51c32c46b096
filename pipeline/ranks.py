"""The processes of a training run (pipeline/train.py): relaunch under torchrun when
``train.nproc`` > 1, join the ranks, pick and seed the device, build the task's setup, and
add up the time of every rank. Each failure a user can cause stops in one line."""

from __future__ import annotations

import sys

import torch

from pipeline.task_io import PipelineIO
from pipeline.timing import StageTime, elapsed
from seqcore.config import Config
from seqcore.determinism import DeviceUnavailable, device_kind, resolve_device, set_determinism
from seqcore.tasks import TaskError, get_task
from seqcore.training import distributed
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.distributed import check_world
from seqcore.training.setups import Setup


def build(cfg: Config, device: torch.device, world: distributed.World) -> Setup:
    """Read the declared inputs of this task and build its setup (seqcore.tasks)."""
    try:
        return get_task(cfg.task).training_setup(cfg, PipelineIO(cfg, "train"), device, world)
    except TaskError as err:
        sys.exit(f"[train] {err}")


def refuse_other_world(cfg: Config) -> None:
    """Before torchrun starts the ranks: stop in one line when the checkpoint this run would
    resume was written by another number of processes or on another device kind (inside
    torchrun each rank would print it, under torchrun's failure report)."""
    if cfg.train.nproc == 1 or distributed.under_torchrun() or cfg.train.resume != "auto":
        return
    setup = build(cfg, torch.device("cpu"), distributed.World())
    folder = distributed.checkpoint_folder(cfg.paths.checkpoints, setup.contract)
    found = CheckpointDir(folder, cfg.train.keep_last).latest_good() if folder.is_dir() else None
    if found is not None:
        try:
            check_world(found.checkpoint.world, cfg.train.nproc,
                        device_kind(cfg.train.device), found.path)
        except distributed.WorldMismatch as err:
            sys.exit(f"[train] {err}")


def start(cfg: Config) -> tuple[distributed.World, torch.device]:
    """Relaunch under torchrun when train.nproc > 1; join the ranks; pick and seed the device."""
    refuse_other_world(cfg)
    distributed.relaunch_under_torchrun(cfg.train.nproc, "pipeline.train", sys.argv[1:])
    try:
        world = distributed.init_world(cfg.train.nproc, device_kind(cfg.train.device))
        device = resolve_device(cfg.train.device, world.local_rank)
    except (distributed.WorldMismatch, DeviceUnavailable) as err:
        sys.exit(f"[train] {err}")
    set_determinism(cfg.train.seed + world.rank, cfg.train.threads, device)  # rank 0: seed
    return world, device


def spent(world: distributed.World, device: torch.device) -> StageTime:
    """This run's wall time and the CPU time of all its ranks (a collective under torchrun:
    every rank calls it)."""
    own = elapsed()
    if world.size == 1:
        return own
    (cpu,) = distributed.all_reduce_sum(world, [own.cpu_s], device)
    return StageTime(own.wall_s, cpu)


def resume_hint(ckpt: CheckpointDir) -> str:
    """Where a stopped run resumes from."""
    saved = sorted(ckpt.root.glob("ckpt-*.pt"))
    if not saved:
        return "no checkpoint written yet: `dvc repro` starts over"
    return f"`dvc repro` resumes from {saved[-1]}"
