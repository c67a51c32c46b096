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
import functools
import importlib
import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline import audit_rederive as R
from pipeline.audit_mlflow import find_run, mlflow_diffs
from pipeline.audit_rebuild import rebuild_diffs
from pipeline.dvc_lock import lock_hash_diffs
from pipeline.tracking import build_record, read_yaml12, tracking_uri
from seqcore import audit as A
from seqcore.artifacts.model_file import ModelFile, ModelMeta
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.reports import Metrics, Results
from seqcore.artifacts.run_record import RunRecord
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, as_dict, load_config
from seqcore.credentials import redact_text
from seqcore.environment import environment_diffs as environment_differences
from seqcore.environment import producing_environment
from seqcore.hashing import sha256_file
from seqcore.signature import contract_signature, training_contract
from seqcore.tasks import get_task

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


def contract_checks(cfg: Config, tc: TokenizerContract, meta: ModelMeta,
                    header: PredictionsHeader, results: Results) -> list[str]:
    """The signature and the hashes agree in every place that stores them."""
    own = task_audit(cfg)
    if own is not None:
        return own.contract_diffs(cfg, meta, results) + common_contract_checks(
            cfg, tc, meta, header)
    sigs = {"params + tokenizer contract (recomputed)": contract_signature(cfg, tc)}
    if tc.signature:
        sigs["tokenizer contract"] = tc.signature
    sigs |= {"model file meta": meta.signature, "predictions header": header.signature,
             "metrics.json": results.signature}
    diffs = A.same_value_diffs("contract signature", sigs)
    for side in ("src", "tgt"):
        diffs += A.same_value_diffs(f"tokenizer {side} sha256", {
            "tokenizer contract": tc.side(side).sha256,
            "predictions header": (header.tokenizer_sha256 or {}).get(side),
            "model meta": meta.tokenizer_sha256()[side]})
    want = {k: json.dumps(v) for k, v in training_contract(cfg, tc).items()}
    have = {k: json.dumps(v) for k, v in meta.training_contract.items()}
    diffs += A.text_diffs("training contract", ("params + tokenizer contract", "model file meta"),
                          want, have)
    return diffs + common_contract_checks(cfg, tc, meta, header)


def task_audit(cfg: Config) -> ModuleType | None:
    """The task's own audit checks (``<package>.audit``, e.g. seqcore/tasks/lm/audit.py), for
    a result that differs from a decoded pair task's; None for the pair tasks."""
    name = f"{get_task(cfg.task).package}.audit"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:
            raise
        return None


def common_contract_checks(cfg: Config, tc: TokenizerContract, meta: ModelMeta,
                           header: PredictionsHeader) -> list[str]:
    """What every task's result records alike: the tokenizer files, the model file's hash
    in the predictions header, the raw data's hash and the decode settings."""
    diffs = A.tokenizer_file_diffs(Path(cfg.paths.tokenizer), tc, sha256_file)
    model = Path(cfg.paths.model)
    diffs += A.same_value_diffs("model sha256", {
        str(model): sha256_file(model), "predictions header": header.model_sha256})
    raw = Path(cfg.paths.raw)
    diffs += A.same_value_diffs("data sha256", {
        "tokenizer contract": tc.data_sha256,
        str(raw): sha256_file(raw) if raw.exists() else "missing"}
        | ({"params data.sha256": cfg.data.sha256} if cfg.data.sha256 else {}))
    diffs += A.text_diffs("decode settings", ("params.yaml", "predictions header"),
                          {k: json.dumps(v) for k, v in as_dict(cfg.decode).items()},
                          {k: json.dumps(v) for k, v in header.decode.items()})
    return diffs


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(report: A.AuditReport, name: str, check: Callable[[], list[str]]) -> None:
    """Add a check's differences; a check that cannot run (missing or broken input) is
    NOT RUN, which fails the audit."""
    start = time.perf_counter()
    try:
        report.add(name, check())
    except Exception as err:  # noqa: BLE001 (whatever stops a check, it did not run: say so)
        report.not_run(name, f"could not run: {type(err).__name__}: {err}")
    report.seconds[name] = time.perf_counter() - start


def environment_diffs(meta: ModelMeta, header: PredictionsHeader, run: Any) -> list[str]:
    """The recorded producing environments against the one this audit runs in."""
    now = producing_environment()
    diffs = environment_differences("model file meta", meta.environment, now)
    diffs += environment_differences("predictions header", header.environment, now)
    if run is not None:
        tags = {k[len("env."):]: v for k, v in run.data.tags.items() if k.startswith("env.")}
        diffs += environment_differences(f"mlflow run {run.info.run_id} tags env.*", tags, now)
    return diffs


def _training_check(report: A.AuditReport, cfg: Config, meta: Callable[[], Any]) -> None:
    """The training record against the checkpoints, or (in a clone that pulled the result,
    where the checkpoints never travel) against the model file, with a warning."""
    try:
        folder = R.checkpoint_folder(cfg)
    except Exception as err:  # noqa: BLE001 (as in _run)
        report.not_run("training record", f"could not run: {type(err).__name__}: {err}")
        return
    if folder.is_dir():
        _run(report, "training record", lambda: R.training_diffs(cfg, meta()))
        return
    _run(report, "training record", lambda: R.training_meta_diffs(cfg, meta()))
    report.warn("checkpoints", [f"{folder} is not here (working state of the machine that "
                                "trained; never pushed): the training record was checked "
                                "against the model file only"])


def read_run(cfg: Config, run_id: str | None) -> tuple[Any, str | None]:
    """The MLflow run to compare, or why it cannot be read (the store's password masked)."""
    try:
        return find_run(cfg, run_id), None
    except Exception as err:  # noqa: BLE001 (any store failure is an audit finding)
        uri = tracking_uri(cfg.mlflow.tracking_uri)
        return None, redact_text(f"cannot read the MLflow run: {type(err).__name__}: {err}",
                                 (uri,))


def audit(params: str = "params.yaml", run_id: str | None = None, use_mlflow: bool = True,
          strict_env: bool = False, rebuild: bool = False) -> A.AuditReport:
    """Run every check in the current directory (a repository with a pipeline result)."""
    cfg = load_config(params)
    report = A.AuditReport()
    lock = read_yaml12(Path("dvc.lock")) if Path("dvc.lock").exists() else {}
    _run(report, "dvc.lock hashes and params", lambda: (
        lock_hash_diffs(Path("."), lock) + A.lock_param_diffs(lock, read_yaml12(Path(params)))
        if lock else ["dvc.lock missing"]))
    _run(report, "dvc status", dvc_status)
    pred_path = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    # Inputs are read when a check needs them: one that is missing or broken makes exactly
    # the checks that need it NOT RUN.
    tc = functools.cache(lambda: TokenizerContract.load(Path(cfg.paths.tokenizer) /
                                                        "contract.json"))
    header = functools.cache(lambda: PredictionsHeader.load(pred_path))
    # numbers in metrics.json, text results (signatures, hashes) in results.json
    metrics = functools.cache(lambda: Metrics.load(cfg.paths.metrics))
    results = functools.cache(lambda: Results.load(cfg.paths.results))
    meta = functools.cache(lambda: ModelFile.load(cfg.paths.model).meta)
    _run(report, "contract", lambda: contract_checks(cfg, tc(), meta(), header(), results()))
    own = task_audit(cfg)
    _run(report, "counts", lambda: own.count_diffs(cfg, header()) if own is not None
         else R.count_diffs(cfg, header(), metrics()))
    done: dict[str, Any] = {}
    for stage in R.REDERIVED:
        _run(report, f"{stage} redone",
             lambda stage=stage: R.rederive_diffs(cfg, lock, stage, done))
    _training_check(report, cfg, meta)
    run = None
    if use_mlflow:
        run, reason = read_run(cfg, run_id)
        if reason:
            report.not_run("mlflow run", reason)
        else:
            _run(report, "mlflow run", lambda: mlflow_diffs(
                cfg, run, expected_record(cfg, done, run.data.tags.get("dvc.exp.name")), lock))
    try:
        report.warn("environment", environment_diffs(meta(), header(), run), strict_env)
    except Exception as err:  # noqa: BLE001 (as in _run)
        report.not_run("environment", f"could not run: {type(err).__name__}: {err}")
    _run(report, "package versions",
         lambda: A.version_diffs(Path("requirements.lock").read_text(), _installed))
    if rebuild:
        _run(report, "rebuild", lambda: rebuild_diffs(cfg, lock))
        if report.checks["rebuild"] and report.status.get("environment") == A.WARNING:
            report.checks["rebuild"].append(
                "the environment differs from the recorded one (see 'environment'): the "
                "model file and predictions header record it, so their bytes differ")
    return report


def expected_record(cfg: Config, done: dict[str, Any], exp_name: str | None) -> RunRecord:
    """The MLflow record the evaluate stage would log now, from the evaluation redone.

    ``exp_name``: the run's ``dvc.exp.name`` tag. Under ``dvc exp run`` DVC names the
    experiment in DVC_EXP_NAME, which the run name and note lead with; the audit runs outside
    it, so it takes the name from the run (the tag itself is compared like any other).
    """
    if "evaluate" not in done:
        raise LookupError("needs the evaluation redone (see 'evaluate redone')")
    out = done["evaluate"]
    saved = os.environ.pop("DVC_EXP_NAME", None)
    if exp_name:
        os.environ["DVC_EXP_NAME"] = exp_name
    try:
        return build_record(cfg, out.metrics, out.signature, out.header, out.pred_path,
                            out.contract)
    finally:
        os.environ.pop("DVC_EXP_NAME", None)
        if saved is not None:
            os.environ["DVC_EXP_NAME"] = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--run-id", default=None, help="MLflow run (default: the latest)")
    parser.add_argument("--no-mlflow", action="store_true", help="skip the MLflow check")
    parser.add_argument("--strict-env", action="store_true",
                        help="a different producing environment fails the audit")
    parser.add_argument("--rebuild", action="store_true",
                        help="also re-run the whole pipeline in a temporary copy")
    parser.add_argument("--root", default=".", help="repository with the result")
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    start = time.perf_counter()
    with contextlib.chdir(args.root):
        report = audit(args.params, args.run_id, not args.no_mlflow, args.strict_env,
                       args.rebuild)
    print(report.render())
    print(f"audit took {time.perf_counter() - start:.1f} s")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
