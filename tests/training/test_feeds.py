"""The seq2seq feed (seqcore/training/feeds.py): token choice, scheduled sampling's passes,
cursors, devices, ranks and the dev NLL."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.losses import sequence_loss
from seqcore.training.distributed import World
from seqcore.training.feeds import Seq2SeqFeed, choose_tokens
from tests.factories import IDS, Oracle, ReadBacks, examples, tiny_model

NOLS = SequenceConfig(label_smoothing=0.0)
V = 12
HOT = torch.tensor([[4, 9, 5, 11], [7, 6, 10, 3]])  # (B, T): a different token at each position


# -- scheduled sampling: the choice and the draw ---------------------------------------------
def bumped_logits(hot: torch.Tensor, bump: float) -> torch.Tensor:
    """(B, T, V) logits, zero except ``bump`` at the token ``hot`` (B, T) names."""
    return functional.one_hot(hot, V).float() * bump


def test_argmax_choice_takes_the_most_likely_token_even_when_it_is_barely_ahead() -> None:
    got = choose_tokens(bumped_logits(HOT, 0.01), "argmax", torch.Generator().manual_seed(0))
    assert torch.equal(got, HOT)


def test_sampled_choice_follows_each_positions_softmax_over_the_vocabulary() -> None:
    # nearly one-hot rows: a sample is the hot token (a softmax over another axis spreads it)
    got = choose_tokens(bumped_logits(HOT, 40.0), "sample", torch.Generator().manual_seed(0))
    assert got.shape == HOT.shape and torch.equal(got, HOT)


def uniform_draws(gen: torch.Generator, shape: tuple[int, int]) -> torch.Tensor:
    """What the sampled choice draws over uniform logits: one uniform u per position, in
    row-major order, picks token floor(u * V) (the inverse CDF of 1/V each)."""
    return (torch.rand(shape[0] * shape[1], generator=gen) * V).floor().long().view(shape)


def test_sampled_choice_draws_from_the_given_generator_and_only_from_it() -> None:
    # uniform rows: the inverse CDF of the seeded generator's uniforms, whatever the global
    # RNG holds (rule 7: the generator's state is checkpointed)
    logits = torch.zeros(2, 4, V)
    expected = uniform_draws(torch.Generator().manual_seed(3), (2, 4))
    assert len(expected.unique()) > 1
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        gen = torch.Generator().manual_seed(3)
        assert torch.equal(choose_tokens(logits, "sample", gen), expected)
    assert not torch.equal(gen.get_state(), torch.Generator().manual_seed(3).get_state())


def test_sampled_choice_reads_nothing_back_from_the_device() -> None:
    # issue 53: the uniforms go to the logits, not the logits to the CPU generator
    logits = bumped_logits(HOT, 1.0)
    with ReadBacks() as reads:
        choose_tokens(logits, "sample", torch.Generator().manual_seed(0))
    assert reads.found == []


def ss_feed(choice: str) -> Seq2SeqFeed:
    return Seq2SeqFeed((examples(4), []), IDS, NOLS, TrainConfig(batch_size=4, ss_choice=choice))


def eligible(batch_mask: torch.Tensor) -> torch.Tensor:
    out = batch_mask.clone()
    out[:, 0] = False  # BOS is never replaced
    return out


def mixed_inputs(feed: Seq2SeqFeed, batch, bump: float, p: float, seed: int) -> list[torch.Tensor]:
    """The second pass's decoder inputs under two global seeds (which must play no part),
    the training generator seeded ``seed``."""
    seen = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        model = Oracle(V, bump)
        feed.loss(model, batch, p, torch.Generator().manual_seed(seed))
        seen.append(model.calls[1])
    return seen


def test_scheduled_sampling_off_runs_one_pass_and_draws_nothing_from_the_generator() -> None:
    feed = ss_feed("sample")
    batch, model, gen = feed.draw(), Oracle(V, 0.01), torch.Generator().manual_seed(4)
    before = gen.get_state()
    feed.loss(model, batch, 0.0, gen)
    assert len(model.calls) == 1 and torch.equal(model.calls[0], batch.tf.inputs)
    assert torch.equal(gen.get_state(), before)


def test_scheduled_sampling_replaces_inputs_where_the_generators_uniform_draw_is_below_p() -> None:
    # argmax choice (token 7, barely ahead): input t+1 is 7 where the training generator's
    # rand(B, T) < p, BOS and PAD excepted
    feed = ss_feed("argmax")
    batch = feed.draw()
    u = torch.rand(batch.tf.inputs.shape, generator=torch.Generator().manual_seed(11))
    expected = torch.where(eligible(batch.tf.mask) & (u < 0.5), 7, batch.tf.inputs)
    assert not torch.equal(expected, batch.tf.inputs)
    for seen in mixed_inputs(feed, batch, 0.01, 0.5, 11):
        assert torch.equal(seen, expected)


def test_scheduled_sampling_feeds_first_pass_predictions_and_keeps_true_labels() -> None:
    feed = ss_feed("argmax")
    batch, model = feed.draw(), Oracle(V, 5.0)
    out = feed.loss(model, batch, 1.0, torch.Generator().manual_seed(0))
    (first, second), (first_grad, second_grad) = model.calls, model.grad_modes
    assert torch.equal(first, batch.tf.inputs) and not first_grad and second_grad
    assert torch.equal(second, torch.where(eligible(batch.tf.mask), torch.full_like(second, 7),
                                           batch.tf.inputs))
    ref = sequence_loss(model.bias.expand(*batch.tf.labels.shape, V), batch.tf.labels,
                        "token-mean", 0.0, (0, 2))
    assert float(out.total.detach()) == pytest.approx(float(ref.total.detach()))
    assert out.tokens == batch.tokens


def test_scheduled_sampling_samples_the_first_pass_from_the_training_generator() -> None:
    # uniform logits, p = 1: each eligible input is the previous position's sampled draw
    feed = ss_feed("sample")
    batch = feed.draw()
    draws = uniform_draws(torch.Generator().manual_seed(12), tuple(batch.tf.inputs.shape))
    shifted = torch.cat([batch.tf.inputs[:, :1], draws[:, :-1]], dim=1)
    expected = torch.where(eligible(batch.tf.mask), shifted, batch.tf.inputs)
    for seen in mixed_inputs(feed, batch, 0.0, 1.0, 12):
        assert torch.equal(seen, expected)


# -- the seq2seq feed ------------------------------------------------------------------------
def test_no_dev_examples_give_zero_nll_over_zero_tokens() -> None:
    assert ss_feed("argmax").dev_nll(tiny_model()) == (0.0, 0)


def test_a_cursor_saved_under_another_seed_is_refused_naming_both_seeds() -> None:
    feed = Seq2SeqFeed((examples(4), []), IDS, NOLS, TrainConfig(batch_size=2, seed=5))
    with pytest.raises(ValueError, match=r"^sampler seed 7 != 5$"):
        feed.load_state_dict({"epoch": 0, "cursor": 1, "seed": 7})


def test_a_feed_for_another_device_draws_its_batches_there() -> None:
    b = Seq2SeqFeed((examples(4), []), IDS, NOLS, TrainConfig(batch_size=2),
                    device=torch.device("meta")).draw()
    assert {t.device.type for t in (b.src, b.src_mask, b.tf.inputs, b.tf.labels, b.tf.mask)} \
        == {"meta"}


def test_each_rank_draws_its_shard_of_the_global_batch_stream() -> None:
    # rank r of 2 draws the global batches 2k + r of the single-process stream
    data = examples(12, seed=3)
    cfg = TrainConfig(batch_size=2, bucket_width=2, seed=5)
    single = Seq2SeqFeed((data, []), IDS, NOLS, cfg)
    stream = [single.draw() for _ in range(6)]
    for rank in (0, 1):
        feed = Seq2SeqFeed((data, []), IDS, NOLS, cfg, world=World(rank=rank, size=2))
        for k in range(3):
            assert torch.equal(feed.draw().src, stream[2 * k + rank].src)
