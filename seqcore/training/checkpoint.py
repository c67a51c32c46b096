"""Complete, atomic, verifiable checkpoints.

A checkpoint is a ``torch.save`` of plain containers and tensors only, so it loads with
``weights_only=True`` and can never run code. It is written to a temporary file, fsynced and
renamed, with its sha256 in a sidecar file; loading verifies the hash and falls back to the
previous good checkpoint when the newest is truncated or corrupt.
"""

from __future__ import annotations

import random
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqcore.blobs import UnusableCheckpoint, load_blob, save_blob
from seqcore.errors import OneLineError

SCHEMA_VERSION = 2  # 2: data cursor under "data" (feeds: bucket sampler or lm streams)
_NAME = re.compile(r"^ckpt-(\d{8})\.pt$")
_PARTIAL = re.compile(r"^\..+\.tmp-\d+$")  # atomic_write's temporary name
LEDGER = "ledger"  # the checkpoint folder's subfolder of ledger states


def ledger_files(folder: Path) -> list[Path]:
    """The numbered checkpoints of a ledger folder, oldest first (none if it is absent)."""
    if not Path(folder).is_dir():
        return []
    return sorted((p for p in Path(folder).iterdir() if _NAME.match(p.name)),
                  key=lambda p: p.name)


def is_ledger_step(step: int, last: int, every: int) -> bool:
    """Whether the ledger keeps the full state of ``step`` (the one definition: the loop
    writes these, the train stage copies them, the audit replays between them): the state
    before the first step (0), every ``every`` steps (``train.ledger_every``; 0: none between)
    and the last step ``last``."""
    return step in (0, last) or (every > 0 and step % every == 0 and step < last)


def ledger_steps(last: int, every: int) -> list[int]:
    """Every step :func:`is_ledger_step` keeps in a training of ``last`` steps, in order."""
    return [s for s in range(last + 1) if is_ledger_step(s, last, every)]


def step_of(path: Path) -> int:
    """The step of a numbered checkpoint file's name."""
    match = _NAME.match(Path(path).name)
    if match is None:
        raise ValueError(f"{path}: not a numbered checkpoint (ckpt-XXXXXXXX.pt)")
    return int(match.group(1))


class ContractMismatch(OneLineError, RuntimeError):
    """A checkpoint was trained under a different contract than the current one (one line
    naming every differing key and what to do)."""


def rng_snapshot() -> dict[str, Any]:
    """RNG states of python, numpy and torch (CPU, and CUDA when present) as plain data."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, gauss],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rng_restore(state: dict[str, Any]) -> None:
    """Inverse of ``rng_snapshot``."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass(frozen=True)
class Progress:
    """The loop's counters at a checkpoint (``TrainState`` without the history)."""

    step: int
    tokens: int
    skipped: int
    consecutive_skips: int
    best_dev: float
    best_step: int


#: The fields of every checkpoint (``TrainLoop.checkpoint``; ``ranks`` only under several
#: processes): a file without one of them is unusable, like a file whose hash is wrong.
FIELDS = ("world", "schema", "model", "optimizer", "scaler", "schedule", "data", "generator",
          "rng", "state", "history", "contract")


@dataclass(frozen=True)
class Checkpoint:
    """One training state as its file holds it, read through named fields (issue 26).

    ``payload`` is the file's content: plain containers and tensors, keys in the order
    ``TrainLoop.checkpoint`` builds them (the order is part of the bytes a resumed run
    reproduces). Nothing else reads a checkpoint by key; the audit's ledger comparison
    (seqcore.ledger) compares whole payloads.
    """

    payload: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        """Read a checkpoint file: its sha256 sidecar checked, loaded weights-only, its schema
        version this code's.

        Raises:
            UnusableCheckpoint: one line naming the file and what is wrong with it.
        """
        payload = load_blob(Path(path))
        if not isinstance(payload, dict):
            raise UnusableCheckpoint(f"{path}: not a training checkpoint (a "
                                     f"{type(payload).__name__}, not a mapping)")
        if payload.get("schema") != SCHEMA_VERSION:
            raise UnusableCheckpoint(f"{path}: schema {payload.get('schema')} != {SCHEMA_VERSION}")
        missing = [k for k in FIELDS if k not in payload]
        if missing:
            raise UnusableCheckpoint(f"{path}: not a whole training checkpoint (it lacks "
                                     f"{', '.join(missing)})")
        return cls(payload)

    def save(self, path: Path) -> str:
        """Write atomically (canonical form) with its sha256 sidecar; returns the hash."""
        return save_blob(Path(path), self.payload)

    @property
    def step(self) -> int:
        return self.payload["state"]["step"]

    @property
    def progress(self) -> Progress:
        st = self.payload["state"]
        return Progress(st["step"], st["tokens"], st["skipped"], st["consecutive_skips"],
                        st["best_dev"], st["best_step"])

    @property
    def history(self) -> list[list[Any]]:
        """The training log's rows so far, as values in ``LOG_COLUMNS`` order."""
        return self.payload["history"]

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        return self.payload["model"]

    @property
    def optimizer(self) -> dict[str, Any]:
        return self.payload["optimizer"]

    @property
    def scaler(self) -> dict[str, Any]:
        return self.payload["scaler"]

    @property
    def contract(self) -> dict[str, Any]:
        """The training contract the state was trained under (as stored: the reader migrates)."""
        return self.payload.get("contract", {})

    @property
    def world(self) -> dict[str, Any]:
        """The world that wrote it: ``size``, ``device_kind`` (before issue 16: one CPU process)."""
        return self.payload.get("world", {"size": 1, "device_kind": "cpu"})

    def rank_state(self, rank: int) -> dict[str, Any]:
        """Rank ``rank``'s data cursor (``data``), ``generator`` and ``rng`` states (a
        multi-process checkpoint holds one of each per rank)."""
        return self.payload["ranks"][rank] if self.world["size"] > 1 else self.payload


@dataclass(frozen=True)
class Found:
    """The checkpoint chosen for resuming, and any newer ones that failed verification."""

    path: Path
    checkpoint: Checkpoint
    skipped: list[str]


class CheckpointDir:
    """Numbered ``ckpt-XXXXXXXX.pt`` files plus ``best.pt``; keeps the last K, and every
    state of the ledger (issue 33) in ``ledger/``, never pruned: the state before the first
    step and at every ``train.ledger_every`` steps and the last step, which the train stage
    copies to its ``paths.ledger`` output and the audit replays segment by segment."""

    def __init__(self, root: Path, keep_last: int) -> None:
        self.root, self.keep_last = Path(root), keep_last
        self.ledger = self.root / LEDGER

    def numbered(self) -> list[Path]:
        """Checkpoint files, oldest first."""
        if not self.root.exists():
            return []
        found = [p for p in self.root.iterdir() if _NAME.match(p.name)]
        return sorted(found, key=lambda p: p.name)

    def save(self, step: int, checkpoint: Checkpoint) -> Path:
        path = self.root / f"ckpt-{step:08d}.pt"
        checkpoint.save(path)
        for old in self.numbered()[: -self.keep_last or None]:
            old.unlink()
            old.with_name(old.name + ".sha256").unlink(missing_ok=True)
        return path

    def save_ledger(self, step: int, checkpoint: Checkpoint) -> Path:
        path = self.ledger / f"ckpt-{step:08d}.pt"
        checkpoint.save(path)
        return path

    def copy_ledger(self, out: Path, last: int, every: int,
                    with_best: bool) -> tuple[list[int], list[str]]:
        """Copy this training's ledger states (:func:`ledger_steps`) to ``out`` (the train
        stage's ``paths.ledger``), with their sha256 sidecars, plus ``best.pt`` when
        ``with_best`` (``select: best_dev``). A DVC output never carries a file its own stage
        refused (issue 54): each state is checked as loading checks it, and one that fails is
        left out. Returns the steps the copy lacks (a folder trained before the ledger, under
        another ``ledger_every``, or a state that failed: the audit then replays a longer
        segment around them) and one warning line per file left out."""
        want = ledger_steps(last, every)
        best = self.root / "best.pt"
        found = [p for p in ledger_files(self.ledger) if step_of(p) in want]
        if with_best and best.exists():
            found.append(best)
        usable, warnings = [], []
        for path in found:
            why = self.verified(path)
            if why is None:
                usable.append(path)
            else:
                warnings.append(f"{path} is not copied into {out}: {why}")
        have = {step_of(p) for p in usable if p != best}
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for path in usable:
            for name in (path.name, path.name + ".sha256"):
                shutil.copyfile(path.with_name(name), out / name)
        return [s for s in want if s not in have], warnings

    def remove_partial(self) -> list[str]:
        """Delete temporary files a killed write left behind (``.NAME.tmp-PID``); returns
        their names. Only one training process uses a folder at a time (DVC's stage lock)."""
        if not self.root.exists():
            return []
        partial = sorted(p for folder in (self.root, self.ledger) if folder.is_dir()
                         for p in folder.iterdir() if _PARTIAL.match(p.name))
        for path in partial:
            path.unlink()
        return [p.name for p in partial]

    def clear(self) -> None:
        """Remove every checkpoint of this folder (a fresh start must not see stale ones)."""
        for path in [*self.numbered(), self.root / "best.pt", *ledger_files(self.ledger)]:
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".sha256").unlink(missing_ok=True)

    def save_best(self, checkpoint: Checkpoint) -> Path:
        path = self.root / "best.pt"
        checkpoint.save(path)
        return path

    def drop_best(self) -> None:
        """Remove ``best.pt`` and its sidecar (a best state that no longer is one)."""
        for path in (self.root / "best.pt", self.root / "best.pt.sha256"):
            path.unlink(missing_ok=True)

    def verified(self, path: Path) -> str | None:
        """Why ``path`` is no usable checkpoint (the check loading does), or None."""
        try:
            Checkpoint.load(path)
        except Exception as err:  # noqa: BLE001 (any load failure means "not usable")
            return str(err).removeprefix(f"{path}: ") or type(err).__name__
        return None

    def best_weights(self, best_step: int) -> Found | None:
        """What ``select: best_dev`` exports: ``best.pt``, else the numbered checkpoint of
        ``best_step`` (same weights), else None; each unusable file is reported with a warning
        and skipped, like ``latest_good`` does (issue 13: a corrupt best.pt is no dead end)."""
        skipped: list[str] = []
        for path in (self.root / "best.pt", self.root / f"ckpt-{best_step:08d}.pt"):
            if not path.exists():
                continue
            try:
                return Found(path, Checkpoint.load(path), skipped)
            except UnusableCheckpoint as err:
                skipped.append(str(err))
            print(f"warning: skipping unusable checkpoint {skipped[-1]}", file=sys.stderr)
        return None

    def latest_good(self) -> Found | None:
        """The newest checkpoint that verifies; reports each newer one that did not."""
        skipped: list[str] = []
        for path in reversed(self.numbered()):
            try:
                return Found(path, Checkpoint.load(path), skipped)
            except Exception as err:  # noqa: BLE001 (any load failure means "not usable")
                reason = str(err).removeprefix(f"{path}: ")
                skipped.append(f"{path.name}: {reason}")
                print(f"warning: skipping unusable checkpoint {path}: {reason}", file=sys.stderr)
        return None


def check_contract(stored: dict[str, Any], current: dict[str, Any], where: str) -> None:
    """Raise ContractMismatch naming every key whose value differs, in one line."""
    keys = sorted(set(stored) | set(current))
    diff = [f"{k}: checkpoint={stored.get(k)!r} now={current.get(k)!r}"
            for k in keys if stored.get(k) != current.get(k)]
    if diff:
        raise ContractMismatch(f"{where} was trained under a different contract ("
                               + "; ".join(diff) + "): set these back in params.yaml to resume "
                               "it, or train.resume: fresh to start over")
