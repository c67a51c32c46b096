"""The evaluate stage for ``task: lm``: dev and test perplexity of the saved model with
carried state and with a reset every segment (its decode branch is in pipeline/decode.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.tracking import log_or_keep, new_record
from seqcore.artifacts.reports import Headline, Metrics, Results
from seqcore.config import Config, as_dict, flatten
from seqcore.hashing import sha256_file
from seqcore.metrics.nulls import null_undefined
from seqcore.training.setups import evaluate_lm, lm_documents


def evaluate_lm_stage(cfg: Config) -> None:
    """metrics.json, report.md, an empty bucket table, and one MLflow run."""
    result = evaluate_lm(cfg, lm_documents(cfg), Path(cfg.paths.model))
    print(f"[evaluate] contract: {result['signature']}", file=sys.stderr)
    metrics = null_undefined(result["lm"])
    Metrics(metrics).save(cfg.paths.metrics)
    Results({"task": "lm", "signature": result["signature"]}).save(cfg.paths.results)
    Headline(metrics["test_ppl_carried"], error_rates=False).save(cfg.paths.headline)
    Path(cfg.paths.buckets).write_text("bucket,count\n")
    Path(cfg.evaluate.details_dir).mkdir(parents=True, exist_ok=True)
    lines = ["# Language-model report", "", f"Contract: `{result['signature']}`", "",
             "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(result["lm"].items())]
    lines += ["", "Perplexity per character (plus one end-of-document token per document, "
              "the `_tokens` denominators), with the RNN state carried across segments and "
              "with the state reset at every segment of `train.bptt_len` characters.", ""]
    Path(cfg.paths.report).write_text("\n".join(lines), encoding="utf-8")
    record = new_record(
        cfg, f"lm-{cfg.model.family}-bptt{cfg.train.bptt_len}", dict(flatten(as_dict(cfg))),
        {k: v for k, v in metrics.items() if k in result["lm"]
         and isinstance(v, (int, float)) and not isinstance(v, bool)},
        {"contract.signature": result["signature"], "task": "lm",
         "model.sha256": sha256_file(Path(cfg.paths.model))},
        {"params.yaml": Path("params.yaml").read_text(),
         "reports/metrics.json": Path(cfg.paths.metrics).read_text(),
         "reports/results.json": Path(cfg.paths.results).read_text()})
    log_or_keep(record, Path(cfg.paths.mlflow_pending))
