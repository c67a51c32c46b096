"""Next-token log-probabilities for a batch of prefixes, with or without the incremental cache.

Both paths see the same prefixes and return the same numbers (to float tolerance): the cached
one feeds only the last token to ``model.step`` and keeps the decoder state (Transformer
self-attention keys/values per layer, cross-attention keys/values computed once; RNN hidden
state); the uncached one re-runs ``model.decode`` over the whole prefix each step (the
reference, and the baseline of benchmarks/decode.py).
"""

from __future__ import annotations

import torch

from seqcore.models.base import EncoderDecoder, Reorderable


class Stepper:
    """Decoder-side state of N rows being decoded (rows may be beams of several examples)."""

    def __init__(self, model: EncoderDecoder, memory: Reorderable, use_cache: bool) -> None:
        self.model = model
        self.memory = memory
        self.state: Reorderable | None = model.start(memory) if use_cache else None

    def log_probs(self, prefix: torch.Tensor) -> torch.Tensor:
        """Log-softmax of the next token after each prefix.

        Args:
            prefix: (N, t+1) decoder inputs so far, BOS first; the cached path only reads the
                last column, so every call must extend the previous prefixes by one token
                (after ``reorder``).

        Returns:
            (N, V) float32 log-probabilities.
        """
        if self.state is None:
            logits = self.model.decode(prefix, self.memory)[:, -1]  # (N, V)
        else:
            logits, self.state = self.model.step(prefix[:, -1], self.memory, self.state)
        return torch.log_softmax(logits.float(), dim=-1)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (N',) of the current N, in that order (beam reshuffle/drop)."""
        self.memory = self.memory.reorder(index)
        if self.state is not None:
            self.state = self.state.reorder(index)
