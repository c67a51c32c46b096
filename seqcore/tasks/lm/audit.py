"""The lm task's own audit checks (``pipeline.audit`` asks a task for its ``audit`` piece).

Where an lm result differs from a decoded pair task's: its signature and training contract
come from the params and the documents (its character vocabulary), not from the tokenizer
contract, and nothing is decoded (an empty predictions file, a header of 0 rows). No stage
imports this module.
"""

from __future__ import annotations

from seqcore.artifacts.result_files import ResultFiles
from seqcore.audit import json_diffs, nonblank_lines, same_value_diffs
from seqcore.config import Config
from seqcore.hashing import sha256_file
from seqcore.tasks.lm.corpus import lm_documents
from seqcore.tasks.lm.evaluate import signed_result
from seqcore.tasks.lm.setup import lm_setup


def contract_diffs(cfg: Config, files: ResultFiles) -> list[str]:
    """The recomputed LM signature and training contract against the model file and
    results.json."""
    setup = lm_setup(cfg, lm_documents(cfg))
    meta = files.meta
    diffs = same_value_diffs("contract signature", {
        "params + documents (recomputed)": setup.signature, "model file meta": meta.signature,
        "results.json": files.results.contract_signature})
    diffs += same_value_diffs("result signature", {
        "model file + params (recomputed)": signed_result(
            cfg, meta.signature, meta.training_contract, sha256_file(cfg.paths.model)),
        "results.json": files.results.signature})
    return diffs + json_diffs("training contract", ("params + documents", "model file meta"),
                                setup.contract, meta.training_contract)


def count_diffs(cfg: Config, files: ResultFiles) -> list[str]:
    """Nothing is decoded: no prediction lines and a header of 0 rows."""
    pred = files.predictions_path
    empty = {f"{pred} lines": nonblank_lines(pred),
             f"{pred.with_suffix('.header.json')} rows": files.header.rows}
    return [f"count: {place} has {value!r}, task lm decodes nothing (0)"
            for place, value in empty.items() if value != 0]
