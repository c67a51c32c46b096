"""Sampling's per-example seeds and uniforms (seqcore/decoding/sampling.py)."""
from __future__ import annotations

import hashlib

import pytest
import torch

from seqcore.decoding.sampling import draw_uniforms, example_seed


def test_an_example_s_seed_is_the_first_8_bytes_of_sha256_little_endian_and_63_bits() -> None:
    digest = hashlib.sha256(b"12\x00word-7").digest()
    assert example_seed(12, "word-7") == int.from_bytes(digest[:8], "little") % 2**63
    assert example_seed(12, "word-7") == 8680977643365419885  # the same on any machine


def test_uniforms_follow_each_example_s_id_not_its_row() -> None:
    one = draw_uniforms(3, ["x", "y"], [2, 3])
    swapped = draw_uniforms(3, ["y", "x"], [3, 2])
    assert torch.equal(one[0, :2], swapped[1, :2]) and torch.equal(one[1], swapped[0])
    assert not torch.equal(one[0, :2], one[1, :2])  # two ids, two streams
    assert one[0, 2] == 0  # past the cap
    assert draw_uniforms(3, [], []).shape == (0, 0)
    with pytest.raises(ValueError):
        draw_uniforms(3, ["x", "y"], [2])
