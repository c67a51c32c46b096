"""The sequence-contract signature: its format, its diff, and stages stopping on a mismatch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from pipeline.stage import signature
from seqcore.config import Config, SequenceConfig, TrainConfig, load_config
from seqcore.signature import (
    PENDING, contract_signature, derived_params, parse_signature, signature_diff)
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop
from tests.factories import CONTRACT, IDS, REPO, examples, tiny_model


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
    CONTRACT.save(tmp_path / cfg.paths.tokenizer / "contract.json")
    current = contract_signature(cfg, CONTRACT)
    assert signature(cfg, "decode", current, "models/model.pt") == current
    assert f"[decode] contract: {current}" in capsys.readouterr().err
    stored = current.replace("eos:3", "eos:4").replace("ls:0.1", "ls:0")
    with pytest.raises(SystemExit) as stop:
        signature(cfg, "decode", stored, "models/model.pt")
    message = str(stop.value.code)
    assert "contract mismatch with models/model.pt" in message
    assert "eos: '4' != '3'" in message and "ls: '0' != '0.1'" in message


def clipped_grads(tmp_path: Path, clip_norm: float) -> list[torch.Tensor]:
    """The gradients one real training step leaves: 2 micro-batches, an enabled grad scaler
    (fp16's, at 2**12), the given clip threshold."""
    cfg = TrainConfig(amp="none", batch_size=2, accum_steps=2, bucket_width=100, schedule="constant",
                      lr=1e-3, warmup_steps=0, threads=1, clip_norm=clip_norm)
    loop = TrainLoop(tiny_model(enc_layers=1, dec_layers=1, max_len=16).train(), cfg,
                     Seq2SeqFeed((examples(8, seed=7), []), IDS, SequenceConfig(), cfg),
                     CheckpointDir(tmp_path / f"ck{clip_norm}", 1), {}, 16)
    loop.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    loop.train_step()
    return [p.grad for p in loop.model.parameters()]


def test_derived_params_state_where_clipping_happens(cfg: Config, tmp_path: Path) -> None:
    derived = derived_params(cfg)
    assert derived["derived.clip.where"] == "after unscale, after all micro-batches of the step"
    assert derived["derived.clip.norm"] == "global L2 over all parameters"
    off = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, clip_norm=0.0))
    assert derived_params(off)["derived.clip.norm"] == "off"
    # What the record states is what the step does: the clipped gradient is the unscaled
    # gradient of both micro-batches together, scaled to the threshold (clipping each
    # micro-batch, or the scaled gradient, gives another direction or norm).
    full = clipped_grads(tmp_path, 0.0)
    norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in full])))
    assert norm > 0.01
    for got, want in zip(clipped_grads(tmp_path, 0.01), full, strict=True):
        torch.testing.assert_close(got, want * (0.01 / norm), rtol=1e-3, atol=1e-9)


def test_a_key_added_later_is_in_the_training_contract_only_off_its_old_behaviour(
        cfg: Config) -> None:
    """Checkpoints written before ``model.transformer.attention_kernel`` existed were trained
    with ``auto``: at that value the key stays out of the contract so they still resume; any
    other value is compared like every key."""
    from seqcore.signature import ADDED_KEYS, training_contract  # noqa: PLC0415

    def kernel(name: str) -> Config:
        return dataclasses.replace(cfg, model=dataclasses.replace(
            cfg.model, transformer=dataclasses.replace(cfg.model.transformer,
                                                       attention_kernel=name)))

    assert ADDED_KEYS == {"model.transformer.attention_kernel": "auto"}
    auto = training_contract(kernel("auto"), CONTRACT)
    assert not any(k.endswith("attention_kernel") for k in auto)
    math = training_contract(kernel("math"), CONTRACT)
    assert {k: v for k, v in math.items() if k not in auto} == {
        "model.transformer.attention_kernel": "math"}
    assert {k: v for k, v in math.items() if k in auto} == auto
