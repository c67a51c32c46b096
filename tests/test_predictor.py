"""What the registered model and `pipeline.predict` answer (seqcore/predictor.py), on a
model file and tokenizers written here: an answer is the decode stage's row for the input,
and every input or output it cannot stand behind gets its reason instead (issue 13). The
command and the served model on the tiny result: tests/stages/test_predict.py (slow)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from seqcore.artifacts.baseline import BaselineRecord
from seqcore.config import (
    BaselineConfig, Config, DecodeConfig, PathsConfig)
from seqcore.data.examples import Example
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.hashing import sha256_file
from seqcore.predictor import Answer, Predictor, Rescoring, UnusableBaseline, output_problem
from seqcore.tokenizer import TokenizerMismatch
from tests.factories import IDS, model_files, written

#: greedy, at most 5 tokens: an untrained model often runs out before its EOS
DECODE = DecodeConfig(strategy="greedy", max_len=5, batch_size=2, rescore="none")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The model files and their tokenizer contract (tests.factories.model_files)."""
    folder = model_files(tmp_path_factory.mktemp("result"))
    return folder / "model.pt", folder / "contract.json"


def test_each_input_gets_the_decode_stages_row_or_the_reason_it_has_none(
        files: tuple[Path, Path]) -> None:
    predictor = Predictor.load(*files, DECODE)
    answers = predictor.answer(["cat", "", "tacka", "c@t", b"c\xfft", "tab"])
    # the same inputs through the decode stage's decoder, for the ones that have ids
    good = [Example(str(i), str(i), w, "", predictor.toks.src.encode(w), [], True)
            for i, w in ((0, "cat"), (5, "tab"))]
    rows = decode_examples(predictor.saved.build(), good, make_decoder(DECODE, IDS), IDS,
                           predictor.toks.tgt, 2)
    for answer, row in zip((answers[0], answers[5]), rows, strict=True):
        problem = output_problem(row.tokens, row.eos, IDS.unk, 5)
        assert answer == Answer(row.source, "" if problem else row.hypothesis,
                                None if problem else row.score, problem)
    assert answers[1] == Answer("", "", None, "empty input")
    assert answers[2] == Answer("tacka", "", None, "5 tokens > sequence.max_src_len 4 the "
                                "model was trained with")
    assert answers[3].problem.startswith("not in the source vocabulary: '@'")
    assert answers[4] == Answer("c\\xfft", "", None, "not valid UTF-8")
    assert predictor.answer([]) == []
    assert answers[0].problem and answers[5].problem  # untrained: no EOS in 5, or a UNK
    ends = Predictor.load(files[0].with_name("ends.pt"), files[1], DECODE)
    [row] = decode_examples(ends.saved.build(), good[:1], make_decoder(DECODE, IDS), IDS,
                            ends.toks.tgt, 2)
    assert row.eos and row.tokens == [] and row.score < 0
    assert ends.answer(["cat"]) == [Answer("cat", "", row.score, "")]
    unk = Predictor.load(files[0].with_name("unk.pt"), files[1], DECODE)
    assert unk.answer(["cat"]) == [Answer("cat", "", None, "the model produced an unknown token")]
    with pytest.raises(TokenizerMismatch, match="the model was trained with another tokenizer"):
        Predictor.load(files[0].with_name("other.pt"), files[1], DECODE)


def test_an_output_with_unk_or_without_eos_is_no_answer() -> None:
    assert output_problem([5, 6], True, IDS.unk, 7) == ""
    assert output_problem([5, IDS.unk], True, IDS.unk, 7) == "the model produced an unknown token"
    assert output_problem([5, 6], False, IDS.unk, 7) == "no end of sequence within " \
        "decode.max_len 7"


def test_a_rescoring_predictor_needs_the_recorded_baseline_and_a_plain_one_none(
        files: tuple[Path, Path], tmp_path: Path) -> None:
    fst = tmp_path / "model.fst"
    fst.write_bytes(b"not the recorded one")
    with pytest.raises(UnusableBaseline, match=rf"^{fst}: sha256 [0-9a-f]{{12}} is not the "
                       r"baseline the result was decoded with \(000000000000\); re-run the "
                       r"baseline stage, or log the result again$"):
        Rescoring.load(fst, 10, "0" * 64)
    with pytest.raises(ValueError, match="decode.rescore 'baseline' with no baseline"):
        Predictor.load(*files, replace(DECODE, rescore="baseline"))
    with pytest.raises(ValueError, match="decode.rescore 'none' with a baseline"):
        Predictor.load(*files, DECODE, Rescoring(fst, 10))
    assert Rescoring.load(str(fst), 10, sha256_file(fst)) == Rescoring(fst, 10)


def test_the_result_is_answered_as_its_decode_stage_scored_it(
        files: tuple[Path, Path], tmp_path: Path) -> None:
    paths = PathsConfig(model=str(files[0]), tokenizer=str(files[1].parent),
                        baseline=str(tmp_path))
    rescoring = Config(paths=paths, decode=replace(DECODE, rescore="baseline"),
                       baseline=BaselineConfig(nbest=7))
    # the baseline stage skipped the data: the model alone, as the decode stage answered
    BaselineRecord("none", skipped="no baseline here").save(tmp_path)
    alone = Predictor.of_result(rescoring)
    assert alone.rescoring is None and alone.decode == DECODE
    assert Predictor.of_result(Config(paths=paths, decode=DECODE)).decode == DECODE
    BaselineRecord("phonetisaurus").save(tmp_path)  # a record without the WFST's hash
    assert Predictor.of_result(rescoring).rescoring is None
    # the stage's WFST, checked against its record
    fst = written(tmp_path / "model.fst", b"a wfst")
    BaselineRecord("phonetisaurus", model_sha256=sha256_file(fst)).save(tmp_path)
    both = Predictor.of_result(rescoring)
    assert both.rescoring == Rescoring(fst, 7) and both.decode.rescore == "baseline"
    fst.write_bytes(b"another")
    with pytest.raises(UnusableBaseline, match=f"^{fst}: sha256 "):
        Predictor.of_result(rescoring)
