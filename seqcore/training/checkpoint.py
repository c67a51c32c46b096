"""Complete, atomic, verifiable checkpoints.

A checkpoint is a ``torch.save`` of plain containers and tensors only, so it loads with
``weights_only=True`` and can never run code. It is written to a temporary file, fsynced and
renamed, with its sha256 in a sidecar file; loading verifies the hash and falls back to the
previous good checkpoint when the newest is truncated or corrupt.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqcore.errors import OneLineError

SCHEMA_VERSION = 2  # 2: data cursor under "data" (feeds: bucket sampler or lm streams)
_NAME = re.compile(r"^ckpt-(\d{8})\.pt$")
_PARTIAL = re.compile(r"^\..+\.tmp-\d+$")  # atomic_write's temporary name


class UnusableCheckpoint(OneLineError, ValueError):
    """A checkpoint or model file that cannot be used: missing hash, wrong hash, unreadable,
    or not weights-only. Its message is one line naming the file."""


class ContractMismatch(OneLineError, RuntimeError):
    """A checkpoint was trained under a different contract than the current one (one line
    naming every differing key and what to do)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Write bytes to a temp file in the same folder, fsync, then rename over ``path``.

    A temp file of ``path`` left by a writer that was killed (its process is gone) is removed
    first: it would otherwise stay beside a DVC output for good (and `git add -A` commit it).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete ``.NAME.tmp-PID`` files beside ``path`` whose PID no longer runs; returns them."""
    removed = []
    for tmp in path.parent.glob(f".{path.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[1]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def canonical(value: Any) -> Any:
    """A copy of a payload whose pickle bytes depend only on its values.

    Pickle writes an object once and later refers back to it by identity, so equal values
    reached through different objects give different bytes: after ``load_state_dict`` the
    optimizer's ``'step'`` keys are the unpickled string, not the interned literal a fresh
    run uses, and a resumed run's checkpoints differed from an uninterrupted run's (issue 12).
    Here every string is interned (equal strings are one object) and every container is
    rebuilt (no two places share one), in the original order; tensors are kept as they are.
    """
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        out = type(value)((canonical(k), canonical(v)) for k, v in value.items())
        if hasattr(value, "_metadata"):  # a module state_dict's version info
            out._metadata = canonical(value._metadata)  # type: ignore[attr-defined]
        return out
    if type(value) in (list, tuple):
        return type(value)(canonical(v) for v in value)
    return value


def save_blob(path: Path, payload: dict[str, Any]) -> str:
    """Serialise a payload atomically, in canonical form, with a ``.sha256`` sidecar;
    returns the hash."""
    import io  # noqa: PLC0415

    buf = io.BytesIO()
    torch.save(canonical(payload), buf)
    data = buf.getvalue()
    digest = _sha256(data)
    atomic_write(path, data)
    atomic_write(path.with_name(path.name + ".sha256"), (digest + "\n").encode())
    return digest


def load_blob(path: Path) -> dict[str, Any]:
    """Load a payload after checking its sha256 sidecar; never executes code from the file.

    Raises:
        UnusableCheckpoint: a missing sidecar, a hash mismatch, an unreadable file, or a
            pickle a weights-only load refuses (one line, never suggesting to lift the check).
    """
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UnusableCheckpoint(f"{path}: cannot read ({err.strerror})") from None
    sidecar = path.with_name(path.name + ".sha256")
    if not sidecar.exists():
        raise UnusableCheckpoint(f"{path}: missing {sidecar.name}")
    expected = sidecar.read_text().strip()
    if _sha256(data) != expected:
        raise UnusableCheckpoint(f"{path}: sha256 {_sha256(data)[:12]} != recorded "
                                 f"{expected[:12]} (truncated or corrupted)")
    import io  # noqa: PLC0415

    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        raise UnusableCheckpoint(refusal_line(path, str(err))) from None
    except Exception as err:  # noqa: BLE001 (zip, EOF, storage errors: all mean "unreadable")
        first = str(err).split(". ")[0].splitlines()[0][:120] if str(err) else ""
        raise UnusableCheckpoint(f"{path}: unreadable checkpoint ({type(err).__name__}: "
                                 f"{first})") from None


def refusal_line(path: Path, torch_message: str) -> str:
    """One line for a file a weights-only load refused, naming the object it asked for.

    torch's own text recommends ``weights_only=False``; that would run code from the file,
    so the line says what the file is and stops there (issue 13).
    """
    found = re.search(r"GLOBAL ([\w.]+)", torch_message)
    what = (f"it asks to rebuild the Python object {found[1]}" if found
            else "it is a plain pickle or not a torch.save archive")
    return f"{path}: not a weights-only checkpoint ({what}); refused, nothing was loaded"


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
class Found:
    """The checkpoint chosen for resuming, and any newer ones that failed verification."""

    path: Path
    payload: dict[str, Any]
    skipped: list[str]


class CheckpointDir:
    """Numbered ``ckpt-XXXXXXXX.pt`` files plus ``best.pt``; keeps the last K."""

    def __init__(self, root: Path, keep_last: int) -> None:
        self.root, self.keep_last = Path(root), keep_last

    def numbered(self) -> list[Path]:
        """Checkpoint files, oldest first."""
        if not self.root.exists():
            return []
        found = [p for p in self.root.iterdir() if _NAME.match(p.name)]
        return sorted(found, key=lambda p: p.name)

    def save(self, step: int, payload: dict[str, Any]) -> Path:
        path = self.root / f"ckpt-{step:08d}.pt"
        save_blob(path, payload)
        for old in self.numbered()[: -self.keep_last or None]:
            old.unlink()
            old.with_name(old.name + ".sha256").unlink(missing_ok=True)
        return path

    def remove_partial(self) -> list[str]:
        """Delete temporary files a killed write left behind (``.NAME.tmp-PID``); returns
        their names. Only one training process uses a folder at a time (DVC's stage lock)."""
        if not self.root.exists():
            return []
        partial = sorted(p for p in self.root.iterdir() if _PARTIAL.match(p.name))
        for path in partial:
            path.unlink()
        return [p.name for p in partial]

    def clear(self) -> None:
        """Remove every checkpoint of this folder (a fresh start must not see stale ones)."""
        for path in [*self.numbered(), self.root / "best.pt"]:
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".sha256").unlink(missing_ok=True)

    def save_best(self, payload: dict[str, Any]) -> Path:
        path = self.root / "best.pt"
        save_blob(path, payload)
        return path

    def best_weights(self, best_step: int) -> Found | None:
        """What ``select: best_dev`` exports: ``best.pt``, else the numbered checkpoint of
        ``best_step`` (same weights), else None; each unusable file is reported with a warning
        and skipped, like ``latest_good`` does (issue 13: a corrupt best.pt is no dead end)."""
        skipped: list[str] = []
        for path in (self.root / "best.pt", self.root / f"ckpt-{best_step:08d}.pt"):
            if not path.exists():
                continue
            try:
                payload = load_blob(path)
            except UnusableCheckpoint as err:
                skipped.append(str(err))
            else:
                if payload.get("schema") == SCHEMA_VERSION:
                    return Found(path, payload, skipped)
                skipped.append(f"{path}: schema {payload.get('schema')} != {SCHEMA_VERSION}")
            print(f"warning: skipping unusable checkpoint {skipped[-1]}", file=sys.stderr)
        return None

    def latest_good(self) -> Found | None:
        """The newest checkpoint that verifies; reports each newer one that did not."""
        skipped: list[str] = []
        for path in reversed(self.numbered()):
            try:
                payload = load_blob(path)
            except Exception as err:  # noqa: BLE001 (any load failure means "not usable")
                skipped.append(f"{path.name}: {err}")
                print(f"warning: skipping unusable checkpoint {path}: {err}", file=sys.stderr)
                continue
            if payload.get("schema") != SCHEMA_VERSION:
                skipped.append(f"{path.name}: schema {payload.get('schema')} != {SCHEMA_VERSION}")
                print(f"warning: skipping checkpoint {path}: {skipped[-1]}", file=sys.stderr)
                continue
            return Found(path, payload, skipped)
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
