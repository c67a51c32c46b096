"""The dev tuning's rules (seqcore/decoding/tuning.py): the choice and its ties, the
wider-beam check, the table's files, a setting's rows, and ``--write``'s edit of params.yaml
(issue 52, item 4; the command on the tiny result: tests/stages/test_tune.py)."""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from seqcore.artifacts.predictions import PredictionRow, Predictions
from seqcore.config import Config, ConfigError, DecodeConfig, PathsConfig
from seqcore.data.examples import Example, write_examples
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.decoding.rescore import pick, scored_candidates
from seqcore.decoding.tuning import (
    Scored, Setting, choose, decode_and_score, own_and_rescored, table_csv, table_markdown, tune,
    wider_beam_checks, write_params)
from seqcore.tokenizer import Tokenizer, TokenizerMismatch
from tests.factories import (
    IDS, PHONES, WORDS, model_files, tiny_model, trained_tokenizer)


def row(beam: int, alpha: float, weight: float | None, wer: float, per: float) -> Scored:
    return Scored(Setting(beam, alpha, weight), wer, per, wer)


def test_the_lowest_dev_wer_is_chosen_then_per_then_the_plainer_setting() -> None:
    rows = [row(5, 0.6, 0.6, 0.30, 0.07), row(3, 0.6, 0.6, 0.28, 0.08),
            row(8, 1.0, 0.6, 0.28, 0.07), row(5, 0.0, 0.6, 0.28, 0.07),
            row(5, 0.0, 0.4, 0.28, 0.07)]
    # 0.28 thrice at PER 0.07: the narrower beam, then the smaller alpha, then the weight
    assert choose(rows) is rows[4]
    assert choose(rows[:3]) is rows[2]  # same WER: the lower PER beats the narrower beam
    assert choose([row(1, 0, None, 0.3, 0.1), row(1, 0, 0.0, 0.3, 0.1)]).setting.weight is None


def test_a_setting_without_figures_is_never_chosen_and_none_at_all_is_one_line() -> None:
    nan = row(1, 0.0, None, math.nan, math.nan)
    assert choose([nan, row(5, 0.6, None, 0.9, 0.5)]).setting.beam == 5
    half = row(1, 0.0, None, math.nan, 0.01)  # a PER without a WER: no figures either
    assert choose([half, row(3, 0.0, None, 0.9, 0.5)]).setting.beam == 3
    with pytest.raises(ValueError, match=r"^no setting of the grid has a dev WER and PER \(an "
                       r"empty dev split\?\)$"):
        choose([nan])


def test_a_wider_beam_that_scores_worse_than_a_narrower_one_is_named() -> None:
    rows = [row(1, 0.6, 0.6, 0.30, 0.07), row(3, 0.6, 0.6, 0.27, 0.06),
            row(8, 0.6, 0.6, 0.29, 0.06), row(5, 0.6, 0.6, 0.28, 0.06),
            row(1, 0.6, None, 0.34, 0.08), row(5, 0.6, None, 0.33, 0.08)]
    # beams 5 and 8 both lose to the best narrower one (3); the model alone improves with beam
    assert wider_beam_checks(rows) == [
        "alpha 0.6, rescoring weight 0.6: beam 5 (28.00 %), 8 (29.00 %) worse than beam 3 "
        "(27.00 %) on dev WER; a wider beam is not always better"]


def test_a_beam_as_good_as_a_narrower_one_is_not_named_and_each_group_has_its_line() -> None:
    rows = [row(1, 1.0, None, 0.30, 0.07), row(3, 1.0, None, 0.30, 0.07),
            row(5, 1.0, None, 0.35, 0.08), row(3, 0.6, 0.5, 0.25, 0.06),
            row(8, 0.6, 0.5, 0.26, 0.06)]
    # beam 3 ties beam 1 (not worse, and beam 1 stays the best); the lines in key order
    assert wider_beam_checks(rows) == [
        "alpha 0.6, rescoring weight 0.5: beam 8 (26.00 %) worse than beam 3 (25.00 %) on dev "
        "WER; a wider beam is not always better",
        "alpha 1, the model alone: beam 5 (35.00 %) worse than beam 1 (30.00 %) on dev WER; a "
        "wider beam is not always better"]


def test_the_table_marks_the_chosen_row_and_lists_the_checks() -> None:
    rows = [row(1, 0.0, None, 0.5, 0.25), row(3, 0.6, 0.5, 0.25, 0.125)]
    assert table_markdown(rows, rows[1], ["a check"], 1234) == (
        "# Decode settings on dev (1,234 rows)\n\n"
        "| beam | alpha | rescoring weight | WER | WER any ref. | PER | chosen |\n"
        "|---:|---:|---|---:|---:|---:|---|\n"
        "| 1 | 0 | none | 50.00 | 50.00 | 25.00 |  |\n"
        "| 3 | 0.6 | 0.5 | 25.00 | 25.00 | 12.50 | **chosen** |\n\n"
        "Chosen: the lowest dev WER; ties go to the lower PER, then to the narrower beam, the "
        "smaller alpha and rescoring weight. The test split was not read.\n\n"
        "## Checks\n\n- a check\n")
    assert table_markdown(rows, rows[1], [], 1234).endswith("## Checks\n\n- none\n")
    assert table_csv(rows).splitlines() == ["beam,alpha,rescore_weight,wer,wer_any_ref,per",
                                            "1,0.0,,0.5,0.5,0.25", "3,0.6,0.5,0.25,0.25,0.125"]


PARAMS = """task: g2p
decode:
  # the search
  beam_size: 5  # width
  alpha: 0.6
  rescore: baseline
  rescore_weight: 0.5
  tuned_on: none
evaluate:
  alpha: 9
"""


def test_write_sets_the_chosen_values_in_the_decode_section_keeping_every_comment(
        tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS)
    write_params(path, row(3, 1.0, 0.3, 0.2, 0.1))
    assert path.read_text() == PARAMS.replace("beam_size: 5  #", "beam_size: 3  #").replace(
        "alpha: 0.6", "alpha: 1.0").replace("weight: 0.5", "weight: 0.3").replace(
        "tuned_on: none", "tuned_on: dev")
    assert yaml.safe_load(path.read_text())["decode"]["beam_size"] == 3  # not "3# width"
    path.write_text(PARAMS)
    write_params(path, row(1, 0.0, None, 0.2, 0.1))  # the model alone: rescoring off
    assert path.read_text() == PARAMS.replace("beam_size: 5", "beam_size: 1").replace(
        "alpha: 0.6", "alpha: 0.0").replace("rescore: baseline", "rescore: none").replace(
        "tuned_on: none", "tuned_on: dev")
    path.write_text("task: g2p\n")
    with pytest.raises(ConfigError, match=f"^{path}: no decode section to write the chosen "):
        write_params(path, row(1, 0.0, None, 0.2, 0.1))
    path.write_text(PARAMS.replace("  tuned_on: none\n", ""))
    with pytest.raises(ConfigError, match=rf"^{path}: decode.tuned_on is not set in its decode "
                       r"section; add the line `  tuned_on: \.\.\.` there$"):
        write_params(path, row(1, 0.0, None, 0.2, 0.1))


def test_a_setting_is_the_models_own_rows_and_the_picks_of_their_scored_candidates(
        tmp_path: Path) -> None:
    tgt = trained_tokenizer(PHONES * 3, tmp_path / "tgt.model", "word", 10)
    toks = SimpleNamespace(ids=IDS, tgt=tgt)
    model = tiny_model(vocab=tgt.vocab_size)
    examples = [Example(str(i), str(i), "cat", "K AE T", [4 + i, 5, 6], tgt.encode("K AE T"),
                        True) for i in range(3)]
    base = {e.id: PredictionRow(e.id, e.id, "cat", "K AE T", "T AE K", [], [], -1.0, -1.0, 3,
                                True, [{"hypothesis": "B AE T", "tokens": [], "score": -2.0,
                                        "norm_score": -2.0, "eos": True}]) for e in examples}
    decode = DecodeConfig(strategy="greedy", max_len=6, batch_size=2, rescore_weight=0.7)
    rows, scored = decode_and_score(model, examples, decode, toks, base)
    assert rows == decode_examples(model, examples, make_decoder(decode, IDS), IDS, tgt, 2)
    assert scored == scored_candidates(model, examples, rows, base, tgt, IDS, 2)
    assert decode_and_score(model, examples, decode, toks, {}) == (rows, [])  # no rescoring
    own, system = own_and_rescored(model, examples, decode, toks, base)
    assert own == rows and system == [pick(r, c, 0.7, tgt) for r, c in zip(rows, scored)]


def test_every_setting_of_the_grid_is_scored_on_dev_with_known_answers(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # the model that ends every output at once (empty: every word wrong), and a baseline
    # whose list holds each word's reference alone: at weight 1 its ranking (all right), at
    # weight 0 the model's, which prefers its empty output (all wrong)
    folder = model_files(tmp_path)
    src, tgt = (Tokenizer(folder / f"{side}.model") for side in ("src", "tgt"))
    dev = [Example(str(i), w, w, p, src.encode(w), tgt.encode(p), True)
           for i, (w, p) in enumerate(zip(WORDS[:3], PHONES[:3], strict=True))]
    for sub in ("encoded", "base"):
        (tmp_path / sub).mkdir()
    write_examples(dev, tmp_path / "encoded/dev.jsonl")
    Predictions([PredictionRow(e.id, e.group, e.source, e.target, e.target, e.tgt, [], -1.0,
                               -0.25, 3, True, []) for e in dev]).save(tmp_path / "base/dev.jsonl")
    paths = PathsConfig(model=str(folder / "ends.pt"), tokenizer=str(folder),
                        encoded=str(tmp_path / "encoded"), baseline=str(tmp_path / "base"))
    cfg = Config(paths=paths, decode=DecodeConfig(max_len=5, batch_size=2, rescore="baseline"))
    rows, count = tune(cfg, [1, 2], [0.0, 1.0], [0.0, 1.0])
    assert count == 3
    assert [r.setting for r in rows] == [Setting(b, a, w) for b in (1, 2) for a in (0.0, 1.0)
                                         for w in (None, 0.0, 1.0)]
    # the model alone and weight 0: every output empty (WER 1, PER 1: all deletions)
    assert [(r.wer, r.per, r.wer_any) for r in rows] == [(1.0, 1.0, 1.0), (1.0, 1.0, 1.0),
                                                         (0.0, 0.0, 0.0)] * 4
    progress = re.findall(r"\[tune\] beam (\d), alpha ([\d.]+): 3 dev rows in (\d+) s\n",
                          capsys.readouterr().err)
    assert [(b, a) for b, a, _ in progress] == [("1", "0"), ("1", "1"), ("2", "0"), ("2", "1")]
    assert all(int(seconds) < 60 for _, _, seconds in progress)
    # no rescoring: no weights scored, and the baseline's files not read
    plain = dataclasses.replace(cfg, decode=dataclasses.replace(cfg.decode, rescore="none"),
                                paths=dataclasses.replace(paths, baseline=str(tmp_path / "no")))
    alone, _ = tune(plain, [1], [0.0], [0.5])
    assert [r.setting for r in alone] == [Setting(1, 0.0, None)] and alone[0].wer == 1.0
    other = dataclasses.replace(paths, model=str(folder / "other.pt"))
    with pytest.raises(TokenizerMismatch, match="the model was trained with another tokenizer"):
        tune(dataclasses.replace(cfg, paths=other), [1], [0.0], [0.5])
