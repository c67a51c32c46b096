"""The pair tasks' own audit checks (``pipeline.audit`` asks a task for its ``audit`` piece).

A pair result's contract signature is recomputed from the params and the tokenizer contract
and must be the one every file records; the tokenizer hashes agree wherever they are
recorded; and every count of the scored split (encoded examples, prediction lines, header
rows, the metrics' counts) is the same number. No stage imports this module.
"""

from __future__ import annotations

from pathlib import Path

from seqcore import audit as A
from seqcore.artifacts.manifests import EncodedManifest, manifest_path
from seqcore.artifacts.result_files import ResultFiles
from seqcore.config import Config
from seqcore.signature import contract_signature, training_contract


def contract_diffs(cfg: Config, files: ResultFiles) -> list[str]:
    """The recomputed signature and training contract against every file that records
    them, and the tokenizer hashes of the contract, the predictions header and the model."""
    tc, meta, header = files.tokenizer_contract, files.meta, files.header
    sigs = {"params + tokenizer contract (recomputed)": contract_signature(cfg, tc)}
    if tc.signature:
        sigs["tokenizer contract"] = tc.signature
    sigs |= {"model file meta": meta.signature, "predictions header": header.signature,
             "metrics.json": files.results.signature}
    diffs = A.same_value_diffs("contract signature", sigs)
    for side in ("src", "tgt"):
        diffs += A.same_value_diffs(f"tokenizer {side} sha256", {
            "tokenizer contract": tc.side(side).sha256,
            "predictions header": (header.tokenizer_sha256 or {}).get(side),
            "model meta": meta.tokenizer_sha256()[side]})
    return diffs + A.json_diffs("training contract",
                                ("params + tokenizer contract", "model file meta"),
                                training_contract(cfg, tc), meta.training_contract)


def count_diffs(cfg: Config, files: ResultFiles) -> list[str]:
    """Header rows = prediction lines = encoded examples = the metrics' example counts."""
    split = cfg.decode.split
    pred = files.predictions_path
    enc = Path(cfg.paths.encoded) / f"{split}.jsonl"
    manifest = EncodedManifest.load(manifest_path(cfg.paths.encoded))
    metrics = files.metrics
    counts = {f"{enc} lines": A.nonblank_lines(enc),
              f"{cfg.paths.encoded}/manifest.json counts.{split}.kept":
                  manifest.counts[split].kept,
              f"{pred} lines": A.nonblank_lines(pred),
              f"{pred.with_suffix('.header.json')} rows": files.header.rows,
              f"{cfg.paths.metrics} {split}_sequences": metrics.count(f"{split}_sequences"),
              f"{cfg.paths.metrics} examples": metrics.count("examples")}
    ref_place, ref = next(iter(counts.items()))
    return [f"count: {place} has {value!r}, {ref_place} has {ref!r}"
            for place, value in counts.items() if value != ref]
