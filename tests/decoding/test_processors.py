"""Logits processors: each rule checked on a hand-computed table."""
from __future__ import annotations

import math

import pytest
import torch

from seqcore.decoding.processors import (
    ban_tokens, min_length, no_repeat_ngram, temperature, top_k, top_p)
from seqcore.decoding.sampling import inverse_cdf

def kept(scores: torch.Tensor) -> list[list[int]]:
    return [torch.isfinite(row).nonzero()[:, 0].tolist() for row in scores]


@pytest.mark.parametrize(("p", "expected"), [
    (0.3, [2]),  # 0.5 alone reaches 0.3
    (0.7, [2, 0]),  # 0.5 < 0.7 <= 0.5 + 0.25: the second token is needed to reach p
    (0.8, [2, 0, 3]),  # 0.75 < 0.8: a third is needed
    (0.95, [2, 0, 3, 1]),
    (1.0, [0, 1, 2, 3]),
])
def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p(p: float, expected: list[int]) -> None:
    probs = torch.tensor([[0.25, 0.0625, 0.5, 0.1875]])
    assert kept(top_p(probs.log(), p)) == [sorted(expected)]


def test_top_p_breaks_ties_by_the_lower_token_id() -> None:
    scores = torch.tensor([[0.0, 1.0, 1.0, 0.0]]).log_softmax(-1)  # tokens 1, 2 tie
    assert kept(top_p(scores, 0.3)) == [[1]]


def test_top_k_keeps_exactly_k_with_ties_to_the_lower_id() -> None:
    scores = torch.tensor([[0.1, 0.7, 0.7, 0.3, 0.7], [5.0, 4.0, 3.0, 2.0, 1.0]])
    assert kept(top_k(scores, 2)) == [[1, 2], [0, 1]]
    assert kept(top_k(scores, 1)) == [[1], [0]]
    assert torch.equal(top_k(scores, 0), scores)
    assert top_k(scores, 2)[1, 1] == 4.0  # kept scores are untouched


def test_temperature_divides_logits() -> None:
    scores = torch.tensor([[2.0, -4.0]])
    assert temperature(scores, 2.0).tolist() == [[1.0, -2.0]]
    assert temperature(scores, 1.0) is scores
    with pytest.raises(ValueError):
        temperature(scores, 0.0)


def test_min_length_masks_only_eos_and_only_before_min_len() -> None:
    scores = torch.zeros(2, 5)
    assert kept(min_length(scores, 1, 2, eos=3)) == [[0, 1, 2, 4]] * 2
    assert torch.equal(min_length(scores, 2, 2, eos=3), scores)


def test_no_repeat_ngram_bans_tokens_completing_a_seen_ngram() -> None:
    prefix = torch.tensor([[5, 6, 7, 5, 6], [5, 6, 7, 5, 8]])
    scores = torch.zeros(2, 9)
    # row 0 ends in (5, 6): seen followed by 7 -> 7 banned; row 1 ends in (5, 8): unseen
    assert kept(no_repeat_ngram(scores, prefix, 3)) == [[0, 1, 2, 3, 4, 5, 6, 8], list(range(9))]
    # bigrams: row 0 ends in 6, which was followed by 7; row 1 ends in 8, never seen before
    assert kept(no_repeat_ngram(scores, prefix, 2))[0] == [0, 1, 2, 3, 4, 5, 6, 8]
    assert kept(no_repeat_ngram(scores, prefix, 1))[1] == [0, 1, 2, 3, 4]  # no token twice
    assert torch.equal(no_repeat_ngram(scores, prefix, 0), scores)


def test_ban_tokens_masks_the_given_columns() -> None:
    assert kept(ban_tokens(torch.zeros(1, 4), [0, 2])) == [[1, 3]]


def test_inverse_cdf_draws_by_cumulative_probability_and_never_a_masked_token() -> None:
    scores = torch.tensor([0.25, 0.0, 0.5, 0.25]).log().expand(5, 4)
    u = torch.tensor([0.0, 0.2499, 0.26, 0.74, 0.9999])
    assert inverse_cdf(scores, u).tolist() == [0, 0, 2, 2, 3]
    assert math.isinf(float(scores[0, 1]))
    masked = torch.tensor([[-math.inf, 0.0, -math.inf]])
    assert inverse_cdf(masked, torch.tensor([0.0])).tolist() == [1]


def test_top_p_stops_at_the_token_whose_mass_reaches_p_exactly() -> None:
    scores = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    assert torch.softmax(scores, -1)[0, 0] == 0.5  # the mass is exact in float32
    assert (~torch.isinf(top_p(scores, 0.5))).tolist() == [[True, False, False]]


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5, 2.0])
def test_top_p_outside_0_to_1_is_refused_naming_the_range_and_the_value(p: float) -> None:
    with pytest.raises(ValueError, match=rf"^top_p must be in \(0, 1\], got {p}$"):
        top_p(torch.zeros(1, 3), p)


def test_no_repeat_bans_the_token_that_would_repeat_the_only_generated_ngram() -> None:
    out = no_repeat_ngram(torch.zeros(1, 8), torch.tensor([[5, 5]]), 2)  # t == n == 2
    assert torch.isinf(out[0, 5]) and int(torch.isinf(out).sum()) == 1


def test_a_temperature_of_0_or_less_is_refused_naming_the_value() -> None:
    with pytest.raises(ValueError, match=r"^temperature must be > 0, got 0$"):
        temperature(torch.zeros(1, 3), 0)
