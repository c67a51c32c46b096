"""The tests' stage worker (tests/programs/stage_server.py) answers a stage command as the
real interpreter does: same exit status, output and files; anything else runs the real one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.factories import REPO
from tests.pipeline_helpers import copy_repo, stage_worker_bin, tool_env

pytestmark = pytest.mark.slow  # a stage in a subprocess
Served = Callable[[], list[str]]


@pytest.fixture
def served() -> Served:
    """``served()``: the lines the stage worker's log gained since the test began."""
    folder = stage_worker_bin()
    if folder is None:
        pytest.skip("SEQCORE_STAGE_WORKER=0")
    log = Path(folder).parent / "server.log"
    before = len(log.read_text().splitlines())
    return lambda: log.read_text().splitlines()[before:]


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


def test_a_stage_in_the_worker_exits_and_prints_as_in_a_fresh_interpreter(
        tmp_path: Path, served: Served) -> None:
    env = tool_env()
    assert shutil.which("python", path=env["PATH"]) == f"{stage_worker_bin()}/python"
    repo = copy_repo(tmp_path / "repo", {"train": {"lr": -1.0}})  # validate refuses it
    worker = run(["python", "-m", "pipeline.validate"], repo, env)
    assert served() == [f"served pipeline.validate in {repo}"]
    real = run([sys.executable, "-m", "pipeline.validate"], repo, env)
    assert worker.returncode == real.returncode == 2
    assert (worker.stdout, worker.stderr) == (real.stdout, real.stderr)
    assert "train.lr" in worker.stderr


def test_other_commands_and_changed_code_run_in_the_real_interpreter(
        tmp_path: Path, served: Served) -> None:
    repo = copy_repo(tmp_path / "repo")
    (repo / "pipeline/validate.py").write_text(
        (repo / "pipeline/validate.py").read_text() + "\nprint('edited copy')\n")
    edited = run(["python", "-m", "pipeline.validate"], repo, tool_env())
    other = run(["python", "-c", "import sys; print(sys.flags.no_site)"], repo, tool_env())
    assert served() == []
    assert edited.returncode == 0 and "edited copy" in edited.stdout
    assert other.stdout == "0\n"  # the venv's interpreter with its site-packages, not the shim's


def test_code_from_pythonpath_is_served_unless_torch_must_import_afresh(
        tmp_path: Path, served: Served) -> None:
    # run_stage's folders hold no code and the audit's replay runs `python -P -m`: both import
    # the code on PYTHONPATH; ATEN_CPU_CAPABILITY (the replay's kernels) acts at torch's import
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(copy_repo(tmp_path / "repo", {"train": {"lr": -1.0}}) / "params.yaml", work)
    env = tool_env() | {"PYTHONPATH": str(REPO)}
    runs = [run(["python", *flags, "-m", "pipeline.validate"], work, extra)
            for flags, extra in (([], env), (["-P"], env),
                                 ([], env | {"ATEN_CPU_CAPABILITY": "default"}))]
    assert served() == [f"served pipeline.validate in {work}"] * 2
    assert [r.returncode for r in runs] == [2, 2, 2]
    assert len({r.stderr for r in runs}) == 1 and "train.lr" in runs[0].stderr
