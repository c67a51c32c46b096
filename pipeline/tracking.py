"""MLflow logging for pipeline results: a run record (pipeline/record.py) logged to its store
within a deadline. Only pipeline/ imports mlflow; seqcore never does.

If the tracking store cannot be reached, the run's content is kept in a pending JSON file and
``python -m pipeline.tracking --replay`` logs it later: nothing is lost.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.deadline import REPLAY_SECONDS, STORE_HTTP_ENV, StoreDeadline, deadline, log_seconds
from pipeline.record import param_items, tracking_uri
from pipeline.registry import log_model
from pipeline.timing import PIPELINE_WALL
from pipeline.stage import load_params
from seqcore.artifacts.run_record import RunRecord
from seqcore.config import ConfigError
from seqcore.credentials import redact_text, redact_uri

MAX_PARAMS_PER_BATCH = 100  # MLflow log_batch limits
MAX_METRICS_PER_BATCH = 1000
MAX_TAGS_PER_BATCH = 100
#: Marks the experiment as model training, not GenAI (the kind MLflow 3's UI offers first).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
#: The experiment's shared view of its run list (MLflow's "share view": an experiment tag
#: ``mlflow.sharedViewState.<key>`` that the UI reads for ``?viewStateShareKey=<key>``): the
#: headline metrics as columns, each beside the baseline's, newest run first (issue 55).
VIEW_KEY = "seqcore-headline"
VIEW_METRICS = ("word_error_rate", "baseline.word_error_rate", "token_error_rate",
                "baseline.token_error_rate", "exact_match", "baseline.exact_match",
                "model_output.word_error_rate", "test_perplexity")


def view_state(metrics: Iterable[str]) -> str:
    """The shared view's state (JSON: MLflow's UI state and search facets): the
    ``VIEW_METRICS`` that the run logs, in that order and wide enough to read, then the
    registered model; newest run first."""
    have = set(metrics)
    columns = [f"metrics.`{m}`" for m in VIEW_METRICS if m in have] + ["attributes.`Models`"]
    return json.dumps({"selectedColumns": columns, "columnOrder": columns,
                       "columnWidths": dict.fromkeys(columns, 190),
                       "orderByKey": "attributes.start_time", "orderByAsc": False},
                      sort_keys=True)


def runs_link(uri: str, experiment_id: str) -> str:
    """Where the UI opens the experiment's runs in the shared view, in training mode (the
    server's own address for an HTTP store; the page's path for a local one)."""
    page = (f"#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={VIEW_KEY}")
    if uri.startswith(("http://", "https://")):
        return f"{redact_uri(uri).rstrip('/')}/{page}"
    return f"http://127.0.0.1:5000/{page} (after `mlflow ui --backend-store-uri {uri}`)"


def artifact_location(uri: str, experiment: str) -> str | None:
    """Artifacts of a sqlite store live next to the database (MLflow's default, ./mlruns,
    is relative to the working directory: inside `dvc exp run --temp` a folder deleted
    after the run). None (the server's default) for any other store."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return None
    return (Path(uri[len(prefix):]).parent / "mlruns" / experiment).as_uri()


def log_run(record: RunRecord) -> str:
    """Log one run from a record; returns the run id."""
    import mlflow  # noqa: PLC0415 (slow)
    from mlflow.entities import Metric, Param, RunTag  # noqa: PLC0415 (slow)

    client = mlflow.MlflowClient(tracking_uri=record.uri)
    exp = client.get_experiment_by_name(record.experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(
        record.experiment, artifact_location=artifact_location(record.uri, record.experiment))
    if not exp or EXPERIMENT_KIND[0] not in exp.tags:
        client.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
    view = view_state(record.metrics)
    if not exp or exp.tags.get(f"mlflow.sharedViewState.{VIEW_KEY}") != view:
        client.set_experiment_tag(exp_id, f"mlflow.sharedViewState.{VIEW_KEY}", view)
    timing = record.timing or {}
    run = client.create_run(exp_id, run_name=record.run_name)
    rid = run.info.run_id
    params = [Param(k, v) for k, v in param_items(record.params)]
    for i in range(0, len(params), MAX_PARAMS_PER_BATCH):
        client.log_batch(rid, params=params[i : i + MAX_PARAMS_PER_BATCH])
    metrics = [Metric(k, float(v), 0, 0) for k, v in sorted(record.metrics.items())]
    metrics += [Metric(k, float(v), 0, int(step)) for k, step, v in record.steps]
    metrics += [Metric(k, float(v), 0, 0) for k, v in sorted(timing.items())]
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
        client.log_batch(rid, metrics=metrics[i : i + MAX_METRICS_PER_BATCH])
    tags = [RunTag(k, str(v)) for k, v in sorted(record.tags.items())]
    for i in range(0, len(tags), MAX_TAGS_PER_BATCH):
        client.log_batch(rid, tags=tags[i : i + MAX_TAGS_PER_BATCH])
    if record.datasets:
        client.log_inputs(rid, datasets=dataset_entities(record.datasets))
    for name, text in sorted(record.texts.items()):
        client.log_text(rid, text, name)
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in sorted((record.images or {}).items()):
            local = Path(tmp) / Path(name).name
            local.write_bytes(base64.b64decode(data))
            client.log_artifact(rid, str(local), str(Path(name).parent))
    if record.model:
        log_model(client, record, rid, exp_id)
    # The run's Duration (end - start) is the pipeline's wall time when every stage was
    # timed, not the second logging takes. The start stays the moment of logging, so "the
    # latest run" (the audit's, the UI's order) is the one logged last.
    end = run.info.start_time + round(timing[PIPELINE_WALL] * 1000) if PIPELINE_WALL in timing \
        else None
    client.set_terminated(rid, end_time=end)
    print(f"[mlflow] the runs with their headline metrics: {runs_link(record.uri, exp_id)}",
          file=sys.stderr)
    return rid


def dataset_entities(datasets: list[dict[str, str]]) -> list[Any]:
    """MLflow DatasetInputs of a record's datasets, each tagged with its context."""
    from mlflow.entities import Dataset, DatasetInput, InputTag  # noqa: PLC0415 (slow)

    return [DatasetInput(Dataset(d["name"], d["digest"], d["source_type"], d["source"],
                                 profile=d["profile"]),
                         [InputTag("mlflow.data.context", d["context"])]) for d in datasets]


@contextlib.contextmanager
def redacted_console(uri: str) -> Iterator[None]:
    """Pass what is printed inside on without the credentials of ``uri`` (MLflow prints links
    to the run built from the tracking URI, user-info included)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield
    finally:
        sys.stdout.write(redact_text(out.getvalue(), (uri,)))
        sys.stderr.write(redact_text(err.getvalue(), (uri,)))


def log_or_keep(record: RunRecord, pending: Path, seconds: float | None = None) -> str | None:
    """Log the run within ``seconds``; on any tracking failure, or when the store does not
    answer in time, keep the record in ``pending`` and warn once.

    ``seconds`` defaults to ``SEQCORE_MLFLOW_SECONDS`` from the environment, else
    ``LOG_SECONDS``: a store that accepts connections and never answers must not hold the
    stage (MLflow's own retries and per-request timeouts add up to many minutes).
    """
    if seconds is None:
        seconds = log_seconds(os.environ.get("SEQCORE_MLFLOW_SECONDS"))
    for name, value in STORE_HTTP_ENV.items():
        os.environ.setdefault(name, value)
    uri = record.uri
    try:
        with redacted_console(uri), deadline(seconds):
            rid = log_run(record)
    except (Exception, StoreDeadline) as err:  # noqa: BLE001 (no store failure fails the run)
        kept = RunRecord.load_all(pending) if pending.exists() else []
        # The replay resolves the store again (as a run does), so the address kept here is
        # for people only, and without its credentials.
        RunRecord.save_all(pending, kept + [replace(record, uri=redact_uri(uri))])
        why = (f"did not answer within {seconds:g} s" if isinstance(err, StoreDeadline)
               else f"unreachable ({type(err).__name__}: {err})")
        print(redact_text(f"WARNING: MLflow store {uri} {why}; run kept in {pending}; log it "
                          "later with `python -m pipeline.tracking --replay`", (uri,)),
              file=sys.stderr)
        return None
    print(f"[mlflow] run {rid} in {redact_uri(uri)} (experiment {record.experiment})",
          file=sys.stderr)
    return rid


def replay(pending: Path, uri: str, seconds: float) -> int:
    """Log every run kept in ``pending`` to the store ``uri``, oldest first, within ``seconds``.

    Stops at the first failure; the runs not logged stay in ``pending`` (deleted when empty).
    Returns the number of runs left. A run cut off by the deadline may be left half-logged
    (status RUNNING) in the store; the next replay logs it again, whole.
    """
    import mlflow  # noqa: F401, PLC0415 (imported before the clock starts: it takes seconds)

    records = RunRecord.load_all(pending)
    print(f"replaying {len(records)} run(s) from {pending} into {redact_uri(uri)} "
          f"(giving up after {seconds:g} s)", file=sys.stderr)
    done, start = 0, time.monotonic()
    try:
        with deadline(seconds):
            for record in records:
                with redacted_console(uri):
                    rid = log_run(replace(record, uri=uri))
                done += 1
                print(f"logged run {rid} ({record.run_name})", file=sys.stderr)
    except StoreDeadline:
        print(f"gave up after {time.monotonic() - start:.0f} s: {redact_uri(uri)} did not "
              "answer in time (raise --timeout to wait longer)", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 (any store failure keeps the runs)
        print(redact_text(f"still unreachable: {type(err).__name__}: {err}", (uri,)),
              file=sys.stderr)
    left = records[done:]
    if left:
        RunRecord.save_all(pending, left)
        print(f"{len(left)} run(s) still kept in {pending}", file=sys.stderr)
    else:
        pending.unlink()
    return len(left)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Log the runs kept while the MLflow store was unreachable. The store is "
        "resolved as for a run: MLFLOW_TRACKING_URI, else mlflow.tracking_uri of --params.")
    parser.add_argument("--replay", nargs="?", const="", default="", metavar="PENDING",
                        help="the pending file (default: paths.mlflow_pending of --params)")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--timeout", type=float, default=REPLAY_SECONDS,
                        help=f"seconds before giving up (default {REPLAY_SECONDS:g})")
    args = parser.parse_args()
    try:
        cfg = load_params(args.params)
    except ConfigError as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    pending = Path(args.replay or cfg.paths.mlflow_pending)
    if not pending.exists():
        print(f"nothing pending ({pending} does not exist)")
        return
    for name, value in STORE_HTTP_ENV.items():
        os.environ.setdefault(name, value)
    sys.exit(1 if replay(pending, tracking_uri(cfg.mlflow.tracking_uri), args.timeout) else 0)


if __name__ == "__main__":
    main()
