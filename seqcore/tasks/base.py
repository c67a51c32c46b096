"""The types the model-side pieces of a task share (STYLE rule 15, issue 11).

A stage never branches on the task's name: it gets the task from :func:`seqcore.tasks.get_task`
and asks it for the piece it needs (one method of :class:`seqcore.tasks.Task` per stage, in
pipeline order; each reads its piece from the task package's module named after the stage).
The idea is fairseq's ``FairseqTask`` (a task supplies its data, model, criterion and
inference step), without its registry magic: the registry is one dict in
``seqcore/tasks/__init__.py``. prepare and tokenizer never import this module.

What only the pipeline may do (print the contract signature and stop on a mismatch, show
progress, print a line) the stage lends the task as a :class:`StageIO`: seqcore never
imports ``pipeline/``. The files between stages are read and written through their classes
in :mod:`seqcore.artifacts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.tokenizer_contract import TokenizerContract

T = TypeVar("T")


class StageIO(Protocol):
    """What a stage lends its task (implemented in pipeline/task_io.py)."""

    def contract(self, stored: str | None, where: str,
                 tokenizer: TokenizerContract | None = None) -> str:
        """Print the contract signature ``stored`` (read from ``where``); stop the stage
        unless it carries every field of the tokenizer contract's signature.
        ``tokenizer``: the tokenizer contract the task already read (else it is read here)."""

    def chunks(self, items: Sequence[T], batch_size: int, label: str) -> Iterable[Sequence[T]]:
        """``items`` in order, in chunks of whole batches, with progress on stderr."""

    def note(self, text: str) -> None:
        """One line on stderr, prefixed with the stage."""


@dataclass(frozen=True)
class Evaluated:
    """What the evaluate stage builds the MLflow record from, besides the config.

    Attributes:
        metrics: what metrics.json and results.json hold (numbers and texts).
        signature: the contract signature of the evaluated model.
        header: the decode stage's predictions header.
        pred_path: the predictions file the header belongs to.
        contract: the tokenizer contract (its hashes and parameters go to the record).
    """

    metrics: dict[str, Any]
    signature: str
    header: PredictionsHeader
    pred_path: Path
    contract: TokenizerContract
