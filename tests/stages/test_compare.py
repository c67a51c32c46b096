"""`python -m pipeline.compare A B` (issue 27) on predictions files written here: the figures,
the refusal of results on different evaluation sets, and one line for every bad name."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pipeline.compare import main
from seqcore.artifacts.predictions import (
    BaselineSettings, PredictionRow, Predictions, PredictionsHeader)
from seqcore.config import BaselineConfig, DecodeConfig
from seqcore.metrics.comparison import NotComparable, check_same_rows
from tests.factories import REPO
from tests.pipeline_helpers import empty_mlflow_store, outcome, result_runs, run_audit

SIG = "task:g2p|data:0123456789ab|src:x|tgt:y|fmt:1"


def rows(n: int, right: int, prefix: str = "") -> list[PredictionRow]:
    """``n`` words, one pronunciation each; the first ``right`` decoded exactly."""
    hyps = [("K AE T" if i < right else "K AE").split() for i in range(n)]
    return [PredictionRow(f"{prefix}{i:05d}", f"w{i:05d}", f"cat{i}", "K AE T", " ".join(h),
                          [0] * len(h), h, -1.0, -1.0, len(h), True, [])
            for i, h in enumerate(hyps)]


def write(folder: Path, data: list[PredictionRow], signature: str = SIG) -> Path:
    path = folder / "predictions" / "test.jsonl"
    path.parent.mkdir(parents=True)
    Predictions(data).save(path)
    PredictionsHeader(DecodeConfig(strategy="greedy"), "0" * 64, len(data), signature).save(path)
    return folder


@pytest.fixture
def params(tmp_path: Path) -> Path:
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["evaluate"]["bootstrap_samples"] = 300
    store = shutil.copyfile(empty_mlflow_store(), tmp_path / "mlflow.db")
    p["mlflow"]["tracking_uri"] = f"sqlite:///{store}"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def run_main(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    return outcome(lambda: main(list(argv)), capsys)


def test_a_clearly_better_system_is_significant_and_its_flips_are_listed(
        tmp_path: Path, params: Path, capsys: pytest.CaptureFixture) -> None:
    a = write(tmp_path / "a", rows(400, 200))
    b = write(tmp_path / "b", rows(400, 320))
    code, out, _ = run_main(capsys, str(a), str(b), "--params", str(params), "--out",
                       str(tmp_path / "cmp"))
    assert code == 0, out
    data = json.loads((tmp_path / "cmp/compare.json").read_text())
    wer = data["headline"]["word_error_rate"]
    assert (wer["a"], wer["b"]) == (0.5, 0.2) and wer["delta"] == pytest.approx(-0.3)
    assert wer["high"] < 0 and wer["p_bootstrap"] < 0.01 and wer["p_randomization"] < 0.01
    assert data["flips"]["right_in_b_wrong_in_a"]["count"] == 120
    assert data["flips"]["right_in_a_wrong_in_b"]["count"] == 0
    assert data["resampling"] == "ci:95|bs:300|rs:12345|by:group"
    assert "| word_error_rate | 0.5000 | 0.2000 | -0.3000 |" in out
    assert (tmp_path / "cmp/compare.md").read_text() == out.split("compare took")[0]


def test_the_same_result_twice_differs_by_zero_with_p_one(
        tmp_path: Path, params: Path, capsys: pytest.CaptureFixture) -> None:
    a = write(tmp_path / "a", rows(50, 30))
    code, out, _ = run_main(capsys, str(a), str(a / "predictions/test.jsonl"), "--params",
                       str(params))
    assert code == 0
    assert "| word_error_rate | 0.4000 | 0.4000 | 0.0000 | [0.0000, 0.0000] | 1.0000 | " \
           "1.0000 |" in out


def test_the_baseline_folder_compares_with_a_model_on_the_same_rows(
        tmp_path: Path, params: Path, capsys: pytest.CaptureFixture) -> None:
    # baseline/test.jsonl is signed by the baseline signature (no contract data field): the
    # rows themselves (ids, sources, references) are the check
    base = tmp_path / "baseline"
    base.mkdir()
    Predictions(rows(60, 45)).save(base / "test.jsonl")
    PredictionsHeader(BaselineSettings.of(BaselineConfig(), "phonetisaurus", 500), "0" * 64, 60,
                      "baseline:phonetisaurus|version:0.3.2|order:8").save(base / "test.jsonl")
    model = write(tmp_path / "model", rows(60, 30))
    code, out, _ = run_main(capsys, str(base), str(model), "--params", str(params))
    assert code == 0, out
    assert "| word_error_rate | 0.2500 | 0.5000 | 0.2500 |" in out
    other = write(tmp_path / "other", rows(59, 30))
    code, _, err = run_main(capsys, str(base), str(other), "--params", str(params))
    assert code == 2 and "1 row id(s) only in A (first '00059')" in err


def test_the_models_own_rows_compare_through_the_header_of_their_split(
        tmp_path: Path, params: Path, capsys: pytest.CaptureFixture) -> None:
    # predictions/test.model.jsonl (the model before the rescoring) has no header of its own:
    # it is the split's, so "the model alone against the baseline" is one command
    system = write(tmp_path / "run", rows(40, 30))
    own = system / "predictions/test.model.jsonl"
    Predictions(rows(40, 10)).save(own)
    code, out, _ = run_main(capsys, str(system / "predictions/test.jsonl"), str(own),
                            "--params", str(params))
    assert code == 0, out
    assert "- B: " + str(own) in out and "| word_error_rate | 0.2500 | 0.7500 | 0.5000 |" in out


def test_rows_of_another_evaluation_set_are_refused() -> None:
    with pytest.raises(NotComparable, match=r"1 row id\(s\) only in A \(first '00002'\), 1 only"
                                            r" in B \(first 'x00000'\)"):
        check_same_rows(rows(3, 1), rows(2, 1) + rows(1, 1, prefix="x"))
    other = [replace(r, reference="D AO G") if r.id == "00001" else r for r in rows(3, 1)]
    with pytest.raises(NotComparable, match="row '00001' has source 'cat1' / reference"):
        check_same_rows(rows(3, 1), other)


@pytest.mark.parametrize("case", ["missing file", "folder without predictions",
                                  "unknown run id", "unknown revision", "other data",
                                  "other rows"])
def test_a_bad_name_or_an_incomparable_pair_stops_with_one_line_and_status_2(
        case: str, tmp_path: Path, params: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no git repository here
    subprocess.run(["git", "init", "-q"], check=True)
    a = str(write(tmp_path / "a", rows(20, 10)))
    b, want = {
        "missing file": ("nowhere/test.jsonl", "nowhere/test.jsonl: no such file or folder"),
        "folder without predictions": (str(tmp_path), f"{tmp_path}: a folder without "
                                                      "predictions/test.jsonl or test.jsonl"),
        "unknown run id": ("0" * 32, f"{'0' * 32}: no MLflow run with this id in sqlite:///"),
        "unknown revision": ("no-such-exp", "no-such-exp: not a file or folder here; as a git "
                                            "revision or `dvc exp` name: predictions/test.jsonl"),
        "other data": (str(write(tmp_path / "b", rows(20, 10), SIG.replace("0123", "9999"))),
                       "not the same evaluation set: A was decoded from data 0123456789ab, B "
                       "from data 9999456789ab"),
        "other rows": (str(write(tmp_path / "c", rows(19, 10))),
                       "not the same evaluation set: 1 row id(s) only in A"),
    }[case]
    if case == "folder without predictions":
        shutil.rmtree(tmp_path / "a")
        a, b = b, a
    code, out, err = run_main(capsys, a, b, "--params", str(params))
    assert code == 2 and not out, out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("compare: ") and want in err, err


@pytest.mark.slow
def test_log_attaches_the_comparison_to_the_run_and_the_audit_still_passes(
        result_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--log` puts the comparison where users look (the run's artifacts and tags, issue 27);
    a comparison made later is not a forgery of the run's record."""
    repo = result_copy
    client, (run,) = result_runs(repo)
    rid = run.info.run_id
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # the run (made before its result was committed: its commit has no lock entry for the
    # predictions, so they are found through the run's own dvc.lock artifact) against the
    # baseline's predictions; attached to the run
    code, out, err = run_main(capsys, "baseline", rid, "--log", "--samples", "50")
    assert code == 0, err
    assert f"compare: attached to MLflow run {rid}" in err
    assert f"MLflow run {rid}: its dvc.lock, the DVC cache" in out
    tags = client.get_run(rid).data.tags
    p = {k: v for k, v in tags.items() if k.startswith("compare.baseline.")}
    assert 0 <= float(p["compare.baseline.word_error_rate.p"]) <= 1
    logged = {a.path for a in client.list_artifacts(rid, "compare")}
    assert logged == {"compare/baseline.md", "compare/baseline.json"}
    local = Path(client.download_artifacts(rid, "compare/baseline.md", str(tmp_path)))
    assert local.read_text() == out.split("compare took")[0]
    report = run_audit(repo, monkeypatch, only=("evaluate redone", "mlflow run"))
    assert report.ok, report.render()
    code, _, err = run_main(capsys, "baseline", "predictions", "--log")
    assert code == 2 and "--log: neither baseline nor predictions is an MLflow run id" in err
