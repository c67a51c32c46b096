"""The tests' stage worker (tests/programs/stage_server.py) answers a stage command as the
real interpreter does: same exit status, output and files; anything else runs the real one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline_helpers import copy_repo, stage_worker_bin, tool_env

pytestmark = pytest.mark.slow  # a stage in a subprocess


def served(folder: str) -> list[str]:
    return (Path(folder).parent / "server.log").read_text().splitlines()


def test_a_stage_in_the_worker_exits_and_prints_as_in_a_fresh_interpreter(
        tmp_path: Path) -> None:
    folder = stage_worker_bin()
    if folder is None:
        pytest.skip("SEQCORE_STAGE_WORKER=0")
    env = tool_env()
    assert shutil.which("python", path=env["PATH"]) == str(Path(folder) / "python")
    repo = copy_repo(tmp_path / "repo", {"train": {"lr": -1.0}})  # validate refuses it
    before = len(served(folder))
    worker = subprocess.run(["python", "-m", "pipeline.validate"], cwd=repo, env=env,
                            capture_output=True, text=True)
    assert served(folder)[before:] == [f"served pipeline.validate in {repo}"]
    real = subprocess.run([sys.executable, "-m", "pipeline.validate"], cwd=repo, env=env,
                          capture_output=True, text=True)
    assert worker.returncode == real.returncode == 2
    assert (worker.stdout, worker.stderr) == (real.stdout, real.stderr)
    assert "train.lr" in worker.stderr


def test_other_commands_and_changed_code_run_in_the_real_interpreter(tmp_path: Path) -> None:
    folder = stage_worker_bin()
    if folder is None:
        pytest.skip("SEQCORE_STAGE_WORKER=0")
    repo = copy_repo(tmp_path / "repo")
    (repo / "pipeline/validate.py").write_text(
        (repo / "pipeline/validate.py").read_text() + "\nprint('edited copy')\n")
    before = len(served(folder))
    edited = subprocess.run(["python", "-m", "pipeline.validate"], cwd=repo, env=tool_env(),
                            capture_output=True, text=True)
    other = subprocess.run(["python", "-c", "import sys; print(sys.flags.no_site)"], cwd=repo,
                           env=tool_env(), capture_output=True, text=True)
    assert served(folder)[before:] == []
    assert edited.returncode == 0 and "edited copy" in edited.stdout
    assert other.stdout == "0\n"  # the venv's interpreter with its site-packages, not the shim's
