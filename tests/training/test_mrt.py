"""Minimum risk training (issue 52; seqcore/training/mrt.py): the expected risk with known
answers on a tiny vocabulary, its gradient, the candidate sets and PAD masking (the MRT phase
of the loop: test_loop.py)."""

from __future__ import annotations

import pytest
import torch

from seqcore.sequences import make_batch
from seqcore.training.mrt import (
    candidate_log_probs, candidate_sets, candidates, expected_risk, mrt_loss, references, risk)
from tests.factories import IDS, examples, tiny_model


def test_risks_are_token_edits_over_the_reference_length_or_zero_one() -> None:
    assert risk((5, 6, 7), (5, 6, 7), "edit") == 0.0
    assert risk((5, 7), (5, 6, 7), "edit") == 1 / 3  # one deletion, three reference tokens
    assert risk((), (5, 6), "edit") == 1.0
    assert risk((5,), (), "edit") == 1.0  # an empty reference counts as one token
    assert risk((5, 7), (5, 6, 7), "zero_one") == 1.0 and risk((4,), (4,), "zero_one") == 0.0
    with pytest.raises(ValueError, match="train.mrt_risk 'bleu': must be one of edit, zero_one"):
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
    # three sources of 1, 2 and 2 candidates: each window starts where the last one ended
    three = expected_risk(torch.tensor([1.0, 0.5, 0.5, 0.2, 0.8]).log(),
                          torch.tensor([0.3, 1.0, 0.0, 0.0, 1.0]), [1, 2, 2], 1.0)
    assert three.item() == pytest.approx(0.3 + 0.5 + 0.8)


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
    # by hand: a candidate with EOS scores its tokens and EOS, one cut at the cap its tokens
    [source] = pairs[:1]
    one = make_batch([source], IDS)
    inputs = torch.tensor([[IDS.bos, 5, 6]])
    with torch.no_grad():
        logp = torch.log_softmax(model(one.src, one.src_mask, inputs).float(), -1)[0]
    with_eos = logp[0, 5] + logp[1, 6] + logp[2, IDS.eos]
    cut = logp[0, 5] + logp[1, 6]
    got = candidate_log_probs(model, one, [[((5, 6), True), ((5, 6), False)]], IDS)
    assert got.tolist() == pytest.approx([with_eos.item(), cut.item()], abs=1e-5)


def test_beam_candidates_are_distinct_and_sampled_ones_come_from_the_given_generator() -> None:
    model = tiny_model(enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    batch = make_batch(examples(3, seed=4, lengths=(2, 4)), IDS)
    beam = candidates(model, batch, IDS, 3, "beam", 6, torch.Generator())
    assert model.training and len(beam) == 3 and all(len(set(r)) == len(r) for r in beam)
    drawn = [candidates(model, batch, IDS, 4, "sample", 6, torch.Generator().manual_seed(3))
             for _ in range(2)]
    assert drawn[0] == drawn[1] and all(len(r) == 4 for r in drawn[0])


def test_the_mrt_loss_searches_as_asked_and_adds_the_reference_when_asked() -> None:
    model = tiny_model(enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    pairs = examples(3, seed=4, lengths=(2, 4))
    batch = make_batch(pairs, IDS)
    refs = references(batch, IDS)
    for search in ("beam", "sample"):
        for with_reference in (True, False):
            gen, again = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
            out = mrt_loss(model, batch, IDS, 3, search, with_reference, "edit", 1.0, 6, gen)
            sets = candidate_sets(candidates(model, batch, IDS, 3, search, 6, again), refs,
                                  with_reference)
            assert out.total.item() == pytest.approx(expected_risk(
                candidate_log_probs(model, batch, sets, IDS),
                torch.tensor([risk(t, r, "edit") for c, r in zip(sets, refs) for t, _ in c]),
                [len(c) for c in sets], 1.0).item(), abs=1e-6)
            assert all((ref in dict(c)) >= with_reference for c, ref in zip(sets, refs))
            # beam search draws nothing from the generator; sampling draws from it
            assert torch.equal(gen.get_state(), torch.Generator().manual_seed(5).get_state()) \
                == (search == "beam")
