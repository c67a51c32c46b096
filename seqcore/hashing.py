"""Content hashes used to pin inputs and outputs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def digest(obj: Any) -> str:
    """sha256 of a canonical (key-sorted) JSON rendering of ``obj``."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
