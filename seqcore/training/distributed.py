"""Data-parallel training under torchrun: who this process is and the few collectives we use.

We do not wrap the model in ``DistributedDataParallel``: the loop needs the gradient of the
whole global batch divided by its *global* valid-token count, then one global clip. So each
rank backwards ``local summed loss / global count`` and one all-reduce (SUM) of the flat
gradient per optimisation step gives every rank exactly that gradient (DDP would average over
ranks, i.e. divide by the world size again). A non-finite gradient on any rank makes the sum
non-finite on every rank, so every rank skips the same step. With world size 1 none of this
runs and the loop is the single-process loop.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqcore.determinism import backend_for
from seqcore.errors import OneLineError
from seqcore.hashing import digest
from seqcore.sequences import to_device

#: torchrun sets these in every worker (https://pytorch.org/docs/stable/elastic/run.html).
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


#: Training-contract keys of where a run executes. They are checked one by one on resume (with
#: a one-line message) and left out of the checkpoint folder's name, so a run with another
#: world size or device finds its folder and is told why it cannot resume it.
RUNTIME_KEYS = ("train.nproc", "train.backend", "train.device_kind")


def checkpoint_folder_name(contract: dict[str, Any]) -> str:
    """The name of a run's checkpoint folder: a hash of its training contract less
    ``RUNTIME_KEYS``."""
    return digest({k: v for k, v in contract.items() if k not in RUNTIME_KEYS})[:12]


def checkpoint_folder(checkpoints: str | Path, contract: dict[str, Any]) -> Path:
    """A run's checkpoint folder under ``paths.checkpoints``: the one way to find it (train
    writes there, evaluate records it in results.json, where the audit reads it)."""
    return Path(checkpoints) / checkpoint_folder_name(contract)


class WorldMismatch(RuntimeError):
    """The number of processes differs from train.nproc or from the checkpoint's."""


@dataclass(frozen=True)
class World:
    """This process's place among the ranks; the default is the single process."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str = "none"

    @property
    def main(self) -> bool:
        """Rank 0: the one that logs, writes checkpoints and outputs."""
        return self.rank == 0


def under_torchrun() -> bool:
    """True in a worker started by torchrun (or any launcher that sets the env:// variables)."""
    return all(k in os.environ for k in TORCHRUN_ENV)


def relaunch_under_torchrun(nproc: int, module: str, argv: list[str]) -> None:
    """Replace this process by ``torchrun --standalone --nproc-per-node nproc -m module argv``.

    The process keeps its pid, so whoever started it (``dvc repro``) waits for the ranks and
    sees torchrun's exit status. Does nothing under torchrun or for one process.
    """
    if nproc == 1 or under_torchrun():
        return

    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={nproc}", "-m", module, *argv])


def init_world(nproc: int, kind: str) -> World:
    """Join the process group torchrun set up; the single process when ``nproc`` is 1.

    Raises WorldMismatch (one line) when torchrun started another number of processes.
    """
    if not under_torchrun():
        if nproc != 1:
            raise WorldMismatch(f"train.nproc is {nproc} but this process was not started by "
                                "torchrun; run `python -m pipeline.train` (it relaunches itself)")
        return World()
    _die_with_parent()
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if size != nproc:
        raise WorldMismatch(f"torchrun started {size} processes but train.nproc is {nproc}; "
                            f"set train.nproc: {size} (it is part of the training contract)")
    if size == 1:
        return World()
    import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

    backend = backend_for(kind, size)
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return World(rank, size, int(os.environ["LOCAL_RANK"]), backend)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when its torchrun agent dies.

    torchrun starts workers in their own sessions, so killing the stage (the agent) would
    leave them training and writing checkpoints; with this a killed stage is a dead run, as
    with one process. Elsewhere (no prctl) nothing changes.
    """

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def close_world(world: World) -> None:
    """Leave the process group (after a final barrier)."""
    if world.size > 1:
        import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

        dist.barrier()
        dist.destroy_process_group()


def all_reduce_sum(world: World, values: list[float], device: torch.device) -> list[float]:
    """Sum a few numbers over ranks (float64, exact for counts below 2**53)."""
    if world.size == 1:
        return values
    import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def all_reduce_counts(counts: list[int], device: torch.device) -> torch.Tensor:
    """Host counts (the step's denominator and tokens) summed over ranks and left on the
    device, (len(counts),) int64: moved there without the host waiting and never read back
    inside a step (issue 53)."""
    import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

    t = to_device(torch.tensor(counts, dtype=torch.int64), device)
    dist.all_reduce(t)
    return t


def all_reduce_total(totals: list[torch.Tensor]) -> torch.Tensor:
    """The micro-batches' summed losses added in order in float64, then summed over ranks,
    (1,) on the device: read with the step's other figures, not inside it."""
    import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

    acc = totals[0].double().reshape(1)
    for t in totals[1:]:
        acc = acc + t.double()
    dist.all_reduce(acc)
    return acc


class GradientPresenceChanged(OneLineError, RuntimeError):
    """A parameter had a gradient on some steps of a multi-process run and none on others."""


def all_reduce_gradients(params: list[nn.Parameter], present: list[bool] | None = None
                         ) -> tuple[list[bool], torch.Tensor]:
    """Replace every rank's gradients by their sum over ranks (one flat all-reduce).

    A parameter without a gradient on one rank counts as zero there; it gets a gradient only
    if some rank produced one, so an unused parameter stays untouched by the optimiser. Which
    parameters those are (``present``) is read from the device once, at a run's first step,
    and then reused, so later steps read nothing back (issue 53); each step's own flags are
    returned, on the device, for ``check_presence`` to compare when the step is read.
    """
    import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

    ref = params[0]
    parts = [p.grad.reshape(-1).float() if p.grad is not None else
             torch.zeros(p.numel(), device=ref.device) for p in params]
    has = to_device(torch.tensor([float(p.grad is not None) for p in params]), ref.device)
    flat = torch.cat([*parts, has])  # (sum of numels + P,)
    dist.all_reduce(flat)
    flags = flat[-len(params):]
    if present is None:  # the first step: one read-back for all P flags
        present = [ranks > 0 for ranks in flags.tolist()]
    offset = 0
    for p, used in zip(params, present, strict=True):
        n = p.numel()
        if used:
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
        offset += n
    return present, flags


def check_presence(flags: torch.Tensor, present: list[bool], names: list[str], step: int
                   ) -> None:
    """Raise GradientPresenceChanged (one line) when step ``step``'s summed presence flags
    disagree with the parameters the run has summed since its first step."""
    for name, ranks, used in zip(names, flags.tolist(), present, strict=True):
        if (ranks > 0) != used:
            now, first = ("no rank", "one") if used else ("a rank", "none")
            raise GradientPresenceChanged(
                f"parameter {name} got a gradient on {now} at step {step} but {first} at the "
                f"run's first step; multi-process training (train.nproc) needs each parameter "
                f"used at every step or at none")


def gather_objects(world: World, obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if world.size == 1:
        return [obj]
    import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def broadcast_module(world: World, module: nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank (ranks seed differently)."""
    if world.size == 1:
        return
    import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, 0)


def barrier(world: World) -> None:
    if world.size > 1:
        import torch.distributed as dist  # noqa: PLC0415 (only with 2+ processes)

        dist.barrier()


def check_world(stored: dict[str, Any], size: int, device_type: str, path: Any) -> None:
    """One-line refusals (WorldMismatch) of a checkpoint written by ``stored``'s world for a
    run of ``size`` processes on ``device_type``."""
    if stored["size"] != size:
        raise WorldMismatch(
            f"{path} was written by {stored['size']} process(es) and this run has {size}; "
            f"set train.nproc: {stored['size']} to resume it, or train.resume: fresh to "
            "start over")
    if stored["device_kind"] != device_type:
        raise WorldMismatch(
            f"{path} was trained on {stored['device_kind']} and this run is on {device_type} "
            f"(their float results differ); set train.device to {stored['device_kind']} to "
            "resume it, or train.resume: fresh to start over")
