"""MLflow logging with the real client: a temporary sqlite store, a real `mlflow server` over
HTTP, and an unreachable store whose run is kept and replayed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import mlflow
import pytest

from seqcore.artifacts.run_record import RunRecord

from pipeline.tracking import (
    MAX_PARAM_CHARS, MAX_PARAMS_PER_BATCH, log_or_keep, log_run, log_seconds, param_items,
    tracking_uri)
from tests.factories import REPO
from tests.servers import Team
from tests.pipeline_helpers import empty_mlflow_store


@pytest.fixture(autouse=True)
def _short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def empty_store() -> Path:
    """An initialised, empty sqlite store (one per session); tests copy it."""
    return empty_mlflow_store()


def store_copy(empty_store: Path, dest: Path) -> Path:
    shutil.copyfile(empty_store, dest)
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_record(uri: str, n_params: int = 2 * MAX_PARAMS_PER_BATCH + 17) -> RunRecord:
    """A record with more params than one MLflow batch takes, a curve, tags and texts."""
    params = {f"section.key{i:03d}": i for i in range(n_params)}
    params |= {"decode.strategy": "greedy", "evaluate.bucket_edges": [4, 6, 8]}
    return RunRecord(
        uri, "exp-test", "g2p-transformer-greedy-test", params,
        {"exact_match": 0.25, "test_perplexity": 3.5},
        [("train.loss", s, 10.0 / s) for s in (1, 2, 3)],
        {"contract.signature": "task:g2p|data:abc|fmt:1", "git.dirty": "False"},
        {"params.yaml": "task: g2p\n", "predictions/test.sample.jsonl": '{"id": 1}\n'})


def assert_run_matches(client: mlflow.MlflowClient, rid: str, record: RunRecord,
                       tmp: Path) -> None:
    run = client.get_run(rid)
    assert run.info.run_name == record.run_name
    assert run.data.params == {k: v for k, v in param_items(record.params)}
    assert run.data.params["evaluate.bucket_edges"] == "[4, 6, 8]"
    assert run.data.metrics["exact_match"] == 0.25
    history = client.get_metric_history(rid, "train.loss")
    assert [(m.step, m.value) for m in history] == [(s, v) for _, s, v in record.steps]
    assert {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")} == \
        record.tags
    for name, text in record.texts.items():
        local = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path=name,
                                                    dst_path=str(tmp / rid),
                                                    tracking_uri=client.tracking_uri)
        assert Path(local).read_text() == text


def test_every_param_is_logged_across_batches_with_curve_tags_and_artifacts(
        tmp_path: Path, empty_store: Path) -> None:
    uri = f"sqlite:///{store_copy(empty_store, tmp_path / 'mlflow.db')}"
    record = make_record(uri)
    rid = log_run(record)
    assert_run_matches(mlflow.MlflowClient(uri), rid, record, tmp_path)


def test_a_param_longer_than_mlflow_allows_is_cut_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="param long.value cut from 7000"):
        items = dict(param_items({"long.value": "x" * 7000, "short": 1}))
    assert len(items["long.value"]) == MAX_PARAM_CHARS and items["short"] == "1"


def test_env_tracking_uri_overrides_params_and_relative_sqlite_becomes_absolute(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert tracking_uri("sqlite:///mlflow.db") == f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://team:5000")
    assert tracking_uri("sqlite:///mlflow.db") == "http://team:5000"


@pytest.mark.parametrize("text", ["abc", "0", "-5", "inf", "nan"])
def test_a_deadline_that_is_not_seconds_above_zero_stops_with_one_line(text: str) -> None:
    with pytest.raises(SystemExit) as stop:
        log_seconds(text)
    assert str(stop.value) == (f"SEQCORE_MLFLOW_SECONDS = {text!r}: must be a number of "
                               "seconds > 0 (unset: 120)")
    assert log_seconds("2.5") == 2.5 and log_seconds(None) == 120


def test_a_store_that_never_answers_is_given_up_at_the_stated_deadline_and_the_run_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")  # one request would outlast it
    monkeypatch.setenv("SEQCORE_MLFLOW_SECONDS", "3")
    pending = tmp_path / "reports" / "mlflow_pending.json"
    with socket.socket() as mute:  # accepts connections (backlog), never answers
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        record = make_record(f"http://127.0.0.1:{mute.getsockname()[1]}", n_params=3)
        start = time.monotonic()
        assert log_or_keep(record, pending) is None
        took = time.monotonic() - start
    err = capsys.readouterr().err
    assert 3 <= took < 30, took
    assert err.count("WARNING") == 1 and "did not answer within 3 s" in err, err
    assert RunRecord.load_all(pending) == [record]


@pytest.mark.slow
def test_unreachable_store_warns_once_keeps_the_run_and_replay_logs_it(
        tmp_path: Path, empty_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    pending = tmp_path / "reports" / "mlflow_pending.json"
    record = make_record(dead, n_params=3)
    assert log_or_keep(record, pending) is None
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1 and "--replay" in err and dead in err
    assert RunRecord.load_all(pending) == [record]

    store = f"sqlite:///{store_copy(empty_store, tmp_path / 'later.db')}"
    env = dict(os.environ, MLFLOW_TRACKING_URI=store)
    res = subprocess.run([sys.executable, "-m", "pipeline.tracking", "--replay", str(pending)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert not pending.exists()
    client = mlflow.MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("exp-test").experiment_id])
    assert_run_matches(client, run.info.run_id, replace(record, uri=store), tmp_path)


@pytest.mark.slow
def test_run_logged_to_an_mlflow_server_reads_back_over_http(tmp_path: Path, team: Team) -> None:
    # the session's team server (runs in PostgreSQL, artifacts proxied to S3)
    record = make_record(team.mlflow, n_params=120)
    rid = log_run(record)
    assert_run_matches(mlflow.MlflowClient(team.mlflow), rid, record, tmp_path)
