"""Decoding a fixed dev sample while training (issue 52): what the model writes, scored as the
task is scored, at every evaluation.

Teacher-forced dev NLL going down does not promise a better decoded output; the seed's habit
is a "simulated inference" on a fixed dev sample during training. At every evaluation the loop
decodes ``train.dev_decode_words`` dev words (greedy, or a beam of ``train.dev_decode_beam``)
and logs three rates beside dev NLL:

- ``dev_wer``: words whose output differs from their first reference (the headline WER's rule);
- ``dev_per``: token edits against the first reference over its tokens (target tokenizer
  pieces: phonemes for g2p, where the target tokenizer is word-level, so this is its PER);
- ``dev_exact_multi_ref``: outputs equal to any reference of the word.

It changes nothing the training does: the sample is chosen without randomness (evenly spaced
over the dev split's words in file order), decoding draws no random number and reads no
training batch, and the model's train/eval mode is restored after it. The ledger's weights,
optimizer, RNG states and data cursor are the same with it on or off (tests/training/
test_loop.py).

``train.select: best_dev_wer`` / ``best_dev_per`` choose the model file's step by these
figures; ties go to the other rate, then to the lower dev NLL, then to the earlier step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from seqcore.artifacts.train_log import StepLog
from seqcore.contract import SpecialIds, pad_batch
from seqcore.data.examples import Example
from seqcore.decoding.beam import BeamSettings, beam_search
from seqcore.decoding.greedy import greedy
from seqcore.metrics.edit import levenshtein
from seqcore.models.base import EncoderDecoder

#: ``train.select`` -> the log columns it minimises, in tie-breaking order (the earlier step
#: wins among rows equal in all of them). ``last`` selects no figure.
SELECT_KEYS = {"best_dev": ("dev_nll",),
               "best_dev_wer": ("dev_wer", "dev_per", "dev_nll"),
               "best_dev_per": ("dev_per", "dev_wer", "dev_nll")}


@dataclass(frozen=True)
class DevSample:
    """The fixed dev words decoded at every evaluation.

    Attributes:
        sources: each word's source text; src: its source ids.
        references: each word's references as target ids, its first (file order) first.
        texts: each word's first reference as text (for the progress lines).
    """

    sources: tuple[str, ...]
    src: tuple[tuple[int, ...], ...]
    references: tuple[tuple[tuple[int, ...], ...], ...]
    texts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.src)


def dev_sample(dev: Iterable[Example], size: int) -> DevSample:
    """``size`` words of the dev split (all when it has fewer), evenly spaced over its distinct
    groups (words) in file order: word ``i * n // size`` of ``n``, no random number drawn."""
    groups: dict[str, list[Example]] = {}
    for ex in dev:
        groups.setdefault(ex.group, []).append(ex)
    keys = list(groups)
    n = len(keys)
    picked = [groups[keys[i * n // size]] for i in range(size)] if 0 < size < n else \
        ([groups[k] for k in keys] if size else [])
    return DevSample(tuple(g[0].source for g in picked), tuple(tuple(g[0].src) for g in picked),
                     tuple(tuple(tuple(ex.tgt) for ex in g) for g in picked),
                     tuple(g[0].target for g in picked))


@dataclass(frozen=True)
class DevScores:
    """One evaluation's dev decoding: the three rates and each word's output ids."""

    wer: float
    per: float
    exact_multi_ref: float
    outputs: tuple[tuple[int, ...], ...]


def score(outputs: list[tuple[int, ...]], references: tuple[tuple[tuple[int, ...], ...], ...]
          ) -> tuple[float, float, float]:
    """(WER against the first reference, token edits / first-reference tokens, exact match
    against any reference); NaN for an empty sample (an undefined rate is never 0)."""
    if not outputs:
        return math.nan, math.nan, math.nan
    wrong = sum(out != refs[0] for out, refs in zip(outputs, references, strict=True))
    edits = sum(levenshtein(out, refs[0]) for out, refs in zip(outputs, references))
    tokens = sum(len(refs[0]) for refs in references)
    exact = sum(out in refs for out, refs in zip(outputs, references))
    n = len(outputs)
    return wrong / n, edits / tokens if tokens else math.nan, exact / n


@torch.no_grad()
def decode_sample(model: EncoderDecoder, sample: DevSample, ids: SpecialIds, max_len: int,
                  beam: int, batch_size: int) -> DevScores:
    """Decode the sample in file order (batches of ``batch_size``) and score it; the model's
    train/eval mode is restored, and no random number is drawn (greedy and beam are
    argmax searches)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    outputs: list[tuple[int, ...]] = []
    try:
        for i in range(0, len(sample), batch_size):
            src, mask = pad_batch([list(s) for s in sample.src[i : i + batch_size]], ids.pad)
            src, mask = src.to(device), mask.to(device)
            if beam > 1:
                hyps = [n[0] for n in beam_search(model, src, mask, ids, max_len,
                                                  BeamSettings(beam_size=beam, n_best=1))]
            else:
                hyps = greedy(model, src, mask, ids, max_len)
            outputs += [tuple(h.tokens) for h in hyps]
    finally:
        model.train(was_training)
    return DevScores(*score(outputs, sample.references), tuple(outputs))


def shown_lines(sample: DevSample, scores: DevScores, count: int,
                render: Callable[[Sequence[int]], str]) -> list[str]:
    """``count`` words of the sample (evenly spaced, the same ones at every evaluation) with
    their current output, ``render``-ed to text, and their first reference."""
    n = len(scores.outputs)
    picks = sorted({i * n // count for i in range(count)}) if 0 < count < n else range(n) \
        if count else []
    return [f"{sample.sources[i]} -> {render(scores.outputs[i]) or '(empty)'} "
            f"({'=' if scores.outputs[i] == sample.references[i][0] else '!='} reference "
            f"{sample.texts[i]})" for i in picks]


def selection_key(entry: StepLog, select: str) -> tuple[float, ...] | None:
    """What ``select`` minimises for a log row, in tie-breaking order; None when the row
    lacks one of its figures (no evaluation, or no dev decoding on that step) or ``select``
    chooses no figure (``last``)."""
    names = SELECT_KEYS.get(select)
    if names is None:
        return None
    key = tuple(float(getattr(entry, name)) for name in names)
    return None if any(math.isnan(v) for v in key) else key


def best_row(history: Iterable[StepLog], select: str) -> StepLog | None:
    """The row ``select`` chooses: the smallest key, the earlier step among equals."""
    best: tuple[tuple[float, ...], StepLog] | None = None
    for row in history:
        key = selection_key(row, select)
        if key is not None and (best is None or key < best[0]):
            best = (key, row)
    return best[1] if best else None
