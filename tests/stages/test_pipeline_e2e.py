"""The real `dvc repro` on a tiny parameter set, in a temporary copy of the repository (the
session's result, which these tests change and restore)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import sqlite3
import subprocess
from pathlib import Path

import pytest

from pipeline.git_state import commit_copy, git_changes
from tests.pipeline_helpers import (
    TINY_PARAMS, dvc, dvc_process, restored, result_runs, run_python, tool_env)

pytestmark = pytest.mark.e2e
STAGES = ("fetch", "prepare", "tokenizer", "train", "decode", "evaluate")


def test_repro_writes_every_declared_output(result: Path) -> None:
    for path in ("data/raw/cmudict.dict", "data/prepared/manifest.json", "tokenizer/contract.json",
                 "models/model.pt", "predictions/test.jsonl", "reports/metrics.json",
                 "reports/report.md", "reports/buckets.csv", "reports/train_log.csv"):
        assert (result / path).exists(), path
    # the repository starts with an empty store (tests.conftest.copy_repo): the run is in it
    with contextlib.closing(sqlite3.connect(result / "mlflow.db")) as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_status_is_clean_and_second_repro_reruns_nothing(result: Path) -> None:
    assert "up to date" in dvc(result, "status")
    # byte-compiled files (written whenever Python imports a module) are not code changes
    pyc = result / "seqcore/training/__pycache__/fresh.cpython-311.pyc"
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(b"not a real pyc")
    assert "up to date" in dvc(result, "status")
    out = dvc(result, "repro")
    assert "Running stage" not in out


def test_make_repro_scores_again_so_git_status_shows_a_figure_forged_with_its_lock(
        result_copy: Path) -> None:
    """In a fresh clone evaluate's outs are the committed reports, which match their lock, so
    `dvc repro` skips evaluate: a figure forged in reports/metrics.json together with its md5
    in dvc.lock would pass a clean `git status`. `make repro` runs the evaluation anyway: the
    recomputed file replaces the forged one, `git status` names it, and the run is logged."""
    repo, metrics = result_copy, result_copy / "reports/metrics.json"
    true = metrics.read_bytes()
    metrics.write_text(json.dumps(json.loads(true) | {"word_error_rate": 0.01}, indent=2))
    dvc(repo, "commit", "-f", "evaluate")  # the forger's lock: the forged file's md5
    commit_copy(repo, "a forged result", "forger")
    runs = len(result_runs(repo)[1])
    made = subprocess.run(["make", "-s", "-o", ".venv/.installed", "repro"], cwd=repo,
                          env=tool_env(), capture_output=True, text=True)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    assert metrics.read_bytes() == true
    with contextlib.chdir(repo):
        assert sorted(git_changes()) == ["dvc.lock", "reports/metrics.json"]
    assert len(result_runs(repo)[1]) == runs + 1


def test_metrics_are_within_their_valid_ranges(result: Path) -> None:
    m = json.loads((result / "reports/metrics.json").read_text())
    for key in ("exact_match", "exact_match_multi_ref"):
        assert 0.0 <= m[key] <= 1.0
    assert m["token_error_rate"] >= 0.0
    assert m["test_perplexity"] >= 1.0 and m["test_ppl_denominator_tokens"] > 0
    assert m["examples"] == len((result / "predictions/test.jsonl").read_bytes().splitlines())


def test_changing_a_decode_parameter_reruns_only_decode_and_evaluate(result: Path) -> None:
    params = result / "params.yaml"
    params.write_text(params.read_text().replace("min_len: 0", "min_len: 1"))
    out = dvc(result, "repro")
    ran = {s for s in STAGES if f"Running stage '{s}'" in out}
    assert ran == {"decode", "evaluate"}


def test_metrics_files_are_strict_json(result: Path) -> None:
    def refuse(constant: str) -> None:  # NaN/Infinity, which most JSON readers reject
        raise AssertionError(f"{result / name}: bare {constant} is not JSON")

    for name in ("reports/metrics.json", "reports/train_metrics.json",
                 "predictions/test.header.json", "tokenizer/contract.json"):
        json.loads((result / name).read_text(), parse_constant=refuse)


def stage(repo: Path, name: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return run_python(repo, "-m", f"pipeline.{name}", env=env)


def test_an_unknown_key_stops_repro_even_when_no_stage_reads_it(result: Path) -> None:
    params = result / "params.yaml"
    lr = f"  lr: {TINY_PARAMS['train']['lr']}\n"
    with restored(params):
        good = params.read_text()
        assert lr in good
        params.write_text(good.replace(lr, f"{lr}  lrr: 0.5\n", 1))
        res = dvc_process(result, "repro")
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "params.yaml: train.lrr = 0.5: unknown key; did you mean train.lr?" in out
    assert {s for s in STAGES if f"Running stage '{s}'" in out} == set()
    assert "Traceback" not in out
    assert "up to date" in dvc(result, "status")


def test_corrupt_best_checkpoint_falls_back_to_the_same_weights_on_rerun(result: Path) -> None:
    [best] = (result / "checkpoints").glob("*/best.pt")
    model = result / "models/model.pt"
    with restored(best, result / "reports/train_log.csv", model) as (good, _, weights):
        best.write_bytes(good[: len(good) // 2])
        res = stage(result, "train")
        rerun = model.read_bytes()  # read before the restore
    assert res.returncode == 0, res.stderr
    assert f"warning: skipping unusable checkpoint {best.relative_to(result)}: sha256" in res.stderr
    assert rerun == weights


@pytest.mark.parametrize("damage", ["truncated", "sidecar deleted"])
def test_a_best_checkpoint_the_stage_refused_is_never_copied_into_the_ledger(
        result: Path, damage: str) -> None:
    # issue 54: the ledger (a DVC output) took the refused best.pt, and with its sidecar
    # gone every later train stage died in a FileNotFoundError traceback
    [best] = (result / "checkpoints").glob("*/best.pt")
    sidecar = best.with_name("best.pt.sha256")
    with restored(best, sidecar) as (good, _):
        if damage == "truncated":
            best.write_bytes(good[: len(good) // 2])
        else:
            sidecar.unlink()
        runs = [stage(result, "train") for _ in range(2)]  # and the stage stays runnable
        ledger = sorted(p.name for p in (result / "models/ledger").iterdir())
    for res in runs:
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        assert f"warning: {best.relative_to(result)} is not copied into models/ledger: " \
            in res.stderr
    assert "best.pt" not in ledger and "best.pt.sha256" not in ledger
    assert ledger and all(n.startswith("ckpt-") for n in ledger)
    assert stage(result, "train").returncode == 0
    assert "best.pt" in {p.name for p in (result / "models/ledger").iterdir()}


@pytest.mark.parametrize("name", ["decode", "evaluate"])
def test_a_missing_input_file_stops_a_stage_in_one_line_naming_it(result: Path, name: str) -> None:
    contract = result / "tokenizer" / "contract.json"
    with restored(contract):
        contract.unlink()
        res = stage(result, name)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.splitlines()[-1] == ("tokenizer/contract.json: missing; run the stages "
                                           "before this one (`dvc repro`) or `dvc pull` it")


def test_a_model_file_that_is_not_weights_only_stops_decode_in_one_line(result: Path) -> None:
    model = result / "models/model.pt"
    sidecar = model.with_name("model.pt.sha256")
    with restored(model, sidecar):
        model.write_bytes(pickle.dumps({"model": [1.0]}))
        sidecar.write_text(hashlib.sha256(model.read_bytes()).hexdigest() + "\n")
        res = stage(result, "decode")
    assert res.returncode == 1
    assert res.stderr == (f"{model.relative_to(result)}: not a weights-only checkpoint (it is "
                          "a plain pickle or not a torch.save archive); refused, nothing was "
                          "loaded\n")
