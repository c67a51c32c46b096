"""``reports/train_log.csv``: one row per optimisation step (written by train; read by
evaluate's report and plot, the MLflow record and the audit).

The row type, :class:`StepLog`, lives here (plain data, no torch) so that the metrics read the
log without importing ``seqcore.training``; ``seqcore.training.loop`` re-exports it. The file
is ``csv.writer`` of :meth:`StepLog.row` under a header of :data:`LOG_COLUMNS`: ints as
``str(int)``, floats as ``repr`` (a step without a dev evaluation has ``nan``). Clock time is
never in it (pipeline/timing.py keeps the stage's time beside the workspace). The file carries
no version field (bytes kept); it reads as version 1.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar, TextIO

from seqcore.artifacts.base import UNVERSIONED, ArtifactError
from seqcore.errors import unreadable


@dataclass(frozen=True)
class StepLog:
    """One optimisation step as logged in the training log (a DVC output) and in the
    checkpoint's history: deterministic values only. Throughput is wall-clock time, so it
    goes to the console and never into a tracked file (issue 12)."""

    step: int
    epoch: int
    lr: float
    loss: float  # the step's loss under sequence.loss_norm (label smoothing included)
    tokens: int  # valid label tokens of the step, summed over ranks
    grad_norm: float  # global L2 norm before clipping (not finite for a skipped step)
    skipped: int  # skipped steps so far
    dev_nll: float  # dev token NLL on an evaluation step, else NaN
    ss_prob: float  # scheduled-sampling probability
    # Dev decoding (issue 52; seqcore.training.dev_decode) on an evaluation step with
    # train.dev_decode_words > 0, else NaN: word error rate against each word's first
    # reference, token error rate (PER for g2p) against it, exact match against any reference.
    dev_wer: float = math.nan
    dev_per: float = math.nan
    dev_exact_multi_ref: float = math.nan

    def row(self) -> list[float]:
        """The values in LOG_COLUMNS order: a CSV row, and the checkpoint's history format."""
        return [getattr(self, name) for name in LOG_COLUMNS]


#: Columns of the training log, in StepLog's field order.
LOG_COLUMNS = tuple(f.name for f in fields(StepLog))
#: The columns the dev decoding fills (seqcore.training.dev_decode; NaN on other steps). A log
#: written before them lacks them: read as NaN (that training decoded nothing).
DECODE_COLUMNS = ("dev_wer", "dev_per", "dev_exact_multi_ref")
_TYPES = {f.name: int if f.type == "int" else float for f in fields(StepLog)}


class TrainLogWriter:
    """Appends steps to an open training log (train writes and flushes one row per step)."""

    def __init__(self, f: TextIO) -> None:
        self._f, self._csv = f, csv.writer(f, lineterminator="\n")

    def append(self, entry: StepLog) -> None:
        self._csv.writerow(entry.row())
        self._f.flush()


@dataclass(frozen=True)
class TrainLog:
    """The parsed ``reports/train_log.csv``.

    Attributes:
        rows: the steps in file order.
        raw_cells: the text of each row's LOG_COLUMNS cells as read (the audit compares text
            with the checkpoint history); None for a log built in memory.
    """

    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    rows: tuple[StepLog, ...]
    raw_cells: tuple[tuple[str, ...], ...] | None = field(default=None, compare=False,
                                                          repr=False)

    def cells(self) -> list[tuple[str, ...]]:
        """Each row's LOG_COLUMNS cells as text: as read, or as the writer writes them."""
        if self.raw_cells is not None:
            return list(self.raw_cells)
        return [tuple(str(v) for v in r.row()) for r in self.rows]

    @staticmethod
    @contextmanager
    def writer(path: str | Path, rows: Iterable[StepLog] = ()) -> Iterator[TrainLogWriter]:
        """Write the header and ``rows``, then yield a writer that appends one step at a
        time."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as f:
            head = csv.writer(f, lineterminator="\n")
            head.writerow(LOG_COLUMNS)
            head.writerows(r.row() for r in rows)
            yield TrainLogWriter(f)

    def save(self, path: str | Path) -> None:
        with self.writer(path, self.rows):
            pass

    @classmethod
    def load(cls, path: str | Path) -> TrainLog:
        """Read a training log (ArtifactError, one line naming it, when a column is missing,
        unknown, or a cell is not a number of its column's type)."""
        try:
            with open(path, encoding="utf-8", newline="") as f:
                table = list(csv.reader(f))
        except UnicodeDecodeError as err:
            raise unreadable(path, err) from None
        header = table[0] if table else []
        missing = [c for c in LOG_COLUMNS if c not in header and c not in DECODE_COLUMNS]
        unknown = [c for c in header if c not in LOG_COLUMNS]
        if missing or unknown or len(set(header)) != len(header):
            raise ArtifactError(
                f"{path}: not a training log this code reads (header {','.join(header)!r}: "
                f"missing {missing}, unknown {unknown}); re-run the stage that writes it "
                "(dvc repro)")
        at = [header.index(c) if c in header else None for c in LOG_COLUMNS]
        rows: list[StepLog] = []
        cells: list[tuple[str, ...]] = []
        for line, row in enumerate(table[1:], start=2):
            if len(row) > len(header):
                raise ArtifactError(f"{path}: line {line}: {len(row)} cells, the header has "
                                    f"{len(header)}; re-run the stage that writes it (dvc repro)")
            text = tuple("nan" if i is None else row[i] if i < len(row) else "" for i in at)
            rows.append(StepLog(*(_cell(path, line, c, t) for c, t in zip(LOG_COLUMNS, text))))
            cells.append(text)
        return cls(tuple(rows), raw_cells=tuple(cells))


def _cell(path: str | Path, line: int, column: str, text: str) -> int | float:
    try:
        return _TYPES.get(column, float)(text)
    except ValueError:
        raise ArtifactError(f"{path}: line {line}, column {column}: {text!r} is not "
                            f"{'an integer' if _TYPES.get(column) is int else 'a number'}"
                            ) from None
