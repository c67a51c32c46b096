"""The readers' bad-row policy: every reason code, exact counts, strict stops with file:line."""
from __future__ import annotations

from pathlib import Path

import pytest

from seqcore.data.readers import HeaderError, read_pairs
from seqcore.data.records import BadRowError, Pair, Reject
from tests.data_samples import (
    BAD_JSONL, BAD_JSONL_DROPPED, BAD_JSONL_KEPT_LINES, BAD_TSV, BAD_TSV_COUNTS, BAD_TSV_DROPPED,
    BAD_TSV_KEPT_LINES, BAD_TSV_LINES)
from tests.factories import written


def test_skip_policy_counts_every_bad_row_kind_exactly(tmp_path: Path) -> None:
    res = read_pairs(written(tmp_path / "user.tsv", BAD_TSV), "tsv", "skip", "nfkc", True)
    assert res.counts() == BAD_TSV_COUNTS
    assert [(r.line, r.reason) for r in res.rejects if r.action == "dropped"] == BAD_TSV_DROPPED
    assert [p.line for p in res.pairs] == BAD_TSV_KEPT_LINES


def test_kept_rows_are_normalised_and_grouped_and_targets_keep_their_case(tmp_path: Path) -> None:
    path = written(tmp_path / "user.tsv", BAD_TSV)
    pairs = read_pairs(path, "tsv", "skip", "nfkc", True).pairs
    assert [(p.source, p.target, p.group) for p in pairs] == [
        ("cat", "K AE T", "g1"), ("dog", "D AO G", "g2"), ("cat", "K AA T", "g1"),
        ("<s> and </s>", "<pad> <unk>", "g5"), ("fish", "F IH SH SH", "fish")]
    folded = read_pairs(path, "tsv", "skip", "nfkc", True, casefold_target=True).pairs
    assert [p.target for p in folded] == ["k ae t", "d ao g", "k aa t", "<pad> <unk>", "f ih sh sh"]


def test_variants_without_a_group_column_share_the_normalised_source_as_group(
        tmp_path: Path) -> None:
    path = written(tmp_path / "user.tsv", "Read\tR IY D\nread\tR EH D\nRéad\tX\n")
    assert [p.group for p in read_pairs(path, "tsv", "skip", "nfc", True).pairs] == [
        "read", "read", "réad"]


def test_normalisation_none_keeps_compatibility_characters(tmp_path: Path) -> None:
    path = written(tmp_path / "user.tsv", "\ufb01sh\tX\n")
    assert [read_pairs(path, "tsv", "skip", form, False).pairs[0].source
            for form in ("none", "nfc", "nfkc")] == ["\ufb01sh", "\ufb01sh", "fish"]


@pytest.mark.parametrize("line, reason", BAD_TSV_DROPPED)
def test_strict_policy_stops_at_the_first_bad_row_with_file_line_and_reason(
        tmp_path: Path, line: int, reason: str) -> None:
    # the header, one good row, then only the bad row under test
    path = written(tmp_path / "user.tsv",
                   b"\n".join([*BAD_TSV_LINES[:2], BAD_TSV_LINES[line - 1]]) + b"\n")
    with pytest.raises(BadRowError) as err:
        read_pairs(path, "tsv", "strict", "nfkc", True, label="data/external/user.tsv")
    assert err.value.reject.line == 3 and err.value.reject.reason == reason
    assert str(err.value).startswith(f"data/external/user.tsv:3: {reason}: ")


@pytest.mark.parametrize(("data", "name", "match"), [
    pytest.param(b"cat\tK\nCat\tK\n", "user.tsv", r"user.tsv:2: duplicate: 'Cat\\tK'",
                 id="test_strict_policy_stops_at_a_duplicate"),
    pytest.param(BAD_JSONL, "user.jsonl", r"user.jsonl:2: invalid-json: ",
                 id="test_jsonl_strict_policy_stops_at_the_first_bad_row"),
])
def test_strict_policy_stops_at_the_first_bad_row_of_any_format(tmp_path: Path, data: bytes,
                                                                name: str, match: str) -> None:
    with pytest.raises(BadRowError, match=match):
        read_pairs(written(tmp_path / name, data), name.split(".")[1], "strict", "nfkc", True)


def test_strict_policy_applies_and_records_lossless_fixes(tmp_path: Path) -> None:
    path = written(tmp_path / "user.tsv", b"\xef\xbb\xbfcat\tK\r\ndog\tD\r\n")
    res = read_pairs(path, "tsv", "strict", "nfkc", True)
    assert [p.source for p in res.pairs] == ["cat", "dog"]
    assert res.counts()["altered"] == {"bom-stripped": 1, "crlf-stripped": 2}


def test_tsv_header_with_an_unknown_column_is_refused_under_both_policies(tmp_path: Path) -> None:
    path = written(tmp_path / "user.tsv", b"source\ttarget\tgrp\nx\ty\tz\n")
    for policy in ("skip", "strict"):
        with pytest.raises(HeaderError, match="grp"):
            read_pairs(path, "tsv", policy, "nfkc", True)


def test_tsv_id_column_names_the_pair(tmp_path: Path) -> None:
    path = written(tmp_path / "user.tsv", b"id\tsource\ttarget\nw1\tcat\tK\n\tdog\tD\n")
    pairs = read_pairs(path, "tsv", "skip", "nfkc", True).pairs
    assert [p.id for p in pairs] == ["w1", "user.tsv:3"]


def test_jsonl_skip_policy_lists_every_bad_row(tmp_path: Path) -> None:
    res = read_pairs(written(tmp_path / "user.jsonl", BAD_JSONL), "jsonl", "skip", "nfkc", True)
    assert [(r.line, r.reason) for r in res.rejects] == BAD_JSONL_DROPPED
    assert [p.line for p in res.pairs] == BAD_JSONL_KEPT_LINES
    assert [(p.id, p.source, p.target, p.group) for p in res.pairs] == [
        ("c1", "cat", "K AE T", "cat"), ("user.jsonl:8", "</s>", "<unk>", "s")]


def test_cmudict_variants_share_the_headword_group_and_phones_keep_their_case(
        tmp_path: Path) -> None:
    path = written(tmp_path / "c.dict", b"read R IY1 D\nread(2) R EH1 D # past\n;;; note\n")
    res = read_pairs(path, "cmudict", "skip", "nfkc", True)
    assert [(p.id, p.source, p.target, p.group) for p in res.pairs] == [
        ("read", "read", "R IY D", "read"), ("read(2)", "read", "R EH D", "read")]
    assert res.counts()["ignored"] == {"comment": 1}
    stressed = read_pairs(path, "cmudict", "skip", "nfkc", True, keep_stress=True)
    assert stressed.pairs[1].target == "R EH1 D"


def test_reading_stops_at_the_limit_th_kept_pair_and_never_sees_a_later_bad_row(
        tmp_path: Path) -> None:
    # Line 2 is dropped (no tab); lines 1 and 3 are the two kept pairs; line 4 is bad too.
    path = written(tmp_path / "user.tsv",
                   b"cat\tK AE T\nbroken\ndog\tD AO G\nno tab either\nfish\tF IH SH\n")
    res = read_pairs(path, "tsv", "skip", "nfkc", True, limit=2)
    assert ([p.line for p in res.pairs], [r.line for r in res.rejects]) == ([1, 3], [2])
    read_pairs(path, "tsv", "strict", "nfkc", True, limit=1)  # line 2 is never read
    with pytest.raises(BadRowError):
        read_pairs(path, "tsv", "strict", "nfkc", True, limit=2)
    assert len(read_pairs(path, "tsv", "skip", "nfkc", True).pairs) == 3  # 0: the whole file


# --- every reject row names its file, line and text -----------------------------------------
def test_tsv_reject_rows_name_the_label_line_and_text_in_line_order(tmp_path: Path) -> None:
    raw = (b"\xef\xbb\xbfCat\tK AE T\r\n"  # line 1: BOM (start) then CR (end): both fixed
           b"\n"                           # line 2: blank
           b"d\xffg\tD AO G\n"             # line 3: invalid UTF-8, shown escaped
           + "\ufb01sh\tF IH SH\n".encode())  # line 4: NFKC changes the source
    res = read_pairs(written(tmp_path / "raw.tsv", raw), "tsv", "skip", "nfkc", True,
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
    res = read_pairs(written(tmp_path / "raw.dict", raw), "cmudict", "skip", "nfkc", True,
                     label="cmu.dict", casefold_target=True)
    assert res.pairs == [Pair("A", "a", "AH", "a", 2), Pair("ABC(2)", "abc", "EY B IY", "abc", 3),
                         Pair("DOG", "dog", "D AO G", "dog", 5)]
    assert res.rejects == [Reject("cmu.dict", 1, "comment", ";;; header comment", "ignored"),
                           Reject("cmu.dict", 4, "wrong-field-count", "LONELY", "dropped")]


def test_a_tsv_header_is_line_one_naming_source_and_target_and_a_bad_one_names_the_file(
        tmp_path: Path) -> None:
    # a cell spelling "target" is data unless it is line 1 beside a "source" cell
    path = written(tmp_path / "raw.tsv", b"aim\ttarget\ngoal\ttarget\n")
    res = read_pairs(path, "tsv", "strict", "nfkc", False)
    assert [(p.source, p.target) for p in res.pairs] == [("aim", "target"), ("goal", "target")]
    path = written(tmp_path / "bad.tsv", b"source\ttarget\tlang\nx\ty\tz\n")
    with pytest.raises(HeaderError) as err:
        read_pairs(path, "tsv", "skip", "nfkc", False, label="user.tsv")
    assert str(err.value).startswith("user.tsv:1: header ['source', 'target', 'lang']")


def test_a_jsonl_row_may_name_all_four_fields(tmp_path: Path) -> None:
    row = b'{"source": "cat", "target": "K AE T", "id": "c1", "group": "g"}\n'
    res = read_pairs(written(tmp_path / "raw.jsonl", row), "jsonl", "strict", "nfkc", False)
    assert res.pairs == [Pair("c1", "cat", "K AE T", "g", 1)]
