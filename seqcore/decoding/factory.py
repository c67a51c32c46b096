"""Choosing a decoder from the decode section of params.yaml."""

from __future__ import annotations

import math

import torch

from seqcore.config import DecodeConfig
from seqcore.contract import SpecialIds
from seqcore.data.examples import Example
from seqcore.decoding.greedy import Hypothesis, greedy
from seqcore.decoding.predictions import Decoder
from seqcore.models.base import EncoderDecoder


def max_length(cfg: DecodeConfig, src_len: int) -> int:
    """The generation cap: ``max_len``, and ``ceil(ratio * src_len) + 5`` when ratio > 0."""
    if cfg.max_len_ratio > 0:
        return min(cfg.max_len, math.ceil(cfg.max_len_ratio * src_len) + 5)
    return cfg.max_len


def make_decoder(cfg: DecodeConfig, ids: SpecialIds) -> Decoder:
    """A function decoding one padded batch into n-best lists."""
    if cfg.strategy != "greedy":
        raise NotImplementedError(f"decode.strategy {cfg.strategy!r} is not available yet")

    def run(model: EncoderDecoder, src: torch.Tensor, mask: torch.Tensor,
            examples: list[Example]) -> list[list[Hypothesis]]:
        cap = max(max_length(cfg, len(ex.src)) for ex in examples)
        return [[h] for h in greedy(model, src, mask, ids, cap, cfg.min_len)]

    return run
