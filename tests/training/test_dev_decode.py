"""Dev decoding while training (issue 52; seqcore/training/dev_decode.py): the fixed sample, the
rates with known answers and the selection's tie rule (its runs inside the loop: test_loop.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import torch

from seqcore.artifacts.train_log import StepLog
from seqcore.data.examples import Example
from seqcore.training.dev_decode import (
    DevScores, best_row, decode_sample, dev_sample, score, selection_key, shown_lines)
from seqcore.training.select import dev_figures
from tests.factories import IDS, examples, tiny_model


def ex(i: int, group: str, tgt: list[int]) -> Example:
    return Example(str(i), group, f"w{group}", " ".join(map(str, tgt)), [4, 5], tgt, True)


def test_the_sample_is_evenly_spaced_whole_words_with_the_first_reference_first() -> None:
    dev = [ex(0, "a", [5]), ex(1, "b", [6]), ex(2, "b", [7, 8]), ex(3, "c", [9]),
           ex(4, "d", [4]), ex(5, "e", [5, 5]), ex(6, "f", [6])]  # 6 words, "b" has two refs
    state = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    sample = dev_sample(dev, 3)
    assert sample.sources == ("wa", "wc", "we")  # words 0, 2, 4 of 6 (i * 6 // 3)
    assert torch.equal(state[0], torch.get_rng_state()) and state[1] == random.getstate()
    assert (state[2] == np.random.get_state()[1]).all()  # no random number drawn
    assert dev_sample(dev, 2).sources == ("wa", "wd")
    assert dev_sample(dev, 1).sources == ("wa",)  # word 0 alone
    everything = dev_sample(dev, 50)  # more than the split holds: every word, once
    assert everything.sources == ("wa", "wb", "wc", "wd", "we", "wf")
    assert everything.references[1] == ((6,), (7, 8))  # the word's references, file order
    assert len(dev_sample(dev, 0)) == 0


def test_the_rates_have_known_answers() -> None:
    refs = (((5, 6, 7),), ((8, 9), (8,)), ((4,),), ((6, 6),))
    outputs = [(5, 6, 7), (8,), (), (6, 5, 6)]
    wer, per, exact = score(outputs, refs)
    # first references: right, wrong (8 != 8 9), wrong (empty), wrong (one insertion)
    assert wer == 3 / 4
    assert per == (0 + 1 + 1 + 1) / (3 + 2 + 1 + 2)  # edits over first-reference tokens
    assert exact == 2 / 4  # (8,) is the second reference of its word
    assert all(math.isnan(v) for v in score([], ()))  # undefined, never 0
    assert score([(4,)], (((4,), (5,)),)) == (0.0, 0.0, 1.0)
    assert score([(5,)], (((4,), (5,)),))[2] == 1.0 and score([(6,)], (((4,), (5,)),))[2] == 0.0
    assert math.isnan(score([(4,)], (((),),))[1])  # first references without a token: no PER


def test_selection_prefers_the_lowest_figure_then_the_other_rate_then_nll_then_the_earlier_step(
        ) -> None:
    def row(step: int, nll: float, wer: float, per: float) -> StepLog:
        return StepLog(step, 0, 0.1, 1.0, 10, 1.0, 0, nll, 0.0, wer, per, 1 - wer)

    history = [row(1, 2.0, math.nan, math.nan), row(2, 1.5, 0.4, 0.10), row(3, 1.4, 0.3, 0.12),
               row(4, 1.6, 0.3, 0.09), row(5, 1.3, 0.3, 0.09), row(6, 1.3, 0.3, 0.09),
               StepLog(7, 0, 0.1, 1.0, 10, 1.0, 0, math.nan, 0.0)]
    assert best_row(history, "best_dev_wer").step == 5  # 0.3 four times; PER 0.09; NLL 1.3
    assert best_row(history, "best_dev_per").step == 5
    assert best_row(history, "best_dev").step == 5  # the first of the equal NLLs
    assert best_row(history, "last") is None and selection_key(history[0], "best_dev_wer") is None
    assert best_row(history[:3], "best_dev_per").step == 2
    figures = dev_figures(history, 3)
    assert figures == {"best_dev_wer": 0.3, "best_dev_wer_step": 5, "selected_dev_wer": 0.3,
                       "selected_dev_per": 0.12}
    assert math.isnan(dev_figures(history, 7)["selected_dev_wer"])
    absent = dev_figures(history, 99)  # a step the log lacks (a log the audit reads)
    assert math.isnan(absent["selected_dev_wer"]) and math.isnan(absent["selected_dev_per"])


def test_decoding_restores_training_mode_and_reads_no_random_number() -> None:
    model = tiny_model(dropout=0.2, enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    sample = dev_sample(examples(5, seed=9, lengths=(1, 5)), 5)
    before = torch.get_rng_state()
    scores = decode_sample(model, sample, IDS, 8, 1, 2)
    assert model.training and torch.equal(before, torch.get_rng_state())
    assert len(scores.outputs) == 5 and 0 <= scores.wer <= 1
    assert len(decode_sample(model, sample, IDS, 8, 3, 2).outputs) == 5
    lines = shown_lines(sample, scores, 2, lambda ids: " ".join(map(str, ids)))
    assert len(lines) == 2 and all(" -> " in line and "reference" in line for line in lines)


def test_the_shown_words_are_evenly_spaced_with_their_output_and_whether_it_is_the_reference(
        ) -> None:
    dev = [ex(i, g, [5 + i]) for i, g in enumerate("abc")]
    sample = dev_sample(dev, 3)
    scores = DevScores(0.5, 0.5, 0.5, ((5,), (), (9,)))  # right, empty, wrong
    render = " ".join  # ids as text: a space between
    lines = shown_lines(sample, scores, 3, lambda ids: render(map(str, ids)))
    assert lines == ["wa -> 5 (= reference 5)", "wb -> (empty) (!= reference 6)",
                     "wc -> 9 (!= reference 7)"]
    assert shown_lines(sample, scores, 9, lambda ids: render(map(str, ids))) == lines  # all
    assert shown_lines(sample, scores, 1, lambda ids: "x") == ["wa -> x (= reference 5)"]
    assert shown_lines(sample, scores, 0, lambda ids: "x") == []
