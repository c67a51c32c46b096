"""Rules checked where they take effect: in the training loop's real feed and step, in the
passes behind reported numbers, and in the decoder the decode stage builds from params.

The unit tests of ``sequence_loss``, the clipping order and the search settings guard each
rule where it is defined; these guard the wiring (issue 18), each seen red when it is broken.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from seqcore.config import DecodeConfig, SequenceConfig, TrainConfig
from seqcore.contract import IGNORE_INDEX, SpecialIds, pad_batch
from seqcore.data.batching import BucketSampler
from seqcore.data.examples import Example
from seqcore.decoding.beam import BeamSettings, beam_search
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.sampling import SamplingSettings, sample
from seqcore.decoding.search import Masking
from seqcore.losses import LossNorm
from seqcore.metrics.teacher import teacher_forced_stats
from seqcore.models.transformer import Transformer
from seqcore.sequences import Batch, make_batch
from seqcore.tasks.lm.feed import LMFeed
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import StepLog, TrainLoop
from tests.factories import IDS, examples, tiny_lm, tiny_model

#: Special ids at the top of the vocabulary: a call site that hard-codes 0..3 gets them wrong.
HIGH_IDS = SpecialIds(pad=8, unk=9, bos=10, eos=11)
V = 12
#: One layer each way and 16 positions: the smallest Transformer these rules need.
SMALL = {"enc_layers": 1, "dec_layers": 1, "max_len": 16}


def trainer(tmp_path: Path, data: list[Example], seq: SequenceConfig, dev: list[Example] = (),
            model: nn.Module | None = None, ids: SpecialIds = IDS, **train: object) -> TrainLoop:
    cfg = TrainConfig(**{"amp": "none", "batch_size": 2, "bucket_width": 100, "schedule": "constant",
                         "lr": 1e-3, "warmup_steps": 0, "threads": 1, "clip_norm": 0.0, **train})
    return TrainLoop(model or tiny_model(pad=ids.pad, **SMALL).train(), cfg,
                     Seq2SeqFeed((data, list(dev)), ids, seq, cfg),
                     CheckpointDir(tmp_path / "ck", 2), {}, 16)


def drawn_batches(data: list[Example], k: int, ids: SpecialIds = IDS) -> list[Batch]:
    """The first k micro-batches the feed draws (its sampler, seeded as in TrainConfig)."""
    sampler = BucketSampler([len(ex.tgt) for ex in data], 2, 100, TrainConfig().seed)
    return [make_batch([data[i] for i in sampler.next()], ids) for _ in range(k)]


def smoothed_token_losses(
    logp: torch.Tensor, labels: torch.Tensor, eps: float, ids: SpecialIds = IDS,
) -> list[torch.Tensor]:
    """Per sequence, the token losses written out: q(k) = (1 - eps)[k = y] + eps / K over the
    K ids other than PAD and BOS, q(PAD) = q(BOS) = 0; token loss -sum_k q(k) log p(k).

    Args:
        logp: (B, T, V) log-probabilities; labels: (B, T), IGNORE_INDEX where unlabelled.
    """
    q = torch.full((logp.shape[-1],), eps / (logp.shape[-1] - 2))
    q[[ids.pad, ids.bos]] = 0.0
    out = []
    for row in range(labels.shape[0]):
        losses = []
        for t in range(labels.shape[1]):
            y = int(labels[row, t])
            if y != IGNORE_INDEX:
                target = q.clone()
                target[y] += 1 - eps
                losses.append(-(target * logp[row, t]).sum())
        if losses:
            out.append(torch.stack(losses))
    return out


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
    tmp_path: Path, norm: LossNorm, ids: SpecialIds,
) -> None:
    low = 4 if ids == IDS else 0
    data = examples(8, seed=7, low=low, high=low + 6)
    tr = trainer(tmp_path, data, SequenceConfig(loss_norm=norm, label_smoothing=0.2),
                 ids=ids, accum_steps=2)
    reference = copy.deepcopy(tr.model)
    batches = drawn_batches(data, 2, ids)
    assert batches[0].tokens != batches[1].tokens  # unequal micro-batches: the mean matters
    expected = hand_loss(reference, batches, 0.2, norm, ids)
    expected.backward()
    row = tr.train_step()
    assert row.loss == pytest.approx(float(expected.detach()), rel=1e-5)  # the logged loss
    for p, r in zip(tr.model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-7)  # what is minimised


def test_lm_feed_minimises_the_smoothed_loss_without_pad_or_bos_mass() -> None:
    model = tiny_lm("gru", vocab=10)
    docs = [[4, 5, 6, 7, 8, 9] * 3, [9, 8, 7, 6, 5, 4] * 2]
    feed = LMFeed((docs, docs), IDS, "token-mean", 0.2, 2, 4, 0)
    seg = feed.draw()
    got = feed.loss(model, seg, 0.0, torch.Generator())
    logits, _ = model(seg.inputs, model.initial_state(2))  # (B, K, V), first segment
    expected = torch.cat(smoothed_token_losses(torch.log_softmax(logits, -1), seg.labels, 0.2))
    assert float(got.total.detach()) == pytest.approx(float(expected.sum().detach()), rel=1e-5)


def test_clip_comes_after_unscale_with_an_enabled_grad_scaler(tmp_path: Path) -> None:
    data = examples(8, seed=7, high=10)
    tr = trainer(tmp_path, data, SequenceConfig(label_smoothing=0.0), clip_norm=0.01)
    tr.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)  # fp16's scaler, enabled
    assert tr.scaler.is_enabled()
    reference = copy.deepcopy(tr.model)
    hand_loss(reference, drawn_batches(data, 1), 0.0, "token-mean").backward()
    ref = [r.grad for r in reference.parameters()]
    ref_norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in ref])))
    assert ref_norm > 0.01
    row = tr.train_step()
    # The logged pre-clip norm is the unscaled one, and clipping scaled the unscaled
    # gradient to the threshold (clipping first would clip the 4096x gradient instead).
    assert row.grad_norm == pytest.approx(ref_norm, rel=1e-4)
    for p, r in zip(tr.model.parameters(), ref, strict=True):
        torch.testing.assert_close(p.grad, r * (0.01 / ref_norm), rtol=1e-3, atol=1e-9)


# -- eval mode in every no-gradient pass behind a reported number ------------------------------


def dropout_modes(model: nn.Module) -> list[bool]:
    """Record ``training`` of every dropout module at each call (forward pre-hooks)."""
    seen: list[bool] = []
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.register_forward_pre_hook(lambda mod, args: seen.append(mod.training))
    return seen


def eval_nll(model: nn.Module, data: list[Example]) -> float:
    m = copy.deepcopy(model).eval()
    b = make_batch(data, IDS)
    with torch.no_grad():
        logp = torch.log_softmax(m(b.src, b.src_mask, b.tf.inputs), -1)
    valid = b.tf.labels != IGNORE_INDEX
    return float(-logp.gather(-1, b.tf.labels.clamp(min=0)[..., None])[..., 0][valid].sum())


def test_dev_nll_of_the_training_loop_runs_with_dropout_off(tmp_path: Path) -> None:
    dev = examples(5, seed=3, high=10)
    tr = trainer(tmp_path, examples(8, high=10), SequenceConfig(), dev=dev,
                 model=tiny_model(dropout=0.5, **SMALL).train(),
                 max_steps=1, eval_every=1, checkpoint_every=1)
    rows: list[StepLog] = []
    seen = dropout_modes(tr.model)
    tr.run(lambda entry, tokens_per_s: rows.append(entry))
    assert tr.model.training  # training continues in train mode after the dev pass
    assert seen and seen[-1] is False  # the last forward was the dev pass
    total, count = tr.feed.dev_nll(tr.model)
    assert rows[0].dev_nll == pytest.approx(eval_nll(tr.model, dev) / count, rel=1e-5)
    assert total == pytest.approx(eval_nll(tr.model, dev), rel=1e-5)


def test_evaluation_statistics_run_with_dropout_off() -> None:
    model, data = tiny_model(dropout=0.5, **SMALL).train(), examples(6, seed=4, high=10)
    seen = dropout_modes(model)
    stats = teacher_forced_stats(model, data, IDS, 4)
    assert seen and not any(seen)
    assert model.training  # the caller's mode is restored
    assert sum(s.nll for s in stats.values()) == pytest.approx(eval_nll(model, data), rel=1e-5)


def test_lm_dev_nll_runs_with_dropout_off() -> None:
    model = tiny_lm("gru", vocab=10, layers=2, dropout=0.5).train()
    docs = [[4, 5, 6, 7, 8, 9] * 3, [9, 8, 7, 6, 5, 4] * 2]
    feed = LMFeed((docs, docs), IDS, "token-mean", 0.0, 2, 4, 0)
    seen = dropout_modes(model)
    first = feed.dev_nll(model)
    assert seen and not any(seen)
    assert model.training
    assert feed.dev_nll(model) == first  # dropout off: the same number every time


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_rnn_encoder_gives_an_empty_source_no_state(cell: str) -> None:
    # Packing needs length >= 1, so an empty source runs one PAD step inside the encoder;
    # the rule (PAD holds no state) must still hold where the decoder reads the states.
    model = tiny_model(cell, embed_dim=8, hidden=8, enc_layers=1, dec_layers=1)
    src, mask = pad_batch([[], [4, 5, 6]], IDS.pad)
    memory = model.encode(src, mask)
    assert (memory.states[0] == 0).all() and (memory.states[1] != 0).any()


# -- the decoder the decode stage builds -------------------------------------------------------


def decode_inputs() -> tuple[Transformer, torch.Tensor, torch.Tensor, list[Example]]:
    data = examples(6, seed=5, high=10)
    b = make_batch(data, IDS)
    return tiny_model(**SMALL), b.src, b.src_mask, data


def test_make_decoder_holds_every_beam_setting_of_the_decode_section() -> None:
    cfg = DecodeConfig(strategy="beam", beam_size=3, n_best=2, length_norm="gnmt", alpha=1.5,
                       min_len=1, no_repeat_ngram=2, banned_tokens=(5,), max_len=9)
    dec = make_decoder(cfg, IDS)
    assert dec.strategy == "beam"
    assert dec.beam == BeamSettings(beam_size=3, n_best=2, length_norm="gnmt", alpha=1.5)
    assert dec.masking == Masking(min_len=1, no_repeat_ngram=2, banned=(0, 2, 5))
    model, src, mask, data = decode_inputs()
    with torch.inference_mode():
        got = dec(model, src, mask, data)
        want = beam_search(model, src, mask, IDS, 9, BeamSettings(3, 2, "gnmt", 1.5),
                           Masking(1, 2, (0, 2, 5)), True)
    assert got == want


def test_make_decoder_holds_every_sampling_setting_of_the_decode_section() -> None:
    cfg = DecodeConfig(strategy="sample", temperature=0.7, top_k=4, top_p=0.9, seed=11,
                       max_len=9, max_len_ratio=0.5)
    dec = make_decoder(cfg, IDS)
    assert dec.strategy == "sample"
    assert dec.sampling == SamplingSettings(temperature=0.7, top_k=4, top_p=0.9, seed=11)
    assert [dec.cap(n) for n in (1, 4, 9)] == [6, 7, 9]  # min(9, ceil(0.5 n) + 5)
    model, src, mask, data = decode_inputs()
    caps = [min(9, math.ceil(0.5 * len(ex.src)) + 5) for ex in data]
    with torch.inference_mode():
        got = dec(model, src, mask, data)
        want = sample(model, src, mask, IDS, [ex.id for ex in data], caps,
                      SamplingSettings(0.7, 4, 0.9, 11), Masking(banned=(0, 2)), True)
    assert got == [[h] for h in want]
