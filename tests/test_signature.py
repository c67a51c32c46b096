"""The signatures (data, tokenizer, contract, result): their format, what each holds, their
diff, stages stopping on a mismatch, and the training contract without guards (issue 34)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeline.stage import signature
from seqcore.config import Config, DecodeConfig, load_config
from seqcore.signature import (
    ADDED_KEYS, GUARD_KEYS, NO_RESULT_KEYS, contract_signature, data_signature,
    result_params, result_signature, tokenizer_signature, training_contract)
from seqcore.signature_format import inherited_diff, parse_signature
from seqcore.tasks import get_task
from seqcore.training.distributed import checkpoint_folder_name
from tests.factories import CONTRACT, REPO


@pytest.fixture
def cfg() -> Config:
    return load_config(REPO / "params.yaml")


def edit(cfg: Config, **sections: dict[str, object]) -> Config:
    """``cfg`` with each named section's fields changed as given."""
    return dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **changes)
                                       for name, changes in sections.items()})


def test_signature_spells_each_contract_field_in_sacrebleu_style(cfg: Config) -> None:
    sig = contract_signature(cfg, CONTRACT)
    assert sig.startswith("task:g2p|data:81917843c7f4|src:char-v33-761378d3|"
                          "tgt:word-v40-0faf2d1a|pad:0|unk:1|bos:2|eos:3|maxsrc:32|maxtgt:32|"
                          "trunc:drop|norm:nfkc|case:fold|stress:strip|loss:token-mean|ls:0.1|"
                          "fmt:2|version:")
    assert "|".join(f"{k}:{v}" for k, v in parse_signature(sig).items()) == sig


def test_stress_is_signed_and_recorded_only_for_the_cmudict_source(cfg: Config) -> None:
    # Issue 30: a user's TSV is read as it is; its contract claimed `stress:strip`.
    own = edit(cfg, data={"source": "tsv", "path": "data/external/own.tsv"})
    for sign in (lambda c: contract_signature(c, CONTRACT), lambda c: data_signature(c, "0" * 64),
                 lambda c: tokenizer_signature(c, CONTRACT)):
        assert parse_signature(sign(cfg))["stress"] == "strip"
        assert "stress" not in parse_signature(sign(own))
    for recorded in (result_params, lambda c: training_contract(c, CONTRACT)):
        assert "data.keep_stress" in recorded(cfg)
        assert "data.keep_stress" not in recorded(own)


def test_the_tokenizer_signature_is_the_contract_signature_without_the_loss(cfg: Config) -> None:
    # a loss edit must not make the tokenizer stale (issue 34); the contract signature
    # extends it field for field
    tok = tokenizer_signature(cfg, CONTRACT)
    assert "loss:" not in tok and "ls:" not in tok
    full = contract_signature(cfg, CONTRACT)
    assert inherited_diff(full, tok) == []
    assert set(parse_signature(full)) - set(parse_signature(tok)) == {"loss", "ls"}
    smoothed = edit(cfg, sequence={"label_smoothing": 0.2})
    assert tokenizer_signature(smoothed, CONTRACT) == tok
    assert inherited_diff(contract_signature(smoothed, CONTRACT), tok) == []


def test_signature_diff_names_exactly_the_changed_fields(cfg: Config) -> None:
    a = contract_signature(cfg, CONTRACT)
    b = contract_signature(edit(cfg, sequence={"max_src_len": 48}), CONTRACT)
    assert inherited_diff(b, a) == ["maxsrc: '48' != '32'"]
    assert inherited_diff(a, a) == []


def test_the_data_signature_holds_data_fields_only(cfg: Config) -> None:
    fields = parse_signature(data_signature(cfg, "81917843c7f4" + "0" * 52))
    assert fields["data"] == "81917843c7f4"
    assert not {"src", "tgt", "maxsrc", "loss", "ls"} & set(fields)


def test_stage_stops_with_a_field_diff_when_the_stored_signature_does_not_extend_the_tokenizers(
        cfg: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    contract = CONTRACT.with_signature(tokenizer_signature(cfg, CONTRACT))
    contract.save(tmp_path / cfg.paths.tokenizer / "contract.json")
    current = contract_signature(cfg, contract)
    assert signature(cfg, "decode", current, "models/model.pt") == current
    assert f"[decode] contract: {current}" in capsys.readouterr().err
    # the loss fields are the model's own: another label smoothing is no mismatch
    other_loss = current.replace("ls:0.1", "ls:0")
    assert signature(cfg, "decode", other_loss, "models/model.pt") == other_loss
    stored = current.replace("eos:3", "eos:4").replace("maxsrc:32", "maxsrc:48")
    with pytest.raises(SystemExit) as stop:
        signature(cfg, "decode", stored, "models/model.pt")
    message = str(stop.value.code)
    assert "contract mismatch: models/model.pt against tokenizer/contract.json" in message
    assert "eos: '4' != '3'" in message and "maxsrc: '48' != '32'" in message


DECODE = DecodeConfig(strategy="greedy", batch_size=64, device="auto")
DRAWS = "ci:95|bs:1000|rs:12345|by:word"


def test_a_greedy_and_a_beam_result_of_one_model_sign_differently(cfg: Config) -> None:
    sig = contract_signature(cfg, CONTRACT)
    args = (sig, "c" * 64, "m" * 64)
    greedy = result_signature(*args, DECODE, DRAWS)
    beam = result_signature(*args, dataclasses.replace(DECODE, strategy="beam"), DRAWS)
    assert greedy != beam
    assert parse_signature(beam)["beam"] == "5" and "beam" not in parse_signature(greedy)
    assert inherited_diff(greedy, sig.rsplit("|fmt:", 1)[0]) == []
    fields = parse_signature(greedy)
    assert (fields["train"], fields["model"]) == ("c" * 12, "m" * 12)
    assert (fields["dec"], fields["rescore"], fields["rw"], fields["bs"]) == (
        "greedy", "baseline", "0.6", "1000")
    # a setting of another strategy does not change a greedy result's signature; one of its
    # own, the model, the training contract or the bootstrap does
    assert result_signature(*args, dataclasses.replace(DECODE, beam_size=3), DRAWS) == greedy
    for changed in (result_signature(sig, "d" * 64, "m" * 64, DECODE, "bs:1000"),
                    result_signature(sig, "c" * 64, "n" * 64, DECODE, "bs:1000"),
                    result_signature(*args, dataclasses.replace(DECODE, max_len=20), "bs:1000"),
                    result_signature(*args, DECODE, "bs:500")):
        assert changed != result_signature(*args, DECODE, "bs:1000")


def test_guards_and_bookkeeping_keys_enter_no_training_contract(cfg: Config) -> None:
    # raising a guard must not move the checkpoint folder (a retrain from scratch)
    base = training_contract(cfg, CONTRACT)
    # every guard and bookkeeping key raised, params.yaml's values for every other key
    merged = edit(cfg, data={"sha256": "", "min_split_rows": 7, "max_target_share": 0.9},
                  tokenizer={"max_unk_rate": 0.05}, sequence={"max_drop_rate": 0.2},
                  train={"max_consecutive_skips": 3, "log_every": 7, "keep_last": 9})
    assert training_contract(merged, CONTRACT) == base
    assert checkpoint_folder_name(training_contract(merged, CONTRACT)) == \
        checkpoint_folder_name(base)
    assert not GUARD_KEYS & set(base)
    assert not (GUARD_KEYS | NO_RESULT_KEYS) & set(result_params(cfg))


def test_a_key_added_later_is_in_the_training_contract_only_off_its_old_behaviour(
        cfg: Config) -> None:
    # checkpoints written before model.transformer.attention_kernel existed were trained with
    # `auto`: at that value the key stays out of the contract so they still resume; any other
    # value is compared like every key. Those written before train.cpu_kernels (issue 49) ran
    # the host's native kernels, before the dev decoding (issue 52) decoded nothing
    def kernel(name: str) -> Config:
        return edit(cfg, model={"transformer": dataclasses.replace(cfg.model.transformer,
                                                                   attention_kernel=name)})

    assert ADDED_KEYS == {"model.transformer.attention_kernel": "auto",
                          "train.cpu_kernels": "native", "train.dev_decode_words": 0,
                          "train.dev_decode_beam": 1, "train.mrt_steps": 0,
                          "train.mrt_candidates": 4, "train.mrt_search": "beam",
                          "train.mrt_reference": True, "train.mrt_risk": "edit",
                          "train.mrt_alpha": 1.0, "train.mrt_lr": 1e-4,
                          "train.optimizer_kernel": "unfused", "train.cuda_graphs": "off"}
    auto = training_contract(kernel("auto"), CONTRACT)
    assert not any(k.endswith("attention_kernel") for k in auto)
    math = training_contract(kernel("math"), CONTRACT)
    assert {k: v for k, v in math.items() if k not in auto} == {
        "model.transformer.attention_kernel": "math"}
    assert {k: v for k, v in math.items() if k in auto} == auto


def test_the_optimizer_kernel_enters_the_contract_as_the_kernel_its_device_runs(
        cfg: Config) -> None:
    # issue 53: auto is torch's unfused Adam on CPU (every run before the key: left out) and
    # the fused one on CUDA; fused and unfused round differently, so the contract holds which
    def contract(kernel: str, device: str) -> dict:
        return training_contract(edit(cfg, train={"optimizer_kernel": kernel,
                                                  "device": device}), CONTRACT)

    assert "train.optimizer_kernel" not in contract("auto", "cpu")
    assert "train.optimizer_kernel" not in contract("unfused", "cuda")
    assert contract("auto", "cuda")["train.optimizer_kernel"] == "fused"
    assert contract("fused", "cpu")["train.optimizer_kernel"] == "fused"
    assert contract("auto", "cuda") == contract("fused", "cuda")


def test_cuda_graphs_enter_the_contract_only_when_on_and_bring_the_fused_kernel(
        cfg: Config) -> None:
    # issue 53: padding and a tensor learning rate round differently; auto is off for now
    def contract(graphs: str, device: str = "cuda") -> dict:
        return training_contract(edit(cfg, train={"cuda_graphs": graphs, "device": device}),
                                 CONTRACT)

    off = contract("off")
    assert off == contract("auto") and "train.cuda_graphs" not in off
    assert {k: v for k, v in contract("on").items() if k not in off} == {"train.cuda_graphs": "on"}
    on_cpu = contract("on", "auto")  # this machine's auto is the CPU: run eagerly, fused Adam
    assert (on_cpu["train.cuda_graphs"], on_cpu["train.optimizer_kernel"]) == ("on", "fused")


def test_the_data_signature_marks_how_max_pairs_cut_the_data(cfg: Config) -> None:
    # issue 55: a random sample of whole groups ("g", the pair tasks) is not the first N rows
    small = edit(cfg, data={"max_pairs": 400})
    split = parse_signature(data_signature(small, "0" * 64, "g"))["split"]
    assert split == f"{cfg.data.split_seed}-0.05-0.05-400g"
    assert parse_signature(data_signature(cfg, "0" * 64, "g"))["split"].endswith("-0")
    assert (get_task("g2p").data_subset(), get_task("parallel").data_subset(),
            get_task("lm").data_subset()) == ("g", "g", "")
