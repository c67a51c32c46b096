"""The lm task's piece of the evaluate stage: dev/test perplexity of the saved LM, with the
state carried across segments and reset at each, and the evaluate outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.reports import Headline, Metrics, Results
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config
from seqcore.data.documents import Document
from seqcore.hashing import digest, sha256_file
from seqcore.nulls import null_undefined
from seqcore.signature import result_signature
from seqcore.tasks.base import Evaluated, StageIO
from seqcore.tasks.lm.corpus import lm_documents
from seqcore.training.distributed import checkpoint_folder_name
from seqcore.training.setups import lm_setup


def evaluate_lm(cfg: Config, docs: list[Document], model_path: Path) -> dict[str, Any]:
    """Dev/test perplexity of a saved LM with carried state and with a reset every segment.

    Returns:
        ``{"signature": ..., "checkpoints": ..., "lm": {"<split>_ppl_carried": ...,
        "<split>_tokens": ...}}``; the token count (characters plus one end-of-document
        token) is the denominator; ``checkpoints`` is the folder the model came from (train
        keys it by the training contract), which the audit checks the training record in.
    """
    setup = lm_setup(cfg, docs)
    saved = ModelFile.load(model_path)
    setup.model.load_state_dict(saved.weights)
    setup.model.eval()
    contract = saved.meta.training_contract
    folder = Path(cfg.paths.checkpoints) / checkpoint_folder_name(contract)
    signed = result_signature(saved.meta.signature, digest(contract),
                              sha256_file(model_path), None, None)
    return {"signature": saved.meta.signature, "result_signature": signed,
            "checkpoints": str(folder), **setup.report()}


def derived_params(cfg: Config) -> dict[str, str]:
    """The lm task's rules fixed by code (seqcore/training/lm.py, StreamBatcher), as the
    MLflow run states them (``Task.derived_params``): a stream of documents, not pairs."""
    tr, seq = cfg.train, cfg.sequence
    return {
        "derived.batch.unit": "parallel document streams per micro-batch",
        "derived.batch.sequences_per_step": f"{tr.batch_size * tr.accum_steps} streams x "
                                            f"{tr.bptt_len} characters",
        "derived.batch.bucketing": "none: each stream reads its documents in order",
        "derived.loss.denominator": "sum" if seq.loss_norm == "sum"
        else "valid label characters of all micro-batches of the step (sequence-mean falls "
             "back to token-mean in a stream)",
        "derived.eos": "every document ends with EOS; documents are never cut by length",
        "derived.teacher_forcing": "input = BOS + text; labels = text + EOS (next character)",
        "derived.bptt": f"truncated BPTT over segments of {tr.bptt_len} characters; the state "
                        "is carried (detached) across segments and reset at each document",
    }


def report_markdown(signature: str, lm: dict[str, Any]) -> str:
    """report.md of the lm task: the contract and the perplexity table."""
    lines = ["# Language-model report", "", f"Contract: `{signature}`", "",
             "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(lm.items())]
    lines += ["", "Perplexity per character (plus one end-of-document token per document, "
              "the `_tokens` denominators), with the RNN state carried across segments and "
              "with the state reset at every segment of `train.bptt_len` characters.", ""]
    return "\n".join(lines)


def evaluate(cfg: Config, io: StageIO) -> Evaluated:
    """metrics.json, results.json, headline, an empty bucket table and report.md."""
    result = evaluate_lm(cfg, lm_documents(cfg), Path(cfg.paths.model))
    sig = result["signature"]
    io.note(f"contract: {sig}")
    io.note(f"result: {result['result_signature']}")
    metrics = null_undefined(result["lm"])
    Metrics(metrics).save(cfg.paths.metrics)
    Results({"task": "lm", "signature": result["result_signature"], "contract_signature": sig,
             "checkpoints": result["checkpoints"]}).save(cfg.paths.results)
    Headline(metrics["test_ppl_carried"], error_rates=False).save(cfg.paths.headline)
    Path(cfg.paths.buckets).write_text("bucket,count\n")
    Path(cfg.evaluate.details_dir).mkdir(parents=True, exist_ok=True)
    Path(cfg.paths.report).write_text(report_markdown(sig, result["lm"]), encoding="utf-8")
    pred_path = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    # The record ties the run to the tokenizer contract too (one pipeline graph).
    tc = TokenizerContract.load(Path(cfg.paths.tokenizer) / "contract.json")
    return Evaluated(metrics, sig, PredictionsHeader.load(pred_path), pred_path, tc)

