"""Batches (seqcore/sequences.py): device moves and truncated targets."""
from __future__ import annotations

import torch

from seqcore.contract import IGNORE_INDEX
from seqcore.data.examples import Example
from seqcore.sequences import Batch, TeacherForcing, make_batch
from tests.factories import IDS


def test_a_batch_moved_to_another_device_moves_every_tensor_and_keeps_its_shapes() -> None:
    tf = TeacherForcing(torch.ones(2, 3, dtype=torch.long), torch.full((2, 3), 5),
                        torch.ones(2, 3, dtype=torch.bool))
    batch = Batch(torch.arange(8).view(2, 4), torch.ones(2, 4, dtype=torch.bool), tf)
    assert batch.to(torch.device("cpu")) is batch
    moved = batch.to(torch.device("meta"))  # a device without storage, on any machine
    tensors = [moved.src, moved.src_mask, moved.tf.inputs, moved.tf.labels, moved.tf.mask]
    assert all(t.device.type == "meta" for t in tensors)
    assert [tuple(t.shape) for t in tensors] == [(2, 4), (2, 4), (2, 3), (2, 3), (2, 3)]
    assert [t.dtype for t in tensors] == [torch.long, torch.bool, torch.long, torch.long,
                                          torch.bool]


def test_a_truncated_target_in_a_batch_keeps_no_eos_label() -> None:
    kept = Example("a", "a", "", "", [5, 6], [7, 8], True)
    cut = Example("b", "b", "", "", [5, 6], [7, 8], False)
    labels = make_batch([kept, cut], IDS).tf.labels.tolist()
    assert labels == [[7, 8, IDS.eos], [7, 8, IGNORE_INDEX]]
