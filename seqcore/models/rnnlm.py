"""A stateful GRU/LSTM language model for truncated backpropagation through time.

``forward`` takes the hidden state carried from the previous segment and returns the new one,
so the caller decides when to carry it (next segment of the same document), when to detach it
(every segment boundary: truncated BPTT, Williams & Peng 1990) and when to reset it (a new
document in that batch slot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from seqcore.models.rnn import recurrent_cell

#: The carried state: (h,) for a GRU, (h, c) for an LSTM; each (L, B, H).
LMState = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class RNNLMShape:
    """Sizes of an RNN language model."""

    cell: Literal["gru", "lstm"]
    vocab: int
    embed_dim: int
    hidden: int
    layers: int
    dropout: float
    pad_id: int


class RNNLM(nn.Module):
    """Embedding -> GRU/LSTM -> linear; logits for the next token at every position."""

    def __init__(self, s: RNNLMShape) -> None:
        super().__init__()
        self.shape = s
        self.embed = nn.Embedding(s.vocab, s.embed_dim, padding_idx=s.pad_id)
        rnn_cls = recurrent_cell(s.cell)
        self.rnn = rnn_cls(s.embed_dim, s.hidden, s.layers, batch_first=True,
                           dropout=s.dropout if s.layers > 1 else 0.0)
        self.drop = nn.Dropout(s.dropout)
        self.out = nn.Linear(s.hidden, s.vocab)

    def initial_state(self, batch: int) -> LMState:
        """All-zero state for ``batch`` streams: tensors (L, B, H)."""
        p = self.out.weight
        size = (self.shape.layers, batch, self.shape.hidden)
        return tuple(torch.zeros(size, dtype=p.dtype, device=p.device)
                     for _ in range(2 if self.shape.cell == "lstm" else 1))

    def forward(self, tokens: torch.Tensor, state: LMState) -> tuple[torch.Tensor, LMState]:
        """Run one segment.

        Args:
            tokens: (B, K) input ids.
            state: carried state, tensors (L, B, H).

        Returns:
            (B, K, V) logits and the state after the last position.
        """
        if tokens.dim() != 2 or state[0].shape[1] != tokens.shape[0]:
            raise ValueError(f"tokens (B,K) and state (L,B,H) expected, got {tokens.shape}, "
                             f"{state[0].shape}")
        x = self.drop(self.embed(tokens))  # (B, K, E)
        h0 = state if self.shape.cell == "lstm" else state[0]
        y, hn = self.rnn(x, h0)  # (B, K, H)
        new = tuple(hn) if self.shape.cell == "lstm" else (hn,)
        return self.out(self.drop(y)), new


def detach_state(state: LMState) -> LMState:
    """Cut the graph at a segment boundary: the value is kept, the gradient stops here."""
    return tuple(t.detach() for t in state)


def reset_state(state: LMState, reset: torch.Tensor) -> LMState:
    """Zero the state of the streams where ``reset`` (B,) bool is True (a new document)."""
    keep = (~reset).to(state[0].dtype)[None, :, None]  # (1, B, 1)
    return tuple(t * keep for t in state)
