"""The training loop: accumulation, AMP, clipping, scheduled sampling, checkpoints, resume.

Order of one optimisation step (each rule has a test):
1. draw all micro-batches of the step and count their valid label tokens (the global
   denominator, which multi-process training would all-reduce);
2. backward each micro-batch's summed loss divided by that global count, so k micro-batches
   give exactly the gradient of one big batch;
3. unscale (fp16), then check every gradient is finite, then clip by global L2 norm, then step.
   A non-finite step is skipped and counted; too many in a row stop training.

Reading the device back (issue 53): a step leaves its loss and gradient norm on the device,
and under the fused optimiser (``train.optimizer_kernel``; auto on CUDA) the skip of a
non-finite step happens on the device too (the optimiser's ``found_inf``), so a GPU step
reads nothing back (the loss zeroes unlabelled positions instead of selecting labelled ones:
``seqcore.losses``; a one-process and a two-process step are tested for it). The run reads the
figures back once per window (every step on CPU; ``log_every`` steps on a GPU, and at every
evaluation, checkpoint, ledger state and the last step), then counts skips in step order as
the unfused step does at once: the log and the weights are the same whatever the window.

Under multi-process training (``seqcore.training.distributed``) step 1's counts and the
logged loss are summed over ranks, and after step 2 the gradients are summed over ranks, so
unscale, the finiteness check and the clip in step 3 see the global gradient on every rank;
the sums stay on the device (which parameters have gradients is read once, at the first
step, and checked against each step's flags when the step is read).
With one process these collectives are skipped and the loop is the single-process loop.

``TrainLoop`` runs on any feed (``seqcore.training.feeds``: encoded pairs, or the lm task's
streams).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

# The log's row type is plain data in the artifact (the metrics read the log without training).
from seqcore.artifacts.train_log import DECODE_COLUMNS, StepLog
from seqcore.config import TrainConfig
from seqcore.training import distributed
from seqcore.training.checkpoint import (
    SCHEMA_VERSION, Checkpoint, CheckpointDir, check_contract, is_ledger_step, rng_restore,
    rng_snapshot)
from seqcore.training.dev_decode import DevScores, best_row, selection_key
from seqcore.training.failures import TooManySkippedSteps, memory_stop
from seqcore.training.feeds import Feed
from seqcore.training.graphs import StepGraphs
from seqcore.training.optim import build_optimizer, clip_global_norm, fused_step
from seqcore.training.schedule import learning_rate, scheduled_sampling_probability


@dataclass
class TrainState:
    """Counters and bookkeeping that the checkpoint carries."""

    step: int = 0
    tokens: int = 0
    skipped: int = 0
    consecutive_skips: int = 0
    best_dev: float = math.inf
    best_step: int = 0
    history: list[StepLog] = field(default_factory=list)


def autocast_context(amp: str, device: torch.device, cache: bool = True) -> Any:
    """bf16 autocast (CPU or CUDA), fp16 autocast (CUDA only), or nothing; ``cache``: keep
    the casts of the weights for the context's life (off for a CUDA graph's capture)."""
    if amp == "none":
        return nullcontext()
    if amp == "fp16" and device.type != "cuda":
        raise ValueError("amp: fp16 needs CUDA; use bf16 on CPU")
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype, cache_enabled=cache)


@dataclass(frozen=True)
class _Pending:
    """A step whose figures are still on the device: the micro-batches' summed losses, the
    pre-clip gradient norm, and (unfused) the skipped count after it; fused: None, counted
    when read."""

    step: int
    epoch: int
    lr: float
    totals: list[torch.Tensor]
    denominator: int | torch.Tensor
    tokens: int | torch.Tensor
    norm: torch.Tensor
    ss_prob: float
    skipped: int | None
    presence: torch.Tensor | None = None  # multi-process: the step's gradient presence flags


class TrainLoop:
    """Owns the model, optimiser, scaler, feed and generator of one training run.

    ``on_step(step)`` is called after every completed step (and after its checkpoint, if
    any); tests use it to kill the process at a chosen step. ``world`` is this process's
    rank among the data-parallel processes (the single process by default); the model must
    already be on its device and the feed must draw this rank's shard.
    """

    def __init__(
        self, model: nn.Module, cfg: TrainConfig, feed: Feed, ckpt: CheckpointDir,
        contract: dict[str, Any], d_model: int, world: distributed.World = distributed.World(),
    ) -> None:
        self.model, self.cfg, self.feed, self.ckpt = model, cfg, feed, ckpt
        self.contract, self.d_model, self.world = contract, d_model, world
        # a guard, read up front: the train stage declares it whether or not a step is skipped
        self.max_skips = cfg.max_consecutive_skips
        self.device = next(model.parameters()).device
        self.fused = cfg.optimizer_kernel_on(self.device.type) == "fused"
        # the step as CUDA graphs (captured on CUDA; the same step run eagerly elsewhere)
        self.graphed = cfg.cuda_graphs_on()
        self.opt = build_optimizer(
            model.parameters(), cfg.optimizer, cfg.betas, cfg.eps, cfg.weight_decay,
            portable=cfg.cpu_kernels == "portable" and self.device.type == "cpu",
            kernel="fused" if self.fused else "unfused", capturable=self.graphed)
        self.graphs: StepGraphs | None = None  # built at the first graphed step
        if self.graphed:  # every micro-batch padded, from the first drawn
            feed.pad_for_graphs(model)  # type: ignore[attr-defined] (a seq2seq feed)
        # Steps between reads of the device (loss, gradient norm, skipped or not): a CPU
        # computes eagerly, so every step; a GPU queues a window of log_every steps ahead.
        self.sync_every = 1 if self.device.type == "cpu" else max(cfg.log_every, 1)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.amp == "fp16")
        # Scheduled-sampling draws; every rank draws its own (rank 0 = the single process).
        self.gen = torch.Generator().manual_seed(cfg.seed + 1 + 7919 * world.rank)
        self.state = TrainState()
        # multi-process: which parameters the ranks' gradients are summed for (first step)
        self.presence: list[bool] | None = None
        self.param_names = [name for name, _ in model.named_parameters()]
        self.on_step: Callable[[int], None] = lambda step: None
        # the last dev decoding's outputs (the train stage prints a few of them)
        self.dev_outputs: DevScores | None = None

    # -- checkpoints ---------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        """Everything needed to continue bit-for-bit, as plain containers and tensors.

        Checkpoints are taken at step boundaries only, so the position inside an
        accumulation cycle is always 0 (recorded as ``micro`` for the reader).
        """
        s = self.state
        # Under multi-process training each rank's cursor and RNG states (a collective).
        ranks = {"ranks": distributed.gather_objects(self.world, {
            "data": {**self.feed.state_dict(), "micro": 0}, "generator": self.gen.get_state(),
            "rng": rng_snapshot()})} if self.world.size > 1 else {}
        return Checkpoint({
            "world": {"size": self.world.size, "backend": self.world.backend,
                      "device_kind": self.device.type}, **ranks,
            "schema": SCHEMA_VERSION, "model": self.model.state_dict(),
            "optimizer": self._optimizer_state(), "scaler": self.scaler.state_dict(),
            "schedule": {"name": self.cfg.schedule, "step": s.step},
            "data": {**self.feed.state_dict(), "micro": 0},
            "generator": self.gen.get_state(), "rng": rng_snapshot(),
            "state": {"step": s.step, "tokens": s.tokens, "skipped": s.skipped,
                      "consecutive_skips": s.consecutive_skips, "best_dev": s.best_dev,
                      "best_step": s.best_step, "select": self.cfg.select},
            "history": [h.row() for h in s.history], "contract": self.contract,
        })

    def _optimizer_state(self) -> dict[str, Any]:
        """The optimiser's state dict with each group's learning rate a float (the graphed
        step keeps it in a device scalar; the schedule sets it again at every step)."""
        state = self.opt.state_dict()
        state["param_groups"] = [{**g, "lr": float(g["lr"])} for g in state["param_groups"]]
        return state

    def resume(self) -> str | None:
        """Load the newest good checkpoint if any; returns its name (None = fresh start).

        Raises ContractMismatch (with a diff) when the checkpoint was trained under another
        contract, WorldMismatch (one line) when by another number of processes;
        ``train.resume: fresh`` deletes the folder's checkpoints instead.
        """
        for name in self.ckpt.remove_partial():
            print(f"removed {name}: a checkpoint write that did not finish", file=sys.stderr)
        found = self.ckpt.latest_good() if self.cfg.resume == "auto" else None
        if found is None:
            if self.cfg.resume == "auto" and self.ckpt.numbered() and self.world.main:
                print(f"warning: no usable checkpoint in {self.ckpt.root}; starting fresh",
                      file=sys.stderr)
            if self.world.main:
                self.ckpt.clear()
            distributed.broadcast_module(self.world, self.model)
            first = self.checkpoint()  # the ledger's first state: before any step (a barrier)
            if self.world.main:
                self.ckpt.save_ledger(0, first)
            return None
        c = found.checkpoint
        distributed.check_world(c.world, self.world.size, self.device.type, found.path)
        check_contract(*({k: v for k, v in contract.items() if k not in distributed.RUNTIME_KEYS}
                         for contract in (c.contract, self.contract)),
                       str(found.path))
        self.model.load_state_dict(c.weights)
        self.opt.load_state_dict(c.optimizer)
        self.scaler.load_state_dict(c.scaler)
        mine = c.rank_state(self.world.rank)
        self.feed.load_state_dict(mine["data"])
        self.gen.set_state(mine["generator"])
        rng_restore(mine["rng"])
        st = c.progress
        self.state = TrainState(st.step, st.tokens, st.skipped, st.consecutive_skips,
                                st.best_dev, st.best_step, [StepLog(*r) for r in c.history])
        if st.step < self.cfg.total_steps:
            self._reopen()
        distributed.barrier(self.world)
        return found.path.name

    def _reopen(self) -> None:
        """Continue a finished run as if it had not finished (issue 53).

        A run evaluates dev at its last step even off the ``eval_every`` grid; resumed towards
        a larger ``max_steps``, that step is no longer the last, and the straight run never
        evaluated there. So the closing evaluation (dev NLL and dev decoding) leaves the
        history and the best-dev bookkeeping (recomputed from the evaluations that remain,
        first of equals as in ``_maybe_evaluate``), and a ``best.pt`` it wrote is removed. It
        used no RNG and moved no data, so under a schedule that does not depend on
        ``max_steps`` (constant, noam) the continued run then equals the straight one:
        weights, log and checkpoints.
        """
        s = self.state
        last = s.history[-1] if s.history else None
        if last is None or last.step % self.cfg.eval_every == 0 or math.isnan(last.dev_nll):
            return
        chosen = best_row(s.history, self.cfg.select)  # best.pt's row (None under last)
        s.history[-1] = replace(last, dev_nll=math.nan, **dict.fromkeys(DECODE_COLUMNS, math.nan))
        best = best_row(s.history, "best_dev")
        s.best_dev, s.best_step = (best.dev_nll, best.step) if best else (math.inf, 0)
        if chosen is not None and chosen.step == last.step and self.world.main:
            self.ckpt.drop_best()

    # -- one step ------------------------------------------------------------------------
    def train_step(self) -> StepLog:
        """One optimisation step over ``accum_steps`` micro-batches; returns its log entry
        (``dev_nll`` NaN: the run fills it on an evaluation step)."""
        return self.train_steps(1)[0]

    def train_steps(self, n: int) -> list[StepLog]:
        """``n`` optimisation steps read back once, after the last (as ``run`` does within a
        window); their log entries."""
        return self._settle([self._step() for _ in range(n)])

    def _step(self) -> _Pending:
        """One optimisation step, its loss and gradient norm left on the device (read by
        ``_settle``). Under the fused optimiser a non-finite step is skipped on the device too,
        so the loop reads nothing back here (issue 53); the unfused one decides on the host."""
        s, cfg, feed = self.state, self.cfg, self.feed
        epoch = feed.epoch
        mrt = s.step >= cfg.max_steps  # the minimum-risk steps follow the likelihood ones
        batches = [feed.draw() for _ in range(cfg.accum_steps)]
        tokens = sum(feed.tokens(b) for b in batches)
        # the denominator: valid tokens or sequences (sequence.loss_norm); sources under MRT
        count = sum(feed.sources(b) if mrt else feed.count(b) for b in batches)
        denominator: int | torch.Tensor = max(count, 1)
        if self.world.size > 1:  # the global batch's counts: summed over ranks on the device
            summed = distributed.all_reduce_counts([count, tokens], self.device)
            denominator, tokens = summed[0].clamp(min=1), summed[1]
        if feed.norm == "sum" and not mrt:
            denominator = 1
        lr = cfg.mrt_lr if mrt else learning_rate(
            s.step + 1, cfg.schedule, cfg.lr, cfg.warmup_steps, cfg.max_steps, self.d_model)
        ss_prob = 0.0 if mrt else scheduled_sampling_probability(
            s.step, cfg.ss_schedule, cfg.ss_k, cfg.ss_cap)
        if self.graphed and not mrt:
            graphs = self._step_graphs()
            graphs.begin(int(denominator), lr)
            totals = []
            for b in batches:
                with memory_stop(b, self.device.type, s.step + 1, cfg):
                    totals.append(graphs.micro_batch(b))
            s.step += 1
            return _Pending(s.step, epoch, lr, totals, denominator, tokens, graphs.update(),
                            ss_prob, None)
        self.graphs = None  # minimum-risk steps run eagerly: their searches decide on the host
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        totals = []
        for b in batches:
            with memory_stop(b, self.device.type, s.step + 1, cfg):
                with autocast_context(cfg.amp, self.device):
                    out = feed.mrt_loss(self.model, b, self.gen) if mrt else \
                        feed.loss(self.model, b, ss_prob, self.gen)
                self.scaler.scale(out.total / denominator).backward()
            totals.append(out.total.detach())
        flags = None
        if self.world.size > 1:
            self.presence, flags = distributed.all_reduce_gradients(
                list(self.model.parameters()), self.presence)
            totals = [distributed.all_reduce_total(totals)]
        norm = self._unscale_clip()
        finite = None
        if self.fused:  # after unscale_, so the scaler's update sees its own inf checks
            fused_step(self.opt, norm)
        else:
            finite = math.isfinite(float(norm))
            if finite:
                self.scaler.step(self.opt)
            self._count_skip(finite, s.step + 1)
        self.scaler.update()
        s.step += 1
        return _Pending(s.step, epoch, lr, totals, denominator, tokens, norm, ss_prob,
                        None if finite is None else s.skipped, flags)

    def _step_graphs(self) -> StepGraphs:
        """The graphed step, built at its first use (after a resume has loaded the
        optimiser's state)."""
        if self.graphs is None:
            feed, cfg, device = self.feed, self.cfg, self.device
            self.graphs = StepGraphs(
                self.model, self.opt, lambda model, batch: feed.loss(model, batch, 0.0, self.gen),
                cfg.clip_norm, lambda: autocast_context(cfg.amp, device, cache=False),
                capture=device.type == "cuda")
        return self.graphs

    def _count_skip(self, finite: bool, step: int) -> None:
        """Count a skipped step; too many in a row stop training (TooManySkippedSteps)."""
        s = self.state
        if finite:
            s.consecutive_skips = 0
            return
        s.skipped += 1
        s.consecutive_skips += 1
        if s.consecutive_skips >= self.max_skips:
            raise TooManySkippedSteps(
                f"{s.consecutive_skips} non-finite gradient steps in a row at step {step} "
                f"(train.max_consecutive_skips={self.max_skips}); lower train.lr, check the "
                "data, or use amp: none")

    def _settle(self, pending: list[_Pending]) -> list[StepLog]:
        """The log entries of steps run by ``_step``, in order: the device's figures read
        back, and (fused) their skips counted as the unfused step counts them at once."""
        entries = []
        for p in pending:
            if p.presence is not None:
                distributed.check_presence(p.presence, self.presence, self.param_names, p.step)
            skipped = p.skipped
            if skipped is None:
                self._count_skip(math.isfinite(float(p.norm)), p.step)
                skipped = self.state.skipped
            loss = sum(float(t) for t in p.totals) / int(p.denominator)
            tokens = int(p.tokens)
            self.state.tokens += tokens
            entries.append(StepLog(p.step, p.epoch, p.lr, loss, tokens, float(p.norm),
                                   skipped, math.nan, p.ss_prob))
        return entries

    def _unscale_clip(self) -> torch.Tensor:
        """Unscale, clip by global norm (nothing read back); returns the pre-clip norm."""
        self.scaler.unscale_(self.opt)
        return clip_global_norm(self.model, self.cfg.clip_norm)

    # -- the run -------------------------------------------------------------------------
    def run(self, log: Callable[[StepLog, float], None]) -> TrainState:
        """Train until ``total_steps`` (``max_steps``, then ``mrt_steps`` of minimum risk
        training: seqcore.training.mrt), checkpointing and evaluating on the way.

        ``log`` gets each step's entry and its tokens per second (wall clock, console only).
        """
        self.model.train()
        from tqdm import tqdm  # noqa: PLC0415 (only when a run trains)

        bar = tqdm(total=self.cfg.total_steps, initial=self.state.step,
                   disable=not sys.stderr.isatty() or not self.world.main, unit="step")
        pending: list[_Pending] = []
        t0 = time.perf_counter()
        while self.state.step < self.cfg.total_steps:
            pending.append(self._step())
            step = self.state.step
            if self._reads_back(step):  # the window's figures, then what needs them
                entries = self._settle(pending)
                tokens_per_s = sum(e.tokens for e in entries) / max(
                    time.perf_counter() - t0, 1e-9)
                for entry in entries:  # an evaluation step ends its window
                    entry = self._maybe_evaluate(entry)
                    self.state.history.append(entry)
                    log(entry, tokens_per_s)
                bar.update(len(entries))
                bar.set_postfix(loss=f"{entry.loss:.3f}", tok_s=f"{tokens_per_s:.0f}")
                self._save(step)
                pending, t0 = [], time.perf_counter()
            self.on_step(step)
        bar.close()
        return self.state

    def _reads_back(self, step: int) -> bool:
        """Whether the run reads the device after ``step``: at the end of a ``sync_every``
        window, and wherever the figures are needed (an evaluation, a checkpoint or ledger
        state; the last step is all three)."""
        return step % self.sync_every == 0 or self._evaluates(step) or any(self._saves(step))

    def _evaluates(self, step: int) -> bool:
        """Dev is evaluated every ``eval_every`` steps and at the last."""
        return step % self.cfg.eval_every == 0 or step == self.cfg.total_steps

    def _saves(self, step: int) -> tuple[bool, bool]:
        """Whether ``step`` writes a numbered checkpoint (every ``checkpoint_every`` steps) and
        a ledger state (every ``ledger_every`` steps; 0: none between the first and the
        last); the last step writes both."""
        last = step == self.cfg.total_steps
        return (step % self.cfg.checkpoint_every == 0 or last,
                is_ledger_step(step, self.cfg.total_steps, self.cfg.ledger_every))

    def _save(self, step: int) -> None:
        """The checkpoint and ledger state ``_saves`` names for ``step``."""
        numbered, ledger = self._saves(step)
        if not (numbered or ledger):
            return
        state = self.checkpoint()  # gathers every rank's state: a barrier
        if self.world.main:
            if numbered:
                self.ckpt.save(step, state)
            if ledger:
                self.ckpt.save_ledger(step, state)

    def _maybe_evaluate(self, entry: StepLog) -> StepLog:
        """The entry with its dev NLL (and, with dev decoding on, its dev WER, PER and exact
        match: seqcore.training.dev_decode) on an evaluation step, and a new best checkpoint
        when ``train.select`` names a figure that improved."""
        s = self.state
        if not self._evaluates(entry.step):  # not s.step: a read-back window holds several
            return entry
        total, count = self.feed.dev_nll(self.model)
        if count == 0:
            return entry
        dev_nll = total / count
        scores = self.feed.dev_decode(self.model)
        figures = [dev_nll] + ([scores.wer, scores.per, scores.exact_multi_ref] if scores else [])
        if self.world.size > 1:  # every rank takes rank 0's values, so all decide alike
            figures = distributed.all_reduce_sum(
                self.world, [v if self.world.main else 0.0 for v in figures], self.device)
        entry = replace(entry, dev_nll=figures[0])
        if scores is not None:
            entry = replace(entry, **dict(zip(DECODE_COLUMNS, figures[1:], strict=True)))
            self.dev_outputs = scores
        # the rule of train.select (first of equals: a later row must be strictly better)
        key, best = selection_key(entry, self.cfg.select), best_row(s.history, self.cfg.select)
        improved = key is not None and (best is None or key < selection_key(best, self.cfg.select))
        if entry.dev_nll < s.best_dev:
            s.best_dev, s.best_step = entry.dev_nll, entry.step
        if improved:
            best_state = self.checkpoint()
            if self.world.main:
                self.ckpt.save_best(best_state)
        return entry

