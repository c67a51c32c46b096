"""MLflow logging for pipeline results. Only pipeline/ imports mlflow; seqcore never does.

If the tracking store cannot be reached, the run's content is kept in a pending JSON file and
``python -m pipeline.tracking --replay`` logs it later: nothing is lost.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import functools
import getpass
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeline.dvc_lock import upstream_lock_digest
from pipeline.lineage import dataset_inputs
from pipeline.registry import log_model, model_entry
from pipeline.timing import PIPELINE_WALL
from seqcore import __version__
from seqcore.artifacts.manifests import PreparedManifest, manifest_path
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.run_record import RunRecord
from seqcore.artifacts.train_log import TrainLog
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import (
    Config, ConfigError, config_from_dict, experiment_name, flatten, load_config)
from seqcore.credentials import redact_text, redact_uri
from seqcore.environment import producing_environment
from seqcore.hashing import digest, sha256_file
from seqcore.signature import SIGNATURE_FORMAT, result_params
from seqcore.tasks import get_task

MAX_PARAMS_PER_BATCH = 100  # MLflow log_batch limits
MAX_METRICS_PER_BATCH = 1000
MAX_TAGS_PER_BATCH = 100
MAX_PARAM_CHARS = 6000  # MLflow param value limit
MAX_KEY_CHARS = 250  # MLflow param/metric/tag key limit
RUN_NAME_CHARS = 40  # the run table shows about this much of a name
#: Marks the experiment as model training, not GenAI (the kind MLflow 3's UI offers first).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
#: MLflow step metric <- training log column. The UI groups a run's charts into sections by
#: the prefix before "/" (sorted by name, the unprefixed final figures last): the loss and dev
#: curves come first, then the optimiser's, then the time/ figures (pipeline/timing.py).
TRAIN_CURVES = (("loss/train", "loss"), ("loss/dev_nll", "dev_nll"), ("optim/lr", "lr"),
                ("optim/grad_norm", "grad_norm"), ("optim/ss_prob", "ss_prob"))


def tracking_uri(configured: str) -> str:
    """MLFLOW_TRACKING_URI wins over params.yaml, so a team server needs no code change.

    A relative sqlite path is made absolute: the record then names the same store wherever
    it is replayed from, and MLflow's per-URI store cache cannot mix up two repositories.
    """
    uri = os.environ.get("MLFLOW_TRACKING_URI") or configured
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not Path(uri[len(prefix):]).is_absolute():
        # DVC_ROOT is the user's repository, also inside a `dvc exp run --temp` or queued
        # run (whose working directory is a temporary copy, deleted afterwards).
        root = Path(os.environ.get("DVC_ROOT") or Path.cwd())
        uri = prefix + str(root / uri[len(prefix):])
    return uri


def param_text(value: Any) -> str:
    """How a param value is written to MLflow (strings as is, the rest as JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


def param_items(params: dict[str, Any]) -> list[tuple[str, str]]:
    """Sorted (key, text) pairs within MLflow's limits; anything cut is warned about."""
    out = []
    for key, value in sorted(params.items()):
        text = param_text(value)
        if len(key) > MAX_KEY_CHARS:
            raise ValueError(f"param key {key[:60]}... is longer than MLflow's {MAX_KEY_CHARS}")
        if len(text) > MAX_PARAM_CHARS:
            warnings.warn(f"param {key} cut from {len(text)} to {MAX_PARAM_CHARS} chars (MLflow "
                          "limit); the full value is in the params.yaml artifact", stacklevel=2)
            text = text[:MAX_PARAM_CHARS]
        out.append((key, text))
    return out


def contract_params(cfg: Config, tc: TokenizerContract, sig: str) -> dict[str, Any]:
    """Every parameter that can change the result, flattened with dotted names: guards and
    bookkeeping keys (seqcore.signature.NO_RESULT_KEYS) change no number and are left out,
    so raising one re-runs only the stage that checks it (issue 34)."""
    prepared = manifest_path(cfg.paths.prepared)
    data: dict[str, Any] = {}
    if prepared.exists():
        manifest = PreparedManifest.load(prepared)
        data = {f"data.prepared.sha256.{k}": v for k, v in manifest.sha256.items()}
        data["data.raw.sha256"] = manifest.raw.sha256
    return (result_params(cfg)
            | {f"tokenizer.contract.{k}": v for k, v in flatten(tc.as_json()).items()}
            | data | get_task(cfg.task).derived_params(cfg) | {"contract.signature": sig})


def train_curve(train_log: Path) -> list[tuple[str, int, float]]:
    """(metric, step, value) rows of the training log, for MLflow step metrics."""
    return [(name, int(row.step), float(getattr(row, col)))
            for row in TrainLog.load(train_log).rows for name, col in TRAIN_CURVES
            if math.isfinite(getattr(row, col))]


def pipeline_stages(dvc_yaml: Path = Path("dvc.yaml")) -> list[str]:
    """The names of the stages in dvc.yaml, in its order."""
    return list((read_yaml12(dvc_yaml) or {}).get("stages", {}))


def pipeline_outputs(cfg: Config, dvc_yaml: Path = Path("dvc.yaml")) -> set[str]:
    """Every out, metric and plot file of the stages in dvc.yaml, templated with ``cfg``."""
    values = result_params(cfg)  # the templated keys (paths.*, evaluate.details_dir) are there
    stages = read_yaml12(dvc_yaml)["stages"] if dvc_yaml.exists() else {}
    out = set()
    for stage in stages.values():
        for kind in ("outs", "metrics", "plots"):
            for entry in stage.get(kind) or []:
                name = entry if isinstance(entry, str) else next(iter(entry))
                out.add(re.sub(r"\$\{([^}]+)\}", lambda m: str(values[m.group(1)]), name))
    return {name.rstrip("/") for name in out}


def git_changes() -> list[str]:
    """Paths (files, untracked ones included) that differ from the checked-out commit."""
    res = subprocess.run(["git", "status", "--porcelain", "-z", "--untracked-files=all"],
                         capture_output=True, text=True, check=False)
    fields, paths = res.stdout.split("\0"), []
    while fields:
        entry = fields.pop(0)
        if len(entry) > 3:
            paths.append(entry[3:])
            if entry[0] in "RC":  # a rename or copy is followed by its source path
                paths.append(fields.pop(0))
    return paths


def git_state(cfg: Config) -> dict[str, str]:
    """The commit of the working tree, and whether its code or params differ from it.

    Files the pipeline writes itself (dvc.lock, reports/, every output in dvc.yaml) do not
    count: `dvc repro` rewrites them before this runs, which marked every run dirty (issue 12).
    """
    written = {"dvc.lock", "reports"} | pipeline_outputs(cfg)
    dirty = [p for p in git_changes()
             if not any(p == w or p.startswith(w + "/") for w in written)]
    return {"git.commit": head_commit(), "git.dirty": str(bool(dirty))}


def head_commit() -> str:
    """The checked-out commit ("none" outside a repository or before the first commit)."""
    res = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=False)
    return res.stdout.strip() or "none"


def _sha256_or_none(path: Path) -> str:
    return sha256_file(path) if path.exists() else "none"


def read_yaml12(path: Path) -> Any:
    """Parse YAML the way DVC does (ruamel, YAML 1.2: ``off`` is a string, ``1e-09`` a float),
    so dvc.lock digests and values agree between the evaluate stage and the audit."""
    return copy.deepcopy(_parse_yaml12(path.read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=8)
def _parse_yaml12(text: str) -> Any:
    """The parse, once per text: the audit reads one dvc.lock (40 kB, 0.3 s) four times."""
    from ruamel.yaml import YAML  # noqa: PLC0415

    return YAML(typ="safe", pure=True).load(text)


def env_tags(environment: dict[str, str]) -> dict[str, str]:
    """The producing environment as MLflow tags ``env.<field>``."""
    return {f"env.{k}": v for k, v in environment.items()}


def run_tags(cfg: Config, sig: str, tc: TokenizerContract, header: PredictionsHeader,
             exp_name: str | None) -> dict[str, str]:
    """Hashes that tie the run to its inputs (audit compares them with the files)."""
    lock = Path("dvc.lock")
    upstream = upstream_lock_digest(read_yaml12(lock)) if lock.exists() else "none"
    tags = {"contract.signature": sig, "contract.signature.format": str(SIGNATURE_FORMAT),
            "data.sha256": tc.data_sha256,
            "tokenizer.contract.sha256": _sha256_or_none(Path(cfg.paths.tokenizer) /
                                                         "contract.json"),
            "dvc.lock.sha256": _sha256_or_none(lock), "dvc.lock.upstream.sha256": upstream,
            "model.sha256": header.model_sha256, "seqcore.version": __version__,
            **git_state(cfg), **env_tags(producing_environment().as_dict())}
    # Where the model was trained (device kind, processes, backend), from the model file's
    # contract through the predictions header (issue 16); absent in older headers.
    tags |= {f"trained_on.{k}": str(v) for k, v in (header.trained_on or {}).items()}
    if exp_name:
        tags["dvc.exp.name"] = exp_name
    return tags


def run_texts(cfg: Config, pred_path: Path) -> dict[str, str]:
    """Artifact name -> text: kept in the record itself so a replay logs the same bytes."""
    files = {"params.yaml": "params.yaml", "dvc.lock": "dvc.lock",
             "contract/tokenizer_contract.json": Path(cfg.paths.tokenizer) / "contract.json",
             "reports/metrics.json": cfg.paths.metrics, "reports/buckets.csv": cfg.paths.buckets,
             "reports/report.md": cfg.paths.report,
             "reports/train_metrics.json": cfg.paths.train_metrics,
             f"predictions/{pred_path.with_suffix('.header.json').name}":
                 pred_path.with_suffix(".header.json")}
    texts = {name: Path(p).read_text(encoding="utf-8") for name, p in files.items()
             if Path(p).exists()}
    with open(pred_path, encoding="utf-8") as f:
        sample = [line for _, line in zip(range(cfg.evaluate.prediction_sample), f)]
    texts[f"predictions/{pred_path.stem}.sample.jsonl"] = "".join(sample)
    return texts


def baseline_params(rev: str) -> dict[str, Any]:
    """The result params (seqcore.signature.result_params) of ``rev``'s params.yaml with
    defaults filled in ({} if unreadable)."""
    import yaml  # noqa: PLC0415

    res = subprocess.run(["git", "show", f"{rev}:params.yaml"], capture_output=True, text=True,
                         check=False)
    if res.returncode != 0:  # no commit yet, or params.yaml not committed
        return {}
    try:
        return result_params(config_from_dict(yaml.safe_load(res.stdout) or {}))
    except (ValueError, TypeError, yaml.YAMLError):
        return {}


def changed_params(cfg: Config, base_rev: str) -> dict[str, tuple[Any, Any]]:
    """key -> (baseline value, this run's value) for every param that differs from the
    baseline commit ``base_rev`` (RunOrigin)."""
    base = baseline_params(base_rev)
    if not base:
        return {}
    return {k: (base.get(k), v) for k, v in result_params(cfg).items() if base.get(k) != v}


def run_name(exp: str | None, changed: dict[str, tuple[Any, Any]], sig8: str) -> str:
    """Short, leading with what tells the run apart: the DVC experiment name, then up to
    three changed params (last key part only); ``baseline-<sig>`` when nothing changed."""
    parts = [exp] if exp else []
    parts += [f"{k.rsplit('.', 1)[-1]}={param_text(v)}" for k, (_, v) in
              sorted(changed.items())[:3]]
    name = " ".join(parts) or f"baseline-{sig8}"
    return name if len(name) <= RUN_NAME_CHARS else name[: RUN_NAME_CHARS - 1] + "…"


#: How much of report.md the run's description holds (MLflow keeps 8,000 characters of a tag).
NOTE_REPORT_CHARS = 5000


def report_lead(report: str) -> str:
    """The story part of report.md for the run's description: everything before its full
    headline table (the error rates with intervals, beside the baseline, the training), at
    most NOTE_REPORT_CHARS; the whole report is the ``reports/report.md`` artifact."""
    lead = report.split("\n## Headline", 1)[0].rstrip()
    if len(lead) > NOTE_REPORT_CHARS:
        lead = lead[:NOTE_REPORT_CHARS].rsplit("\n", 1)[0] + "\n\n(cut here)"
    return lead + "\n\nThe whole report: artifact `reports/report.md`." if lead else ""


def run_note(name: str, metrics: dict[str, Any], changed: dict[str, tuple[Any, Any]],
             report: str = "") -> str:
    """The run's description (``mlflow.note.content``, Markdown): headline metrics, the
    params that differ from the baseline, then the lead of the report (issue 29: the run
    page tells the result's story without opening an artifact)."""
    split = metrics.get("split", "test")
    heads = [(label, metrics[k]) for label, k in (
        ("WER", "word_error_rate"), ("PER", "token_error_rate"),
        (f"{split} perplexity", f"{split}_perplexity"), ("exact match", "exact_match"))
        if isinstance(metrics.get(k), (int, float))]
    lines = [f"**{name}**", "", " · ".join(f"{label} {v:.4f}" for label, v in heads), ""]
    if changed:
        lines += ["Params changed from the baseline:", ""] + [
            f"- `{k}`: {param_text(a)} → {param_text(b)}"
            for k, (a, b) in sorted(changed.items())]
    else:
        lines.append("Baseline params (no change from the commit).")
    lead = report_lead(report)
    return "\n".join(lines + (["", "---", "", lead] if lead else []))


#: The run's artifact of counts and denominators (``split_counts``).
COUNTS_ARTIFACT = "counts.json"


def split_counts(numeric: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """(metrics, counts): integer values (sequence and token counts, denominators) are not
    charted as metrics; they go to one artifact, ``counts.json`` (as tags they were half of
    the run's 70, burying its description; issue 29)."""
    counts = {k: v for k, v in numeric.items() if isinstance(v, int)}
    return {k: v for k, v in numeric.items() if k not in counts}, counts


def source_tags(commit: str) -> dict[str, str]:
    """MLflow's standard source and user tags (the UI's Source and User columns)."""
    tags = {"mlflow.source.name": "dvc.yaml:evaluate", "mlflow.source.type": "LOCAL",
            "mlflow.user": getpass.getuser()}
    if commit != "none":
        tags["mlflow.source.git.commit"] = commit
    return tags


def run_images(details: Path) -> dict[str, str]:
    """plots/<name>.png -> base64 of the report's PNG plots (kept in the record for replay)."""
    return {f"plots/{p.name}": base64.b64encode(p.read_bytes()).decode("ascii")
            for p in sorted(details.glob("*.png"))}


def new_record(cfg: Config, run_name: str, params: dict[str, Any], metrics: dict[str, Any],
               tags: dict[str, str], texts: dict[str, str],
               images: dict[str, str] | None = None,
               model: dict[str, Any] | None = None) -> RunRecord:
    """The one record builder: the store, experiment and training curve come from ``cfg``."""
    return RunRecord(tracking_uri(cfg.mlflow.tracking_uri), experiment_name(cfg), run_name,
                     params, metrics, train_curve(Path(cfg.paths.train_log)), tags, texts, images,
                     dataset_inputs(cfg), model)


@dataclass(frozen=True)
class RunOrigin:
    """Where a run comes from, besides its files: the DVC experiment it belongs to (None
    outside ``dvc exp run``) and the commit its params are compared with for its name."""

    exp_name: str | None = None
    base_rev: str = "HEAD"

    @classmethod
    def from_environment(cls) -> RunOrigin:
        """As DVC states it to a stage: DVC_EXP_NAME and DVC_EXP_BASELINE_REV inside
        `dvc exp run`, else no experiment and the checked-out commit."""
        return cls(os.environ.get("DVC_EXP_NAME") or None,
                   os.environ.get("DVC_EXP_BASELINE_REV") or "HEAD")


def build_record(cfg: Config, metrics: dict[str, Any], sig: str, header: PredictionsHeader,
                 pred_path: Path, tc: TokenizerContract, origin: RunOrigin) -> RunRecord:
    """Everything one MLflow run of the evaluate stage holds (kept and replayed as JSON); a
    function of its arguments, the files and the checkout (no environment variable)."""
    numeric = {k: v for k, v in flatten(metrics).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    changed = changed_params(cfg, origin.base_rev)
    name = run_name(origin.exp_name, changed, digest(sig)[:8])
    numeric, counts = split_counts(numeric)
    # Text values of the results (metric signatures, the split) are not metrics: keep them
    # as tags so nothing of metrics.json/results.json is dropped.
    texts = {f"metrics.{k}": v for k, v in flatten(metrics).items() if isinstance(v, str)}
    tags = texts | run_tags(cfg, sig, tc, header, origin.exp_name)
    tags |= source_tags(tags.get("git.commit", "none"))
    report = Path(cfg.paths.report)
    tags["mlflow.note.content"] = run_note(
        name, metrics, changed, report.read_text(encoding="utf-8") if report.exists() else "")
    artifacts = run_texts(cfg, pred_path) | {
        COUNTS_ARTIFACT: json.dumps(counts, indent=1, sort_keys=True) + "\n"}
    return new_record(cfg, name, contract_params(cfg, tc, sig), numeric, tags, artifacts,
                      run_images(Path(cfg.evaluate.details_dir)),
                      model_entry(cfg, header, pred_path, tc, tags))


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
    import mlflow  # noqa: PLC0415 (slow import, only when logging)
    from mlflow.entities import Metric, Param, RunTag  # noqa: PLC0415

    client = mlflow.MlflowClient(tracking_uri=record.uri)
    exp = client.get_experiment_by_name(record.experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(
        record.experiment, artifact_location=artifact_location(record.uri, record.experiment))
    if not exp or EXPERIMENT_KIND[0] not in exp.tags:
        client.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
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
    return rid


def dataset_entities(datasets: list[dict[str, str]]) -> list[Any]:
    """MLflow DatasetInputs of a record's datasets, each tagged with its context."""
    from mlflow.entities import Dataset, DatasetInput, InputTag  # noqa: PLC0415

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


def log_seconds(text: str | None) -> float:
    """``SEQCORE_MLFLOW_SECONDS`` as seconds (``LOG_SECONDS`` when unset); a value that is not
    a number of seconds > 0 stops the stage with one line."""
    if text is None:
        return LOG_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        sys.exit(f"SEQCORE_MLFLOW_SECONDS = {text!r}: must be a number of seconds > 0 (unset: "
                 f"{LOG_SECONDS:g})")
    return seconds


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


#: How long logging a run (``SEQCORE_MLFLOW_SECONDS``) and a replay (``--timeout``) try before
#: they give up, and the HTTP client's settings under them unless the environment says
#: otherwise: MLflow's defaults (7 retries, 120 s per request) kept an unreachable server busy
#: for over 4 minutes (#15).
LOG_SECONDS = 120.0
REPLAY_SECONDS = 60.0
STORE_HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


class StoreDeadline(BaseException):
    """The store's time is up. A BaseException, so that the retry loops of MLflow's HTTP
    client and SQLAlchemy store (which catch Exception) cannot swallow it."""


def _deadline(signum: int, frame: Any) -> None:
    raise StoreDeadline


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise StoreDeadline in the block after ``seconds`` of wall time (main thread only;
    elsewhere the block runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGALRM, _deadline)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


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
        cfg = load_config(args.params)
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
