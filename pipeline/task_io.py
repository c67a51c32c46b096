"""What a stage lends its task (seqcore.tasks.base.StageIO): the contract check, progress,
JSON output and console lines, done the pipeline's way."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pipeline.progress import in_chunks
from pipeline.stage import signature, write_json
from seqcore.config import Config

T = TypeVar("T")


@dataclass(frozen=True)
class PipelineIO:
    """The StageIO of stage ``stage`` run with ``cfg``."""

    cfg: Config
    stage: str

    def contract(self, stored: str | None, where: str) -> str:
        return signature(self.cfg, self.stage, stored, where)

    def chunks(self, items: Sequence[T], batch_size: int, label: str) -> Iterator[Sequence[T]]:
        return in_chunks(items, batch_size, label)

    def write_json(self, path: str | Path, obj: Any) -> None:
        write_json(path, obj)

    def note(self, text: str) -> None:
        print(f"[{self.stage}] {text}", file=sys.stderr)
