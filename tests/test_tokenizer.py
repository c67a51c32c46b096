"""SentencePiece tokenizers: special-token text stays text, pinned ids, round-trip report."""
from __future__ import annotations

from pathlib import Path

import pytest

from seqcore.contract import SpecialIds
from seqcore.data.readers import read_pairs
from seqcore.text import SPECIAL_PIECES, normalize
from seqcore.tokenizer import (
    BOS_PIECE, EOS_PIECE, PAD_PIECE, UNK_PIECE, TextContract, check_special_ids, round_trip)
from tests.factories import trained_tokenizer, written

SPECIAL_SPELLINGS = ["<s>", "</s>", "<pad>", "<unk>", "a<s>b", "<s></s>", "say <unk> now"]
CORPUS = ["the cat sat", "a dog ran", "x<s>y and </s>", "<pad> or <unk>", "hello world",
          "the dog sat on the cat"] * 10


@pytest.mark.parametrize("model_type, vocab", [("char", 40), ("bpe", 45), ("unigram", 40),
                                               ("word", 40)])
def test_text_spelling_a_special_token_or_a_piece_is_ordinary_text(
        tmp_path: Path, ids: SpecialIds, model_type: str, vocab: int) -> None:
    tok = trained_tokenizer(CORPUS + SPECIAL_SPELLINGS, tmp_path / f"{model_type}.model",
                            model_type, vocab, ids)
    special = {ids.pad, ids.unk, ids.bos, ids.eos}
    # every piece's readable spelling too ("▁" is SentencePiece's space)
    readable = [p.replace("\u2581", " ").strip() for p in tok.pieces()[4:]]
    for text in SPECIAL_SPELLINGS + [r for r in readable if r]:
        got = tok.encode(text)
        assert not special & set(got), (text, got)
        assert tok.decode(got) == text


def test_special_pieces_cannot_be_spelled_by_any_accepted_text(tmp_path: Path) -> None:
    contract = TextContract("nfkc", True)
    assert SPECIAL_PIECES == {PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE}
    for piece in sorted(SPECIAL_PIECES):
        with pytest.raises(ValueError, match="control-chars"):
            contract.apply(f"a {piece} b")
    raw = written(tmp_path / "p.tsv", "".join(f"a {p} b\tx\n" for p in sorted(SPECIAL_PIECES)))
    res = read_pairs(raw, "tsv", "skip", "nfkc", True)
    assert res.pairs == [] and res.counts()["dropped"] == {"control-chars-source": 4}
    with pytest.raises(ValueError, match="reserved-char"):
        contract.apply("a\u2581b")


def test_text_contract_applies_the_same_normalisation_as_the_readers() -> None:
    for form, fold in (("nfkc", True), ("nfc", False), ("none", True)):
        text = "  \uff23\u0041\u0301T\u00a0 ﬁ "
        assert TextContract(form, fold).apply(text) == normalize(text, form, fold)
    assert TextContract("nfkc", True).apply("\uff23AT  ﬁ") == "cat fi"


def test_pinned_special_ids_are_what_the_trained_model_holds(tmp_path: Path) -> None:
    pinned = SpecialIds(pad=3, unk=0, bos=1, eos=2)
    tok = trained_tokenizer(CORPUS, tmp_path / "char.model", ids=pinned)
    check_special_ids(tok, pinned)
    assert [tok.piece(i) for i in (3, 0, 1, 2)] == [PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE]
    with pytest.raises(ValueError, match="differ from params.yaml"):
        check_special_ids(tok, SpecialIds(pad=0, unk=1, bos=2, eos=3))


def test_every_training_row_round_trips_with_full_character_coverage(
        tmp_path: Path, ids: SpecialIds) -> None:
    words = [f"{a}{b}{c}" for a in "abcdefg" for b in "hijk'" for c in "lmnop"]
    tok = trained_tokenizer(words, tmp_path / "char.model", vocab=60, ids=ids)
    report = round_trip(tok, words, [f"f:{i}" for i in range(len(words))])
    assert (report.rows, report.failed, report.examples) == (len(words), 0, [])


def test_round_trip_reports_rows_that_hit_unknown_pieces_and_why(tmp_path: Path,
                                                                  ids: SpecialIds) -> None:
    texts = ["aa bb"] * 20 + ["aa zz", "bb yy", "aa zz"]
    # room for 4 specials + "▁aa" + "▁bb" only
    tok = trained_tokenizer(texts, tmp_path / "word.model", "word", 6, ids)
    assert tok.pieces()[4:] == ["\u2581aa", "\u2581bb"]
    where = [f"f:{i + 1}" for i in range(len(texts))]
    report = round_trip(tok, texts, where, max_examples=2)
    assert (report.rows, report.failed, report.by_reason) == (23, 3, {"unknown-pieces": 3})
    assert [(e["where"], e["culprits"], e["decoded"]) for e in report.examples] == [
        ("f:21", "zz", "aa \u2047 "), ("f:22", "yy", "bb \u2047 ")]
