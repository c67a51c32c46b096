"""The tests' stage worker (tests/programs/stage_server.py) answers a stage command as the
real interpreter does: same exit status, output and files; anything else runs the real one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.factories import REPO
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


def test_code_from_pythonpath_is_served_unless_torch_must_import_afresh(tmp_path: Path) -> None:
    # run_stage's folders hold no code and the audit's replay runs `python -P -m`: both import
    # the code on PYTHONPATH; ATEN_CPU_CAPABILITY (the replay's kernels) acts at torch's import
    folder = stage_worker_bin()
    if folder is None:
        pytest.skip("SEQCORE_STAGE_WORKER=0")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(copy_repo(tmp_path / "repo", {"train": {"lr": -1.0}}) / "params.yaml", work)
    env = tool_env() | {"PYTHONPATH": str(REPO)}
    before = len(served(folder))
    runs = [subprocess.run(["python", *flags, "-m", "pipeline.validate"], cwd=work, env=extra,
                           capture_output=True, text=True)
            for flags, extra in (([], env), (["-P"], env),
                                 ([], env | {"ATEN_CPU_CAPABILITY": "default"}))]
    assert served(folder)[before:] == [f"served pipeline.validate in {work}"] * 2
    assert [r.returncode for r in runs] == [2, 2, 2]
    assert len({r.stderr for r in runs}) == 1 and "train.lr" in runs[0].stderr
