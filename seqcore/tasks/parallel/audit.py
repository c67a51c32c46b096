"""The pair tasks' own audit checks (``pipeline.audit`` asks a task for its ``audit`` piece).

A pair result's tokenizer, contract and result signatures are recomputed from the params,
the tokenizer contract, the model file and the predictions header, and must be the ones
every file records; the tokenizer hashes agree wherever they are
recorded; and every count of the scored split (encoded examples, prediction lines, header
rows, the metrics' counts) is the same number. No stage imports this module.
"""

from __future__ import annotations

from pathlib import Path

from seqcore.audit import json_diffs, nonblank_lines, same_value_diffs
from seqcore.artifacts.manifests import EncodedManifest, manifest_path
from seqcore.artifacts.result_files import ResultFiles
from seqcore.config import Config
from seqcore.hashing import digest, sha256_file
from seqcore.metrics.recompute import resampling
from seqcore.signature import (
    contract_signature, result_signature, tokenizer_signature, training_contract)


def contract_diffs(cfg: Config, files: ResultFiles) -> list[str]:
    """The recomputed signatures and training contract against every file that records
    them, and the tokenizer hashes of the contract, the predictions header and the model."""
    tc, meta, header = files.tokenizer_contract, files.meta, files.header
    diffs = same_value_diffs("tokenizer signature", {
        "params + tokenizer contract (recomputed)": tokenizer_signature(cfg, tc),
        "tokenizer contract": tc.signature})
    diffs += same_value_diffs("contract signature", {
        "params + tokenizer contract (recomputed)": contract_signature(cfg, tc),
        "model file meta": meta.signature, "predictions header": header.signature,
        "results.json": files.results.contract_signature})
    draws = resampling(cfg).signature("group") if "interval_signature" in files.results.texts \
        else None
    diffs += same_value_diffs("result signature", {
        "model file + predictions header + params (recomputed)": result_signature(
            meta.signature, digest(meta.training_contract), sha256_file(cfg.paths.model),
            header.decode, draws),
        "results.json": files.results.signature})
    for side in ("src", "tgt"):
        diffs += same_value_diffs(f"tokenizer {side} sha256", {
            "tokenizer contract": tc.side(side).sha256,
            "predictions header": (header.tokenizer_sha256 or {}).get(side),
            "model meta": meta.tokenizer_sha256()[side]})
    return diffs + json_diffs("training contract",
                                ("params + tokenizer contract", "model file meta"),
                                training_contract(cfg, tc), meta.training_contract)


def count_diffs(cfg: Config, files: ResultFiles) -> list[str]:
    """Header rows = prediction lines = encoded examples = the metrics' example counts."""
    split = cfg.decode.split
    pred = files.predictions_path
    enc = Path(cfg.paths.encoded) / f"{split}.jsonl"
    manifest = EncodedManifest.load(manifest_path(cfg.paths.encoded))
    metrics = files.metrics
    counts = {f"{enc} lines": nonblank_lines(enc),
              f"{cfg.paths.encoded}/manifest.json counts.{split}.kept":
                  manifest.counts[split].kept,
              f"{pred} lines": nonblank_lines(pred),
              f"{pred.with_suffix('.header.json')} rows": files.header.rows,
              f"{cfg.paths.metrics} {split}_sequences": metrics.count(f"{split}_sequences"),
              f"{cfg.paths.metrics} examples": metrics.count("examples")}
    ref_place, ref = next(iter(counts.items()))
    return [f"count: {place} has {value!r}, {ref_place} has {ref!r}"
            for place, value in counts.items() if value != ref]
