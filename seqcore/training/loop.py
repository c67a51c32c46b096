"""The training loop: accumulation, AMP, clipping, scheduled sampling, checkpoints, resume.

Order of one optimisation step (each rule has a test):
1. draw all micro-batches of the step and count their valid label tokens (the global
   denominator, which multi-process training would all-reduce);
2. backward each micro-batch's summed loss divided by that global count, so k micro-batches
   give exactly the gradient of one big batch;
3. unscale (fp16), then check every gradient is finite, then clip by global L2 norm, then step.
   A non-finite step is skipped and counted; too many in a row stop training.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from seqcore.config import SequenceConfig, TrainConfig
from seqcore.contract import SpecialIds
from seqcore.data.batching import BucketSampler, SamplerState
from seqcore.data.examples import Example
from seqcore.losses import sequence_loss
from seqcore.models.base import EncoderDecoder
from seqcore.training.batch import Batch, make_batch, mix_model_tokens
from seqcore.training.checkpoint import (
    SCHEMA_VERSION, CheckpointDir, check_contract, rng_restore, rng_snapshot)
from seqcore.training.schedule import learning_rate, scheduled_sampling_probability

LOG_COLUMNS = ("step", "epoch", "lr", "loss", "tokens", "grad_norm", "skipped", "dev_nll",
               "ss_prob", "tokens_per_s")


class TooManySkippedSteps(RuntimeError):
    """Training produced non-finite gradients too many steps in a row."""


@dataclass
class TrainState:
    """Counters and bookkeeping that the checkpoint carries."""

    step: int = 0
    tokens: int = 0
    skipped: int = 0
    consecutive_skips: int = 0
    best_dev: float = math.inf
    best_step: int = 0
    history: list[list[float]] = field(default_factory=list)


def set_determinism(seed: int, threads: int) -> None:
    """Seed every global RNG and force deterministic kernels (CPU)."""
    import random  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def autocast_context(amp: str, device: torch.device) -> Any:
    """bf16 autocast (CPU or CUDA), fp16 autocast (CUDA only), or nothing."""
    if amp == "none":
        return nullcontext()
    if amp == "fp16" and device.type != "cuda":
        raise ValueError("amp: fp16 needs CUDA; use bf16 on CPU")
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


@torch.no_grad()
def teacher_forced_nll(
    model: EncoderDecoder, examples: list[Example], ids: SpecialIds, batch_size: int
) -> tuple[float, int]:
    """Summed token NLL (EOS included, PAD/BOS excluded) and its token count, in eval mode."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(examples), batch_size):
        b = make_batch(examples[i : i + batch_size], ids)
        out = sequence_loss(model(b.src, b.src_mask, b.tf.inputs), b.tf.labels, "sum", 0.0, ())
        total += float(out.nll)
        count += out.tokens
    model.train(was_training)
    return total, count


class Trainer:
    """Owns the model, optimiser, scaler, sampler and generator of one training run."""

    def __init__(
        self, model: EncoderDecoder, cfg: TrainConfig, seq: SequenceConfig, ids: SpecialIds,
        data: tuple[list[Example], list[Example]], ckpt: CheckpointDir, contract: dict[str, Any],
        d_model: int,
    ) -> None:
        self.model, self.cfg, self.seq, self.ids, self.ckpt = model, cfg, seq, ids, ckpt
        self.train_ex, self.dev_ex = data
        self.contract, self.d_model = contract, d_model
        self.device = next(model.parameters()).device
        opt_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
        self.opt = opt_cls(model.parameters(), lr=0.0, betas=cfg.betas, eps=cfg.eps,
                           weight_decay=cfg.weight_decay)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.amp == "fp16")
        lengths = [len(ex.tgt) for ex in self.train_ex]
        self.sampler = BucketSampler(lengths, cfg.batch_size, cfg.bucket_width, cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed + 1)  # scheduled-sampling draws
        self.state = TrainState()
        self.on_step: Callable[[int], None] = lambda step: None

    # -- checkpoints ---------------------------------------------------------------------
    def payload(self) -> dict[str, Any]:
        s = self.state
        return {
            "schema": SCHEMA_VERSION, "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(), "scaler": self.scaler.state_dict(),
            "schedule": {"name": self.cfg.schedule, "step": s.step},
            "sampler": {"epoch": self.sampler.state.epoch, "cursor": self.sampler.state.cursor,
                        "seed": self.cfg.seed, "micro": 0},
            "generator": self.gen.get_state(), "rng": rng_snapshot(),
            "state": {"step": s.step, "tokens": s.tokens, "skipped": s.skipped,
                      "consecutive_skips": s.consecutive_skips, "best_dev": s.best_dev,
                      "best_step": s.best_step, "select": self.cfg.select},
            "history": s.history, "contract": self.contract,
        }

    def resume(self) -> str | None:
        """Load the newest good checkpoint if any; returns its name (None = fresh start)."""
        found = self.ckpt.latest_good() if self.cfg.resume == "auto" else None
        if found is None:
            self.ckpt.clear()
            return None
        p = found.payload
        check_contract(p["contract"], self.contract, str(found.path))
        self.model.load_state_dict(p["model"])
        self.opt.load_state_dict(p["optimizer"])
        self.scaler.load_state_dict(p["scaler"])
        smp = p["sampler"]
        self.sampler.load(SamplerState(smp["epoch"], smp["cursor"]))
        self.gen.set_state(p["generator"])
        rng_restore(p["rng"])
        st = p["state"]
        self.state = TrainState(st["step"], st["tokens"], st["skipped"], st["consecutive_skips"],
                                st["best_dev"], st["best_step"], [list(r) for r in p["history"]])
        return found.path.name

    # -- one step ------------------------------------------------------------------------
    def _micro_loss(self, batch: Batch, denominator: int, ss_prob: float) -> float:
        inputs = batch.tf.inputs
        with autocast_context(self.cfg.amp, self.device):
            if ss_prob > 0:
                with torch.no_grad():  # first pass: the model's own predictions, no gradient
                    logits = self.model(batch.src, batch.src_mask, inputs)
                    preds = self._choose(logits)
                inputs = mix_model_tokens(batch.tf, preds, ss_prob, self.gen)
            logits = self.model(batch.src, batch.src_mask, inputs)
        out = sequence_loss(logits, batch.tf.labels, self.seq.loss_norm,
                            self.seq.label_smoothing, (self.ids.pad, self.ids.bos))
        self.scaler.scale(out.total / denominator).backward()
        return float(out.total.detach())

    def _choose(self, logits: torch.Tensor) -> torch.Tensor:
        if self.cfg.ss_choice == "argmax":
            return logits.argmax(-1)
        probs = torch.softmax(logits.float(), -1)  # (B, T, V)
        flat = torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=self.gen)
        return flat.view(probs.shape[:2])  # (B, T)

    def train_step(self) -> list[float]:
        """One optimisation step over ``accum_steps`` micro-batches; returns its log row."""
        s, cfg = self.state, self.cfg
        epoch = self.sampler.state.epoch
        batches = [make_batch([self.train_ex[i] for i in self.sampler.next()], self.ids)
                   for _ in range(cfg.accum_steps)]
        tokens = sum(b.tokens for b in batches)
        denominator = {"token-mean": tokens, "sequence-mean": sum(int(b.tf.mask.any(1).sum())
                       for b in batches), "sum": 1}[self.seq.loss_norm]
        lr = learning_rate(s.step + 1, cfg.schedule, cfg.lr, cfg.warmup_steps, cfg.max_steps,
                           self.d_model)
        for group in self.opt.param_groups:
            group["lr"] = lr
        ss_prob = scheduled_sampling_probability(s.step, cfg.ss_schedule, cfg.ss_k, cfg.ss_cap)
        self.opt.zero_grad(set_to_none=True)
        loss_sum = sum(self._micro_loss(b, max(denominator, 1), ss_prob) for b in batches)
        norm = self._unscale_clip()
        if math.isfinite(norm):
            self.scaler.step(self.opt)
            s.consecutive_skips = 0
        else:
            s.skipped += 1
            s.consecutive_skips += 1
            if s.consecutive_skips > cfg.max_consecutive_skips:
                raise TooManySkippedSteps(f"{s.consecutive_skips} non-finite steps in a row at "
                                          f"step {s.step + 1}")
        self.scaler.update()
        s.step += 1
        s.tokens += tokens
        return [s.step, epoch, lr, loss_sum / max(denominator, 1), tokens, norm, s.skipped,
                math.nan, ss_prob]

    def _unscale_clip(self) -> float:
        """Unscale, check finiteness, clip by global norm; returns the pre-clip norm."""
        self.scaler.unscale_(self.opt)
        params = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False)
        return float(norm)

    # -- the run -------------------------------------------------------------------------
    def run(self, log: Callable[[list[float]], None]) -> TrainState:
        """Train until ``max_steps``, checkpointing and evaluating on the way."""
        self.model.train()
        from tqdm import tqdm  # noqa: PLC0415

        bar = tqdm(total=self.cfg.max_steps, initial=self.state.step,
                   disable=not sys.stderr.isatty(), unit="step")
        while self.state.step < self.cfg.max_steps:
            t0 = time.perf_counter()
            row = self.train_step()
            row.append(row[4] / max(time.perf_counter() - t0, 1e-9))
            self._maybe_evaluate(row)
            self.state.history.append(row[:-1])
            log(row)
            bar.update(1)
            bar.set_postfix(loss=f"{row[3]:.3f}", tok_s=f"{row[-1]:.0f}")
            if self.state.step % self.cfg.checkpoint_every == 0 or \
                    self.state.step == self.cfg.max_steps:
                self.ckpt.save(self.state.step, self.payload())
            self.on_step(self.state.step)
        bar.close()
        return self.state

    def _maybe_evaluate(self, row: list[float]) -> None:
        s = self.state
        if not self.dev_ex or (s.step % self.cfg.eval_every and s.step != self.cfg.max_steps):
            return
        total, count = teacher_forced_nll(self.model, self.dev_ex, self.ids, self.cfg.batch_size)
        row[7] = total / max(count, 1)
        if row[7] < s.best_dev:
            s.best_dev, s.best_step = row[7], s.step
            if self.cfg.select == "best_dev":
                self.ckpt.save_best(self.payload())
