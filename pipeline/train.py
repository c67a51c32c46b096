"""Stage train: resume from the newest good checkpoint (if any) and train to max_steps.

The checkpoint folder is keyed by a hash of the training contract, so a changed parameter
starts a fresh run in its own folder, and an interrupted run resumes when `dvc repro` is run
again. The task (seqcore.tasks) builds what is trained: the pair tasks an encoder-decoder on
the encoded pairs, ``task: lm`` the stateful RNN LM on documents (CMUdict by initial letter,
or the user's text). ``train.nproc`` > 1 relaunches this stage under
``torchrun --standalone`` (one process per rank; docs/scale-out.md); rank 0 writes the
outputs.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from pathlib import Path

import torch

from pipeline.stage import cpu_kernels, load
from pipeline.task_io import PipelineIO
from pipeline.timing import StageTime, elapsed, record_stage, training_clock
from seqcore.artifacts.model_file import ModelMeta
from seqcore.artifacts.train_log import StepLog, TrainLog
from seqcore.artifacts.train_metrics import TrainMetrics
from seqcore.config import Config
from seqcore.determinism import DeviceUnavailable, device_kind, resolve_device, set_determinism
from seqcore.training import distributed
from seqcore.training.checkpoint import CheckpointDir, ledger_files, step_of
from seqcore.training.loop import TrainLoop, check_world
from seqcore.tasks import TaskError, get_task
from seqcore.training.setups import Setup


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


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


class Progress:
    """What a training log line says besides the step's own figures: step N/M, the wall
    time of this run, an ETA from this run's pace, and the last dev NLL (the log's ``nan``
    between evaluations read as divergence)."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last, self.step = first, last, first
        self.start, self.dev_nll, self.dev_step = time.monotonic(), None, None

    def update(self, e: StepLog) -> None:
        self.step = int(e.step)
        if not math.isnan(e.dev_nll):
            self.dev_nll, self.dev_step = e.dev_nll, self.step

    def line(self, e: StepLog, tokens_per_s: float) -> str:
        elapsed = time.monotonic() - self.start
        done = self.step - self.first
        eta = elapsed / done * (self.last - self.step) if done else math.nan
        dev = (f"dev_nll {self.dev_nll:.4f} (step {self.dev_step})" if self.dev_nll is not None
               else "dev_nll -")
        return (f"step {self.step}/{self.last} loss {e.loss:.4f} lr {e.lr:.2e} grad_norm "
                f"{e.grad_norm:.3f} {dev} skipped {e.skipped:.0f} tok/s {tokens_per_s:.0f} "
                f"elapsed {_clock(elapsed)} eta {_clock(eta)}")


def _clock(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


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


def write_ledger(ckpt: CheckpointDir, out: Path, cfg: Config, last: int) -> list[int]:
    """Copy the ledger states of this run to ``out`` (the stage's ``paths.ledger``): the one
    before the first step, every ``train.ledger_every`` steps and the last, with their sha256
    sidecars, plus ``best.pt`` under ``select: best_dev``; a file that fails the check
    loading does is left out with a warning. Returns the steps it lacks (a folder trained
    before the ledger, under another ``ledger_every``, or a state that failed its check): the
    replay of the segment around them spans more steps."""
    every = cfg.train.ledger_every
    want = sorted({0, last, *(range(every, last, every) if every else ())})
    best = ckpt.root / "best.pt"
    found = [p for p in ledger_files(ckpt.ledger) if step_of(p) in want]
    if cfg.train.select == "best_dev" and best.exists():
        found.append(best)
    # A DVC output never carries a file its own stage refused (issue 54): each state is
    # checked as loading checks it (sidecar, hash, weights-only unpickling, whole payload).
    usable = []
    for path in found:
        why = ckpt.verified(path)
        if why is None:
            usable.append(path)
        else:
            print(f"warning: {path} is not copied into {out}: {why}", file=sys.stderr)
    have = {step_of(p) for p in usable if p != best}
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for path in usable:
        for name in (path.name, path.name + ".sha256"):
            shutil.copyfile(path.with_name(name), out / name)
    return [s for s in want if s not in have]


def main() -> None:
    cfg = load(__doc__)
    cpu_kernels(cfg.train.cpu_kernels, device_kind(cfg.train.device), "train.cpu_kernels",
                "train", announce=True)
    world, device = start(cfg)
    setup = build(cfg, device, world)
    folder = distributed.checkpoint_folder(cfg.paths.checkpoints, setup.contract)
    distributed.barrier(world)
    ckpt = CheckpointDir(folder, cfg.train.keep_last)
    trainer = TrainLoop(setup.model, cfg.train, setup.feed, ckpt, setup.contract, setup.d_model,
                        world)
    try:
        resumed = trainer.resume()
    except distributed.WorldMismatch as err:
        sys.exit(f"[train] {err}")
    if not world.main:
        trainer.run(lambda entry, tokens_per_s: None)
        spent(world, device)
        return distributed.close_world(world)
    print(f"[train] {'resumed from ' + resumed if resumed else 'fresh start'} in {ckpt.root}"
          f" on {device} x{world.size}", file=sys.stderr)
    progress = Progress(trainer.state.step, cfg.train.max_steps)
    # The training's time adds up over the resumes of its checkpoint folder (pipeline/timing.py).
    clock = training_clock(ckpt.root.name)
    earlier = (StageTime.read(clock) if resumed else None) or StageTime(0.0, 0.0)
    with TrainLog.writer(cfg.paths.train_log, trainer.state.history) as out:

        def log(e: StepLog, tokens_per_s: float) -> None:  # tokens/s: console only
            out.append(e)
            progress.update(e)
            if e.step % cfg.train.log_every == 0:
                (earlier + elapsed()).write(clock)
                if not sys.stderr.isatty():
                    print(f"[train] {progress.line(e, tokens_per_s)}", file=sys.stderr)

        try:
            state = trainer.run(log)
        except KeyboardInterrupt:
            print(f"[train] stopped at step {progress.step} (interrupted); {resume_hint(ckpt)}",
                  file=sys.stderr)
            raise SystemExit(130) from None
    best = ckpt.best_weights(state.best_step) if cfg.train.select == "best_dev" else None
    if best is not None:
        setup.model.load_state_dict(best.checkpoint.weights)
    elif cfg.train.select == "best_dev" and state.best_step:
        print(f"warning: no usable checkpoint of best step {state.best_step}; the model file "
              f"holds step {state.step} (the last)", file=sys.stderr)
    selected_step = best.checkpoint.step if best is not None else state.step
    meta = ModelMeta(setup.signature, state.step, cfg.train.select, selected_step,
                     state.best_step, finite(state.best_dev), setup.contract)
    sha = setup.save(Path(cfg.paths.model), meta)
    missing = write_ledger(ckpt, Path(cfg.paths.ledger), cfg, state.step)
    if missing:
        print(f"warning: the ledger lacks the states of step(s) {', '.join(map(str, missing))} "
              f"({ckpt.ledger} was written before them, or under another train.ledger_every): "
              "the audit replays longer segments around them; train.resume: fresh rebuilds "
              "it", file=sys.stderr)
    TrainMetrics(state.step, state.tokens, state.skipped, state.best_step, state.best_dev,
                 state.history[-1].loss if state.history else None, selected_step,
                 setup.report()).save(cfg.paths.train_metrics)
    # Numbers only in the metrics file (`dvc exp show` columns); the model hash is in its
    # sidecar, and evaluate's results.json names the checkpoint folder.
    print(f"[train] model sha256 {sha}; checkpoints in {ckpt.root}", file=sys.stderr)
    total = earlier + spent(world, device)
    total.write(clock)
    record_stage("train", total)
    distributed.close_world(world)


if __name__ == "__main__":
    main()
