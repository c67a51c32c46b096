"""The decode and evaluate stages for ``task: lm`` (a language model has no source to decode).

decode writes an empty predictions file with a header saying so; evaluate recomputes dev and
test perplexity of the saved model with carried state and with a reset every segment.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.stage import write_json
from pipeline.tracking import log_or_keep, train_curve, tracking_uri
from seqcore.config import Config, as_dict, flatten
from seqcore.hashing import sha256_file
from seqcore.training.setups import evaluate_lm, lm_documents


def decode_lm(cfg: Config, out: Path) -> None:
    """Write the (empty) predictions and a header naming the model and the reason."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("")
    write_json(out.with_suffix(".header.json"), {
        "task": "lm", "decode": as_dict(cfg.decode), "rows": 0,
        "model_sha256": sha256_file(Path(cfg.paths.model)),
        "note": "task lm: nothing to decode; evaluate reports perplexity"})
    print("[decode] task lm: nothing to decode", file=sys.stderr)


def evaluate_lm_stage(cfg: Config) -> None:
    """metrics.json, report.md, an empty bucket table, and one MLflow run."""
    result = evaluate_lm(cfg, lm_documents(cfg), Path(cfg.paths.model))
    print(f"[evaluate] contract: {result['signature']}", file=sys.stderr)
    write_json(cfg.paths.metrics, result["lm"])
    write_json(cfg.paths.results, {"task": "lm", "signature": result["signature"]})
    write_json(cfg.paths.headline, {"ppl": result["lm"]["test_ppl_carried"]})
    Path(cfg.paths.buckets).write_text("bucket,count\n")
    Path(cfg.evaluate.details_dir).mkdir(parents=True, exist_ok=True)
    lines = ["# Language-model report", "", f"Contract: `{result['signature']}`", "",
             "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(result["lm"].items())]
    lines += ["", "Perplexity per character (plus one end-of-document token per document, "
              "the `_tokens` denominators), with the RNN state carried across segments and "
              "with the state reset at every segment of `train.bptt_len` characters.", ""]
    Path(cfg.paths.report).write_text("\n".join(lines), encoding="utf-8")
    record = {"uri": tracking_uri(cfg.mlflow.tracking_uri), "experiment": cfg.mlflow.experiment,
              "run_name": f"lm-{cfg.model.family}-bptt{cfg.train.bptt_len}",
              "params": {k: v for k, v in flatten(as_dict(cfg)).items()},
              "metrics": {k: v for k, v in result["lm"].items() if isinstance(v, (int, float))},
              "steps": train_curve(Path(cfg.paths.train_log)),
              "tags": {"contract.signature": result["signature"], "task": "lm",
                       "model.sha256": sha256_file(Path(cfg.paths.model))},
              "texts": {"params.yaml": Path("params.yaml").read_text(),
                        "reports/metrics.json": Path(cfg.paths.metrics).read_text(),
                        "reports/results.json": Path(cfg.paths.results).read_text()}}
    log_or_keep(record, Path(cfg.paths.mlflow_pending))
