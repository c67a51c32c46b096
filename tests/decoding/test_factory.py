"""make_decoder (seqcore/decoding/factory.py) holds every setting of the decode section."""
from __future__ import annotations

import math

import torch

from seqcore.config import DecodeConfig
from seqcore.data.examples import Example
from seqcore.decoding.beam import BeamSettings, beam_search
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.sampling import SamplingSettings, sample
from seqcore.decoding.search import Masking
from seqcore.models.transformer import Transformer
from seqcore.sequences import make_batch
from tests.factories import IDS, examples, tiny_model


def decode_inputs() -> tuple[Transformer, torch.Tensor, torch.Tensor, list[Example]]:
    """The smallest Transformer (one layer each way, 16 positions) and a batch of 6."""
    data = examples(6, seed=5, high=10)
    b = make_batch(data, IDS)
    return tiny_model(enc_layers=1, dec_layers=1, max_len=16), b.src, b.src_mask, data


def test_make_decoder_holds_every_beam_setting_of_the_decode_section() -> None:
    cfg = DecodeConfig(strategy="beam", beam_size=3, n_best=2, length_norm="gnmt", alpha=1.5,
                       min_len=1, no_repeat_ngram=2, banned_tokens=(5,), max_len=9)
    dec = make_decoder(cfg, IDS)
    assert dec.strategy == "beam"
    assert dec.beam == BeamSettings(beam_size=3, n_best=2, length_norm="gnmt", alpha=1.5)
    assert dec.masking == Masking(min_len=1, no_repeat_ngram=2, banned=(0, 2, 5))
    model, src, mask, data = decode_inputs()
    with torch.inference_mode():
        got = dec(model, src, mask, data)
        want = beam_search(model, src, mask, IDS, 9, BeamSettings(3, 2, "gnmt", 1.5),
                           Masking(1, 2, (0, 2, 5)), True)
    assert got == want


def test_make_decoder_holds_every_sampling_setting_of_the_decode_section() -> None:
    cfg = DecodeConfig(strategy="sample", temperature=0.7, top_k=4, top_p=0.9, seed=11,
                       max_len=9, max_len_ratio=0.5)
    dec = make_decoder(cfg, IDS)
    assert dec.strategy == "sample"
    assert dec.sampling == SamplingSettings(temperature=0.7, top_k=4, top_p=0.9, seed=11)
    assert [dec.cap(n) for n in (1, 4, 9)] == [6, 7, 9]  # min(9, ceil(0.5 n) + 5)
    model, src, mask, data = decode_inputs()
    caps = [min(9, math.ceil(0.5 * len(ex.src)) + 5) for ex in data]
    with torch.inference_mode():
        got = dec(model, src, mask, data)
        want = sample(model, src, mask, IDS, [ex.id for ex in data], caps,
                      SamplingSettings(0.7, 4, 0.9, 11), Masking(banned=(0, 2)), True)
    assert got == [[h] for h in want]
