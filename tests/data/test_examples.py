"""Encoded examples (seqcore/data/examples.py): fields kept, length rejects named, the
length limits at their edge."""
from __future__ import annotations

from pathlib import Path

import pytest

from seqcore.config import config_from_dict
from seqcore.data.examples import Example, encode_pairs
from seqcore.data.records import Pair, Reject
from seqcore.tokenizer import Tokenizer
from tests.factories import IDS, trained_tokenizer

E = "\u00e9"  # a character the char model below never saw: it encodes to UNK


@pytest.fixture(scope="module")
def char_tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    """A char model over a, b, c: one token per known letter, one UNK per unknown stretch."""
    return trained_tokenizer(["abc", "cab", "bca"], tmp_path_factory.mktemp("tok") / "char.model")


def _ids(tok: Tokenizer, letters: str) -> list[int]:
    """The char model's ids of known letters, one letter at a time."""
    return [tok.encode(ch)[0] for ch in letters]


def test_encoded_examples_keep_their_fields_and_each_length_reject_names_file_line_and_row(
        char_tok: Tokenizer) -> None:
    # max_src 3 source tokens; max_tgt 3 counts EOS, so a kept target has at most 2 tokens;
    # "ééé" is one UNK that counts 3 against the limit (one per character)
    pairs = [Pair("w1", "ab", "ba", "g1", 2), Pair("w2", "abca", "b", "g2", 4),
             Pair("w3", "a", E * 3, "g3", 5), Pair("w4", "abcab", "abcb", "g4", 7)]
    file = "data/raw/user.tsv"
    fits = Example("w1", "g1", "ab", "ba", _ids(char_tok, "ab"), _ids(char_tok, "ba"), True)
    kept, rejects = encode_pairs(pairs, char_tok, char_tok, 3, 3, "drop", file)
    assert kept == [fits]
    assert rejects == [Reject(file, 4, "overlong-source", "abca\tb", "dropped"),
                       Reject(file, 5, "overlong-target", f"a\t{E * 3}", "dropped"),
                       Reject(file, 7, "overlong-source", "abcab\tabcb", "dropped")]
    kept, rejects = encode_pairs(pairs, char_tok, char_tok, 3, 3, "truncate", file)
    assert kept == [
        fits,
        Example("w2", "g2", "abca", "b", _ids(char_tok, "abc"), _ids(char_tok, "b"), True),
        Example("w3", "g3", "a", E * 3, _ids(char_tok, "a"), [IDS.unk], False),
        Example("w4", "g4", "abcab", "abcb", _ids(char_tok, "abc"), _ids(char_tok, "abc"),
                False)]
    assert rejects == [Reject(file, 4, "truncated-source", "abca\tb", "altered"),
                       Reject(file, 5, "truncated-target", f"a\t{E * 3}", "altered"),
                       Reject(file, 7, "truncated-source", "abcab\tabcb", "altered"),
                       Reject(file, 7, "truncated-target", "abcab\tabcb", "altered")]


def test_lengths_at_max_src_len_and_max_tgt_len_with_eos_are_kept_one_more_is_dropped(
        tmp_path: Path) -> None:
    # A char model: one token per letter. max_src_len 4 counts source tokens; max_tgt_len 4
    # counts EOS, so a kept target has at most 3 tokens.
    tok = trained_tokenizer(["abcdef"], tmp_path / "char.model")
    seq = config_from_dict({"sequence": {"max_src_len": 4, "max_tgt_len": 4}}).sequence
    pairs = [Pair("fits", "abcd", "abc", "g1", 1), Pair("long-src", "abcde", "abc", "g2", 2),
             Pair("long-tgt", "abcd", "abcd", "g3", 3)]
    kept, rejects = encode_pairs(pairs, tok, tok, seq.max_src_len, seq.max_tgt_len, "drop", "f")
    assert [(e.id, len(e.src), len(e.tgt), e.has_eos) for e in kept] == [("fits", 4, 3, True)]
    assert [(r.line, r.reason, r.action) for r in rejects] == [
        (2, "overlong-source", "dropped"), (3, "overlong-target", "dropped")]
    kept, _ = encode_pairs(pairs, tok, tok, seq.max_src_len, seq.max_tgt_len, "truncate", "f")
    # truncated: the source cut to 4 tokens; the target keeps 4 tokens and loses its EOS
    assert [(e.id, len(e.src), len(e.tgt), e.has_eos) for e in kept] == [
        ("fits", 4, 3, True), ("long-src", 4, 3, True), ("long-tgt", 4, 4, False)]
