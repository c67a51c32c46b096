"""Byte-identical reproduction (issue 12): training killed mid-checkpoint-write and resumed
writes an uninterrupted run's bytes in every file DVC tracks; the run's git tags describe the
code and params, not the files the pipeline writes itself."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.git_state import git_state
from seqcore.config import load_config
from seqcore.training.checkpoint import CheckpointDir
from tests.factories import REPO
from tests.pipeline_helpers import TINY_PARAMS, copy_repo, merge, run_python

PARAMS = merge(TINY_PARAMS, {"train": {"max_steps": 12, "checkpoint_every": 4,
                                       "eval_every": 4, "keep_last": 2, "threads": 1}})

#: Runs the named stages in one process (torch is imported once).
STAGES = r"""
import runpy, sys
for stage in sys.argv[1:]:
    sys.argv = [f"pipeline/{stage}.py"]
    runpy.run_module(f"pipeline.{stage}", run_name="__main__", alter_sys=True)
"""

TRACKED = ("checkpoints", "models/model.pt", "models/model.pt.sha256", "reports/train_log.csv",
           "reports/train_metrics.json")


def python(repo: Path, *args: str, status: int = 0) -> subprocess.CompletedProcess:
    res = run_python(repo, *args, python=sys.executable, timeout=300,
                     env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == status, res.stderr[-3000:]
    return res


def tree_digest(repo: Path, name: str) -> dict[str, str]:
    """sha256 of every file of an output (a file or a folder), by relative path: equal
    digests give equal md5 in dvc.lock."""
    root = repo / name
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    return {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny repository copy (committed) with the stages before train run."""
    repo = copy_repo(tmp_path_factory.mktemp("repro") / "repo", PARAMS)
    python(repo, "-c", STAGES, "fetch", "prepare", "tokenizer")
    return repo


@pytest.mark.slow
def test_training_killed_during_a_checkpoint_write_resumes_to_identical_bytes(
        prepared: Path, tmp_path: Path) -> None:
    straight = shutil.copytree(prepared, tmp_path / "straight", symlinks=True)
    crashed = shutil.copytree(prepared, tmp_path / "crashed", symlinks=True)
    python(straight, "-c", STAGES, "train")
    python(crashed, "-m", "tests.programs.killed_stage", "train", "--during", "ckpt-00000008.pt",
           status=-9)
    assert list(crashed.glob("checkpoints/*/.ckpt-00000008.pt.tmp-*"))
    res = python(crashed, "-c", STAGES, "train")
    assert "resumed from ckpt-00000004.pt" in res.stderr
    assert "removed .ckpt-00000008.pt.tmp-" in res.stderr
    for name in TRACKED:
        assert tree_digest(crashed, name) == tree_digest(straight, name), name
    assert "tokens_per_s" not in (straight / "reports/train_log.csv").read_text()


def test_leftover_temporary_checkpoint_files_are_removed_and_nothing_else(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=2)
    names = (".ckpt-00000008.pt.tmp-123", ".ckpt-00000008.pt.sha256.tmp-123",
             ".best.pt.tmp-9", "ckpt-00000004.pt", "ckpt-00000004.pt.sha256", "best.pt")
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    assert ckpt.remove_partial() == sorted(names[:3])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])


@pytest.mark.slow
def test_git_dirty_ignores_what_the_pipeline_writes_and_sees_code_and_params(
        prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = shutil.copytree(prepared, tmp_path / "git", symlinks=True)
    monkeypatch.chdir(repo)
    cfg = load_config("params.yaml")
    # the copy committed reports/ and then the stages rewrote outputs, and a dvc.lock appears
    (repo / "dvc.lock").write_text("schema: '2.0'\n")
    (repo / cfg.paths.rejects).write_text("rewritten by prepare\n")
    (repo / cfg.paths.train_log).write_text("step\n")
    state = git_state(cfg)
    assert state["git.dirty"] == "False"
    assert len(state["git.commit"]) == 40
    for edit in ("params.yaml", "seqcore/losses.py"):
        path = repo / edit
        text = path.read_text()
        path.write_text(text + "\n# edited\n")
        assert git_state(cfg)["git.dirty"] == "True", edit
        path.write_text(text)
    (repo / "seqcore/new_module.py").write_text("X = 1\n")  # untracked code counts too
    assert git_state(cfg)["git.dirty"] == "True"
