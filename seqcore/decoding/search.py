"""What every strategy shares: the hypothesis record, the masking rules, the length caps and
the loop driver of the one-hypothesis-per-example strategies (greedy and sampling).

Conventions (stated once, here):
- A hypothesis's *length* counts every generated token whose log-probability is in the
  score, so EOS is counted when reached. ``max_len`` caps that length; a hypothesis that hits
  it without EOS is returned with ``eos=False`` (truncated).
- ``min_len`` counts tokens before EOS: EOS is forbidden at steps 0..min_len-1.
- Scores are log-probabilities of the model's own distribution (log-softmax of its logits);
  masking only forbids tokens, and sampling's temperature/top-k/top-p shape the distribution
  drawn from but not the reported score.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from seqcore.contract import SpecialIds
from seqcore.decoding.processors import ban_tokens, min_length, no_repeat_ngram
from seqcore.decoding.stepper import Stepper
from seqcore.models.base import EncoderDecoder


@dataclass(frozen=True)
class Hypothesis:
    """One decoded output.

    Attributes:
        tokens: generated ids without BOS and without EOS.
        score: summed log-probability of the tokens (and of EOS when reached).
        norm_score: score after length normalisation (equal to score unless beam search
            normalises).
        eos: whether EOS was produced (False = truncated at the maximum length).
    """

    tokens: list[int]
    score: float
    norm_score: float
    eos: bool


@dataclass(frozen=True)
class Masking:
    """Rules that forbid tokens during any search (they never reshape the distribution).

    Attributes:
        min_len: EOS is forbidden until this many tokens have been generated.
        no_repeat_ngram: forbid repeating any n-gram of this size (0 = off).
        banned: token ids never generated (the factory bans PAD and BOS: never labels).
    """

    min_len: int = 0
    no_repeat_ngram: int = 0
    banned: tuple[int, ...] = ()


def mask_scores(
    logp: torch.Tensor, generated: torch.Tensor, masking: Masking, eos: int
) -> torch.Tensor:
    """Apply the masking rules to one step's scores.

    Args:
        logp: (N, V) next-token log-probabilities.
        generated: (N, t) tokens generated so far by each row (BOS excluded).

    Returns:
        (N, V), ``-inf`` on forbidden tokens.
    """
    out = ban_tokens(logp, list(masking.banned))
    out = min_length(out, generated.shape[1], masking.min_len, eos)
    return no_repeat_ngram(out, generated, masking.no_repeat_ngram)


def length_caps(max_len: int | list[int], batch: int, device: torch.device) -> torch.Tensor:
    """(B,) per-example caps from one int or one cap per example (each >= 1)."""
    caps = [max_len] * batch if isinstance(max_len, int) else list(max_len)
    if len(caps) != batch or min(caps, default=1) < 1:
        raise ValueError(f"need {batch} caps >= 1, got {max_len}")
    return torch.tensor(caps, dtype=torch.long, device=device)


def check_inputs(model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor) -> None:
    """Decoding runs in eval mode (dropout off) on a (B, S) long source and bool mask."""
    if model.training:
        raise RuntimeError("decode with model.eval(): dropout must be off")
    if src.dim() != 2 or src.shape != src_mask.shape or src_mask.dtype != torch.bool:
        raise ValueError(f"expected (B,S) src and bool mask, got {src.shape}, {src_mask.shape}, "
                         f"{src_mask.dtype}")


#: (masked log-probs (N, V), example index of each row (N,), step t) -> next tokens (N,).
Chooser = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def run_single(
    model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor, ids: SpecialIds,
    caps: torch.Tensor, masking: Masking, choose: Chooser, use_cache: bool,
) -> list[Hypothesis]:
    """Decode one hypothesis per example, choosing each next token with ``choose``.

    Rows leave the batch (and the cache) as soon as they emit EOS or reach their cap, so a
    finished row never continues after its EOS.

    Args:
        src, src_mask: (B, S) source ids and mask (True = real).
        caps: (B,) maximum length per example, EOS included.

    Returns:
        B hypotheses, in batch order.
    """
    check_inputs(model, src, src_mask)
    b = src.shape[0]
    stepper = Stepper(model, model.encode(src, src_mask), use_cache)
    rows = torch.arange(b, device=src.device)  # example index of each live row
    prefix = torch.full((b, 1), ids.bos, dtype=torch.long, device=src.device)
    scores = torch.zeros(b, device=src.device)
    out: list[Hypothesis | None] = [None] * b
    for t in range(int(caps.max())):
        logp = stepper.log_probs(prefix)  # (N, V)
        tok = choose(mask_scores(logp, prefix[:, 1:], masking, ids.eos), rows, t)  # (N,)
        scores = scores + logp.gather(1, tok[:, None])[:, 0]
        prefix = torch.cat([prefix, tok[:, None]], dim=1)  # (N, t+2)
        ended = (tok == ids.eos) | (caps[rows] <= t + 1)
        for i in ended.nonzero()[:, 0].tolist():
            eos = int(tok[i]) == ids.eos
            toks = prefix[i, 1 : t + 1 if eos else t + 2].tolist()
            out[int(rows[i])] = Hypothesis(toks, float(scores[i]), float(scores[i]), eos)
        if bool(ended.any()):
            keep = (~ended).nonzero()[:, 0]
            if keep.numel() == 0:
                break
            rows, prefix, scores = rows[keep], prefix[keep], scores[keep]
            stepper.reorder(keep)
    return [h for h in out if h is not None]
