"""Greedy decoding with the incremental cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from seqcore.contract import SpecialIds
from seqcore.models.base import EncoderDecoder


@dataclass(frozen=True)
class Hypothesis:
    """One decoded output.

    Attributes:
        tokens: generated ids without BOS and without EOS.
        score: summed log-probability of the tokens (and of EOS when reached).
        norm_score: score after length normalisation (equal to score for greedy).
        eos: whether EOS was produced (False = truncated at the maximum length).
    """

    tokens: list[int]
    score: float
    norm_score: float
    eos: bool


@torch.no_grad()
def greedy(
    model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor, ids: SpecialIds,
    max_len: int, min_len: int = 0,
) -> list[Hypothesis]:
    """Greedy search for a padded source batch.

    Args:
        src, src_mask: (B, S) source ids and mask (True = real).
        max_len: maximum generated tokens, EOS included.
        min_len: EOS is masked until this many tokens have been generated.

    Returns:
        B hypotheses; each stops at its own EOS.
    """
    if model.training:
        raise RuntimeError("decode with model.eval(): dropout must be off")
    memory = model.encode(src, src_mask)
    state = model.start(memory)
    b = src.shape[0]
    prev = torch.full((b,), ids.bos, dtype=torch.long)
    out = torch.full((b, max_len), ids.pad, dtype=torch.long)
    scores = torch.zeros(b)
    done = torch.zeros(b, dtype=torch.bool)
    lengths = torch.full((b,), max_len, dtype=torch.long)
    for t in range(max_len):
        logits, state = model.step(prev, memory, state)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (B, V)
        if t < min_len:
            logp[:, ids.eos] = -torch.inf
        tok = logp.argmax(-1)
        scores += torch.where(done, 0.0, logp.gather(1, tok[:, None])[:, 0])
        tok = torch.where(done, ids.pad, tok)
        out[:, t] = tok
        finished = (tok == ids.eos) & ~done
        lengths[finished] = t
        done |= finished
        prev = tok
        if bool(done.all()):
            break
    return [
        Hypothesis(out[i, : lengths[i]].tolist(), float(scores[i]), float(scores[i]),
                   bool(done[i]))
        for i in range(b)
    ]
