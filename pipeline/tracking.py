"""MLflow logging for pipeline results. Only pipeline/ imports mlflow; seqcore never does.

If the tracking store cannot be reached, the run's content is kept in a pending JSON file and
``python -m pipeline.tracking --replay`` logs it later: nothing is lost.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from seqcore import __version__
from seqcore.audit import upstream_lock_digest
from seqcore.config import Config, as_dict, flatten
from seqcore.hashing import digest, sha256_file
from seqcore.signature import SIGNATURE_FORMAT, derived_params

MAX_PARAMS_PER_BATCH = 100  # MLflow log_batch limits
MAX_METRICS_PER_BATCH = 1000
MAX_TAGS_PER_BATCH = 100
MAX_PARAM_CHARS = 6000  # MLflow param value limit
MAX_KEY_CHARS = 250  # MLflow param/metric/tag key limit
TRAIN_CURVES = (("train.loss", "loss"), ("train.lr", "lr"), ("train.grad_norm", "grad_norm"),
                ("train.ss_prob", "ss_prob"), ("dev.nll", "dev_nll"))


def tracking_uri(configured: str) -> str:
    """MLFLOW_TRACKING_URI wins over params.yaml, so a team server needs no code change.

    A relative sqlite path is made absolute: the record then names the same store wherever
    it is replayed from, and MLflow's per-URI store cache cannot mix up two repositories.
    """
    uri = os.environ.get("MLFLOW_TRACKING_URI") or configured
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not Path(uri[len(prefix):]).is_absolute():
        uri = prefix + str(Path.cwd() / uri[len(prefix):])
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


def contract_params(cfg: Config, tc: dict[str, Any], sig: str) -> dict[str, Any]:
    """Every parameter of the sequence contract, flattened with dotted names."""
    prepared = Path(cfg.paths.prepared) / "manifest.json"
    manifest = json.loads(prepared.read_text()) if prepared.exists() else {}
    data = {f"data.prepared.sha256.{k}": v for k, v in manifest.get("sha256", {}).items()}
    if "raw" in manifest:
        data["data.raw.sha256"] = manifest["raw"]["sha256"]
    return (flatten(as_dict(cfg)) | {f"tokenizer.contract.{k}": v for k, v in flatten(tc).items()}
            | data | derived_params(cfg) | {"contract.signature": sig})


def train_curve(train_log: Path) -> list[tuple[str, int, float]]:
    """(metric, step, value) rows of the training log, for MLflow step metrics."""
    with open(train_log, newline="") as f:
        return [(name, int(float(row["step"])), float(row[col]))
                for row in csv.DictReader(f) for name, col in TRAIN_CURVES
                if row.get(col) not in (None, "", "nan")]


def git_state() -> dict[str, str]:
    """The commit of the working tree and whether it had uncommitted changes."""
    def git(*args: str) -> str:
        res = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return res.stdout.strip()

    return {"git.commit": git("rev-parse", "HEAD") or "none",
            "git.dirty": str(bool(git("status", "--porcelain")))}


def _sha256_or_none(path: Path) -> str:
    return sha256_file(path) if path.exists() else "none"


def read_yaml12(path: Path) -> Any:
    """Parse YAML the way DVC does (ruamel, YAML 1.2: ``off`` is a string, ``1e-09`` a float),
    so dvc.lock digests and values agree between the evaluate stage and the audit."""
    from ruamel.yaml import YAML  # noqa: PLC0415

    return YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))


def run_tags(cfg: Config, sig: str, tc: dict[str, Any], header: dict[str, Any]) -> dict[str, str]:
    """Hashes that tie the run to its inputs (audit compares them with the files)."""
    lock = Path("dvc.lock")
    upstream = upstream_lock_digest(read_yaml12(lock)) if lock.exists() else "none"
    tags = {"contract.signature": sig, "contract.signature.format": str(SIGNATURE_FORMAT),
            "data.sha256": tc["data_sha256"],
            "tokenizer.contract.sha256": _sha256_or_none(Path(cfg.paths.tokenizer) /
                                                         "contract.json"),
            "dvc.lock.sha256": _sha256_or_none(lock), "dvc.lock.upstream.sha256": upstream,
            "model.sha256": header["model_sha256"], "seqcore.version": __version__,
            **git_state()}
    # Where the model was trained (device kind, processes, backend), from the model file's
    # contract through the predictions header (issue 16); absent in older headers.
    tags |= {f"trained_on.{k}": str(v) for k, v in header.get("trained_on", {}).items()}
    if os.environ.get("DVC_EXP_NAME"):
        tags["dvc.exp.name"] = os.environ["DVC_EXP_NAME"]
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


def build_record(cfg: Config, metrics: dict[str, Any], sig: str, header: dict[str, Any],
                 pred_path: Path) -> dict[str, Any]:
    """Everything one MLflow run holds, as plain JSON (so it can be kept and replayed)."""
    tc = json.loads((Path(cfg.paths.tokenizer) / "contract.json").read_text())
    numeric = {k: v for k, v in flatten(metrics).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    exp = os.environ.get("DVC_EXP_NAME")
    name = (f"{cfg.task}-{cfg.model.family}-{cfg.decode.strategy}-data{tc['data_sha256'][:8]}"
            f"-sig{digest(sig)[:8]}" + (f"-{exp}" if exp else ""))
    # Text values of metrics.json (metric signatures, the split) are not metrics: keep them
    # as tags so nothing of metrics.json is dropped.
    texts = {f"metrics.{k}": v for k, v in flatten(metrics).items() if isinstance(v, str)}
    return {"uri": tracking_uri(cfg.mlflow.tracking_uri), "experiment": cfg.mlflow.experiment,
            "run_name": name, "params": contract_params(cfg, tc, sig), "metrics": numeric,
            "steps": train_curve(Path(cfg.paths.train_log)),
            "tags": texts | run_tags(cfg, sig, tc, header), "texts": run_texts(cfg, pred_path)}


def log_run(record: dict[str, Any]) -> str:
    """Log one run from a record {uri, experiment, run_name, params, metrics, steps, tags,
    texts}; returns the run id."""
    import mlflow  # noqa: PLC0415 (slow import, only when logging)
    from mlflow.entities import Metric, Param, RunTag  # noqa: PLC0415

    client = mlflow.MlflowClient(tracking_uri=record["uri"])
    exp = client.get_experiment_by_name(record["experiment"])
    exp_id = exp.experiment_id if exp else client.create_experiment(record["experiment"])
    run = client.create_run(exp_id, run_name=record["run_name"])
    rid = run.info.run_id
    params = [Param(k, v) for k, v in param_items(record["params"])]
    for i in range(0, len(params), MAX_PARAMS_PER_BATCH):
        client.log_batch(rid, params=params[i : i + MAX_PARAMS_PER_BATCH])
    metrics = [Metric(k, float(v), 0, 0) for k, v in sorted(record["metrics"].items())]
    metrics += [Metric(k, float(v), 0, int(step)) for k, step, v in record["steps"]]
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
        client.log_batch(rid, metrics=metrics[i : i + MAX_METRICS_PER_BATCH])
    tags = [RunTag(k, str(v)) for k, v in sorted(record["tags"].items())]
    for i in range(0, len(tags), MAX_TAGS_PER_BATCH):
        client.log_batch(rid, tags=tags[i : i + MAX_TAGS_PER_BATCH])
    for name, text in sorted(record.get("texts", {}).items()):
        client.log_text(rid, text, name)
    client.set_terminated(rid)
    return rid


def log_or_keep(record: dict[str, Any], pending: Path) -> str | None:
    """Log the run; on any tracking failure keep the record in ``pending`` and warn once."""
    # MLflow's default (7 retries, exponential backoff) keeps an unreachable server busy for
    # minutes; the run is kept anyway, so fail sooner unless the user chose otherwise.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    try:
        rid = log_run(record)
    except Exception as err:  # noqa: BLE001 (any store failure must not fail the pipeline)
        kept = json.loads(pending.read_text()) if pending.exists() else []
        pending.parent.mkdir(parents=True, exist_ok=True)
        pending.write_text(json.dumps(kept + [record], indent=1, sort_keys=True) + "\n")
        print(f"WARNING: MLflow store {record['uri']} unreachable ({type(err).__name__}: {err}); "
              f"run kept in {pending}; log it later with `python -m pipeline.tracking --replay`",
              file=sys.stderr)
        return None
    print(f"[mlflow] run {rid} in {record['uri']} (experiment {record['experiment']})",
          file=sys.stderr)
    return rid


def main() -> None:
    parser = argparse.ArgumentParser(description="Replay runs kept while MLflow was unreachable")
    parser.add_argument("--replay", default="reports/mlflow_pending.json")
    args = parser.parse_args()
    pending = Path(args.replay)
    if not pending.exists():
        print("nothing pending")
        return
    left = []
    for record in json.loads(pending.read_text()):
        record["uri"] = tracking_uri(record["uri"])
        try:
            print(f"logged {log_run(record)}")
        except Exception as err:  # noqa: BLE001
            print(f"still unreachable: {err}", file=sys.stderr)
            left.append(record)
    if left:
        pending.write_text(json.dumps(left, indent=1, sort_keys=True) + "\n")
        sys.exit(1)
    pending.unlink()


if __name__ == "__main__":
    main()
