"""Minimum risk training (issue 52; seqcore/training/mrt.py): the expected risk with known
answers on a tiny vocabulary, its gradient, the candidate sets, PAD masking, and the MRT
phase of the training loop (its learning rate, resume)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.sequences import make_batch
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop
from seqcore.training.mrt import (
    candidate_log_probs, candidate_sets, candidates, expected_risk, references, risk)
from tests.factories import IDS, examples, kill_after, tiny_model


# -- known answers -------------------------------------------------------------------------------
def test_risks_are_token_edits_over_the_reference_length_or_zero_one() -> None:
    assert risk((5, 6, 7), (5, 6, 7), "edit") == 0.0
    assert risk((5, 7), (5, 6, 7), "edit") == 1 / 3  # one deletion, three reference tokens
    assert risk((), (5, 6), "edit") == 1.0
    assert risk((5,), (), "edit") == 1.0  # an empty reference counts as one token
    assert risk((5, 7), (5, 6, 7), "zero_one") == 1.0 and risk((4,), (4,), "zero_one") == 0.0
    with pytest.raises(ValueError, match="train.mrt_risk 'bleu'"):
        risk((4,), (4,), "bleu")


def test_the_expected_risk_of_a_hand_made_distribution() -> None:
    p = torch.tensor([0.5, 0.3, 0.2])
    risks = torch.tensor([0.0, 1.0, 0.5])
    assert expected_risk(p.log(), risks, [3], 1.0).item() == pytest.approx(0.3 + 0.1)
    # alpha 0.5: Q proportional to sqrt(p)
    q = p.sqrt() / p.sqrt().sum()
    assert expected_risk(p.log(), risks, [3], 0.5).item() == pytest.approx(float(q @ risks))
    # Q renormalises over the candidates: unnormalised log probs give the same answer
    assert expected_risk(p.log() - 7.0, risks, [3], 1.0).item() == pytest.approx(0.4)
    # two sources, summed (the step divides by the number of sources)
    two = expected_risk(torch.tensor([0.9, 0.1, 0.25, 0.75]).log(),
                        torch.tensor([1.0, 0.0, 0.0, 1.0]), [2, 2], 1.0)
    assert two.item() == pytest.approx(0.9 + 0.75)


def test_the_gradient_moves_probability_towards_lower_risk() -> None:
    logp = torch.tensor([0.5, 0.3, 0.2]).log().requires_grad_()
    risks = torch.tensor([0.0, 1.0, 0.5])
    expected_risk(logp, risks, [3], 2.0).backward()
    q = torch.softmax(2.0 * logp.detach(), 0)
    want = 2.0 * q * (risks - (q * risks).sum())  # d E_Q[r] / d logp = alpha Q (r - E_Q[r])
    assert torch.allclose(logp.grad, want)
    assert logp.grad[0] < 0 < logp.grad[1]  # the zero-risk candidate gains


def test_candidate_sets_drop_duplicates_and_add_the_reference_once() -> None:
    found = [[((5, 6), True), ((5, 6), False), ((7,), True)], [((4,), True)]]
    refs = [(7,), (9, 9)]
    assert candidate_sets(found, refs, True) == [[((5, 6), True), ((7,), True)],
                                                 [((4,), True), ((9, 9), True)]]
    assert candidate_sets(found, refs, False)[1] == [((4,), True)]


def test_candidate_log_probs_mask_pad_and_equal_each_candidate_alone() -> None:
    model = tiny_model(enc_layers=1, dec_layers=1, max_len=16, seed=7).eval()
    pairs = examples(2, seed=4, lengths=(2, 4))
    batch = make_batch(pairs, IDS)
    sets = [[((5, 6, 7, 8), True), ((5,), True)], [((9,), False), ((4, 4), True)]]
    together = iter(candidate_log_probs(model, batch, sets, IDS).tolist())
    for pair, cands in zip(pairs, sets, strict=True):
        for cand in cands:  # the same candidate scored with its source alone: no padding
            alone = candidate_log_probs(model, make_batch([pair], IDS), [[cand]], IDS)
            assert next(together) == pytest.approx(alone.item(), abs=1e-5)
    assert references(batch, IDS) == [tuple(ex.tgt) for ex in pairs]


def test_beam_candidates_are_distinct_and_sampled_ones_come_from_the_given_generator() -> None:
    model = tiny_model(enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    batch = make_batch(examples(3, seed=4, lengths=(2, 4)), IDS)
    beam = candidates(model, batch, IDS, 3, "beam", 6, torch.Generator())
    assert model.training and len(beam) == 3 and all(len(set(r)) == len(r) for r in beam)
    drawn = [candidates(model, batch, IDS, 4, "sample", 6, torch.Generator().manual_seed(3))
             for _ in range(2)]
    assert drawn[0] == drawn[1] and all(len(r) == 4 for r in drawn[0])


# -- the MRT phase of the loop --------------------------------------------------------------
def loop(work: Path, **train: object) -> TrainLoop:
    """3 likelihood steps then 3 minimum-risk steps of a tiny model with dropout; the
    process's RNGs seeded as the train stage seeds them."""
    torch.manual_seed(11)
    random.seed(11)
    np.random.seed(11)
    cfg = TrainConfig(**{"seed": 5, "amp": "none", "batch_size": 4, "bucket_width": 2,
                         "max_steps": 3, "mrt_steps": 3, "mrt_lr": 1e-3, "schedule": "constant",
                         "lr": 3e-2, "warmup_steps": 0, "eval_every": 2, "checkpoint_every": 1,
                         "ledger_every": 1, "keep_last": 2, "threads": 1, **train})
    model = tiny_model(dropout=0.2, enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    data = (examples(12, seed=3, lengths=(1, 5)), examples(5, seed=9, lengths=(1, 5)))
    feed = Seq2SeqFeed(data, IDS, SequenceConfig(max_tgt_len=8), cfg)
    return TrainLoop(model, cfg, feed, CheckpointDir(work, cfg.keep_last), {"task": "s2s"}, 16)


def text(run: TrainLoop) -> list[tuple[str, ...]]:
    return [tuple(map(str, e.row())) for e in run.state.history]


@pytest.mark.parametrize("search", ["beam", "sample"])
def test_the_mrt_steps_follow_the_likelihood_steps_at_their_own_rate(
        tmp_path: Path, search: str) -> None:
    run = loop(tmp_path, mrt_search=search)
    run.resume()
    run.run(lambda entry, tokens_per_s: None)
    rows = run.state.history
    assert [r.step for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r.lr for r in rows] == [3e-2] * 3 + [1e-3] * 3
    # an expected risk is in [0, 1] per source (edit risk of these short words stays <= 1
    # with the reference among the candidates)
    assert all(0 <= r.loss <= 2 for r in rows[3:]) and all(math.isfinite(r.loss) for r in rows)
    assert not math.isnan(rows[-1].dev_nll)  # the last step (6) evaluates, not step 3


def test_a_killed_mrt_run_resumes_to_the_same_weights_and_log(tmp_path: Path) -> None:
    straight = loop(tmp_path / "straight", mrt_search="sample")
    straight.resume()
    straight.run(lambda entry, tokens_per_s: None)
    first = loop(tmp_path / "killed", mrt_search="sample")
    first.resume()
    kill_after(first, 4)  # inside the MRT phase: its sampling generator is checkpointed
    again = loop(tmp_path / "killed", mrt_search="sample")
    assert again.resume() == "ckpt-00000004.pt"
    again.run(lambda entry, tokens_per_s: None)
    assert text(straight) == text(again)
    assert all(torch.equal(a, b) for a, b in zip(straight.model.parameters(),
                                                 again.model.parameters()))
