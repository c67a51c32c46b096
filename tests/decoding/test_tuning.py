"""The dev tuning table's rules (seqcore/decoding/tuning.py): the choice and its ties, the
wider-beam check, and the table's files (issue 52, item 4)."""
from __future__ import annotations

import math

import pytest

from seqcore.decoding.tuning import (
    Scored, Setting, choose, table_csv, table_markdown, wider_beam_checks)


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
    with pytest.raises(ValueError, match="no setting of the grid has a dev WER and PER"):
        choose([nan])


def test_a_wider_beam_that_scores_worse_than_a_narrower_one_is_named() -> None:
    rows = [row(1, 0.6, 0.6, 0.30, 0.07), row(3, 0.6, 0.6, 0.27, 0.06),
            row(8, 0.6, 0.6, 0.29, 0.06), row(5, 0.6, 0.6, 0.28, 0.06),
            row(1, 0.6, None, 0.34, 0.08), row(5, 0.6, None, 0.33, 0.08)]
    # beams 5 and 8 both lose to the best narrower one (3); the model alone improves with beam
    assert wider_beam_checks(rows) == [
        "alpha 0.6, rescoring weight 0.6: beam 5 (28.00 %), 8 (29.00 %) worse than beam 3 "
        "(27.00 %) on dev WER; a wider beam is not always better"]


def test_the_table_marks_the_chosen_row_and_lists_the_checks() -> None:
    rows = [row(1, 0.0, None, 0.5, 0.25), row(3, 0.0, None, 0.25, 0.125)]
    text = table_markdown(rows, rows[1], ["a check"], 1234)
    assert text.splitlines()[0] == "# Decode settings on dev (1,234 rows)"
    assert "| 3 | 0 | none | 25.00 | 25.00 | 12.50 | **chosen** |" in text
    assert "| 1 | 0 | none | 50.00 | 50.00 | 25.00 |  |" in text
    assert text.endswith("## Checks\n\n- a check\n")
    assert table_csv(rows).splitlines() == ["beam,alpha,rescore_weight,wer,wer_any_ref,per",
                                            "1,0.0,,0.5,0.5,0.25", "3,0.0,,0.25,0.25,0.125"]
