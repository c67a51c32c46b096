"""The portable CPU kernel profile (issue 49, seqcore.kernels): the golden bytes of a tiny
training on every AVX2 host CI gets (verified hosts: tests/golden_training.json), the proof it
took effect, a stage's relaunch, and the profile in the contract, signature and audit replay."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pipeline.audit.checks import environment_diffs
from pipeline.audit.replay import kernel_env
from pipeline.git_state import commit_copy, copy_checkout
from pipeline.stage import check_host
from seqcore.config import Config, DecodeConfig, TrainConfig
from seqcore.config_rules import host_problem
from seqcore.environment import cpu_model, producing_environment
from seqcore.kernels import (
    PORTABLE_ENV, check_portable, cpu_flags, cpuinfo, host_capability, profile_env, relaunch_env)
from seqcore.signature import config_contract, decode_fields
from seqcore.training.optim import PortableAdam, build_optimizer, ieee_sqrt
from tests.factories import REPO, s2s_loop
from tests.pipeline_helpers import copy_result, dvc, run_python, tool_env
from tests.programs.golden_training import digests, train_golden

GOLDEN = json.loads((REPO / "tests" / "golden_training.json").read_text())


def host() -> str:
    """This machine: CPU model, its widest vector flags, torch, and its CPU kind as
    ``tests/golden_training.json`` names it (vendor, family and model)."""
    wide = sorted(f for f in cpu_flags() if f in {"avx2", "avx512f", "avx512_bf16", "amx_tile"})
    info = cpuinfo()
    return (f"{cpu_model()} ({', '.join(wide) or 'no AVX2'}; torch {torch.__version__}) "
            f"[{info.get('vendor_id')} family {info.get('cpu family')} model {info.get('model')}]")


@pytest.mark.skipif("avx2" not in cpu_flags(),
                    reason="the portable profile promises nothing without AVX2")
def test_golden_tiny_training_has_the_pinned_bytes_on_this_cpu(tmp_path: Path) -> None:
    check_portable("train.cpu_kernels")  # tests/conftest.py set the profile before torch
    got = digests(train_golden(tmp_path))
    if got["all"] == GOLDEN["digests"]["all"]:
        return
    first = next(k for k in got if k != "all" and got[k] != GOLDEN["digests"].get(k))
    # The promise covers every x86-64 CPU with AVX2 (docs/reproducibility.md): a new CPU kind
    # that differs is a finding to report with this line, not a host to skip
    pytest.fail(f"the golden training differs from its pin on {host()}: first tensor {first} "
                f"(sha256 {got[first][:12]}, pinned {GOLDEN['digests'].get(first, 'none')[:12]})"
                f"; pinned on {'; '.join(GOLDEN['verified_on'])}")


def test_golden_pin_names_every_weight_of_the_model() -> None:
    # the per-tensor pins are what names the first difference: one per weight, in order
    names = [k for k in GOLDEN["digests"] if k != "all"]
    assert len(names) == len(set(names)) > 20
    assert names[0] == "src_embed.weight"


def _check_in_child(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = profile_env("native", dict(os.environ))
    return subprocess.run(
        [sys.executable, "-c", "from seqcore.kernels import check_portable; "
         "print(check_portable('train.cpu_kernels'))"],
        env=clean | env, capture_output=True, text=True, cwd=REPO, check=False)


@pytest.mark.skipif("avx2" not in cpu_flags(), reason="needs an AVX2 host")
def test_portable_profile_proves_it_took_effect() -> None:
    res = _check_in_child(PORTABLE_ENV)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "portable (ATen AVX2 kernels, MKL COMPATIBLE branch)"


@pytest.mark.parametrize(("env", "named"), [
    # ATen on other kernels than AVX2: what a CPU without AVX2 (or a torch that ignores the
    # variable) gives; the line names the level found and the way out
    ({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}, "(it runs DEFAULT)"),
    # MKL on its own vendor branch
    ({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AUTO"}, "MKL ignored MKL_CBWR=COMPATIBLE"),
])
def test_portable_profile_refuses_what_does_not_hold_in_one_line(env: dict, named: str) -> None:
    res = _check_in_child(env)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert named in last and "set train.cpu_kernels: native to run here" in last


def test_relaunch_env_adds_the_portable_variables_and_never_touches_native() -> None:
    assert relaunch_env("portable", {"PATH": "/bin"}) == {"PATH": "/bin", **PORTABLE_ENV}
    assert relaunch_env("portable", {"PATH": "/bin", **PORTABLE_ENV}) is None
    assert relaunch_env("portable", {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "COMPATIBLE"}) \
        == PORTABLE_ENV
    # native keeps what it is given: the audit's replay of a native result sets the level
    assert relaunch_env("native", {"ATEN_CPU_CAPABILITY": "avx2"}) is None


def test_training_contract_and_result_signature_carry_the_profile() -> None:
    portable = config_contract(Config(), ("train",))
    assert portable["train.cpu_kernels"] == "portable"
    # native is the behaviour from before the key: left out, so older checkpoints resume
    native = Config(train=TrainConfig(cpu_kernels="native"))
    assert "train.cpu_kernels" not in config_contract(native, ("train",))
    assert decode_fields(DecodeConfig())["cpuk"] == "portable"
    assert decode_fields(DecodeConfig(cpu_kernels="native"))["cpuk"] == "native"


def test_replay_takes_the_trainings_profile() -> None:
    inherited = {"PATH": "/bin", **PORTABLE_ENV}  # an auditor that runs portable
    assert kernel_env("portable", "AVX512", inherited) == inherited
    native = kernel_env("native", "AVX512", inherited)
    assert "MKL_CBWR" not in native and native["PATH"] == "/bin"


@pytest.mark.slow
def test_a_stage_without_the_profile_starts_itself_again_and_writes_the_same_bytes(
        audit_result: tuple[Path, str], tmp_path: Path) -> None:
    repo = copy_result(audit_result[0], tmp_path / "r")
    before = (repo / "predictions" / "test.jsonl").read_bytes()
    (repo / "predictions" / "test.jsonl").unlink()
    res = run_python(repo, "-m", "pipeline.decode", python=sys.executable,
                     env=profile_env("native", tool_env()))
    assert res.returncode == 0, res.stderr
    # the bytes of the profile, not of this CPU's own kernels (MKL's AMD or Intel GEMMs give
    # other scores): the stage started itself again under the profile
    assert (repo / "predictions" / "test.jsonl").read_bytes() == before


def test_the_audit_leaves_the_cpu_out_of_a_portable_results_environment() -> None:
    here = producing_environment().as_dict()
    other = {**here, "cpu": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
             "cpu_capability": "AVX512", "torch": "2.12.0"}
    run = SimpleNamespace(info=SimpleNamespace(run_id="r1"),
                          data=SimpleNamespace(tags={f"env.{k}": v for k, v in other.items()}))
    native = environment_diffs(run)
    assert [d.split(":")[0] for d in native] == [
        k for k in here if other[k] != here[k]]  # the CPU differs, and the torch
    portable = environment_diffs(run, portable=True)
    assert [d.split(":")[0] for d in portable] == ["torch"]


@pytest.mark.slow
def test_the_committed_data_stages_reproduce_their_locked_bytes(tmp_path: Path) -> None:
    # issue 49: the cheap part of "a clean git status after `make repro` is the verification"
    # (fetch, prepare, tokenizer of the default params against the committed dvc.lock); the
    # training's part is the golden test above, the whole run the newcomer's `make repro`
    repo = tmp_path / "clone"
    copy_checkout(repo, REPO, leave_out=("tests", "benchmarks"))
    commit_copy(repo, "copy", "t")
    dvc(repo, "repro", "tokenizer")
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout
    assert changed == "", changed
    assert "Data and pipelines are up to date." in dvc(repo, "status", "fetch", "prepare",
                                                       "tokenizer")


@pytest.mark.parametrize(("flags", "level"), [
    ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, "AVX512"),
    ({"avx2", "fma", "avx512f"}, "AVX2"),  # AVX-512 foundation alone: ATen stays at AVX2
    ({"avx2", "fma"}, "AVX2"), ({"avx", "sse4_2"}, "DEFAULT"),
])
def test_the_hosts_kernel_level_is_read_from_its_cpu_flags(
        flags: set[str], level: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("seqcore.kernels.cpu_flags", lambda: frozenset(flags))
    assert host_capability() == level


def test_validate_stops_a_portable_profile_on_a_cpu_without_avx2_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr("seqcore.config_rules.cpu_flags", lambda: frozenset({"avx", "sse4_2"}))
    with pytest.raises(SystemExit) as stopped:
        check_host(Config())
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "params.yaml: train.cpu_kernels = 'portable': this CPU has no AVX2, and the portable "
        "profile's bytes need it; set train.cpu_kernels: native (reproducible on this CPU "
        "kind only)\n")
    train = TrainConfig(cpu_kernels="native")
    native = host_problem(Config(train=train))
    assert native is not None and "decode.cpu_kernels" in native
    assert host_problem(Config(train=train, decode=DecodeConfig(cpu_kernels="native"))) is None
    monkeypatch.setattr("seqcore.config_rules.cpu_flags", lambda: frozenset({"avx2", "fma", "avx"}))
    assert host_problem(Config()) is None


# -- the optimiser's correctly rounded square root (seqcore.training.optim) ----------------

def test_ieee_sqrt_is_the_correctly_rounded_square_root_of_every_float32_sampled() -> None:
    # 2**16 positive float32 values spread over every exponent: random bit patterns
    x = torch.randint(0, 0x7F800000, (1 << 16,), generator=torch.Generator().manual_seed(3),
                      dtype=torch.int64).to(torch.int32).view(torch.float32)
    # numpy's float32 sqrt is the CPU's sqrtps instruction: IEEE 754, correctly rounded
    assert torch.equal(ieee_sqrt(x), torch.from_numpy(np.sqrt(x.numpy())))
    assert ieee_sqrt(x).dtype == torch.float32


def _adam_pair(cls_args: dict, steps: int = 5) -> list[tuple[list[torch.Tensor], dict]]:
    """(params, state dict) after ``steps`` updates on the same gradients by torch's Adam and
    by PortableAdam."""
    g = torch.Generator().manual_seed(11)
    start = [torch.randn(37, 5, generator=g), torch.randn(64, generator=g)]
    grads = [[torch.randn(p.shape, generator=g) * 1e-3 for p in start] for _ in range(steps)]
    out = []
    for portable in (False, True):
        params = [p.clone().requires_grad_() for p in start]
        opt = build_optimizer(params, **cls_args, portable=portable)
        for step, step_grads in enumerate(grads):
            for group in opt.param_groups:
                group["lr"] = 1e-2 * (step + 1)
            for p, grad in zip(params, step_grads, strict=True):
                p.grad = grad.clone()
            opt.step()
        out.append(([p.detach() for p in params], opt.state_dict()))
    return out


@pytest.mark.parametrize("cls_args", [
    {"optimizer": "adam", "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": 0.0},
    {"optimizer": "adam", "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01},
    {"optimizer": "adamw", "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": 0.1},
], ids=["adam", "adam-l2", "adamw"])
def test_portable_adam_is_torchs_adam_with_a_correctly_rounded_sqrt(
        cls_args: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    # the reference: torch's own update with every Tensor.sqrt correctly rounded
    sqrt = torch.Tensor.sqrt
    monkeypatch.setattr(torch.Tensor, "sqrt", lambda x: sqrt(x.double()).to(x.dtype))
    (ref, ref_state), (got, got_state) = _adam_pair(cls_args)
    assert all(torch.equal(a, b) for a, b in zip(ref, got, strict=True))
    assert ref_state["param_groups"] == got_state["param_groups"]
    for i, state in ref_state["state"].items():
        assert state.keys() == got_state["state"][i].keys()
        assert all(torch.equal(state[k], got_state["state"][i][k]) for k in state)


def test_the_first_portable_adam_step_moves_each_weight_by_lr_against_its_gradients_sign() -> None:
    # known answer: m1 = (1-b1) g, v1 = (1-b2) g^2, so with eps 0 the first update is
    # -lr * m1/(1-b1) / (sqrt(v1)/sqrt(1-b2)) = -lr * sign(g)
    p = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    opt = PortableAdam([p], 0.25, (0.9, 0.999), 0.0, 0.0, False)
    p.grad = torch.tensor([3.0, -1e-3, 7e4])
    opt.step()
    assert p.detach().tolist() == pytest.approx([0.75, -1.75, 0.25], rel=1e-6)
    assert opt.state[p]["step"].item() == 1.0


def test_cpu_training_uses_portable_adam_under_portable_and_torchs_under_native(
        tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    built = {profile: build_optimizer(model.parameters(), "adamw", (0.9, 0.98), 1e-9, 0.1,
                                      portable=profile == "portable")
             for profile in ("portable", "native")}
    assert type(built["portable"]) is PortableAdam
    assert built["portable"].param_groups[0]["decoupled_weight_decay"] is True
    assert type(built["native"]) is torch.optim.AdamW
    loops = {p: s2s_loop(tmp_path / p, 1, cpu_kernels=p) for p in ("portable", "native")}
    assert type(loops["portable"].opt) is PortableAdam
    assert type(loops["native"].opt) is torch.optim.Adam
