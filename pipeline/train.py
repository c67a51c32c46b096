"""Stage train: resume from the newest good checkpoint (if any) and train to max_steps (then
mrt_steps of minimum risk training, seqcore.training.mrt).

The checkpoint folder is keyed by a hash of the training contract, so a changed parameter
starts a fresh run in its own folder, and an interrupted run resumes when `dvc repro` is run
again. The task (seqcore.tasks) builds what is trained: the pair tasks an encoder-decoder on
the encoded pairs, ``task: lm`` the stateful RNN LM on documents. ``train.nproc`` > 1
relaunches this stage under ``torchrun --standalone`` (pipeline/ranks.py; docs/scale-out.md);
rank 0 writes the outputs.
"""

from __future__ import annotations

import math
import sys

from pipeline.ranks import build, resume_hint, spent, start
from pipeline.stage import cpu_kernels, load
from pipeline.timing import StageTime, elapsed, record_stage, training_clock
from seqcore.artifacts.train_log import StepLog, TrainLog
from seqcore.determinism import device_kind
from seqcore.progress import TrainingProgress
from seqcore.training import distributed
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.loop import TrainLoop
from seqcore.training.select import save_selected


def main() -> None:
    cfg = load(__doc__)
    cpu_kernels(cfg.train.cpu_kernels, device_kind(cfg.train.device), "train.cpu_kernels",
                "train", announce=True)
    world, device = start(cfg)
    setup = build(cfg, device, world)
    ckpt = CheckpointDir(distributed.checkpoint_folder(cfg.paths.checkpoints, setup.contract),
                         cfg.train.keep_last)
    distributed.barrier(world)
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
    progress = TrainingProgress(trainer.state.step, cfg.train.total_steps)
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
            if trainer.dev_outputs is not None and not math.isnan(e.dev_wer):  # it decoded
                for line in setup.show_dev(trainer.dev_outputs, cfg.train.dev_decode_show):
                    print(f"[train] dev step {e.step}: {line}", file=sys.stderr)

        try:
            state = trainer.run(log)
        except KeyboardInterrupt:
            print(f"[train] stopped at step {progress.step} (interrupted); {resume_hint(ckpt)}",
                  file=sys.stderr)
            raise SystemExit(130) from None
    saved = save_selected(cfg, setup, ckpt, state)
    for warning in saved.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    # Numbers only in the metrics file (`dvc exp show` columns); the model hash is in its
    # sidecar, and evaluate's results.json names the checkpoint folder.
    print(f"[train] model sha256 {saved.sha256}; checkpoints in {ckpt.root}", file=sys.stderr)
    total = earlier + spent(world, device)
    total.write(clock)
    record_stage("train", total)
    distributed.close_world(world)


if __name__ == "__main__":
    main()
