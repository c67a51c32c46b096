"""The data stages' manifests: ``data/prepared/manifest.json`` (prepare: where the raw file
came from, the data settings, each split file's hash and the row counts) and
``data/encoded/manifest.json`` (tokenizer: rows read and kept per split, the length limits).

Neither file carries a version field (bytes kept); a missing one reads as version 1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from seqcore.artifacts.base import UNVERSIONED, fields_error, read_versioned, write_versioned

#: The manifest's name inside its data folder (``paths.prepared``, ``paths.encoded``).
MANIFEST = "manifest.json"

#: Reject counts by action, then reason (seqcore.data.records.count_rejects).
RejectCounts = dict[str, dict[str, int]]


def manifest_path(folder: str | Path) -> Path:
    """``<folder>/manifest.json``."""
    return Path(folder) / MANIFEST


@dataclass(frozen=True)
class RawSource:
    """The raw file prepare read: its path, sha256, ``data.source`` and the label rejects use
    (the user's own file name, so line numbers agree)."""

    path: str
    sha256: str
    source: str
    label: str


@dataclass(frozen=True)
class PrepareCounts:
    """Rows of the prepare step (seqcore.data.prepare.Prepared.summary).

    Attributes:
        read: pairs the reader kept; kept: after ``data.max_pairs`` (a seeded random sample
            of whole groups for the pair tasks; the first rows for ``task: lm``).
        rows, groups: rows and distinct groups by split.
        rejects: every dropped, altered or ignored raw line, by action then reason.
        variants: sources with several targets (seqcore.data.records.variant_counts).
    """

    read: int
    kept: int
    cut_by_max_pairs: int
    rows: dict[str, int]
    groups: dict[str, int]
    rejects: RejectCounts
    variants: dict[str, int]


@dataclass(frozen=True)
class PreparedManifest:
    """The parsed ``data/prepared/manifest.json`` (the counts sit at the top level of the file).

    Attributes:
        settings: the ``data`` section prepare ran with, less ``data.sha256`` (fetch's).
        sha256: each prepared split file's sha256, by split.
        rejects_file: where the rejected rows are listed (``paths.rejects``).
    """

    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    raw: RawSource
    settings: dict[str, Any]
    sha256: dict[str, str]
    rejects_file: str
    counts: PrepareCounts

    def save(self, path: str | Path) -> None:
        write_versioned(path, self.SCHEMA_VERSION, {
            "raw": asdict(self.raw), "settings": self.settings, "sha256": self.sha256,
            "rejects_file": self.rejects_file, **asdict(self.counts)})

    @classmethod
    def load(cls, path: str | Path) -> PreparedManifest:
        """Read and check a prepared-data manifest (ArtifactError naming it when unreadable)."""
        data = read_versioned(path, "prepared manifest", cls.SCHEMA_VERSION)
        try:
            counts = PrepareCounts(**{f.name: data.pop(f.name) for f in fields(PrepareCounts)})
            return cls(RawSource(**data.pop("raw")), counts=counts, **data)
        except (KeyError, TypeError) as err:
            raise fields_error(path, "prepared manifest", err) from None


@dataclass(frozen=True)
class SplitCounts:
    """One split through the tokenizer stage: pairs read, examples kept, targets cut short
    (``sequence.overlong: truncate``) and the length rejects by action then reason."""

    read: int
    kept: int
    truncated_targets: int
    rejects: RejectCounts


@dataclass(frozen=True)
class EncodedManifest:
    """The parsed ``data/encoded/manifest.json``: counts by split and the length limits.

    Attributes:
        rejects: the length rejects of all splits, by action then reason.
        rejects_file: where they are listed (``paths.length_rejects``).
    """

    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    counts: dict[str, SplitCounts]
    rejects: RejectCounts
    rejects_file: str
    max_src_len: int
    max_tgt_len: int
    overlong: str

    def save(self, path: str | Path) -> None:
        write_versioned(path, self.SCHEMA_VERSION, asdict(self))

    @classmethod
    def load(cls, path: str | Path) -> EncodedManifest:
        """Read and check an encoded-data manifest (ArtifactError naming it when unreadable)."""
        data = read_versioned(path, "encoded manifest", cls.SCHEMA_VERSION)
        try:
            counts = {s: SplitCounts(**c) for s, c in data.pop("counts").items()}
            return cls(counts, **data)
        except (KeyError, TypeError) as err:
            raise fields_error(path, "encoded manifest", err) from None
