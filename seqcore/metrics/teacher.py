"""Teacher-forced statistics of a model on encoded examples: NLL, token count, argmax hits.

Denominator (the contract's, seqcore/contract.py): every label position, i.e. the target
tokens plus EOS (unless the target was truncated); PAD and BOS are never labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from seqcore.contract import IGNORE_INDEX, SpecialIds
from seqcore.data.examples import Example
from seqcore.metrics.scores import perplexity, ratio
from seqcore.models.base import EncoderDecoder
from seqcore.sequences import teacher_forced_passes


@dataclass(frozen=True)
class TeacherStats:
    """One sequence under teacher forcing.

    Attributes:
        nll: summed token NLL (nats) over label positions.
        tokens: label positions (target tokens + EOS).
        correct: label positions where the argmax of the logits equals the label and the
            label is not UNK (predicting UNK for UNK is not knowing the token; issue 13).
    """

    nll: float
    tokens: int
    correct: int


@torch.no_grad()
def teacher_forced_stats(
    model: EncoderDecoder, examples: list[Example], ids: SpecialIds, batch_size: int
) -> dict[str, TeacherStats]:
    """Per-example teacher-forced statistics, keyed by example id; runs in eval mode."""
    out: dict[str, TeacherStats] = {}
    for chunk, b, logits in teacher_forced_passes(model, examples, ids, batch_size):
        labels = b.tf.labels  # (B, T)
        valid = labels != IGNORE_INDEX  # (B, T)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
        safe = labels.masked_fill(~valid, 0)
        nll = -logp.gather(-1, safe[..., None])[..., 0] * valid  # (B, T)
        hit = (logp.argmax(-1) == labels) & valid & (labels != ids.unk)  # (B, T)
        for ex, s, n, c in zip(chunk, nll.sum(1).tolist(), valid.sum(1).tolist(),
                               hit.sum(1).tolist(), strict=True):
            out[ex.id] = TeacherStats(float(s), int(n), int(c))
    return out


def nll_summary(stats: list[TeacherStats]) -> dict[str, float | int]:
    """Token NLL and perplexity with their denominator, per-sequence mean NLL, accuracy."""
    nll = sum(s.nll for s in stats)
    tokens = sum(s.tokens for s in stats)
    seq = [s.nll / s.tokens for s in stats if s.tokens]
    return {"token_nll": ratio(nll, tokens), "perplexity": perplexity(nll, tokens),
            "ppl_denominator_tokens": tokens, "sequence_mean_nll": ratio(sum(seq), len(seq)),
            "sequences": len(seq),
            "tf_token_accuracy": ratio(sum(s.correct for s in stats), tokens)}
