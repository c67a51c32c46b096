"""Resume at every boundary equals the uninterrupted run, and the restored state has its
stated value (STYLE rule 16: each relation has a known-answer twin).

The kill follows tests/programs/resume_worker.py: the run stops in ``on_step`` right after
the step's checkpoint, and a run built from fresh objects resumes from the checkpoint folder,
the only channel between the two. Here the stop is an exception in this process instead of a
SIGKILL in a forked one (tests/test_resume.py covers the real signal), so these tests stay
in the fast tier. Boundaries: just before, at and just after an epoch boundary of the bucket
sampler; a skipped step under an enabled GradScaler; the consecutive-skip counter; an LM
stream killed mid-document with its carried state.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.data.batching import SamplerState
from seqcore.tasks.lm.feed import LMFeed
from seqcore.tasks.lm.streams import StreamState
from seqcore.training.checkpoint import CheckpointDir
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import StepLog, TooManySkippedSteps, TrainLoop, TrainState
from tests.factories import (
    IDS,
    S2S_SEED,
    document_nll,
    examples,
    kill_after,
    s2s_loop,
    tiny_lm,
    tiny_model,
)

SEED = S2S_SEED  # train.seed: the sampler's and the streams' shuffles


def finish(loop: TrainLoop) -> TrainState:
    return loop.run(lambda entry, tokens_per_s: None)


def rows(state: TrainState) -> list[list[str]]:
    """The history as text (NaN dev losses and inf norms compare equal as text)."""
    return [[repr(v) for v in entry.row()] for entry in state.history]


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def record_batches(feed: Seq2SeqFeed) -> list[list[int]]:
    """The example indices of every batch the feed draws from now on (appended in order)."""
    drawn: list[list[int]] = []
    draw_next = feed.sampler.next

    def recording() -> list[int]:
        drawn.append(draw_next())
        return drawn[-1]
    feed.sampler.next = recording  # type: ignore[method-assign]
    return drawn


def seeded_epoch(lengths: list[int], batch_size: int, width: int, seed: int,
                 epoch: int) -> list[list[int]]:
    """The sampler's documented rule written out again: one generator seeded with
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
    tmp_path: Path, name: str,
) -> None:
    kill, restored = EPOCH_KILLS[name]
    whole = s2s_loop(tmp_path / "whole", EPOCH_MAX)
    whole_batches = record_batches(whole.feed)  # type: ignore[arg-type]
    finish(whole)

    killed = s2s_loop(tmp_path / "run", EPOCH_MAX)
    kill_after(killed, kill)
    resumed = s2s_loop(tmp_path / "run", EPOCH_MAX)
    assert resumed.resume() == f"ckpt-{kill:08d}.pt"
    assert resumed.state.step == kill
    assert resumed.feed.sampler.state == restored  # type: ignore[attr-defined]
    assert resumed.feed.epoch == restored.epoch
    later = record_batches(resumed.feed)  # type: ignore[arg-type]
    finish(resumed)

    lengths = [len(ex.tgt) for ex in examples(12, seed=3, lengths=(1, 5))]
    stream = [b for e in range(3) for b in seeded_epoch(lengths, 4, 2, SEED, e)]
    assert len(seeded_epoch(lengths, 4, 2, SEED, 0)) == EPOCH_STEPS
    assert whole_batches == stream[:EPOCH_MAX]
    assert later == whole_batches[kill:] == stream[kill:EPOCH_MAX]
    assert [e.epoch for e in resumed.state.history] == [e.epoch for e in whole.state.history]
    assert rows(resumed.state) == rows(whole.state)
    assert same_weights(resumed.model, whole.model)


# -- GradScaler and skipped steps --------------------------------------------------------------


def poison(loop: TrainLoop, steps: set[int]) -> None:
    """Make one parameter's gradient infinite on the given (1-based) steps, so those steps
    are non-finite; the hook reads the loop's step counter, so it survives a resume."""
    param = next(loop.model.parameters())
    param.register_hook(
        lambda g: torch.full_like(g, math.inf) if loop.state.step + 1 in steps else g)


SCALER_MAX = 8


def scaled_loop(work: Path) -> TrainLoop:
    """The tiny run with an enabled GradScaler: init scale 1024, x2 after 3 good steps in a row,
    x0.5 after a non-finite step; step 3 is poisoned. fp16 autocast needs CUDA
    (``autocast_context``), so the run computes in fp32 and only the scaler is fp16's: this
    replaces the loop's disabled scaler as ``amp: fp16`` would have built it enabled."""
    loop = s2s_loop(work, SCALER_MAX)
    loop.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3,
                                       enabled=True)
    poison(loop, {3})
    return loop


#: (scale, growth tracker, skipped, consecutive skips) after each step, by hand: steps 1-2 are
#: good (tracker 1, 2); step 3 is skipped (scale halves to 512, tracker back to 0); steps 4-5
#: are good (1, 2); step 6 is the third good step in a row (scale doubles to 1024, tracker 0);
#: steps 7-8 are good (1, 2).
SCALER_AFTER = {3: (512.0, 0, 1, 1), 4: (512.0, 1, 1, 0), 8: (1024.0, 2, 1, 0)}


def scaler_state(loop: TrainLoop) -> tuple[float, int, int, int]:
    return (loop.scaler.get_scale(), loop.scaler.state_dict()["_growth_tracker"],
            loop.state.skipped, loop.state.consecutive_skips)


@pytest.mark.parametrize("kill", [3, 4])
def test_resume_restores_the_grad_scaler_scale_growth_tracker_and_skip_counters(
    tmp_path: Path, kill: int,
) -> None:
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
    assert rows(resumed.state) == rows(whole.state)
    assert same_weights(resumed.model, whole.model)


def test_consecutive_skip_counter_resets_after_a_good_step(tmp_path: Path) -> None:
    loop = s2s_loop(tmp_path, 5, max_consecutive_skips=2)
    poison(loop, {1, 3, 5})  # never two bad steps in a row: the limit of 2 is never reached
    seen = []
    for _ in range(5):
        loop.train_step()
        seen.append((loop.state.skipped, loop.state.consecutive_skips))
    assert seen == [(1, 1), (1, 0), (2, 1), (2, 0), (3, 1)]


def test_consecutive_skips_count_across_a_resume_up_to_the_limit(tmp_path: Path) -> None:
    killed = s2s_loop(tmp_path, 5, max_consecutive_skips=2)
    poison(killed, {2, 3})
    kill_after(killed, 2)  # step 2 was skipped: one in a row
    resumed = s2s_loop(tmp_path, 5, max_consecutive_skips=2)
    poison(resumed, {2, 3})
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
    cfg = TrainConfig(seed=SEED, amp="none", batch_size=STREAMS, bptt_len=BPTT, max_steps=LM_MAX,
                      schedule="constant", lr=lr, warmup_steps=0, eval_every=100,
                      checkpoint_every=1, keep_last=2, threads=1)
    model = tiny_lm("lstm", hidden=8, layers=2, seed=7).train()
    feed = LMFeed(lm_docs(), IDS, "token-mean", 0.0, STREAMS, BPTT, cfg.seed)
    return TrainLoop(model, cfg, feed, CheckpointDir(work, cfg.keep_last), {"task": "lm"}, 8)


def first_dealt() -> tuple[int, int]:
    """The first two documents of epoch 0 under the streams' seed rule (a generator seeded
    with ``seed * 1_000_003 + epoch`` permutes the documents)."""
    g = torch.Generator().manual_seed(SEED * 1_000_003)
    order = torch.randperm(5, generator=g).tolist()
    return order[0], order[1]


def test_lm_resumed_mid_document_continues_the_streams_and_state_of_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
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
    assert rows(resumed.state) == rows(whole.state)
    assert same_weights(resumed.model, whole.model)

    # The final step's dev NLL reads each dev document with the state carried through it.
    dev = lm_docs()[1]
    tokens = sum(len(d) + 1 for d in dev)
    carried = sum(document_nll(resumed.model, d, None) for d in dev) / tokens
    reset = sum(document_nll(resumed.model, d, BPTT) for d in dev) / tokens
    assert resumed.state.history[-1].dev_nll == pytest.approx(carried, rel=1e-5)
    assert carried != pytest.approx(reset, rel=1e-3)


def test_lm_restored_carried_state_is_the_state_after_the_text_read_so_far(
    tmp_path: Path,
) -> None:
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
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(feed.carried, expected,
                                                                 strict=True))
    assert all(t.abs().max() > 0.01 for t in expected)  # the zero state would not pass


# -- continuing a finished run (issue 53) --------------------------------------------------


def _finishing_loop(work: Path, max_steps: int) -> TrainLoop:
    """A tiny run with a dev set that evaluates every 2 steps and at its last step, under
    the constant schedule (which does not depend on max_steps), dropout on."""
    cfg = TrainConfig(seed=SEED, amp="none", batch_size=4, bucket_width=2, max_steps=max_steps,
                      schedule="constant", lr=1e-2, warmup_steps=0, eval_every=2,
                      checkpoint_every=1, keep_last=2, threads=1, select="best_dev")
    model = tiny_model(dropout=0.2, enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    pairs = examples(16, seed=3, lengths=(1, 5))
    feed = Seq2SeqFeed((pairs[:12], pairs[12:]), IDS, SequenceConfig(), cfg)
    return TrainLoop(model, cfg, feed, CheckpointDir(work, cfg.keep_last), {"task": "s2s"}, 16)


def _rows(history: list[StepLog]) -> list[list]:
    return [[None if isinstance(v, float) and math.isnan(v) else v for v in h.row()]
            for h in history]


def test_continuing_a_finished_run_equals_the_straight_run(tmp_path: Path) -> None:
    straight = _finishing_loop(tmp_path / "straight", 6)
    straight.resume()
    straight.run(lambda entry, tokens_per_s: None)
    first = _finishing_loop(tmp_path / "b", 3)
    first.resume()
    first.run(lambda entry, tokens_per_s: None)
    second = _finishing_loop(tmp_path / "b", 6)
    assert second.resume() == "ckpt-00000003.pt"
    second.run(lambda entry, tokens_per_s: None)
    assert all(torch.equal(a, b) for a, b in zip(straight.model.state_dict().values(),
                                                 second.model.state_dict().values()))
    assert _rows(second.state.history) == _rows(straight.state.history)
    assert (second.state.best_step, second.state.best_dev) == \
        (straight.state.best_step, straight.state.best_dev)


def test_a_finished_runs_closing_evaluation_leaves_it_when_it_is_continued(
        tmp_path: Path) -> None:
    first = _finishing_loop(tmp_path, 3)
    first.resume()
    done = first.run(lambda entry, tokens_per_s: None)
    evaluated = {h.step: h.dev_nll for h in done.history if not math.isnan(h.dev_nll)}
    assert sorted(evaluated) == [2, 3]  # the grid's step 2 and the closing step 3
    closing_best = done.best_step == 3
    again = _finishing_loop(tmp_path, 6)
    again.resume()
    assert math.isnan(again.state.history[-1].dev_nll)  # step 3: no evaluation now
    assert again.state.history[1].dev_nll == evaluated[2]  # the grid's evaluation stays
    assert (again.state.best_step, again.state.best_dev) == (2, evaluated[2])
    assert (tmp_path / "best.pt").exists() == (not closing_best)
    # resumed with the same max_steps (a killed run), nothing is reopened
    same = _finishing_loop(tmp_path / "same", 3)
    same.resume()
    same.run(lambda entry, tokens_per_s: None)
    kept = _finishing_loop(tmp_path / "same", 3)
    kept.resume()
    assert kept.state.history[-1].dev_nll == same.state.history[-1].dev_nll
