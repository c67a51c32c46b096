"""Resume after SIGKILL gives bit-identical weights and per-step losses.

Each run is a child process of tests/programs/resume_worker.py on tiny synthetic data: a
baseline runs uninterrupted; a killed run SIGKILLs itself at a chosen point (after step k, or
between the micro-batches of step k) and a second process resumes from the checkpoint
folder. The final state-dict hash and the per-step loss log (the checkpointed history) must be
identical.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seqcore.blobs import load_blob, save_blob
from seqcore.training.checkpoint import CheckpointDir, ContractMismatch, check_contract
from seqcore.errors import OneLineError
from tests.factories import REPO
from tests.programs.resume_worker import CKPT_EVERY, MAX_STEPS

#: The training program each job runs (a module, so it imports this checkout's seqcore).
WORKER = "tests.programs.resume_worker"


def job(work: Path, task: str, accum: int = 1, kill_step: int = 0, kill_micro: int = 0,
        lr: float = 1.0) -> dict:
    return {"work": str(work), "task": task, "accum": accum, "kill_step": kill_step,
            "kill_micro": kill_micro, "lr": lr}


def run_jobs(jobs: list[dict]) -> list[int]:
    """Run the jobs in order in fresh processes; returns exit codes (-9 = SIGKILL)."""
    res = subprocess.run([sys.executable, "-m", WORKER, json.dumps(jobs)], cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def stderr_of(work: Path) -> str:
    return (work / "stderr.txt").read_text()


def result(work: Path) -> dict:
    return json.loads((work / "result.json").read_text())


KILLS = {  # name: (task, accum, kill after step k, kill after micro-batch m)
    "mid-epoch-between-checkpoints": ("s2s", 1, 6, 0),
    "just-after-a-checkpoint": ("s2s", 1, 4, 0),
    "just-before-a-checkpoint": ("s2s", 1, 7, 0),
    "inside-an-accumulation-cycle": ("s2s", 2, 0, 2 * 5 + 1),  # first micro-batch of step 6
    "lm-with-carried-state": ("lm", 1, 6, 0),
}
BASELINES = (("s2s", 1), ("s2s", 2), ("lm", 1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[int]]]:
    """Uninterrupted baselines and, per kill case, a killed job followed by a resuming job."""
    root = tmp_path_factory.mktemp("resume")
    jobs = [job(root / f"base-{t}-{a}", t, a) for t, a in BASELINES]
    for name, (task, accum, step, micro) in KILLS.items():
        jobs += [job(root / name, task, accum, step, micro), job(root / name, task, accum)]
    statuses = run_jobs(jobs)
    out = {f"base-{t}-{a}": (root / f"base-{t}-{a}", [s]) for (t, a), s in zip(BASELINES, statuses)}
    for i, name in enumerate(KILLS):
        out[name] = (root / name, statuses[3 + 2 * i : 5 + 2 * i])
    return out


def baseline(runs: dict, task: str, accum: int) -> Path:
    work, statuses = runs[f"base-{task}-{accum}"]
    assert statuses == [0], stderr_of(work)
    return work


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KILLS))
def test_resume_after_sigkill_gives_identical_weights_and_losses(runs: dict, name: str) -> None:
    task, accum, _, _ = KILLS[name]
    work, statuses = runs[name]
    assert statuses == [-signal.SIGKILL, 0], stderr_of(work)
    assert "resumed: ckpt-00000004.pt" in stderr_of(work)
    base, got = result(baseline(runs, task, accum)), result(work)
    assert len(got["history"]) == MAX_STEPS
    assert got["history"] == base["history"]
    assert got["weights"] == base["weights"]


@pytest.mark.slow
def test_truncated_latest_checkpoint_is_reported_and_the_previous_one_used(
    tmp_path: Path, runs: dict, capsys: pytest.CaptureFixture,
) -> None:
    base = baseline(runs, "s2s", 1)
    work = tmp_path / "run"
    shutil.copytree(base / "ckpt", work / "ckpt")
    latest = work / "ckpt" / f"ckpt-{MAX_STEPS:08d}.pt"
    latest.write_bytes(latest.read_bytes()[:1000])  # a crash mid-write without the rename
    found = CheckpointDir(work / "ckpt", 2).latest_good()
    assert found is not None and found.path.name == f"ckpt-{MAX_STEPS - CKPT_EVERY:08d}.pt"
    assert "truncated or corrupted" in found.skipped[0] and latest.name in found.skipped[0]
    assert "skipping unusable checkpoint" in capsys.readouterr().err
    # The resumed run starts from the previous good one and replays the last 4 steps.
    assert run_jobs([job(work, "s2s")]) == [0]
    assert "skipping unusable checkpoint" in stderr_of(work)
    assert result(work) == result(base)


@pytest.mark.slow
def test_checkpoint_from_another_contract_is_refused_with_a_diff(
    tmp_path: Path, runs: dict,
) -> None:
    shutil.copytree(baseline(runs, "s2s", 1) / "ckpt", tmp_path / "run" / "ckpt")
    assert run_jobs([job(tmp_path / "run", "s2s", lr=2.0)]) == [1]
    err = stderr_of(tmp_path / "run")
    assert "ContractMismatch" in err and "lr: checkpoint=1.0 now=2.0" in err
    with pytest.raises(ContractMismatch) as refused:
        check_contract({"task": "g2p", "lr": 1.0, "seed": 1}, {"task": "lm", "lr": 1.0}, "x")
    assert str(refused.value) == (  # one line: the train stage prints it without a traceback
        "x was trained under a different contract (seed: checkpoint=1 now=None; task: "
        "checkpoint='g2p' now='lm'): set these back in params.yaml to resume it, or "
        "train.resume: fresh to start over")
    assert isinstance(refused.value, OneLineError)


class _NotAllowed:
    """An arbitrary class: a weights_only load must refuse to rebuild it."""


def test_checkpoint_loading_never_unpickles_arbitrary_objects(tmp_path: Path) -> None:
    save_blob(tmp_path / "evil.pt", {"x": torch.zeros(1), "obj": _NotAllowed()})
    with pytest.raises(Exception, match="(?i)weights.only|unpickl"):
        load_blob(tmp_path / "evil.pt")
    save_blob(tmp_path / "ok.pt", {"x": torch.ones(2), "n": 3, "t": (1, "a")})
    assert load_blob(tmp_path / "ok.pt")["n"] == 3
