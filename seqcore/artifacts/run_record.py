"""One MLflow run as plain data: what the evaluate stage logs, what the audit compares with
the logged run, and what the pending file keeps while the store is unreachable.

seqcore never imports mlflow: logging it is pipeline/tracking.py's job. The pending file
(``paths.mlflow_pending``) is a JSON list of these records, oldest first.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from seqcore.artifacts.base import UNVERSIONED, check_version, fields_error


@dataclass(frozen=True)
class RunRecord:
    """Everything one MLflow run holds.

    Attributes:
        uri: the tracking store (kept without credentials in the pending file).
        params: name -> value (written as text by the logger).
        metrics: final metrics, name -> number.
        steps: (metric, step, value) rows of the training log.
        texts: artifact name -> text (kept here so a replay logs the same bytes).
        images: artifact name -> base64 PNG; None (not written) for a run without plots.
        datasets: the run's dataset inputs (seqcore/artifacts/lineage.py: name, digest, source_type,
            source, profile, context); None (not written) in a record made before them.
        model: the MLflow model of the result (pipeline/registry.py model_entry: the files
            it packs with their sha256, the decode settings, the registered name and version
            tags); None for a result with no decoder (task lm) and records before issue 29.
        timing: ``time/*`` metric -> seconds (pipeline/timing.py: each stage's wall time and
            the pipeline's wall and CPU totals); clock time, so never compared by the audit.
            None when untimed (a rebuilt record, records before issue 29).
    """

    #: Records carry no version field (bytes kept); a missing one reads as version 1.
    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    uri: str
    experiment: str
    run_name: str
    params: dict[str, Any]
    metrics: dict[str, float | int]
    steps: list[tuple[str, int, float]]
    tags: dict[str, str]
    texts: dict[str, str]
    images: dict[str, str] | None = None
    datasets: list[dict[str, str]] | None = None
    model: dict[str, Any] | None = None
    timing: dict[str, float] | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items()
                if v is not None or k not in ("images", "datasets", "model", "timing")}

    @classmethod
    def save_all(cls, path: str | Path, records: list[RunRecord]) -> None:
        """Write the pending file: the records as one JSON list."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([{"schema_version": cls.SCHEMA_VERSION} | r.as_json()
                                    for r in records], indent=1, sort_keys=True,
                                   allow_nan=False) + "\n", encoding="utf-8")

    @classmethod
    def load_all(cls, path: str | Path) -> list[RunRecord]:
        """Read the pending file (every record's version checked)."""
        out = []
        for data in json.loads(Path(path).read_text(encoding="utf-8")):
            check_version(path, "MLflow run record", data.pop("schema_version", UNVERSIONED),
                          cls.SCHEMA_VERSION)
            try:
                steps = [(str(n), int(s), float(v)) for n, s, v in data.pop("steps")]
                out.append(cls(steps=steps, **data))
            except (KeyError, TypeError, ValueError) as err:
                raise fields_error(path, "MLflow run record", err) from None
        return out
