"""Running a decoder over encoded examples into predictions.jsonl rows."""

from __future__ import annotations

from collections.abc import Callable

import torch

from seqcore.artifacts.predictions import PredictionRow
from seqcore.contract import SpecialIds, pad_batch
from seqcore.data.examples import Example
from seqcore.decoding.search import Hypothesis
from seqcore.models.base import EncoderDecoder
from seqcore.tokenizer import Tokenizer

#: (model, src (B,S), src_mask (B,S), examples) -> one n-best list per example.
Decoder = Callable[[EncoderDecoder, torch.Tensor, torch.Tensor, list[Example]],
                   list[list[Hypothesis]]]


def decode_examples(
    model: EncoderDecoder, examples: list[Example], decoder: Decoder, ids: SpecialIds,
    tgt_tok: Tokenizer, batch_size: int,
) -> list[PredictionRow]:
    """Decode in batches (in file order) and detokenise; the model must be in eval mode."""
    rows: list[PredictionRow] = []
    for i in range(0, len(examples), batch_size):
        chunk = examples[i : i + batch_size]
        src, mask = pad_batch([ex.src for ex in chunk], ids.pad)
        device = next(model.parameters()).device
        src, mask = src.to(device), mask.to(device)
        for ex, nbest in zip(chunk, decoder(model, src, mask, chunk), strict=True):
            best = nbest[0]
            rows.append(PredictionRow(
                id=ex.id, group=ex.group, source=ex.source, reference=ex.target,
                hypothesis=tgt_tok.decode(best.tokens), tokens=best.tokens,
                pieces=[tgt_tok.piece(t) for t in best.tokens], score=best.score,
                norm_score=best.norm_score, length=len(best.tokens), eos=best.eos,
                nbest=[{"hypothesis": tgt_tok.decode(h.tokens), "tokens": h.tokens,
                        "score": h.score, "norm_score": h.norm_score, "eos": h.eos}
                       for h in nbest[1:]]))
    return rows
