"""Data-parallel training (issue 16): W ranks train on the single-process batch, shards cover
every example once per epoch, and a 2-process `dvc repro` resumes after SIGKILL to the bytes
of an uninterrupted run.

Float tolerance: with accum_steps 1 both sides add g0 + g1 and the weights are bitwise equal.
With accum_steps 2 the ranks add (g0 + g2) + (g1 + g3), not ((g0 + g1) + g2) + g3: gradients
differ by ~1e-9 (measured; the lm ranks' half-size GEMMs alike), allowed rtol 1e-5 / atol 1e-7.
Adam turns 1e-9 in a near-zero gradient into a whole +-lr step, so Adam eps is 1e-3 here.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from seqcore.config import ConfigError, SequenceConfig, TrainConfig, config_from_dict
from seqcore.data.batching import BucketSampler, epoch_batches
from seqcore.determinism import DeviceUnavailable, resolve_device, set_determinism
from seqcore.tasks.lm.feed import LMFeed
from seqcore.training.checkpoint import Checkpoint, CheckpointDir
from seqcore.training.distributed import GradientPresenceChanged, World, WorldMismatch
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TrainLoop
from tests.factories import IDS, examples, one_step_reads, tiny_lm, tiny_model
from tests.pipeline_helpers import copy_result, dvc, merge, run_python

STEPS = 3
RTOL, ATOL = 1e-5, 1e-7
#: (name, task, accum_steps of each rank); the single process runs 2 x accum_steps for s2s.
CASES = (("s2s-accum1", "s2s", 1), ("s2s-accum2", "s2s", 2), ("lm-accum2", "lm", 2))


# -- shards ------------------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 3])
def test_union_of_rank_shards_is_the_single_process_stream(world: int) -> None:
    lengths = [(i * 7) % 11 + 1 for i in range(53)]  # 53 examples / 4 = 14 batches per epoch
    single = BucketSampler(lengths, 4, 2, seed=5)
    ranks = [BucketSampler(lengths, 4, 2, seed=5, rank=r, world=world) for r in range(world)]
    for _ in range(20):  # crosses epoch boundaries (14 is not a multiple of 2 or 3)
        assert [s.next() for s in ranks] == [single.next() for _ in range(world)]
    assert len({s.state for s in ranks}) == 1  # every rank keeps the same global cursor


def test_every_example_is_seen_once_per_epoch_across_ranks() -> None:
    lengths = [(i * 5) % 9 + 1 for i in range(48)]  # 12 batches: 6 steps of 2 ranks
    ranks = [BucketSampler(lengths, 4, 2, seed=9, rank=r, world=2) for r in range(2)]
    shards = [[i for _ in range(6) for i in s.next()] for s in ranks]
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(48))
    assert sorted(i for b in epoch_batches(lengths, 4, 2, 9, 0) for i in b) == list(range(48))
    assert {s.state.epoch for s in ranks} == {0}  # the epoch is not over before this point


# -- 2 gloo ranks against 1 process --------------------------------------------------------
def _setup(task: str, accum: int, world: World, **kernels: str) -> TrainLoop:
    """A tiny dropout-free model and data; identical on every rank (seeded alike)."""
    set_determinism(7, 1)
    cfg = TrainConfig(amp="none", batch_size=4, accum_steps=accum, max_steps=STEPS, lr=0.5,
                      warmup_steps=2, eval_every=100, checkpoint_every=100, threads=1,
                      clip_norm=0.05, bptt_len=4, eps=1e-3, **kernels)
    if task == "s2s":
        model: torch.nn.Module = tiny_model(enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
        feed = Seq2SeqFeed((examples(60, seed=3, high=12, shift=0), []), IDS, SequenceConfig(),
                           cfg, world=world)
    else:
        g = torch.Generator().manual_seed(3)
        docs = [torch.randint(4, 12, (n,), generator=g).tolist() for n in (9, 30, 14, 21, 11, 7)]
        model = tiny_lm("lstm", embed_dim=8, hidden=16, layers=2, seed=7).train()
        feed = LMFeed((docs, []), IDS, "token-mean", 0.1, 4, cfg.bptt_len, cfg.seed, world)
    return TrainLoop(model, cfg, feed, CheckpointDir(Path("/nonexistent"), 1), {}, 16, world)


def _run_steps(loop: TrainLoop) -> dict[str, list[torch.Tensor]]:
    grads, losses = [], []
    for _ in range(STEPS):
        losses.append(loop.train_step().loss)
        grads.append([p.grad.clone() for p in loop.model.parameters()])
    return {"grads": grads, "weights": [p.detach().clone() for p in loop.model.parameters()],
            "losses": losses}


def _rank_worker(rank: int, init: str, out: str) -> None:
    import torch.distributed as dist  # noqa: PLC0415

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    world = World(rank, 2, rank, "gloo")
    for name, task, accum in CASES:
        result = _run_steps(_setup(task, accum, world))  # seeded alike: the same model everywhere
        if rank == 0:
            torch.save(result, Path(out) / f"{name}.pt")
    found = {}
    for task in ("s2s", "lm"):  # issue 53: a fused step's sums stay on the device
        loop = _setup(task, 2, world, optimizer_kernel="fused", cpu_kernels="native")
        found[task], pending, _ = one_step_reads(loop)
        loop._settle([pending])
    loop.model.embed.weight.requires_grad_(False)  # lm: a parameter unused from step 3 on
    try:
        loop.train_step()
    except GradientPresenceChanged as err:
        found["presence"] = str(err)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(found))
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_give_the_single_process_gradients_and_weights(tmp_path: Path) -> None:
    import torch.multiprocessing as mp  # noqa: PLC0415

    mp.spawn(_rank_worker, args=(f"file://{tmp_path / 'rdzv'}", str(tmp_path)), nprocs=2)
    for name, task, accum in CASES:
        # s2s: rank r takes batch r of every 2, so 1 process with 2 x accum sees the same
        # global batch; lm: the ranks split the 4 streams of the same global batch.
        ref = _run_steps(_setup(task, 2 * accum if task == "s2s" else accum, World()))
        got = torch.load(tmp_path / f"{name}.pt", weights_only=True)
        for step, (a, b) in enumerate(zip(got["grads"], ref["grads"], strict=True)):
            for x, y in zip(a, b, strict=True):
                torch.testing.assert_close(x, y, rtol=RTOL, atol=ATOL,
                                           msg=f"{name}: gradient at step {step + 1}")
        for x, y in zip(got["weights"], ref["weights"], strict=True):
            torch.testing.assert_close(x, y, rtol=RTOL, atol=ATOL, msg=f"{name}: weights")
        assert got["losses"] == pytest.approx(ref["losses"], rel=1e-6)
        if name == "s2s-accum1":  # the same float additions: bitwise equal
            assert all(torch.equal(x, y) for x, y in zip(got["weights"], ref["weights"]))
    for rank in (0, 1):  # a step of 2 ranks reads nothing back; a changed parameter set stops
        found = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert found == {"s2s": [], "lm": [], "presence": (
            "parameter embed.weight got a gradient on no rank at step 3 but one at the run's "
            "first step; multi-process training (train.nproc) needs each parameter used at "
            "every step or at none")}


# -- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize(("stored", "message"), [
    ({"size": 2, "backend": "gloo", "device_kind": "cpu"},
     r"written by 2 process\(es\) and this run has 1; set train.nproc: 2"),
    ({"size": 1, "backend": "none", "device_kind": "cuda"},
     "trained on cuda and this run is on cpu"),
], ids=["world-size", "device-kind"])
def test_a_checkpoint_from_another_world_or_device_kind_is_refused_in_one_line(
        tmp_path: Path, stored: dict, message: str) -> None:
    first = _setup("s2s", 1, World())
    first.ckpt = CheckpointDir(tmp_path, 2)
    first.resume()
    first.train_step()
    first.ckpt.save(1, Checkpoint({**first.checkpoint().payload, "world": stored}))
    again = _setup("s2s", 1, World())
    again.ckpt = CheckpointDir(tmp_path, 2)
    with pytest.raises(WorldMismatch, match=message) as err:
        again.resume()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:0,1"])
def test_device_specs_other_than_auto_cpu_cuda_and_cuda_n_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match="must be one of auto, cpu, cuda, cuda:N"):
        config_from_dict({"train": {"device": spec}})
    with pytest.raises(ConfigError, match="decode.device"):
        config_from_dict({"decode": {"device": spec}})


def test_cuda_without_a_gpu_is_a_one_line_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceUnavailable, match="CUDA is not available"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


# -- the train stage under torchrun, through dvc repro ----------------------------------------

#: 2 ranks, long enough (a few seconds) to be killed between two checkpoints.
TRAIN = {"train": {"nproc": 2, "threads": 1, "max_steps": 60, "checkpoint_every": 10,
                   "eval_every": 30}}


def log_rows(repo: Path) -> list[dict[str, str]]:
    """The train log without its wall-clock column."""
    with open(repo / "reports/train_log.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "tokens_per_s"} for row in csv.DictReader(f)]


@pytest.fixture(scope="module")
def two_rank_repo(audit_result: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's tiny result re-trained with two ranks (`dvc repro` re-runs validate,
    train, decode and evaluate; the data and tokenizer stages are the copied ones)."""
    repo = copy_result(audit_result[0], tmp_path_factory.mktemp("ddp") / "repo")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    (repo / "params.yaml").write_text(yaml.safe_dump(merge(params, TRAIN), sort_keys=False))
    out = dvc(repo, "repro")
    assert "Running stage 'tokenizer'" not in out and "Running stage 'train'" in out, out
    return repo


@pytest.mark.slow
@pytest.mark.e2e
def test_repro_with_two_processes_completes_and_passes_the_audit(two_rank_repo: Path) -> None:
    # `python` from PATH: the stage worker's (the audit's subject is the result, not a process)
    res = run_python(two_rank_repo, "-m", "pipeline.audit")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "audit: PASSED" in res.stdout + res.stderr


def kill_stage_after_checkpoint(repo: Path, step: int) -> None:
    """Start the train stage (it relaunches itself under torchrun) and SIGKILL the launcher
    once rank 0 wrote checkpoint ``step``; the ranks die with it (PR_SET_PDEATHSIG)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.train"], cwd=repo, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(repo.glob(f"checkpoints/*/ckpt-{step:08d}.pt.sha256")):  # hash written last
        assert proc.poll() is None, "training ended before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
@pytest.mark.e2e
def test_killed_two_process_stage_resumes_on_repro_to_the_uninterrupted_bytes(
        two_rank_repo: Path, tmp_path: Path) -> None:
    crashed = tmp_path / "crashed"
    shutil.copytree(two_rank_repo, crashed, symlinks=True)
    for out in ("checkpoints", "models", "reports/train_log.csv"):
        path = crashed / out
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    kill_stage_after_checkpoint(crashed, 10)
    time.sleep(0.5)  # the ranks' parent-death signal
    assert not (crashed / "models/model.pt").exists()
    out = dvc(crashed, "repro", "train")
    assert "resumed from ckpt-" in out
    assert (crashed / "models/model.pt").read_bytes() == \
        (two_rank_repo / "models/model.pt").read_bytes()
    assert log_rows(crashed) == log_rows(two_rank_repo)


@pytest.mark.slow
@pytest.mark.e2e
def test_resume_with_another_world_size_is_refused_in_one_line(two_rank_repo: Path) -> None:
    params = yaml.safe_load((two_rank_repo / "params.yaml").read_text())
    params["train"]["nproc"] = 1
    (two_rank_repo / "params-1proc.yaml").write_text(yaml.safe_dump(params))
    res = run_python(two_rank_repo, "-m", "pipeline.train", "--params", "params-1proc.yaml",
                     python=sys.executable, env=dict(os.environ))
    (two_rank_repo / "params-1proc.yaml").unlink()
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert "written by 2 process(es) and this run has 1" in last and "train.nproc: 2" in last
    # More ranks than the checkpoint's: refused before torchrun starts any (issue 31), so the
    # line comes once, not once per rank inside torchrun's failure report.
    params["train"]["nproc"] = 3
    (two_rank_repo / "params-3proc.yaml").write_text(yaml.safe_dump(params))
    res = run_python(two_rank_repo, "-m", "pipeline.train", "--params", "params-3proc.yaml",
                     python=sys.executable, env=dict(os.environ))
    (two_rank_repo / "params-3proc.yaml").unlink()
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("written by 2 process(es) and this run has 3") == 1, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("[train] ")
