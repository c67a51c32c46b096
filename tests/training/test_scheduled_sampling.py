"""Mixing model tokens into decoder inputs (seqcore/training/scheduled_sampling.py)."""

from __future__ import annotations

import pytest
import torch

from seqcore.sequences import make_batch
from seqcore.training.scheduled_sampling import mix_model_tokens
from tests.factories import IDS, examples


def test_scheduled_sampling_draws_on_the_cpu_and_mixes_on_the_batchs_device() -> None:
    tf = make_batch(examples(3), IDS).tf
    meta = type(tf)(tf.inputs.to("meta"), tf.labels.to("meta"), tf.mask.to("meta"))
    out = mix_model_tokens(meta, torch.zeros_like(meta.inputs), 0.5,
                           torch.Generator().manual_seed(0))
    assert out.device.type == "meta" and out.shape == tf.inputs.shape


def test_scheduled_sampling_refusal_says_the_predictions_must_be_detached() -> None:
    b = make_batch(examples(2), IDS)
    preds = torch.zeros(b.tf.inputs.shape, requires_grad=True)
    with pytest.raises(ValueError, match=r"^scheduled-sampling predictions must be detached$"):
        mix_model_tokens(b.tf, preds, 0.5, torch.Generator())
