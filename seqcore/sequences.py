"""Encoded examples as padded, teacher-forced batches, and teacher-forced passes of a model
over them: shared by training (seqcore/training/) and evaluation (seqcore/metrics/), so
neither imports the other."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from seqcore.contract import SpecialIds, TeacherForcing, pad_batch, shift_targets
from seqcore.data.examples import Example
from seqcore.models.base import EncoderDecoder


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``. A host tensor goes to a GPU through pinned memory without waiting:
    the copy queues behind the GPU's work instead of the host waiting for it (a plain copy
    from pageable memory synchronises the stream; issue 53)."""
    if t.device == device:
        return t
    cuda = device.type == "cuda" and t.device.type == "cpu"
    return (t.pin_memory() if cuda else t).to(device, non_blocking=cuda)


@dataclass(frozen=True)
class Batch:
    """A padded batch. src, src_mask: (B, S); tf: teacher-forcing inputs/labels (B, T).

    ``counted``: (tokens, targets) counted on the host before the batch moved to a GPU, so
    reading them there waits for nothing (issue 53); None on the CPU, where counting is free.
    """

    src: torch.Tensor
    src_mask: torch.Tensor
    tf: TeacherForcing
    counted: tuple[int, int] | None = field(default=None, compare=False)

    @property
    def tokens(self) -> int:
        """Valid label tokens (EOS included, PAD excluded)."""
        return self.counted[0] if self.counted else int(self.tf.mask.sum())

    @property
    def targets(self) -> int:
        """Rows with at least one valid label token (the sequence-mean denominator)."""
        return self.counted[1] if self.counted else int(self.tf.mask.any(1).sum())

    def to(self, device: torch.device) -> Batch:
        """The same batch on ``device`` (itself when already there), moved by ``to_device``;
        on a GPU its counts were taken on the host first."""
        if self.src.device == device:
            return self
        tf = TeacherForcing(*(to_device(t, device) for t in
                               (self.tf.inputs, self.tf.labels, self.tf.mask)))
        return Batch(to_device(self.src, device), to_device(self.src_mask, device), tf,
                     (self.tokens, self.targets) if device.type == "cuda" else None)


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
