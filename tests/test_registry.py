"""The result's model in MLflow (issue 29): registered with every run, loaded with
``mlflow.pyfunc.load_model("models:/NAME/VERSION")`` or served by ``mlflow models serve``, it
answers exactly as ``python -m pipeline.predict``; the audit compares it with the result."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml

from seqcore.artifacts.predictions import Predictions
from tests.pipeline_helpers import copy_result, run_audit, stage_python, tool_env

NAME = "seqcore-g2p"
#: Sampling hot enough that some outputs of the 6-step model end within 32 tokens and some
#: do not: answers and problems both, drawn the same way by every path (a fixed seed).
SAMPLED = {"strategy": "sample", "temperature": 5.0, "top_k": 0, "max_len": 32, "seed": 3,
           "rescore": "none"}
#: Inputs the model must refuse, each for its own reason: empty, unseen characters, overlong.
BAD = ["", "ß☃q", "a" * 40]


@pytest.fixture(scope="module")
def sampled(audit_result: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, str, list[str]]:
    """The tiny result decoded again by sampling (a new run and model version): the repo,
    its tracking URI and the inputs (test sources and the bad ones)."""
    repo = copy_result(audit_result[0], tmp_path_factory.mktemp("registry") / "result")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params.setdefault("decode", {}).update(SAMPLED)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    res = subprocess.run([shutil.which("dvc", path=tool_env()["PATH"]) or "dvc", "repro"],
                         cwd=repo, env=tool_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    words = [r.source for r in Predictions.load(repo / "predictions/test.jsonl").rows] + BAD
    return repo, f"sqlite:///{repo / 'mlflow.db'}", words


def latest_version(uri: str) -> str:
    client = mlflow.MlflowClient(uri)
    return max((v.version for v in client.search_model_versions(f"name = '{NAME}'")), key=int)


def predict_lines(repo: Path, words: list[str]) -> list[tuple[str, str, str]]:
    """(source, output, problem) per word, from `python -m pipeline.predict` in ``repo``."""
    res = subprocess.run([stage_python(), "-m", "pipeline.predict", *words], cwd=repo,
                         env=tool_env(), capture_output=True, text=True)
    answers = dict(line.split("\t", 1) for line in res.stdout.splitlines())
    problems = {int(line.split()[2]): line.split(": ", 1)[1]
                for line in res.stderr.splitlines() if line.startswith("[predict] line ")}
    return [(w, "" if i + 1 in problems else answers[w], problems.get(i + 1, ""))
            for i, w in enumerate(words)]


@pytest.mark.slow
def test_the_registered_model_answers_as_predict_does(sampled: tuple[Path, str, list[str]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    repo, uri, words = sampled
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = mlflow.pyfunc.load_model(f"models:/{NAME}/{latest_version(uri)}")
    got = model.predict(pd.DataFrame({"source": words}))
    rows = [(s, p if isinstance(p, str) else "", q)  # no answer: a null prediction
            for s, p, q in zip(got["source"], got["prediction"], got["problem"], strict=True)]
    assert rows == predict_lines(repo, words)
    answered = [r for r in rows if not r[2]]
    assert len(answered) >= 3 and len(rows) - len(answered) >= len(BAD)
    assert [q for _, _, q in rows[-3:]] == ["empty input", rows[-2][2], rows[-1][2]]
    assert all(got["score"][i] < 0 for i, r in enumerate(rows) if not r[2])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture(scope="module")
def served(sampled: tuple[Path, str, list[str]], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[str]:
    """`mlflow models serve` of the latest version on a free 127.0.0.1 port; its URL."""
    repo, uri, _ = sampled
    port = free_port()
    log = open(tmp_path_factory.mktemp("serve") / "serve.log", "w+b")  # noqa: SIM115
    env = tool_env() | {"MLFLOW_TRACKING_URI": uri}
    server = subprocess.Popen(
        [shutil.which("mlflow", path=env["PATH"]) or "mlflow", "models", "serve", "-m",
         f"models:/{NAME}/{latest_version(uri)}", "--env-manager", "local", "-h", "127.0.0.1",
         "-p", str(port)], cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"mlflow models serve did not start:\n{log.read().decode()}")
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_a_served_model_answers_over_http_as_the_loaded_one(
        sampled: tuple[Path, str, list[str]], served: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    repo, uri, words = sampled
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    body = json.dumps({"dataframe_split": {"columns": ["source"],
                                           "data": [[w] for w in words]}}).encode()
    status, text = post(f"{served}/invocations", body)
    assert status == 200, text
    loaded = mlflow.pyfunc.load_model(f"models:/{NAME}/{latest_version(uri)}")
    want = loaded.predict(pd.DataFrame({"source": words}))
    got = json.loads(text)["predictions"]
    def text(value: object) -> str:
        return value if isinstance(value, str) else ""  # null / NaN: no answer

    assert [(r["source"], text(r.get("prediction")), r["problem"]) for r in got] == [
        (s, text(p), q) for s, p, q in zip(want["source"], want["prediction"], want["problem"],
                                           strict=True)]


@pytest.mark.slow
@pytest.mark.parametrize(("body", "says"), [
    (b'{"dataframe_split": {"columns": ["word"], "data": [["cat"]]}}', "source"),
    (b'{"dataframe_split": {"columns": ["source"], "data": [[3]]}}', "source"),
    (b"not json", "JSON"),
], ids=["no source column", "not a string", "not JSON"])
def test_a_malformed_request_is_a_clear_400_not_a_traceback(served: str, body: bytes,
                                                             says: str) -> None:
    status, text = post(f"{served}/invocations", body)
    assert status == 400, text
    assert says.lower() in text.lower() and "Traceback" not in text


@pytest.mark.slow
def test_the_audit_compares_the_logged_model_with_the_result(
        audit_result: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_result(audit_result[0], tmp_path / "result")
    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    exp = client.get_experiment_by_name(NAME).experiment_id
    run = client.search_runs([exp], order_by=["attributes.start_time DESC"], max_results=1)[0]
    (logged,) = client.search_logged_models([exp], filter_string=f"source_run_id = "
                                                                f"'{run.info.run_id}'")
    packed = Path(logged.artifact_location.removeprefix("file://")) / "artifacts/result/model.pt"
    other = bytearray(packed.read_bytes())
    other[-100] ^= 1  # one bit of the served weights
    packed.write_bytes(bytes(other))
    report = run_audit(repo, monkeypatch, only=("evaluate redone", "mlflow run"))
    assert report.failed() == ["mlflow run"], report.render()
    assert "logged model file model.pt: mlflow run has sha256" in report.render()


@pytest.mark.slow
def test_the_audit_verdict_is_stamped_on_the_registered_version_and_passes_again(
        audit_result: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.audit_verdict import stamp_versions  # noqa: PLC0415

    repo = copy_result(audit_result[0], tmp_path / "result")
    only = ("evaluate redone", "mlflow run")
    report = run_audit(repo, monkeypatch, only=only)
    uri = f"sqlite:///{repo / 'mlflow.db'}"
    with monkeypatch.context() as m:
        m.chdir(repo)
        stamped = stamp_versions(uri, report)
    client = mlflow.MlflowClient(uri)
    (version,) = client.search_model_versions(f"run_id = '{report.run_id}'")
    assert stamped == f"{NAME} version {version.version}"
    # issue 55: a partial audit stamps what it checked, never the whole verdict
    assert "audit.status" not in version.tags
    assert version.tags["audit.partial"] == "PASSED [only: evaluate redone, mlflow run]"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert version.tags["audit.partial.commit"] == head
    assert run_audit(repo, monkeypatch, only=only).ok  # a stamp is no difference
    whole = replace(report, only=(), status={"every check": "ok"})  # a whole audit's verdict
    with monkeypatch.context() as m:
        m.chdir(repo)
        stamp_versions(uri, whole)
        stamp_versions(uri, report)  # then a partial one: the whole verdict stays
    (version,) = client.search_model_versions(f"run_id = '{report.run_id}'")
    assert version.tags["audit.status"] == "PASSED" and version.tags["audit.commit"] == head
    assert version.tags["audit.partial"] == "PASSED [only: evaluate redone, mlflow run]"
