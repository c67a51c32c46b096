"""JSON-lines files of dataclass rows, written with stable bytes."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from seqcore.errors import unreadable

T = TypeVar("T")


def write_jsonl(rows: Iterable[Any], path: Path) -> None:
    """One dataclass per line, keys sorted, UTF-8, ``\\n`` line ends: same rows, same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(_strict(dataclasses.asdict(row)), ensure_ascii=False,
                               sort_keys=True, allow_nan=False) + "\n")


def _strict(value: Any) -> Any:
    """A NaN or infinite float as null: strict JSON has neither (a bare ``NaN`` breaks most
    readers), and an undefined score is not a number to compute with."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return value


def read_jsonl(path: Path, cls: type[T]) -> list[T]:
    """Rows written by :func:`write_jsonl`, rebuilt as ``cls``."""
    rows, n = [], 0
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    rows.append(cls(**json.loads(line)))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        # a line cut off or bytes that are not text: one line naming the file (issue 54)
        raise unreadable(path, err, n + 1 if isinstance(err, UnicodeDecodeError) else n) \
            from None
    return rows
