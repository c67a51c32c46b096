"""What a stage lends its task (seqcore.tasks.base.StageIO): the contract check, progress
and console lines, done the pipeline's way."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pipeline.stage import signature
from seqcore.config import Config
from seqcore.progress import in_chunks

if TYPE_CHECKING:
    from seqcore.artifacts.tokenizer_contract import TokenizerContract

T = TypeVar("T")


@dataclass(frozen=True)
class PipelineIO:
    """The StageIO of stage ``stage`` run with ``cfg``."""

    cfg: Config
    stage: str

    def contract(self, stored: str | None, where: str,
                 tokenizer: TokenizerContract | None = None) -> str:
        return signature(self.cfg, self.stage, stored, where, contract=tokenizer)

    def chunks(self, items: Sequence[T], batch_size: int, label: str) -> Iterator[Sequence[T]]:
        return in_chunks(items, batch_size, label)

    def note(self, text: str) -> None:
        print(f"[{self.stage}] {text}", file=sys.stderr)
