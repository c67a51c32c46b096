"""Rules of one optimisation step: AMP, skipping, accumulation, clipping, schedules, scheduled
sampling and bucketing."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.data.batching import BucketSampler, SamplerState
from seqcore.data.examples import Example
from seqcore.losses import sequence_loss
from seqcore.sequences import make_batch
from seqcore.training.scheduled_sampling import mix_model_tokens
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import TooManySkippedSteps, TrainLoop, autocast_context
from seqcore.training.schedule import learning_rate, scheduled_sampling_probability
from tests.factories import IDS, examples, tiny_model

NOLS = SequenceConfig(label_smoothing=0.0)


def trainer(tmp_path: Path, data: list[Example], **train: object) -> TrainLoop:
    cfg = TrainConfig(**{"amp": "none", "batch_size": 2, "bucket_width": 100, "schedule": "constant",
                         "lr": 1e-3, "warmup_steps": 0, "threads": 1, **train})
    model = tiny_model(enc_layers=1, dec_layers=1, max_len=16).train()
    return TrainLoop(model, cfg, Seq2SeqFeed((data, []), IDS, NOLS, cfg),
                     CheckpointDir(tmp_path / "ck", 2), {}, 16)


def params_of(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# -- mixed precision and skipped steps -------------------------------------------------------


def test_bf16_autocast_on_cpu_runs_in_bf16_and_steps(tmp_path: Path) -> None:
    tr = trainer(tmp_path, examples(8), amp="bf16")
    b = make_batch(examples(2), IDS)
    with autocast_context("bf16", torch.device("cpu")):
        assert tr.model(b.src, b.src_mask, b.tf.inputs).dtype == torch.bfloat16
    before = params_of(tr.model)
    row = tr.train_step()
    assert math.isfinite(row.loss) and math.isfinite(row.grad_norm) and tr.state.skipped == 0
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.model.parameters()))


def test_fp16_autocast_is_refused_on_cpu() -> None:
    with pytest.raises(ValueError, match="fp16 needs CUDA"):
        autocast_context("fp16", torch.device("cpu"))


def test_non_finite_gradient_skips_the_step_counts_it_and_stops_after_the_limit(
    tmp_path: Path,
) -> None:
    tr = trainer(tmp_path, examples(8), max_consecutive_skips=3)
    with torch.no_grad():
        next(tr.model.parameters()).fill_(math.nan)  # every gradient becomes NaN
    before = params_of(tr.model)
    for step in (1, 2):
        row = tr.train_step()
        assert math.isnan(row.grad_norm) and tr.state.skipped == step == row.skipped
    assert all(torch.equal(a.nan_to_num(), p.nan_to_num()) for a, p in  # no step was taken
               zip(before, tr.model.parameters()))
    with pytest.raises(TooManySkippedSteps, match="3 non-finite gradient steps in a row"):
        tr.train_step()


# -- accumulation and clipping -----------------------------------------------------------------


def big_batch_grads(model: nn.Module, data: list[Example]) -> list[torch.Tensor]:
    """Reference: gradient of the token-mean loss of all examples in one padded batch."""
    model = copy.deepcopy(model)
    model.zero_grad()
    b = make_batch(data, IDS)
    out = sequence_loss(model(b.src, b.src_mask, b.tf.inputs), b.tf.labels, "token-mean", 0.0,
                        (IDS.pad, IDS.bos))
    (out.total / out.tokens).backward()
    return [p.grad.clone() for p in model.parameters()]


def first_batches(data: list[Example], k: int) -> list[list[Example]]:
    sampler = BucketSampler([len(ex.tgt) for ex in data], 2, 100, 1234)
    return [[data[i] for i in sampler.next()] for _ in range(k)]


def test_accumulated_micro_batches_give_the_big_batch_gradient_over_all_tokens(
    tmp_path: Path,
) -> None:
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
    means = [big_batch_grads(copy.deepcopy(tr.model), m) for m in micro]
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
    schedule: str, step: int, warmup: int, expected: float,
) -> None:
    assert learning_rate(step, schedule, 0.3, warmup, 10, 4) == pytest.approx(expected, abs=1e-12)


def test_adam_betas_and_eps_come_from_params(tmp_path: Path) -> None:
    assert (TrainConfig().betas, TrainConfig().eps) == ((0.9, 0.98), 1e-9)
    tr = trainer(tmp_path, examples(4), betas=(0.8, 0.9), eps=1e-6)
    group = tr.opt.param_groups[0]
    assert (group["betas"], group["eps"]) == ((0.8, 0.9), 1e-6)


# -- scheduled sampling ------------------------------------------------------------------------


@pytest.mark.parametrize(("schedule", "k", "cap", "step", "expected"), [
    ("off", 10.0, 1.0, 50, 0.0),
    ("linear", 10.0, 1.0, 0, 0.0), ("linear", 10.0, 1.0, 2, 0.2), ("linear", 10.0, 0.25, 5, 0.25),
    ("exponential", 0.9, 1.0, 1, 0.1), ("exponential", 0.9, 1.0, 2, 0.19),
    ("exponential", 0.9, 0.15, 2, 0.15),
    ("inverse_sigmoid", 10.0, 1.0, 0, 1 / 11), ("inverse_sigmoid", 10.0, 1.0, 23.0259, 0.5),
])
def test_scheduled_sampling_probability_follows_bengio_2015_up_to_the_cap(
    schedule: str, k: float, cap: float, step: float, expected: float,
) -> None:
    got = scheduled_sampling_probability(step, schedule, k, cap)  # type: ignore[arg-type]
    assert got == pytest.approx(expected, abs=1e-5)


class ConstantOracle(nn.Module):
    """Predicts token 7 everywhere and records each call's decoder input and grad mode."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(12))
        with torch.no_grad():
            self.bias[7] = 5.0
        self.calls: list[tuple[torch.Tensor, bool]] = []

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor
                ) -> torch.Tensor:
        self.calls.append((tgt_in.clone(), torch.is_grad_enabled()))
        return self.bias.expand(*tgt_in.shape, 12)  # (B, T, V)


def test_scheduled_sampling_feeds_first_pass_predictions_and_keeps_true_labels() -> None:
    data = examples(4)
    feed = Seq2SeqFeed((data, []), IDS, NOLS, TrainConfig(batch_size=4, ss_choice="argmax"))
    batch = feed.draw()
    model = ConstantOracle()
    out = feed.loss(model, batch, 1.0, torch.Generator().manual_seed(0))
    (first, first_grad), (second, second_grad) = model.calls
    assert torch.equal(first, batch.tf.inputs) and not first_grad and second_grad
    eligible = batch.tf.mask.clone()
    eligible[:, 0] = False
    assert torch.equal(second, torch.where(eligible, torch.full_like(second, 7),
                                           batch.tf.inputs))
    ref = sequence_loss(model.bias.expand(*batch.tf.labels.shape, 12), batch.tf.labels,
                        "token-mean", 0.0, (0, 2))
    assert float(out.total.detach()) == pytest.approx(float(ref.total.detach()))
    assert out.tokens == batch.tokens


def test_scheduled_sampling_refuses_predictions_that_carry_gradient() -> None:
    b = make_batch(examples(2), IDS)
    preds = torch.zeros(b.tf.inputs.shape, requires_grad=True)
    with pytest.raises(ValueError, match="detached"):
        mix_model_tokens(b.tf, preds, 0.5, torch.Generator())


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
    data = examples(12, seed=3)
    feed = Seq2SeqFeed((data, []), IDS, NOLS, TrainConfig(batch_size=5, bucket_width=2))
    for _ in range(6):
        b = feed.draw()
        for src, smask, labels in zip(b.src, b.src_mask, b.tf.labels):
            expected = [t + 1 for t in src[smask].tolist()[::-1]] + [IDS.eos]
            assert labels[labels >= 0].tolist() == expected
