"""Length-bucketed batches (seqcore/data/batching.py)."""
from __future__ import annotations

import pytest

from seqcore.data.batching import BucketSampler, epoch_batches


def test_a_bucket_width_of_1_groups_exactly_equal_lengths() -> None:
    lengths = [2, 3, 2, 3, 2, 3, 2, 3]  # one bucket of width 2, two of width 1
    for epoch in range(3):
        batches = epoch_batches(lengths, 4, 1, seed=9, epoch=epoch)
        assert sorted(len({lengths[i] for i in b}) for b in batches) == [1, 1]


def test_a_sampler_needs_examples_and_a_rank_inside_its_world() -> None:
    with pytest.raises(ValueError, match="^no training examples$"):
        BucketSampler([], 4, 1, 0)
    with pytest.raises(ValueError, match="^rank 2 outside world of 2$"):
        BucketSampler([1, 2], 1, 1, 0, rank=2, world=2)
