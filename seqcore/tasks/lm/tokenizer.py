"""The lm task's piece of the tokenizer stage: no coverage guard."""

from __future__ import annotations

from typing import Any

from seqcore.config import Config


def coverage_problems(cfg: Config, coverage: dict[str, Any]) -> list[str]:
    """None: lm trains on documents, not on the encoded pairs."""
    return []
