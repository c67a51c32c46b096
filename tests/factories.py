"""Shared test builders: the repository root, the usual special ids, tiny models and toy
examples. Each test file imports these instead of writing its own."""

from __future__ import annotations

from pathlib import Path

import torch

from seqcore.config import ModelConfig, RNNConfig, TransformerConfig
from seqcore.contract import SpecialIds
from seqcore.data.examples import Example
from seqcore.models import build_model
from seqcore.models.base import EncoderDecoder
from seqcore.models.rnn_lm import RNNLM, RNNLMShape

#: The repository root (the tests run against this checkout).
REPO = Path(__file__).resolve().parents[1]
#: The special ids of the default tokenizer contract.
IDS = SpecialIds(pad=0, unk=1, bos=2, eos=3)


def tiny_config(family: str = "transformer", dropout: float = 0.0, attention: str = "general",
                enc_layers: int = 2, dec_layers: int = 2, tie: bool = True,
                embed_dim: int = 8, hidden: int = 16) -> ModelConfig:
    """A tiny model section (d_model 16), built the way params.yaml is."""
    return ModelConfig(
        family=family,  # type: ignore[arg-type]
        transformer=TransformerConfig(d_model=16, n_heads=2, enc_layers=enc_layers,
                                      dec_layers=dec_layers, d_ff=32, dropout=dropout,
                                      tie_embeddings=tie),
        rnn=RNNConfig(embed_dim=embed_dim, hidden=hidden, enc_layers=enc_layers,
                      dec_layers=dec_layers, dropout=dropout,
                      attention=attention))  # type: ignore[arg-type]


def tiny_model(family: str = "transformer", dropout: float = 0.0, attention: str = "general",
               pad: int = IDS.pad, vocab: int = 12, *, tgt_vocab: int | None = None,
               enc_layers: int = 2, dec_layers: int = 2, tie: bool = True, embed_dim: int = 8,
               hidden: int = 16, max_len: int = 64, seed: int = 0) -> EncoderDecoder:
    """A tiny seeded random-init encoder-decoder of ``family`` in eval mode (``.train()`` it
    where dropout or the training step matters)."""
    torch.manual_seed(seed)
    cfg = tiny_config(family, dropout, attention, enc_layers, dec_layers, tie, embed_dim, hidden)
    model = build_model(cfg, vocab, vocab if tgt_vocab is None else tgt_vocab, pad, max_len)
    return model.eval()


def tiny_lm(cell: str = "gru", vocab: int = 12, embed_dim: int = 8, hidden: int = 8,
            layers: int = 1, dropout: float = 0.0, pad: int = IDS.pad, seed: int = 0) -> RNNLM:
    """A tiny seeded random-init RNN language model in eval mode."""
    torch.manual_seed(seed)
    shape = RNNLMShape(cell, vocab, embed_dim, hidden, layers,  # type: ignore[arg-type]
                       dropout, pad)
    return RNNLM(shape).eval()


def examples(n: int, seed: int = 0, low: int = 4, high: int = 11, shift: int = 1,
             lengths: tuple[int, int] = (1, 6), reverse: bool = True) -> list[Example]:
    """``n`` toy pairs with ids ``str(i)``: sources of ``lengths`` (inclusive) tokens drawn
    from [low, high); targets the source (reversed unless ``reverse`` is False) with ``shift``
    added to every id, so each label is checkable per row."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        k = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=g))
        src = torch.randint(low, high, (k,), generator=g).tolist()
        tgt = [t + shift for t in (src[::-1] if reverse else src)]
        out.append(Example(str(i), str(i), "", "", src, tgt, True))
    return out
