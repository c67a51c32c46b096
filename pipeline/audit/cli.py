"""``python -m pipeline.audit``: the command line of the audit (pipeline/audit/core.py runs
the checks; ``--run RUN_ID`` first checks out the result a run claims: pipeline/audit/run.py).
docs/audit.md lists the checks and options."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from pipeline.audit.core import CHECKS, audit, audited_profile, parse_only
from pipeline.audit.options import REPLAY_SEGMENTS, AuditOptions
from pipeline.audit.run import RunNotAuditable, audit_run_id
from pipeline.audit.verdict import code_line, stamp_versions
from pipeline.stage import cpu_kernels, load_params
from seqcore.audit import MISMATCH, OK, AuditReport
from seqcore.config import ConfigError
from seqcore.errors import OneLineError

#: What ``--help`` says the command does.
DESCRIPTION = ("Audit a pipeline result end to end: every check redone from the locked "
               "inputs (docs/audit.md)")

def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.audit", description=DESCRIPTION)
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
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # a down store: fail fast
    opts = AuditOptions(args.params, args.run_id, not args.no_mlflow, args.strict_env,
                        args.rebuild, only, args.replay, args.replay_seed)
    sys.exit(run(opts, args.run, Path(args.root)))


def run(opts: AuditOptions, run_id: str | None, root: Path) -> int:
    """The audit of the result at ``root`` (or of the one run ``run_id`` claims): prints the
    report, returns the exit status. A params file or dvc.lock the audit cannot read at all
    stops it in one line with status 2 (issue 54); a broken file a check needs fails that
    check."""
    start = time.perf_counter()
    try:
        if run_id:  # a mode of the same audit: the result a run claims, checked out first
            report = audit_run_id(opts, run_id, root)
        else:
            print(code_line(Path(__file__).resolve().parents[2], root), file=sys.stderr)
            with contextlib.chdir(root):
                report = audit(opts)
                print(report.render())
                stamp(opts, report)
    except (RunNotAuditable, ConfigError, OneLineError) as err:
        print(f"audit: {err}", file=sys.stderr)
        return 2
    print(f"audit took {time.perf_counter() - start:.1f} s")
    return 0 if report.ok else 1


def stamp(opts: AuditOptions, report: AuditReport) -> None:
    """The verdict on the registered model versions of the audited run (when it was found)."""
    if report.run_id and report.status.get("mlflow run") in (OK, MISMATCH):
        try:
            stamped = stamp_versions(opts.store(load_params(opts.params)), report)
        except Exception as err:  # noqa: BLE001 (the verdict stands without the stamp)
            stamped = f"not stamped ({type(err).__name__}: {err})"
        if stamped:
            print(f"audit status set on {stamped}")
