"""The lm task's piece of the evaluate stage: dev/test perplexity of the saved LM, with the
state carried across segments and reset at each, each with a bootstrap interval over the
split's documents (issue 27), and the evaluate outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.reports import Headline, Metrics, Results
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config
from seqcore.hashing import digest, sha256_file
from seqcore.metrics.bootstrap import Resampling, document_interval
from seqcore.metrics.recompute import resampling
from seqcore.metrics.report import interval_cell, interval_note
from seqcore.nulls import null_undefined
from seqcore.signature import result_signature
from seqcore.signature_format import parse_signature
from seqcore.tasks.base import Evaluated, StageIO
from seqcore.tasks.lm.corpus import lm_documents
from seqcore.tasks.lm.documents import Document
from seqcore.tasks.lm.feed import StreamNLL
from seqcore.tasks.lm.setup import lm_report, lm_setup
from seqcore.training.distributed import checkpoint_folder

#: What the lm intervals resample (the ``by`` field of their signature; the pair tasks'
#: is ``group``).
UNIT = "document"


def evaluate_lm(cfg: Config, docs: list[Document], model_path: Path) -> dict[str, Any]:
    """Dev/test perplexity of a saved LM with carried state and with a reset every segment,
    each with its bootstrap interval over the split's documents.

    Returns:
        ``{"signature": ..., "checkpoints": ..., "lm": {"<split>_ppl_carried": ...,
        "<split>_tokens": ...}, "intervals": {"interval": ..., "interval_signature": ...}}``;
        the token count (characters plus one end-of-document token) is the denominator;
        ``checkpoints`` is the folder the model came from (train keys it by the training
        contract), which the audit checks the training record in; ``intervals`` is empty
        when ``evaluate.bootstrap_samples`` is 0.
    """
    setup = lm_setup(cfg, docs)
    saved = ModelFile.load(model_path)
    setup.model.load_state_dict(saved.weights)
    setup.model.eval()
    contract = saved.meta.training_contract
    folder = checkpoint_folder(cfg.paths.checkpoints, contract)
    signed = signed_result(cfg, saved.meta.signature, contract, sha256_file(model_path))
    held_out = setup.held_out()
    return {"signature": saved.meta.signature, "result_signature": signed,
            "checkpoints": str(folder), **lm_report(held_out),
            "intervals": interval_metrics(held_out, resampling(cfg))}


def signed_result(cfg: Config, contract_sig: str, training_contract: dict[str, Any],
                  model_sha256: str) -> str:
    """The result signature of the lm figures: the contract, the training contract and model
    file hashes, no decode settings, and the bootstrap's (when it draws)."""
    r = resampling(cfg)
    return result_signature(contract_sig, digest(training_contract), model_sha256, None,
                            r.signature(UNIT) if r.samples else None)


def interval_metrics(held_out: dict[str, StreamNLL], r: Resampling) -> dict[str, Any]:
    """``interval``: each perplexity's bootstrap interval resampling its split's documents
    (seqcore.metrics.bootstrap.document_interval), under its metrics.json name, and the
    ``interval_signature`` that says how it was drawn; empty when ``r.samples`` is 0."""
    if r.samples == 0:
        return {}
    return {"interval": {k: document_interval(s.documents, r) for k, s in held_out.items()},
            "interval_signature": r.signature(UNIT)}


def derived_params(cfg: Config) -> dict[str, str]:
    """The lm task's rules fixed by code (seqcore/tasks/lm/feed.py, StreamBatcher), as the
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


def report_markdown(signature: str, lm: dict[str, Any], intervals: dict[str, Any]) -> str:
    """report.md of the lm task: the contract, the perplexity table with each perplexity's
    interval (``intervals``: the ``interval`` and ``interval_signature`` written) and how the
    intervals were drawn."""
    ci = parse_signature(intervals.get("interval_signature", "ci:95"))["ci"]
    lines = ["# Language-model report", "", f"Contract: `{signature}`", "",
             f"| metric | value | {ci} % interval |", "|---|---|---|"]
    lines += [f"| {k} | {v} | {interval_cell(intervals, k)} |" for k, v in sorted(lm.items())]
    lines += ["", "Perplexity per character (plus one end-of-document token per document, "
              "the `_tokens` denominators), with the RNN state carried across segments and "
              "with the state reset at every segment of `train.bptt_len` characters.", ""]
    note = interval_note(intervals.get("interval_signature"))
    return "\n".join(lines + (note + [""] if note else []))


def evaluate(cfg: Config, io: StageIO) -> Evaluated:
    """metrics.json, results.json, headline, an empty bucket table and report.md."""
    result = evaluate_lm(cfg, lm_documents(cfg), Path(cfg.paths.model))
    sig = result["signature"]
    io.note(f"contract: {sig}")
    io.note(f"result: {result['result_signature']}")
    values = null_undefined(result["lm"] | result["intervals"])
    # As for the pair tasks: numbers in metrics.json, the interval signature in results.json.
    texts = {k: v for k, v in values.items() if isinstance(v, str)}
    metrics = {k: v for k, v in values.items() if k not in texts}
    Metrics(metrics).save(cfg.paths.metrics)
    Results({"task": "lm", "signature": result["result_signature"], "contract_signature": sig,
             "checkpoints": result["checkpoints"]} | texts).save(cfg.paths.results)
    Headline(metrics["test_ppl_carried"], error_rates=False).save(cfg.paths.headline)
    Path(cfg.paths.buckets).write_text("bucket,count\n")
    Path(cfg.evaluate.details_dir).mkdir(parents=True, exist_ok=True)
    Path(cfg.paths.report).write_text(report_markdown(sig, result["lm"], values),
                                      encoding="utf-8")
    pred_path = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    # The record ties the run to the tokenizer contract too (one pipeline graph).
    tc = TokenizerContract.load(cfg.paths.tokenizer_contract)
    return Evaluated(values, sig, PredictionsHeader.load(pred_path), pred_path, tc)
