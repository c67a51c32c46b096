"""The sequence-contract signature: its format, its diff, and stages stopping on a mismatch."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pipeline.stage import signature
from seqcore.config import Config, load_config
from seqcore.signature import (
    PENDING, contract_signature, derived_params, parse_signature, signature_diff)
from tests.factories import REPO


#: A hand-written tokenizer contract (what pipeline/tokenizer.py writes).
CONTRACT = {
    "special_ids": {"pad": 0, "unk": 1, "bos": 2, "eos": 3},
    "src": {"model_type": "char", "vocab_size": 33, "sha256": "761378d3" + "0" * 56,
            "file": "src.model"},
    "tgt": {"model_type": "word", "vocab_size": 40, "sha256": "0faf2d1a" + "1" * 56,
            "file": "tgt.model"},
    "data_sha256": "81917843c7f4" + "2" * 52,
}


@pytest.fixture
def cfg() -> Config:
    return load_config(REPO / "params.yaml")


def test_signature_spells_each_contract_field_in_sacrebleu_style(cfg: Config) -> None:
    sig = contract_signature(cfg, CONTRACT)
    assert sig.startswith("task:g2p|data:81917843c7f4|src:char-v33-761378d3|"
                          "tgt:word-v40-0faf2d1a|pad:0|unk:1|bos:2|eos:3|maxsrc:32|maxtgt:32|"
                          "trunc:drop|norm:nfkc|case:fold|stress:strip|loss:token-mean|ls:0.1|"
                          "fmt:1|version:")
    assert "|".join(f"{k}:{v}" for k, v in parse_signature(sig).items()) == sig


def test_signature_diff_names_exactly_the_changed_fields(cfg: Config) -> None:
    changed = dataclasses.replace(cfg, sequence=dataclasses.replace(cfg.sequence,
                                                                    max_src_len=48))
    a, b = contract_signature(cfg, CONTRACT), contract_signature(changed, CONTRACT)
    assert signature_diff(a, b) == ["maxsrc: '32' != '48'"]
    assert signature_diff(a, a) == []


def test_stages_before_the_tokenizer_sign_tokenizer_fields_as_pending(cfg: Config) -> None:
    fields = parse_signature(contract_signature(cfg, None))
    assert fields["data"] == cfg.data.sha256[:12]
    assert {fields[k] for k in ("src", "tgt", "pad", "unk", "bos", "eos")} == {PENDING}


def test_stage_stops_with_a_field_diff_when_the_stored_signature_differs(
        cfg: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / cfg.paths.tokenizer).mkdir()
    (tmp_path / cfg.paths.tokenizer / "contract.json").write_text(json.dumps(CONTRACT))
    current = contract_signature(cfg, CONTRACT)
    assert signature(cfg, "decode", current, "models/model.pt") == current
    assert f"[decode] contract: {current}" in capsys.readouterr().err
    stored = current.replace("eos:3", "eos:4").replace("ls:0.1", "ls:0")
    with pytest.raises(SystemExit) as stop:
        signature(cfg, "decode", stored, "models/model.pt")
    message = str(stop.value.code)
    assert "contract mismatch with models/model.pt" in message
    assert "eos: '4' != '3'" in message and "ls: '0' != '0.1'" in message


def test_derived_params_state_where_clipping_happens(cfg: Config) -> None:
    derived = derived_params(cfg)
    assert derived["derived.clip.where"] == "after unscale, after all micro-batches of the step"
    off = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, clip_norm=0.0))
    assert derived_params(off)["derived.clip.norm"] == "off"
