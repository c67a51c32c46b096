"""Encoded examples as padded, teacher-forced batches, and teacher-forced passes of a model
over them: shared by training (seqcore/training/) and evaluation (seqcore/metrics/), so
neither imports the other."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from seqcore.contract import SpecialIds, TeacherForcing, pad_batch, shift_targets
from seqcore.data.examples import Example
from seqcore.models.base import EncoderDecoder


@dataclass(frozen=True)
class Batch:
    """A padded batch. src, src_mask: (B, S); tf: teacher-forcing inputs/labels (B, T)."""

    src: torch.Tensor
    src_mask: torch.Tensor
    tf: TeacherForcing

    @property
    def tokens(self) -> int:
        """Valid label tokens (EOS included, PAD excluded)."""
        return int(self.tf.mask.sum())

    def to(self, device: torch.device) -> Batch:
        """The same batch on ``device`` (itself when already there)."""
        if self.src.device == device:
            return self
        tf = TeacherForcing(self.tf.inputs.to(device), self.tf.labels.to(device),
                            self.tf.mask.to(device))
        return Batch(self.src.to(device), self.src_mask.to(device), tf)


def make_batch(examples: list[Example], ids: SpecialIds) -> Batch:
    """Pad sources and build the teacher-forcing shift for the targets."""
    src, src_mask = pad_batch([ex.src for ex in examples], ids.pad)
    tf = shift_targets([ex.tgt for ex in examples], ids, [ex.has_eos for ex in examples])
    return Batch(src, src_mask, tf)


def teacher_forced_passes(
    model: EncoderDecoder, examples: list[Example], ids: SpecialIds, batch_size: int
) -> Iterator[tuple[list[Example], Batch, torch.Tensor]]:
    """Teacher-forced forward passes over examples in file order, in eval mode.

    The caller decides about gradients (wrap the loop in ``torch.no_grad()``); the model's
    train/eval mode is restored when the iteration ends.

    Yields:
        (the examples of the batch, the padded batch on the model's device, logits (B, T, V)).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            b = make_batch(chunk, ids).to(device)
            yield chunk, b, model(b.src, b.src_mask, b.tf.inputs)
    finally:
        model.train(was_training)
