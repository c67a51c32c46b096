"""Stage evaluate: metrics, buckets, failure modes and report; log one MLflow run."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from pipeline.stage import load, read_json, signature, tokenizer_contract, write_json
from pipeline.tracking import build_record, log_or_keep
from seqcore.config import Config, as_dict
from seqcore.contract import SpecialIds
from seqcore.data.examples import read_examples
from seqcore.decoding.predictions import read_predictions
from seqcore.g2p import is_illegal_phoneme
from seqcore.metrics.evaluation import FailureRules, evaluate_predictions
from seqcore.metrics.report import render_report
from seqcore.metrics.scores import perplexity
from seqcore.training.loop import teacher_forced_nll, set_determinism
from seqcore.training.model_file import load_model


def teacher_forced(cfg: Config, ids: SpecialIds) -> dict[str, float]:
    """Token NLL/perplexity on dev and test, with the denominator written next to them."""
    model, _ = load_model(Path(cfg.paths.model))
    out: dict[str, float] = {}
    for split in ("dev", "test"):
        examples = read_examples(Path(cfg.paths.encoded) / f"{split}.jsonl")
        total, tokens = teacher_forced_nll(model, examples, ids, cfg.decode.batch_size)
        out[f"{split}_token_nll"] = total / max(tokens, 1)
        out[f"{split}_perplexity"] = perplexity(total, tokens)
        out[f"{split}_ppl_denominator_tokens"] = tokens
    return out


def main() -> None:
    cfg = load(__doc__)
    split = cfg.decode.split
    pred_path = Path(cfg.paths.predictions) / f"{split}.jsonl"
    header = read_json(pred_path.with_suffix(".header.json"))
    sig = signature(cfg, "evaluate", header["signature"], str(pred_path))
    tc = tokenizer_contract(cfg)
    set_determinism(cfg.train.seed, cfg.train.threads)
    ev = cfg.evaluate
    result = evaluate_predictions(
        read_predictions(pred_path), ev.bucket_edges,
        FailureRules(ev.repeat_ngram, ev.repeat_times, ev.examples_per_failure),
        is_illegal_phoneme if cfg.task == "g2p" else None)
    tf = teacher_forced(cfg, SpecialIds(**tc["special_ids"]))
    metrics = {"split": split, "signature": sig, "tokenizer_tgt": f"{tc['tgt']['sha256'][:12]}",
               **tf, **result.headline,
               "failures": {k: {"count": v["count"], "rate": v["rate"]}
                            for k, v in result.failures.items() if "count" in v},
               "length_ratio": result.failures["length_ratio"]}
    write_json(cfg.paths.metrics, metrics)
    with open(cfg.paths.buckets, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(result.buckets[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(result.buckets)
    Path(cfg.paths.report).write_text(render_report(metrics, result, as_dict(cfg.decode), sig))

    record = build_record(cfg, metrics, sig, header, pred_path)
    log_or_keep(record, Path(cfg.paths.mlflow_pending))


if __name__ == "__main__":
    main()
