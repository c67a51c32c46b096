"""Teacher-forced statistics of a model on encoded examples: NLL, token count, argmax hits.

The NLL is the training loss's (seqcore.losses.labelled_nll, whose sum is the dev NLL the
training logs), summed by example here.

Denominator (the contract's, seqcore/contract.py): every label position, i.e. the target
tokens plus EOS (unless the target was truncated); PAD and BOS are never labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from seqcore.contract import SpecialIds
from seqcore.data.examples import Example
from seqcore.losses import labelled_nll
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
        # the training loss's NLL (seqcore.losses.labelled_nll), put back in place by row
        valid, _, logp, labelled = labelled_nll(logits, labels)  # (B, T), _, (N, V), (N,)
        nll = torch.zeros(labels.shape, dtype=labelled.dtype).masked_scatter(valid, labelled)
        hit = torch.zeros_like(valid).masked_scatter(
            valid, (logp.argmax(-1) == labels[valid]) & (labels[valid] != ids.unk))  # (B, T)
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
