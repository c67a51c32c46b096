"""Audit a pipeline result end to end: ``python -m pipeline.audit [--run-id ID] [--rebuild]``.

Each check prints ``ok``, ``MISMATCH`` (both sides named), ``NOT RUN`` (an input is missing
or unreadable; fails the audit) or ``WARNING`` (a different producing environment; fails
under ``--strict-env``). The default checks redo everything cheap: dvc.lock against the
workspace, ``dvc status``, the contract, counts, prepare / tokenizer / decode (whole split) /
evaluate redone in a temporary folder and compared file by file, the training record against
its checkpoints, the MLflow run compared whole, the environment and the package versions.
``--rebuild`` re-runs the whole pipeline in a temporary copy (see pipeline/audit/rebuild.py).
docs/audit.md lists the checks.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from pipeline.audit import rederive
from pipeline.audit.checks import (
    common_contract_checks,
    dvc_status,
    environment_diffs,
    installed,
    read_run,
    replay_check,
    run_check,
    training_check,
)
from pipeline.audit.mlflow_run import mlflow_diffs
from pipeline.audit.options import AuditOptions
from pipeline.audit.rebuild import rebuild_diffs
from pipeline.audit.lock import lock_hash_diffs
from pipeline.dvc_files import read_yaml12
from pipeline.record import RunOrigin, build_record
from pipeline.stage import load_params
from seqcore.artifacts.result_files import ResultFiles
from seqcore.artifacts.run_record import RunRecord
from seqcore.audit import WARNING, AuditReport, lock_param_diffs, version_diffs
from seqcore.config import Config
from seqcore.tasks import get_task

#: Every check of the default audit, in the order it runs (``--only`` picks from these).
CHECKS = ("dvc.lock hashes and params", "dvc status", "contract", "counts",
          *(f"{stage} redone" for stage in rederive.REDERIVED), "training record",
          "training replay", "mlflow run", "environment", "package versions")


def parse_only(value: str) -> tuple[str, ...]:
    """``--only``'s comma-separated check names, each one of CHECKS (ValueError otherwise)."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in CHECKS]
    if unknown or not names:
        raise ValueError(f"--only {value!r}: {', '.join(map(repr, unknown)) or 'no check named'}"
                         f" is not a check; choose from: {', '.join(CHECKS)}")
    return names


def audit(opts: AuditOptions) -> AuditReport:
    """Run every check (or those named in ``opts.only``, from CHECKS) in the current
    directory (a repository with a pipeline result)."""
    params, run_id, use_mlflow, strict_env = opts.params, opts.run_id, opts.use_mlflow, \
        opts.strict_env
    only, rebuild = opts.only, opts.rebuild
    cfg = load_params(params)
    uri = opts.store(cfg)
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
    for stage in rederive.REDERIVED:
        run_check(report, f"{stage} redone",
                  lambda stage=stage: rederive.rederive_diffs(cfg, lock, stage, done))
    training_check(report, cfg, files)
    run, reason = None, None
    if use_mlflow and any(report.wants(n) for n in ("mlflow run", "environment",
                                                      "training replay")):
        run, reason = read_run(uri, cfg, run_id)
    replay_check(report, cfg, params, opts.replay, opts.replay_seed, run, strict_env)
    if use_mlflow and report.wants("mlflow run"):
        if reason:
            report.not_run("mlflow run", reason)
        else:
            report.run_id = run.info.run_id
            if "evaluate" not in done:  # the expected record needs the evaluation redone
                with contextlib.suppress(Exception):
                    rederive.rederive_diffs(cfg, lock, "evaluate", done)
            run_check(report, "mlflow run", lambda: mlflow_diffs(
                uri, cfg, run, expected_record(cfg, done, run), lock))
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
        return load_params(params).decode.cpu_kernels
    except Exception:  # noqa: BLE001 (a broken params file is the checks' finding)
        return "portable"
