"""Team results (issue 15), with real parts on 127.0.0.1: a DVC remote on an S3-compatible
store (moto), and an MLflow team server keeping runs in PostgreSQL and artifacts in the same
store. Person A reproduces, pushes and commits; person B clones, pulls and audits without
running a stage, with the commands docs/team.md shows (a test keeps them in step). Without
PostgreSQL or moto the server tests skip; CI (SEQCORE_REQUIRE_SERVERS=1) fails instead."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml

from pipeline.audit.checks import read_run
from pipeline.git_state import commit_copy
from pipeline.tracking import log_run
from seqcore.artifacts.run_record import RunRecord
from seqcore.config import ConfigError, config_from_dict
from seqcore.credentials import has_credentials, redact_text, redact_uri
from tests.factories import REPO
from tests.servers import (
    ARTIFACTS, DVC_BUCKET, MLFLOW_BUCKET, MLFLOW_SERVER, S3_SECRET, Team, free_port, listening)
from tests.pipeline_helpers import (assert_run_matches, copy_result, make_record, run_artifact,
                                    run_python, tool_env)

EXPERIMENT = "seqcore-g2p"
#: Person A's tracking URI carries this password, and a second (unused) DVC remote's URL in
#: her local config this one; they must show up nowhere (#15, secrets).
TRACKING_SECRET, REMOTE_SECRET = "team-s3cret-pw", "remote-s3cret-pw"

#: The commands of docs/team.md, in the order the two people run them. ``{s3}`` and
#: ``{mlflow}`` are the test servers here and the example addresses on the page.
SETUP_A = (f"dvc remote add -d team s3://{DVC_BUCKET}/cache",
           "dvc remote modify team verify true",
           "dvc remote modify --local team endpointurl {s3}",
           "dvc remote modify --local team access_key_id {key_id}",
           "dvc remote modify --local team secret_access_key {secret}")
PUBLISH_A = ("dvc repro", "dvc push")
SETUP_B = ("dvc remote modify --local team endpointurl {s3}",)
CHECK_B = ("dvc pull", "dvc status", "python -m pipeline.audit")
AUDIT_RUN = "python -m pipeline.audit --run RUN_ID"
REPLAY = "python -m pipeline.tracking --replay"
ENV_LINES = ("export MLFLOW_TRACKING_URI={mlflow}", "export MLFLOW_S3_ENDPOINT_URL={s3}",
             "export AWS_ACCESS_KEY_ID={key_id}", "export AWS_SECRET_ACCESS_KEY={secret}")
DOC_VALUES = {"s3": "https://minio.example.org", "mlflow": "https://mlflow.example.org",
              "key_id": '"$KEY_ID"', "secret": '"$SECRET_KEY"'}
DOC_SERVER = MLFLOW_SERVER.format(host="127.0.0.1", port=5000, artifacts=ARTIFACTS,
                                  backend="postgresql://mlflow@db.example.org/mlflow")


def base_env() -> dict[str, str]:
    """This environment without tracking or cloud settings, the venv first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "MLFLOW_TRACKING_", "MLFLOW_S3_"))}
    return env | {"PATH": tool_env()["PATH"],  # the stage worker's python, then the venv
                  "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "60"}


def sh(cwd: Path, command: str, env: dict[str, str], ok: bool | None = True) -> tuple[int, str]:
    """Run one documented command; ``ok`` True/False asserts success/failure, None neither."""
    res = subprocess.run(shlex.split(command), cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600)
    out = res.stdout + res.stderr
    if ok is not None:
        assert (res.returncode == 0) == ok, f"`{command}` exited {res.returncode}:\n{out}"
    return res.returncode, out


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def with_password(url: str) -> str:
    return url.replace("://", f"://alice:{TRACKING_SECRET}@", 1)


@dataclass(frozen=True)
class PersonA:
    repo: Path
    console: str  # everything `dvc repro` and `dvc push` printed
    run_id: str  # the run evaluate logged during `dvc repro`


@pytest.fixture(scope="module")
def person_a(team: Team, audit_result: tuple[Path, str],
             tmp_path_factory: pytest.TempPathFactory) -> PersonA:
    """A tiny result reproduced with the team server, pushed and committed."""
    # without evaluate's lock entry and DVC's run cache: the documented `dvc repro` runs
    # evaluate (which logs to the team server) and nothing upstream
    repo = copy_result(audit_result[0], tmp_path_factory.mktemp("alice") / "repo")
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    del lock["stages"]["evaluate"]
    (repo / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    shutil.rmtree(repo / ".dvc/cache/runs")
    (repo / "mlflow.db").unlink()
    commit_copy(repo, "before evaluate", "t")
    env = base_env()
    for command in SETUP_A:
        sh(repo, command.format(**team.values()), env)
    sh(repo, f"dvc remote add --local mirror https://bob:{REMOTE_SECRET}@dvc.example.org/c", env)
    git(repo, "add", ".dvc/config")
    git(repo, "commit", "-qm", "team DVC remote")
    env["MLFLOW_TRACKING_URI"] = with_password(team.mlflow)
    console = "".join(sh(repo, command, env)[1] for command in PUBLISH_A)
    commit_copy(repo, "tiny result", "t")
    client = mlflow.MlflowClient(team.mlflow)
    (run,) = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    return PersonA(repo, console, run.info.run_id)


def clone(person_a: PersonA, dest: Path, team: Team) -> tuple[Path, dict[str, str]]:
    """Person B: a clone of A's repo, the store's address in its DVC local config, keys in env."""
    subprocess.run(["git", "clone", "-q", str(person_a.repo), str(dest)], check=True)
    env = base_env() | team.s3.env()
    for command in SETUP_B:
        sh(dest, command.format(**team.values()), env)
    return dest, env


@pytest.fixture(scope="module")
def person_b(person_a: PersonA, team: Team,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    repo, env = clone(person_a, tmp_path_factory.mktemp("bob") / "seqcore", team)
    sh(repo, CHECK_B[0], env)
    return repo, env


def audit(repo: Path, env: dict[str, str], url: str, *args: str, ok: bool = True) -> str:
    return sh(repo, " ".join([CHECK_B[2], *args]), env | {"MLFLOW_TRACKING_URI": url}, ok=ok)[1]


# --- the two-person flow --------------------------------------------------------------------
def passed(out: str) -> bool:
    """The audit's verdict line says PASSED (a clone has no checkpoints: a warning, not a fail)."""
    return re.search(r"^audit: PASSED( with warnings \(checkpoints\))?$", out, re.M) is not None


@pytest.mark.e2e
def test_second_clone_pulls_a_complete_result_that_audits_without_running_a_stage(
        person_b: tuple[Path, dict[str, str]], team: Team) -> None:
    repo, env = person_b
    assert "up to date" in sh(repo, CHECK_B[1], env)[1]
    out = audit(repo, env, team.mlflow)
    assert passed(out) and "ok       mlflow run" in out, out
    # No stage ran: train would have made checkpoints/, a local run mlflow.db, and any stage
    # would have rewritten committed reports.
    assert not (repo / "checkpoints").exists() and not (repo / "mlflow.db").exists()
    assert git(repo, "status", "--porcelain") == ""


def artifact_names(client: object, run_id: str, path: str | None = None) -> list[str]:
    names = []
    for item in client.list_artifacts(run_id, path):
        names += artifact_names(client, run_id, item.path) if item.is_dir else [item.path]
    return names


def s3_object(s3: object, suffix: str) -> bytes:
    """The bytes of the one object of the MLflow bucket whose key ends in ``suffix``."""
    (key,) = [o["Key"] for o in s3.list_objects_v2(Bucket=MLFLOW_BUCKET)["Contents"]
              if o["Key"].endswith(suffix)]
    return s3.get_object(Bucket=MLFLOW_BUCKET, Key=key)["Body"].read()


@pytest.mark.e2e
def test_every_run_artifact_lies_in_s3_and_reads_back_as_the_pulled_file(
        person_a: PersonA, person_b: tuple[Path, dict[str, str]], team: Team,
        tmp_path: Path) -> None:
    client, s3 = mlflow.MlflowClient(team.mlflow), team.s3.client()
    compared = set()
    for name, fetched in run_content(client, person_a.run_id, tmp_path)["artifacts"].items():
        stored = s3_object(s3, f"/{person_a.run_id}/artifacts/{name}")
        assert fetched == stored, name
        # dvc.lock is logged as evaluate saw it, before its own entry was written; the
        # report's PNGs are logged under plots/ (issue 14).
        pulled = person_b[0] / name
        if name.startswith("plots/"):
            pulled = person_b[0] / "reports/evaluation" / Path(name).name
        if pulled.is_file() and name != "dvc.lock":
            assert pulled.read_bytes() == stored, name
            compared.add(name)
    assert {"params.yaml", "reports/metrics.json", "reports/report.md",
            "predictions/test.header.json"} <= compared
    assert not (person_a.repo / "mlartifacts").exists()


@pytest.mark.e2e
def test_the_registered_model_lies_in_s3_and_loads_from_the_server_as_predict_answers(
        person_a: PersonA, team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 29: the packed model file is the DVC-tracked one, and the model loaded from the
    # team stack (PostgreSQL + S3 behind the MLflow server) answers as pipeline.predict
    client, s3 = mlflow.MlflowClient(team.mlflow), team.s3.client()
    (version,) = client.search_model_versions(f"name = '{EXPERIMENT}' and "
                                              f"run_id = '{person_a.run_id}'")
    stored = s3_object(s3, "/artifacts/result/model.pt")
    assert stored == (person_a.repo / "models/model.pt").read_bytes()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", team.mlflow)
    model = mlflow.pyfunc.load_model(f"models:/{EXPERIMENT}/{version.version}")
    words = ["cat", "", "ß☃q"]
    got = model.predict(pd.DataFrame({"source": words}))
    res = run_python(person_a.repo, "-m", "pipeline.predict", *words, env=base_env())
    problems = [line.split(": ", 1)[1] for line in res.stderr.splitlines()
                if line.startswith("[predict] line ")]
    assert [q for q in got["problem"] if q] == problems
    assert version.tags["model.sha256"] == (person_a.repo / "models/model.pt.sha256"
                                            ).read_text().strip()


@pytest.mark.e2e
def test_a_replaced_model_object_in_the_remote_is_named_at_pull_and_by_the_audit(
        person_a: PersonA, team: Team, tmp_path: Path) -> None:
    md5 = next(o["md5"] for o in yaml.safe_load((person_a.repo / "dvc.lock").read_text())
               ["stages"]["train"]["outs"] if o["path"] == "models/model.pt")
    key, s3 = f"cache/files/md5/{md5[:2]}/{md5[2:]}", team.s3.client()
    good = s3.get_object(Bucket=DVC_BUCKET, Key=key)["Body"].read()
    s3.put_object(Bucket=DVC_BUCKET, Key=key, Body=good[:-64] + bytes(64))
    try:
        repo, env = clone(person_a, tmp_path / "carol", team)
        _, out = sh(repo, CHECK_B[0], env, ok=False)  # `verify true` hashes what it fetches
        assert "models/model.pt" in out, out
        # A clone that turned verification off pulls the forged bytes; the audit names them.
        sh(repo, "dvc remote modify --local team verify false", env)
        sh(repo, CHECK_B[0], env)
        out = audit(repo, env, team.mlflow, "--no-mlflow", "--replay", "0", ok=False)
        assert re.search(rf"models/model.pt: workspace has md5 \w+, dvc.lock train.outs "
                         rf"records {md5}", out), out
    finally:
        s3.put_object(Bucket=DVC_BUCKET, Key=key, Body=good)


# --- outage and replay ----------------------------------------------------------------------
def run_content(client: object, run_id: str, tmp: Path) -> dict[str, object]:
    """What the audit can see of a run: params, metrics with their histories, tags and the
    artifacts' bytes (without the MLflow bookkeeping that differs between any two runs)."""
    run = client.get_run(run_id)
    # time/*: how long the stages took (pipeline/timing.py), clock time the audit never compares
    history = {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)]
               for k in run.data.metrics if not k.startswith("time/")}
    files = {n: run_artifact(client, run_id, n, tmp) for n in artifact_names(client, run_id)}
    return {"name": run.info.run_name, "status": run.info.status, "params": run.data.params,
            "metrics": history, "tags": run.data.tags, "artifacts": files}


#: What depends on when evaluate ran, not on what it computed: the live run was logged inside
#: `dvc repro` (uncommitted tree, no evaluate lock entry), the kept one after the commit.
WHEN_RAN_TAGS = ("git.commit", "git.dirty", "dvc.lock.sha256")


@pytest.mark.e2e
def test_a_run_kept_during_an_outage_and_replayed_is_indistinguishable_to_the_audit(
        person_a: PersonA, person_b: tuple[Path, dict[str, str]], team: Team,
        tmp_path: Path) -> None:
    repo, pending = person_a.repo, person_a.repo / "reports/mlflow_pending.json"
    down = base_env() | {"MLFLOW_TRACKING_URI": with_password(f"http://127.0.0.1:{free_port()}")}
    _, out = sh(repo, "python -m pipeline.evaluate", down)
    assert out.count("WARNING: MLflow store") == 1 and REPLAY in out, out
    assert TRACKING_SECRET not in out + pending.read_text()

    _, out = sh(repo, REPLAY, base_env() | {"MLFLOW_TRACKING_URI": with_password(team.mlflow)})
    assert not pending.exists() and TRACKING_SECRET not in out, out
    (replayed,) = re.findall(r"logged run (\w+)", out)

    client = mlflow.MlflowClient(team.mlflow)
    live, kept = (run_content(client, r, tmp_path) for r in (person_a.run_id, replayed))
    for run in (live, kept):
        run["tags"] = {k: v for k, v in run["tags"].items()
                       if not k.startswith("mlflow.") and k not in WHEN_RAN_TAGS}
        assert run["artifacts"].pop("dvc.lock")
    assert kept == live
    assert passed(audit(person_b[0], person_b[1], team.mlflow, "--run-id", replayed,
                        "--replay", "0"))  # about the run: the training replays elsewhere


@pytest.mark.e2e
def test_credentials_reach_no_param_tag_artifact_commit_or_console(
        person_a: PersonA, team: Team, tmp_path: Path) -> None:
    client = mlflow.MlflowClient(team.mlflow)
    run = run_content(client, person_a.run_id, tmp_path)
    logged = json.dumps({k: v for k, v in run.items() if k != "artifacts"})
    logged += "".join(b.decode("utf-8", "replace") for b in run["artifacts"].values())
    history = git(person_a.repo, "log", "-p", "--all")
    local = (person_a.repo / ".dvc/config.local").read_text()
    assert S3_SECRET in local and REMOTE_SECRET in local  # really configured
    for secret in (TRACKING_SECRET, S3_SECRET, REMOTE_SECRET):
        assert secret not in logged and secret not in history and secret not in person_a.console
    assert f"in {redact_uri(with_password(team.mlflow))}" in person_a.console  # the [mlflow] line


@pytest.mark.slow
def test_test_servers_listen_on_loopback_only(team: Team) -> None:
    for port in (int(u.rsplit(":", 1)[1]) for u in (team.s3.endpoint, team.mlflow)):
        assert listening(port) and set(listening(port)) == {"127.0.0.1"}, port


# --- without servers: replay, redaction, refusal ------------------------------------------
def write_pending(root: Path, uri: str) -> Path:
    """A params.yaml naming a sqlite store, and one kept run whose stored address is ``uri``."""
    (root / "params.yaml").write_text(yaml.safe_dump(
        {"mlflow": {"tracking_uri": "sqlite:///team.db", "experiment": "replay-test"}}))
    record = {"uri": uri, "experiment": "replay-test", "run_name": "kept", "params": {"a": 1},
              "metrics": {"exact_match": 0.5}, "steps": [["train.loss", 1, 2.0]],
              "tags": {"model.sha256": "abc"}, "texts": {"params.yaml": "a: 1\n"}}
    pending = root / "reports/mlflow_pending.json"
    pending.parent.mkdir()
    pending.write_text(json.dumps([record]))
    return pending


@pytest.mark.slow
def test_replay_without_an_argument_logs_the_params_pending_file_into_the_params_store(
        tmp_path: Path) -> None:
    pending = write_pending(tmp_path, f"http://127.0.0.1:{free_port()}")  # a dead address
    _, out = sh(tmp_path, REPLAY, base_env() | {"PYTHONPATH": str(REPO)})
    assert not pending.exists() and "logged run" in out, out
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'team.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("replay-test").experiment_id])
    assert run.data.params == {"a": "1"} and run.data.metrics == {"exact_match": 0.5,
                                                                 "train.loss": 2.0}


@pytest.mark.slow
def test_replay_gives_up_at_its_stated_deadline_keeps_the_run_and_hides_the_password(
        tmp_path: Path) -> None:
    with socket.socket() as mute:  # accepts connections (backlog), never answers
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        url = with_password(f"http://127.0.0.1:{mute.getsockname()[1]}")
        pending = write_pending(tmp_path, "http://old.example.org")
        before = RunRecord.load_all(pending)
        start = time.monotonic()
        rc, out = sh(tmp_path, f"{REPLAY} --timeout 3", base_env() | {
            "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": url,
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "300"}, ok=None)
        took = time.monotonic() - start
    assert rc == 1 and "giving up after 3 s" in out and "gave up after 3 s" in out, out
    assert took < 60 and RunRecord.load_all(pending) == before  # the run, kept as it was
    assert TRACKING_SECRET not in out and redact_uri(url) in out


@pytest.mark.parametrize(("uri", "redacted"), [
    ("http://alice:pw0rd@mlflow.example.org:5000", "http://***@mlflow.example.org:5000"),
    ("https://ghp_token123@mlflow.example.org", "https://***@mlflow.example.org"),
    ("https://mlflow.example.org/?token=abc&experiment=1",
     "https://mlflow.example.org/?token=***&experiment=1"),
    ("postgresql://mlflow:p%40ss@db:5432/mlflow?sslmode=require",
     "postgresql://***@db:5432/mlflow?sslmode=require"),
    ("s3://bucket/cache?X-Amz-Signature=f00", "s3://bucket/cache?X-Amz-Signature=***"),
    *((plain, plain) for plain in ("sqlite:////abs/mlflow.db", "http://127.0.0.1:5000")),
])
def test_credentials_in_a_uri_are_masked_and_a_plain_uri_is_unchanged(
        uri: str, redacted: str) -> None:
    assert redact_uri(uri) == redacted
    assert has_credentials(uri) == (uri != redacted)
    text = f"API request to {uri}/api/2.0/runs failed; user-info {uri.split('//')[1][:14]}"
    assert "pw0rd" not in redact_text(text, (uri,)) and "p@ss" not in redact_text(
        text.replace("p%40ss", "p@ss"), (uri,))


def test_params_yaml_refuses_a_tracking_uri_with_credentials_without_echoing_them() -> None:
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI") as err:
        config_from_dict({"mlflow": {"tracking_uri": "http://alice:pw0rd@mlflow.example.org"}})
    assert "pw0rd" not in str(err.value)


def test_the_audit_names_an_unreachable_store_without_its_password(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    run, line = read_run(with_password(f"http://127.0.0.1:{free_port()}"), config_from_dict({}),
                         None)
    assert run is None and line.startswith("cannot read the MLflow run"), line
    assert "http://***@127.0.0.1" in line and TRACKING_SECRET not in line


def test_the_team_page_shows_every_command_the_two_person_test_runs() -> None:
    page = (REPO / "docs/team.md").read_text(encoding="utf-8")
    commands = [*SETUP_A, *PUBLISH_A, *SETUP_B, *CHECK_B, AUDIT_RUN, REPLAY, *ENV_LINES]
    missing = [c.format(**DOC_VALUES) for c in commands if c.format(**DOC_VALUES) not in page]
    assert not missing and DOC_SERVER in page, missing or DOC_SERVER


@pytest.mark.slow
def test_run_logged_to_an_mlflow_server_reads_back_over_http(tmp_path: Path, team: Team) -> None:
    # the session's team server (runs in PostgreSQL, artifacts proxied to S3)
    record = make_record(team.mlflow, n_params=120)
    assert_run_matches(mlflow.MlflowClient(team.mlflow), log_run(record), record, tmp_path)


@pytest.mark.e2e
def test_a_run_id_is_audited_from_a_fresh_clone_that_pulls_its_outputs_and_gets_the_verdict(
        person_a: PersonA, team: Team, tmp_path: Path) -> None:
    # last in this module: it tags person A's run (the audit ignores audit.* tags)
    repo, env = clone(person_a, tmp_path / "carol", team)  # nothing pulled
    # a param changed in the working copy: the audit reads the result's commit, not the copy
    params = repo / "params.yaml"
    assert "  beam_size: 1\n" in params.read_text()  # the committed, dev-chosen beam
    params.write_text(params.read_text().replace("  beam_size: 1\n", "  beam_size: 7\n"))
    out = sh(repo, AUDIT_RUN.replace("RUN_ID", person_a.run_id),
             env | {"MLFLOW_TRACKING_URI": team.mlflow})[1]
    # A's run was logged before A committed the result: the result is the later commit
    head = git(repo, "rev-parse", "HEAD").strip()
    assert f"claims the result of commit {head[:12]}" in out, out
    assert "outputs pulled from the DVC remote" in out and passed(out), out
    assert "ok       training replay" in out
    tags = mlflow.MlflowClient(team.mlflow).get_run(person_a.run_id).data.tags
    assert tags["audit.status"] == "passed" and "mlflow run: ok" in tags["audit.checks"]
    # the commit of the code that audited: the clone's, or this checkout's when the tests'
    # stage worker (tests/programs) runs the command with the test session's modules
    assert tags["audit.by"] in {head, git(REPO, "rev-parse", "HEAD").strip()}
    assert tags["audit.at"].endswith("+00:00")
    # nothing left behind: no worktree, no pulled file, the copy's edit only
    assert git(repo, "worktree", "list").count("\n") == 1
    assert git(repo, "status", "--porcelain").strip() == "M params.yaml"
    assert not (repo / "models/model.pt").exists()
