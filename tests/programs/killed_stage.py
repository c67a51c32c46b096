"""Run a pipeline stage that SIGKILLs itself at a named point of its checkpoint writes.

``python -m tests.programs.killed_stage STAGE --after NAME`` kills the process once the
checkpoint file NAME and its sha256 sidecar are written (a crash between two checkpoints);
``--during NAME`` kills it half-way through writing NAME (the temporary file holds half the
bytes and the rename never happens, as after a real crash inside a write). Kill points are
named, not timed, so the test does not depend on machine load. Exit status -9 when it fired;
the stage's own status when NAME was never written. ``--signal INT`` sends SIGINT instead
(a user's Ctrl-C: Python raises KeyboardInterrupt where the stage is).
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys
from pathlib import Path

import seqcore.blobs as blobs
import seqcore.training.checkpoint as checkpoint


SIGNAL = [signal.SIGKILL]


def die() -> None:
    os.kill(os.getpid(), SIGNAL[0])


def kill_after(name: str) -> None:
    real = checkpoint.save_blob

    def save_then_die(path: Path, payload: dict) -> str:
        digest = real(path, payload)
        if path.name == name:
            die()
        return digest
    checkpoint.save_blob = save_then_die


def kill_during(name: str) -> None:
    real = blobs.atomic_write

    def dying_write(path: Path, data: bytes) -> None:
        if path.name == name:
            path.with_name(f".{path.name}.tmp-{os.getpid()}").write_bytes(data[: len(data) // 2])
            die()
        real(path, data)
    blobs.atomic_write = dying_write  # save_blob writes every blob through it


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("stage")
    point = parser.add_mutually_exclusive_group(required=True)
    point.add_argument("--after", metavar="NAME")
    point.add_argument("--during", metavar="NAME")
    parser.add_argument("--signal", default="KILL", choices=("KILL", "INT"))
    args = parser.parse_args()
    SIGNAL[0] = getattr(signal, f"SIG{args.signal}")
    # Ctrl-C at a terminal raises KeyboardInterrupt; a job started in the background of a
    # non-interactive shell (a CI runner's `cmd &`) inherits SIGINT ignored, and Python then
    # installs no handler: restore the terminal's behaviour being simulated.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    kill_after(args.after) if args.after else kill_during(args.during)
    sys.argv = [f"pipeline/{args.stage}.py"]
    runpy.run_module(f"pipeline.{args.stage}", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
