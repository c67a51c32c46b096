"""Coverage (seqcore/data/coverage.py): UNK and drop rates per split, and the guards that stop
on them."""
from __future__ import annotations

import pytest

from seqcore.artifacts.coverage import SplitCoverage, UnkStats
from seqcore.config import config_from_dict
from seqcore.data.coverage import coverage_problems, split_coverage, unk_stats
from seqcore.data.examples import Example
from seqcore.data.records import Pair, Reject
from seqcore.tasks import get_task
from seqcore.tokenizer import Tokenizer
from tests.factories import trained_tokenizer

E = "\u00e9"  # a character the char model below never saw: it encodes to UNK


@pytest.fixture(scope="module")
def char_tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    """A char model over a, b, c: one token per known letter, one UNK per unknown stretch."""
    return trained_tokenizer(["abc", "cab", "bca"], tmp_path_factory.mktemp("tok") / "char.model")


def test_unk_stats_count_rows_tokens_rows_with_unk_and_every_unk_token(char_tok: Tokenizer) -> None:
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


CLEAN = UnkStats(rows=4, rows_with_unk=0, tokens=10, unk_tokens=0)


def test_coverage_problems_say_which_figures_are_over_and_which_parameters_to_change() -> None:
    # train over the ceiling: the fix is the side's tokenizer settings; every split over is named
    cov = {"train": SplitCoverage(CLEAN, UnkStats(10, 2, 20, 4), 10, 10, 0),
           "dev": SplitCoverage(CLEAN, UnkStats(2, 1, 10, 3), 2, 2, 0),
           "test": SplitCoverage(CLEAN, CLEAN, 2, 2, 0)}
    assert coverage_problems(cov, 0.1, 0.5, 1) == [(
        "tgt UNK rate train 20.0% (4/20 tokens, 2/10 rows), dev 30.0% (3/10 tokens, 1/2 rows) "
        "> tokenizer.max_unk_rate 0.1; set tokenizer.tgt_model_type and "
        "tokenizer.tgt_vocab_size to suit this side (auto chooses from the data) or raise "
        "tokenizer.character_coverage")]
    # train exactly at the ceiling is not over it: only dev is, so the fix is about dev/test
    cov = {"train": SplitCoverage(UnkStats(4, 1, 4, 1), CLEAN, 4, 4, 0),
           "dev": SplitCoverage(UnkStats(2, 1, 2, 1), CLEAN, 2, 2, 0)}
    assert coverage_problems(cov, 0.25, 0.5, 1) == [(
        "src UNK rate dev 50.0% (1/2 tokens, 1/2 rows) > tokenizer.max_unk_rate 0.25; "
        "dev/test hold symbols never seen in train: add rows, use a subword model "
        "(tokenizer.src_model_type: char or bpe) or raise tokenizer.max_unk_rate")]
    cov = {"train": SplitCoverage(CLEAN, CLEAN, 10, 4, 6)}
    assert coverage_problems(cov, 0.1, 0.5, 1) == [(
        "train: 6 of 10 rows (60.0%) dropped as over-long > sequence.max_drop_rate 0.5; raise "
        "sequence.max_src_len / max_tgt_len, or set sequence.overlong: truncate")]


def test_min_split_rows_bounds_dev_and_test_never_train() -> None:
    rows = {"train": 2, "dev": 3, "test": 3}
    cov = {s: SplitCoverage(CLEAN, CLEAN, n, n, 0) for s, n in rows.items()}
    assert coverage_problems(cov, 0.1, 0.5, 3) == []


# -- guards at, just below and just above their thresholds (rule 16) ------------------------

#: Thresholds set apart from each other so a guard reading the wrong parameter shows.
GUARDS = {"tokenizer": {"max_unk_rate": 0.25}, "sequence": {"max_drop_rate": 0.125},
          "data": {"min_split_rows": 3}}
#: A count over 4,000,000 tokens (or rows) a hair above or below a quarter / an eighth.
BIG = 4_000_000


def coverage(split: str, side: str = "", unk: tuple[int, int] = (0, 10),
             drop: tuple[int, int] = (0, 10), kept: int | None = None
             ) -> dict[str, SplitCoverage]:
    """Train/dev/test coverage with no problem, except ``split``: ``unk`` = (UNK tokens,
    tokens) on ``side``, ``drop`` = (dropped, read) rows, ``kept`` rows left."""
    clean, stats = UnkStats(10, 0, 10, 0), UnkStats(10, min(unk[0], 10), unk[1], unk[0])
    (dropped, read), kept = drop, drop[1] - drop[0] if kept is None else kept
    out = {s: SplitCoverage(clean, clean, 10, 10, 0) for s in ("train", "dev", "test")}
    out[split] = SplitCoverage(stats if side == "src" else clean,
                               stats if side == "tgt" else clean, read, kept, dropped)
    return out


def problems(cov: dict[str, SplitCoverage]) -> list[str]:
    """What the tokenizer stage's guard says, through the task and the config (GUARDS)."""
    cfg = config_from_dict(GUARDS)
    return get_task(cfg.task).coverage_problems(cfg, cov)


@pytest.mark.parametrize("side", ["src", "tgt"])
@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_unk_rate_equal_to_max_unk_rate_passes_and_just_above_stops(split: str, side: str) -> None:
    assert problems(coverage(split, side, unk=(1, 4))) == []  # exactly 0.25
    assert problems(coverage(split, side, unk=(BIG // 4 - 1, BIG))) == []  # just below
    (msg,) = problems(coverage(split, side, unk=(BIG // 4 + 1, BIG)))  # 0.25 + 2.5e-7
    assert f"{side} UNK rate {split} 25.0%" in msg and "> tokenizer.max_unk_rate 0.25" in msg


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_drop_rate_equal_to_max_drop_rate_passes_and_just_above_stops(split: str) -> None:
    assert problems(coverage(split, drop=(1, 8))) == []  # exactly 1/8
    assert problems(coverage(split, drop=(BIG // 8 - 1, BIG))) == []  # just below
    (msg,) = problems(coverage(split, drop=(BIG // 8 + 1, BIG)))
    assert msg.startswith(f"{split}: {BIG // 8 + 1} of {BIG} rows (12.5%) dropped as over-long "
                          "> sequence.max_drop_rate 0.125")


@pytest.mark.parametrize("split", ["dev", "test"])
def test_rows_left_equal_to_min_split_rows_pass_and_one_fewer_stops(split: str) -> None:
    assert problems(coverage(split, kept=4)) == []
    assert problems(coverage(split, kept=3)) == []  # exactly data.min_split_rows
    assert problems(coverage(split, kept=2)) == [
        f"{split}: 2 rows left after the length limits < data.min_split_rows 3; raise "
        "sequence.max_src_len / max_tgt_len"]
