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
import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline import audit_rederive, audit_replay, audit_run
from pipeline.audit_verdict import code_line, stamp_versions
from pipeline.audit_mlflow import find_run, mlflow_diffs
from pipeline.audit_rebuild import rebuild_diffs
from pipeline.dvc_files import read_yaml12
from pipeline.dvc_lock import lock_hash_diffs
from pipeline.record import RunOrigin, build_record, tracking_uri
from seqcore.audit import (
    MISMATCH, OK, WARNING, AuditReport, json_diffs, lock_param_diffs, same_value_diffs,
    tokenizer_file_diffs, version_diffs)
from seqcore.artifacts.result_files import ResultFiles
from seqcore.artifacts.run_record import RunRecord
from seqcore.config import Config, as_dict, load_config
from seqcore.credentials import redact_text
from seqcore.determinism import device_kind
from seqcore.environment import environment_diffs as environment_differences
from seqcore.environment import producing_environment
from seqcore.hashing import sha256_file
from seqcore.tasks import get_task
from seqcore.training.checkpoint import ledger_files

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


def dvc_status() -> list[str]:
    """``dvc status`` (in-process): every stage DVC itself considers changed."""
    from dvc.repo import Repo  # noqa: PLC0415 (slow import)

    repo = Repo(".")
    try:
        status = repo.status()
    finally:
        repo.close()
    return [f"dvc status: {stage}: {json.dumps(changes, sort_keys=True)}"
            for stage, changes in sorted(status.items())]


def common_contract_checks(cfg: Config, files: ResultFiles) -> list[str]:
    """What every task's result records alike: the tokenizer files, the model file's hash
    in the predictions header, the raw data's hash and the decode settings."""
    tc, header = files.tokenizer_contract, files.header
    diffs = tokenizer_file_diffs(Path(cfg.paths.tokenizer), tc, sha256_file)
    model = Path(cfg.paths.model)
    diffs += same_value_diffs("model sha256", {
        str(model): sha256_file(model), "predictions header": header.model_sha256})
    raw = Path(cfg.paths.raw)
    diffs += same_value_diffs("data sha256", {
        "tokenizer contract": tc.data_sha256,
        str(raw): sha256_file(raw) if raw.exists() else "missing"}
        | ({"params data.sha256": cfg.data.sha256} if cfg.data.sha256 else {}))
    diffs += json_diffs("decode settings", ("params.yaml", "predictions header"),
                          as_dict(cfg.decode), header.decode)
    return diffs


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(report: AuditReport, name: str, check: Callable[[], list[str]]) -> None:
    """Add a check's differences; a check that cannot run (missing or broken input) is
    NOT RUN, which fails the audit. A check the report does not want (``--only``) is skipped."""
    if not report.wants(name):
        return
    start = time.perf_counter()
    try:
        report.add(name, check())
    except Exception as err:  # noqa: BLE001 (whatever stops a check, it did not run: say so)
        report.not_run(name, f"could not run: {type(err).__name__}: {err}")
    report.seconds[name] = time.perf_counter() - start
    # each check's line as it finishes (stderr), the whole report at the end (stdout)
    print(f"[audit] {report.status[name]:8s} {name} ({report.seconds[name]:.1f} s)",
          file=sys.stderr, flush=True)


def environment_diffs(run: Any) -> list[str]:
    """The producing environment the MLflow run records (tags ``env.*``) against the one
    this audit runs in. No DVC-tracked file records it (issue 34: the same inputs give the
    same bytes on any machine), so without a run there is nothing to compare."""
    if run is None:
        raise LookupError("no MLflow run: the producing environment is recorded only there")
    tags = {k[len("env."):]: v for k, v in run.data.tags.items() if k.startswith("env.")}
    return environment_differences(f"mlflow run {run.info.run_id} tags env.*", tags,
                                   producing_environment())


def _training_check(report: AuditReport, cfg: Config, files: ResultFiles) -> None:
    """The training record against the ledger's last state (it travels with the result), or
    the checkpoints, or (a result trained before the ledger, in a clone where the checkpoints
    never travel) against the model file, with a warning."""
    if not report.wants("training record"):
        return
    if ledger_files(Path(cfg.paths.ledger)):
        _run(report, "training record", lambda: audit_rederive.training_diffs(
            cfg, files.meta, Path(cfg.paths.ledger)))
        return
    try:
        folder = audit_rederive.checkpoint_folder(cfg)
    except Exception as err:  # noqa: BLE001 (as in _run)
        report.not_run("training record", f"could not run: {type(err).__name__}: {err}")
        return
    if folder.is_dir():
        _run(report, "training record", lambda: audit_rederive.training_diffs(cfg, files.meta,
                                                                              folder))
        return
    _run(report, "training record", lambda: audit_rederive.training_meta_diffs(cfg, files.meta))
    report.warn("checkpoints", [f"{folder} is not here (working state of the machine that "
                                "trained; never pushed): the training record was checked "
                                "against the model file only"])


def replay_check(report: AuditReport, cfg: Config, params: str, segments: int,
                 seed: int | None, run: Any) -> None:
    """Replay the state before the first step and ``segments`` segments of the training from
    its ledger (pipeline/audit_replay.py), on the CPU kernels the run records. A training of
    several processes or on a device this host lacks cannot be replayed here: a warning."""
    name = "training replay"
    if not report.wants(name) or segments <= 0:
        return
    world = cfg.train.nproc, device_kind(cfg.train.device)
    if world != (1, "cpu") and not (world[1] == "cuda" and _has_cuda()):
        report.warn(name, [f"a training of {world[0]} process(es) on {world[1]} is not "
                           "replayed by this audit (it replays one process, on CPU or one "
                           "GPU): --rebuild re-runs it whole"])
        return
    try:
        plan, found = audit_replay.plan(Path(cfg.paths.ledger), segments, seed)
    except Exception as err:  # noqa: BLE001 (as in _run)
        report.not_run(name, f"could not run: {type(err).__name__}: {err}")
        return
    line = plan.line(found)
    report.notes[name] = [line]
    print(f"[audit] {name}: {line}", file=sys.stderr, flush=True)
    tags = run.data.tags if run is not None else {}
    _run(report, name, lambda: audit_replay.run_replay(
        params, Path(cfg.paths.ledger), plan.chosen, tags.get("env.cpu_capability")))


def _has_cuda() -> bool:
    import torch  # noqa: PLC0415

    return torch.cuda.is_available()


def read_run(cfg: Config, run_id: str | None) -> tuple[Any, str | None]:
    """The MLflow run to compare, or why it cannot be read (the store's password masked)."""
    try:
        lock = read_yaml12(Path("dvc.lock")) if Path("dvc.lock").exists() else None
        return find_run(cfg, run_id, lock), None
    except Exception as err:  # noqa: BLE001 (any store failure is an audit finding)
        uri = tracking_uri(cfg.mlflow.tracking_uri)
        return None, redact_text(f"cannot read the MLflow run: {type(err).__name__}: {err}",
                                 (uri,))


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
    _run(report, "dvc.lock hashes and params", lambda: (
        lock_hash_diffs(Path("."), lock) + lock_param_diffs(lock, read_yaml12(Path(params)))
        if lock else ["dvc.lock missing"]))
    _run(report, "dvc status", dvc_status)
    # Inputs are read when a check needs them: one that is missing or broken makes exactly
    # the checks that need it NOT RUN.
    files = ResultFiles(cfg)
    task = get_task(cfg.task)
    _run(report, "contract",
         lambda: task.audit_contract(cfg, files) + common_contract_checks(cfg, files))
    _run(report, "counts", lambda: task.audit_counts(cfg, files))
    done: dict[str, Any] = {}
    for stage in audit_rederive.REDERIVED:
        _run(report, f"{stage} redone",
             lambda stage=stage: audit_rederive.rederive_diffs(cfg, lock, stage, done))
    _training_check(report, cfg, files)
    run, reason = None, None
    if use_mlflow and any(report.wants(n) for n in ("mlflow run", "environment",
                                                      "training replay")):
        run, reason = read_run(cfg, run_id)
    replay_check(report, cfg, params, replay, replay_seed, run)
    if use_mlflow and report.wants("mlflow run"):
        if reason:
            report.not_run("mlflow run", reason)
        else:
            report.run_id = run.info.run_id
            if "evaluate" not in done:  # the expected record needs the evaluation redone
                with contextlib.suppress(Exception):
                    audit_rederive.rederive_diffs(cfg, lock, "evaluate", done)
            _run(report, "mlflow run", lambda: mlflow_diffs(
                cfg, run, expected_record(cfg, done, run), lock))
    if report.wants("environment"):
        try:
            report.warn("environment", environment_diffs(run), strict_env)
        except Exception as err:  # noqa: BLE001 (as in _run)
            report.not_run("environment", f"could not run: {type(err).__name__}: {err}")
    _run(report, "package versions",
         lambda: version_diffs(Path("requirements.lock").read_text(), _installed))
    if rebuild:
        _run(report, "rebuild", lambda: rebuild_diffs(cfg, lock))
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
