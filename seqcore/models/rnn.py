"""GRU/LSTM encoder-decoder with attention (Luong et al., 2015; Bahdanau et al., 2015).

The encoder is a bidirectional RNN over *packed* sequences, so PAD never enters a recurrent
state: a sequence's encoder states and final state are the same whether it is batched alone
or with longer ones. Each direction has ``hidden // 2`` units, so encoder states have the
decoder's width H and Luong's ``dot`` score needs no projection.

The decoder follows Luong's layout without input feeding: an RNN over the target embeddings,
then attention from its output h_t over the encoder states, then
``h~_t = tanh(W_c [c_t; h_t])`` and the output projection. Without input feeding the
teacher-forced pass runs the RNN over the whole prefix in one call, and ``step`` runs the same
RNN one token at a time from the carried state: both compute the same function.

Attention scores (source PAD keys get zero weight via ``contract.masked_softmax``):
- dot: ``h_t . m_s``; general: ``h_t . (W_a m_s)``;
- additive: ``v . tanh(W_q h_t + W_k m_s)`` (Bahdanau's score, used in Luong's layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Self

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from seqcore.contract import masked_softmax
from seqcore.models.base import EncoderDecoder

Cell = Literal["gru", "lstm"]
Score = Literal["dot", "general", "additive"]


@dataclass(frozen=True)
class RNNShape:
    """Sizes of a GRU/LSTM encoder-decoder."""

    cell: Cell
    src_vocab: int
    tgt_vocab: int
    embed_dim: int
    hidden: int  # H: decoder width; each encoder direction has H // 2
    enc_layers: int
    dec_layers: int
    dropout: float
    attention: Score
    pad_id: int

    def __post_init__(self) -> None:
        if self.cell not in ("gru", "lstm"):
            raise ValueError(f"cell must be 'gru' or 'lstm', got {self.cell!r}")
        if self.attention not in ("dot", "general", "additive"):
            raise ValueError(f"attention must be dot/general/additive, got {self.attention!r}")
        if self.hidden % 2:
            raise ValueError(f"hidden must be even (two encoder directions), got {self.hidden}")


@dataclass
class RNNState:
    """Decoder recurrent state. h, c: (L, B, H); c is None for a GRU."""

    h: torch.Tensor
    c: torch.Tensor | None

    def reorder(self, index: torch.Tensor) -> Self:
        c = None if self.c is None else self.c.index_select(1, index)
        return RNNState(self.h.index_select(1, index), c)

    def as_rnn(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The form nn.GRU / nn.LSTM take and return."""
        return self.h if self.c is None else (self.h, self.c)


@dataclass
class RNNMemory:
    """Encoder output.

    Attributes:
        states: (B, S, H) encoder states, zero at PAD positions.
        keys: (B, S, H) states as the attention score reads them (projected once, here).
        mask: (B, S) bool, True on real tokens.
        init: the decoder's initial state, bridged from the encoder's final states.
    """

    states: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor
    init: RNNState

    def reorder(self, index: torch.Tensor) -> Self:
        return RNNMemory(self.states.index_select(0, index), self.keys.index_select(0, index),
                         self.mask.index_select(0, index), self.init.reorder(index))


class LSTM(nn.LSTM):
    """``nn.LSTM`` that also runs under CPU bf16 autocast on CPUs without oneDNN bf16.

    Under CPU autocast torch sends an LSTM to oneDNN, which refuses it ("could not create a
    primitive descriptor") where the CPU lacks bf16 support (AVX-512); torch's own kernel then
    runs it, as it does outside autocast. Same parameters and state dict as ``nn.LSTM``.
    """

    def forward(self, x: torch.Tensor | PackedSequence,
                hx: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor | PackedSequence, tuple[torch.Tensor, torch.Tensor]]:
        if torch.is_autocast_enabled("cpu") and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            # None: leave oneDNN's other settings (determinism, TF32) as they are
            with torch.backends.mkldnn.flags(enabled=False, deterministic=None,
                                             allow_tf32=None, fp32_precision=None):
                return super().forward(x, hx)
        return super().forward(x, hx)


def recurrent_cell(cell: Cell) -> type[nn.RNNBase]:
    """The torch module of a ``cell`` name."""
    return nn.GRU if cell == "gru" else LSTM


def _rnn(cell: Cell, inputs: int, hidden: int, layers: int, dropout: float,
         bidirectional: bool) -> nn.RNNBase:
    cls = recurrent_cell(cell)
    # nn.GRU/LSTM dropout acts between layers only; it warns when there is one layer.
    return cls(inputs, hidden, num_layers=layers, batch_first=True,
               dropout=dropout if layers > 1 else 0.0, bidirectional=bidirectional)


class RNNSeq2Seq(EncoderDecoder):
    """Bidirectional GRU/LSTM encoder, attentional GRU/LSTM decoder, returning logits."""

    def __init__(self, shape: RNNShape) -> None:
        super().__init__()
        self.shape = shape
        h = shape.hidden
        self.src_embed = nn.Embedding(shape.src_vocab, shape.embed_dim, padding_idx=shape.pad_id)
        self.tgt_embed = nn.Embedding(shape.tgt_vocab, shape.embed_dim, padding_idx=shape.pad_id)
        self.drop = nn.Dropout(shape.dropout)
        self.encoder = _rnn(shape.cell, shape.embed_dim, h // 2, shape.enc_layers,
                            shape.dropout, True)
        self.decoder = _rnn(shape.cell, shape.embed_dim, h, shape.dec_layers, shape.dropout,
                            False)
        # Bridge: the top encoder layer's final [forward; backward] state -> decoder init.
        self.bridge_h = nn.Linear(h, h)
        self.bridge_c = nn.Linear(h, h) if shape.cell == "lstm" else None
        self.key = nn.Linear(h, h, bias=False) if shape.attention != "dot" else None
        self.query = nn.Linear(h, h) if shape.attention == "additive" else None
        self.score_v = nn.Linear(h, 1, bias=False) if shape.attention == "additive" else None
        self.combine = nn.Linear(2 * h, h)
        self.proj = nn.Linear(h, shape.tgt_vocab)

    # -- encoder ---------------------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> RNNMemory:
        b, s = src.shape
        lengths = src_mask.sum(1)  # (B,)
        emb = self.drop(self.src_embed(src))  # (B, S, E)
        # pack needs length >= 1; an empty source's single (PAD) step is zeroed below.
        packed = pack_padded_sequence(emb, lengths.clamp(min=1).cpu(), batch_first=True,
                                      enforce_sorted=False)
        out, final = self.encoder(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=s)  # (B, S, H)
        states = states * src_mask[..., None]
        nonempty = (lengths > 0)[:, None].to(states.dtype)  # (B, 1)
        h_n, c_n = final if isinstance(final, tuple) else (final, None)  # (2 * L, B, H/2)
        init = RNNState(self._bridge(h_n, self.bridge_h, nonempty),
                        None if c_n is None else self._bridge(c_n, self.bridge_c, nonempty))
        keys = self.key(states) if self.key is not None else states
        return RNNMemory(states, keys, src_mask, init)

    def _bridge(self, final: torch.Tensor, layer: nn.Linear, nonempty: torch.Tensor
                ) -> torch.Tensor:
        """(2 * L_enc, B, H/2) final states -> (L_dec, B, H) initial decoder states."""
        top = torch.cat([final[-2], final[-1]], dim=-1) * nonempty  # (B, H) fwd; bwd
        init = torch.tanh(layer(top))  # (B, H)
        return init[None].expand(self.shape.dec_layers, -1, -1).contiguous()  # (L, B, H)

    # -- decoder ---------------------------------------------------------------------------
    def attend(self, query: torch.Tensor, memory: RNNMemory) -> torch.Tensor:
        """Attention weights of decoder outputs over the source.

        Args:
            query: (B, T, H) decoder RNN outputs.

        Returns:
            (B, T, S) weights; zero on source PAD (rows of an empty source are uniform).
        """
        if self.score_v is not None:
            q = self.query(query)  # (B, T, H)
            scores = self.score_v(torch.tanh(q[:, :, None] + memory.keys[:, None]))[..., 0]
        else:
            scores = query @ memory.keys.transpose(1, 2)  # (B, T, S)
        return masked_softmax(scores, memory.mask[:, None, :])

    def _output(self, rnn_out: torch.Tensor, memory: RNNMemory) -> torch.Tensor:
        """(B, T, H) decoder RNN outputs -> (B, T, V) logits."""
        context = self.attend(rnn_out, memory) @ memory.states  # (B, T, H)
        attentional = torch.tanh(self.combine(torch.cat([context, rnn_out], dim=-1)))
        return self.proj(self.drop(attentional))

    def decode(self, tgt_in: torch.Tensor, memory: RNNMemory) -> torch.Tensor:
        out, _ = self.decoder(self.drop(self.tgt_embed(tgt_in)), memory.init.as_rnn())
        return self._output(out, memory)

    def start(self, memory: RNNMemory) -> RNNState:
        return memory.init

    def step(
        self, tokens: torch.Tensor, memory: RNNMemory, state: RNNState
    ) -> tuple[torch.Tensor, RNNState]:
        emb = self.drop(self.tgt_embed(tokens[:, None]))  # (B, 1, E)
        out, new = self.decoder(emb, state.as_rnn())
        new_state = RNNState(new[0], new[1]) if isinstance(new, tuple) else RNNState(new, None)
        return self._output(out, memory)[:, 0], new_state
