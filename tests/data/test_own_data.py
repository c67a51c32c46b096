"""A user's own data and bad input: every guard stops with a message, nothing is lost or kept
silently, and a UNK is never counted as correct (issue 13)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from seqcore.artifacts.predictions import PredictionRow
from seqcore.config import ConfigError, config_from_dict, experiment_name
from seqcore.data.coverage import SplitCoverage, UnkStats, coverage_problems
from seqcore.data.examples import Example, encode_pairs
from seqcore.data.inputs import check_source
from seqcore.data.prepare import copy_share, dominant_target
from seqcore.data.readers import read_pairs
from seqcore.data.records import Pair, Reject, write_rejects
from seqcore.metrics.evaluation import hypothesis_unk_rate
from seqcore.metrics.scores import error_stats
from seqcore.metrics.teacher import teacher_forced_stats
from seqcore.tokenizer import UNK_PIECE, TextContract, Tokenizer, TokenizerSettings, choose_settings
from tests.factories import IDS, Oracle, trained_tokenizer, written
from tests.pipeline_helpers import run_stage


def _char_tok(tmp_path: Path) -> Tokenizer:
    words = ["cat", "act", "tact", "at", "cab", "bat", "tab", "abc"]
    return trained_tokenizer(words, tmp_path / "src.model")


# --- a UNK is never correct ---------------------------------------------------------------
def test_a_unk_in_a_hypothesis_never_matches_even_a_literal_unk_mark_in_the_reference() -> None:
    s = error_stats("K \u2047 T", "K \u2047 T")
    assert (s.exact, s.exact_multi, s.token_edits, s.char_edits) == (0, 0, 1, 1)
    assert s.fr_matches == 3  # K, T and EOS of the 4 reference labels; never the UNK
    assert error_stats("\u2047", "\u2047").exact == 0


def test_teacher_forced_accuracy_never_counts_a_unk_label_as_correct() -> None:
    ex = [Example("a", "a", "x", "y", [4], [IDS.unk, IDS.unk], True)]
    # V=6 logits that put all the mass on one token at every position
    oracle: Any = Oracle(6, 18.0, token=IDS.unk)  # duck-typed: only forward() is called
    stats = teacher_forced_stats(oracle, ex, IDS, 4)["a"]
    assert (stats.tokens, stats.correct) == (3, 0)
    ex = [Example("b", "b", "x", "y", [4], [5, 5], True)]
    assert teacher_forced_stats(Oracle(6, 18.0, token=5), ex, IDS, 4)["b"].correct == 2


def test_metrics_report_the_hypotheses_unk_rate_with_its_denominator() -> None:
    rows = [PredictionRow("i", "g", "s", "r", "h", [], pieces, 0.0, 0.0, len(pieces), True, [])
            for pieces in (["K", UNK_PIECE, "T"], ["A"])]
    got = hypothesis_unk_rate(rows)
    assert got == {"unk_tokens": 1, "tokens": 4, "unk_rate": 0.25, "rows_with_unk": 1}


# --- coverage: auto settings, UNK ceiling, length ------------------------------------------
def test_auto_chooses_char_for_words_and_word_for_a_symbol_inventory_and_says_so() -> None:
    settings, note = choose_settings(["cat", "dog"], "auto", "auto", 1.0)
    assert (settings.model_type, settings.vocab_size) == ("char", 6 + 4)
    assert "char (no row has a space)" in note and "vocab_size 10" in note
    settings, note = choose_settings(["K AE T", "D AO G"], "auto", "auto", 1.0)
    assert (settings.model_type, settings.vocab_size) == ("word", 6 + 4)
    many = [f"w{i} x{i}" for i in range(200)]
    assert choose_settings(many, "auto", 64, 1.0)[0] == TokenizerSettings("bpe", 64, 1.0)
    assert choose_settings(["a b"], "word", 44, 1.0) == (TokenizerSettings("word", 44, 1.0), "")


def test_an_unknown_stretch_counts_one_token_per_character_against_the_length_limit(
        tmp_path: Path) -> None:
    tok = _char_tok(tmp_path)
    long_unknown = "\u00e9" * 300  # one UNK piece in a char model, 300 characters as given
    assert tok.encode(long_unknown).count(IDS.unk) == len(tok.encode(long_unknown)) == 1
    pairs = [Pair("1", "cat", "cat", "1", 1), Pair("2", long_unknown, "tab", "2", 2)]
    kept, rejects = encode_pairs(pairs, tok, tok, 32, 32, "drop", "user.tsv")
    assert [e.id for e in kept] == ["1"]
    assert [(r.line, r.reason, r.action) for r in rejects] == [(2, "overlong-source", "dropped")]


def _problems(split_rates: dict[str, tuple[int, int]], read: int = 20, dropped: int = 0
              ) -> list[str]:
    ok = UnkStats(read, 0, 100, 0)
    cov = {s: SplitCoverage(ok, UnkStats(read, unk, tokens, unk), read, read - dropped, dropped)
           for s, (unk, tokens) in split_rates.items()}
    return coverage_problems(cov, 0.01, 0.05, 1)


def test_coverage_problems_name_the_figures_and_the_parameters_to_change() -> None:
    (msg,) = _problems({"train": (204, 268), "dev": (0, 10), "test": (0, 10)})
    assert "tgt UNK rate train 76.1% (204/268 tokens" in msg
    assert "tokenizer.tgt_model_type" in msg and "tokenizer.max_unk_rate 0.01" in msg
    (msg,) = _problems({"train": (0, 268), "dev": (1, 10), "test": (0, 10)})
    assert "never seen in train" in msg and "raise tokenizer.max_unk_rate" in msg
    msg, _ = _problems({"train": (0, 9), "test": (0, 9)}, read=400, dropped=381)
    assert msg.startswith("train: 381 of 400 rows (95.2%) dropped as over-long > "
                          "sequence.max_drop_rate 0.05")
    small = {"train": SplitCoverage(UnkStats(1, 0, 1, 0), UnkStats(1, 0, 1, 0), 9, 9, 0),
             "test": SplitCoverage(UnkStats(1, 0, 1, 0), UnkStats(1, 0, 1, 0), 1, 1, 0)}
    assert coverage_problems(small, 0.01, 0.05, 5) == [
        "test: 1 rows left after the length limits < data.min_split_rows 5; raise "
        "sequence.max_src_len / max_tgt_len"]


# --- a new input at decode time ------------------------------------------------------------
@pytest.mark.parametrize("raw, problem", [
    ("", "empty input"), ("   ", "empty input"),
    ("c\u00e1t\u00e9", "not in the source vocabulary: 'á' (U+00E1 LATIN SMALL LETTER A WITH "
                       "ACUTE), 'é' (U+00E9 LATIN SMALL LETTER E WITH ACUTE)"),
    ("cat" * 11, "33 tokens > sequence.max_src_len 32 the model was trained with"),
    ("ca\x07t", "control-chars"),
])
def test_an_input_the_model_cannot_answer_gets_a_reason(tmp_path: Path, raw: str,
                                                        problem: str) -> None:
    got = check_source(raw, TextContract("nfkc", True), _char_tok(tmp_path), 32)
    assert problem in got.problem and got.ids == []


def test_a_decodable_input_is_normalised_like_the_training_data(tmp_path: Path) -> None:
    tok = _char_tok(tmp_path)
    got = check_source("\uff23AT", TextContract("nfkc", True), tok, 32)  # fullwidth C
    assert (got.text, got.ids, got.problem) == ("cat", tok.encode("cat"), "")


# --- user data stays the user's ------------------------------------------------------------
P2G = {"data": {"source": "tsv", "path": "data/external/p2g.tsv"}}


def test_the_raw_snapshot_of_a_user_file_is_named_after_it() -> None:
    with pytest.raises(ConfigError, match="set paths.raw: data/raw/p2g.tsv"):
        config_from_dict(P2G)
    assert config_from_dict(P2G | {"paths": {"raw": "data/raw/p2g.tsv"}}).paths.raw == \
        "data/raw/p2g.tsv"
    assert config_from_dict({}).paths.raw == "data/raw/cmudict.dict"


def test_the_mlflow_experiment_is_named_after_the_task_and_the_data_unless_set() -> None:
    assert experiment_name(config_from_dict({})) == "seqcore-g2p"
    user = P2G | {"task": "parallel", "paths": {"raw": "data/raw/p2g.tsv"}}
    assert experiment_name(config_from_dict(user)) == "seqcore-parallel-p2g"
    assert experiment_name(config_from_dict(user | {"mlflow": {"experiment": "mine"}})) == "mine"


def test_targets_keep_their_case_unless_asked_and_nfkc_changes_are_recorded(tmp_path: Path) -> None:
    path = written(tmp_path / "user.tsv", "K AE T\tCat\nF IH SH\t\ufb01sh\n")
    res = read_pairs(path, "tsv", "skip", "nfkc", True)
    assert [(p.source, p.target) for p in res.pairs] == [("k ae t", "Cat"), ("f ih sh", "fish")]
    assert [(r.line, r.reason, r.action) for r in res.rejects] == [
        (2, "nfkc-changed-target", "altered")]
    folded = read_pairs(path, "tsv", "skip", "nfkc", False, casefold_target=True)
    assert [(p.source, p.target) for p in folded.pairs] == [("K AE T", "cat"), ("F IH SH", "fish")]


def test_the_rejects_report_escapes_control_bytes(tmp_path: Path) -> None:
    out = tmp_path / "rejects.tsv"
    write_rejects(out, [Reject("f", 1, "control-chars-source", "a\x07b\x1bc\td\\e")])
    data = out.read_bytes()
    assert data.splitlines()[1] == b"f\t1\tdropped\tcontrol-chars-source\ta\\x07b\\x1bc\\td\\\\e"
    assert not any(b < 0x20 and b not in b"\t\n" for b in data)


# --- stage-level guards (real stages, a tiny user TSV) -------------------------------------
def _prepared(work: Path, rows: list[str], overrides: dict | None = None,
              encoding: str = "utf-8") -> subprocess.CompletedProcess:
    """The user's rows in data/external/user.tsv, fetched; the prepare stage run on them."""
    (work / "data/external").mkdir(parents=True, exist_ok=True)
    (work / "data/external/user.tsv").write_bytes("".join(r + "\n" for r in rows).encode(encoding))
    assert run_stage(work, "fetch").returncode == 0
    return run_stage(work, "prepare", overrides)


def _stopped(res: subprocess.CompletedProcess) -> str:
    """The one line a stage that stopped (status 1, no traceback) ends its stderr with."""
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    return res.stderr.strip().splitlines()[-1]


SPLITTING = {"data": {"dev_fraction": 0.3, "test_fraction": 0.3, "min_split_rows": 1}}


@pytest.mark.slow
def test_prepare_stops_on_an_empty_test_split_naming_the_fractions(tmp_path: Path) -> None:
    res = _prepared(tmp_path, [f"w{i}\tT {i}" for i in range(30)],
                    {"data": SPLITTING["data"] | {"test_fraction": 0.0}})
    assert _stopped(res).startswith(
        "[prepare] test has 0 rows (data.test_fraction 0.0) of 30 kept rows, fewer than "
        "data.min_split_rows 1; raise data.dev_fraction / data.test_fraction")
    assert not (tmp_path / "data/prepared").exists()


@pytest.mark.slow
def test_a_mostly_unk_configuration_stops_at_the_tokenizer_stage(tmp_path: Path) -> None:
    # Like P2G with the G2P tokenizer defaults: symbols to words, and a word model of at most
    # 44 pieces for ~90 distinct training words.
    assert _prepared(tmp_path, [f"{' '.join(format(i, '08b').replace('0', 'A').replace('1', 'B'))}"
                                f"\tx{i:03d}" for i in range(150)], SPLITTING).returncode == 0
    res = run_stage(tmp_path, "tokenizer", SPLITTING | {"tokenizer": {
        "src_model_type": "char", "src_vocab_size": 40, "tgt_model_type": "word",
        "tgt_vocab_size": 44}})
    last = _stopped(res)
    assert last.startswith("[tokenizer] stopped: tgt UNK rate train ")
    assert "set tokenizer.tgt_model_type and tokenizer.tgt_vocab_size" in last
    coverage = json.loads((tmp_path / "reports/coverage.json").read_text())
    assert coverage["train"]["tgt"]["unk_rate"] > 0.2 and coverage["train"]["src"]["unk_rate"] == 0
    # the same data with auto settings passes, and the contract says what was chosen
    res = run_stage(tmp_path, "tokenizer", SPLITTING | {"tokenizer": {
        "tgt_model_type": "auto", "tgt_vocab_size": "auto"}})
    assert res.returncode == 0, res.stderr
    assert "[tokenizer] tgt: auto chose model_type char (no row has a space)" in res.stderr
    contract = json.loads((tmp_path / "tokenizer/contract.json").read_text())
    assert contract["tgt"]["model_type"] == "char" and "auto_chosen" in contract["tgt"]


@pytest.mark.slow
def test_rows_dropped_for_length_above_the_ceiling_stop_the_tokenizer_stage(tmp_path: Path) -> None:
    rows = [f"{'abcdefgh'[: 2 + i % 6]}\tW {i}" for i in range(40)]
    assert _prepared(tmp_path, rows, SPLITTING).returncode == 0
    res = run_stage(tmp_path, "tokenizer", SPLITTING | {"sequence": {
        "max_src_len": 3, "overlong": "drop"}})
    assert res.returncode == 1
    assert "dropped as over-long > sequence.max_drop_rate 0.05; raise sequence.max_src_len" \
        in res.stderr
    rejects = (tmp_path / "reports/length_rejects.tsv").read_text().splitlines()[1:]
    coverage = json.loads((tmp_path / "reports/coverage.json").read_text())
    assert len(rejects) == sum(coverage[s]["dropped_for_length"] for s in
                               ("train", "dev", "test")) > 0  # every dropped row is listed


def test_the_dominant_target_and_its_share_are_counted_over_the_rows() -> None:
    pairs = [Pair(str(i), f"w{i}", t, f"w{i}", i) for i, t in enumerate(["A", "B", "A", "C"])]
    assert dominant_target(pairs) == ("A", 0.5)
    assert dominant_target(pairs[1:2]) == ("B", 1.0)
    assert dominant_target([]) == ("", 0.0)


@pytest.mark.slow
@pytest.mark.parametrize(("same", "stops"), [(75, False), (76, True)])
def test_one_target_over_max_target_share_of_the_train_rows_stops_prepare_in_one_line(
        tmp_path: Path, same: int, stops: bool) -> None:
    # 150 rows, all in train: `same` of them share one target. 75/150 is exactly the
    # default share 0.5 (allowed), 76/150 is above it (a constant model would look trained).
    res = _prepared(tmp_path, [f"w{i:03d}\t{'K AE T' if i < same else f'T{i:03d}'}"
                               for i in range(150)])
    if not stops:
        assert res.returncode == 0, res.stderr
        return
    assert _stopped(res) == (
        "[prepare] one target, 'K AE T', is 50.7% of the 150 train rows, more than "
        "data.max_target_share 0.5: a model that always writes it would look trained; check the "
        "targets of data/external/user.tsv, or raise data.max_target_share")
    assert not (tmp_path / "data/prepared/manifest.json").exists()


def test_a_target_copying_its_source_is_counted_spaces_and_case_aside() -> None:
    pairs = [Pair(str(i), s, t, s, i) for i, (s, t) in enumerate(
        [("cat", "c a t"), ("Dog", "dog"), ("cat", "K AE T"), ("ab", "a b c")])]
    assert copy_share(pairs) == 0.5
    assert copy_share([]) == 0.0


@pytest.mark.slow
def test_targets_copying_their_sources_stop_prepare_in_one_line(tmp_path: Path) -> None:
    # 100 rows whose second column repeats the first (a broken export): a model that copies
    # its input would score WER 0
    assert _stopped(_prepared(tmp_path, [f"word{i:03d}\tword{i:03d}" for i in range(100)])) == (
        "[prepare] 100.0% of the 100 train rows have a target equal to their source (spaces "
        "and case aside), more than data.max_copy_share 0.9: a model that copies its input "
        "would look trained; check the columns of data/external/user.tsv, or raise "
        "data.max_copy_share")
    assert not (tmp_path / "data/prepared/manifest.json").exists()
    assert run_stage(tmp_path, "prepare", {"data": {"max_copy_share": 1.0}}).returncode == 0


@pytest.mark.slow
def test_a_windows_1252_file_losing_a_third_of_its_rows_stops_prepare_naming_the_reason(
        tmp_path: Path) -> None:
    # 300 rows; every third word is accented and saved as Windows-1252, not UTF-8: those 100
    # lines are invalid UTF-8 and dropped. The rejects file is written before the stop.
    rows = [f"{'caf' + chr(233) if i % 3 == 0 else 'w'}{i:03d}\tK AE T{i % 7}" for i in range(300)]
    assert _stopped(_prepared(tmp_path, rows, encoding="cp1252")) == (
        "[prepare] 100 of the 300 rows read from data/external/user.tsv were dropped (33.3%: "
        "invalid-utf8 100), more than data.max_reject_rate 0.05: a run would learn from what "
        "is left without a word; every row is listed in reports/data_rejects.tsv. Fix the file "
        "(e.g. save it as UTF-8 with one TAB per row), or raise data.max_reject_rate")
    rejects = (tmp_path / "reports/data_rejects.tsv").read_text().splitlines()
    assert len(rejects) == 101 and all("\tinvalid-utf8\t" in r for r in rejects[1:])
    assert not (tmp_path / "data/prepared/manifest.json").exists()
    # at the limit it runs: 15 of 300 dropped is exactly 0.05
    rows = [f"{'caf' + chr(233) if i % 20 == 0 else 'w'}{i:03d}\tK AE T{i % 7}" for i in range(300)]
    assert _prepared(tmp_path, rows, encoding="cp1252").returncode == 0
