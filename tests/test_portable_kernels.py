"""The portable CPU kernel profile (issue 49, seqcore.kernels): the golden bytes of a tiny
training, the profile's proof that it took effect, the relaunch of a stage, and where the
profile enters the contract, the signature and the audit's replay.

The golden test runs on whatever host CI gets, so over time its pin is checked on every kind
of CPU this project meets; it fails only on a host the promise covers (x86-64 with AVX2),
naming the host and the first tensor that differs. Hosts verified so far are listed in
``tests/golden_training.json`` and docs/reproducibility.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pipeline.audit_checks import environment_diffs
from pipeline.audit_replay import kernel_env
from pipeline.git_state import commit_copy, copy_checkout
from pipeline.stage import check_host
from seqcore.config import Config, DecodeConfig, TrainConfig
from seqcore.config_rules import host_problem
from seqcore.environment import cpu_model, producing_environment
from seqcore.kernels import (
    PORTABLE_ENV, check_portable, cpu_flags, cpuinfo, host_capability, profile_env,
    relaunch_env)
from seqcore.signature import config_contract, decode_fields
from tests.factories import REPO
from tests.pipeline_helpers import copy_result, dvc, tool_env
from tests.programs.golden_training import digests, train_golden

GOLDEN = json.loads((REPO / "tests" / "golden_training.json").read_text())


def host() -> str:
    """This machine in one phrase: CPU model, its widest vector flags, torch."""
    wide = sorted(f for f in cpu_flags() if f in {"avx2", "avx512f", "avx512_bf16", "amx_tile"})
    return f"{cpu_model()} ({', '.join(wide) or 'no AVX2'}; torch {torch.__version__})"


def cpu_kind() -> str:
    """The CPU kind as ``tests/golden_training.json`` names it: vendor, family and model."""
    info = cpuinfo()
    return f"{info.get('vendor_id')} family {info.get('cpu family')} model {info.get('model')}"


@pytest.mark.skipif("avx2" not in cpu_flags(),
                    reason="the portable profile promises nothing without AVX2")
def test_golden_tiny_training_has_the_pinned_bytes_on_this_cpu(tmp_path: Path) -> None:
    check_portable("train.cpu_kernels")  # tests/conftest.py set the profile before torch
    got = digests(train_golden(tmp_path))
    if got["all"] == GOLDEN["digests"]["all"]:
        return
    first = next(k for k in got if k != "all" and got[k] != GOLDEN["digests"].get(k))
    line = (f"the golden training differs from its pin on {host()} [{cpu_kind()}]: first "
            f"tensor {first} (sha256 {got[first][:12]}, pinned "
            f"{GOLDEN['digests'].get(first, 'none')[:12]}); pinned on "
            f"{'; '.join(GOLDEN['verified_on'])}")
    if any(v.startswith(cpu_kind() + " ") for v in GOLDEN["verified_on"]):
        pytest.fail(line)  # a CPU kind that gave the pin: a regression
    # Another CPU kind: MKL's vsSqrt (Adam's sqrt) is not correctly rounded, and its bits
    # differ between this AMD host and qemu's emulation (docs/reproducibility.md): the
    # result is reported, to be recorded, not yet promised
    pytest.skip(f"not yet a verified CPU kind: {line}")


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
def test_portable_profile_refuses_what_does_not_hold_in_one_line(env: dict[str, str],
                                                                 named: str) -> None:
    res = _check_in_child(env)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert named in last
    assert "set train.cpu_kernels: native to run here" in last


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
    env = profile_env("native", tool_env())
    res = subprocess.run([sys.executable, "-m", "pipeline.decode"], cwd=repo, env=env,
                         capture_output=True, text=True, check=False)
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
    ({"avx2", "fma"}, "AVX2"),
    ({"avx", "sse4_2"}, "DEFAULT"),
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
    native = Config(train=TrainConfig(cpu_kernels="native"))
    assert host_problem(native) is not None and "decode.cpu_kernels" in host_problem(native)
    both = Config(train=TrainConfig(cpu_kernels="native"), decode=DecodeConfig(cpu_kernels="native"))
    assert host_problem(both) is None
    monkeypatch.setattr("seqcore.config_rules.cpu_flags",
                        lambda: frozenset({"avx2", "fma", "avx"}))
    assert host_problem(Config()) is None
