"""The prepare step (seqcore/data/prepare.py): formats, data settings and per-split counts."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import pipeline.prepare
from seqcore.artifacts.manifests import PrepareCounts
from seqcore.config import Config, DataConfig, config_from_dict
from seqcore.data.prepare import Prepared, input_format, prepare_pairs, sample_groups
from seqcore.data.records import BadRowError, Pair, Reject
from tests.factories import written


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
        variants={"sources_with_variants": 1, "variant_rows": 2, "sources_in_several_groups": 0})


def test_input_format_accepts_each_parallel_format_and_names_them_when_refusing() -> None:
    assert [input_format(s) for s in ("cmudict", "tsv", "jsonl")] == ["cmudict", "tsv", "jsonl"]
    with pytest.raises(ValueError, match=r"^data.source 'text' is not a parallel file "
                                         r"\(cmudict, tsv, jsonl\)$"):
        input_format("text")


def _all_pairs(prepared: Prepared) -> list[Pair]:
    return sorted((p for ps in prepared.splits.values() for p in ps), key=lambda p: p.line)


def test_prepare_reads_with_every_data_setting_it_is_given(tmp_path: Path) -> None:
    raw = written(tmp_path / "raw.dict", b";;; c\nABC  EY1 B IY1\nDOG  D AO1 G\nCAT  K AE1 T\n")
    data = DataConfig(source="cmudict", keep_stress=True, casefold=True, max_pairs=2)
    got = prepare_pairs(raw, data, label="cmu.dict")
    assert got.read == 3  # every line is read; max_pairs then samples 2 of the 3 groups
    every = [Pair("ABC", "abc", "EY1 B IY1", "abc", 2), Pair("DOG", "dog", "D AO1 G", "dog", 3),
             Pair("CAT", "cat", "K AE1 T", "cat", 4)]
    assert _all_pairs(got) == sample_groups(every, 2, data.split_seed)
    assert len(_all_pairs(got)) == 2
    assert got.rejects == [Reject("cmu.dict", 1, "comment", ";;; c", "ignored")]
    tsv = written(tmp_path / "raw.tsv", b"Cat\tKAT\n")
    folded = prepare_pairs(tsv, DataConfig(source="tsv", casefold=False, casefold_target=True))
    assert [(p.source, p.target) for p in _all_pairs(folded)] == [("Cat", "kat")]
    bad = written(tmp_path / "bad.tsv", b"cat\tK AE T\nno-tab\n")
    with pytest.raises(BadRowError, match="wrong-field-count"):
        prepare_pairs(bad, DataConfig(source="tsv", bad_rows="strict"))


PREPARE_ROWS = 40  # in 40 groups; each group's split by the keyed hash the docs describe


def hand_split(group: str, seed: int, dev: float, test: float) -> str:
    """sha256("<seed>\\0<group>"), first 8 bytes big-endian / 2^64: test below ``test``, dev
    below ``test + dev``, train above (docs: seqcore.data.splits)."""
    u = int.from_bytes(hashlib.sha256(f"{seed}\x00{group}".encode()).digest()[:8], "big") / 2**64
    return "test" if u < test else "dev" if u < test + dev else "train"


def prepare_config(tmp_path: Path, min_rows: int) -> Config:
    raw = written(tmp_path / "user.tsv", "source\ttarget\tgroup\n" + "".join(
        f"w{i}\tT {i}\tg{i}\n" for i in range(PREPARE_ROWS)))  # not a copy of the source
    out = tmp_path / f"min{min_rows}"
    return config_from_dict({
        "task": "parallel",
        "data": {"source": "tsv", "path": str(raw), "sha256": "", "dev_fraction": 0.25,
                 "test_fraction": 0.25, "min_split_rows": min_rows},
        "paths": {"raw": str(raw), "prepared": str(out / "prepared"),
                  "rejects": str(out / "rejects.tsv")}})


def test_prepare_passes_a_split_of_exactly_min_split_rows_and_stops_one_below(
        tmp_path: Path) -> None:
    d = prepare_config(tmp_path, 0).data
    counts = {"dev": 0, "test": 0, "train": 0}
    for i in range(PREPARE_ROWS):
        counts[hand_split(f"g{i}", d.split_seed, d.dev_fraction, d.test_fraction)] += 1
    smallest = min(counts["dev"], counts["test"])
    assert smallest > 0  # the data must make the boundary a real split size
    ok = prepare_config(tmp_path, smallest)
    pipeline.prepare.run(ok)  # each scored split holds >= min_split_rows: goes on
    assert (Path(ok.paths.prepared) / "test.jsonl").exists()
    short = prepare_config(tmp_path, smallest + 1)
    with pytest.raises(SystemExit) as stop:
        pipeline.prepare.run(short)
    named = [f"{s} has {counts[s]} rows (data.{s}_fraction 0.25)" for s in ("dev", "test")
             if counts[s] == smallest]
    assert str(stop.value).startswith(f"[prepare] {' and '.join(named)} of {PREPARE_ROWS} kept "
                                      f"rows, fewer than data.min_split_rows {smallest + 1}")
    assert not Path(short.paths.prepared).exists()
