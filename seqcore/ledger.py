"""The training ledger read back (issue 33): its segments, which of them an audit replays,
the chance that a forger escapes, and a bit-for-bit comparison of two training states.

The train stage keeps the whole training state before the first step, every
``train.ledger_every`` steps and at the last (seqcore.training.checkpoint); a *segment* runs
from one state to the next. pipeline/audit/replay.py re-runs segments and compares the state
each reaches with the ledger's here.

The last segment is always replayed, the others are drawn by a seed (fresh for each audit,
and printed, so it can be repeated): a forger who faked m of the n segments (not the last,
which is always caught) escapes k replayed segments with probability
C(n-1-m, k-1) / C(n-1, k-1) (``escape_probability``).
"""

from __future__ import annotations

import io
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seqcore.blobs import load_blob, serialize
from seqcore.training.checkpoint import ledger_files, step_of

#: The ledger's first state: the training before its first step.
FIRST = 0
#: A checkpoint's parts in the order a difference is looked for: what was learned first,
#: then how (the optimizer, the counters and log), then where the data and RNGs stood.
ORDER = ("model", "optimizer", "scaler", "schedule", "state", "history", "data", "generator",
         "rng", "ranks", "world", "contract", "schema")


@dataclass(frozen=True)
class Segment:
    """Steps ``start`` + 1 .. ``end`` of the training, between two ledger files."""

    index: int  # 1-based, in training order
    start: Path
    end: Path

    def label(self) -> str:
        return f"segment {self.index} (steps {step_of(self.start)}->{step_of(self.end)})"


def ledger_segments(ledger: Path) -> list[Segment]:
    """The segments between consecutive states of a ledger folder (ValueError when it holds
    no state before the first step, or fewer than two states)."""
    files = ledger_files(ledger)
    if not files:
        raise FileNotFoundError(f"{ledger}: no ledger states (ckpt-XXXXXXXX.pt); train the "
                                "result again with this version (`dvc repro`)")
    if step_of(files[0]) != FIRST:
        raise ValueError(f"{ledger}: the ledger starts at step {step_of(files[0])}, not at the "
                         "state before the first step: the training before it cannot be "
                         "checked")
    if len(files) < 2:
        raise ValueError(f"{ledger}: one state only: no segment to replay")
    return [Segment(i + 1, a, b) for i, (a, b) in enumerate(zip(files, files[1:]))]


def choose(n: int, k: int, seed: int) -> list[int]:
    """The 1-based indices of the k segments (of n) to replay: the last always, the others
    drawn without replacement by ``seed``; sorted."""
    k = max(0, min(k, n))
    if k == 0:
        return []
    others = random.Random(seed).sample(range(1, n), k - 1)
    return sorted([*others, n])


def escape_probability(n: int, m: int, k: int) -> float:
    """The chance that replaying k of n segments (the last always) misses all of m faked
    segments, none of them the last."""
    k = max(1, min(k, n))
    return math.comb(n - 1 - m, k - 1) / math.comb(n - 1, k - 1) if m <= n - 1 else 0.0


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two checkpoint payloads first differ (a key path and both values), bit for bit:
    tensors by dtype, shape and every element (NaN equal to NaN), floats by value."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys(), key=lambda k: (
                ORDER.index(k) if not where and k in ORDER else len(ORDER), str(k))):
            if key not in a or key not in b:
                return f"{where}[{key!r}]: only in the {'ledger' if key in a else 'replay'}"
            found = first_difference(a[key], b[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: ledger has {len(a)} items, replay {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return (f"{where}: ledger {a.dtype} {tuple(a.shape)}, replay {b.dtype} "
                    f"{tuple(b.shape)}")
        if torch.equal(a, b) or (a.is_floating_point() and bool(
                ((a == b) | (a.isnan() & b.isnan())).all())):
            return None
        off = (a != b) & ~(a.isnan() & b.isnan()) if a.is_floating_point() else a != b
        i = int(off.flatten().nonzero()[0])
        return (f"{where}: {int(off.sum())} of {a.numel()} elements differ (first at flat index "
                f"{i}: ledger {a.flatten()[i].item()!r}, replay {b.flatten()[i].item()!r})")
    same = a == b or (isinstance(a, float) and isinstance(b, float) and
                      math.isnan(a) and math.isnan(b))
    return None if same and type(a) is type(b) else f"{where}: ledger {a!r}, replay {b!r}"


def state_difference(ledger_file: Path, payload: dict[str, Any]) -> str | None:
    """Where ``payload`` (a state reached now) differs from a ledger file: None when it
    serialises to the file's very bytes, as the training wrote it (seqcore.blobs.save_blob);
    else the first differing value, read back as a load reads the file."""
    data = serialize(payload)
    if data == ledger_file.read_bytes():
        return None
    replayed = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    return first_difference(load_blob(ledger_file), replayed) or \
        "the bytes (every value is equal: a difference in how the state was serialised)"
