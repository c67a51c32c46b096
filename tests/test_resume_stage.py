"""An interrupted `train` stage resumes when `dvc repro` is run again, and ends where an
uninterrupted run ends (same model bytes, same per-step losses)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.factories import REPO
from tests.pipeline_helpers import copy_result, dvc, merge, tool_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Train settings over the session's tiny result: checkpoints at steps 4, 8 and 12.
TRAIN = {"train": {"max_steps": 12, "checkpoint_every": 4, "eval_every": 6, "threads": 1}}


def losses(repo: Path) -> list[str]:
    with open(repo / "reports/train_log.csv", newline="") as f:
        return [row["loss"] for row in csv.DictReader(f)]


def retrained(result: Path, dest: Path) -> Path:
    """A copy of the tiny result with TRAIN's settings (train and what follows it stale)."""
    repo = copy_result(result, dest)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    (repo / "params.yaml").write_text(yaml.safe_dump(merge(params, TRAIN), sort_keys=False))
    return repo


def test_killed_train_stage_resumes_on_repro_and_matches_an_uninterrupted_run(
        audit_result: tuple[Path, str], tmp_path: Path) -> None:
    straight = retrained(audit_result[0], tmp_path / "straight")
    dvc(straight, "repro", "train")
    crashed = retrained(audit_result[0], tmp_path / "crashed")
    # killed once checkpoint 4 and its sidecar are written: a named point, not a timed one
    killed = subprocess.run([sys.executable, "-m", "tests.programs.killed_stage", "train",
                             "--after", "ckpt-00000004.pt"], cwd=crashed, capture_output=True,
                            text=True, env=tool_env() | {"PYTHONPATH": str(REPO)})
    assert killed.returncode == -9, killed.stderr[-3000:]
    # the killed run wrote no model: the file is still the 6-step one of the copied result
    assert (crashed / "models/model.pt").read_bytes() == \
        (audit_result[0] / "models/model.pt").read_bytes()
    out = dvc(crashed, "repro", "train")
    assert "resumed from ckpt-00000004.pt" in out, f"train did not resume:\n{out}"
    assert (crashed / "models/model.pt").read_bytes() == (straight / "models/model.pt").read_bytes()
    assert losses(crashed) == losses(straight)
    assert len(losses(straight)) == 12
