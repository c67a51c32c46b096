"""The graphed step's padding (seqcore/training/graphs.py); the step itself, eager on the CPU
and captured on CUDA, is tested with the loop (tests/training/test_loop.py)."""
from __future__ import annotations

import pytest
import torch

from seqcore.contract import IGNORE_INDEX
from seqcore.sequences import make_batch
from seqcore.training.graphs import pad_to_multiple, padded_length
from tests.factories import IDS, examples


@pytest.mark.parametrize(("length", "limit", "padded"), [
    (1, None, 8), (8, None, 8), (9, None, 16), (15, 16, 16), (17, 20, 20), (20, 20, 20),
    (33, 33, 33), (26, 33, 32)])
def test_lengths_round_up_to_a_multiple_of_eight_within_the_position_limit(
        length: int, limit: int | None, padded: int) -> None:
    assert padded_length(length, limit) == padded


def test_padding_adds_pad_ids_false_masks_and_ignored_labels_and_no_token() -> None:
    batch = make_batch(examples(4, seed=2, lengths=(3, 3)) + examples(1, lengths=(10, 10)), IDS)
    padded = pad_to_multiple(batch, IDS.pad, 16)
    s, t = batch.src.shape[1], batch.tf.labels.shape[1]
    assert padded.src.shape[1] == padded_length(s, 16) > s
    assert padded.tf.labels.shape[1] == padded_length(t, 16) > t
    assert torch.equal(padded.src[:, :s], batch.src) and (padded.src[:, s:] == IDS.pad).all()
    assert not padded.src_mask[:, s:].any() and not padded.tf.mask[:, t:].any()
    assert (padded.tf.labels[:, t:] == IGNORE_INDEX).all()
    assert (padded.tf.inputs[:, t:] == IDS.pad).all()
    assert (padded.tokens, padded.targets) == (batch.tokens, batch.targets)
    # within a position limit below the rounded length, and one position short of a multiple
    assert pad_to_multiple(batch, IDS.pad, 12).src.shape[1] == 12
    short = make_batch(examples(2, seed=2, lengths=(15, 15)), IDS)
    assert pad_to_multiple(short, IDS.pad, None).src.shape[1] == 16
