"""Progress, the one reporter of every stage: the training's log line (step, loss, dev NLL,
elapsed, ETA) and, for the slow loops of decode and evaluate, a tqdm bar on a terminal and a
line every tenth of the work otherwise (logs of `dvc repro`, CI), so a long stage never looks
hung.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from tqdm import tqdm

if TYPE_CHECKING:  # the decode and evaluate stages import this module: no training code
    from seqcore.artifacts.train_log import StepLog

T = TypeVar("T")
BATCHES_PER_CHUNK = 4


def in_chunks(items: Sequence[T], batch_size: int, label: str) -> Iterator[Sequence[T]]:
    """``items`` in file order, in chunks of whole batches, reporting progress on stderr.

    Each chunk holds a multiple of ``batch_size`` items, so a caller that batches a chunk
    in order forms exactly the batches it would form over all items (same results).
    """
    size = batch_size * BATCHES_PER_CHUNK
    total = len(items)
    bar = tqdm(total=total, desc=label, unit="ex", file=sys.stderr) if sys.stderr.isatty() \
        else None
    start, next_line = time.monotonic(), total / 10
    for i in range(0, total, size):
        chunk = items[i : i + size]
        yield chunk
        done = i + len(chunk)
        if bar is not None:
            bar.update(len(chunk))
        elif done >= next_line or done == total:
            print(f"[{label}] {done}/{total} examples ({time.monotonic() - start:.0f} s)",
                  file=sys.stderr, flush=True)
            next_line = done + total / 10
    if bar is not None:
        bar.close()


class TrainingProgress:
    """What a training log line says besides the step's own figures: step N/M, the wall
    time of this run, an ETA from this run's pace, and the last dev NLL and dev-sample WER
    and PER (the log's ``nan`` between evaluations read as divergence)."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last, self.step = first, last, first
        self.start, self.dev_nll, self.dev_step = time.monotonic(), None, None
        self.dev_rates: tuple[float, float] | None = None

    def update(self, e: StepLog) -> None:
        self.step = int(e.step)
        if not math.isnan(e.dev_nll):
            self.dev_nll, self.dev_step = e.dev_nll, self.step
        if not math.isnan(e.dev_wer):
            self.dev_rates = (e.dev_wer, e.dev_per)

    def line(self, e: StepLog, tokens_per_s: float) -> str:
        elapsed = time.monotonic() - self.start
        done = self.step - self.first
        eta = elapsed / done * (self.last - self.step) if done else math.nan
        dev = (f"dev_nll {self.dev_nll:.4f} (step {self.dev_step})" if self.dev_nll is not None
               else "dev_nll -")
        if self.dev_rates is not None:
            dev += f" dev_wer {100 * self.dev_rates[0]:.1f}% dev_per {100 * self.dev_rates[1]:.2f}%"
        return (f"step {self.step}/{self.last} loss {e.loss:.4f} lr {e.lr:.2e} grad_norm "
                f"{e.grad_norm:.3f} {dev} skipped {e.skipped:.0f} tok/s {tokens_per_s:.0f} "
                f"elapsed {_clock(elapsed)} eta {_clock(eta)}")


def _clock(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
