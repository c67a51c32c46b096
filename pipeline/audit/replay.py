"""The training replayed from its ledger (issue 33): ``python -m pipeline.audit.replay``.

The audit rebuilds the state before the first step from the seed and replays k segments of
the ledger (seqcore/ledger.py), the last always among them: each resumes from its first
state, exactly as a killed training resumes, trains its steps on the declared data and
params, and must reach the ledger's next state bit for bit. Weights trained on other rows,
under other params or by other code part from the ledger in the first segment that used them.

The replay runs in a child process (``run_replay``) on the auditor's own code, with the
training's thread count, under the training's CPU kernel profile (``train.cpu_kernels``,
seqcore.kernels): a portable result replays bit for bit on any x86-64 CPU with AVX2; a
native one on the kind of CPU kernels the training recorded (torch's
``ATEN_CPU_CAPABILITY``), so a result trained on an AVX2 host replays on an AVX-512 one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.task_io import PipelineIO
from pipeline.stage import load_params
from seqcore.config import Config
from seqcore.determinism import device_kind, resolve_device, set_determinism
from seqcore.kernels import KernelProfileError, check_portable, host_capability, profile_env
from seqcore.ledger import (
    Segment, choose, first_difference, ledger_segments, state_difference)
from seqcore.tasks import get_task
from seqcore.training import distributed
from seqcore.training.checkpoint import (
    Checkpoint, CheckpointDir, ContractMismatch, ledger_files, step_of)
from seqcore.training.distributed import WorldMismatch
from seqcore.training.loop import TrainLoop


def _trainer(cfg: Config, folder: Path) -> TrainLoop:
    """A TrainLoop over the declared inputs, checkpointing into ``folder``, exactly as the
    train stage builds it (one process on the configured device)."""
    device = resolve_device(cfg.train.device, 0)
    set_determinism(cfg.train.seed, cfg.train.threads, device)
    setup = get_task(cfg.task).training_setup(cfg, PipelineIO(cfg, "train"), device,
                                              distributed.World())
    train = replace(cfg.train, keep_last=1 << 30)
    return TrainLoop(setup.model, train, setup.feed, CheckpointDir(folder, train.keep_last),
                     setup.contract, setup.d_model)


class _Reached(Exception):
    """The replay reached its segment's last step."""


def replay_first_state(cfg: Config, ledger: Path) -> list[str]:
    """The ledger's state before the first step against one rebuilt from the seed."""
    first = ledger_files(ledger)[0]
    with tempfile.TemporaryDirectory(prefix="audit-replay-") as tmp:
        trainer = _trainer(replace(cfg, train=replace(cfg.train, resume="fresh")), Path(tmp))
        trainer.resume()
        diff = state_difference(first, trainer.checkpoint().payload)
    return [] if diff is None else [
        f"state before the first step: {first} and the state rebuilt from the seed differ at "
        f"{diff}"]


def replay_segment(cfg: Config, segment: Segment) -> list[str]:
    """Resume from the segment's first state, train to its last step, compare the state
    reached with the ledger's (and, under ``select: best_dev``, a best.pt written on the way
    with the ledger's)."""
    end = step_of(segment.end)
    with tempfile.TemporaryDirectory(prefix="audit-replay-") as tmp:
        for name in (segment.start.name, segment.start.name + ".sha256"):
            shutil.copyfile(segment.start.with_name(name), Path(tmp) / name)
        trainer = _trainer(replace(cfg, train=replace(cfg.train, resume="auto")), Path(tmp))
        try:
            resumed = trainer.resume()
        except (ContractMismatch, WorldMismatch) as err:  # trained under other params
            return [f"{segment.label()}: {err}"]
        if resumed != segment.start.name:
            return [f"{segment.label()}: could not resume from {segment.start} (resumed "
                    f"{resumed})"]

        def stop(step: int) -> None:
            if step >= end:
                raise _Reached

        trainer.on_step = stop
        with contextlib.suppress(_Reached):
            trainer.run(lambda entry, tokens_per_s: None)
        diffs = []
        diff = state_difference(segment.end, trainer.checkpoint().payload)
        if diff:
            diffs.append(f"{segment.label()}: the replay on the declared data and params "
                         f"differs from {segment.end} at {diff}")
        best, replayed_best = segment.end.parent / "best.pt", Path(tmp) / "best.pt"
        if replayed_best.exists() and best.exists() and \
                best.read_bytes() != replayed_best.read_bytes():
            kept, again = Checkpoint.load(best), Checkpoint.load(replayed_best)
            if kept.step == again.step:  # the same best, replayed
                diffs.append(f"{segment.label()}: the best state replayed differs from {best} "
                             f"at {first_difference(kept.payload, again.payload) or 'the bytes'}")
    return diffs


def best_segment(segments: list[Segment]) -> int | None:
    """The segment in which ``best.pt`` of the ledger was written (None without one)."""
    best = segments[-1].end.parent / "best.pt" if segments else None
    if best is None or not best.exists():
        return None
    step = Checkpoint.load(best).step
    return next((s.index for s in segments if step_of(s.start) < step <= step_of(s.end)), None)


@dataclass(frozen=True)
class Plan:
    """What one replay does: its seed, the segments and how many there are."""
    seed: int
    chosen: list[int]
    n: int

    def line(self, segments: list[Segment]) -> str:
        shown = ", ".join(segments[i - 1].label() for i in self.chosen)
        return (f"replays {len(self.chosen)} of {self.n} segments ({shown}) and the state "
                f"before the first step; seed {self.seed} (repeat with --replay-seed "
                f"{self.seed})")


def plan(ledger: Path, k: int, seed: int | None) -> tuple[Plan, list[Segment]]:
    """The segments to replay: the last, the one holding best.pt (if any), and random others
    up to k; a fresh seed when none is given."""
    segments = ledger_segments(ledger)
    seed = secrets.randbelow(10**9) if seed is None else seed
    chosen = set(choose(len(segments), k, seed))
    best = best_segment(segments)
    if best is not None:
        chosen.add(best)
    return Plan(seed, sorted(chosen), len(segments)), segments


def replay_diffs(cfg: Config, ledger: Path, chosen: list[int]) -> list[str]:
    """The first state, then each chosen segment, replayed and compared (in this process)."""
    segments = ledger_segments(ledger)
    diffs = replay_first_state(cfg, ledger)
    for index in chosen:
        started = time.perf_counter()
        found = replay_segment(cfg, segments[index - 1])
        print(f"[audit]   {segments[index - 1].label()}: "
              f"{'differs' if found else 'bit-identical'} ({time.perf_counter() - started:.1f} s)",
              file=sys.stderr, flush=True)
        diffs += found
    return diffs


def capability_env(recorded: str | None) -> dict[str, str]:
    """``ATEN_CPU_CAPABILITY`` for the child that replays, when the training recorded a CPU
    capability this host also has but would not pick by itself (an AVX2 result on an AVX-512
    host); empty otherwise."""
    order = ["default", "avx2", "avx512"]
    if not recorded or recorded.lower() not in order:
        return {}
    here = host_capability().lower()  # the CPU's, not this (maybe portable) process's
    if here == recorded.lower() or here not in order or \
            order.index(recorded.lower()) > order.index(here):
        return {}
    return {"ATEN_CPU_CAPABILITY": recorded.lower()}


def kernel_env(profile: str, capability: str | None,
               environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with the training's CPU kernels: the portable profile's variables, or
    (native) none of them and the recorded ATen level where this host can take it (a
    native replay never inherits the variables of an auditor that runs portable)."""
    env = profile_env(profile, environ)
    return env if profile == "portable" else env | capability_env(capability)


def run_replay(params: str, ledger: Path, chosen: list[int],
               capability: str | None = None) -> list[str]:
    """``replay_diffs`` in a child process of this (the auditor's) code, run in the current
    directory (the result's): its determinism settings and thread count stay out of the
    audit's process, and it runs on the CPU kernels the training used (its
    ``train.cpu_kernels``; under native, ``capability``: the recorded ATen level)."""
    profile = load_params(params).train.cpu_kernels
    here = str(Path(__file__).resolve().parents[2])
    env = {**kernel_env(profile, capability, dict(os.environ)),
           "PYTHONPATH": os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        # -P: the result's folder is not put first on sys.path (the auditor's code replays)
        proc = subprocess.run(
            [sys.executable, "-P", "-m", "pipeline.audit.replay", "--params", params,
             "--ledger", str(ledger), "--segments", ",".join(map(str, chosen)),
             "--out", out.name], env=env, stdout=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"the replay stopped (exit status {proc.returncode}; its error "
                               "is printed above)")
        return json.loads(Path(out.name).read_text())["diffs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--ledger", default=None, help="default: paths.ledger")
    parser.add_argument("--segments", default="", help="1-based, comma-separated")
    parser.add_argument("--out", required=True, help="JSON file for the differences")
    args = parser.parse_args()
    cfg = load_params(args.params)
    if cfg.train.cpu_kernels == "portable" and device_kind(cfg.train.device) == "cpu":
        try:
            check_portable("train.cpu_kernels")
        except KernelProfileError as err:
            sys.exit(f"[audit] a portable training replays only where the profile holds: {err}")
    ledger = Path(args.ledger or cfg.paths.ledger)
    chosen = [int(x) for x in args.segments.split(",") if x]
    diffs = replay_diffs(cfg, ledger, chosen)
    Path(args.out).write_text(json.dumps({"diffs": diffs}))


if __name__ == "__main__":
    main()
