"""``<paths.baseline>/record.json``: what the baseline stage trained, on what, and what it
left out (:class:`BaselineRecord`). Its predictions are ordinary predictions files
(seqcore.artifacts.predictions) in the same folder."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from seqcore.artifacts.base import check_version, fields_error, read_json, write_json

#: The baseline's predictions are written for both scored splits (settings are chosen on dev).
SPLITS = ("dev", "test")


def record_path(folder: str | Path) -> Path:
    return Path(folder) / "record.json"


@dataclass(frozen=True)
class BaselineRecord:
    """The baseline of one run, or why there is none.

    Attributes:
        kind: ``phonetisaurus``, or ``none`` (then ``skipped`` says why, in one sentence).
        signature: the baseline signature (tool, version, settings, train rows' hash).
        train_rows: the train rows offered (the model's own).
        rejected: train rows left out of the baseline, by reason (also listed, row by row,
            in ``paths.baseline_rejects``).
        model_sha256: sha256 of the model file (``model.fst``).
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    kind: str
    signature: str | None = None
    skipped: str | None = None
    train_rows: int = 0
    rejected: dict[str, int] | None = None
    model_sha256: str | None = None

    @property
    def present(self) -> bool:
        """Whether there are baseline predictions to score."""
        return self.kind != "none"

    def save(self, folder: str | Path) -> None:
        write_json(record_path(folder), {"schema_version": self.SCHEMA_VERSION}
                   | {k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def load(cls, folder: str | Path) -> BaselineRecord:
        path = record_path(folder)
        data = read_json(path)
        check_version(path, "baseline record", data.pop("schema_version", None),
                      cls.SCHEMA_VERSION)
        try:
            return cls(**data)
        except TypeError as err:
            raise fields_error(path, "baseline record", err) from None
