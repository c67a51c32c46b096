"""Rules of the training loop: AMP, skipped steps, accumulation, clipping, schedules, scheduled
sampling, bucketing, evaluation, the console, dev decoding, MRT and CUDA placement."""
from __future__ import annotations

import copy
import dataclasses
import io
import math
import random
import re
import sys
import typing
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import seqcore.training.loop as loop_module
from seqcore.artifacts.model_file import ModelFile, ModelInfo, ModelMeta
from seqcore.artifacts.train_log import DECODE_COLUMNS
from seqcore.config import (
    Config, DecodeConfig, ModelConfig, SequenceConfig, TrainConfig, TransformerConfig, load_config,
    problem_line)
from seqcore.contract import SpecialIds, pad_batch
from seqcore.data.batching import BucketSampler, SamplerState
from seqcore.data.examples import Example
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.greedy import greedy
from seqcore.decoding.predictions import decode_examples
from seqcore.determinism import resolve_device, set_determinism
from seqcore.config_rules import problems
from seqcore.errors import OneLineError
from seqcore.ledger import first_difference
from seqcore.losses import LossNorm
from seqcore.models import build_model
from seqcore.sequences import Batch, make_batch
from seqcore.tasks.lm.feed import LMFeed
from seqcore.signature import derived_params
from seqcore.training.checkpoint import SCHEMA_VERSION, Checkpoint, CheckpointDir, ledger_files
from seqcore.training.dev_decode import best_row
from seqcore.training.distributed import World
from seqcore.training.failures import TrainingOutOfMemory
from seqcore.training.feeds import Seq2SeqFeed, teacher_forced_nll
from seqcore.training.loop import StepLog, TooManySkippedSteps, TrainLoop, autocast_context
from seqcore.training.optim import build_optimizer
from seqcore.training.schedule import learning_rate, scheduled_sampling_probability
from tests.factories import (
    IDS, REPO, S2S_SEED, IdPieces, Oracle, dropout_modes, eval_nll, examples, kill_after,
    one_step_reads, s2s_loop, smoothed_token_losses, tiny_config, tiny_lm, tiny_model)
from tests.training.runs import assert_same_run, finish, record_batches, trained

NOLS = SequenceConfig(label_smoothing=0.0)
#: One layer each way and 16 positions: the smallest Transformer these rules need.
SMALL = {"enc_layers": 1, "dec_layers": 1, "max_len": 16}
CPU = torch.device("cpu")
# fused: torch's fused Adam skips on the device (issue 53); on CPU under native kernels only
KERNELS = {"unfused": {}, "fused": {"optimizer_kernel": "fused", "cpu_kernels": "native"}}


def trainer(tmp_path: Path, data: list[Example], seq: SequenceConfig = NOLS,
            dev: list[Example] = (), model: nn.Module | None = None, ids: SpecialIds = IDS,
            world: World = World(), contract: dict | None = None, **train: object) -> TrainLoop:
    """A tiny constant-rate run, 2 pairs a batch in one bucket, unless ``train`` says otherwise."""
    cfg = TrainConfig(**{"amp": "none", "batch_size": 2, "bucket_width": 100, "lr": 1e-3,
                         "schedule": "constant", "warmup_steps": 0, "threads": 1, **train})
    return TrainLoop(model or tiny_model(pad=ids.pad, **SMALL).train(), cfg,
                     Seq2SeqFeed((data, list(dev)), ids, seq, cfg),
                     CheckpointDir(tmp_path / "ck", 2), contract or {}, 16, world)


def plain_loop(tmp_path: Path, data: list[Example], dev: list[Example] = (),
               seq: SequenceConfig = NOLS, world: World = World(), **overrides: object
               ) -> TrainLoop:
    """A tiny dropout-free run (train and eval mode compute alike) with a dev set, as rank
    ``world.rank`` of ``world.size``."""
    return trainer(tmp_path, data, seq, dev, tiny_model(seed=7, **SMALL).train(), world=world,
                   contract={"task": "s2s"}, **{
                       "seed": S2S_SEED, "batch_size": 4, "bucket_width": 2, "max_steps": 4,
                       "lr": 1e-2, "eval_every": 100, "checkpoint_every": 100, "ledger_every": 0,
                       "keep_last": 2, **overrides})


def params_of(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def killed_and_resumed(build: Callable[[Path], TrainLoop], tmp: Path, kill: int) -> TrainLoop:
    """``build``'s run killed after step ``kill`` and resumed from that step's checkpoint to the
    end: the same log and weights as ``build``'s run straight through."""
    straight = trained(build(tmp / "straight"))
    first = build(tmp / "killed")
    first.resume()
    kill_after(first, kill)
    again = build(tmp / "killed")
    assert again.resume() == f"ckpt-{kill:08d}.pt"
    assert_same_run(straight, finish(again))
    return again


# -- mixed precision and skipped steps -------------------------------------------------------
def test_bf16_autocast_on_cpu_runs_in_bf16_and_steps(tmp_path: Path) -> None:
    tr = trainer(tmp_path, examples(8), amp="bf16")
    b = make_batch(examples(2), IDS)
    with autocast_context("bf16", CPU):
        assert tr.model(b.src, b.src_mask, b.tf.inputs).dtype == torch.bfloat16
    before = params_of(tr.model)
    row = tr.train_step()
    assert math.isfinite(row.loss) and math.isfinite(row.grad_norm) and tr.state.skipped == 0
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.model.parameters()))


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_non_finite_gradient_skips_the_step_counts_it_and_stops_after_the_limit(
        tmp_path: Path, kernel: str) -> None:
    tr = trainer(tmp_path, examples(8), max_consecutive_skips=3, **KERNELS[kernel])
    assert tr.fused == (kernel == "fused") == bool(tr.opt.defaults["fused"])
    with torch.no_grad():
        next(tr.model.parameters()).fill_(math.nan)  # every gradient becomes NaN
    before = params_of(tr.model)
    for step in (1, 2):
        row = tr.train_step()
        assert math.isnan(row.grad_norm) and tr.state.skipped == step == row.skipped
    assert all(torch.equal(a.nan_to_num(), p.nan_to_num()) for a, p in  # no step was taken
               zip(before, tr.model.parameters()))
    assert all(float(st["step"]) == 0 for st in tr.opt.state.values())  # nor counted by Adam
    with pytest.raises(TooManySkippedSteps, match="3 non-finite gradient steps in a row"):
        tr.train_step()


def with_loss(loop: TrainLoop, edit: Callable[[Any, int], Any]) -> TrainLoop:
    """``loop`` whose feed's loss goes through ``edit(loss, the 1-based step)``."""
    loss = loop.feed.loss

    def edited(model: nn.Module, batch: Batch, ss_prob: float, gen: torch.Generator) -> Any:
        return edit(loss(model, batch, ss_prob, gen), loop.state.step + 1)

    loop.feed.loss = edited  # type: ignore[method-assign]
    return loop


def test_a_step_out_of_memory_names_the_micro_batch_shape_and_the_settings_to_lower(
        tmp_path: Path) -> None:
    # issue 53: the CPU allocator's own failure (a real one: an allocation it refuses), in
    # the eager step and in the graphed one (its micro-batches go through the same stop)
    for graphs in ({}, {"cuda_graphs": "on", **KERNELS["fused"]}):
        loop = with_loss(plain_loop(tmp_path / str(len(graphs)), examples(8), batch_size=4,
                                    accum_steps=2, **graphs),
                         lambda out, step: torch.empty(2**50))  # 4 PiB
        with pytest.raises(TrainingOutOfMemory) as stopped:
            loop.train_step()
        assert re.fullmatch(
            r"out of cpu memory at step 1 on a micro-batch of 4 sources x \d+ positions and 4 "
            r"targets x \d+ positions \(train.batch_size=4, train.accum_steps=2\); lower "
            r"train.batch_size and raise train.accum_steps by the same factor \(the same batch "
            r"in smaller pieces\), or lower sequence.max_src_len/max_tgt_len", str(stopped.value))
        assert isinstance(stopped.value, OneLineError)  # a stage prints it alone, exit status 1


def test_fused_adam_under_portable_kernels_is_refused_in_the_line_validate_writes() -> None:
    # train.device: auto that resolved to the CPU gets past validate's rule (device: cpu)
    with pytest.raises(OneLineError) as refused:
        build_optimizer([nn.Parameter(torch.zeros(2))], "adam", (0.9, 0.98), 1e-9, 0.0,
                        portable=True, kernel="fused")
    assert str(refused.value) == next(
        problem_line(p) for p in problems(Config(train=TrainConfig(optimizer_kernel="fused")))
        if p.key == "train.optimizer_kernel")


def poisoned(loop: TrainLoop, steps: set[int]) -> TrainLoop:
    """``loop`` with a NaN loss (so NaN gradients, a skipped step) at the 1-based ``steps``."""
    return with_loss(loop, lambda out, step: dataclasses.replace(
        out, total=out.total * math.nan) if step in steps else out)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_reading_the_device_back_once_a_window_gives_the_per_step_log_and_weights(
        tmp_path: Path, kernel: str) -> None:
    # issue 53: on a GPU the run reads loss, gradient norm and skips back once per log_every
    # steps; whatever the window, the log (skips counted at their own steps) and the weights
    # are the per-step run's, and the checkpoints hold the settled counts; dev is evaluated
    # at steps 4 and 8 only, though step 7 shares the last window
    runs = {}
    for window in (1, 3):
        loop = poisoned(plain_loop(tmp_path / str(window), examples(12), examples(4, seed=9),
                                   max_steps=8, eval_every=4, checkpoint_every=5,
                                   **KERNELS[kernel]), {2, 3})
        loop.sync_every = window
        runs[window] = finish(loop)
    assert [e.skipped for e in runs[1].state.history] == [0, 1, 2, 2, 2, 2, 2, 2]
    assert [e.step for e in runs[1].state.history if not math.isnan(e.dev_nll)] == [4, 8]
    assert_same_run(runs[3], runs[1])
    assert [c.name for c in runs[3].ckpt.numbered()] == ["ckpt-00000005.pt", "ckpt-00000008.pt"]
    assert Checkpoint.load(runs[3].ckpt.numbered()[0]).progress.skipped == 2


def test_a_window_stops_at_the_step_where_the_skips_in_a_row_reached_the_limit(
        tmp_path: Path) -> None:
    loop = poisoned(plain_loop(tmp_path, examples(12), max_steps=8, max_consecutive_skips=2,
                               **KERNELS["fused"]), {2, 3, 4})
    loop.sync_every = 8
    with pytest.raises(TooManySkippedSteps, match="2 non-finite gradient steps in a row at "
                                                  "step 3 "):
        finish(loop)


@pytest.mark.parametrize("ss_choice", ["off", "argmax", "sample", "graphs"])
def test_a_step_under_the_fused_optimizer_reads_nothing_back_from_the_device(
        tmp_path: Path, ss_choice: str) -> None:
    # issue 53: what a GPU step would wait on, found on the CPU by the same calls: nothing in
    # the loss (label smoothing on), scheduled sampling's first pass and draw, the model, the
    # clip or the optimiser, nor in the step as CUDA graphs (run eagerly here); the batch is
    # counted on the host, as its move to a GPU counts it
    mode = {"off": {}, "graphs": {"cuda_graphs": "on"}}.get(ss_choice, {
        "ss_schedule": "inverse_sigmoid", "ss_k": 1.0, "ss_cap": 1.0, "ss_choice": ss_choice})
    loop = plain_loop(tmp_path, examples(12), seq=SequenceConfig(label_smoothing=0.1),
                      **KERNELS["fused"], **mode)
    found, pending, _ = one_step_reads(loop)
    assert found == []
    entry = loop._settle([pending])[0]  # and what it left on the device reads back
    assert entry.step == 2 and (entry.ss_prob > 0) == (ss_choice in ("argmax", "sample"))
    assert (loop.graphs is not None) == (ss_choice == "graphs")


def test_an_lm_step_under_the_fused_optimizer_reads_nothing_back_from_the_device(
        tmp_path: Path) -> None:
    # issue 53: the segment's labelled positions are counted on the host before its move, and
    # the carried state and loss stay on the device (found on the CPU by the same calls)
    cfg = TrainConfig(amp="none", optimizer_kernel="fused", cpu_kernels="native", threads=1,
                      schedule="constant", lr=1e-2, warmup_steps=0, max_steps=4)
    docs = [[4, 5, 6, 7, 8, 9] * 3, [9, 8, 7, 6, 5, 4] * 2]
    feed = LMFeed((docs, []), IDS, "token-mean", 0.1, 2, 4, 0)
    loop = TrainLoop(tiny_lm("lstm", vocab=10).train(), cfg, feed, CheckpointDir(tmp_path, 2),
                     {"task": "lm"}, 8)
    found, pending, (seg,) = one_step_reads(loop)
    assert found == []
    assert pending.tokens == seg.labelled == int((seg.labels >= 0).sum()) > 0


# -- accumulation and clipping -----------------------------------------------------------------
def big_batch_grads(model: nn.Module, data: list[Example]) -> list[torch.Tensor]:
    """Reference: gradient of the token-mean loss of all examples in one padded batch."""
    model = copy.deepcopy(model)
    model.zero_grad()
    hand_loss(model, [make_batch(data, IDS)], 0.0, "token-mean").backward()
    return [p.grad.clone() for p in model.parameters()]


def first_batches(data: list[Example], k: int) -> list[list[Example]]:
    """The first k micro-batches the feed draws (its sampler, seeded as in TrainConfig)."""
    sampler = BucketSampler([len(ex.tgt) for ex in data], 2, 100, TrainConfig().seed)
    return [[data[i] for i in sampler.next()] for _ in range(k)]


def test_accumulated_micro_batches_give_the_big_batch_gradient_over_all_tokens(
        tmp_path: Path) -> None:
    data = examples(8, seed=7)
    micro = first_batches(data, 2)
    assert make_batch(micro[0], IDS).tokens != make_batch(micro[1], IDS).tokens
    tr = trainer(tmp_path, data, accum_steps=2, clip_norm=0.0)
    ref = big_batch_grads(tr.model, micro[0] + micro[1])
    row = tr.train_step()
    for p, r in zip(tr.model.parameters(), ref):
        torch.testing.assert_close(p.grad, r, rtol=1e-4, atol=1e-6)
    assert row.tokens == sum(make_batch(m, IDS).tokens for m in micro)
    # A mean of the two micro-batch means is a different (wrong) gradient here.
    means = [big_batch_grads(tr.model, m) for m in micro]
    assert not all(torch.allclose((a + b) / 2, r, rtol=1e-3) for a, b, r in
                   zip(*means, ref, strict=True))


def test_clipping_scales_the_global_norm_once_after_all_micro_batches(tmp_path: Path) -> None:
    data = examples(8, seed=7)
    micro = first_batches(data, 2)
    tr = trainer(tmp_path, data, accum_steps=2, clip_norm=0.01)
    ref = big_batch_grads(tr.model, micro[0] + micro[1])
    ref_norm = float(torch.linalg.vector_norm(torch.stack([r.norm() for r in ref])))
    assert ref_norm > 0.01
    row = tr.train_step()
    assert row.grad_norm == pytest.approx(ref_norm, rel=1e-4)  # the logged norm is the pre-clip one
    # Global-norm clipping keeps the direction: every gradient is scaled by the same factor
    # (per-value clamping would not), and the clipped global norm is the threshold.
    for p, r in zip(tr.model.parameters(), ref):
        torch.testing.assert_close(p.grad, r * (0.01 / ref_norm), rtol=1e-3, atol=1e-8)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in tr.model.parameters()]))
    assert float(norm) == pytest.approx(0.01, rel=1e-3)


# -- schedules and optimiser -------------------------------------------------------------------
@pytest.mark.parametrize(("step", "expected"), [(1, 0.125), (2, 0.25), (4, 0.5), (16, 0.25)])
def test_noam_schedule_is_vaswani_eq3(step: int, expected: float) -> None:
    # lr * d^-0.5 * min(step^-0.5, step * warmup^-1.5) with lr=2, d=4, warmup=4
    assert learning_rate(step, "noam", 2.0, 4, 100, 4) == pytest.approx(expected)


@pytest.mark.parametrize(("schedule", "step", "warmup", "expected"), [
    ("constant", 1, 2, 0.15), ("constant", 2, 2, 0.3), ("constant", 50, 2, 0.3),
    ("cosine", 1, 2, 0.15), ("cosine", 6, 2, 0.15), ("cosine", 10, 2, 0.0),
    ("cosine", 5, 0, 0.15),
])
def test_constant_and_cosine_schedules_warm_up_linearly(
        schedule: str, step: int, warmup: int, expected: float) -> None:
    assert learning_rate(step, schedule, 0.3, warmup, 10, 4) == pytest.approx(expected, abs=1e-12)


def test_adam_betas_and_eps_come_from_params(tmp_path: Path) -> None:
    assert (TrainConfig().betas, TrainConfig().eps) == ((0.9, 0.98), 1e-9)
    group = trainer(tmp_path, examples(4), betas=(0.8, 0.9), eps=1e-6).opt.param_groups[0]
    assert (group["betas"], group["eps"]) == ((0.8, 0.9), 1e-6)
    # every kind starts at rate 0, as the ledger's state before the first step records it (the
    # schedule sets each step's rate)
    for portable, kernel in ((True, "unfused"), (False, "unfused"), (False, "fused")):
        assert build_optimizer(nn.Linear(2, 2).parameters(), "adam", (0.9, 0.98), 1e-9, 0.0,
                               portable, kernel).param_groups[0]["lr"] == 0.0


# -- scheduled sampling ------------------------------------------------------------------------
@pytest.mark.parametrize(("schedule", "k", "cap", "step", "expected"), [
    ("off", 10.0, 1.0, 50, 0.0), ("linear", 10.0, 1.0, 0, 0.0), ("linear", 10.0, 1.0, 2, 0.2),
    ("linear", 10.0, 0.25, 5, 0.25), ("exponential", 0.9, 1.0, 1, 0.1),
    ("exponential", 0.9, 1.0, 2, 0.19), ("exponential", 0.9, 0.15, 2, 0.15),
    ("inverse_sigmoid", 10.0, 1.0, 0, 1 / 11), ("inverse_sigmoid", 10.0, 1.0, 23.0259, 0.5),
])
def test_scheduled_sampling_probability_follows_bengio_2015_up_to_the_cap(
        schedule: str, k: float, cap: float, step: float, expected: float) -> None:
    got = scheduled_sampling_probability(step, schedule, k, cap)  # type: ignore[arg-type]
    assert got == pytest.approx(expected, abs=1e-5)


# -- bucketing -----------------------------------------------------------------------------------
def test_sampler_state_round_trips_and_replays_the_same_batches_across_epochs() -> None:
    lengths = [len(ex.tgt) for ex in examples(10)]
    a = BucketSampler(lengths, 3, 2, 5)
    for _ in range(3):
        a.next()
    saved = SamplerState(a.state.epoch, a.state.cursor)
    expected = [a.next() for _ in range(6)]  # crosses into epoch 1 (4 batches per epoch)
    b = BucketSampler(lengths, 3, 2, 5)
    b.load(saved)
    assert [b.next() for _ in range(6)] == expected
    assert a.state == b.state and a.state.epoch == 2


def test_each_epoch_visits_every_example_once_in_length_buckets() -> None:
    lengths = [len(ex.tgt) for ex in examples(30)]
    s = BucketSampler(lengths, 4, 2, 9)
    epoch = [s.next() for _ in range(8)]
    assert sorted(i for b in epoch for i in b) == list(range(30))
    buckets = [{lengths[i] // 2 for i in b} for b in epoch]
    assert all(max(bk) - min(bk) <= 1 for bk in buckets)  # a cut spans at most two buckets
    assert epoch != [s.next() for _ in range(8)]  # a new seeded order next epoch


def test_every_batch_row_keeps_its_own_labels() -> None:
    feed = Seq2SeqFeed((examples(12, seed=3), []), IDS, NOLS,
                       TrainConfig(batch_size=5, bucket_width=2))
    for _ in range(6):
        b = feed.draw()
        for src, smask, labels in zip(b.src, b.src_mask, b.tf.labels):
            expected = [t + 1 for t in src[smask].tolist()[::-1]] + [IDS.eos]
            assert labels[labels >= 0].tolist() == expected


# -- amp: autocast dtype and the grad scaler ---------------------------------------------------
def test_amp_autocasts_to_the_dtype_it_names_and_refuses_fp16_off_cuda() -> None:
    with pytest.raises(ValueError) as refused:
        autocast_context("fp16", CPU)
    assert str(refused.value) == "amp: fp16 needs CUDA; use bf16 on CPU"
    with autocast_context("bf16", CPU):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    # A CUDA device object needs no GPU: without one torch builds the context disabled, with
    # the dtype it was given (CUDA's own default would be float16 for both).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for amp, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            with autocast_context(amp, torch.device("cuda")):
                assert torch.get_autocast_dtype("cuda") == dtype


@pytest.mark.parametrize("amp", ["none", "bf16", "fp16"])
def test_only_amp_fp16_runs_an_enabled_grad_scaler(tmp_path: Path, amp: str) -> None:
    loop = plain_loop(tmp_path, examples(4), amp=amp)
    assert loop.scaler.is_enabled() == (amp == "fp16")
    # torch's documented default initial scale 2**16; a disabled scaler saves no state
    assert loop.checkpoint().scaler == ({} if amp != "fp16" else {
        "scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
        "growth_interval": 2000, "_growth_tracker": 0})


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adamw_decays_weights_apart_from_the_gradient_and_adam_adds_the_decay_to_it(
        tmp_path: Path, optimizer: str, kernel: str) -> None:
    lr, wd = 0.1, 0.5
    loop = plain_loop(tmp_path, examples(4), optimizer=optimizer, weight_decay=wd,
                      **KERNELS[kernel])
    params = list(loop.model.parameters())
    before = params_of(loop.model)
    for group in loop.opt.param_groups:
        group["lr"] = lr
    for p in params:
        p.grad = torch.zeros_like(p)
    loop.opt.step()
    for p, w in zip(params, before, strict=True):
        if optimizer == "adamw":  # Loshchilov & Hutter: w <- w (1 - lr wd), then Adam on g = 0
            expected = w * (1 - lr * wd)
        else:  # L2 in the gradient: g = wd w, and Adam's first step moves by lr g / (|g| + eps)
            g = wd * w
            expected = w - lr * g / (g.abs() + 1e-9)
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)


def test_too_many_skipped_steps_says_what_to_change(tmp_path: Path) -> None:
    loop = plain_loop(tmp_path, examples(4), max_consecutive_skips=1)
    with torch.no_grad():
        next(loop.model.parameters()).fill_(math.nan)
    with pytest.raises(TooManySkippedSteps) as stopped:
        loop.train_step()
    assert str(stopped.value) == (
        "1 non-finite gradient steps in a row at step 1 (train.max_consecutive_skips=1); "
        "lower train.lr, check the data, or use amp: none")


def test_scheduled_sampling_draws_from_the_loops_generator_never_the_global_one(
        tmp_path: Path) -> None:
    # inverse sigmoid with k = 1 feeds a model token with probability 1 / (1 + e^0) = 1/2
    loop = plain_loop(tmp_path, examples(4), ss_schedule="inverse_sigmoid", ss_k=1.0,
                      ss_cap=1.0, ss_choice="sample")
    global_before, own_before = torch.get_rng_state(), loop.gen.get_state()
    assert loop.train_step().ss_prob == pytest.approx(0.5)
    assert torch.equal(torch.get_rng_state(), global_before)
    assert not torch.equal(loop.gen.get_state(), own_before)


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_scheduled_sampling_seeds_its_generator_per_rank_by_the_stated_rule(
        tmp_path: Path, rank: int) -> None:
    # docs/scale-out.md: train.seed + 1 + 7919 x rank (rank 0 = the single process)
    loop = plain_loop(tmp_path, examples(4), world=World(rank=rank, size=4, backend="gloo"))
    assert loop.gen.initial_seed() == S2S_SEED + 1 + 7919 * rank


# -- evaluation, the best checkpoint and the ledger ----------------------------------------------
def test_dev_nll_every_eval_every_steps_and_the_first_of_equal_bests_is_kept(
        tmp_path: Path) -> None:
    dev = examples(3, seed=11)
    # lr 0: the weights never move, so both evaluations give the same dev NLL (a tie)
    loop = plain_loop(tmp_path, examples(8), dev, lr=0.0, eval_every=2, max_steps=4,
                      select="best_dev")
    pairs = [make_batch([ex], IDS) for ex in dev]  # NLL per label token, one pair at a time
    with torch.no_grad():
        expected = float(hand_loss(tiny_model(seed=7, **SMALL), pairs, 0.0, "token-mean"))
    nll = [e.dev_nll for e in finish(loop).state.history]
    assert [math.isnan(v) for v in nll] == [True, False, True, False]
    assert nll[1] == nll[3] == pytest.approx(expected, rel=1e-5)
    assert (loop.state.best_dev, loop.state.best_step) == (nll[1], 2)
    best = loop.ckpt.best_weights(2)
    assert best is not None and best.path.name == "best.pt" and best.checkpoint.step == 2

    last = finish(plain_loop(tmp_path / "last", examples(8), dev, eval_every=2, max_steps=2))
    assert math.isfinite(last.state.history[-1].dev_nll)
    assert not (last.ckpt.root / "best.pt").exists()  # select: last writes no best.pt


def test_ledger_every_one_keeps_the_state_after_every_step(tmp_path: Path) -> None:
    loop = finish(plain_loop(tmp_path, examples(8), ledger_every=1, max_steps=3))
    assert [p.name for p in ledger_files(loop.ckpt.ledger)] == [
        f"ckpt-{s:08d}.pt" for s in (1, 2, 3)]


# -- the console: progress bar and throughput -----------------------------------------------------
def test_the_progress_bar_on_a_terminal_counts_steps_from_the_resumed_one_with_the_loss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kill_after(s2s_loop(tmp_path, 4), 2)
    loop = s2s_loop(tmp_path, 4)
    loop.resume()
    terminal = io.StringIO()  # a stderr that says it is a terminal, keeping what is drawn
    monkeypatch.setattr(terminal, "isatty", lambda: True)
    monkeypatch.setattr(sys, "stderr", terminal)
    finish(loop)
    drawn = terminal.getvalue()
    first, final = drawn.split("\r")[1], drawn.rstrip("\n").split("\r")[-1]  # redrawn in place
    assert "| 2/4 [" in first and "| 4/4 [" in final  # past the total tqdm would drop "/4"
    assert re.search(r"[\d?]step/s|s/step\b", final)
    assert f"loss={loop.state.history[-1].loss:.3f}" in final
    assert re.search(r"tok_s=\d+\]", final)


def test_no_progress_bar_is_drawn_when_stderr_is_not_a_terminal(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    finish(plain_loop(tmp_path, examples(8), max_steps=2))
    assert capsys.readouterr().err == ""


def test_each_step_reports_its_tokens_per_second_of_wall_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter(100.0 + 0.25 * i for i in range(1000))  # each clock read is 0.25 s later
    monkeypatch.setattr(loop_module, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    seen: list[tuple[int, float]] = []
    plain_loop(tmp_path, examples(8), max_steps=2).run(
        lambda entry, tokens_per_s: seen.append((entry.tokens, tokens_per_s)))
    assert len(seen) == 2
    assert all(rate == tokens / 0.25 for tokens, rate in seen)  # one step between two reads


# -- one step: counters, log and the checkpoint's fields -----------------------------------------
def test_a_single_process_checkpoint_holds_every_field_in_order_with_its_value(
        tmp_path: Path) -> None:
    data = examples(12, seed=3, lengths=(1, 5))  # s2s_loop's data: 3 batches of 4 an epoch
    loop = s2s_loop(tmp_path, 5)
    drawn = record_batches(loop)
    logged = [loop.train_step() for _ in range(2)]
    tokens = [sum(len(data[i].tgt) + 1 for i in batch) for batch in drawn]  # EOS labelled
    assert [(r.step, r.epoch, r.tokens, r.skipped) for r in logged] == [
        (1, 0, tokens[0], 0), (2, 0, tokens[1], 0)]
    assert all(math.isnan(r.dev_nll) for r in logged)  # no evaluation step
    payload = loop.checkpoint().payload
    assert list(payload) == ["world", "schema", "model", "optimizer", "scaler", "schedule",
                             "data", "generator", "rng", "state", "history", "contract"]
    assert payload["world"] == {"size": 1, "backend": "none", "device_kind": "cpu"}
    assert payload["schema"] == SCHEMA_VERSION
    assert payload["schedule"] == {"name": "constant", "step": 2}
    # two of the epoch's three batches drawn; a checkpoint is never inside an accumulation
    assert payload["data"] == {"epoch": 0, "cursor": 2, "seed": S2S_SEED, "micro": 0}
    assert payload["state"] == {"step": 2, "tokens": sum(tokens), "skipped": 0, "select": "last",
                                "consecutive_skips": 0, "best_dev": math.inf, "best_step": 0}
    assert torch.equal(payload["generator"], loop.gen.get_state())
    assert payload["contract"] == {"task": "s2s"}


def test_sequence_mean_over_a_single_sequence_divides_its_loss_by_one(tmp_path: Path) -> None:
    seq = SequenceConfig(label_smoothing=0.0, loss_norm="sequence-mean")
    data = examples(3, seed=4, lengths=(2, 4))
    loop = plain_loop(tmp_path, data, seq=seq, batch_size=1, bucket_width=100)
    b = Seq2SeqFeed((data, []), IDS, seq, loop.cfg).draw()  # the same seeded sampler
    with torch.no_grad():
        expected = float(hand_loss(loop.model, [b], 0.0, "token-mean"))  # its token mean
    assert loop.train_step().loss == pytest.approx(expected, rel=1e-5)


# -- known answers at the call sites (rule 16): the learning rate the optimiser used ----------
def formula_lr(schedule: str, t: int, lr: float, warmup: int, total: int, d_model: int) -> float:
    """The schedules at 1-based step ``t``: noam is Vaswani et al. 2017 eq. 3 scaled by ``lr``;
    constant and cosine warm up linearly to lr, then stay or fall as a half cosine to 0."""
    if schedule == "noam":
        return lr * d_model**-0.5 * min(t**-0.5, t * max(warmup, 1) ** -1.5)
    if warmup and t <= warmup:
        return lr * t / warmup
    if schedule == "constant":
        return lr
    return lr * 0.5 * (1 + math.cos(math.pi * (t - warmup) / (total - warmup)))


#: The run every schedule is checked on: 8 steps, 4 of them warmup, d_model 16 (tiny_model).
STEPS, WARMUP, D_MODEL = 8, 4, 16
#: Hand-worked values at step 1, the last warmup step (4), warmup+1 (5) and the last step (8).
#: noam, lr 1, d 16 (16^-0.5 = 1/4), warmup 4 (4^-1.5 = 1/8):
#:   t=1: 1/4 * min(1, 1/8) = 1/32;  t=4: 1/4 * min(1/2, 4/8) = 1/8;
#:   t=5: 1/4 * min(5^-0.5, 5/8) = 1/(4 sqrt 5);  t=8: 1/4 * 8^-0.5 = 1/(8 sqrt 2).
#: constant, lr 0.01: 0.01 * 1/4, then 0.01 from step 4 on.
#: cosine, lr 0.01: 0.01 * 1/4; 0.01; 0.01 * (1 + cos(pi/4)) / 2; 0.01 * (1 + cos(pi)) / 2 = 0.
HAND_LR = {
    "noam": (1.0, {1: 1 / 32, 4: 1 / 8, 5: 1 / (4 * math.sqrt(5)), 8: 1 / (8 * math.sqrt(2))}),
    "constant": (0.01, {1: 0.0025, 4: 0.01, 5: 0.01, 8: 0.01}),
    "cosine": (0.01, {1: 0.0025, 4: 0.01, 5: 0.01 * (0.5 + math.sqrt(2) / 4), 8: 0.0}),
}


def test_schedule_table_covers_every_schedule_the_config_allows() -> None:
    assert set(HAND_LR) == set(typing.get_args(typing.get_type_hints(TrainConfig)["schedule"]))


def run_recording_lr(tmp_path: Path, schedule: str, lr: float, warmup: int
                     ) -> tuple[list[float], list[float], float]:
    """Train the tiny model STEPS steps; returns the lr of every param group as the optimiser
    stepped, the logged lr of each step, and the largest parameter move of step 1."""
    loop = trainer(tmp_path, examples(16), SequenceConfig(), batch_size=4, bucket_width=1,
                   max_steps=STEPS, schedule=schedule, lr=lr, warmup_steps=warmup,
                   eval_every=100, checkpoint_every=100)
    used: list[float] = []
    first_move: list[float] = []
    optimiser_step = loop.opt.step

    def recording_step(*args: Any, **kwargs: Any) -> Any:
        groups = {g["lr"] for g in loop.opt.param_groups}
        assert len(groups) == 1  # one rate for every group
        used.append(groups.pop())
        before = params_of(loop.model)
        out = optimiser_step(*args, **kwargs)
        if len(used) == 1:
            first_move.append(max(float((p.detach() - b).abs().max())
                                  for p, b in zip(loop.model.parameters(), before)))
        return out

    loop.opt.step = recording_step  # type: ignore[method-assign]
    return used, [h.lr for h in finish(loop).state.history], first_move[0]


@pytest.mark.parametrize("schedule", sorted(HAND_LR))
def test_optimiser_uses_the_scheduled_lr_at_each_step_not_one_step_late(
        tmp_path: Path, schedule: str) -> None:
    lr, hand = HAND_LR[schedule]
    used, logged, move = run_recording_lr(tmp_path, schedule, lr, WARMUP)
    assert len(used) == STEPS  # every step was taken (none skipped)
    for t, value in hand.items():
        assert used[t - 1] == pytest.approx(value, rel=1e-12, abs=1e-15), (schedule, t)
    for t in range(1, STEPS + 1):
        assert used[t - 1] == pytest.approx(
            formula_lr(schedule, t, lr, WARMUP, STEPS, D_MODEL), rel=1e-12, abs=1e-15), t
    assert logged == used  # the train log reports the rate that was used
    # Adam's first (bias-corrected) update is lr * g / (|g| + eps): a move of lr exactly
    # wherever |g| >> eps, so the largest move of step 1 is the step-1 rate.
    assert move == pytest.approx(hand[1], rel=1e-3)


@pytest.mark.parametrize("schedule", sorted(HAND_LR))
def test_without_warmup_the_first_step_already_follows_the_schedule(
        tmp_path: Path, schedule: str) -> None:
    lr = HAND_LR[schedule][0]
    used, _, _ = run_recording_lr(tmp_path, schedule, lr, 0)
    # by hand: noam (warmup counts as 1) lr/4 * t^-0.5; constant lr; cosine lr(1+cos(pi t/8))/2
    steps = range(1, STEPS + 1)
    hand = {"noam": [lr / 4 * t**-0.5 for t in steps], "constant": [lr] * STEPS,
            "cosine": [lr * (1 + math.cos(math.pi * t / STEPS)) / 2 for t in steps]}[schedule]
    assert used == pytest.approx(hand, rel=1e-12, abs=1e-15)


# -- scheduled sampling feeds the previous position's prediction -----------------------------
def test_scheduled_sampling_feeds_the_previous_positions_prediction_after_bos(
        tmp_path: Path) -> None:
    # Gold inputs BOS 10 11 10 and BOS 11 PAD PAD; the oracle predicts 4 5 6 7 at positions
    # 0..3, so input t+1 becomes the prediction at t: BOS 4 5 6 and BOS 4 PAD PAD (PAD stays).
    # Unshifted predictions would give BOS 5 6 7 / BOS 5 PAD PAD.
    data = [Example("a", "a", "", "", [4, 5], [10, 11, 10], True),
            Example("b", "b", "", "", [6], [11], True)]
    expected = {(IDS.bos, 10, 11, 10): [IDS.bos, 4, 5, 6],
                (IDS.bos, 11, IDS.pad, IDS.pad): [IDS.bos, 4, IDS.pad, IDS.pad]}
    # linear with k = 1 and cap 1: probability 1 (every eligible input replaced) from the
    # second step on, whichever step the schedule counts from
    model = Oracle(positional=True)
    state = finish(trainer(tmp_path, data, SequenceConfig(), model=model, max_steps=2, lr=1e-6,
                           ss_schedule="linear", ss_k=1.0, ss_cap=1.0, ss_choice="argmax",
                           eval_every=100, checkpoint_every=100)).state
    assert state.history[-1].ss_prob == 1.0
    gold, mixed = model.calls[-2], model.calls[-1]  # the last step's two passes
    assert sorted(map(tuple, gold.tolist())) == sorted(expected)  # first pass: teacher forced
    for g, m in zip(gold.tolist(), mixed.tolist()):
        assert m == expected[tuple(g)]


def test_each_logged_step_names_the_epoch_its_cursor_stood_in_when_the_step_began(
        tmp_path: Path) -> None:
    # 12 pairs, 4 a batch, 3 batches an epoch: the cursor moves to the next epoch when a step
    # draws past the last batch, so the step that starts an epoch logs the one before it
    # (docs/training.md; the committed logs were written so)
    loop = s2s_loop(tmp_path, 7)
    loop.resume()
    logged: list[int] = []
    loop.run(lambda entry, tokens_per_s: logged.append(entry.epoch))
    assert logged == [0, 0, 0, 0, 1, 1, 1]


# -- rules checked where they take effect: special ids, loss, clipping, eval mode -------------
#: Special ids at the top of the vocabulary: a call site that hard-codes 0..3 gets them wrong.
HIGH_IDS = SpecialIds(pad=8, unk=9, bos=10, eos=11)


def hand_loss(model: nn.Module, batches: list[Batch], eps: float, norm: LossNorm,
              ids: SpecialIds = IDS) -> torch.Tensor:
    """The step's loss, normalised over the tokens (or sequences) of *all* micro-batches."""
    per_seq: list[torch.Tensor] = []
    for b in batches:
        logp = torch.log_softmax(model(b.src, b.src_mask, b.tf.inputs).float(), -1)  # (B, T, V)
        per_seq += smoothed_token_losses(logp, b.tf.labels, eps, ids)
    tokens = sum(len(s) for s in per_seq)
    if norm == "token-mean":
        return torch.cat(per_seq).sum() / tokens
    if norm == "sequence-mean":
        return torch.stack([s.mean() for s in per_seq]).sum() / len(per_seq)
    return torch.cat(per_seq).sum()


@pytest.mark.parametrize("ids", [IDS, HIGH_IDS], ids=["ids0123", "ids_high"])
@pytest.mark.parametrize("norm", ["token-mean", "sequence-mean", "sum"])
def test_loop_minimises_the_smoothed_loss_without_pad_or_bos_mass_over_the_whole_step(
        tmp_path: Path, norm: LossNorm, ids: SpecialIds) -> None:
    low = 4 if ids == IDS else 0
    data = examples(8, seed=7, low=low, high=low + 6)
    tr = trainer(tmp_path, data, SequenceConfig(loss_norm=norm, label_smoothing=0.2), ids=ids,
                 accum_steps=2, clip_norm=0.0)
    reference = copy.deepcopy(tr.model)
    batches = [make_batch(m, ids) for m in first_batches(data, 2)]
    assert batches[0].tokens != batches[1].tokens  # unequal micro-batches: the mean matters
    expected = hand_loss(reference, batches, 0.2, norm, ids)
    expected.backward()
    row = tr.train_step()
    assert row.loss == pytest.approx(float(expected.detach()), rel=1e-5)  # the logged loss
    for p, r in zip(tr.model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-7)  # what is minimised


def test_clip_comes_after_unscale_with_an_enabled_grad_scaler(tmp_path: Path) -> None:
    data = examples(8, seed=7, high=10)
    tr = trainer(tmp_path, data, SequenceConfig(label_smoothing=0.0), clip_norm=0.01)
    tr.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)  # fp16's scaler, enabled
    assert tr.scaler.is_enabled()
    reference = copy.deepcopy(tr.model)
    hand_loss(reference, [make_batch(first_batches(data, 1)[0], IDS)], 0.0,
              "token-mean").backward()
    ref = [r.grad for r in reference.parameters()]
    ref_norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in ref])))
    assert ref_norm > 0.01
    row = tr.train_step()
    # The logged pre-clip norm is the unscaled one, and clipping scaled the unscaled
    # gradient to the threshold (clipping first would clip the 4096x gradient instead).
    assert row.grad_norm == pytest.approx(ref_norm, rel=1e-4)
    for p, r in zip(tr.model.parameters(), ref, strict=True):
        torch.testing.assert_close(p.grad, r * (0.01 / ref_norm), rtol=1e-3, atol=1e-9)


def test_dev_nll_of_the_training_loop_runs_with_dropout_off(tmp_path: Path) -> None:
    dev = examples(5, seed=3, high=10)
    tr = trainer(tmp_path, examples(8, high=10), SequenceConfig(), dev,
                 tiny_model(dropout=0.5, **SMALL).train(), clip_norm=0.0, max_steps=1,
                 eval_every=1, checkpoint_every=1)
    rows: list[StepLog] = []
    seen = dropout_modes(tr.model)
    tr.run(lambda entry, tokens_per_s: rows.append(entry))
    assert tr.model.training  # training continues in train mode after the dev pass
    assert seen and seen[-1] is False  # the last forward was the dev pass
    total, count = tr.feed.dev_nll(tr.model)
    assert rows[0].dev_nll == pytest.approx(eval_nll(tr.model, dev) / count, rel=1e-5)
    assert total == pytest.approx(eval_nll(tr.model, dev), rel=1e-5)


@pytest.mark.parametrize("norm", ("token-mean", "sequence-mean"))
def test_loss_normalisation_trainer_accumulation_equals_one_big_batch(
        norm: str, ids: SpecialIds, tmp_path: Path) -> None:
    """The real training step: 3 micro-batches of 2 give the gradient of one batch of 6."""
    data = examples(6, seed=7, high=12, shift=0, lengths=(2, 5), reverse=False)
    found = []
    for batch_size, accum in ((6, 1), (2, 3)):
        model = tiny_model("transformer").train()
        trainer(tmp_path / f"c{accum}", data, SequenceConfig(loss_norm=norm), model=model,
                ids=ids, batch_size=batch_size, accum_steps=accum, clip_norm=0.0, max_steps=1,
                lr=0.0, bucket_width=1).train_step()
        found.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    for got, want in zip(found[1], found[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ("gru", "lstm", "transformer"))
def test_every_family_trains_by_changing_only_model_family(family: str, tmp_path: Path,
                                                           ids: SpecialIds) -> None:
    model = tiny_model(family).train()
    ex = examples(40, seed=7, high=12, shift=0, lengths=(2, 5), reverse=False)
    loop = trainer(tmp_path, ex, SequenceConfig(), ex[:8], model, ids, contract={"family": family},
                   batch_size=8, max_steps=20, lr=0.02, warmup_steps=1, eval_every=20,
                   checkpoint_every=20, bucket_width=8)
    before = teacher_forced_nll(model, ex, ids, 40)
    finish(loop)
    after = teacher_forced_nll(model, ex, ids, 40)
    assert after[0] / after[1] < 0.85 * before[0] / before[1], (before, after)
    # The model file rebuilds the same family and decodes with the cached interface.
    info = ModelInfo(tiny_config(family), 12, 12, ids.pad, 64)
    ModelFile(model.state_dict(), ModelMeta("sig", 20, "last", 20, 0, None, {}), info).save(
        tmp_path / "model.pt")
    loaded = ModelFile.load(tmp_path / "model.pt").build()
    assert type(loaded) is type(model)
    src, mask = pad_batch([[4, 5, 6]], ids.pad)
    assert len(greedy(loaded, src, mask, ids, max_len=6)) == 1


# -- dev decoding and minimum risk training inside the loop (issue 52) -------------------------
def seeded_loop(work: Path, dev: int = 7, **train: object) -> TrainLoop:
    """A tiny run with dropout (a stray draw from the global RNG would move its weights), a dev
    set of ``dev`` words, an evaluation every 2 steps and a ledger state after every step; the
    process's RNGs seeded first, as the train stage seeds them."""
    torch.manual_seed(11)
    random.seed(11)
    np.random.seed(11)
    return trainer(work, examples(12, seed=3, lengths=(1, 5)), SequenceConfig(max_tgt_len=8),
                   examples(dev, seed=9, lengths=(1, 5)),
                   tiny_model(dropout=0.2, seed=7, **SMALL).train(), contract={"task": "s2s"},
                   **{"seed": 5, "batch_size": 4, "bucket_width": 2, "max_steps": 6, "lr": 3e-2,
                      "eval_every": 2, "checkpoint_every": 1, "ledger_every": 1, "keep_last": 2,
                      **train})


#: 3 likelihood steps, then 3 minimum-risk steps at their own rate.
MRT = {"max_steps": 3, "mrt_steps": 3, "mrt_lr": 1e-3}


def test_decoding_on_or_off_leaves_every_ledger_state_and_the_log_the_same(tmp_path: Path) -> None:
    on, off = (trained(seeded_loop(tmp_path / str(words), dev_decode_words=words))
               for words in (300, 0))  # each built, then trained, from the same seeded RNGs
    decoded = [e for e in on.state.history if not math.isnan(e.dev_wer)]
    assert [e.step for e in decoded] == [2, 4, 6]  # every evaluation, and only there
    assert all(math.isnan(e.dev_wer) for e in off.state.history)
    # the outputs the train stage prints: the last evaluation's, one per dev word
    assert off.dev_outputs is None and on.dev_outputs is not None
    assert on.dev_outputs.wer == decoded[-1].dev_wer and len(on.dev_outputs.outputs) == 7
    files = [[p.name for p in ledger_files(run.ckpt.ledger)] for run in (on, off)]
    assert files[0] == files[1] and len(files[0]) == 7
    n = len(StepLog.__dataclass_fields__) - len(DECODE_COLUMNS)  # the cells before decoding's
    for name in files[0]:
        a, b = (Checkpoint.load(run.ckpt.ledger / name).payload for run in (on, off))
        # the history rows as the log's text (NaN equal to NaN), without dev decoding's cells
        a_history, b_history = ([tuple(map(str, r[:n])) for r in p.pop("history")] for p in (a, b))
        assert first_difference(a, b) is None, name  # weights, optimizer, RNGs, data cursor
        assert a_history == b_history


def test_a_killed_run_with_dev_decoding_resumes_to_the_same_log_and_weights(tmp_path: Path) -> None:
    # killed between evaluations 2 and 4; the RNGs it resumes come from the checkpoint, and the
    # logs compared hold the dev decoding's cells
    again = killed_and_resumed(seeded_loop, tmp_path, 3)
    assert all(not math.isnan(e.dev_wer) for e in again.state.history if e.step % 2 == 0)


def test_select_best_dev_wer_exports_the_lowest_wer_step_as_best_pt(tmp_path: Path) -> None:
    run = trained(seeded_loop(tmp_path, max_steps=8, select="best_dev_wer"))
    chosen = best_row(run.state.history, "best_dev_wer")
    assert chosen is not None
    best = run.ckpt.best_weights(chosen.step)
    assert best is not None and best.path.name == "best.pt" and best.checkpoint.step == chosen.step
    assert chosen.dev_wer == min(e.dev_wer for e in run.state.history
                                 if not math.isnan(e.dev_wer))


@pytest.mark.parametrize("search", ["beam", "sample"])
def test_the_mrt_steps_follow_the_likelihood_steps_at_their_own_rate(
        tmp_path: Path, search: str) -> None:
    rows = trained(seeded_loop(tmp_path, 5, mrt_search=search, **MRT)).state.history
    assert [r.step for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r.lr for r in rows] == [3e-2] * 3 + [1e-3] * 3
    # an expected risk is in [0, 1] per source (edit risk of these short words stays <= 1
    # with the reference among the candidates)
    assert all(0 <= r.loss <= 2 for r in rows[3:]) and all(math.isfinite(r.loss) for r in rows)
    assert not math.isnan(rows[-1].dev_nll)  # the last step (6) evaluates, not step 3


def test_an_mrt_step_divides_its_risk_by_its_sources_and_samples_from_the_loops_generator(
        tmp_path: Path) -> None:
    # dropout-free (dropout would draw from the global RNG); linear scheduled sampling with
    # k = 4 in the likelihood steps: 0, 1/4, 1/2, and none in the minimum-risk steps
    loop = plain_loop(tmp_path, examples(8), mrt_search="sample", ss_schedule="linear",
                      ss_k=4.0, ss_cap=1.0, **MRT)
    risks, risk = [], loop.feed.mrt_loss

    def recorded(model: nn.Module, batch: Batch, gen: torch.Generator) -> Any:
        out = risk(model, batch, gen)
        risks.append(float(out.total.detach()) / loop.feed.sources(batch))
        return out
    loop.feed.mrt_loss = recorded  # type: ignore[method-assign]
    likelihood = loop.train_steps(3)
    global_before, own_before = torch.get_rng_state(), loop.gen.get_state()
    rows = loop.train_steps(3)
    assert [r.ss_prob for r in likelihood + rows] == [0.0, 0.25, 0.5, 0.0, 0.0, 0.0]
    assert [r.loss for r in rows] == pytest.approx(risks, rel=1e-6) and len(risks) == 3
    assert torch.equal(torch.get_rng_state(), global_before)
    assert not torch.equal(loop.gen.get_state(), own_before)


def test_a_killed_mrt_run_resumes_to_the_same_weights_and_log(tmp_path: Path) -> None:
    # killed after step 4, inside the MRT phase: its sampling generator is checkpointed
    killed_and_resumed(lambda work: seeded_loop(work, 5, mrt_search="sample", **MRT), tmp_path, 4)


# -- on a CUDA device (issue 16) ---------------------------------------------------------------
def on_gpu(test: Callable[..., None]) -> Callable[..., None]:
    """Marked cuda (what benchmarks/gpu.py selects) and skipped where no GPU is visible."""
    return pytest.mark.cuda(pytest.mark.skipif(not torch.cuda.is_available(),
                                               reason="needs a CUDA GPU")(test))


GPU_MODEL = ModelConfig(transformer=TransformerConfig(d_model=32, n_heads=2, enc_layers=1,
                                                      dec_layers=1, d_ff=64, dropout=0.1))


def cuda_loop(tmp: Path, amp: str = "none", max_steps: int = 6,
              schedule: str = "cosine", **train: Any) -> TrainLoop:
    device = resolve_device("cuda")
    set_determinism(7, 1, device)
    cfg = TrainConfig(batch_size=8, max_steps=max_steps, warmup_steps=2, eval_every=100,
                      checkpoint_every=3, threads=1, amp=amp, device="cuda",
                      schedule=schedule, **train)  # type: ignore[arg-type]
    model = build_model(GPU_MODEL, 12, 12, 0, 16).to(device)
    data = examples(64, seed=3, high=12, shift=0), examples(8, seed=3, high=12, shift=0)
    feed = Seq2SeqFeed(data, IDS, SequenceConfig(), cfg, device)
    return TrainLoop(model, cfg, feed, CheckpointDir(tmp, 3), {"t": 1}, 32)


@on_gpu
def test_model_batches_and_optimizer_state_live_on_the_configured_device(tmp_path: Path) -> None:
    run = cuda_loop(tmp_path)
    run.resume()
    batch = run.feed.draw()
    assert batch.src.is_cuda and batch.tf.labels.is_cuda
    # counted on the host before the move (issue 53): reading them waits for no copy
    assert batch.counted == (int(batch.tf.mask.sum()), int(batch.tf.mask.any(1).sum()))
    run.train_step()
    assert all(p.is_cuda for p in run.model.parameters())
    assert all(t.is_cuda for s in run.opt.state.values() for k, t in s.items()
               if torch.is_tensor(t) and k != "step")


@on_gpu
def test_fp16_autocast_trains_through_the_grad_scaler_and_skips_non_finite_steps(
        tmp_path: Path) -> None:
    run = cuda_loop(tmp_path, amp="fp16")
    run.resume()
    for _ in range(3):
        row = run.train_step()
    assert torch.isfinite(torch.tensor(row.loss)) and run.scaler.is_enabled()
    before = params_of(run.model)
    run.scaler.update(2.0**40)  # the scaled fp16 backward overflows: the step is skipped
    row = run.train_step()
    assert row.skipped == 1 and run.scaler.get_scale() == 2.0**39  # skipped, scale halved
    assert all(torch.equal(a, b) for a, b in zip(before, run.model.parameters()))


@on_gpu
def test_continuing_a_finished_run_on_one_gpu_equals_the_straight_run(tmp_path: Path) -> None:
    # issue 53: constant schedule (cosine depends on max_steps); the first run's closing
    # evaluation at step 3 leaves the history when it is continued (docs/training.md)
    straight = trained(cuda_loop(tmp_path / "a", schedule="constant"))
    trained(cuda_loop(tmp_path / "b", max_steps=3, schedule="constant"))
    second = cuda_loop(tmp_path / "b", schedule="constant")
    assert second.resume() == "ckpt-00000003.pt"
    assert_same_run(straight, finish(second))


@on_gpu
def test_a_gpu_run_steps_with_the_fused_optimizer_and_one_read_back_a_window(
        tmp_path: Path) -> None:
    # issue 53: auto is torch's fused Adam on CUDA; reading the device back once per window
    # (log_every) gives the log and the weights of reading it after every step
    runs = []
    for window in (1, 50):
        run = cuda_loop(tmp_path / str(window))
        run.sync_every = window
        runs.append(trained(run))
    assert runs[0].fused and runs[0].opt.defaults["fused"]
    assert_same_run(runs[0], runs[1])


def steps_under_sync_check(run: TrainLoop, n: int) -> list[StepLog]:
    """``n`` steps of ``run`` under CUDA's sync check (any copy back to the host or stream
    wait raises), then read back."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = [run._step() for _ in range(n)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return run._settle(pending)


@on_gpu
@pytest.mark.parametrize("amp", ("none", "bf16"))
def test_a_gpu_step_makes_no_call_that_waits_for_the_gpu(tmp_path: Path, amp: str) -> None:
    # issue 53: CUDA's own sync check, the GPU twin of the CPU's ReadBacks test: any copy
    # back to the host or stream wait inside a step raises
    run = cuda_loop(tmp_path, amp)
    run.train_step()  # Adam's state is created at its first step
    assert [e.step for e in steps_under_sync_check(run, 3)] == [2, 3, 4]


# -- the step as CUDA graphs (issue 53; seqcore/training/graphs.py) ---------------------------
def graphed_loop(work: Path, **train: object) -> TrainLoop:
    """6 steps of the graphed step, run eagerly on the CPU (capture needs CUDA), with the fused
    Adam it needs, on pairs of 1 to 14 tokens: padded to 8 or 16 positions, so a run meets
    several shapes."""
    return plain_loop(work, examples(40, seed=3, lengths=(1, 14)), **{
        "max_steps": 6, "cuda_graphs": "on", **KERNELS["fused"], **train})


def test_a_graphed_run_trains_as_the_eager_run_but_for_rounding(tmp_path: Path) -> None:
    # padding to multiples of 8 and the optimiser's tensor learning rate round differently
    # (a training-contract key); nothing else differs: the same losses, norms and tokens
    eager, graphed = (finish(graphed_loop(tmp_path / m, cuda_graphs=m)) for m in ("off", "on"))
    assert graphed.graphs is not None and len(graphed.graphs.shapes) > 1
    for field_ in ("loss", "grad_norm"):
        assert [getattr(e, field_) for e in graphed.state.history] == pytest.approx(
            [getattr(e, field_) for e in eager.state.history], rel=1e-5)
    assert [(e.step, e.epoch, e.lr, e.tokens, e.skipped, e.ss_prob)
            for e in graphed.state.history] == [(e.step, e.epoch, e.lr, e.tokens, e.skipped,
                                                 e.ss_prob) for e in eager.state.history]
    assert eager.graphs is None and isinstance(graphed.opt.param_groups[0]["lr"], torch.Tensor)
    # the known answers beside the relation: the constant rate and the last step's tokens
    assert float(graphed.graphs.lr) == np.float32(1e-2)
    assert int(graphed.graphs.denominator) == graphed.state.history[-1].tokens


def test_a_graphed_bf16_run_autocasts_its_step_as_the_eager_bf16_run(tmp_path: Path) -> None:
    # the graphed step's own autocast context (without the weights' cast cache, which a CUDA
    # capture cannot keep): bf16 as the eager step's, not fp32
    eager, graphed, fp32 = (finish(graphed_loop(tmp_path / name, cuda_graphs=graphs, amp=amp))
                            for name, graphs, amp in (("e", "off", "bf16"), ("g", "on", "bf16"),
                                                      ("f", "on", "none")))
    losses = [[e.loss for e in run.state.history] for run in (eager, graphed, fp32)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert losses[1][0] != pytest.approx(losses[2][0], rel=1e-5)


def test_a_graphed_step_keeps_nothing_of_an_earlier_micro_batch_in_its_buffers(
        tmp_path: Path) -> None:
    # the same run with new buffers (and, on CUDA, new graphs) at every step: the same bytes
    reused = finish(graphed_loop(tmp_path / "a", accum_steps=2))
    fresh = graphed_loop(tmp_path / "b", accum_steps=2)
    fresh.on_step = lambda step: setattr(fresh, "graphs", None)
    assert_same_run(reused, finish(fresh))


def test_a_killed_graphed_run_resumes_to_the_straight_runs_log_and_weights(tmp_path: Path) -> None:
    # the graphs are built again after a resume, from the checkpoint's optimiser state
    again = killed_and_resumed(lambda work: graphed_loop(work, checkpoint_every=2), tmp_path, 4)
    saved = Checkpoint.load(again.ckpt.root / "ckpt-00000006.pt").payload["optimizer"]
    assert isinstance(saved["param_groups"][0]["lr"], float)  # not the device scalar


def test_minimum_risk_steps_after_graphed_steps_run_eagerly(tmp_path: Path) -> None:
    run = finish(graphed_loop(tmp_path, max_steps=3, mrt_steps=2, mrt_candidates=2))
    assert run.graphs is None and isinstance(run.opt.param_groups[0]["lr"], float)
    assert [e.step for e in run.state.history] == [1, 2, 3, 4, 5]
    assert all(math.isfinite(e.loss) for e in run.state.history)


@on_gpu
@pytest.mark.parametrize("amp", ("none", "bf16"))
def test_a_captured_step_equals_the_same_step_run_eagerly_on_the_gpu(
        tmp_path: Path, amp: str) -> None:
    # the warm-up, the capture and the replays run the kernels of the eager graphed step
    runs = []
    for capture in (True, False):
        run = cuda_loop(tmp_path / str(capture), amp, max_steps=8, cuda_graphs="on")
        run.resume()
        run._step_graphs().capture = capture
        runs.append(finish(run))
    captured, eager = runs
    assert all(s.graph.graph is not None for s in captured.graphs.shapes.values()
               if s.graph.runs > 1)
    assert_same_run(captured, eager)


@on_gpu
def test_a_captured_step_makes_no_call_that_waits_for_the_gpu(tmp_path: Path) -> None:
    run = cuda_loop(tmp_path, cuda_graphs="on")
    batch = run.feed.draw()
    run.feed.draw = lambda: batch  # type: ignore[method-assign] (one shape: captured at step 2)
    run.train_steps(2)
    assert [e.step for e in steps_under_sync_check(run, 3)] == [3, 4, 5]
    assert next(iter(run.graphs.shapes.values())).graph.graph is not None


@on_gpu
def test_a_killed_captured_gpu_run_resumes_to_the_straight_runs_bytes(tmp_path: Path) -> None:
    killed_and_resumed(lambda work: cuda_loop(work, cuda_graphs="on"), tmp_path, 3)


@on_gpu
def test_a_cuda_trained_model_decodes_on_the_cpu(tmp_path: Path) -> None:
    run = trained(cuda_loop(tmp_path))
    meta = ModelMeta("sig", 3, "last", 3, 0, None, {"train.device_kind": "cuda"})
    ModelFile(run.model.state_dict(), meta, ModelInfo(GPU_MODEL, 12, 12, 0, 16)).save(
        tmp_path / "model.pt")
    saved = ModelFile.load(tmp_path / "model.pt")
    model = saved.build()
    assert all(p.device.type == "cpu" for p in model.parameters())
    rows = decode_examples(model, examples(16, seed=3, high=12, shift=0),
                           make_decoder(DecodeConfig(max_len=12), IDS), IDS, IdPieces(), 8)
    assert len(rows) == 16 and all(0 <= t < 12 for r in rows for t in r.tokens)
    assert saved.meta == meta


def clipped_grads(tmp_path: Path, clip_norm: float) -> list[torch.Tensor]:
    """The gradients one real training step leaves: 2 micro-batches, an enabled grad scaler
    (fp16's, at 2**12), the given clip threshold."""
    loop = trainer(tmp_path / f"ck{clip_norm}", examples(8, seed=7), SequenceConfig(),
                   accum_steps=2, clip_norm=clip_norm)
    loop.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    loop.train_step()
    return [p.grad for p in loop.model.parameters()]


def test_derived_params_state_where_clipping_happens(tmp_path: Path) -> None:
    # what the MLflow record states (seqcore.signature.derived_params) is what the step does
    cfg = load_config(REPO / "params.yaml")
    derived = derived_params(cfg)
    assert derived["derived.clip.where"] == "after unscale, after all micro-batches of the step"
    assert derived["derived.clip.norm"] == "global L2 over all parameters"
    assert derived_params(dataclasses.replace(
        cfg, train=dataclasses.replace(cfg.train, clip_norm=0.0)))["derived.clip.norm"] == "off"
    # What the record states is what the step does: the clipped gradient is the unscaled
    # gradient of both micro-batches together, scaled to the threshold (clipping each
    # micro-batch, or the scaled gradient, gives another direction or norm).
    full = clipped_grads(tmp_path, 0.0)
    norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in full])))
    assert norm > 0.01
    for got, want in zip(clipped_grads(tmp_path, 0.01), full, strict=True):
        torch.testing.assert_close(got, want * (0.01 / norm), rtol=1e-3, atol=1e-9)
