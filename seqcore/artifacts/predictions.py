"""``predictions/<split>.jsonl`` (one :class:`PredictionRow` a line) and its header
``predictions/<split>.header.json`` (:class:`PredictionsHeader`).

Plain data only: the metrics read these rows without importing torch or the decoders.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from seqcore.artifacts.base import UNVERSIONED, fields_error, read_versioned, write_versioned
from seqcore.config import BaselineConfig, ConfigError, DecodeConfig, section_from_dict
from seqcore.errors import UnreadableFile
from seqcore.jsonl import read_jsonl, write_jsonl


@dataclass(frozen=True)
class PredictionRow:
    """One line of predictions.jsonl: the best hypothesis and the rest of the n-best list."""

    id: str
    group: str
    source: str
    reference: str
    hypothesis: str
    tokens: list[int]
    pieces: list[str]
    score: float
    norm_score: float
    length: int
    eos: bool
    nbest: list[dict[str, object]]


def model_rows_path(predictions: str | Path) -> Path:
    """``predictions/<split>.model.jsonl``: the model's own outputs before any rescoring,
    beside the scored system's ``predictions/<split>.jsonl`` when the two differ (issue 52:
    the model's figures are measured on the model's output)."""
    return Path(predictions).with_suffix(".model.jsonl")


def header_path(predictions: str | Path) -> Path:
    """``predictions/<split>.header.json`` of ``predictions/<split>.jsonl``, and of the
    model's own rows ``predictions/<split>.model.jsonl`` (the same model and decode settings,
    before the rescoring), so those read and compare like any predictions file."""
    path = Path(predictions)
    if path.name.endswith(".model.jsonl"):
        path = path.with_name(path.name.removesuffix(".model.jsonl") + ".jsonl")
    return path.with_suffix(".header.json")


@dataclass(frozen=True)
class BaselineSettings(BaselineConfig):
    """The settings the baseline's predictions were made with (the ``decode`` field of
    ``baseline/<split>.header.json``): its config, ``kind`` resolved to the tool that made
    them, and that tool's search beam. Every field is written; a header read back needs all."""

    beam: int = 0

    @classmethod
    def of(cls, cfg: BaselineConfig, tool: str, beam: int) -> BaselineSettings:
        return cls(**asdict(cfg) | {"kind": tool, "beam": beam})


#: What a predictions header's ``decode`` field holds: the model's decode section, or the
#: baseline's settings (told apart by ``kind``, which only the baseline's carry).
DecodeSettings = DecodeConfig | BaselineSettings


#: Decode keys added after headers were written, with the value every older header meant:
#: ``tuned_on`` (issue 52) did not exist, so its settings were set by hand.
ADDED_DECODE_KEYS = {"tuned_on": "none"}


def decode_settings(raw: Any) -> DecodeSettings:
    """The typed ``decode`` field of a header (ConfigError naming the key otherwise); a key
    of ``ADDED_DECODE_KEYS`` that an older header lacks takes its old meaning."""
    cls = BaselineSettings if isinstance(raw, dict) and "kind" in raw else DecodeConfig
    if cls is DecodeConfig and isinstance(raw, dict):
        raw = ADDED_DECODE_KEYS | raw
    return section_from_dict(cls, raw, "decode")


@dataclass(frozen=True)
class PredictionsHeader:
    """What the decode stage records next to the predictions.

    A decoded split has ``signature``, ``tokenizer_sha256`` and ``trained_on``; ``task: lm``
    decodes nothing and writes ``task`` and ``note``. Nothing in it says where or when it was
    made (the MLflow run records the environment): the same inputs give the same bytes on
    any machine of the same kind.
    Fields that are None are not written (each kind of header keeps its bytes).

    Attributes:
        decode: the settings the predictions were made with: the decode section
            (``cfg.decode``), or the baseline's (:class:`BaselineSettings`).
        trained_on: where the model was trained (device_kind, nproc, backend; issue 16).
    """

    #: Written since 2026-12-05; a header without the field reads as version 1.
    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    decode: DecodeSettings
    model_sha256: str
    rows: int
    signature: str | None = None
    trained_on: dict[str, Any] | None = None
    tokenizer_sha256: dict[str, str] | None = None
    task: str | None = None
    note: str | None = None

    @property
    def rescored(self) -> bool:
        """Whether the rows are the model's outputs re-ranked with the baseline's n-best
        (``decode.rescore: baseline``, not ignored): the model's own rows are then in
        :func:`model_rows_path`."""
        return isinstance(self.decode, DecodeConfig) and self.decode.rescore == "baseline" \
            and self.note is None

    def save(self, predictions: str | Path) -> None:
        """Write the header of the predictions file ``predictions``."""
        write_versioned(header_path(predictions), self.SCHEMA_VERSION,
                        {k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def load(cls, predictions: str | Path) -> PredictionsHeader:
        """Read the header of the predictions file ``predictions``."""
        path = header_path(predictions)
        data = read_versioned(path, "predictions header", cls.SCHEMA_VERSION)
        try:
            return cls(**data | {"decode": decode_settings(data.get("decode"))})
        except (TypeError, ConfigError) as err:
            raise fields_error(path, "predictions header", err) from None


@dataclass(frozen=True)
class Predictions:
    """The rows of one predictions file (the header versions them)."""

    rows: list[PredictionRow] = field(default_factory=list)

    def save(self, path: str | Path) -> None:
        """JSONL, keys sorted, floats as Python prints them: the same run gives the same bytes."""
        write_jsonl(self.rows, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> Predictions:
        try:
            return cls(read_jsonl(Path(path), PredictionRow))
        except TypeError as err:
            raise fields_error(path, "predictions", err) from None

    @classmethod
    def load_checked(cls, path: str | Path,
                     header: PredictionsHeader | None = None) -> tuple[Predictions, PredictionsHeader]:
        """The rows of ``path`` and its header (read unless given), their counts checked
        against each other: a file emptied or cut at a line end after its stage wrote it is
        named in one line, not scored as a smaller set (issue 54)."""
        header = header or PredictionsHeader.load(path)
        preds = cls.load(path)
        if len(preds.rows) != header.rows:
            raise UnreadableFile(f"{path}: {len(preds.rows)} rows, its header records "
                                 f"{header.rows}; re-run the stage that writes it (dvc repro) "
                                 "or restore it (dvc checkout)")
        return preds, header
