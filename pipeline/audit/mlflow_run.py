"""The MLflow run against the record the evaluate stage would log now, compared whole.

Params, final metrics, the step metrics of the training log, every tag, and every logged
artifact (downloaded through ``mlflow.artifacts``, so a local store and an S3-backed server
are read alike). Only pipeline/ imports mlflow.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from pipeline.audit.lineage import PIPELINE, RUN, dataset_diffs, model_diffs
from pipeline.dvc_files import read_yaml12, upstream_lock_digest
from pipeline.record import param_items
from pipeline.timing import TIME_PREFIX
from seqcore.audit import number_diffs, text_diffs
from seqcore.artifacts.run_record import RunRecord
from seqcore.compare import first_difference
from seqcore.config import Config, config_from_dict, experiment_name
from seqcore.errors import UnreadableFile
from seqcore.signature import result_params


#: What `python -m pipeline.compare --log` attaches to a run afterwards (pipeline/compare.py
#: LOG_FOLDER, LOG_TAG): a comparison with another result, not part of the pipeline's record.
COMPARE_FOLDER, COMPARE_TAG = "compare/", "compare."
#: What `python -m pipeline.audit --run` writes on the run afterwards (pipeline/audit/run.py):
#: the verdict of an audit of the run, not part of its record.
AUDIT_TAG = "audit."


#: Tags that describe when, where and by whom the run was made, not the result: present is
#: all the audit can ask. The record the audit rebuilds carries the auditor's login as
#: mlflow.user, so comparing it failed every audit by a colleague (issue 33).
FREE_TAGS = ("dvc.exp.name", "mlflow.user")


#: The tag by which a run names the result it was logged for (pipeline/record.py): the
#: digest of the dvc.lock stages the evaluate stage saw (pipeline/audit/lock.py).
RESULT_TAG = "dvc.lock.upstream.sha256"


def find_run(uri: str, cfg: Config, run_id: str | None,
             lock: dict[str, Any] | None = None) -> Any:
    """The MLflow run by id, from the store at ``uri``; else the latest run of the configured experiment that was
    logged for the result whose dvc.lock is ``lock`` (its RESULT_TAG: issue 33, the result
    names its run, not "the latest"); without a lock, the latest run."""
    import mlflow  # noqa: PLC0415 (slow import)

    client = mlflow.MlflowClient(tracking_uri=uri)
    if run_id:
        return client.get_run(run_id)
    exp = client.get_experiment_by_name(experiment_name(cfg))
    claims = f"tags.`{RESULT_TAG}` = '{upstream_lock_digest(lock)}'" if lock else ""
    runs = client.search_runs([exp.experiment_id], filter_string=claims,
                              order_by=["attributes.start_time DESC"], max_results=1) \
        if exp else []
    if not runs:
        raise LookupError(f"no run in experiment {experiment_name(cfg)!r}" + (
            f" was logged for this result ({RESULT_TAG} {upstream_lock_digest(lock)[:12]}): "
            "run `dvc repro` (evaluate logs it), or name one with --run-id" if lock else ""))
    return runs[0]


def _is_commit(sha: str) -> bool:
    res = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True,
                         check=False)
    return res.returncode == 0


def tag_diffs(record: RunRecord, tags: dict[str, str], lock_sha: str | None) -> list[str]:
    """Every tag: equal to the record's, or (git.*, dvc.lock.sha256) true of this repository.

    ``env.*`` tags are the environment check's; MLflow's own ``mlflow.*`` tags are not ours
    except the run name.
    """
    want = {k: str(v) for k, v in record.tags.items() if not k.startswith("env.")}
    # The record is built under the run's dvc.exp.name (expected_record), so its name leads
    # with the experiment's as the logged one does.
    want["mlflow.runName"] = record.run_name
    diffs = []
    for key in sorted(set(want) | {k for k in tags if not k.startswith(("mlflow.", "env."))}):
        have, expected = tags.get(key), want.get(key)
        if key.startswith((COMPARE_TAG, AUDIT_TAG)):
            continue  # a comparison or an audit's verdict attached later
        if key not in want and key not in FREE_TAGS:
            diffs.append(f"tag {key}: {RUN} has {have!r}, the pipeline writes no such tag")
        elif have is None and key in want:
            diffs.append(f"tag {key}: {PIPELINE} has {expected!r}, {RUN} has nothing")
        elif key in ("git.commit", "mlflow.source.git.commit"):
            if have != expected and not _is_commit(have):
                diffs.append(f"tag {key}: {RUN} has {have!r}, not a commit of this "
                             f"repository (HEAD is {expected!r})")
        elif key == "dvc.lock.sha256":
            if have != lock_sha:
                diffs.append(f"tag dvc.lock.sha256: {RUN} has {have!r}, the run's dvc.lock "
                             f"artifact has sha256 {lock_sha!r}")
        elif key.startswith("git.") or key in FREE_TAGS:
            continue  # the working tree when the run was made (present is all we can ask)
        elif have != expected:
            diffs.append(f"tag {key}: {RUN} has {have!r}, {PIPELINE} has {expected!r}")
    return diffs


def step_diffs(client: Any, run_id: str, record: RunRecord) -> list[str]:
    """Each step metric's whole history against the training log's rows."""
    want: dict[str, list[tuple[int, float]]] = {}
    for name, step, value in record.steps:
        want.setdefault(name, []).append((step, value))
    diffs = []
    for name, rows in sorted(want.items()):
        got = [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, name),
                                                  key=lambda m: (m.step, m.timestamp))]
        if got != sorted(rows):
            first = next((i for i, (a, b) in enumerate(zip(got, sorted(rows))) if a != b),
                         min(len(got), len(rows)))
            a = got[first] if first < len(got) else "nothing"
            b = sorted(rows)[first] if first < len(rows) else "nothing"
            diffs.append(f"step metric {name}: entry {first + 1} (step, value): {RUN} has {a}, "
                         f"train log has {b} ({len(got)} vs {len(rows)} entries)")
    return diffs


def artifact_diffs(run: Any, uri: str, record: RunRecord,
                   lock: dict[str, Any]) -> tuple[list[str], str | None]:
    """Every logged artifact downloaded and compared with the file it copies.

    Returns the differences and the sha256 of the run's dvc.lock artifact (the lock as the
    evaluate stage saw it: only its upstream stages must still agree).
    """
    import mlflow  # noqa: PLC0415 (slow import)

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keep output plain
    # what the pipeline logs: the texts, and the PNG plots (base64 in the record)
    texts: dict[str, bytes] = {n: s.encode("utf-8") for n, s in record.texts.items()}
    texts |= {n: base64.b64decode(b) for n, b in (record.images or {}).items()}
    with tempfile.TemporaryDirectory(prefix="audit-mlflow-") as tmp:
        root = Path(mlflow.artifacts.download_artifacts(
            run_id=run.info.run_id, dst_path=tmp, tracking_uri=uri))
        got = {p.relative_to(root).as_posix(): p.read_bytes()
               for p in root.rglob("*") if p.is_file()}
    diffs = [f"artifact {n}: {RUN} has it, the pipeline logs no such file"
             for n in sorted(set(got) - set(texts)) if not n.startswith(COMPARE_FOLDER)]
    diffs += [f"artifact {n}: {PIPELINE} has it, {RUN} has nothing"
              for n in sorted(set(texts) - set(got))]
    lock_sha = None
    for name in sorted(set(texts) & set(got)):
        if name == "dvc.lock":
            lock_sha = hashlib.sha256(got[name]).hexdigest()
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / "dvc.lock").write_bytes(got[name])
                try:
                    logged = read_yaml12(Path(tmp) / "dvc.lock")
                except UnreadableFile:
                    logged = None
            if not isinstance(logged, dict):  # emptied, cut off, not YAML: a difference
                diffs.append(f"artifact dvc.lock: {RUN} holds no dvc.lock (emptied, cut off "
                             "or not YAML)")
            elif upstream_lock_digest(logged) != upstream_lock_digest(lock):
                diffs.append("artifact dvc.lock: its stages before evaluate differ from "
                             "the workspace dvc.lock's")
            continue
        if name == "params.yaml":
            diffs += params_artifact_diffs(got[name], texts[name])
            continue
        diffs += first_difference(f"artifact {name}", (RUN, "file"), got[name], texts[name])
    return diffs, lock_sha


def params_artifact_diffs(logged: bytes, current: bytes) -> list[str]:
    """The run's params.yaml against the workspace's, by the values of the keys that can
    change a result (seqcore.signature.result_params): a guard raised after the run re-ran
    only the stage that checks it (issue 34). A file that does not load is compared as bytes.
    """
    import yaml  # noqa: PLC0415 (only for a run's params)

    try:
        a, b = (result_params(config_from_dict(yaml.safe_load(t) or {}))
                for t in (logged.decode("utf-8"), current.decode("utf-8")))
    except (ValueError, TypeError, UnicodeDecodeError, yaml.YAMLError):
        return first_difference("artifact params.yaml", (RUN, "file"), logged, current)
    return [f"artifact params.yaml: {k}: {RUN} has {a.get(k)!r}, the file has {b.get(k)!r}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def mlflow_diffs(uri: str, cfg: Config, run: Any, record: RunRecord,
                 lock: dict[str, Any]) -> list[str]:
    """The run (in the store at ``uri``) compared whole with ``record``
    (pipeline.record.build_record, made now)."""
    import mlflow  # noqa: PLC0415 (slow import)

    pending = Path(cfg.paths.mlflow_pending)
    diffs = [f"{pending} holds runs not yet logged: `python -m pipeline.tracking --replay`"
             ] if pending.exists() else []
    client = mlflow.MlflowClient(tracking_uri=uri)
    rid = run.info.run_id
    want = dict(param_items(record.params))
    diffs += text_diffs(f"run {rid} param", (PIPELINE, RUN), want, run.data.params)
    diffs += [f"run {rid} param {k}: {RUN} has {v!r}, not in the current contract"
              for k, v in sorted(run.data.params.items()) if k not in want]
    finals = {k: float(v) for k, v in record.metrics.items()}
    diffs += number_diffs(f"run {rid} metric", (PIPELINE, RUN), finals, run.data.metrics)
    steps = {name for name, _, _ in record.steps}
    # time/* (pipeline/timing.py) is clock time: when and where the stages ran, never compared
    diffs += [f"run {rid} metric {k}: {RUN} has {v!r}, the pipeline logs no such metric"
              for k, v in sorted(run.data.metrics.items())
              if k not in finals | dict.fromkeys(steps) and not k.startswith(TIME_PREFIX)]
    diffs += [f"run {rid} {d}" for d in step_diffs(client, rid, record)]
    art, lock_sha = artifact_diffs(run, uri, record, lock)
    diffs += [f"run {rid} {d}" for d in art]
    diffs += [f"run {rid} {d}" for d in tag_diffs(record, run.data.tags, lock_sha)]
    diffs += [f"run {rid} {d}" for d in dataset_diffs(run, record)]
    diffs += [f"run {rid} {d}" for d in model_diffs(client, run, record)]
    return diffs + claimant_diffs(client, run, finals)


def claimant_diffs(client: Any, run: Any, finals: dict[str, float]) -> list[str]:
    """Every other run of the experiment that claims this result (the same dvc.lock, by its
    ``dvc.lock.sha256`` tag) must report the same final metrics: a copied run with better
    figures, started earlier so that it is not the latest, sits beside the real one in the
    MLflow UI (issue 33). A run logged again from the same result agrees and passes."""
    sha = run.data.tags.get("dvc.lock.sha256")
    if not sha:
        return []
    others = [r for r in client.search_runs(
        [run.info.experiment_id], filter_string=f"tags.`dvc.lock.sha256` = '{sha}'",
        max_results=1000) if r.info.run_id != run.info.run_id]
    diffs = []
    for other in others:
        found = number_diffs("metric", (PIPELINE, RUN), finals,
                               {k: v for k, v in other.data.metrics.items() if k in finals})
        if found:
            diffs.append(f"run {other.info.run_id} ({other.info.run_name}) claims this result "
                         f"(dvc.lock sha256 {sha[:12]}) but differs: {found[0]}"
                         + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
    return diffs
