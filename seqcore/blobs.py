"""Verifiable blobs: the file format of checkpoints and the model file.

A blob is a ``torch.save`` of plain containers and tensors only, so it loads with
``weights_only=True`` and can never run code. It is written to a temporary file, fsynced and
renamed, with its sha256 in a sidecar file; loading verifies the hash first. The ground floor
of the artifact layer: the model file (seqcore.artifacts.model_file) and the checkpoints
(seqcore.training.checkpoint) both read and write through it.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from seqcore.errors import OneLineError


class UnusableCheckpoint(OneLineError, ValueError):
    """A checkpoint or model file that cannot be used: missing hash, wrong hash, unreadable,
    or not weights-only. Its message is one line naming the file."""


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
            setattr(out, "_metadata", canonical(value._metadata))
        return out
    if type(value) in (list, tuple):
        return type(value)(canonical(v) for v in value)
    return value


def serialize(payload: dict[str, Any]) -> bytes:
    """The bytes ``save_blob`` writes for ``payload``: its canonical form, ``torch.save``d."""

    buf = io.BytesIO()
    torch.save(canonical(payload), buf)
    return buf.getvalue()


def save_blob(path: Path, payload: dict[str, Any]) -> str:
    """Serialise a payload atomically, in canonical form, with a ``.sha256`` sidecar;
    returns the hash."""
    data = serialize(payload)
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
    # bytes, not text: a sidecar that is not ASCII is a mismatch like any other (issue 54)
    expected = sidecar.read_bytes().decode("ascii", "replace").strip()
    if _sha256(data) != expected:
        raise UnusableCheckpoint(f"{path}: sha256 {_sha256(data)[:12]} != "
                                 f"{expected[:12] or 'nothing'} recorded in {sidecar.name} "
                                 "(truncated or corrupted)")

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
