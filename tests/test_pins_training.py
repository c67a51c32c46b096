"""Rules of the training loop and its checkpoints that no fast test pinned before the third
tranche of generated mutants (issue 32, docs/rules.md "Generated mutants"): the autocast dtype
amp names, the optimiser and grad scaler params choose, the fields of a checkpoint, the step's
counters and log, resume's messages and refusals, the folder's pruning, clearing and
fallbacks, the evaluation cadence and the best checkpoint, the loop's own generator, and the
console's progress bar and throughput."""

from __future__ import annotations

import io
import math
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional

import seqcore.training.loop as loop_module
from seqcore.blobs import UnusableCheckpoint
from seqcore.config import SequenceConfig, TrainConfig
from seqcore.contract import IGNORE_INDEX
from seqcore.data.examples import Example
from seqcore.sequences import make_batch
from seqcore.training.checkpoint import (
    SCHEMA_VERSION,
    Checkpoint,
    CheckpointDir,
    ContractMismatch,
    check_contract,
    ledger_files,
    step_of,
)
from seqcore.training.distributed import World, WorldMismatch
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.loop import (
    TooManySkippedSteps,
    TrainLoop,
    autocast_context,
)
from tests.factories import (
    IDS, S2S_SEED, examples, kill_after, s2s_loop, tiny_model, whole_checkpoint)

CPU = torch.device("cpu")
NOLS = SequenceConfig(label_smoothing=0.0)


def plain_loop(tmp_path: Path, train: list[Example], dev: list[Example] | None = None,
               seq: SequenceConfig = NOLS, world: World = World(), **overrides: object
               ) -> TrainLoop:
    """A tiny dropout-free run (so train and eval mode compute alike) with a dev set, as
    rank ``world.rank`` of ``world.size``."""
    cfg = TrainConfig(**{"seed": S2S_SEED, "amp": "none", "batch_size": 4, "bucket_width": 2,
                         "max_steps": 4, "schedule": "constant", "lr": 1e-2, "warmup_steps": 0,
                         "eval_every": 100, "checkpoint_every": 100, "ledger_every": 0,
                         "keep_last": 2, "threads": 1, **overrides})
    model = tiny_model(enc_layers=1, dec_layers=1, max_len=16, seed=7).train()
    feed = Seq2SeqFeed((train, dev or []), IDS, seq, cfg)
    return TrainLoop(model, cfg, feed, CheckpointDir(tmp_path / "ck", cfg.keep_last),
                     {"task": "s2s"}, 16, world)


def record_indices(loop: TrainLoop) -> list[list[int]]:
    """The example indices of every batch the loop's sampler hands out from now on."""
    drawn: list[list[int]] = []
    sampler = loop.feed.sampler  # type: ignore[attr-defined]
    draw_next = sampler.next

    def recording() -> list[int]:
        drawn.append(draw_next())
        return drawn[-1]
    sampler.next = recording
    return drawn


def tiny_checkpoint(step: int) -> Checkpoint:
    return whole_checkpoint(model={"w": torch.full((2,), float(step))}, state={"step": step})


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def finish(loop: TrainLoop) -> None:
    loop.run(lambda entry, tokens_per_s: None)


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


# -- the optimiser params name -----------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adamw_decays_weights_apart_from_the_gradient_and_adam_adds_the_decay_to_it(
    tmp_path: Path, optimizer: str,
) -> None:
    lr, wd = 0.1, 0.5
    loop = plain_loop(tmp_path, examples(4), optimizer=optimizer, weight_decay=wd)
    params = list(loop.model.parameters())
    before = [p.detach().clone() for p in params]
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


# -- one step: counters, log and the checkpoint's fields -----------------------------------------


def test_a_single_process_checkpoint_holds_every_field_in_order_with_its_value(
    tmp_path: Path,
) -> None:
    data = examples(12, seed=3, lengths=(1, 5))  # s2s_loop's data: 3 batches of 4 an epoch
    loop = s2s_loop(tmp_path, 5)
    drawn = record_indices(loop)
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
    assert payload["state"] == {"step": 2, "tokens": sum(tokens), "skipped": 0,
                                "consecutive_skips": 0, "best_dev": math.inf, "best_step": 0,
                                "select": "last"}
    assert torch.equal(payload["generator"], loop.gen.get_state())
    assert payload["contract"] == {"task": "s2s"}


def test_sequence_mean_over_a_single_sequence_divides_its_loss_by_one(tmp_path: Path) -> None:
    seq = SequenceConfig(label_smoothing=0.0, loss_norm="sequence-mean")
    data = examples(3, seed=4, lengths=(2, 4))
    loop = plain_loop(tmp_path, data, seq=seq, batch_size=1, bucket_width=100)
    twin = Seq2SeqFeed((data, []), IDS, seq, loop.cfg)  # the same seeded sampler
    b = twin.draw()
    with torch.no_grad():
        logits = loop.model(b.src, b.src_mask, b.tf.inputs)[0]  # (T, V)
    labels = b.tf.labels[0]
    keep = labels != IGNORE_INDEX
    expected = float(functional.cross_entropy(logits[keep], labels[keep]))  # the sequence's token mean
    assert loop.train_step().loss == pytest.approx(expected, rel=1e-5)


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
    tmp_path: Path,
) -> None:
    # inverse sigmoid with k = 1 feeds a model token with probability 1 / (1 + e^0) = 1/2
    loop = plain_loop(tmp_path, examples(4), ss_schedule="inverse_sigmoid", ss_k=1.0,
                      ss_cap=1.0, ss_choice="sample")
    global_before, own_before = torch.get_rng_state(), loop.gen.get_state()
    assert loop.train_step().ss_prob == pytest.approx(0.5)
    assert torch.equal(torch.get_rng_state(), global_before)
    assert not torch.equal(loop.gen.get_state(), own_before)


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_scheduled_sampling_seeds_its_generator_per_rank_by_the_stated_rule(
    tmp_path: Path, rank: int,
) -> None:
    # docs/scale-out.md: train.seed + 1 + 7919 x rank (rank 0 = the single process)
    loop = plain_loop(tmp_path, examples(4), world=World(rank=rank, size=4, backend="gloo"))
    assert loop.gen.initial_seed() == S2S_SEED + 1 + 7919 * rank


# -- evaluation, the best checkpoint and the ledger ----------------------------------------------


def dev_token_nll(model: torch.nn.Module, dev: list[Example]) -> float:
    """Summed NLL per label token of the dev pairs, one pair at a time (no padding)."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for ex in dev:
            b = make_batch([ex], IDS)
            labels = b.tf.labels[0]
            keep = labels != IGNORE_INDEX
            logits = model(b.src, b.src_mask, b.tf.inputs)[0]
            total += float(functional.cross_entropy(logits[keep], labels[keep], reduction="sum"))
            count += int(keep.sum())
    return total / count


def test_dev_nll_every_eval_every_steps_and_the_first_of_equal_bests_is_kept(
    tmp_path: Path,
) -> None:
    dev = examples(3, seed=11)
    # lr 0: the weights never move, so both evaluations give the same dev NLL (a tie)
    loop = plain_loop(tmp_path, examples(8), dev, lr=0.0, eval_every=2, max_steps=4,
                      select="best_dev")
    expected = dev_token_nll(tiny_model(enc_layers=1, dec_layers=1, max_len=16, seed=7), dev)
    finish(loop)
    nll = [e.dev_nll for e in loop.state.history]
    assert [math.isnan(v) for v in nll] == [True, False, True, False]
    assert nll[1] == nll[3] == pytest.approx(expected, rel=1e-5)
    assert (loop.state.best_dev, loop.state.best_step) == (nll[1], 2)
    best = loop.ckpt.best_weights(2)
    assert best is not None and best.path.name == "best.pt" and best.checkpoint.step == 2

    last = plain_loop(tmp_path / "last", examples(8), dev, eval_every=2, max_steps=2)
    finish(last)
    assert math.isfinite(last.state.history[-1].dev_nll)
    assert not (last.ckpt.root / "best.pt").exists()  # select: last writes no best.pt


def test_ledger_every_one_keeps_the_state_after_every_step(tmp_path: Path) -> None:
    loop = plain_loop(tmp_path, examples(8), ledger_every=1, max_steps=3)
    finish(loop)
    assert [p.name for p in ledger_files(loop.ckpt.ledger)] == [
        f"ckpt-{s:08d}.pt" for s in (1, 2, 3)]


# -- resume: messages and refusals ----------------------------------------------------------------


def test_resume_names_each_removed_partial_write_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture,
) -> None:
    loop = s2s_loop(tmp_path, 3)
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / ".ckpt-00000003.pt.tmp-999").write_bytes(b"half")
    assert loop.resume() is None
    captured = capsys.readouterr()
    assert captured.err == ("removed .ckpt-00000003.pt.tmp-999: a checkpoint write that did "
                            "not finish\n")
    assert captured.out == ""


def test_auto_resume_warns_only_when_checkpoints_exist_and_none_is_usable(
    tmp_path: Path, capsys: pytest.CaptureFixture,
) -> None:
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
    tmp_path: Path, world: dict, message: str,
) -> None:
    kill_after(s2s_loop(tmp_path, 3), 1)
    path = tmp_path / "ckpt-00000001.pt"
    Checkpoint({**Checkpoint.load(path).payload, "world": world}).save(path)
    with pytest.raises(WorldMismatch) as refused:
        s2s_loop(tmp_path, 3).resume()
    assert str(refused.value) == message.format(path=path)


def test_resume_refuses_another_contract_naming_the_file_and_ignores_runtime_keys(
    tmp_path: Path,
) -> None:
    kill_after(s2s_loop(tmp_path, 3), 1)
    path = tmp_path / "ckpt-00000001.pt"
    other = s2s_loop(tmp_path, 3)
    other.contract = {"task": "lm"}
    with pytest.raises(ContractMismatch) as refused:
        other.resume()
    assert str(refused.value) == (
        f"{path} was trained under a different contract (task: checkpoint='s2s' now='lm'): "
        "set these back in params.yaml to resume it, or train.resume: fresh to start over")
    # where the run executes is check_world's business, not the contract comparison's
    same = s2s_loop(tmp_path, 3)
    same.contract = {"task": "s2s", "train.nproc": 1, "train.backend": "none",
                     "train.device_kind": "cpu"}
    assert same.resume() == "ckpt-00000001.pt"


def test_contract_mismatch_lists_every_differing_key_of_either_side_in_one_line() -> None:
    with pytest.raises(ContractMismatch) as refused:
        check_contract({"task": "g2p", "lr": 1.0, "seed": 1}, {"task": "lm", "lr": 1.0}, "x")
    assert str(refused.value) == (
        "x was trained under a different contract (seed: checkpoint=1 now=None; task: "
        "checkpoint='g2p' now='lm'): set these back in params.yaml to resume it, or "
        "train.resume: fresh to start over")
    check_contract({"a": 1}, {"a": 1}, "x")  # equal contracts pass


def test_a_name_that_is_not_a_numbered_checkpoint_is_refused_with_the_pattern() -> None:
    assert step_of(Path("d/ckpt-00000042.pt")) == 42
    with pytest.raises(ValueError) as refused:
        step_of(Path("d/best.pt"))
    assert str(refused.value) == "d/best.pt: not a numbered checkpoint (ckpt-XXXXXXXX.pt)"


def test_each_rank_reads_its_own_entry_of_a_multi_process_checkpoint() -> None:
    own = [{"data": {"cursor": r}, "generator": torch.tensor([r]), "rng": {}} for r in (0, 1)]
    two = Checkpoint({"world": {"size": 2, "backend": "gloo", "device_kind": "cpu"},
                      "ranks": own, "data": {"cursor": 9}})
    assert two.rank_state(1) is own[1] and two.rank_state(0) is own[0]
    one = Checkpoint({"world": {"size": 1, "backend": "none", "device_kind": "cpu"},
                      "data": {"cursor": 9}})
    assert one.rank_state(0) is one.payload


# -- the checkpoint folder --------------------------------------------------------------------------


def test_pruning_keeps_the_last_k_with_their_sidecars_and_survives_a_missing_sidecar(
    tmp_path: Path,
) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=2)
    for step in (1, 2):
        ckpt.save(step, tiny_checkpoint(step))
    (tmp_path / "ckpt-00000001.pt.sha256").unlink()  # a write killed before its sidecar
    for step in (3, 4):
        ckpt.save(step, tiny_checkpoint(step))
    assert files_under(tmp_path) == ["ckpt-00000003.pt", "ckpt-00000003.pt.sha256",
                                     "ckpt-00000004.pt", "ckpt-00000004.pt.sha256"]


def test_clear_removes_numbered_best_and_ledger_files_with_their_sidecars(
    tmp_path: Path,
) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=2)
    ckpt.save(1, tiny_checkpoint(1))
    ckpt.save_best(tiny_checkpoint(1))
    ckpt.save_ledger(0, tiny_checkpoint(0))
    assert len(files_under(tmp_path)) == 6
    ckpt.clear()
    assert files_under(tmp_path) == []


def test_best_weights_fall_back_to_the_best_steps_checkpoint_when_best_pt_is_absent(
    tmp_path: Path,
) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=3)
    ckpt.save(3, tiny_checkpoint(3))
    found = ckpt.best_weights(3)
    assert found is not None and found.path.name == "ckpt-00000003.pt" and found.skipped == []
    ckpt.save_best(tiny_checkpoint(3))
    found = ckpt.best_weights(3)
    assert found is not None and found.path.name == "best.pt" and found.skipped == []


def test_latest_good_lists_and_reports_each_newer_unusable_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture,
) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=3)
    for step in (1, 2):
        ckpt.save(step, tiny_checkpoint(step))
    found = ckpt.latest_good()
    assert found is not None and found.path.name == "ckpt-00000002.pt" and found.skipped == []
    bad = tmp_path / "ckpt-00000002.pt"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(UnusableCheckpoint) as err:
        Checkpoint.load(bad)
    assert str(err.value).startswith(f"{bad}: ")
    reason = str(err.value)[len(f"{bad}: "):]  # the loader's reason without the path
    assert "truncated or corrupted" in reason
    capsys.readouterr()
    found = ckpt.latest_good()
    assert found is not None and found.path.name == "ckpt-00000001.pt"
    assert found.skipped == [f"ckpt-00000002.pt: {reason}"]
    assert capsys.readouterr().err == f"warning: skipping unusable checkpoint {bad}: {reason}\n"


# -- the console: progress bar and throughput -----------------------------------------------------


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal, keeping what is drawn on it."""

    def isatty(self) -> bool:
        return True


def test_the_progress_bar_on_a_terminal_counts_steps_from_the_resumed_one_with_the_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    kill_after(s2s_loop(tmp_path, 4), 2)
    loop = s2s_loop(tmp_path, 4)
    loop.resume()
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    finish(loop)
    drawn = terminal.getvalue()
    first, final = drawn.split("\r")[1], drawn.rstrip("\n").split("\r")[-1]  # redrawn in place
    assert "| 2/4 [" in first and "| 4/4 [" in final  # past the total tqdm would drop "/4"
    assert re.search(r"[\d?]step/s|s/step\b", final)
    assert f"loss={loop.state.history[-1].loss:.3f}" in final
    assert re.search(r"tok_s=\d+\]", final)


def test_no_progress_bar_is_drawn_when_stderr_is_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture,
) -> None:
    finish(plain_loop(tmp_path, examples(8), max_steps=2))
    assert capsys.readouterr().err == ""


def test_each_step_reports_its_tokens_per_second_of_wall_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter(100.0 + 0.25 * i for i in range(1000))  # each clock read is 0.25 s later
    monkeypatch.setattr(loop_module, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    seen: list[tuple[int, float]] = []
    loop = plain_loop(tmp_path, examples(8), max_steps=2)
    loop.run(lambda entry, tokens_per_s: seen.append((entry.tokens, tokens_per_s)))
    assert len(seen) == 2
    assert all(rate == tokens / 0.25 for tokens, rate in seen)  # one step between two reads
