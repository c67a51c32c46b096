"""Answers for new sources from a trained model under its contract: what ``pipeline.predict``
prints and what the MLflow model of a result returns (issue 29). One code path, so a served
model answers exactly as the command line does.

An input that is empty, holds text the source tokenizer does not know, or is longer than the
model was trained for, and an output with a UNK or without an end of sequence, gets a reason
instead of an answer: no answer is given that the model cannot stand behind (issue 13).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from seqcore.artifacts.model_file import ModelFile
from seqcore.config import DecodeConfig
from seqcore.data.examples import Example
from seqcore.data.inputs import SourceInput, check_source
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.determinism import set_determinism
from seqcore.tokenizer import Tokenizers, load_tokenizers


@dataclass(frozen=True)
class Answer:
    """One input and what the model says about it.

    Attributes:
        source: the input as given (a line that is not UTF-8 with backslash escapes).
        output: the decoded target ("" when there is a problem).
        score: the output's log probability (None when there is a problem).
        problem: why there is no answer ("" when there is one).
    """

    source: str
    output: str
    score: float | None
    problem: str


def output_problem(tokens: list[int], eos: bool, unk: int, max_len: int) -> str:
    """Why a decoded output is not an answer ("" when it is)."""
    if unk in tokens:
        return "the model produced an unknown token"
    if not eos:
        return f"no end of sequence within decode.max_len {max_len}"
    return ""


@dataclass(frozen=True)
class Predictor:
    """A model file, its tokenizers and the decode settings, ready to answer.

    Decoding runs with the thread count the model file records, as the decode stage does
    (float sums depend on it).
    """

    saved: ModelFile
    toks: Tokenizers
    decode: DecodeConfig

    @classmethod
    def load(cls, model_path: str | Path, contract_path: str | Path,
             decode: DecodeConfig) -> Predictor:
        """The model file (weights-only, hash checked) and the tokenizers its contract names,
        refused unless they are the ones the model was trained with.

        Raises:
            seqcore.blobs.UnusableCheckpoint, seqcore.tokenizer.TokenizerMismatch: one line.
            FileNotFoundError: a missing file.
        """
        saved = ModelFile.load(model_path)
        toks = load_tokenizers(Path(contract_path), saved.meta.tokenizer_sha256())
        return cls(saved, toks, decode)

    def answer(self, lines: Sequence[str | bytes]) -> list[Answer]:
        """An answer or a problem for each input, in order (``bytes``: a line that is not
        valid UTF-8, answered with its own problem)."""
        checked = [SourceInput(line.decode("utf-8", "backslashreplace"), "", [],
                               "not valid UTF-8") if isinstance(line, bytes) else
                   check_source(line, self.toks.text, self.toks.src, self.saved.meta.max_src_len)
                   for line in lines]
        good = [i for i, c in enumerate(checked) if not c.problem]
        examples = [Example(str(i), str(i), checked[i].text, "", checked[i].ids, [], True)
                    for i in good]
        set_determinism(self.decode.seed, self.saved.meta.threads)
        model, ids = self.saved.build(), self.toks.ids
        with torch.inference_mode():
            rows = decode_examples(model, examples, make_decoder(self.decode, ids), ids,
                                   self.toks.tgt, self.decode.batch_size)
        by_id = {int(r.id): r for r in rows}
        out = []
        for i, c in enumerate(checked):
            row = by_id.get(i)
            problem = c.problem or output_problem(row.tokens, row.eos, ids.unk,
                                                  self.decode.max_len)
            out.append(Answer(c.raw, "" if problem else row.hypothesis,
                              None if problem else row.score, problem))
        return out
