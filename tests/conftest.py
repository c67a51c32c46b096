"""Shared fixtures: tiny configs, oracle data and a temporary copy of the repository."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import yaml

from seqcore.contract import SpecialIds
from tests.factories import IDS, REPO


#: Parameters small enough for the end-to-end `dvc repro` test (a few hundred pairs).
TINY_PARAMS = {
    "data": {"max_pairs": 400},
    "model": {"transformer": {"d_model": 32, "n_heads": 2, "enc_layers": 1, "dec_layers": 1,
                              "d_ff": 64}},
    # noam at rate 1: a schedule the tiny model learns from in 6 steps (the default cosine
    # 3e-3 is sized for 10,000), so its outputs vary and every metric is defined; best_dev
    # (the default is last) so the result has a best.pt whose corruption a test can check
    "train": {"max_steps": 6, "batch_size": 32, "eval_every": 3, "checkpoint_every": 3,
              "warmup_steps": 2, "schedule": "noam", "lr": 1.0, "select": "best_dev"},
    # greedy: beam search on a 6-step model mostly ends at the first token (the beam-search
    # curse of an untrained model), which leaves length and n-gram metrics undefined
    "decode": {"max_len": 12, "strategy": "greedy"},
}


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)


@pytest.fixture
def ids() -> SpecialIds:
    return IDS


def merge(base: dict, override: dict) -> dict:
    """Recursively overlay ``override`` on ``base`` (new dict)."""
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(base.get(k, {}), v) if isinstance(v, dict) else v
    return out


@functools.cache
def empty_mlflow_store() -> Path:
    """An initialised, empty sqlite MLflow store, made once per test session: creating its
    tables takes 2-3 s, which every new repository would otherwise pay in its first run."""
    folder = Path(tempfile.mkdtemp(prefix="seqcore-empty-store-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    import mlflow  # noqa: PLC0415 (slow import, only for the tests that need a store)

    mlflow.MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    return folder / "mlflow.db"


def copy_repo(dest: Path, overrides: dict | None = None) -> Path:
    """Copy the git-tracked (and untracked, not ignored) files into ``dest`` as a fresh git
    repo, with params.yaml overlaid by ``overrides``, and an empty MLflow store at the
    default ``mlflow.db`` (git ignores it; the first run logs into it as into a new one)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = REPO / name
        if src.is_file() and not name.startswith(("tests/", "benchmarks/")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    params = yaml.safe_load((dest / "params.yaml").read_text())
    (dest / "params.yaml").write_text(yaml.safe_dump(merge(params, overrides or {}),
                                                     sort_keys=False))
    (dest / "dvc.lock").unlink(missing_ok=True)
    shutil.copyfile(empty_mlflow_store(), dest / "mlflow.db")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dest, check=True)
    return dest


def copy_result(src: Path, dest: Path) -> Path:
    """A working copy at ``dest`` of a repository after `dvc repro` (a shared result that a
    test changes): its files, git, DVC cache and an MLflow store whose artifact locations
    point into the copy, not into ``src``."""
    shutil.copytree(src, dest, symlinks=True)
    if (dest / "mlflow.db").exists():
        with contextlib.closing(sqlite3.connect(dest / "mlflow.db")) as db, db:
            db.execute("UPDATE experiments SET artifact_location = "
                       "replace(artifact_location, ?, ?)", (str(src), str(dest)))
            db.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)",
                       (str(src), str(dest)))
    return dest


def tool_env() -> dict[str, str]:
    """The environment for `dvc` and stage subprocesses: this venv first, the repo's MLflow."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="5")
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


#: evaluate.prediction_sample of the audited tiny result; decode.batch_size 8 gives the
#: 24 test examples three decode batches.
AUDIT_SAMPLE = 5


@pytest.fixture(scope="session")
def audit_result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tiny repository after a real `dvc repro` (shared by the audit tests; copy it before
    changing anything), and the repro's output."""
    repo = copy_repo(tmp_path_factory.mktemp("result"), merge(TINY_PARAMS, {
        "evaluate": {"prediction_sample": AUDIT_SAMPLE}, "decode": {"batch_size": 8}}))
    res = subprocess.run([str(Path(sys.executable).with_name("dvc")), "repro"], cwd=repo,
                         env=tool_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return repo, res.stdout + res.stderr
