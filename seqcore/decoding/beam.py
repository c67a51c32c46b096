"""Batched beam search with finished hypotheses kept aside and an exact stopping rule.

Per example and step, each of the K live hypotheses is extended by every token; the 2K best
candidates are ranked (a parent holds one EOS candidate, so at least K of them continue).
Among the first K ranks, EOS candidates *finish*: they leave the beam and join the example's
finished pool. The first K non-EOS candidates form the next beam. At an example's length cap
its candidates finish as truncated (``eos=False``).

Tie rule: candidates with equal scores are ranked by the lower token id, then by the earlier
hypothesis (lower beam slot); finished hypotheses with equal normalised scores keep the order
in which they finished.

Length normalisation, applied when a hypothesis finishes (never to the running scores):
``norm = score / lp(len)`` with ``len`` the generated tokens including EOS and
``lp = 1`` (none), ``len`` (avg: average log-probability) or ``((5 + len) / 6) ** alpha``
(gnmt; Wu et al., 2016, eq. 14).

Stopping: an example is done when its n-th best finished hypothesis (n = n_best) scores at
least the best any live hypothesis could still reach. Log-probabilities are <= 0, so a live
hypothesis with score s can at best finish with ``max(s / lp(t + 2), s / lp(cap))`` (lp is
monotonic in len). The rule is exact: it never stops a search that could still improve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from seqcore.config import DecodeConfig
from seqcore.contract import SpecialIds
from seqcore.decoding.search import Hypothesis, Masking, Step, length_caps, run_search
from seqcore.models.base import EncoderDecoder

LengthNorm = Literal["none", "avg", "gnmt"]


@dataclass(frozen=True)
class BeamSettings:
    """Beam width, n-best size and length normalisation (see the module docstring); the
    defaults are the decode section's (seqcore.config.DecodeConfig)."""

    beam_size: int = DecodeConfig.beam_size
    n_best: int = DecodeConfig.n_best
    length_norm: LengthNorm = DecodeConfig.length_norm
    alpha: float = DecodeConfig.alpha  # gnmt exponent


def length_penalty(lengths: torch.Tensor, norm: LengthNorm, alpha: float) -> torch.Tensor:
    """lp(len) for (…) int lengths (EOS counted): 1, len, or ((5 + len) / 6) ** alpha."""
    lengths = lengths.float()
    if norm == "none":
        return torch.ones_like(lengths)
    if norm == "avg":
        return lengths
    return ((5.0 + lengths) / 6.0) ** alpha


@dataclass
class _Pool:
    """Finished hypotheses of one example, in finishing order."""

    hyps: list[Hypothesis]

    def nth_best(self, n: int) -> float:
        """The n-th best normalised score, or -inf with fewer than n hypotheses."""
        norms = sorted((h.norm_score for h in self.hyps), reverse=True)
        return norms[n - 1] if len(norms) >= n else float("-inf")

    def best(self, n: int) -> list[Hypothesis]:
        ranked = sorted(self.hyps, key=lambda h: -h.norm_score)  # stable: earlier first
        return ranked[:n] or [Hypothesis([], float("-inf"), float("-inf"), False)]


def _rank(scores: torch.Tensor, logp: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """The 2K best candidates per example, in tie-rule order.

    Args:
        scores: (A*K,) running scores; logp: (A*K, V) masked log-probs.

    Returns:
        cand_scores, tokens, parents: each (A, min(2K, V*K)), best first.
    """
    v = logp.shape[1]
    cand = (scores[:, None] + logp).view(-1, k, v).transpose(1, 2).reshape(-1, v * k)
    # token-major layout + stable sort = ties go to the lower token id, then the lower slot
    cand_scores, idx = torch.sort(cand, dim=-1, descending=True, stable=True)
    width = min(2 * k, v * k)
    idx = idx[:, :width]
    return cand_scores[:, :width], idx // k, idx % k


def _finish(
    pools: list[_Pool], examples: list[int], prefix: torch.Tensor, cand: tuple[torch.Tensor, ...],
    final: torch.Tensor, eos: int, settings: BeamSettings,
) -> None:
    """Move the candidates flagged in ``final`` (A, 2K) into their examples' pools."""
    cand_scores, tokens, parents = cand
    k, t = settings.beam_size, prefix.shape[1] - 1
    lp = float(length_penalty(torch.tensor(t + 1), settings.length_norm, settings.alpha))
    where = final.nonzero()  # (M, 2) (example slot, candidate rank)
    a, j = where[:, 0], where[:, 1]
    rows = prefix[a * k + parents[a, j], 1:].tolist()  # (M, t)
    for e, row, tok, score in zip(a.tolist(), rows, tokens[a, j].tolist(),
                                  cand_scores[a, j].tolist(), strict=True):
        is_eos = tok == eos
        hyp = Hypothesis(row if is_eos else row + [tok], score, score / lp, is_eos)
        pools[examples[e]].hyps.append(hyp)


def _done(
    pools: list[_Pool], examples: list[int], live: torch.Tensor, t: int, caps: torch.Tensor,
    settings: BeamSettings,
) -> torch.Tensor:
    """(A,) True where no live hypothesis (scores ``live`` (A, K)) can beat the n-th best."""
    nxt = torch.full_like(caps, t + 2)
    lp_next = length_penalty(nxt, settings.length_norm, settings.alpha)[:, None]  # (A, 1)
    lp_cap = length_penalty(caps, settings.length_norm, settings.alpha)[:, None]
    bound = torch.maximum(live / lp_next, live / lp_cap).amax(dim=1)  # (A,)
    nth = torch.tensor([pools[e].nth_best(settings.n_best) for e in examples],
                       device=live.device)
    return nth >= bound  # no finite live hypothesis: bound = -inf, always done


class BeamStrategy:
    """Beam search as a strategy of the one driver (seqcore.decoding.search.run_search): K
    rows per example, ranked, finished and cut as the module docstring says."""

    def __init__(self, caps: torch.Tensor, settings: BeamSettings, eos: int) -> None:
        b, k = len(caps), settings.beam_size
        self.caps, self.settings, self.eos, self.width = caps, settings, eos, k
        self.steps = int(caps.max())
        self.examples = list(range(b))  # batch index of each active example
        scores = torch.full((b, k), float("-inf"), device=caps.device)
        scores[:, 0] = 0.0  # one live hypothesis per example at the start
        self.scores = scores.view(-1)  # (A*K,)
        self.pools = [_Pool([]) for _ in range(b)]

    def step(self, t: int, logp: torch.Tensor, masked: torch.Tensor, prefix: torch.Tensor
             ) -> Step | None:
        k, examples = self.width, self.examples
        cand = _rank(self.scores, masked, k)
        cand_scores, tokens, parents = cand
        act_caps = self.caps[examples]  # (A,)
        last = (act_caps <= t + 1)[:, None]
        rank = torch.arange(tokens.shape[1], device=masked.device)[None, :]
        is_eos = tokens == self.eos
        live_rank = torch.cumsum((~is_eos).long(), dim=1) - 1
        cont = ~is_eos & (live_rank < k)  # the next beam (or, at the cap, the truncated)
        final = torch.isfinite(cand_scores) & ((is_eos & (rank < k)) | (cont & last))
        _finish(self.pools, examples, prefix, cand, final, self.eos, self.settings)
        pick = torch.sort(torch.where(cont, rank, rank + tokens.shape[1]), dim=1,
                          stable=True).indices[:, :k]  # (A, K) positions of the next beam
        live = cand_scores.gather(1, pick)
        done = last[:, 0] | _done(self.pools, examples, live, t, act_caps, self.settings)
        keep = (~done).nonzero()[:, 0]
        if keep.numel() == 0:
            return None
        rows = (keep[:, None] * k + parents[keep].gather(1, pick[keep])).view(-1)  # (A'*K,)
        self.scores = live[keep].view(-1)
        self.examples = [examples[i] for i in keep.tolist()]
        return Step(rows, tokens[keep].gather(1, pick[keep]).view(-1))

    def results(self) -> list[list[Hypothesis]]:
        return [pool.best(self.settings.n_best) for pool in self.pools]


@torch.no_grad()
def beam_search(
    model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor, ids: SpecialIds,
    max_len: int | list[int], settings: BeamSettings, masking: Masking = Masking(),
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """Beam search over a padded source batch.

    Args:
        src, src_mask: (B, S) source ids and mask (True = real).
        max_len: maximum generated tokens, EOS included: one int or one per example.

    Returns:
        B lists of up to ``n_best`` hypotheses, best (highest norm_score) first.
    """
    if not 1 <= settings.n_best <= settings.beam_size:
        raise ValueError(f"need 1 <= n_best <= beam_size, got {settings}")
    caps = length_caps(max_len, src.shape[0], src.device)
    return run_search(model, src, src_mask, ids, masking, BeamStrategy(caps, settings, ids.eos),
                      use_cache)
