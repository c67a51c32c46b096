"""``reports/coverage.json``: how well the tokenizers cover the data (the tokenizer stage's
figures, read by evaluate for the UNK rates it reports next to the scores).

One :class:`SplitCoverage` per split (UNK statistics per side, rows dropped for length) and
each side's tokenizer type and vocabulary size. Plain data: the figures are computed in
seqcore.data.coverage. The file carries no version field (bytes kept); a missing one reads
as version 1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from seqcore.artifacts.base import UNVERSIONED, fields_error, read_versioned, write_json

#: The key of the tokenizer table, next to the split names.
TOKENIZER_KEY = "tokenizer"


@dataclass(frozen=True)
class UnkStats:
    """UNK counts of one side of one split.

    Attributes:
        rows: texts encoded; rows_with_unk: those holding at least one UNK.
        tokens: tokens of all texts (no BOS/EOS); unk_tokens: UNK tokens among them.
    """

    rows: int
    rows_with_unk: int
    tokens: int
    unk_tokens: int

    @property
    def rate(self) -> float:
        """UNK tokens per token (0.0 for no tokens: there is nothing uncovered)."""
        return self.unk_tokens / self.tokens if self.tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The counts and the rounded rate (as written, and as evaluate reports them)."""
        return asdict(self) | {"unk_rate": round(self.rate, 6)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnkStats:
        """The counts of :meth:`as_dict` (the rate is derived from them, not read)."""
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class SplitCoverage:
    """Coverage of one split: UNK statistics per side and rows dropped for length."""

    src: UnkStats
    tgt: UnkStats
    read: int
    kept: int
    dropped_for_length: int

    @property
    def drop_rate(self) -> float:
        return self.dropped_for_length / self.read if self.read else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"src": self.src.as_dict(), "tgt": self.tgt.as_dict(), "read": self.read,
                "kept": self.kept, "dropped_for_length": self.dropped_for_length,
                "drop_rate": round(self.drop_rate, 6)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SplitCoverage:
        """What :meth:`as_dict` wrote (the drop rate is derived, not read)."""
        return cls(UnkStats.from_dict(data["src"]), UnkStats.from_dict(data["tgt"]),
                   data["read"], data["kept"], data["dropped_for_length"])


@dataclass(frozen=True)
class SideVocab:
    """One side's tokenizer as the coverage file names it."""

    model_type: str
    vocab_size: int


@dataclass(frozen=True)
class Coverage:
    """The parsed ``reports/coverage.json``: coverage by split and the tokenizer by side."""

    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    splits: dict[str, SplitCoverage]
    tokenizer: dict[str, SideVocab]

    def save(self, path: str | Path) -> None:
        write_json(path, {s: c.as_dict() for s, c in self.splits.items()} | {
            TOKENIZER_KEY: {side: asdict(v) for side, v in self.tokenizer.items()}})

    @classmethod
    def load(cls, path: str | Path) -> Coverage:
        """Read and check a coverage file (ArtifactError naming it when unreadable)."""
        data = read_versioned(path, "coverage", cls.SCHEMA_VERSION)
        try:
            tokenizer = {side: SideVocab(**v) for side, v in data.pop(TOKENIZER_KEY).items()}
            return cls({s: SplitCoverage.from_dict(c) for s, c in data.items()}, tokenizer)
        except (KeyError, TypeError) as err:
            raise fields_error(path, "coverage", err) from None
