"""An interrupted `train` stage resumes when `dvc repro` is run again, and ends where an
uninterrupted run ends (same model bytes, same per-step losses)."""

from __future__ import annotations

import csv
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TINY_PARAMS, copy_repo, merge
from tests.test_pipeline_e2e import dvc

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Long enough (a few seconds) to be killed between two checkpoints.
PARAMS = merge(TINY_PARAMS, {"train": {"max_steps": 120, "checkpoint_every": 10,
                                       "eval_every": 60, "threads": 1}})


def losses(repo: Path) -> list[str]:
    with open(repo / "reports/train_log.csv", newline="") as f:
        return [row["loss"] for row in csv.DictReader(f)]


def completed(checkpoint: Path) -> bool:
    """The checkpoint and its sha256 sidecar are both written and agree (what resume needs).

    The sidecar is written (atomically) after the checkpoint, so a kill between the two
    leaves a checkpoint that resume must skip; waiting for the pair keeps the test
    independent of machine load.
    """
    sidecar = checkpoint.with_name(checkpoint.name + ".sha256")
    if not (checkpoint.exists() and sidecar.exists()):
        return False
    return hashlib.sha256(checkpoint.read_bytes()).hexdigest() == sidecar.read_text().strip()


def kill_train_after_first_checkpoint(repo: Path) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.train"], cwd=repo, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not any(completed(p) for p in repo.glob("checkpoints/*/ckpt-00000010.pt")):
        assert proc.poll() is None, "training ended before it could be interrupted"
        assert time.monotonic() < deadline, "no completed checkpoint after 600 s"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_killed_train_stage_resumes_on_repro_and_matches_an_uninterrupted_run(
        tmp_path: Path) -> None:
    straight = copy_repo(tmp_path / "straight", PARAMS)
    dvc(straight, "repro", "train")
    crashed = copy_repo(tmp_path / "crashed", PARAMS)
    dvc(crashed, "repro", "tokenizer")
    kill_train_after_first_checkpoint(crashed)
    assert not (crashed / "models/model.pt").exists()
    out = dvc(crashed, "repro", "train")
    resumed = re.search(r"resumed from ckpt-(\d{8})\.pt", out)
    assert resumed and int(resumed.group(1)) >= 10, f"train did not resume:\n{out}"
    assert (crashed / "models/model.pt").read_bytes() == (straight / "models/model.pt").read_bytes()
    assert losses(crashed) == losses(straight)
