"""``reports/train_metrics.json``: the train stage's counters and the selected checkpoint
(read by evaluate's report, the audit and `dvc metrics diff`).

Numbers only. An undefined value (no dev evaluation ran: ``best_dev_nll`` is infinite) is
written as ``null`` with a sibling ``<key>_null_reason`` (seqcore.nulls, issue 13).
The file carries no version field (bytes kept); a missing one reads as version 1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from seqcore.artifacts.base import UNVERSIONED, fields_error, read_versioned, write_json
from seqcore.nulls import NULL_REASON_SUFFIX, null_undefined


#: Fields added after files without them were written, with what such a file means (issue 52:
#: no dev decoding ran). A null value (undefined) reads as None.
ADDED: dict[str, Any] = {"best_dev_wer": None, "best_dev_wer_step": 0,
                         "selected_dev_wer": None, "selected_dev_per": None}


@dataclass(frozen=True)
class TrainMetrics:
    """The parsed ``reports/train_metrics.json``.

    Attributes:
        steps: optimisation steps done (``train.max_steps`` when training finished).
        tokens: target tokens trained on; skipped_steps: steps skipped for non-finite grads.
        best_step, best_dev_nll: the step with the lowest dev NLL and that NLL (None, or a
            non-finite number before it is written, when no dev evaluation ran).
        final_loss: the last step's loss (None when no step ran).
        selected_step: the step whose weights the model file holds (``train.select``).
        best_dev_wer, best_dev_wer_step: the lowest dev-sample WER of the dev decoding and its
            step (ties as ``select: best_dev_wer``; undefined and 0 without dev decoding).
        selected_dev_wer, selected_dev_per: the selected step's dev-sample WER and PER
            (undefined when that step decoded nothing). Undefined is NaN as the train stage
            builds them (written as null with a reason) and None as read; a file written
            before these four reads them as None.
        report: the task's own figures on the final model, by key (``task: lm``: its
            perplexities under ``lm``; the pair tasks: none).
        null_reasons: why a top-level value is null, by ``<key>_null_reason``, as read
            (a value written as null keeps its reason when the file is written again).
    """

    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    steps: int
    tokens: int
    skipped_steps: int
    best_step: int
    best_dev_nll: float | None
    final_loss: float | None
    selected_step: int
    best_dev_wer: float | None = None
    best_dev_wer_step: int = 0
    selected_dev_wer: float | None = None
    selected_dev_per: float | None = None
    report: dict[str, Any] = field(default_factory=dict)
    null_reasons: dict[str, str] = field(default_factory=dict)

    def counters(self) -> dict[str, Any]:
        """The named fields by name (what the audit compares with the checkpoints)."""
        return {k: v for k, v in asdict(self).items() if k not in ("report", "null_reasons")}

    def save(self, path: str | Path) -> None:
        write_json(path, null_undefined(self.counters() | self.report) | self.null_reasons)

    @classmethod
    def load(cls, path: str | Path) -> TrainMetrics:
        """Read and check a training metrics file (ArtifactError naming it when unreadable)."""
        data = read_versioned(path, "train metrics", cls.SCHEMA_VERSION)
        named = [f.name for f in fields(cls) if f.name not in ("report", "null_reasons")]
        reasons = {k: data.pop(k) for k in list(data) if k.endswith(NULL_REASON_SUFFIX)}
        try:
            values = {k: data.pop(k) if k in data or k not in ADDED else ADDED[k]
                      for k in named}
        except KeyError as err:
            raise fields_error(path, "train metrics", err) from None
        return cls(**values, report=data, null_reasons=reasons)
