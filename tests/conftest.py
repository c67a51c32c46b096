"""Shared fixtures: tiny configs, oracle data and a temporary copy of the repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from seqcore.contract import SpecialIds

REPO = Path(__file__).resolve().parents[1]

#: Parameters small enough for the end-to-end `dvc repro` test (a few hundred pairs).
TINY_PARAMS = {
    "data": {"max_pairs": 400},
    "model": {"transformer": {"d_model": 32, "n_heads": 2, "enc_layers": 1, "dec_layers": 1,
                              "d_ff": 64}},
    "train": {"max_steps": 6, "batch_size": 32, "eval_every": 3, "checkpoint_every": 3,
              "warmup_steps": 2},
    "decode": {"max_len": 12},
}


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)


@pytest.fixture
def ids() -> SpecialIds:
    return SpecialIds(pad=0, unk=1, bos=2, eos=3)


def merge(base: dict, override: dict) -> dict:
    """Recursively overlay ``override`` on ``base`` (new dict)."""
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(base.get(k, {}), v) if isinstance(v, dict) else v
    return out


def copy_repo(dest: Path, overrides: dict | None = None) -> Path:
    """Copy the git-tracked (and untracked, not ignored) files into ``dest`` as a fresh git
    repo, with params.yaml overlaid by ``overrides``."""
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
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dest, check=True)
    return dest
