"""Answers for new sources from a trained model under its contract: what ``pipeline.predict``
prints and what the MLflow model of a result returns (issue 29). One code path, so a served
model answers exactly as the command line does, and it is the decode stage's
(``seqcore.tasks.parallel.decode.system_rows``): under ``decode.rescore: baseline`` the
baseline's WFST gives each input its n-best and the model rescores it, so the system served is
the system scored (issue 51); the split's sources in file order get the decode stage's rows.

An input that is empty, holds text the source tokenizer does not know, or is longer than the
model was trained for, and an output with a UNK or without an end of sequence, gets a reason
instead of an answer: no answer is given that the model cannot stand behind (issue 13).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from seqcore.artifacts.baseline import BaselineRecord
from seqcore.artifacts.model_file import ModelFile
from seqcore.config import Config, DecodeConfig
from seqcore.data.examples import Example
from seqcore.data.inputs import SourceInput, check_source
from seqcore.determinism import set_determinism
from seqcore.errors import OneLineError
from seqcore.hashing import sha256_file
from seqcore.tasks.parallel.baseline import predict as baseline_predict
from seqcore.tasks.parallel.decode import system_rows
from seqcore.tokenizer import Tokenizers, load_tokenizers


@dataclass(frozen=True)
class Answer:
    """One input and what the model says about it.

    Attributes:
        source: the input as given (a line that is not UTF-8 with backslash escapes).
        output: the decoded target ("" when there is a problem).
        score: the output's score (None when there is a problem): its log probability under
            the model, or under ``decode.rescore: baseline`` the combined score of
            ``seqcore.decoding.rescore``.
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
class Rescoring:
    """The baseline the decode stage rescored with: its WFST and how many of its best
    pronunciations it listed per input (``baseline.nbest``)."""

    fst: Path
    nbest: int

    @classmethod
    def load(cls, fst: str | Path, nbest: int, sha256: str) -> Rescoring:
        """The WFST at ``fst``, refused unless its sha256 is the one the result recorded.

        Raises:
            seqcore.errors.OneLineError: the file differs (one line naming it).
            FileNotFoundError: a missing file.
        """
        found = sha256_file(Path(fst))
        if found != sha256:
            raise UnusableBaseline(f"{fst}: sha256 {found[:12]} is not the baseline the result "
                                   f"was decoded with ({sha256[:12]}); re-run the baseline "
                                   "stage, or log the result again")
        return cls(Path(fst), nbest)


def result_rescoring(decode: DecodeConfig, baseline_dir: str | Path,
                     nbest: int) -> tuple[DecodeConfig, Rescoring | None]:
    """The decode settings and baseline a result's predictions were made with: under
    ``decode.rescore: baseline`` the baseline stage's WFST (hash checked against its record),
    or, when that stage skipped the data, the model alone (``rescore: none``), as the decode
    stage answered.

    Raises:
        UnusableBaseline: the WFST is not the recorded one. FileNotFoundError: missing.
    """
    if decode.rescore != "baseline":
        return decode, None
    record = BaselineRecord.load(baseline_dir)
    if not record.present or record.model_sha256 is None:
        return replace(decode, rescore="none"), None
    return decode, Rescoring.load(Path(baseline_dir) / "model.fst", nbest, record.model_sha256)


class UnusableBaseline(OneLineError):
    """The baseline's WFST is not the one the result was rescored with."""


@dataclass(frozen=True)
class Predictor:
    """A model file, its tokenizers, the decode settings and (under ``decode.rescore:
    baseline``) the baseline to rescore, ready to answer.

    Decoding runs with the thread count the model file records, as the decode stage does
    (float sums depend on it).
    """

    saved: ModelFile
    toks: Tokenizers
    decode: DecodeConfig
    rescoring: Rescoring | None = None

    @classmethod
    def load(cls, model_path: str | Path, contract_path: str | Path, decode: DecodeConfig,
             rescoring: Rescoring | None = None) -> Predictor:
        """The model file (weights-only, hash checked) and the tokenizers its contract names,
        refused unless they are the ones the model was trained with; ``rescoring``: the
        baseline, required under ``decode.rescore: baseline`` (a model alone would answer
        as another system than the one scored).

        Raises:
            seqcore.blobs.UnusableCheckpoint, seqcore.tokenizer.TokenizerMismatch: one line.
            FileNotFoundError: a missing file.
        """
        if (decode.rescore == "baseline") != (rescoring is not None):
            raise ValueError(f"decode.rescore {decode.rescore!r} with "
                             f"{'a' if rescoring else 'no'} baseline to rescore")
        saved = ModelFile.load(model_path)
        toks = load_tokenizers(Path(contract_path), saved.meta.tokenizer_sha256())
        return cls(saved, toks, decode, rescoring)

    @classmethod
    def of_result(cls, cfg: Config) -> Predictor:
        """The system the decode stage scored for ``cfg``'s result (its model, tokenizers,
        decode settings and, under ``decode.rescore: baseline``, the baseline's WFST):
        what ``pipeline.predict`` answers with.

        Raises:
            as :meth:`load` and :func:`result_rescoring`.
        """
        decode, rescoring = result_rescoring(cfg.decode, cfg.paths.baseline, cfg.baseline.nbest)
        return cls.load(cfg.paths.model, cfg.paths.tokenizer_contract, decode, rescoring)

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
        base = None
        if self.rescoring is not None and examples:
            base = {r.id: r for r in baseline_predict(self.rescoring.fst, examples,
                                                       self.rescoring.nbest)}
        rows = system_rows(self.saved.build(), examples, self.toks, self.decode, base)
        by_id = {int(r.id): r for r in rows}
        out = []
        for i, c in enumerate(checked):
            row = by_id.get(i)
            problem = c.problem or output_problem(row.tokens, row.eos, self.toks.ids.unk,
                                                  self.decode.max_len)
            out.append(Answer(c.raw, "" if problem else row.hypothesis,
                              None if problem else row.score, problem))
        return out
