"""The real `dvc repro` on a tiny parameter set, in a temporary copy of the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY_PARAMS, copy_repo

pytestmark = pytest.mark.e2e
STAGES = ("fetch", "prepare", "tokenizer", "train", "decode", "evaluate")


def dvc(repo: Path, *args: str) -> str:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("MLFLOW_TRACKING_URI", None)
    res = subprocess.run([shutil.which("dvc", path=env["PATH"]) or "dvc", *args], cwd=repo,
                         env=env, capture_output=True, text=True)
    assert res.returncode == 0, f"dvc {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout + res.stderr


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("repo"), TINY_PARAMS)
    dvc(repo, "repro")
    return repo


def test_repro_writes_every_declared_output(tiny_repo: Path) -> None:
    for path in ("data/raw/cmudict.dict", "data/prepared/manifest.json", "tokenizer/contract.json",
                 "models/model.pt", "predictions/test.jsonl", "reports/metrics.json",
                 "reports/report.md", "reports/buckets.csv", "reports/train_log.csv", "mlflow.db"):
        assert (tiny_repo / path).exists(), path


def test_status_is_clean_and_second_repro_reruns_nothing(tiny_repo: Path) -> None:
    assert "up to date" in dvc(tiny_repo, "status")
    # byte-compiled files (written whenever Python imports a module) are not code changes
    pyc = tiny_repo / "seqcore/training/__pycache__/fresh.cpython-311.pyc"
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(b"not a real pyc")
    assert "up to date" in dvc(tiny_repo, "status")
    out = dvc(tiny_repo, "repro")
    assert "Running stage" not in out


def test_metrics_are_within_their_valid_ranges(tiny_repo: Path) -> None:
    m = json.loads((tiny_repo / "reports/metrics.json").read_text())
    for key in ("exact_match", "exact_match_multi_ref"):
        assert 0.0 <= m[key] <= 1.0
    assert m["token_error_rate"] >= 0.0
    assert m["test_perplexity"] >= 1.0 and m["test_ppl_denominator_tokens"] > 0
    assert m["examples"] == sum(1 for _ in open(tiny_repo / "predictions/test.jsonl"))


def test_changing_a_decode_parameter_reruns_only_decode_and_evaluate(tiny_repo: Path) -> None:
    params = tiny_repo / "params.yaml"
    params.write_text(params.read_text().replace("min_len: 0", "min_len: 1"))
    out = dvc(tiny_repo, "repro")
    ran = {s for s in STAGES if f"Running stage '{s}'" in out}
    assert ran == {"decode", "evaluate"}
