"""Minimum risk training (Shen et al. 2016; issue 52): train for the task metric directly.

After ``train.max_steps`` steps of maximum likelihood, ``train.mrt_steps`` more steps each
minimise, per source sentence x of the batch, the expected risk over a candidate set S(x):

    Q(y | x) = p(y | x)^alpha / sum_{y' in S(x)} p(y' | x)^alpha      (``train.mrt_alpha``)
    loss(x)  = sum_{y in S(x)} Q(y | x) * risk(y, reference)

S(x) holds the ``train.mrt_candidates`` (N) best hypotheses of a beam search of width N, or N
samples drawn with the training generator (``train.mrt_search``), duplicates removed (the
first kept), and the reference when ``train.mrt_reference`` (the candidate set then always
holds a zero-risk output). ``risk`` (``train.mrt_risk``) is the word's token edit distance
to its reference over the reference's length (``edit``: its PER), or 0/1 (``zero_one``: its
WER). log p(y | x) is the teacher-forced sum over y's tokens and EOS (PAD masked as in every
loss), with gradient; the loss is normalised per sequence (the step divides the summed risk by
the number of sources). The candidates are searched in eval mode without gradient; beam search
draws no random number, sampling draws from the loop's own generator (checkpointed), so a
killed MRT run resumes exactly. The MRT steps use the constant learning rate
``train.mrt_lr``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from seqcore.contract import IGNORE_INDEX, SpecialIds
from seqcore.data.examples import Example
from seqcore.decoding.beam import BeamSettings, beam_search
from seqcore.decoding.sampling import SamplingSettings, sampler
from seqcore.decoding.search import Masking, length_caps, run_single
from seqcore.losses import LossSum
from seqcore.metrics.edit import levenshtein
from seqcore.models.base import EncoderDecoder
from seqcore.sequences import Batch, make_batch

#: ``train.mrt_risk`` choices.
RISKS = ("edit", "zero_one")


def risk(candidate: Sequence[int], reference: Sequence[int], kind: str) -> float:
    """The risk of one candidate: token edits over reference tokens (``edit``; a reference
    with no token counts as one), or 0 when equal and 1 otherwise (``zero_one``)."""
    if kind == "zero_one":
        return float(tuple(candidate) != tuple(reference))
    if kind == "edit":
        return levenshtein(list(candidate), list(reference)) / max(len(reference), 1)
    raise ValueError(f"train.mrt_risk {kind!r}: must be one of {', '.join(RISKS)}")


def expected_risk(logp: torch.Tensor, risks: torch.Tensor, sizes: Sequence[int],
                  alpha: float) -> torch.Tensor:
    """Summed expected risk of several sources: ``sizes[i]`` consecutive candidates of
    ``logp`` (their log p(y | x)) and ``risks`` belong to source i; Q renormalises
    ``alpha * logp`` over each source's candidates."""
    total = logp.new_zeros(())
    start = 0
    for n in sizes:
        q = torch.softmax(alpha * logp[start : start + n], dim=0)
        total = total + (q * risks[start : start + n]).sum()
        start += n
    return total


def references(batch: Batch, ids: SpecialIds) -> list[tuple[int, ...]]:
    """Each row's reference tokens from its teacher-forcing labels (EOS and PAD dropped)."""
    out = []
    for row in batch.tf.labels.tolist():
        out.append(tuple(t for t in row if t not in (IGNORE_INDEX, ids.eos)))
    return out


@torch.no_grad()
def candidates(model: EncoderDecoder, batch: Batch, ids: SpecialIds, n: int, search: str,
               max_len: int, gen: torch.Generator) -> list[list[tuple[tuple[int, ...], bool]]]:
    """Each source's candidates as (tokens, ended with EOS), best first for beam search, in
    draw order for sampling; eval mode (restored after)."""
    was_training = model.training
    model.eval()
    try:
        if search == "beam":
            hyps = beam_search(model, batch.src, batch.src_mask, ids, max_len,
                               BeamSettings(beam_size=n, n_best=n))
            return [[(tuple(h.tokens), h.eos) for h in row] for row in hyps]
        rows = batch.src.shape[0]
        src = batch.src.repeat_interleave(n, dim=0)  # (B*N, S): source i's N copies together
        mask = batch.src_mask.repeat_interleave(n, dim=0)
        caps = length_caps(max_len, rows * n, src.device)
        uniforms = torch.rand((rows * n, max_len), generator=gen)  # the loop's generator
        drawn = run_single(model, src, mask, ids, caps, Masking(),
                           sampler(SamplingSettings(1.0, 0, 1.0, 0), uniforms), True)
        return [[(tuple(h.tokens), h.eos) for h in drawn[i * n : (i + 1) * n]]
                for i in range(rows)]
    finally:
        model.train(was_training)


def candidate_sets(found: list[list[tuple[tuple[int, ...], bool]]],
                   refs: list[tuple[int, ...]], with_reference: bool
                   ) -> list[list[tuple[tuple[int, ...], bool]]]:
    """Duplicates removed (the first kept), then the reference appended when asked and not
    already there (with EOS)."""
    out = []
    for cands, ref in zip(found, refs, strict=True):
        seen: dict[tuple[int, ...], bool] = {}
        for tokens, eos in cands:
            seen.setdefault(tokens, eos)
        if with_reference and ref not in seen:
            seen[ref] = True
        out.append(list(seen.items()))
    return out


def candidate_log_probs(model: EncoderDecoder, batch: Batch,
                        sets: list[list[tuple[tuple[int, ...], bool]]],
                        ids: SpecialIds) -> torch.Tensor:
    """log p(y | x) of every candidate, in order, with gradient: one teacher-forced pass
    over the candidates (each with its source); an output cut at the length cap has no EOS
    to score."""
    rows = [i for i, cands in enumerate(sets) for _ in cands]
    flat = make_batch([Example("", "", "", "", [], list(tokens), eos)
                       for cands in sets for tokens, eos in cands], ids).to(batch.src.device)
    index = torch.tensor(rows, device=batch.src.device)
    logits = model(batch.src[index], batch.src_mask[index], flat.tf.inputs)  # (C, T, V)
    labels = flat.tf.labels  # (C, T)
    valid = labels != IGNORE_INDEX
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, labels.masked_fill(~valid, 0)[..., None])[..., 0]  # (C, T)
    return (picked * valid).sum(1)


def mrt_loss(model: EncoderDecoder, batch: Batch, ids: SpecialIds, n: int, search: str,
             with_reference: bool, kind: str, alpha: float, max_len: int,
             gen: torch.Generator) -> LossSum:
    """The summed expected risk of a batch (``total``; divide by ``sequences``); ``nll`` is
    the summed negative log probability of the candidates (for the record only)."""
    refs = references(batch, ids)
    sets = candidate_sets(candidates(model, batch, ids, n, search, max_len, gen), refs,
                          with_reference)
    logp = candidate_log_probs(model, batch, sets, ids)
    risks = torch.tensor([risk(tokens, ref, kind) for cands, ref in zip(sets, refs)
                          for tokens, _ in cands], device=logp.device)
    total = expected_risk(logp, risks, [len(c) for c in sets], alpha)
    return LossSum(total, -logp.detach().sum(),
                   torch.tensor([sum(len(c) for c in sets), len(refs)]))
