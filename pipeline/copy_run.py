"""Copy an existing result's MLflow run to another tracking store (issue 30):
``python -m pipeline.copy_run --to URI [--from URI] [--run-id ID]``.

With a result already in the workspace, ``dvc repro`` has nothing to run, so setting
``MLFLOW_TRACKING_URI`` to the team server sends nothing there. This command does: it redoes
the evaluation (as the audit does), rebuilds the run the evaluate stage logged, checks it
against the run in the source store with the audit's own comparison, and logs that record
to the target, with the source run's origin (commit, experiment, producing environment,
user). A result that is not the run's (another commit's files, an edited run) is refused
with the first difference: nothing is copied. The audit accepts the copy as it accepts the
original.

The source store is ``--from``, else ``mlflow.tracking_uri`` of ``params.yaml`` (where
``dvc repro`` logged without a team server); the target is ``--to``, else
``MLFLOW_TRACKING_URI``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.audit import rederive
from pipeline.audit.core import expected_record
from pipeline.audit.lock import lock_hash_diffs
from pipeline.audit.mlflow_run import COMPARE_FOLDER, COMPARE_TAG, find_run, mlflow_diffs
from pipeline.deadline import STORE_HTTP_ENV
from pipeline.dvc_files import read_yaml12
from pipeline.record import resolve_uri
from pipeline.timing import TIME_PREFIX
from pipeline.tracking import log_run
from pipeline.stage import cpu_kernels, load_params
from seqcore.artifacts.run_record import RunRecord
from seqcore.config import Config, ConfigError
from seqcore.credentials import redact_text, redact_uri
from seqcore.errors import OneLineError

#: Source-run tags the copy keeps as they are: where, when and by whom the run was made
#: (the audit checks that these are true of the repository, or leaves them free).
ORIGIN_TAGS = ("git.", "env.", "dvc.exp.name", "dvc.lock.sha256", "mlflow.user",
               "mlflow.source.git.commit", COMPARE_TAG)


class CopyError(RuntimeError):
    """Why a run cannot be copied (one line for the user)."""


def source_artifacts(run_id: str, uri: str) -> dict[str, str]:
    """The run's dvc.lock (the lock evaluate saw) and attached comparisons, as text."""
    import mlflow  # noqa: PLC0415 (slow import)

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    with tempfile.TemporaryDirectory(prefix="copy-run-") as tmp:
        root = Path(mlflow.artifacts.download_artifacts(run_id=run_id, dst_path=tmp,
                                                        tracking_uri=uri))
        return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
                for p in sorted(root.rglob("*")) if p.is_file()
                and (p.name == "dvc.lock" and p.parent == root
                     or p.relative_to(root).as_posix().startswith(COMPARE_FOLDER))}


def copied_record(record: RunRecord, run: Any, artifacts: dict[str, str]) -> RunRecord:
    """``record`` (rebuilt and checked equal to ``run``) with the run's origin tags, its
    own dvc.lock and comparison artifacts, and its timing (the copy keeps its Duration)."""
    tags = {k: v for k, v in record.tags.items() if not k.startswith(ORIGIN_TAGS)}
    tags |= {k: v for k, v in run.data.tags.items() if k.startswith(ORIGIN_TAGS)}
    timing = {k: v for k, v in run.data.metrics.items() if k.startswith(TIME_PREFIX)}
    return replace(record, tags=tags, texts=record.texts | artifacts, timing=timing or None)


def rebuild(cfg: Config, run_id: str | None, source: str) -> tuple[Any, RunRecord]:
    """The source run and the record it must equal, or CopyError with the first reason."""
    lock = read_yaml12(Path("dvc.lock")) if Path("dvc.lock").exists() else {}
    if not lock:
        raise CopyError("no dvc.lock here: run this in the repository that holds the result")
    if not isinstance(lock, dict) or "evaluate" not in (lock.get("stages") or {}):
        raise CopyError("dvc.lock: no evaluate stage (cut off or edited?); restore it (git "
                        "checkout dvc.lock) in the repository that holds the result")
    try:
        run = find_run(source, cfg, run_id)
    except Exception as err:  # noqa: BLE001 (any store failure, in one line)
        raise CopyError(redact_text(f"cannot read the run from {redact_uri(source)}: "
                                    f"{type(err).__name__}: {err}", (source,))) from None
    diffs = lock_hash_diffs(Path("."), lock)  # the files the record and lineage are built from
    if diffs:
        raise CopyError(f"the workspace's files are not the locked result ({len(diffs)} "
                        f"difference(s); first: {diffs[0]}): `dvc checkout` restores them")
    print(f"[copy_run] run {run.info.run_id} ({run.info.run_name}) in "
          f"{redact_uri(source)}; redoing the evaluation to check it", file=sys.stderr)
    done: dict[str, Any] = {}
    diffs = rederive.rederive_diffs(cfg, lock, "evaluate", done)
    if diffs:
        raise CopyError(f"the workspace's result is not consistent ({len(diffs)} "
                        f"difference(s); first: {diffs[0]}): run `python -m "
                        "pipeline.audit`")
    record = expected_record(cfg, done, run)
    diffs = mlflow_diffs(source, cfg, run, record, lock)
    if diffs:
        raise CopyError(f"run {run.info.run_id} is not the workspace's result ({len(diffs)} "
                        f"difference(s); first: {diffs[0]}); check out the run's commit "
                        "and `dvc pull`, or name another run with --run-id")
    return run, record


def copy_run(cfg: Config, source: str, target: str, run_id: str | None = None) -> str:
    """Copy the run (``run_id``, else the experiment's latest) from ``source`` to
    ``target``; returns the new run's id."""
    if source == target:
        raise CopyError(f"the source and target store are the same ({redact_uri(source)}): "
                        "set --to (or MLFLOW_TRACKING_URI) to the other store")
    run, record = rebuild(cfg, run_id, source)
    record = copied_record(record, run, source_artifacts(run.info.run_id, source))
    return log_run(replace(record, uri=target))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--to", default=None, metavar="URI",
                        help="the target store (default: MLFLOW_TRACKING_URI)")
    parser.add_argument("--from", dest="source", default=None, metavar="URI",
                        help="the source store (default: mlflow.tracking_uri of --params)")
    parser.add_argument("--run-id", default=None, help="the run (default: the latest)")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    try:
        cfg = load_params(args.params)
    except ConfigError as err:
        parser.exit(2, f"{err}\n")
    # the copy redoes the evaluation in this process, as the audit does: under the result's
    # CPU kernels, or a portable result differs in its last bits here and is refused
    cpu_kernels(cfg.decode.cpu_kernels, "cpu", "decode.cpu_kernels", "copy_run")
    target = args.to or os.environ.get("MLFLOW_TRACKING_URI")
    if not target:
        parser.exit(2, "copy_run: name the target store: --to URI or MLFLOW_TRACKING_URI\n")
    source, target = resolve_uri(args.source or cfg.mlflow.tracking_uri), resolve_uri(target)
    for name, value in STORE_HTTP_ENV.items():
        os.environ.setdefault(name, value)
    try:
        rid = copy_run(cfg, source, target, args.run_id)
    except (CopyError, OneLineError) as err:
        print(f"copy_run: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except FileNotFoundError as err:  # a file of the result: one line, as the stages say it
        print(f"copy_run: {err.filename}: missing; restore the result (dvc checkout, or dvc "
              "pull) first", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"copied to {redact_uri(target)} as run {rid}")


if __name__ == "__main__":
    main()
