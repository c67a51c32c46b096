"""Resume gives bit-identical weights and per-step losses: after SIGKILL (child processes of
tests/programs/resume_worker.py, killed after step k or between the micro-batches of step k,
then resumed from the checkpoint folder) and in process, at every boundary that matters."""
from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seqcore.config import TrainConfig
from seqcore.data.batching import SamplerState
from seqcore.tasks.lm.feed import LMFeed
from seqcore.tasks.lm.streams import StreamState
from seqcore.training.checkpoint import Checkpoint, CheckpointDir, ContractMismatch
from seqcore.training.distributed import WorldMismatch
from seqcore.training.loop import StepLog, TooManySkippedSteps, TrainLoop
from tests.factories import (
    IDS, REPO, S2S_SEED, document_nll, examples, kill_after, s2s_loop, tiny_lm)
from tests.programs.resume_worker import CKPT_EVERY, MAX_STEPS
from tests.training.runs import assert_same_run, finish, record_batches, same_weights, trained

#: The worker's environment: this checkout's seqcore and nothing else.
CLEAN_ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}


def job(work: Path, task: str, accum: int = 1, kill_step: int = 0, kill_micro: int = 0,
        lr: float = 1.0, device: str = "cpu") -> dict:
    return {"work": str(work), "task": task, "accum": accum, "kill_step": kill_step,
            "kill_micro": kill_micro, "lr": lr, "device": device}


def run_jobs(jobs: list[dict], env: dict | None = CLEAN_ENV) -> list[int]:
    """Run the jobs in order in fresh processes; returns exit codes (-9 = SIGKILL)."""
    res = subprocess.run([sys.executable, "-m", "tests.programs.resume_worker", json.dumps(jobs)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def stderr_of(work: Path) -> str:
    return (work / "stderr.txt").read_text()


def result(work: Path) -> dict:
    return json.loads((work / "result.json").read_text())


KILLS = {  # name: (task, accum, kill after step k, kill after micro-batch m)
    "mid-epoch-between-checkpoints": ("s2s", 1, 6, 0),
    "just-after-a-checkpoint": ("s2s", 1, 4, 0),
    "just-before-a-checkpoint": ("s2s", 1, 7, 0),
    "inside-an-accumulation-cycle": ("s2s", 2, 0, 2 * 5 + 1),  # first micro-batch of step 6
    "lm-with-carried-state": ("lm", 1, 6, 0),
}
BASELINES = (("s2s", 1), ("s2s", 2), ("lm", 1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[int]]]:
    """Uninterrupted baselines and, per kill case, a killed job followed by a resuming job."""
    root = tmp_path_factory.mktemp("resume")
    jobs = [job(root / f"base-{t}-{a}", t, a) for t, a in BASELINES]
    for name, (task, accum, step, micro) in KILLS.items():
        jobs += [job(root / name, task, accum, step, micro), job(root / name, task, accum)]
    statuses = run_jobs(jobs)
    out = {f"base-{t}-{a}": (root / f"base-{t}-{a}", [s]) for (t, a), s in zip(BASELINES, statuses)}
    for i, name in enumerate(KILLS):
        out[name] = (root / name, statuses[3 + 2 * i : 5 + 2 * i])
    return out


def baseline(runs: dict, task: str, accum: int) -> Path:
    work, statuses = runs[f"base-{task}-{accum}"]
    assert statuses == [0], stderr_of(work)
    return work


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KILLS))
def test_resume_after_sigkill_gives_identical_weights_and_losses(runs: dict, name: str) -> None:
    task, accum, _, _ = KILLS[name]
    work, statuses = runs[name]
    assert statuses == [-signal.SIGKILL, 0], stderr_of(work)
    assert "resumed: ckpt-00000004.pt" in stderr_of(work)
    base, got = result(baseline(runs, task, accum)), result(work)
    assert len(got["history"]) == MAX_STEPS
    assert got["history"] == base["history"]
    assert got["weights"] == base["weights"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_killed_training_on_the_gpu_resumes_to_identical_weights_and_log(tmp_path: Path) -> None:
    # the SIGKILL test above with the same worker, on the GPU
    jobs = [job(tmp_path / w, "s2s", kill_step=k, device="cuda")
            for w, k in (("straight", 0), ("killed", 6), ("killed", 0))]
    assert run_jobs(jobs, env=None) == [0, -signal.SIGKILL, 0]
    assert "resumed: ckpt-00000004.pt" in stderr_of(tmp_path / "killed")
    straight, resumed = result(tmp_path / "straight"), result(tmp_path / "killed")
    assert resumed["history"] == straight["history"]
    assert resumed["weights"] == straight["weights"]


@pytest.mark.slow
def test_truncated_latest_checkpoint_is_reported_and_the_previous_one_used(
        tmp_path: Path, runs: dict, capsys: pytest.CaptureFixture) -> None:
    base = baseline(runs, "s2s", 1)
    work = tmp_path / "run"
    shutil.copytree(base / "ckpt", work / "ckpt")
    latest = work / "ckpt" / f"ckpt-{MAX_STEPS:08d}.pt"
    latest.write_bytes(latest.read_bytes()[:1000])  # a crash mid-write without the rename
    found = CheckpointDir(work / "ckpt", 2).latest_good()
    assert found is not None and found.path.name == f"ckpt-{MAX_STEPS - CKPT_EVERY:08d}.pt"
    assert "truncated or corrupted" in found.skipped[0] and latest.name in found.skipped[0]
    assert "skipping unusable checkpoint" in capsys.readouterr().err
    # The resumed run starts from the previous good one and replays the last 4 steps.
    assert run_jobs([job(work, "s2s")]) == [0]
    assert "skipping unusable checkpoint" in stderr_of(work)
    assert result(work) == result(base)


@pytest.mark.slow
def test_checkpoint_from_another_contract_is_refused_with_a_diff(
        tmp_path: Path, runs: dict) -> None:
    shutil.copytree(baseline(runs, "s2s", 1) / "ckpt", tmp_path / "run" / "ckpt")
    assert run_jobs([job(tmp_path / "run", "s2s", lr=2.0)]) == [1]
    err = stderr_of(tmp_path / "run")
    assert "ContractMismatch" in err and "lr: checkpoint=1.0 now=2.0" in err


# -- resume: messages and refusals ----------------------------------------------------------------
def test_resume_names_each_removed_partial_write_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    loop = s2s_loop(tmp_path, 3)
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / ".ckpt-00000003.pt.tmp-999").write_bytes(b"half")
    assert loop.resume() is None
    captured = capsys.readouterr()
    assert captured.err == ("removed .ckpt-00000003.pt.tmp-999: a checkpoint write that did "
                            "not finish\n")
    assert captured.out == ""


def test_auto_resume_warns_only_when_checkpoints_exist_and_none_is_usable(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert s2s_loop(tmp_path / "empty", 3).resume() is None  # nothing there: nothing to say
    assert capsys.readouterr().err == ""

    kill_after(s2s_loop(tmp_path / "bad", 3), 1)
    path = tmp_path / "bad" / "ckpt-00000001.pt"
    path.write_bytes(path.read_bytes()[:100])
    capsys.readouterr()
    assert s2s_loop(tmp_path / "bad", 3).resume() is None
    captured = capsys.readouterr()
    assert captured.err.splitlines()[-1] == (
        f"warning: no usable checkpoint in {tmp_path / 'bad'}; starting fresh")
    assert captured.err.count("\n") == 2 and captured.out == ""  # latest_good's line, then it

    kill_after(s2s_loop(tmp_path / "fresh", 3), 1)
    capsys.readouterr()
    fresh = s2s_loop(tmp_path / "fresh", 3, resume="fresh")
    assert fresh.resume() is None
    assert capsys.readouterr().err == ""  # fresh was asked for: no warning
    assert fresh.ckpt.numbered() == []


@pytest.mark.parametrize(("world", "message"), [
    ({"size": 2, "backend": "gloo", "device_kind": "cpu"},
     "{path} was written by 2 process(es) and this run has 1; set train.nproc: 2 to resume it, "
     "or train.resume: fresh to start over"),
    ({"size": 1, "backend": "none", "device_kind": "cuda"},
     "{path} was trained on cuda and this run is on cpu (their float results differ); set "
     "train.device to cuda to resume it, or train.resume: fresh to start over"),
])
def test_resume_refuses_another_world_in_one_line_naming_the_file(
        tmp_path: Path, world: dict, message: str) -> None:
    kill_after(s2s_loop(tmp_path, 3), 1)
    path = tmp_path / "ckpt-00000001.pt"
    Checkpoint({**Checkpoint.load(path).payload, "world": world}).save(path)
    with pytest.raises(WorldMismatch) as refused:
        s2s_loop(tmp_path, 3).resume()
    assert str(refused.value) == message.format(path=path)


def test_resume_refuses_another_contract_naming_the_file_and_ignores_runtime_keys(
        tmp_path: Path) -> None:
    kill_after(s2s_loop(tmp_path, 3), 1)
    other = s2s_loop(tmp_path, 3)
    other.contract = {"task": "lm"}
    with pytest.raises(ContractMismatch) as refused:
        other.resume()
    assert str(refused.value) == (
        f"{tmp_path / 'ckpt-00000001.pt'} was trained under a different contract (task: "
        "checkpoint='s2s' now='lm'): set these back in params.yaml to resume it, or "
        "train.resume: fresh to start over")
    # where the run executes is check_world's business, not the contract comparison's
    same = s2s_loop(tmp_path, 3)
    same.contract = {"task": "s2s", "train.nproc": 1, "train.backend": "none",
                     "train.device_kind": "cpu"}
    assert same.resume() == "ckpt-00000001.pt"


# -- resume at every boundary ---------------------------------------------------------------------
def seeded_epoch(lengths: list[int], batch_size: int, width: int, seed: int,
                 epoch: int) -> list[list[int]]:
    """The sampler's documented rule written out again: a generator seeded with
    ``seed * 1_000_003 + epoch`` permutes the examples, a stable sort groups them by
    ``length // width``, batches are cut in that order, and the same generator then
    permutes the batches."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = sorted(torch.randperm(len(lengths), generator=g).tolist(),
                   key=lambda i: lengths[i] // width)
    cut = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [cut[i] for i in torch.randperm(len(cut), generator=g).tolist()]


# -- epoch boundary -------------------------------------------------------------------------
EPOCH_STEPS, EPOCH_MAX = 3, 7  # 12 pairs / 4 a batch; 7 steps reach into epoch 2
#: Kill after step k -> the sampler state the checkpoint must restore. After step 3 the last
#: batch of epoch 0 is drawn but epoch 1 has not started (the sampler turns the epoch over
#: lazily, at the next draw); after step 4 epoch 1's first batch is drawn.
EPOCH_KILLS = {"just-before-the-boundary": (2, SamplerState(0, 2)),
               "at-the-boundary": (3, SamplerState(0, 3)),
               "just-after-the-boundary": (4, SamplerState(1, 1))}


@pytest.mark.parametrize("name", list(EPOCH_KILLS))
def test_resume_at_an_epoch_boundary_restores_the_epoch_and_replays_the_seeded_shuffle(
        tmp_path: Path, name: str) -> None:
    kill, restored = EPOCH_KILLS[name]
    whole = s2s_loop(tmp_path / "whole", EPOCH_MAX)
    whole_batches = record_batches(whole)
    finish(whole)

    kill_after(s2s_loop(tmp_path / "run", EPOCH_MAX), kill)
    resumed = s2s_loop(tmp_path / "run", EPOCH_MAX)
    assert resumed.resume() == f"ckpt-{kill:08d}.pt"
    assert resumed.state.step == kill
    assert resumed.feed.sampler.state == restored  # type: ignore[attr-defined]
    assert resumed.feed.epoch == restored.epoch
    later = record_batches(resumed)
    finish(resumed)

    lengths = [len(ex.tgt) for ex in examples(12, seed=3, lengths=(1, 5))]
    stream = [b for e in range(3) for b in seeded_epoch(lengths, 4, 2, S2S_SEED, e)]
    assert len(seeded_epoch(lengths, 4, 2, S2S_SEED, 0)) == EPOCH_STEPS
    assert whole_batches == stream[:EPOCH_MAX]
    assert later == whole_batches[kill:] == stream[kill:EPOCH_MAX]
    assert [e.epoch for e in resumed.state.history] == [e.epoch for e in whole.state.history]
    assert_same_run(resumed, whole)


# -- GradScaler and skipped steps --------------------------------------------------------------
def poison(loop: TrainLoop, steps: set[int]) -> TrainLoop:
    """``loop`` with one parameter's gradient infinite on the given (1-based) steps, so those
    steps are non-finite; the hook reads the loop's step counter, so it survives a resume."""
    next(loop.model.parameters()).register_hook(
        lambda g: torch.full_like(g, math.inf) if loop.state.step + 1 in steps else g)
    return loop


def scaled_loop(work: Path) -> TrainLoop:
    """The tiny run with an enabled GradScaler (init scale 1024, x2 after 3 good steps in a
    row, x0.5 after a non-finite one) and step 3 poisoned. fp16 autocast needs CUDA, so the
    run computes in fp32 with the scaler ``amp: fp16`` would have built."""
    loop = s2s_loop(work, SCALER_MAX)
    loop.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3, enabled=True)
    return poison(loop, {3})


#: (scale, growth tracker, skipped, consecutive skips) after each step, by hand: steps 1-2 are
#: good (tracker 1, 2); step 3 is skipped (scale halves to 512, tracker back to 0); steps 4-5
#: are good (1, 2); step 6 is the third good step in a row (scale doubles to 1024, tracker 0);
#: steps 7-8 are good (1, 2), the last of SCALER_MAX.
SCALER_MAX = 8
SCALER_AFTER = {3: (512.0, 0, 1, 1), 4: (512.0, 1, 1, 0), 8: (1024.0, 2, 1, 0)}


def scaler_state(loop: TrainLoop) -> tuple[float, int, int, int]:
    return (loop.scaler.get_scale(), loop.scaler.state_dict()["_growth_tracker"],
            loop.state.skipped, loop.state.consecutive_skips)


@pytest.mark.parametrize("kill", [3, 4])
def test_resume_restores_the_grad_scaler_scale_growth_tracker_and_skip_counters(
        tmp_path: Path, kill: int) -> None:
    whole = scaled_loop(tmp_path / "whole")
    finish(whole)
    assert scaler_state(whole) == SCALER_AFTER[SCALER_MAX]
    assert [e.skipped for e in whole.state.history] == [0, 0, 1, 1, 1, 1, 1, 1]
    assert not math.isfinite(whole.state.history[2].grad_norm)

    kill_after(scaled_loop(tmp_path / "run"), kill)
    resumed = scaled_loop(tmp_path / "run")
    assert resumed.resume() == f"ckpt-{kill:08d}.pt"
    assert scaler_state(resumed) == SCALER_AFTER[kill]
    finish(resumed)
    assert scaler_state(resumed) == scaler_state(whole) == SCALER_AFTER[SCALER_MAX]
    assert_same_run(resumed, whole)


def test_consecutive_skip_counter_resets_after_a_good_step(tmp_path: Path) -> None:
    # never two bad steps in a row: the limit of 2 is never reached
    loop = poison(s2s_loop(tmp_path, 5, max_consecutive_skips=2), {1, 3, 5})
    seen = []
    for _ in range(5):
        loop.train_step()
        seen.append((loop.state.skipped, loop.state.consecutive_skips))
    assert seen == [(1, 1), (1, 0), (2, 1), (2, 0), (3, 1)]


def test_consecutive_skips_count_across_a_resume_up_to_the_limit(tmp_path: Path) -> None:
    # killed after step 2, which was skipped: one in a row
    kill_after(poison(s2s_loop(tmp_path, 5, max_consecutive_skips=2), {2, 3}), 2)
    resumed = poison(s2s_loop(tmp_path, 5, max_consecutive_skips=2), {2, 3})
    resumed.resume()
    assert (resumed.state.skipped, resumed.state.consecutive_skips) == (1, 1)
    with pytest.raises(TooManySkippedSteps, match="2 non-finite gradient steps in a row at step 3"):
        finish(resumed)


# -- the LM stream with its carried state ----------------------------------------------------
STREAMS, BPTT, LM_MAX, LM_KILL = 2, 4, 8, 3


def lm_docs() -> tuple[list[list[int]], list[list[int]]]:
    """Five training documents of 12-17 tokens (each takes at least 4 segments of 4
    positions, so after 3 steps both slots are inside their first document) and two dev
    documents longer than one segment (so carrying the state changes their NLL)."""
    g = torch.Generator().manual_seed(3)
    draw = lambda n: torch.randint(4, 12, (n,), generator=g).tolist()  # noqa: E731
    return [draw(n) for n in (13, 17, 12, 15, 14)], [draw(n) for n in (10, 9)]


def lm_loop(work: Path, lr: float) -> TrainLoop:
    cfg = TrainConfig(seed=S2S_SEED, amp="none", batch_size=STREAMS, bptt_len=BPTT,
                      max_steps=LM_MAX, schedule="constant", lr=lr, warmup_steps=0,
                      eval_every=100, checkpoint_every=1, keep_last=2, threads=1)
    model = tiny_lm("lstm", hidden=8, layers=2, seed=7).train()
    feed = LMFeed(lm_docs(), IDS, "token-mean", 0.0, STREAMS, BPTT, cfg.seed)
    return TrainLoop(model, cfg, feed, CheckpointDir(work, cfg.keep_last), {"task": "lm"}, 8)


def first_dealt() -> tuple[int, int]:
    """The first two documents of epoch 0 under the streams' seed rule (a generator seeded
    with ``seed * 1_000_003 + epoch`` permutes the documents)."""
    order = torch.randperm(5, generator=torch.Generator().manual_seed(S2S_SEED * 1_000_003))
    return int(order[0]), int(order[1])


def test_lm_resumed_mid_document_continues_the_streams_and_state_of_the_uninterrupted_run(
        tmp_path: Path) -> None:
    whole = lm_loop(tmp_path / "whole", 0.05)
    at_kill: list[tuple[StreamState, tuple[torch.Tensor, ...]]] = []
    whole.on_step = lambda step: step == LM_KILL and at_kill.append(
        (whole.feed.batcher.state, whole.feed.carried))  # type: ignore[attr-defined]
    finish(whole)

    kill_after(lm_loop(tmp_path / "run", 0.05), LM_KILL)
    resumed = lm_loop(tmp_path / "run", 0.05)
    assert resumed.resume() == f"ckpt-{LM_KILL:08d}.pt"
    feed = resumed.feed
    assert isinstance(feed, LMFeed) and feed.carried is not None
    # 3 segments of 4 positions: each slot is at position 12 of the document it was dealt.
    a, b = first_dealt()
    assert feed.batcher.state == StreamState(0, 2, ((a, 12), (b, 12))) == at_kill[0][0]
    assert all(torch.equal(x, y) for x, y in zip(feed.carried, at_kill[0][1], strict=True))
    finish(resumed)
    assert feed.batcher.state == whole.feed.batcher.state  # type: ignore[attr-defined]
    assert all(torch.equal(x, y) for x, y in zip(
        feed.carried, whole.feed.carried, strict=True))  # type: ignore[attr-defined]
    assert_same_run(resumed, whole)

    # The final step's dev NLL reads each dev document with the state carried through it.
    dev = lm_docs()[1]
    tokens = sum(len(d) + 1 for d in dev)
    carried = sum(document_nll(resumed.model, d, None) for d in dev) / tokens
    reset = sum(document_nll(resumed.model, d, BPTT) for d in dev) / tokens
    assert resumed.state.history[-1].dev_nll == pytest.approx(carried, rel=1e-5)
    assert carried != pytest.approx(reset, rel=1e-3)


def test_lm_restored_carried_state_is_the_state_after_the_text_read_so_far(tmp_path: Path) -> None:
    kill_after(lm_loop(tmp_path, 0.0), LM_KILL)  # lr 0: every segment ran with the same weights
    resumed = lm_loop(tmp_path, 0.0)
    resumed.resume()
    feed = resumed.feed
    assert isinstance(feed, LMFeed) and feed.carried is not None
    docs = lm_docs()[0]
    read = torch.tensor([[IDS.bos, *docs[d][:4 * LM_KILL - 1]] for d in first_dealt()])  # (2, 12)
    model = tiny_lm("lstm", hidden=8, layers=2, seed=7).train()  # no dropout: train = eval
    assert same_weights(model, resumed.model)  # lr 0 left the initial weights
    with torch.no_grad():
        _, expected = model(read, model.initial_state(STREAMS))  # one pass from the zero state
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(feed.carried, expected, strict=True))
    assert all(t.abs().max() > 0.01 for t in expected)  # the zero state would not pass


# -- continuing a finished run (issue 53) --------------------------------------------------
def finishing_loop(work: Path, max_steps: int, select: str = "best_dev") -> TrainLoop:
    """A tiny run with dropout and a dev set that evaluates (dev NLL and dev decoding) every
    2 steps and at its last step, under the constant schedule (independent of max_steps)."""
    return s2s_loop(work, max_steps, 4, eval_every=2, select=select)


@pytest.mark.parametrize("select", ["best_dev", "best_dev_wer"])
def test_continuing_a_finished_run_equals_the_straight_run(tmp_path: Path, select: str) -> None:
    straight = trained(finishing_loop(tmp_path / "straight", 6, select))
    trained(finishing_loop(tmp_path / "b", 3, select))
    second = finishing_loop(tmp_path / "b", 6, select)
    assert second.resume() == "ckpt-00000003.pt"
    finish(second)
    assert_same_run(second, straight)
    assert (second.state.best_step, second.state.best_dev) == \
        (straight.state.best_step, straight.state.best_dev)
    assert not math.isnan(straight.state.history[1].dev_wer)  # the dev decoding ran too
    best = [Checkpoint.load(run.ckpt.root / "best.pt") for run in (straight, second)]
    assert best[0].step == best[1].step and all(
        torch.equal(a, b) for a, b in zip(best[0].weights.values(), best[1].weights.values()))


def test_reopening_keeps_an_earlier_best_and_forgets_a_best_only_the_closing_step_made(
        tmp_path: Path) -> None:
    # the rule on histories written by hand (dev NLL at the grid's step 2 and the closing 3)
    loop = finishing_loop(tmp_path, 6)

    def row(step: int, dev_nll: float) -> StepLog:
        return StepLog(step, 0, 1e-2, 1.0, 4, 1.0, 0, dev_nll, 0.0)
    loop._reopen()  # an empty history: nothing to reopen
    loop.ckpt.save_best(loop.checkpoint())
    loop.state.history = [row(1, math.nan), row(2, 0.5), row(3, 0.9)]
    loop._reopen()
    assert math.isnan(loop.state.history[-1].dev_nll) and loop.state.history[1].dev_nll == 0.5
    assert (loop.state.best_step, loop.state.best_dev) == (2, 0.5)
    assert (tmp_path / "best.pt").exists()  # it holds step 2, which is still the best
    loop.state.history = [row(1, math.nan), row(3, 0.9)]  # the closing step evaluated alone
    loop._reopen()
    assert (loop.state.best_step, loop.state.best_dev) == (0, math.inf)
    assert not (tmp_path / "best.pt").exists()


def test_a_finished_runs_closing_evaluation_leaves_it_when_it_is_continued(tmp_path: Path) -> None:
    done = trained(finishing_loop(tmp_path, 3)).state
    evaluated = {h.step: h.dev_nll for h in done.history if not math.isnan(h.dev_nll)}
    assert sorted(evaluated) == [2, 3]  # the grid's step 2 and the closing step 3
    closing_best = done.best_step == 3
    again = finishing_loop(tmp_path, 6)
    again.resume()
    assert math.isnan(again.state.history[-1].dev_nll)  # step 3: no evaluation now
    assert again.state.history[1].dev_nll == evaluated[2]  # the grid's evaluation stays
    assert (again.state.best_step, again.state.best_dev) == (2, evaluated[2])
    assert (tmp_path / "best.pt").exists() == (not closing_best)
    # resumed with the same max_steps (a killed run), nothing is reopened
    same = trained(finishing_loop(tmp_path / "same", 3))
    kept = finishing_loop(tmp_path / "same", 3)
    kept.resume()
    assert kept.state.history[-1].dev_nll == same.state.history[-1].dev_nll
