"""Audit a pipeline result end to end: ``python -m pipeline.audit [--run-id ID] [--rebuild]``.

Each check prints ``ok``, ``MISMATCH`` (both sides named), ``NOT RUN`` (an input is missing
or unreadable; fails the audit) or ``WARNING`` (a different producing environment; fails
under ``--strict-env``). The default checks redo everything cheap: dvc.lock against the
workspace, ``dvc status``, the contract, counts, prepare / tokenizer / decode (whole split) /
evaluate redone in a temporary folder and compared file by file, the training record against
its checkpoints, the MLflow run compared whole, the environment and the package versions.
``--rebuild`` re-runs the whole pipeline in a temporary copy (see pipeline/audit_rebuild.py).
docs/audit.md lists the checks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from pipeline import audit_rederive, audit_run
from pipeline.audit_checks import (
    common_contract_checks,
    dvc_status,
    environment_diffs,
    installed,
    read_run,
    replay_check,
    run_check,
    training_check,
)
from pipeline.audit_mlflow import mlflow_diffs
from pipeline.audit_rebuild import rebuild_diffs
from pipeline.audit_verdict import code_line, stamp_versions
from pipeline.dvc_files import read_yaml12
from pipeline.dvc_lock import lock_hash_diffs
from pipeline.record import RunOrigin, build_record, tracking_uri
from pipeline.stage import cpu_kernels
from seqcore.artifacts.result_files import ResultFiles
from seqcore.artifacts.run_record import RunRecord
from seqcore.audit import (
    MISMATCH,
    OK,
    WARNING,
    AuditReport,
    lock_param_diffs,
    version_diffs,
)
from seqcore.config import Config, load_config
from seqcore.tasks import get_task

#: Every check of the default audit, in the order it runs (``--only`` picks from these).
CHECKS = ("dvc.lock hashes and params", "dvc status", "contract", "counts",
          *(f"{stage} redone" for stage in audit_rederive.REDERIVED), "training record",
          "training replay", "mlflow run", "environment", "package versions")
#: Segments of the training the default audit replays (``--replay K``; 0: none).
REPLAY_SEGMENTS = 3


def parse_only(value: str) -> tuple[str, ...]:
    """``--only``'s comma-separated check names, each one of CHECKS (ValueError otherwise)."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in CHECKS]
    if unknown or not names:
        raise ValueError(f"--only {value!r}: {', '.join(map(repr, unknown)) or 'no check named'}"
                         f" is not a check; choose from: {', '.join(CHECKS)}")
    return names


def audit(params: str = "params.yaml", run_id: str | None = None, use_mlflow: bool = True,
          strict_env: bool = False, rebuild: bool = False,
          only: tuple[str, ...] = (), replay: int = REPLAY_SEGMENTS,
          replay_seed: int | None = None) -> AuditReport:
    """Run every check (or those named in ``only``, from CHECKS) in the current directory (a
    repository with a pipeline result)."""
    cfg = load_config(params)
    # --rebuild is asked for by name, so it runs beside an --only list too
    report = AuditReport(only=(*only, "rebuild") if only and rebuild else only)
    lock = read_yaml12(Path("dvc.lock")) if Path("dvc.lock").exists() else {}
    run_check(report, "dvc.lock hashes and params", lambda: (
        lock_hash_diffs(Path("."), lock) + lock_param_diffs(lock, read_yaml12(Path(params)))
        if lock else ["dvc.lock missing"]))
    run_check(report, "dvc status", dvc_status)
    # Inputs are read when a check needs them: one that is missing or broken makes exactly
    # the checks that need it NOT RUN.
    files = ResultFiles(cfg)
    task = get_task(cfg.task)
    run_check(report, "contract",
              lambda: task.audit_contract(cfg, files) + common_contract_checks(cfg, files))
    run_check(report, "counts", lambda: task.audit_counts(cfg, files))
    done: dict[str, Any] = {}
    for stage in audit_rederive.REDERIVED:
        run_check(report, f"{stage} redone",
                  lambda stage=stage: audit_rederive.rederive_diffs(cfg, lock, stage, done))
    training_check(report, cfg, files)
    run, reason = None, None
    if use_mlflow and any(report.wants(n) for n in ("mlflow run", "environment",
                                                      "training replay")):
        run, reason = read_run(cfg, run_id)
    replay_check(report, cfg, params, replay, replay_seed, run, strict_env)
    if use_mlflow and report.wants("mlflow run"):
        if reason:
            report.not_run("mlflow run", reason)
        else:
            report.run_id = run.info.run_id
            if "evaluate" not in done:  # the expected record needs the evaluation redone
                with contextlib.suppress(Exception):
                    audit_rederive.rederive_diffs(cfg, lock, "evaluate", done)
            run_check(report, "mlflow run", lambda: mlflow_diffs(
                cfg, run, expected_record(cfg, done, run), lock))
    if report.wants("environment"):
        try:
            portable = cfg.train.cpu_kernels == cfg.decode.cpu_kernels == "portable"
            report.warn("environment", environment_diffs(run, portable), strict_env)
        except Exception as err:  # noqa: BLE001 (as in run_check)
            report.not_run("environment", f"could not run: {type(err).__name__}: {err}")
    run_check(report, "package versions",
              lambda: version_diffs(Path("requirements.lock").read_text(), installed))
    if rebuild:
        run_check(report, "rebuild", lambda: rebuild_diffs(cfg, lock))
        if report.checks["rebuild"] and report.status.get("environment") == WARNING:
            report.checks["rebuild"].append(
                "the environment differs from the recorded one (see 'environment'): another "
                "torch build or package set can change floating-point results")
    return report


def expected_record(cfg: Config, done: dict[str, Any], run: Any) -> RunRecord:
    """The MLflow record the evaluate stage would log now, from the evaluation redone, with
    the origin ``run`` records: its DVC experiment (``dvc.exp.name``: `dvc exp run` names it
    to the stage, the audit runs outside) and the commit its params were compared with for
    its name (``git.commit``; the audit's HEAD may be a later commit, e.g. the result's own:
    issue 30). Who audits, where and when is not part of the record."""
    if "evaluate" not in done:
        raise LookupError("needs the evaluation redone (see 'evaluate redone')")
    out = done["evaluate"]
    tags = run.data.tags
    commit = tags.get("git.commit", "none")
    origin = RunOrigin(tags.get("dvc.exp.name"), commit if commit != "none" else "HEAD")
    return build_record(cfg, out.metrics, out.signature, out.header, out.pred_path,
                        out.contract, origin)


def audited_profile(params: Path) -> str:
    """The CPU kernel profile of the result's decode and evaluate (``decode.cpu_kernels``);
    portable when the params cannot be read (the audit then reports why)."""
    try:
        return load_config(params).decode.cpu_kernels
    except Exception:  # noqa: BLE001 (a broken params file is the checks' finding)
        return "portable"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--run-id", default=None, help="MLflow run to compare with the result "
                        "here (default: the latest logged for this result)")
    parser.add_argument("--run", default=None, metavar="RUN_ID",
                        help="audit the result this MLflow run claims: its commit checked out "
                             "in a temporary worktree, its outputs from the DVC cache or "
                             "remote; the verdict is written to the run as audit.* tags")
    parser.add_argument("--no-mlflow", action="store_true", help="skip the MLflow check")
    parser.add_argument("--strict-env", action="store_true",
                        help="a different producing environment fails the audit")
    parser.add_argument("--rebuild", action="store_true",
                        help="also re-run the whole pipeline in a temporary copy")
    parser.add_argument("--root", default=".", help="repository with the result")
    parser.add_argument("--replay", type=int, default=REPLAY_SEGMENTS, metavar="K",
                        help="segments of the training to replay from its ledger, the last "
                             f"always among them (default {REPLAY_SEGMENTS}; 0: none)")
    parser.add_argument("--replay-seed", type=int, default=None, metavar="SEED",
                        help="which segments (default: a fresh seed, printed)")
    parser.add_argument("--only", default=None, metavar="CHECKS",
                        help="run only these checks (comma-separated names, as the report "
                             f"prints them: {', '.join(CHECKS)})")
    args = parser.parse_args()
    try:
        only = parse_only(args.only) if args.only is not None else ()
    except ValueError as err:
        parser.exit(2, f"audit: {err}\n")
    # the audit redoes decode and evaluate in this process: under the result's CPU kernels
    cpu_kernels(audited_profile(Path(args.root) / args.params), "cpu", "decode.cpu_kernels",
                "audit")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    start = time.perf_counter()
    if args.run:
        try:
            report = audit_run.audit_run_id(args, only)
        except audit_run.RunNotAuditable as err:
            parser.exit(2, f"audit: {err}\n")
        print(f"audit took {time.perf_counter() - start:.1f} s")
        sys.exit(0 if report.ok else 1)
    print(code_line(Path(__file__).resolve().parents[1], Path(args.root)), file=sys.stderr)
    with contextlib.chdir(args.root):
        report = audit(args.params, args.run_id, not args.no_mlflow, args.strict_env,
                       args.rebuild, only, args.replay, args.replay_seed)
        print(report.render())
        if report.run_id and report.status.get("mlflow run") in (OK, MISMATCH):
            try:
                stamped = stamp_versions(tracking_uri(load_config(args.params).mlflow
                                                      .tracking_uri), report)
            except Exception as err:  # noqa: BLE001 (the verdict stands without the stamp)
                stamped = f"not stamped ({type(err).__name__}: {err})"
            if stamped:
                print(f"audit status set on {stamped}")
    print(f"audit took {time.perf_counter() - start:.1f} s")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
