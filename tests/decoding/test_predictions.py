"""Decoded prediction rows (seqcore/decoding/predictions.py): EOS and truncation."""
from __future__ import annotations

from pathlib import Path

import torch

from seqcore.artifacts.predictions import PredictionRow
from seqcore.config import DecodeConfig, config_from_dict
from seqcore.data.examples import Example
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from tests.factories import IDS, IdPieces, evaluated_failures, tiny_model


def greedy_rows(eos_bias: float, max_len: int) -> list[PredictionRow]:
    """Greedy decode of 3 sources by the tiny GRU model with ``eos_bias`` added to EOS."""
    model = tiny_model("gru", enc_layers=1, dec_layers=1)
    with torch.no_grad():
        model.proj.bias[IDS.eos] += eos_bias
    data = [Example(str(i), str(i), f"s{i}", "4 5", [4 + i, 5, 6], [4, 5], True) for i in range(3)]
    decoder = make_decoder(DecodeConfig(strategy="greedy", max_len=max_len), IDS)
    return decode_examples(model, data, decoder, IDS, IdPieces(), 2)  # type: ignore[arg-type]


def test_greedy_decode_hitting_max_len_writes_eos_false_and_is_flagged_truncated(
        tmp_path: Path) -> None:
    rows = greedy_rows(-1e4, max_len=5)  # EOS never wins: every row runs to the cap
    assert [(r.length, len(r.tokens), r.eos) for r in rows] == [(5, 5, False)] * 3
    assert IDS.eos not in [t for r in rows for t in r.tokens]
    got = evaluated_failures(rows, config_from_dict({"task": "parallel"}), tmp_path)
    assert got["metrics"]["truncated"] == {"count": 3, "rate": 1.0}
    assert got["metrics"]["empty"]["count"] == 0


def test_greedy_decode_ending_on_eos_writes_eos_true_and_is_not_truncated(tmp_path: Path) -> None:
    rows = greedy_rows(1e4, max_len=5)  # EOS wins at once: empty hypotheses that did end
    assert [(r.hypothesis, r.tokens, r.length, r.eos) for r in rows] == [("", [], 0, True)] * 3
    got = evaluated_failures(rows, config_from_dict({"task": "parallel"}), tmp_path)
    assert got["metrics"]["truncated"]["count"] == 0
    assert got["metrics"]["empty"] == {"count": 3, "rate": 1.0}
