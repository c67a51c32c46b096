"""An interrupted `train` stage resumes when `dvc repro` is run again, and ends where an
uninterrupted run ends (same model bytes, same per-step losses)."""

from __future__ import annotations

import contextlib
import csv
import re
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.audit.replay import run_replay
from pipeline.timing import StageTime, stage_file, training_clock
from tests.factories import REPO
from tests.pipeline_helpers import copy_result, dvc, merge, run_python, tool_env

pytestmark = pytest.mark.e2e

#: Train settings over the session's tiny result: checkpoints at steps 4, 8 and 12, ledger
#: states at 0, 5, 10 and 12 (issue 33: the segment 0->5 spans the resume from step 4, the
#: segment 5->10 the dev evaluation of step 6).
TRAIN = {"train": {"max_steps": 12, "checkpoint_every": 4, "eval_every": 6, "ledger_every": 5,
                   "threads": 1}}


def losses(repo: Path) -> list[str]:
    with open(repo / "reports/train_log.csv", newline="") as f:
        return [row["loss"] for row in csv.DictReader(f)]


def retrained(result: Path, dest: Path, **train: int) -> Path:
    """A copy of the tiny result with TRAIN's settings (train and what follows it stale)."""
    repo = copy_result(result, dest)
    params = merge(yaml.safe_load((repo / "params.yaml").read_text()), TRAIN)
    (repo / "params.yaml").write_text(yaml.safe_dump(merge(params, {"train": train}),
                                                     sort_keys=False))
    return repo


def test_killed_train_stage_resumes_on_repro_and_matches_an_uninterrupted_run(
        audit_result: tuple[Path, str], tmp_path: Path) -> None:
    straight = retrained(audit_result[0], tmp_path / "straight")
    dvc(straight, "repro", "train")
    crashed = retrained(audit_result[0], tmp_path / "crashed", log_every=2)
    # killed once checkpoint 4 and its sidecar are written: a named point, not a timed one
    killed = run_python(crashed, "-m", "tests.programs.killed_stage", "train", "--after",
                        "ckpt-00000004.pt", python=sys.executable,
                        env=tool_env() | {"PYTHONPATH": str(REPO)})
    assert killed.returncode == -9, killed.stderr[-3000:]
    # the killed run wrote no model: the file is still the 6-step one of the copied result
    assert (crashed / "models/model.pt").read_bytes() == \
        (audit_result[0] / "models/model.pt").read_bytes()
    (ckpt,) = crashed.glob("checkpoints/*/ckpt-00000004.pt")
    running = training_clock(ckpt.parent.name, crashed)  # time so far, at each log line
    before = StageTime.read(running)
    out = dvc(crashed, "repro", "train")
    assert "resumed from ckpt-00000004.pt" in out, f"train did not resume:\n{out}"
    assert (crashed / "models/model.pt").read_bytes() == (straight / "models/model.pt").read_bytes()
    assert losses(crashed) == losses(straight)
    assert len(losses(straight)) == 12
    # issue 33: the resumed run's ledger is the uninterrupted run's, byte for byte, and every
    # segment replays bit for bit: 0->5 across the resume from step 4, 5->10 across the dev
    # evaluation of step 6, 10->12 to the last state (and best.pt, select: best_dev)
    names = sorted(p.name for p in (straight / "models/ledger").iterdir())
    assert [n for n in names if not n.endswith(".sha256")] == [
        "best.pt", "ckpt-00000000.pt", "ckpt-00000005.pt", "ckpt-00000010.pt",
        "ckpt-00000012.pt"]
    assert sorted(p.name for p in (crashed / "models/ledger").iterdir()) == names
    for name in names:
        assert (crashed / "models/ledger" / name).read_bytes() == \
            (straight / "models/ledger" / name).read_bytes(), name
    with contextlib.chdir(crashed):
        assert run_replay("params.yaml", Path("models/ledger"), [1, 2, 3]) == []
    # the train stage's time counts the killed part and the resumed part (issue 29)
    total = StageTime.read(stage_file("train", crashed))
    assert before is not None and total is not None
    assert total.wall_s > before.wall_s > 0 and total.cpu_s > before.cpu_s > 0
    assert StageTime.read(running) == total


def test_ctrl_c_stops_training_in_one_line_naming_the_step_and_the_checkpoint_to_resume(
        audit_result: tuple[Path, str], tmp_path: Path) -> None:
    repo = retrained(audit_result[0], tmp_path / "interrupted", log_every=2)
    # SIGINT (what Ctrl-C sends) once checkpoint 4 is written
    stopped = run_python(repo, "-m", "tests.programs.killed_stage", "train", "--after",
                         "ckpt-00000004.pt", "--signal", "INT", python=sys.executable,
                         env=tool_env() | {"PYTHONPATH": str(REPO)})
    assert stopped.returncode == 130 and "Traceback" not in stopped.stderr, stopped.stderr
    lines = stopped.stderr.strip().splitlines()
    assert re.fullmatch(r"\[train\] stopped at step [34] \(interrupted\); `dvc repro` resumes "
                        r"from checkpoints/\w+/ckpt-00000004\.pt", lines[-1]), lines[-1]
    steps = [ln for ln in lines if ln.startswith("[train] step ")]
    assert steps and steps[0].startswith("[train] step 2/12 loss "), steps
    assert "dev_nll - " in steps[0] and " nan" not in stopped.stderr  # no dev NLL yet: no nan
    assert re.search(r" elapsed \d+:\d\d:\d\d eta \d+:\d\d:\d\d$", steps[0]), steps[0]

