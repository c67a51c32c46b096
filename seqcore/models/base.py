"""The interface every encoder-decoder implements, so decoding treats all families alike.

Training calls ``forward`` (teacher-forced logits over a batch). Decoding calls ``encode`` once,
then either ``decode`` on the whole prefix (uncached) or ``start`` + ``step`` (cached). Memory
and decoder states are typed objects with ``reorder(index)`` so beam search can reshuffle them.
"""

from __future__ import annotations

import abc
from typing import Protocol, Self

import torch
from torch import nn


class Reorderable(Protocol):
    """A per-sequence state whose batch rows can be selected/reordered."""

    def reorder(self, index: torch.Tensor) -> Self:
        """Return the state with batch rows taken from ``index`` (B',) into the old batch."""
        ...


class EncoderDecoder(nn.Module, abc.ABC):
    """Base class of the sequence-to-sequence models.

    Models return logits (never losses) and take vocabulary sizes as ints.
    """

    @property
    def max_positions(self) -> int | None:
        """The longest sequence (source, or decoder input) the model can embed; None = any."""
        return None

    @abc.abstractmethod
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Reorderable:
        """Encode a padded source batch.

        Args:
            src: (B, S) token ids.
            src_mask: (B, S) bool, True on real tokens.
        """

    @abc.abstractmethod
    def decode(self, tgt_in: torch.Tensor, memory: Reorderable) -> torch.Tensor:
        """Teacher-forced (or full-prefix) decoder pass.

        Args:
            tgt_in: (B, T) decoder input ids (BOS first).
            memory: from ``encode``.

        Returns:
            (B, T, V) logits; position t only depends on tgt_in[:, :t+1].
        """

    @abc.abstractmethod
    def start(self, memory: Reorderable) -> Reorderable:
        """An empty incremental decoder state for ``memory``'s batch."""

    @abc.abstractmethod
    def step(
        self, tokens: torch.Tensor, memory: Reorderable, state: Reorderable
    ) -> tuple[torch.Tensor, Reorderable]:
        """Advance the decoder by one token.

        Args:
            tokens: (B,) the previous output token (BOS at the first step).

        Returns:
            (B, V) logits for the next token, and the updated state.
        """

    def forward(
        self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """(B, S), (B, S), (B, T) -> (B, T, V) teacher-forced logits."""
        if src.dim() != 2 or tgt_in.dim() != 2 or src.shape != src_mask.shape:
            raise ValueError(f"expected (B,S),(B,S),(B,T); got {src.shape}, {src_mask.shape}, "
                             f"{tgt_in.shape}")
        if src_mask.dtype != torch.bool:
            raise TypeError(f"src_mask must be bool (True = real token), got {src_mask.dtype}")
        return self.decode(tgt_in, self.encode(src, src_mask))
