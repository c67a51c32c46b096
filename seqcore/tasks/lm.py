"""The ``lm`` task: plain-text documents in, a stateful RNN language model trained with
truncated BPTT, perplexity out (with the state carried across segments and reset at each).

It reads its documents itself (seqcore.data.documents) under the same data policy as the
parallel tasks: ``data.bad_rows`` and ``data.max_pairs``. The prepare and tokenizer stages
still run on the raw file's pairs (the pipeline is one graph), but nothing of theirs is
scored: no split-size or coverage guard. There is nothing to decode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.predictions import Predictions, PredictionsHeader
from seqcore.artifacts.reports import Headline, Metrics, Results
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, DataConfig, as_dict
from seqcore.data.coverage import SplitCoverage
from seqcore.data.documents import Corpus, Document, read_corpus
from seqcore.data.records import BadRowError
from seqcore.hashing import sha256_file
from seqcore.metrics.nulls import null_undefined
from seqcore.tasks.base import Evaluated, StageIO, Task, TaskError
from seqcore.training.distributed import World
from seqcore.training.setups import Setup, lm_setup


def lm_corpus(cfg: Config) -> Corpus:
    """The lm task's documents: CMUdict by initial letter, or the user's text (``data.path``).

    Raises:
        TaskError: under ``data.bad_rows: strict``, at the first bad line (file:line).
    """
    d = cfg.data
    path, source = (Path(cfg.paths.raw), "cmudict") if d.source == "cmudict" else \
        (Path(d.path), "text")
    try:
        return read_corpus(path, source, d.bad_rows, d.max_pairs, d.path or None)
    except BadRowError as err:
        raise TaskError(f"bad row (data.bad_rows: strict): {err}; fix the line, or set "
                        "data.bad_rows: skip to drop such lines") from None


def lm_documents(cfg: Config) -> list[Document]:
    return lm_corpus(cfg).documents


def evaluate_lm(cfg: Config, docs: list[Document], model_path: Path) -> dict[str, Any]:
    """Dev/test perplexity of a saved LM with carried state and with a reset every segment.

    Returns:
        ``{"signature": ..., "lm": {"<split>_ppl_carried": ..., "<split>_tokens": ...}}``;
        the token count (characters plus one end-of-document token) is the denominator.
    """
    setup = lm_setup(cfg, docs)
    saved = ModelFile.load(model_path)
    setup.model.load_state_dict(saved.weights)
    setup.model.eval()
    return {"signature": saved.meta.signature, **setup.report()}


def report_markdown(signature: str, lm: dict[str, Any]) -> str:
    """report.md of the lm task: the contract and the perplexity table."""
    lines = ["# Language-model report", "", f"Contract: `{signature}`", "",
             "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(lm.items())]
    lines += ["", "Perplexity per character (plus one end-of-document token per document, "
              "the `_tokens` denominators), with the RNN state carried across segments and "
              "with the state reset at every segment of `train.bptt_len` characters.", ""]
    return "\n".join(lines)


class LMTask(Task):
    """Stateful RNN language model over documents."""

    name = "lm"

    def scored_splits(self, data: DataConfig) -> dict[str, float]:
        return {}  # lm holds out the tail of each document, not prepared pairs

    def coverage_problems(self, cfg: Config, coverage: dict[str, SplitCoverage]) -> list[str]:
        return []  # lm trains on documents, not on the encoded pairs

    def training_setup(self, cfg: Config, io: StageIO, device: torch.device,
                       world: World) -> Setup:
        corpus = lm_corpus(cfg)
        if corpus.rejects:
            first = corpus.rejects[0]
            io.note(f"{len(corpus.rejects)} lines dropped (data.bad_rows: skip), the first "
                    f"{first.where()}: {first.reason}")
        try:
            return lm_setup(cfg, corpus.documents, device, world)
        except ValueError as err:  # more streams (train.batch_size) than documents
            raise TaskError(str(err)) from None

    def decode(self, cfg: Config, io: StageIO) -> None:
        """The (empty) predictions and a header naming the model and the reason."""
        out = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
        Predictions([]).save(out)
        PredictionsHeader(as_dict(cfg.decode), sha256_file(Path(cfg.paths.model)), 0,
                          task="lm",
                          note="task lm: nothing to decode; evaluate reports perplexity"
                          ).save(out)
        io.note("task lm: nothing to decode")

    def evaluate(self, cfg: Config, io: StageIO) -> Evaluated:
        """metrics.json, results.json, headline, an empty bucket table and report.md."""
        result = evaluate_lm(cfg, lm_documents(cfg), Path(cfg.paths.model))
        sig = result["signature"]
        io.note(f"contract: {sig}")
        metrics = null_undefined(result["lm"])
        Metrics(metrics).save(cfg.paths.metrics)
        Results({"task": "lm", "signature": sig}).save(cfg.paths.results)
        Headline(metrics["test_ppl_carried"], error_rates=False).save(cfg.paths.headline)
        Path(cfg.paths.buckets).write_text("bucket,count\n")
        Path(cfg.evaluate.details_dir).mkdir(parents=True, exist_ok=True)
        Path(cfg.paths.report).write_text(report_markdown(sig, result["lm"]), encoding="utf-8")
        pred_path = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
        # The record ties the run to the tokenizer contract too (one pipeline graph).
        tc = TokenizerContract.load(Path(cfg.paths.tokenizer) / "contract.json")
        return Evaluated(metrics, sig, PredictionsHeader.load(pred_path), pred_path, tc)

