"""MLflow logging with the real client: a temporary sqlite store and an unreachable store
whose run is kept and replayed (the run over HTTP to a real `mlflow server` is in
tests/mlflow/test_team.py, beside the other tests of the session's team server)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from dataclasses import replace
from pathlib import Path

import mlflow
import pytest

from pipeline.deadline import log_seconds
from pipeline.record import MAX_PARAM_CHARS, param_items, tracking_uri
from pipeline.run_naming import NOTE_REPORT_CHARS, report_lead, run_note
from pipeline.tracking import VIEW_KEY, log_or_keep, log_run, runs_link, view_state
from seqcore.artifacts.run_record import RunRecord
from tests.factories import REPO
from tests.pipeline_helpers import assert_run_matches, empty_mlflow_store, make_record, run_python
from tests.servers import free_port


@pytest.fixture(autouse=True)
def _short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def store_copy(dest: Path) -> str:
    """The URI of a copy of the session's initialised, empty sqlite store at ``dest``."""
    shutil.copyfile(empty_mlflow_store(), dest)
    return f"sqlite:///{dest}"


def test_every_param_is_logged_across_batches_with_curve_tags_and_artifacts(
        tmp_path: Path) -> None:
    record = make_record(store_copy(tmp_path / "mlflow.db"))
    assert_run_matches(mlflow.MlflowClient(record.uri), log_run(record), record, tmp_path)


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
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    pending = tmp_path / "reports" / "mlflow_pending.json"
    record = make_record(dead, n_params=3)
    assert log_or_keep(record, pending) is None
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1 and "--replay" in err and dead in err
    assert RunRecord.load_all(pending) == [record]

    store = store_copy(tmp_path / "later.db")
    res = run_python(REPO, "-m", "pipeline.tracking", "--replay", str(pending),
                     env=dict(os.environ, MLFLOW_TRACKING_URI=store), timeout=120)
    assert res.returncode == 0, res.stderr
    assert not pending.exists()
    client = mlflow.MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("exp-test").experiment_id])
    assert_run_matches(client, run.info.run_id, replace(record, uri=store), tmp_path)


def test_the_run_description_opens_on_the_headline_figures_with_the_baseline_beside() -> None:
    note = run_note("n", {"word_error_rate": 0.27, "baseline.word_error_rate": 0.302,
                          "token_error_rate": 0.0645, "test_perplexity": 1.5}, {})
    assert note.splitlines()[2] == ("WER 0.2700 (baseline 0.3020) · PER 0.0645 · "
                                    "test perplexity 1.5000")


def test_the_shared_view_opens_the_run_list_on_the_headline_columns_in_order() -> None:
    state = json.loads(view_state(["token_error_rate", "baseline.word_error_rate", "x",
                                   "word_error_rate"]))
    want = ["metrics.`word_error_rate`", "metrics.`baseline.word_error_rate`",
            "metrics.`token_error_rate`", "attributes.`Models`"]
    assert state["selectedColumns"] == state["columnOrder"] == want
    assert (state["orderByKey"], state["orderByAsc"]) == ("attributes.start_time", False)
    assert runs_link("http://u:p@h:5000/", "7") == (
        "http://***@h:5000/#/experiments/7/runs?workflowType=machine_learning"
        f"&viewStateShareKey={VIEW_KEY}")


def test_the_run_description_holds_the_report_lead_and_points_to_the_whole_report() -> None:
    report = ("# Evaluation report\n\n| WER | 0.27 |\n\n## Beside the baseline\n\nx\n\n"
              "## Headline\n\nrest")
    lead = report_lead(report)
    assert lead.startswith("# Evaluation report") and "## Beside the baseline" in lead
    assert "## Headline" not in lead and "rest" not in lead
    assert lead.endswith("The whole report: artifact `reports/report.md`.")
    long = report_lead("# R\n" + "| row |\n" * 2000)
    assert len(long) < NOTE_REPORT_CHARS + 100 and "(cut here)" in long
    assert report_lead("") == "" and run_note("n", {}, {}).endswith("from the commit).")
    assert run_note("n", {}, {}, report).endswith(lead)
