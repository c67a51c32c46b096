"""What every strategy shares: the hypothesis record, the masking rules, the length caps and
the one loop driver, ``run_search``, that each strategy (beam search, and greedy and sampling
through ``OneEach``) plugs its ``step`` into, as fairseq's ``Search.step``.

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
from typing import Protocol

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


@dataclass(frozen=True)
class Step:
    """What a strategy continues after one step.

    Attributes:
        rows: (N',) the live rows that go on, in their new order (a row may repeat: beams);
            None: every row, in place (nothing to reorder in the decoder state).
        tokens: (N',) the token each of them appends.
    """

    rows: torch.Tensor | None
    tokens: torch.Tensor


class Strategy(Protocol):
    """One search strategy under :func:`run_search`: it starts ``width`` rows per example,
    chooses at each step (at most ``steps``) what goes on, keeps what finished, and returns
    one n-best list per example."""

    width: int
    steps: int

    def step(self, t: int, logp: torch.Tensor, masked: torch.Tensor, prefix: torch.Tensor
             ) -> Step | None:
        """Step ``t``: the live rows' next-token log-probabilities ``logp`` (N, V), the same
        with the masking rules applied (``-inf`` on forbidden tokens) and the rows' prefixes
        (N, t+1), BOS first. None: every example is done."""
        ...

    def results(self) -> list[list[Hypothesis]]:
        """One n-best list per example, in batch order."""
        ...


def run_search(
    model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor, ids: SpecialIds,
    masking: Masking, strategy: Strategy, use_cache: bool,
) -> list[list[Hypothesis]]:
    """The decoding loop every strategy shares: encode once, then per step the next-token
    log-probabilities of the live rows (masked by the rules), the strategy's choice, and the
    prefixes and decoder state reordered to the rows that go on.

    Args:
        src, src_mask: (B, S) source ids and mask (True = real).
    """
    check_inputs(model, src, src_mask)
    b, width = src.shape[0], strategy.width
    memory = model.encode(src, src_mask)
    if width > 1:  # row i * width + j is the j-th hypothesis of example i
        memory = memory.reorder(torch.arange(b, device=src.device).repeat_interleave(width))
    stepper = Stepper(model, memory, use_cache)
    prefix = torch.full((b * width, 1), ids.bos, dtype=torch.long, device=src.device)
    for t in range(strategy.steps):
        logp = stepper.log_probs(prefix)  # (N, V)
        chosen = strategy.step(t, logp, mask_scores(logp, prefix[:, 1:], masking, ids.eos),
                               prefix)
        if chosen is None:
            break
        kept = prefix if chosen.rows is None else prefix[chosen.rows]
        prefix = torch.cat([kept, chosen.tokens[:, None]], dim=1)  # (N', t+2)
        if chosen.rows is not None:
            stepper.reorder(chosen.rows)
    return strategy.results()


#: (masked log-probs (N, V), example index of each row (N,), step t) -> next tokens (N,).
Chooser = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


class OneEach:
    """The strategy of one hypothesis per example (greedy, sampling): ``choose`` picks each
    row's next token; a row leaves as soon as it emits EOS or reaches its cap, so a finished
    row never continues after its EOS. Scores are the model's own log-probabilities (the
    masking forbids, it never rescores)."""

    width = 1

    def __init__(self, caps: torch.Tensor, choose: Chooser, eos: int) -> None:
        self.caps, self.choose, self.eos = caps, choose, eos
        self.steps = int(caps.max())
        self.rows = torch.arange(len(caps), device=caps.device)  # example index of each row
        self.scores = torch.zeros(len(caps), device=caps.device)
        self.out: list[Hypothesis | None] = [None] * len(caps)

    def step(self, t: int, logp: torch.Tensor, masked: torch.Tensor, prefix: torch.Tensor
             ) -> Step | None:
        tok = self.choose(masked, self.rows, t)  # (N,)
        scores = self.scores + logp.gather(1, tok[:, None])[:, 0]
        ended = (tok == self.eos) | (self.caps[self.rows] <= t + 1)
        for i in ended.nonzero()[:, 0].tolist():
            eos = int(tok[i]) == self.eos
            toks = prefix[i, 1:].tolist() + ([] if eos else [int(tok[i])])
            self.out[int(self.rows[i])] = Hypothesis(toks, float(scores[i]), float(scores[i]),
                                                     eos)
        if not bool(ended.any()):
            self.scores = scores
            return Step(None, tok)
        keep = (~ended).nonzero()[:, 0]
        if keep.numel() == 0:
            return None
        self.rows, self.scores = self.rows[keep], scores[keep]
        return Step(keep, tok[keep])

    def results(self) -> list[list[Hypothesis]]:
        return [[h] for h in self.out if h is not None]


def run_single(
    model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor, ids: SpecialIds,
    caps: torch.Tensor, masking: Masking, choose: Chooser, use_cache: bool,
) -> list[Hypothesis]:
    """Decode one hypothesis per example, choosing each next token with ``choose``.

    Args:
        src, src_mask: (B, S) source ids and mask (True = real).
        caps: (B,) maximum length per example, EOS included.

    Returns:
        B hypotheses, in batch order.
    """
    found = run_search(model, src, src_mask, ids, masking, OneEach(caps, choose, ids.eos),
                       use_cache)
    return [hyps[0] for hyps in found]
