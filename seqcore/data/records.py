"""Row types shared by the readers, the splitter and the manifest."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Pair:
    """One parallel example after normalisation.

    Attributes:
        id: stable identifier (CMUdict headword with its variant, the id column, or file:line).
        source: normalised source text.
        target: normalised target text (space-separated tokens for G2P).
        group: rows that must share a split (a word's pronunciations, a document's sentences).
        line: 1-based line number in the raw file.
    """

    id: str
    source: str
    target: str
    group: str
    line: int


@dataclass(frozen=True)
class Reject:
    """A raw row that was dropped or altered, with where and why."""

    file: str
    line: int
    reason: str
    text: str
    action: str = "dropped"  # dropped | altered


@dataclass
class ReadResult:
    """What a reader produced: kept pairs plus every dropped or altered row."""

    pairs: list[Pair] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)

    def counts(self) -> dict[str, dict[str, int]]:
        """Counts by action then reason, sorted for stable JSON."""
        out: dict[str, Counter[str]] = {"dropped": Counter(), "altered": Counter()}
        for r in self.rejects:
            out[r.action][r.reason] += 1
        return {action: dict(sorted(c.items())) for action, c in out.items()}


class BadRowError(ValueError):
    """Raised under the strict policy at the first bad row."""

    def __init__(self, reject: Reject) -> None:
        super().__init__(f"{reject.file}:{reject.line}: {reject.reason}: {reject.text!r}")
        self.reject = reject


def write_pairs(pairs: list[Pair], path: Path) -> None:
    """Prepared pairs as JSONL, keys sorted (stable bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for p in pairs:
            f.write(json.dumps(asdict(p), ensure_ascii=False, sort_keys=True) + "\n")


def read_pairs_jsonl(path: Path) -> list[Pair]:
    with open(path, encoding="utf-8") as f:
        return [Pair(**json.loads(line)) for line in f if line.strip()]


def write_rejects(path: Path, rejects: list[Reject]) -> None:
    """TSV of every dropped or altered row: file, line, action, reason, text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("file\tline\taction\treason\ttext\n")
        for r in rejects:
            text = r.text.replace("\\", "\\\\").replace("\t", "\\t").replace("\r", "\\r")
            f.write(f"{r.file}\t{r.line}\t{r.action}\t{r.reason}\t{text}\n")
