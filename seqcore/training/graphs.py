"""The training step as CUDA graphs (issue 53, ``train.cuda_graphs``).

A small model's step is hundreds of short kernels, and on a GPU the host's launching them,
not the GPU, sets the pace (profiled on an H200: 33 ms per default step, 2.6 ms of it GPU
work). A CUDA graph records a step's kernels once and replays them with one launch. What a
graph needs, and what this module provides:

- **fixed shapes**: every micro-batch is padded on the host to lengths that are multiples of
  ``PAD_MULTIPLE`` (within the model's positions; ``pad_to_multiple``), so a run sees a few
  shapes, and each shape gets its own graph of the forward pass, the loss and the backward
  pass, whose gradients add into the parameters' ``.grad`` (kept, never set to None) and whose
  summed loss lands in a static scalar;
- **static inputs**: a micro-batch is copied into its shape's buffers before the replay; the
  step's learning rate and loss denominator are device scalars filled before it (the fused
  Adam takes a tensor learning rate, ``capturable``);
- **one update graph**: clip by the global norm, the fused Adam's step skipped on the device
  when the norm is not finite (its ``found_inf``), the gradients zeroed for the next step;
- **warm-up**: the first ``WARMUP`` uses of a graph run the same code eagerly, on a side
  stream (CUDA's lazy initialisations must not happen inside a capture); the next use
  captures and then replays, and every later one replays.

Numerics: a padded micro-batch rounds like any batch of its padded shape, and the tensor
learning rate rounds the fused Adam's update differently from a float one (measured on the
CPU), so ``train.cuda_graphs`` resolved (``on``) is a training-contract key. Within the mode
the warm-up, the capture and every replay run the same kernels on the same buffers, so a run
is bitwise repeatable and resumes exactly (the graphs are captured again after a resume).

With ``capture=False`` (the CPU, and the tests there) the same buffers, padding and update
run eagerly: the CPU checks everything but the capture itself.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from seqcore.contract import IGNORE_INDEX, TeacherForcing
from seqcore.sequences import Batch
from seqcore.training.optim import clip_global_norm, fused_step

#: Padded lengths are multiples of this (or the model's position limit).
PAD_MULTIPLE = 8
#: Eager runs of a graph's code before it is captured.
WARMUP = 1


def padded_length(length: int, limit: int | None) -> int:
    """``length`` rounded up to a multiple of ``PAD_MULTIPLE``, but not past ``limit``."""
    rounded = -(-length // PAD_MULTIPLE) * PAD_MULTIPLE
    return rounded if limit is None else max(length, min(rounded, limit))


def pad_to_multiple(batch: Batch, pad_id: int, limit: int | None) -> Batch:
    """The host batch with sources (B, S) -> (B, S') and targets (B, T) -> (B, T') padded to
    ``padded_length`` positions: PAD ids, False in the masks, IGNORE_INDEX labels, so no
    loss, count or attention changes."""

    def widen(t: torch.Tensor, value: Any) -> torch.Tensor:
        extra = padded_length(t.shape[1], limit) - t.shape[1]
        return t if extra == 0 else torch.cat([t, t.new_full((t.shape[0], extra), value)], 1)

    tf = TeacherForcing(widen(batch.tf.inputs, pad_id), widen(batch.tf.labels, IGNORE_INDEX),
                        widen(batch.tf.mask, False))
    return Batch(widen(batch.src, pad_id), widen(batch.src_mask, False), tf, batch.counted)


@dataclass
class _Graph:
    """A replayable piece of the step: eager for its first WARMUP uses, then a CUDA graph."""

    runs: int = 0
    graph: Any = None  # torch.cuda.CUDAGraph once captured

    def __call__(self, fn: Any, capture: bool) -> None:
        if self.graph is not None:
            self.graph.replay()
        elif not capture:
            fn()
        elif self.runs < WARMUP:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
        else:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                fn()
            self.graph.replay()  # capturing ran nothing: this use's step is the replay
        self.runs += 1


@dataclass
class _Shape:
    """One padded micro-batch shape's input buffers, summed loss and graph."""

    batch: Batch
    total: torch.Tensor
    graph: _Graph = field(default_factory=_Graph)


class StepGraphs:
    """A seq2seq training step (accumulated micro-batches, clip, fused Adam) over static
    buffers, captured as CUDA graphs when ``capture`` (see the module's docstring).

    A step is ``begin``, ``micro_batch`` for each micro-batch, then ``update``. The optimiser
    must be torch's fused Adam or AdamW built ``capturable``; its learning rate becomes this
    object's device scalar. ``loss(model, batch)`` is the feed's summed loss of a micro-batch
    (no scheduled sampling: its draws are not static).
    """

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, loss: Any,
                 clip_norm: float, autocast: Callable[[], AbstractContextManager],
                 capture: bool) -> None:
        self.model, self.opt, self.loss, self.capture = model, opt, loss, capture
        self.autocast = autocast  # a new context each use (capture needs its cache off)
        self.clip_norm = clip_norm
        device = next(model.parameters()).device
        self.lr = torch.zeros((), device=device)
        for group in opt.param_groups:
            group["lr"] = self.lr
        self.denominator = torch.ones((), dtype=torch.int64, device=device)
        self.norm = torch.zeros((), device=device)
        self.shapes: dict[tuple[tuple[int, ...], ...], _Shape] = {}
        self.update_graph = _Graph()

    def begin(self, denominator: int, lr: float) -> None:
        """Start a step: its loss denominator and learning rate into the device scalars."""
        self.lr.fill_(lr)
        self.denominator.fill_(denominator)

    def micro_batch(self, batch: Batch) -> torch.Tensor:
        """Add one micro-batch's gradient (``batch`` padded, on the device); its summed loss,
        left on the device."""
        shape = self._shape(batch)
        for static, given in zip(_tensors(shape.batch), _tensors(batch), strict=True):
            static.copy_(given)
        shape.graph(lambda: self._forward_backward(shape), self.capture)
        return shape.total.clone()

    def update(self) -> torch.Tensor:
        """End the step: clip, the optimiser's step (skipped on the device when the norm is
        not finite) and the gradients zeroed; the pre-clip norm, left on the device."""
        self.update_graph(self._update, self.capture)
        return self.norm.clone()

    def _shape(self, batch: Batch) -> _Shape:
        key = tuple(tuple(t.shape) for t in _tensors(batch))
        if key not in self.shapes:
            tf = TeacherForcing(*(torch.empty_like(t) for t in _tensors(batch)[2:]))
            static = Batch(torch.empty_like(batch.src), torch.empty_like(batch.src_mask), tf)
            self.shapes[key] = _Shape(static, torch.zeros((), device=self.lr.device))
        return self.shapes[key]

    def _forward_backward(self, shape: _Shape) -> None:
        with self.autocast():
            out = self.loss(self.model, shape.batch)
        (out.total / self.denominator).backward()
        shape.total.copy_(out.total.detach())

    def _update(self) -> None:
        norm = clip_global_norm(self.model, self.clip_norm)
        fused_step(self.opt, norm)
        self.norm.copy_(norm)
        self.opt.zero_grad(set_to_none=False)


def _tensors(batch: Batch) -> tuple[torch.Tensor, ...]:
    """A batch's five tensors, in a fixed order."""
    return batch.src, batch.src_mask, batch.tf.inputs, batch.tf.labels, batch.tf.mask
