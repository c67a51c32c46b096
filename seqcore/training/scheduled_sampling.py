"""Scheduled sampling: mixing the model's own predictions into the decoder inputs."""

from __future__ import annotations

import torch

from seqcore.contract import TeacherForcing
from seqcore.sequences import to_device


def mix_model_tokens(
    tf: TeacherForcing, predictions: torch.Tensor, probability: float, generator: torch.Generator
) -> torch.Tensor:
    """Scheduled sampling: replace some decoder inputs by the model's own previous predictions.

    Input position t+1 is the token predicted at position t (from a first, teacher-forced
    pass) with the given probability. BOS (position 0) and PAD positions are never replaced;
    labels are untouched. ``predictions`` must carry no gradient: the choice is discrete.

    Args:
        tf: the teacher-forcing batch, inputs (B, T).
        predictions: (B, T) token chosen at each position (argmax or sampled).
        probability: chance of replacing each eligible input.

    Returns:
        (B, T) mixed decoder inputs.
    """
    if predictions.requires_grad:
        raise ValueError("scheduled-sampling predictions must be detached")
    shifted = torch.cat([tf.inputs[:, :1], predictions[:, :-1]], dim=1)  # (B, T)
    eligible = tf.mask.clone()
    eligible[:, 0] = False
    # The generator is a CPU one (its state is checkpointed); the draw then moves to the batch
    # without the host waiting for the device.
    draw = to_device(torch.rand(tf.inputs.shape, generator=generator), tf.inputs.device)
    draw = draw < probability
    return torch.where(eligible & draw, shifted, tf.inputs)
