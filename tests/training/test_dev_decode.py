"""Dev decoding while training (issue 52; seqcore/training/dev_decode.py): the fixed sample,
the rates with known answers, the selection's tie rule, and that it changes no training state."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import torch

from seqcore.artifacts.train_log import DECODE_COLUMNS, StepLog
from seqcore.config import SequenceConfig, TrainConfig
from seqcore.data.examples import Example
from seqcore.ledger import first_difference
from seqcore.training.checkpoint import Checkpoint, CheckpointDir, ledger_files
from seqcore.training.dev_decode import (
    best_row, decode_sample, dev_sample, score, selection_key, shown_lines)
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop
from seqcore.training.select import dev_figures
from tests.factories import IDS, examples, kill_after, tiny_model


def ex(i: int, group: str, tgt: list[int], src: list[int] | None = None) -> Example:
    return Example(str(i), group, f"w{group}", " ".join(map(str, tgt)), src or [4, 5], tgt, True)


# -- the sample and the rates, known answers -------------------------------------------------------
def test_the_sample_is_evenly_spaced_whole_words_with_the_first_reference_first() -> None:
    dev = [ex(0, "a", [5]), ex(1, "b", [6]), ex(2, "b", [7, 8]), ex(3, "c", [9]),
           ex(4, "d", [4]), ex(5, "e", [5, 5]), ex(6, "f", [6])]  # 6 words, "b" has two refs
    state = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    sample = dev_sample(dev, 3)
    assert sample.sources == ("wa", "wc", "we")  # words 0, 2, 4 of 6 (i * 6 // 3)
    assert torch.equal(state[0], torch.get_rng_state()) and state[1] == random.getstate()
    assert (state[2] == np.random.get_state()[1]).all()  # no random number drawn
    both = dev_sample(dev, 2)
    assert both.sources == ("wa", "wd")
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


# -- inside the training loop -------------------------------------------------------------------

def loop(work: Path, max_steps: int = 6, **train: object) -> TrainLoop:
    """A tiny run with dropout (so any stray draw from the global RNG would move the weights),
    a dev set of 7 words, an evaluation every 2 steps and a ledger state after every step;
    the process's RNGs seeded first, as the train stage seeds them."""
    torch.manual_seed(11)
    random.seed(11)
    np.random.seed(11)
    cfg = TrainConfig(**{"seed": 5, "amp": "none", "batch_size": 4, "bucket_width": 2,
                         "max_steps": max_steps, "schedule": "constant", "lr": 3e-2,
                         "warmup_steps": 0, "eval_every": 2, "checkpoint_every": 1,
                         "ledger_every": 1, "keep_last": 2, "threads": 1, **train})
    model = tiny_model(dropout=0.2, enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    data = (examples(12, seed=3, lengths=(1, 5)), examples(7, seed=9, lengths=(1, 5)))
    feed = Seq2SeqFeed(data, IDS, SequenceConfig(max_tgt_len=8), cfg)
    return TrainLoop(model, cfg, feed, CheckpointDir(work, cfg.keep_last), {"task": "s2s"}, 16)


def without_decoding(history: list[list[object]]) -> list[tuple[str, ...]]:
    """History rows as the log's text (NaN equal to NaN), without the dev decoding's cells."""
    n = len(StepLog.__dataclass_fields__) - len(DECODE_COLUMNS)
    return [tuple(map(str, r[:n])) for r in history]


def log_text(run: TrainLoop) -> list[tuple[str, ...]]:
    return [tuple(map(str, e.row())) for e in run.state.history]


def test_decoding_on_or_off_leaves_every_ledger_state_and_the_log_the_same(tmp_path: Path) -> None:
    runs = []
    for words in (300, 0):  # each run built, then trained, from the same seeded RNGs
        run = loop(tmp_path / str(words), dev_decode_words=words)
        run.resume()
        run.run(lambda entry, tokens_per_s: None)
        runs.append(run)
    on, off = runs
    decoded = [e for e in on.state.history if not math.isnan(e.dev_wer)]
    assert [e.step for e in decoded] == [2, 4, 6]  # every evaluation, and only there
    assert all(math.isnan(e.dev_wer) for e in off.state.history)
    files = {name: [p.name for p in ledger_files(run.ckpt.ledger)]
             for name, run in (("on", on), ("off", off))}
    assert files["on"] == files["off"] and len(files["on"]) == 7
    for name in files["on"]:
        a, b = (Checkpoint.load(run.ckpt.ledger / name).payload for run in (on, off))
        a_history, b_history = a.pop("history"), b.pop("history")
        assert first_difference(a, b) is None, name  # weights, optimizer, RNGs, data cursor
        assert without_decoding(a_history) == without_decoding(b_history)


def test_a_killed_run_with_dev_decoding_resumes_to_the_same_log_and_weights(
        tmp_path: Path) -> None:
    straight = loop(tmp_path / "straight")
    straight.resume()
    straight.run(lambda entry, tokens_per_s: None)
    first = loop(tmp_path / "killed")  # the RNGs it resumes come from the checkpoint
    first.resume()
    kill_after(first, 3)  # between evaluations 2 and 4
    again = loop(tmp_path / "killed")
    assert again.resume() == "ckpt-00000003.pt"
    again.run(lambda entry, tokens_per_s: None)
    assert log_text(straight) == log_text(again)  # the dev decoding's cells included
    assert all(not math.isnan(e.dev_wer) for e in again.state.history if e.step % 2 == 0)
    for a, b in zip(straight.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)


def test_select_best_dev_wer_exports_the_lowest_wer_step_as_best_pt(tmp_path: Path) -> None:
    run = loop(tmp_path, max_steps=8, select="best_dev_wer")
    run.resume()
    run.run(lambda entry, tokens_per_s: None)
    chosen = best_row(run.state.history, "best_dev_wer")
    assert chosen is not None
    best = run.ckpt.best_weights(chosen.step)
    assert best is not None and best.path.name == "best.pt" and best.checkpoint.step == chosen.step
    assert chosen.dev_wer == min(e.dev_wer for e in run.state.history
                                 if not math.isnan(e.dev_wer))


def test_decoding_restores_training_mode_and_reads_no_random_number() -> None:
    model = tiny_model(dropout=0.2, enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    sample = dev_sample(examples(5, seed=9, lengths=(1, 5)), 5)
    before = torch.get_rng_state()
    scores = decode_sample(model, sample, IDS, 8, 1, 2)
    assert model.training and torch.equal(before, torch.get_rng_state())
    assert len(scores.outputs) == 5 and 0 <= scores.wer <= 1
    beam = decode_sample(model, sample, IDS, 8, 3, 2)
    assert len(beam.outputs) == 5
    lines = shown_lines(sample, scores, 2, lambda ids: " ".join(map(str, ids)))
    assert len(lines) == 2 and all(" -> " in line and "reference" in line for line in lines)
