"""The task interface: what the stages ask of a task (STYLE rule 15, issue 11).

A stage never branches on the task's name: it gets the task from :func:`seqcore.tasks.get_task`
and asks it for the piece it needs. Each piece is one method here, in pipeline order. The idea
is fairseq's ``FairseqTask`` (a task supplies its data, model, criterion and inference step),
without its registry magic: the registry is one dict in ``seqcore/tasks/__init__.py``.

What only the pipeline may do (print the contract signature and stop on a mismatch, show
progress, print a line) the stage lends the task as a :class:`StageIO`: seqcore never
imports ``pipeline/``. The files between stages are read and written through their classes
in :mod:`seqcore.artifacts`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch

from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, DataConfig
from seqcore.data.coverage import SplitCoverage
from seqcore.errors import OneLineError
from seqcore.training.distributed import World
from seqcore.training.setups import Setup

T = TypeVar("T")


class TaskError(OneLineError, ValueError):
    """A task cannot run with these inputs; the message says what to change (one line)."""


class StageIO(Protocol):
    """What a stage lends its task (implemented in pipeline/task_io.py)."""

    def contract(self, stored: str | None, where: str,
                 tokenizer: TokenizerContract | None = None) -> str:
        """Print this stage's contract signature; stop the stage if ``stored`` differs.
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


class Task(ABC):
    """One task family's pieces, one method per stage that needs the task."""

    #: The ``task`` value of params.yaml this object serves.
    name: str

    @abstractmethod
    def scored_splits(self, data: DataConfig) -> dict[str, float]:
        """prepare: the prepared splits this task scores, with their ``data.*_fraction``;
        prepare stops when one holds fewer than ``data.min_split_rows`` rows."""

    @abstractmethod
    def coverage_problems(self, cfg: Config, coverage: dict[str, SplitCoverage]) -> list[str]:
        """tokenizer: one sentence per coverage figure too poor to train on (none: go on)."""

    @abstractmethod
    def training_setup(self, cfg: Config, io: StageIO, device: torch.device,
                       world: World) -> Setup:
        """train: read the declared inputs and build the model, feed and training contract."""

    @abstractmethod
    def decode(self, cfg: Config, io: StageIO) -> None:
        """decode: write ``predictions/<decode.split>.jsonl`` and its header.

        Raises:
            TaskError, DeviceUnavailable: the stage prints the message and stops.
        """

    @abstractmethod
    def evaluate(self, cfg: Config, io: StageIO) -> Evaluated:
        """evaluate: write metrics, results, headline, buckets, details and report."""
