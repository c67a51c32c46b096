"""Choosing a decoder from the decode section of params.yaml."""

from __future__ import annotations

import math

import torch

from seqcore.config import DecodeConfig
from seqcore.contract import SpecialIds
from seqcore.data.examples import Example
from seqcore.decoding.beam import BeamSettings, beam_search
from seqcore.decoding.greedy import Hypothesis, greedy
from seqcore.decoding.predictions import Decoder
from seqcore.decoding.sampling import SamplingSettings, sample
from seqcore.decoding.search import Masking
from seqcore.models.base import EncoderDecoder


def max_length(cfg: DecodeConfig, src_len: int) -> int:
    """The generation cap: ``max_len``, and ``ceil(ratio * src_len) + 5`` when ratio > 0."""
    if cfg.max_len_ratio > 0:
        return min(cfg.max_len, math.ceil(cfg.max_len_ratio * src_len) + 5)
    return cfg.max_len


def masking(cfg: DecodeConfig, ids: SpecialIds) -> Masking:
    """The token-forbidding rules: PAD and BOS are never labels, so never outputs."""
    banned = tuple(sorted({ids.pad, ids.bos, *cfg.banned_tokens}))
    return Masking(min_len=cfg.min_len, no_repeat_ngram=cfg.no_repeat_ngram, banned=banned)


def make_decoder(cfg: DecodeConfig, ids: SpecialIds, use_cache: bool = True) -> Decoder:
    """A function decoding one padded batch into n-best lists.

    Each example gets its own length cap (from its own source length), so no output depends
    on which other examples share its batch. ``use_cache=False`` selects full-prefix
    recomputation (same outputs, slower; for tests and benchmarks).
    """
    rules = masking(cfg, ids)

    def run(model: EncoderDecoder, src: torch.Tensor, mask: torch.Tensor,
            examples: list[Example]) -> list[list[Hypothesis]]:
        caps = [max_length(cfg, len(ex.src)) for ex in examples]
        if cfg.strategy == "beam":
            settings = BeamSettings(cfg.beam_size, cfg.n_best, cfg.length_norm, cfg.alpha)
            return beam_search(model, src, mask, ids, caps, settings, rules, use_cache)
        if cfg.strategy == "sample":
            settings_s = SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)
            hyps = sample(model, src, mask, ids, [ex.id for ex in examples], caps, settings_s,
                          rules, use_cache)
        else:
            hyps = greedy(model, src, mask, ids, caps, masking=rules, use_cache=use_cache)
        return [[h] for h in hyps]

    return run
