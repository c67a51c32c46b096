"""The lm task's own audit checks (``pipeline.audit`` asks a task for ``<package>.audit``).

Where an lm result differs from a decoded pair task's: its signature and training contract
come from the params and the documents (its character vocabulary), not from the tokenizer
contract, and nothing is decoded (an empty predictions file, a header of 0 rows). No stage
imports this module.
"""

from __future__ import annotations

import json
from pathlib import Path

from seqcore import audit as A
from seqcore.artifacts.model_file import ModelMeta
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.reports import Results
from seqcore.config import Config
from seqcore.tasks.lm.corpus import lm_documents
from seqcore.training.setups import lm_setup


def contract_diffs(cfg: Config, meta: ModelMeta, results: Results) -> list[str]:
    """The recomputed LM signature and training contract against the model file and
    results.json."""
    setup = lm_setup(cfg, lm_documents(cfg))
    diffs = A.same_value_diffs("contract signature", {
        "params + documents (recomputed)": setup.signature, "model file meta": meta.signature,
        "results.json": results.signature})
    want = {k: json.dumps(v) for k, v in setup.contract.items()}
    have = {k: json.dumps(v) for k, v in meta.training_contract.items()}
    return diffs + A.text_diffs("training contract", ("params + documents", "model file meta"),
                                want, have)


def count_diffs(cfg: Config, header: PredictionsHeader) -> list[str]:
    """Nothing is decoded: no prediction lines and a header of 0 rows."""
    pred = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    with open(pred, encoding="utf-8") as f:
        lines = sum(1 for line in f if line.strip())
    empty = {f"{pred} lines": lines, f"{pred.with_suffix('.header.json')} rows": header.rows}
    return [f"count: {place} has {value!r}, task lm decodes nothing (0)"
            for place, value in empty.items() if value != 0]
