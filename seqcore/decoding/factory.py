"""Choosing a decoder from the decode section of params.yaml."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from seqcore.config import DecodeConfig
from seqcore.contract import SpecialIds
from seqcore.data.examples import Example
from seqcore.decoding.beam import BeamSettings, beam_search
from seqcore.decoding.greedy import Hypothesis, greedy
from seqcore.decoding.sampling import SamplingSettings, sample
from seqcore.decoding.search import Masking
from seqcore.models.base import EncoderDecoder


def masking(cfg: DecodeConfig, ids: SpecialIds) -> Masking:
    """The token-forbidding rules: PAD and BOS are never labels, so never outputs."""
    banned = tuple(sorted({ids.pad, ids.bos, *cfg.banned_tokens}))
    return Masking(min_len=cfg.min_len, no_repeat_ngram=cfg.no_repeat_ngram, banned=banned)


@dataclass(frozen=True)
class SearchDecoder:
    """A decoder built from the decode section: the settings it holds, and the call.

    The settings are fields (not a closure) so a test can check that every decode parameter
    reached the search (issue 18: a dropped ``length_norm`` or ``seed`` left the suite green).

    Attributes:
        strategy: greedy, beam or sample.
        beam: beam width, n-best size, length normalisation and alpha (beam only).
        sampling: temperature, top-k, top-p and seed (sample only).
        masking: min length, no-repeat n-gram size and banned ids (every strategy).
        max_len, max_len_ratio: the per-example length cap (see ``cap``).
        use_cache: False selects full-prefix recomputation (same outputs, slower).
    """

    strategy: str
    beam: BeamSettings
    sampling: SamplingSettings
    masking: Masking
    max_len: int
    max_len_ratio: float
    ids: SpecialIds
    use_cache: bool = True

    def cap(self, src_len: int) -> int:
        """The generation cap: ``max_len``, and ``ceil(ratio * src_len) + 5`` when ratio > 0."""
        if self.max_len_ratio > 0:
            return min(self.max_len, math.ceil(self.max_len_ratio * src_len) + 5)
        return self.max_len

    def __call__(self, model: EncoderDecoder, src: torch.Tensor, mask: torch.Tensor,
                 examples: list[Example]) -> list[list[Hypothesis]]:
        """Decode one padded batch, src and mask (B, S), into one n-best list per example."""
        ids, caps = self.ids, [self.cap(len(ex.src)) for ex in examples]
        if self.strategy == "beam":
            return beam_search(model, src, mask, ids, caps, self.beam, self.masking,
                               self.use_cache)
        if self.strategy == "sample":
            hyps = sample(model, src, mask, ids, [ex.id for ex in examples], caps, self.sampling,
                          self.masking, self.use_cache)
        else:
            hyps = greedy(model, src, mask, ids, caps, masking=self.masking,
                          use_cache=self.use_cache)
        return [[h] for h in hyps]


def make_decoder(cfg: DecodeConfig, ids: SpecialIds, use_cache: bool = True) -> SearchDecoder:
    """A function decoding one padded batch into n-best lists.

    Each example gets its own length cap (from its own source length), so no output depends
    on which other examples share its batch. ``use_cache=False`` selects full-prefix
    recomputation (same outputs, slower; for tests and benchmarks).
    """
    return SearchDecoder(
        strategy=cfg.strategy,
        beam=BeamSettings(cfg.beam_size, cfg.n_best, cfg.length_norm, cfg.alpha),
        sampling=SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed),
        masking=masking(cfg, ids), max_len=cfg.max_len, max_len_ratio=cfg.max_len_ratio,
        ids=ids, use_cache=use_cache)
