"""Content hashes used to pin inputs and outputs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def file_hash(path: Path | str, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes under a hashlib algorithm, read in 1 MiB chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file's bytes."""
    return file_hash(path, "sha256")


def digest(obj: Any) -> str:
    """sha256 of a canonical (key-sorted) JSON rendering of ``obj``."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
