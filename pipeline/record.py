"""The record of one MLflow run: everything the evaluate stage logs, built from its arguments,
the files and the checkout (pipeline/tracking.py logs it, or keeps it for a replay; the audit
builds it again and compares). seqcore never imports mlflow, and neither does this module."""

from __future__ import annotations

import base64
import getpass
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.dvc_files import read_yaml12, upstream_lock_digest
from pipeline.git_state import git_state
from pipeline.registry import model_entry
from pipeline.run_naming import changed_params, param_text, run_name, run_note
from seqcore import __version__
from seqcore.artifacts.lineage import dataset_inputs
from seqcore.artifacts.manifests import PreparedManifest, manifest_path
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.run_record import RunRecord
from seqcore.artifacts.train_log import TrainLog
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, experiment_name, flatten
from seqcore.environment import producing_environment
from seqcore.hashing import digest, sha256_file
from seqcore.signature import SIGNATURE_FORMAT, result_params
from seqcore.tasks import get_task


MAX_PARAM_CHARS = 6000  # MLflow param value limit


MAX_KEY_CHARS = 250  # MLflow param/metric/tag key limit


#: MLflow step metric <- training log column. The UI groups a run's charts into sections by
#: the prefix before "/" (sorted by name, the unprefixed final figures last): the dev decoding
#: (issue 52: dev-sample WER, PER, exact match), then the loss and dev NLL curves, then the
#: optimiser's, then the time/ figures (pipeline/timing.py).
TRAIN_CURVES = (("dev/wer", "dev_wer"), ("dev/per", "dev_per"),
                ("dev/exact_match_multi_ref", "dev_exact_multi_ref"),
                ("loss/train", "loss"), ("loss/dev_nll", "dev_nll"), ("optim/lr", "lr"),
                ("optim/grad_norm", "grad_norm"), ("optim/ss_prob", "ss_prob"))


def tracking_uri(configured: str) -> str:
    """MLFLOW_TRACKING_URI wins over params.yaml, so a team server needs no code change; the
    store named either way as :func:`resolve_uri` makes it."""
    return resolve_uri(os.environ.get("MLFLOW_TRACKING_URI") or configured)


def resolve_uri(uri: str) -> str:
    """``uri`` as a run names its store: a relative sqlite path made absolute, so the record
    names the same store wherever it is replayed from, and MLflow's per-URI store cache cannot
    mix up two repositories."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not Path(uri[len(prefix):]).is_absolute():
        # DVC_ROOT is the user's repository, also inside a `dvc exp run --temp` or queued
        # run (whose working directory is a temporary copy, deleted afterwards).
        root = Path(os.environ.get("DVC_ROOT") or Path.cwd())
        uri = prefix + str(root / uri[len(prefix):])
    return uri


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


def _sha256_or_none(path: Path) -> str:
    return sha256_file(path) if path.exists() else "none"


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
            "tokenizer.contract.sha256": _sha256_or_none(cfg.paths.tokenizer_contract),
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
             "contract/tokenizer_contract.json": cfg.paths.tokenizer_contract,
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
        name, flatten(metrics), changed,
        report.read_text(encoding="utf-8") if report.exists() else "")
    artifacts = run_texts(cfg, pred_path) | {
        COUNTS_ARTIFACT: json.dumps(counts, indent=1, sort_keys=True) + "\n"}
    return new_record(cfg, name, contract_params(cfg, tc, sig), numeric, tags, artifacts,
                      run_images(Path(cfg.evaluate.details_dir)),
                      model_entry(cfg, header, pred_path, tc, tags))
