"""params.yaml loading: unknown keys, types, choices and cross-field rules are rejected."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqcore.config import Config, ConfigError, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[1]


def test_repository_params_load() -> None:
    cfg = load_config(REPO / "params.yaml")
    assert isinstance(cfg, Config)
    assert cfg.tokenizer.pad_id != cfg.tokenizer.eos_id


@pytest.mark.parametrize("raw, message", [
    ({"train": {"max_stepz": 3}}, "unknown key"),
    ({"decode": {"strategy": "nucleus"}}, r"not one of \['greedy', 'beam', 'sample'\]"),
    ({"train": {"batch_size": "32"}}, "expected int"),
    ({"decode": {"strategy": "beam", "beam_size": 2, "n_best": 3}}, "n_best"),
    ({"tokenizer": {"pad_id": 3}}, "distinct"),
    ({"data": {"source": "tsv"}}, "data.path"),
])
def test_invalid_params_are_rejected_with_a_named_reason(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(raw)
