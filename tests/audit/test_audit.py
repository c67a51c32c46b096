"""`python -m pipeline.audit` on one real tiny pipeline result: the untampered result passes,
and each kind of tampering, done in a copy, is caught by the check that guards it."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path

import pytest
from mlflow.entities import Metric, Param, RunTag

from pipeline.audit.cli import main as audit_main
from pipeline.audit.core import audit
from pipeline.audit.lock import dvc_md5
from pipeline.audit.options import AuditOptions
from pipeline.copy_run import CopyError, copy_run
from pipeline.dvc_files import pipeline_stages
from seqcore.audit import json_diffs, nonblank_lines, version_diffs
from seqcore.blobs import load_blob, save_blob
from seqcore.config import load_config
from seqcore.signature import NO_RESULT_KEYS
from seqcore.signature_format import inherited_diff
from tests.factories import REPO
from tests.pipeline_helpers import (
    AUDIT_SAMPLE, copy_result, dvc, result_runs, run_artifact, run_audit, run_python, tool_env)

STAGES = ("fetch", "prepare", "tokenizer", "baseline", "train", "decode", "evaluate")
CHECKS = ["dvc.lock hashes and params", "dvc status", "contract", "counts", "fetch redone",
          "prepare redone", "tokenizer redone", "baseline redone", "decode redone",
          "evaluate redone", "training record", "training replay", "mlflow run", "environment",
          "package versions"]


def edit_prediction(repo: Path) -> None:
    # A hypothesis set to its reference (or away from it) strictly changes the edit counts.
    path = repo / "predictions/test.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    row = json.loads(lines[0])
    row["hypothesis"] = (row["reference"] if row["hypothesis"] != row["reference"]
                         else row["reference"] + " AH")
    lines[0] = json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"
    path.write_text("".join(lines), encoding="utf-8")


def change_params(repo: Path) -> None:
    params = repo / "params.yaml"
    params.write_text(params.read_text().replace("min_len: 0", "min_len: 1"))


def edit_data(repo: Path) -> None:
    with open(repo / "data/raw/cmudict.dict", "a", encoding="utf-8") as f:
        f.write("zyzzyva Z IH1 Z AH0 V AH0\n")


def replace_checkpoint(repo: Path) -> None:
    # A different but self-consistent model file: its own sha256 sidecar matches it.
    path = repo / "models/model.pt"
    payload = load_blob(path)
    name = next(iter(payload["model"]))
    payload["model"][name] = payload["model"][name] + 0.5
    save_blob(path, payload)


def edit_metric(repo: Path) -> None:
    path = repo / "reports/metrics.json"
    metrics = json.loads(path.read_text())
    metrics["exact_match"] = metrics["exact_match"] + 0.125
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")


def change_mlflow_param(repo: Path) -> None:
    # MLflow params are immutable, so the tampering is a newer run (the one the audit reads
    # by default) that copies the real run except for one param.
    client, (real,) = result_runs(repo)
    fake = client.create_run(real.info.experiment_id, run_name=real.info.run_name).info.run_id
    params = [Param(k, v) for k, v in real.data.params.items() if k != "decode.beam_size"]
    params.append(Param("decode.beam_size", str(int(real.data.params["decode.beam_size"]) + 1)))
    for i in range(0, len(params), 100):
        client.log_batch(fake, params=params[i : i + 100])
    client.log_batch(fake, metrics=[Metric(k, v, 0, 0) for k, v in real.data.metrics.items()],
                     tags=[RunTag(k, v) for k, v in real.data.tags.items()
                           if not k.startswith("mlflow.")])
    client.set_terminated(fake)


LOCKED = {"dvc.lock hashes and params", "dvc status"}
TAMPERING = {
    "edit a prediction": (edit_prediction, LOCKED | {"evaluate redone", "decode redone"}),
    "swap the tokenizer": (
        lambda repo: shutil.copyfile(repo / "tokenizer/src.model", repo / "tokenizer/tgt.model"),
        LOCKED | {"contract", "tokenizer redone"}),
    "change params without reproducing": (change_params, LOCKED | {"contract", "mlflow run"}),
    "edit the data": (edit_data, LOCKED | {"contract", "prepare redone"}),
    "replace the checkpoint": (replace_checkpoint,
                               LOCKED | {"contract", "mlflow run", "training record"}),
    "edit a metric": (edit_metric, LOCKED | {"evaluate redone", "mlflow run"}),
    "change an MLflow param": (change_mlflow_param, {"mlflow run"}),
}


@pytest.mark.e2e
def test_untampered_result_passes_every_check(result_files: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    report = run_audit(result_files, monkeypatch, replay=3)
    assert report.ok, report.render()
    assert list(report.checks) == CHECKS
    assert set(report.status.values()) <= {"ok", "WARNING"}


@pytest.mark.e2e
@pytest.mark.parametrize("kind", list(TAMPERING))
def test_audit_catches_tampering(kind: str, result_files: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tamper, expected = TAMPERING[kind]
    tamper(result_files)
    # "at least these checks fail" needs only those; "only the MLflow check fails" needs all
    whole = kind == "change an MLflow param"
    report = run_audit(result_files, monkeypatch,
                       only=() if whole else tuple(c for c in CHECKS if c in expected))
    assert not report.ok
    assert expected <= set(report.failed()), report.render()
    if whole:
        assert set(report.failed()) == {"mlflow run"}
        assert "decode.beam_size" in report.render()


@pytest.mark.e2e
def test_only_runs_the_named_checks_and_the_verdict_names_them(
        result_files: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    edit_metric(result_files)  # caught by "evaluate redone" and "mlflow run", not by "counts"
    report = run_audit(result_files, monkeypatch, only=("counts", "mlflow run"))
    assert list(report.checks) == ["counts", "mlflow run"]
    assert report.failed() == ["mlflow run"], report.render()
    assert report.render().endswith("audit: FAILED (mlflow run) [only: counts, mlflow run]")
    # each check's line is printed as it finishes (issue 30), before the whole report
    streamed = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[audit] ")]
    assert [ln.split(" (")[0] for ln in streamed] == ["[audit] ok       counts",
                                                      f"[audit] {report.status['mlflow run']:8s}"
                                                      " mlflow run"], streamed


@pytest.mark.parametrize("value", ["counts,dvc stat", "", " , "])
def test_only_with_an_unknown_check_stops_in_one_line_naming_the_choices(
        value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(sys, "argv", ["audit", "--only", value])
    with pytest.raises(SystemExit) as stop:
        audit_main()
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("audit: --only") and "choose from: " + ", ".join(CHECKS) in err


@pytest.mark.e2e
def test_every_stage_prints_the_signature_of_what_its_outputs_depend_on(
        audit_result: tuple[Path, str]) -> None:
    repo, output = audit_result
    results = json.loads((repo / "reports/results.json").read_text())
    tokenizer = json.loads((repo / "tokenizer/contract.json").read_text())["signature"]
    assert f"[tokenizer] contract: {tokenizer}" in output
    # baseline reads the encoded rows alone (hashed by dvc), not the contract: it declares
    # no contract params, so it neither prints nor checks the signature (STYLE rule 17)
    for stage in ("train", "decode", "evaluate"):
        assert f"[{stage}] contract: {results['contract_signature']}" in output
    assert f"[evaluate] result: {results['signature']}" in output
    assert "[baseline] contract:" not in output and "[fetch] contract:" not in output
    assert "[prepare] data: task:g2p|data:" in output
    # each signature extends the one before it (issue 34)
    assert inherited_diff(results["contract_signature"], tokenizer) == []
    assert inherited_diff(results["signature"],
                          results["contract_signature"].rsplit("|fmt:", 1)[0]) == []


@pytest.mark.e2e
def test_a_signature_mismatch_between_stages_stops_the_stage_with_a_diff(
        result_files: Path) -> None:
    header = result_files / "predictions/test.header.json"
    data = json.loads(header.read_text())
    data["signature"] = data["signature"].replace("maxtgt:32", "maxtgt:31")
    header.write_text(json.dumps(data))
    res = run_python(result_files, "-m", "pipeline.evaluate")
    assert res.returncode != 0
    assert "contract mismatch: predictions/test.jsonl against tokenizer/contract.json" in res.stderr
    assert "maxtgt: '31' != '32'" in res.stderr


@pytest.mark.e2e
def test_the_mlflow_run_records_the_whole_contract(audit_result: tuple[Path, str],
                                                   tmp_path: Path) -> None:
    repo = audit_result[0]
    client, (run,) = result_runs(repo)
    params, tags = run.data.params, run.data.tags
    for key in ("data.raw.sha256", "data.prepared.sha256.test",
                "tokenizer.contract.special_ids.eos", "sequence.max_tgt_len", "sequence.overlong",
                "derived.eos", "train.bucket_width", "train.batch_size", "train.seed",
                "train.ss_schedule", "derived.bptt", "train.clip_norm", "derived.clip.where",
                "train.amp", "train.optimizer", "train.schedule", "train.select",
                "decode.strategy", "decode.max_len", "evaluate.bucket_edges", "contract.signature"):
        assert key in params, key
    assert tags["contract.signature"] == params["contract.signature"]
    # guards and bookkeeping keys change no number: no param of the run (issue 34)
    assert not NO_RESULT_KEYS & set(params)
    assert {"git.commit", "git.dirty", "dvc.lock.sha256", "data.sha256", "model.sha256",
            "tokenizer.contract.sha256"} <= set(tags)
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    results = json.loads((repo / "reports/results.json").read_text())
    assert tags["metrics.bleu_signature"] == results["bleu_signature"]
    assert tags["metrics.signature"] == results["signature"]  # the result signature
    assert run.data.metrics["exact_match"] == metrics["exact_match"]
    log_rows = (repo / "reports/train_log.csv").read_text().splitlines()[1:]
    assert len(client.get_metric_history(run.info.run_id, "loss/train")) == len(log_rows)
    # Issue 29: every stage of dvc.yaml is timed; the run's Duration is their summed wall time
    stages = pipeline_stages(repo / "dvc.yaml")
    timed = {k: v for k, v in run.data.metrics.items() if k.startswith("time/")}
    assert set(timed) == {f"time/{s}_s" for s in stages} | {"time/pipeline_s",
                                                           "time/pipeline_cpu_s"}
    wall = timed["time/pipeline_s"]
    assert wall == pytest.approx(sum(timed[f"time/{s}_s"] for s in stages), abs=0.01)
    assert (run.info.end_time - run.info.start_time) / 1000 == pytest.approx(wall, abs=0.001)
    names = {a.path for a in client.list_artifacts(run.info.run_id, "predictions")}
    assert names == {"predictions/test.header.json", "predictions/test.sample.jsonl"}
    sample = run_artifact(client, run.info.run_id, "predictions/test.sample.jsonl", tmp_path)
    expected = (repo / "predictions/test.jsonl").read_text().splitlines(keepends=True)
    assert sample.decode() == "".join(expected[:AUDIT_SAMPLE])
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"params.yaml", "dvc.lock", "contract", "reports"} <= top


@pytest.mark.e2e
def test_directory_md5_is_the_one_dvc_records(audit_result: tuple[Path, str]) -> None:
    repo = audit_result[0]
    lock = (repo / "dvc.lock").read_text()
    for rel in ("data/prepared", "tokenizer", "predictions"):
        assert f"md5: {dvc_md5(repo / rel)}" in lock, rel


def test_a_local_build_tag_satisfies_the_lock_but_another_version_does_not() -> None:
    installed = {"torch": "2.13.0+cpu", "numpy": "2.0.1"}.get
    lock = "torch==2.13.0\nnumpy==2.0.0\n# comment\nmissing==1.0\n"
    assert version_diffs(lock, installed, required=("torch",)) == [
        "numpy: requirements.lock has 2.0.0, installed 2.0.1",
        "missing: requirements.lock has 1.0, not installed"]


def test_a_lock_that_pins_none_of_the_result_packages_is_a_finding_not_a_pass() -> None:
    # an emptied or cut-off requirements.lock checks nothing: each package a result's bytes
    # depend on must be pinned (issue 54)
    installed = {"numpy": "2.0.0", "sacrebleu": "2.6.0"}.get
    assert version_diffs("", installed, required=("numpy", "sacrebleu")) == [
        f"{name}: requirements.lock pins no version of it (cut off or edited? restore it: git "
        "checkout requirements.lock)" for name in ("numpy", "sacrebleu")]
    assert version_diffs("numpy==2.0.0\nsacrebleu==2.6.0\n", installed,
                         required=("numpy", "sacrebleu")) == []


def test_json_diffs_name_each_differing_key_and_read_a_tuple_as_its_json_list() -> None:
    got = {"betas": [0.9, 0.98], "lr": 0.003, "seed": 1}
    diffs = json_diffs("training contract", ("params", "model file"),
                       {"betas": (0.9, 0.98), "lr": 0.002, "select": "last"}, got)
    assert diffs == ["training contract: lr: params has '0.002', model file has '0.003'",
                     "training contract: select: params has '\"last\"', model file has nothing"]


def test_nonblank_lines_count_records_not_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n  \n{"a": 3}', encoding="utf-8")
    assert nonblank_lines(path) == 3


@pytest.mark.e2e
def test_a_dvc_experiment_is_its_own_mlflow_run_and_passes_the_audit(
        audit_result: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_result(audit_result[0], tmp_path / "copy")  # the experiment logs into the copy
    out = dvc(repo, "exp", "run", "-S", "decode.beam_size=6")
    assert {s for s in STAGES if f"Running stage '{s}'" in out} == {"decode", "evaluate"}
    _, runs = result_runs(repo)
    committed = load_config(REPO / "params.yaml").decode.beam_size
    assert [r.data.params["decode.beam_size"] for r in runs] == ["6", str(committed)]
    name = runs[0].data.tags["dvc.exp.name"]
    assert runs[0].info.run_name.startswith(name) and name in out  # name leads
    assert run_audit(repo, monkeypatch).ok


@pytest.mark.e2e
def test_a_colleague_auditing_a_copy_of_the_result_gets_no_false_alarm(
        audit_result: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another login name (getpass reads these), in another folder than the result's.
    repo = shutil.copytree(audit_result[0], tmp_path / "colleague" / "copy", symlinks=True)
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(var, "a-colleague")
    report = run_audit(repo, monkeypatch, only=("mlflow run",))
    assert report.ok, report.render()


@pytest.mark.e2e
def test_an_existing_run_copied_to_another_store_passes_the_audit_there(
        result_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 30: with the result already local, `dvc repro` sends nothing to a team server.
    (tmp_path / "team").mkdir()
    target = f"sqlite:///{tmp_path / 'team' / 'mlflow.db'}"
    res = run_python(result_files, "-m", "pipeline.copy_run", "--to", target)
    assert res.returncode == 0, res.stdout + res.stderr
    source, (src,) = result_runs(result_files, max_results=1)
    team, (dst,) = result_runs(tmp_path / "team")
    assert f"as run {dst.info.run_id}" in res.stdout
    assert (dst.info.run_name, dst.data.params, dst.data.metrics) == (
        src.info.run_name, src.data.params, src.data.metrics)
    # the copy keeps the run's Duration (the pipeline's wall time, not the copy's)
    duration = dst.info.end_time - dst.info.start_time
    assert duration == round(1000 * src.data.metrics["time/pipeline_s"])
    assert {k: v for k, v in dst.data.tags.items() if not k.startswith("mlflow.log")} == {
        k: v for k, v in src.data.tags.items() if not k.startswith("mlflow.log")}
    assert team.search_model_versions("name='seqcore-g2p'")  # the model registered there too
    monkeypatch.setenv("MLFLOW_TRACKING_URI", target)
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    with contextlib.chdir(result_files):
        report = audit(AuditOptions(only=("evaluate redone", "mlflow run")))
    assert report.ok, report.render()

    # A source run that is not the workspace's result is refused, and nothing is copied.
    key = sorted(src.data.metrics)[0]
    source.log_metric(src.info.run_id, key, src.data.metrics[key] + 1)
    with contextlib.chdir(result_files), \
            pytest.raises(CopyError, match="is not the workspace's result"):
        copy_run(load_config("params.yaml"), f"sqlite:///{result_files / 'mlflow.db'}", target)
    assert len(team.search_runs([dst.info.experiment_id])) == 1
