"""Data rules that generated mutants found unpinned (issue 32, third tranche): the coverage
figures and their messages, the reject rows of the encoder and the readers, the variant counts,
the prepare step's settings and counts, and the JSONL round trips of pairs and examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqcore.artifacts.coverage import SplitCoverage, UnkStats
from seqcore.artifacts.manifests import PrepareCounts
from seqcore.config import DataConfig
from seqcore.data.coverage import coverage_problems, split_coverage, unk_stats
from seqcore.data.examples import Example, encode_pairs, read_examples, write_examples
from seqcore.data.prepare import Prepared, input_format, prepare_pairs
from seqcore.data.readers import HeaderError, read_pairs
from seqcore.data.records import (
    BadRowError,
    Pair,
    Reject,
    read_pairs_jsonl,
    variant_counts,
    write_pairs,
    write_rejects,
)
from seqcore.tokenizer import Tokenizer, TokenizerSettings, train_sentencepiece
from tests.factories import IDS

E = "\u00e9"  # a character the char model below never saw: it encodes to UNK


@pytest.fixture(scope="module")
def char_tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    """A char model over a, b, c: one token per known letter, one UNK per unknown stretch."""
    out = tmp_path_factory.mktemp("tok") / "char.model"
    return Tokenizer(train_sentencepiece(["abc", "cab", "bca"],
                                         TokenizerSettings("char", 40, 1.0), IDS, out))


def _ids(tok: Tokenizer, letters: str) -> list[int]:
    """The char model's ids of known letters, one letter at a time."""
    return [tok.encode(ch)[0] for ch in letters]


def _write(tmp_path: Path, data: bytes, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- coverage figures -----------------------------------------------------------------------

def test_unk_stats_count_rows_tokens_rows_with_unk_and_every_unk_token(
        char_tok: Tokenizer) -> None:
    # "ab": 2 tokens; "éaé": UNK a UNK (3 tokens, 2 UNK, one row); "c": 1 token
    assert unk_stats(char_tok, ["ab", f"{E}a{E}", "c"]) == UnkStats(
        rows=3, rows_with_unk=1, tokens=6, unk_tokens=2)


def test_split_coverage_holds_each_sides_unk_stats_and_the_rows_read_kept_and_dropped(
        char_tok: Tokenizer) -> None:
    sources, targets = ["ab", E, f"c{E}", "abc", "ba"], ["ba", "c", f"c{E}", "a", "b"]
    pairs = [Pair(str(i), s, t, str(i), i) for i, (s, t) in enumerate(zip(sources, targets))]
    kept = [Example(p.id, p.group, p.source, p.target, [], [], True) for p in pairs[:3]]
    rejects = [Reject("f", 3, "overlong-source", "x"), Reject("f", 4, "overlong-target", "y"),
               Reject("f", 2, "truncated-source", "z", "altered")]
    # source tokens 2+1+2+3+2, UNK in rows 2 and 3; target tokens 2+1+2+1+1, UNK in row 3
    assert split_coverage(pairs, kept, rejects, char_tok, char_tok) == SplitCoverage(
        UnkStats(5, 2, 10, 2), UnkStats(5, 1, 7, 1), read=5, kept=3, dropped_for_length=2)


def _side(rows: int, rows_with_unk: int, tokens: int, unk: int) -> UnkStats:
    return UnkStats(rows, rows_with_unk, tokens, unk)


CLEAN = _side(4, 0, 10, 0)


def test_coverage_problems_say_which_figures_are_over_and_which_parameters_to_change() -> None:
    # train over the ceiling: the fix is the side's tokenizer settings; every split over is named
    cov = {"train": SplitCoverage(CLEAN, _side(10, 2, 20, 4), 10, 10, 0),
           "dev": SplitCoverage(CLEAN, _side(2, 1, 10, 3), 2, 2, 0),
           "test": SplitCoverage(CLEAN, CLEAN, 2, 2, 0)}
    assert coverage_problems(cov, 0.1, 0.5, 1) == [(
        "tgt UNK rate train 20.0% (4/20 tokens, 2/10 rows), dev 30.0% (3/10 tokens, 1/2 rows) "
        "> tokenizer.max_unk_rate 0.1; set tokenizer.tgt_model_type and "
        "tokenizer.tgt_vocab_size to suit this side (auto chooses from the data) or raise "
        "tokenizer.character_coverage")]
    # train exactly at the ceiling is not over it: only dev is, so the fix is about dev/test
    cov = {"train": SplitCoverage(_side(4, 1, 4, 1), CLEAN, 4, 4, 0),
           "dev": SplitCoverage(_side(2, 1, 2, 1), CLEAN, 2, 2, 0)}
    assert coverage_problems(cov, 0.25, 0.5, 1) == [(
        "src UNK rate dev 50.0% (1/2 tokens, 1/2 rows) > tokenizer.max_unk_rate 0.25; "
        "dev/test hold symbols never seen in train: add rows, use a subword model "
        "(tokenizer.src_model_type: char or bpe) or raise tokenizer.max_unk_rate")]
    cov = {"train": SplitCoverage(CLEAN, CLEAN, 10, 4, 6)}
    assert coverage_problems(cov, 0.1, 0.5, 1) == [(
        "train: 6 of 10 rows (60.0%) dropped as over-long > sequence.max_drop_rate 0.5; raise "
        "sequence.max_src_len / max_tgt_len, or set sequence.overlong: truncate")]


def test_min_split_rows_bounds_dev_and_test_never_train() -> None:
    cov = {"train": SplitCoverage(CLEAN, CLEAN, 2, 2, 0),
           "dev": SplitCoverage(CLEAN, CLEAN, 3, 3, 0),
           "test": SplitCoverage(CLEAN, CLEAN, 3, 3, 0)}
    assert coverage_problems(cov, 0.1, 0.5, 3) == []


# --- the encoder's reject rows and examples -------------------------------------------------

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


# --- records: variants, round trips, the rejects file ---------------------------------------

def test_variant_counts_count_sources_with_several_targets_their_rows_and_split_groups() -> None:
    pairs = [Pair("1", "a", "x", "g1", 1), Pair("2", "a", "y", "g2", 2),      # 2 targets, 2 groups
             Pair("3", "d", "p", "d", 3), Pair("4", "d", "q", "d", 4),
             Pair("5", "d", "r", "d", 5),                                     # 3 targets, 1 group
             Pair("6", "b", "z", "b", 6),                                     # 1 target
             Pair("7", "c", "u", "g3", 7), Pair("8", "c", "v", "g4", 8)]      # 2 targets, 2 groups
    assert variant_counts(pairs) == {"sources_with_variants": 3, "variant_rows": 2 + 3 + 2,
                                     "sources_in_several_groups": 2}


def test_pairs_and_examples_read_back_as_written(tmp_path: Path) -> None:
    pairs = [Pair("caf\u00e9", "caf\u00e9", "K AE F EY", "caf\u00e9", 3),
             Pair("x:2", "a\tb", "c", "g", 2)]
    write_pairs(pairs, tmp_path / "pairs.jsonl")
    assert read_pairs_jsonl(tmp_path / "pairs.jsonl") == pairs
    examples = [Example("1", "g", "ab", "ba", [4, 5], [5, 4], True),
                Example("2", "h", "c", "ccc", [6], [6, 6, 6], False)]
    write_examples(examples, tmp_path / "deep" / "train.jsonl")
    assert read_examples(tmp_path / "deep" / "train.jsonl") == examples


def test_the_rejects_file_has_its_header_and_one_escaped_row_per_reject(tmp_path: Path) -> None:
    path = tmp_path / "reports" / "data" / "rejects.tsv"  # parents that do not exist yet
    write_rejects(path, [Reject("u.tsv", 3, "control-chars-source", "a\tb\rc\\d\x07e"),
                         Reject("u.tsv", 1, "bom-stripped", "", "altered")])
    assert path.read_bytes() == (
        b"file\tline\taction\treason\ttext\n"
        b"u.tsv\t3\tdropped\tcontrol-chars-source\ta\\tb\\rc\\\\d\\x07e\n"
        b"u.tsv\t1\taltered\tbom-stripped\t\n")


# --- readers: every reject row names its file, line and text --------------------------------

def test_tsv_reject_rows_name_the_label_line_and_text_in_line_order(tmp_path: Path) -> None:
    raw = (b"\xef\xbb\xbfCat\tK AE T\r\n"  # line 1: BOM (start) then CR (end): both fixed
           b"\n"                           # line 2: blank
           b"d\xffg\tD AO G\n"             # line 3: invalid UTF-8, shown escaped
           + "\ufb01sh\tF IH SH\n".encode())  # line 4: NFKC changes the source
    res = read_pairs(_write(tmp_path, raw, "raw.tsv"), "tsv", "skip", "nfkc", True,
                     label="user.tsv")
    assert res.pairs == [Pair("user.tsv:1", "cat", "K AE T", "cat", 1),
                         Pair("user.tsv:4", "fish", "F IH SH", "fish", 4)]
    assert res.rejects == [
        Reject("user.tsv", 1, "bom-stripped", "", "altered"),
        Reject("user.tsv", 1, "crlf-stripped", "", "altered"),
        Reject("user.tsv", 2, "blank-line", "", "ignored"),
        Reject("user.tsv", 3, "invalid-utf8", "d\\xffg\tD AO G", "dropped"),
        Reject("user.tsv", 4, "nfkc-changed-source", "\ufb01sh\tF IH SH", "altered")]


def test_cmudict_comments_are_ignored_and_reading_goes_on_and_phones_are_never_folded(
        tmp_path: Path) -> None:
    raw = (b";;; header comment\n"
           b"A  AH0\n"                                # a word of one phone
           b"ABC(2)  EY1 B IY1 # acronym # see ABC\n"  # a comment that holds a '#'
           b"LONELY\n"                                # no phones
           b"DOG  D AO1 G\n")
    res = read_pairs(_write(tmp_path, raw, "raw.dict"), "cmudict", "skip", "nfkc", True,
                     label="cmu.dict", casefold_target=True)
    assert res.pairs == [Pair("A", "a", "AH", "a", 2), Pair("ABC(2)", "abc", "EY B IY", "abc", 3),
                         Pair("DOG", "dog", "D AO G", "dog", 5)]
    assert res.rejects == [Reject("cmu.dict", 1, "comment", ";;; header comment", "ignored"),
                           Reject("cmu.dict", 4, "wrong-field-count", "LONELY", "dropped")]


def test_a_tsv_header_is_line_one_naming_source_and_target_and_a_bad_one_names_the_file(
        tmp_path: Path) -> None:
    # a cell spelling "target" is data unless it is line 1 beside a "source" cell
    path = _write(tmp_path, b"aim\ttarget\ngoal\ttarget\n", "raw.tsv")
    res = read_pairs(path, "tsv", "strict", "nfkc", False)
    assert [(p.source, p.target) for p in res.pairs] == [("aim", "target"), ("goal", "target")]
    path = _write(tmp_path, b"source\ttarget\tlang\nx\ty\tz\n", "bad.tsv")
    with pytest.raises(HeaderError) as err:
        read_pairs(path, "tsv", "skip", "nfkc", False, label="user.tsv")
    assert str(err.value).startswith("user.tsv:1: header ['source', 'target', 'lang']")


def test_a_jsonl_row_may_name_all_four_fields(tmp_path: Path) -> None:
    row = b'{"source": "cat", "target": "K AE T", "id": "c1", "group": "g"}\n'
    res = read_pairs(_write(tmp_path, row, "raw.jsonl"), "jsonl", "strict", "nfkc", False)
    assert res.pairs == [Pair("c1", "cat", "K AE T", "g", 1)]


# --- prepare --------------------------------------------------------------------------------

def test_prepared_summary_counts_rows_groups_rejects_and_variants_per_split() -> None:
    train = [Pair("1", "a", "x", "g1", 1), Pair("2", "a", "y", "g1", 2),
             Pair("3", "b", "z", "g2", 4)]
    dev, test = [Pair("4", "c", "w", "g3", 5)], [Pair("5", "d", "v", "g4", 6)]
    rejects = [Reject("f", 3, "blank-line", "", "ignored"), Reject("f", 7, "duplicate", "a\tx"),
               Reject("f", 1, "bom-stripped", "", "altered")]
    got = Prepared({"train": train, "dev": dev, "test": test}, rejects, read=5).summary()
    assert got == PrepareCounts(
        read=5, kept=5, cut_by_max_pairs=0, rows={"train": 3, "dev": 1, "test": 1},
        groups={"train": 2, "dev": 1, "test": 1},
        rejects={"dropped": {"duplicate": 1}, "altered": {"bom-stripped": 1},
                 "ignored": {"blank-line": 1}},
        variants={"sources_with_variants": 1, "variant_rows": 2,
                  "sources_in_several_groups": 0})


def test_input_format_accepts_each_parallel_format_and_names_them_when_refusing() -> None:
    assert [input_format(s) for s in ("cmudict", "tsv", "jsonl")] == ["cmudict", "tsv", "jsonl"]
    with pytest.raises(ValueError, match=r"^data.source 'text' is not a parallel file "
                                         r"\(cmudict, tsv, jsonl\)$"):
        input_format("text")


def _all_pairs(prepared: Prepared) -> list[Pair]:
    return sorted((p for ps in prepared.splits.values() for p in ps), key=lambda p: p.line)


def test_prepare_reads_with_every_data_setting_it_is_given(tmp_path: Path) -> None:
    raw = _write(tmp_path, b";;; c\nABC  EY1 B IY1\nDOG  D AO1 G\nCAT  K AE1 T\n", "raw.dict")
    data = DataConfig(source="cmudict", keep_stress=True, casefold=True, max_pairs=2)
    got = prepare_pairs(raw, data, label="cmu.dict")
    assert got.read == 2  # max_pairs: reading stops at the second kept pair
    assert _all_pairs(got) == [Pair("ABC", "abc", "EY1 B IY1", "abc", 2),
                               Pair("DOG", "dog", "D AO1 G", "dog", 3)]
    assert got.rejects == [Reject("cmu.dict", 1, "comment", ";;; c", "ignored")]
    tsv = _write(tmp_path, b"Cat\tKAT\n", "raw.tsv")
    folded = prepare_pairs(tsv, DataConfig(source="tsv", casefold=False, casefold_target=True))
    assert [(p.source, p.target) for p in _all_pairs(folded)] == [("Cat", "kat")]
    bad = _write(tmp_path, b"cat\tK AE T\nno-tab\n", "bad.tsv")
    with pytest.raises(BadRowError, match="wrong-field-count"):
        prepare_pairs(bad, DataConfig(source="tsv", bad_rows="strict"))
