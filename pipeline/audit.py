"""Audit a pipeline result end to end: ``python -m pipeline.audit [--run-id ID]``.

Checks, each printed as ``ok`` or ``MISMATCH`` with what differs (exit status 1 on any):
dvc.lock hashes and params against the workspace, ``dvc status``, the contract signature and
hashes across tokenizer / model file / predictions header / metrics.json, the metrics
recomputed from the predictions, a sample re-decoded from the model, the MLflow run (by id,
or the latest of the experiment) and the installed package versions against requirements.lock.
The checks themselves live in seqcore.audit; this file gathers inputs (DVC, MLflow, files).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.tracking import contract_params, param_items, read_yaml12, tracking_uri
from seqcore import audit as A
from seqcore.config import Config, as_dict, config_from_dict, flatten, load_config
from seqcore.contract import SpecialIds
from seqcore.credentials import redact_text
from seqcore.data.examples import read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.metrics.recompute import recompute_metrics
from seqcore.hashing import sha256_file
from seqcore.signature import contract_signature, training_contract
from seqcore.tokenizer import Tokenizer
from seqcore.training.loop import set_determinism
from seqcore.training.model_file import load_model


def dvc_status() -> list[str]:
    """``dvc status --json``: every stage DVC itself considers changed."""
    exe = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    res = subprocess.run([exe, "status", "--json"], capture_output=True, text=True,
                         check=False)
    if res.returncode != 0:
        return [f"dvc status failed ({res.returncode}): {res.stderr.strip()[:300]}"]
    status = json.loads(res.stdout or "{}")
    return [f"dvc status: {stage}: {json.dumps(changes, sort_keys=True)[:300]}"
            for stage, changes in sorted(status.items())]


def recomputed_diffs(cfg: Config, pred_path: Path, metrics: dict[str, Any]) -> list[str]:
    """Every metrics.json value that follows from the predictions alone, recomputed."""
    again = flatten(recompute_metrics(pred_path, cfg))
    stored = flatten(metrics)
    nums = {k: v for k, v in again.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
    texts = {k: v for k, v in again.items() if isinstance(v, str)}
    where = str(cfg.paths.metrics)
    return A.number_diffs(where, nums, stored) + A.text_diffs(where, texts, stored)


def contract_checks(cfg: Config, tc: dict[str, Any], meta: dict[str, Any],
                    header: dict[str, Any], metrics: dict[str, Any]) -> list[str]:
    """The signature and the hashes agree in every place that stores them."""
    tok_dir, model = Path(cfg.paths.tokenizer), Path(cfg.paths.model)
    sigs = {"params + tokenizer contract (recomputed)": contract_signature(cfg, tc)}
    if "signature" in tc:
        sigs["tokenizer contract"] = tc["signature"]
    sigs |= {"model file meta": meta.get("signature"), "predictions header": header["signature"],
             "metrics.json": metrics.get("signature")}
    diffs = A.same_value_diffs("contract signature", sigs)
    diffs += A.tokenizer_file_diffs(tok_dir, tc, sha256_file)
    diffs += A.same_value_diffs("model sha256", {
        str(model): sha256_file(model), "predictions header": header["model_sha256"]})
    for side in ("src", "tgt"):
        diffs += A.same_value_diffs(f"tokenizer {side} sha256", {
            "tokenizer contract": tc[side]["sha256"],
            "predictions header": header["tokenizer_sha256"][side],
            "model meta": meta["training_contract"].get(f"tokenizer.{side}.sha256")})
    raw = Path(cfg.paths.raw)
    diffs += A.same_value_diffs("data sha256", {
        "tokenizer contract": tc["data_sha256"],
        str(raw): sha256_file(raw) if raw.exists() else "missing"}
        | ({"params data.sha256": cfg.data.sha256} if cfg.data.sha256 else {}))
    want = {k: json.dumps(v) for k, v in training_contract(cfg, tc).items()}
    have = {k: json.dumps(v) for k, v in meta["training_contract"].items()}
    diffs += A.text_diffs("model meta training contract vs params", want, have)
    diffs += A.text_diffs("predictions header decode settings vs params",
                          {k: json.dumps(v) for k, v in as_dict(cfg.decode).items()},
                          {k: json.dumps(v) for k, v in header["decode"].items()})
    return diffs


def redecode_checks(cfg: Config, tc: dict[str, Any], header: dict[str, Any],
                    pred_path: Path, sample: int) -> list[str]:
    """A sample decoded again from the model file gives byte-identical prediction lines."""
    decode = config_from_dict({"decode": header["decode"]}).decode
    model, _ = load_model(Path(cfg.paths.model))
    ids = SpecialIds(**tc["special_ids"])
    set_determinism(decode.seed, cfg.train.threads)
    examples = read_examples(Path(cfg.paths.encoded) / f"{decode.split}.jsonl")
    tgt_tok = Tokenizer(Path(cfg.paths.tokenizer) / tc["tgt"]["file"])
    got = A.redecode_lines(model, examples, make_decoder(decode, ids), ids, tgt_tok,
                           decode.batch_size, sample)
    lines = pred_path.read_text(encoding="utf-8").splitlines()[: len(got)]
    return A.line_diffs(str(pred_path), lines, got)


def find_run(cfg: Config, run_id: str | None) -> Any:
    """The MLflow run by id, or the latest run of the configured experiment."""
    import mlflow  # noqa: PLC0415 (slow import)

    client = mlflow.MlflowClient(tracking_uri=tracking_uri(cfg.mlflow.tracking_uri))
    if run_id:
        return client.get_run(run_id)
    exp = client.get_experiment_by_name(cfg.mlflow.experiment)
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"],
                              max_results=1) if exp else []
    if not runs:
        raise LookupError(f"no run in experiment {cfg.mlflow.experiment!r}")
    return runs[0]


def mlflow_checks(cfg: Config, tc: dict[str, Any], metrics: dict[str, Any],
                  lock: dict[str, Any], run_id: str | None) -> list[str]:
    """The MLflow run carries the same params, metrics and hashes as the files."""
    pending = Path(cfg.paths.mlflow_pending)
    diffs = [f"{pending} holds runs not yet logged: `python -m pipeline.tracking --replay`"
             ] if pending.exists() else []
    try:
        run = find_run(cfg, run_id)
    except Exception as err:  # noqa: BLE001 (any store failure is an audit finding)
        return diffs + [redact_text(f"cannot read the MLflow run: {type(err).__name__}: {err}",
                                    (tracking_uri(cfg.mlflow.tracking_uri),))]
    sig = contract_signature(cfg, tc)
    want = dict(param_items(contract_params(cfg, tc, sig)))
    got = run.data.params
    diffs += A.text_diffs(f"run {run.info.run_id} param", want, got)
    diffs += [f"run {run.info.run_id} param: {k} not in the current contract"
              for k in sorted(set(got) - set(want))]
    numeric = {k: v for k, v in flatten(metrics).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    diffs += A.number_diffs(f"run {run.info.run_id} metric", numeric, run.data.metrics)
    model, contract = Path(cfg.paths.model), Path(cfg.paths.tokenizer) / "contract.json"
    tags = {"contract.signature": sig, "data.sha256": tc["data_sha256"],
            "tokenizer.contract.sha256": sha256_file(contract),
            "model.sha256": sha256_file(model),
            "dvc.lock.upstream.sha256": A.upstream_lock_digest(lock)}
    return diffs + A.text_diffs(f"run {run.info.run_id} tag", tags, run.data.tags)


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(report: A.AuditReport, name: str, check: Callable[[], list[str]]) -> None:
    """Add a check's differences; a check that cannot run (missing or broken file) fails."""
    try:
        report.add(name, check())
    except (OSError, KeyError, ValueError, TypeError) as err:
        report.add(name, [f"could not run: {type(err).__name__}: {err}"])


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def audit(params: str = "params.yaml", run_id: str | None = None, sample: int = 32,
          use_mlflow: bool = True) -> A.AuditReport:
    """Run every check in the current directory (a repository with a pipeline result)."""
    cfg = load_config(params)
    report = A.AuditReport()
    lock = read_yaml12(Path("dvc.lock")) if Path("dvc.lock").exists() else {}
    _run(report, "dvc.lock hashes and params", lambda: (
        A.lock_hash_diffs(Path("."), lock) + A.lock_param_diffs(lock, read_yaml12(Path(params)))
        if lock else ["dvc.lock missing"]))
    _run(report, "dvc status", dvc_status)
    pred_path = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    try:
        tc = _json(Path(cfg.paths.tokenizer) / "contract.json")
        header = _json(pred_path.with_suffix(".header.json"))
        metrics = _json(Path(cfg.paths.metrics))
        meta = load_model(Path(cfg.paths.model))[1]
    except (OSError, ValueError) as err:  # missing file, bad JSON, model fails its sidecar
        report.add("inputs readable", [f"{type(err).__name__}: {err}"])
    else:
        _run(report, "contract", lambda: contract_checks(cfg, tc, meta, header, metrics))
        _run(report, "metrics recomputed from predictions",
             lambda: recomputed_diffs(cfg, pred_path, metrics))
        _run(report, "re-decoded sample",
             lambda: redecode_checks(cfg, tc, header, pred_path, sample))
        if use_mlflow:
            _run(report, "mlflow run", lambda: mlflow_checks(cfg, tc, metrics, lock, run_id))
    _run(report, "package versions",
         lambda: A.version_diffs(Path("requirements.lock").read_text(), _installed))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--run-id", default=None, help="MLflow run (default: the latest)")
    parser.add_argument("--sample", type=int, default=32, help="examples to re-decode")
    parser.add_argument("--no-mlflow", action="store_true", help="skip the MLflow check")
    parser.add_argument("--root", default=".", help="repository with the result")
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    with contextlib.chdir(args.root):
        report = audit(args.params, args.run_id, args.sample, not args.no_mlflow)
    print(report.render())
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
