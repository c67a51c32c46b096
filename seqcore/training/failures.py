"""How a training step fails in one line: too many non-finite steps in a row, or a step out
of memory (issue 53). A stage prints either alone and exits with status 1 (seqcore.errors)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from seqcore.errors import OneLineError


class TooManySkippedSteps(OneLineError, RuntimeError):
    """Training produced non-finite gradients too many steps in a row."""


class TrainingOutOfMemory(OneLineError, RuntimeError):
    """A step ran out of (GPU or CPU) memory: the message names the micro-batch's shape and
    the settings that shrink it."""


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation failure: CUDA's OutOfMemoryError, or the CPU
    allocator's RuntimeError."""
    return isinstance(err, torch.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and "can't allocate memory" in str(err))


def batch_shape(batch: Any) -> tuple[str, str]:
    """A micro-batch's padded shape in words (pairs: sources and targets; lm: streams), and
    the keys that bound its length."""
    if hasattr(batch, "src"):
        (b, s), (_, t) = batch.src.shape, batch.tf.labels.shape
        return (f"{b} sources x {s} positions and {b} targets x {t} positions",
                "sequence.max_src_len/max_tgt_len")
    rows, cols = batch.labels.shape
    return f"{rows} streams x {cols} positions", "train.bptt_len"


@contextmanager
def memory_stop(batch: Any, device_type: str, step: int, cfg: Any) -> Iterator[None]:
    """Turn running out of memory on ``batch`` at ``step`` into TrainingOutOfMemory: one line
    naming the micro-batch's shape and the settings (of TrainConfig ``cfg``) to lower."""
    try:
        yield
    except RuntimeError as err:  # torch.OutOfMemoryError is one
        if not out_of_memory(err):
            raise
        shape, lengths = batch_shape(batch)
        raise TrainingOutOfMemory(
            f"out of {device_type} memory at step {step} on a micro-batch of {shape} "
            f"(train.batch_size={cfg.batch_size}, train.accum_steps={cfg.accum_steps}); lower "
            f"train.batch_size and raise train.accum_steps by the same factor (the same batch "
            f"in smaller pieces), or lower {lengths}") from None
