"""Pairs, rejects and variants (seqcore/data/records.py): written and read back as they were."""
from __future__ import annotations

from pathlib import Path

from seqcore.data.examples import Example, read_examples, write_examples
from seqcore.data.records import (
    Pair, Reject, read_pairs_jsonl, variant_counts, write_pairs, write_rejects)


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
