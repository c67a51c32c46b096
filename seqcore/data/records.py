"""Row types shared by the readers, the splitter and the manifest."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from seqcore.errors import UnreadableFile
from seqcore.hashing import sha256_file
from seqcore.jsonl import read_jsonl, write_jsonl
from seqcore.text import CONTROL_CHARS


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
    # dropped: the row is gone; altered: kept after a lossless fix (BOM, CRLF) or a cut
    # (truncation); ignored: not a row at all (blank line, CMUdict comment).
    action: str = "dropped"

    def where(self) -> str:
        """``file:line``."""
        return f"{self.file}:{self.line}"


ACTIONS = ("dropped", "altered", "ignored")


@dataclass
class ReadResult:
    """What a reader produced: kept pairs plus every dropped or altered row."""

    pairs: list[Pair] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)

    def counts(self) -> dict[str, dict[str, int]]:
        """Counts by action then reason, sorted for stable JSON."""
        return count_rejects(self.rejects)


def count_rejects(rejects: list[Reject]) -> dict[str, dict[str, int]]:
    """Counts by action then reason, sorted for stable JSON."""
    out: dict[str, Counter[str]] = {action: Counter() for action in ACTIONS}
    for r in rejects:
        out[r.action][r.reason] += 1
    return {action: dict(sorted(c.items())) for action, c in out.items()}


def variant_counts(pairs: list[Pair]) -> dict[str, int]:
    """How many sources have several targets (kept as variants), and how those are grouped.

    Returns:
        sources_with_variants, variant_rows (rows of such sources), and
        sources_in_several_groups (sources whose rows a user's group column puts in different
        groups, so they may land in different splits).
    """
    targets: dict[str, set[str]] = {}
    groups: dict[str, set[str]] = {}
    rows: Counter[str] = Counter()
    for p in pairs:
        targets.setdefault(p.source, set()).add(p.target)
        groups.setdefault(p.source, set()).add(p.group)
        rows[p.source] += 1
    multi = [s for s, t in targets.items() if len(t) > 1]
    return {"sources_with_variants": len(multi), "variant_rows": sum(rows[s] for s in multi),
            "sources_in_several_groups": sum(len(g) > 1 for g in groups.values())}


class BadRowError(ValueError):
    """Raised under the strict policy at the first bad row."""

    def __init__(self, reject: Reject) -> None:
        super().__init__(f"{reject.where()}: {reject.reason}: {reject.text!r}")
        self.reject = reject


def write_pairs(pairs: list[Pair], path: Path) -> None:
    """Prepared pairs as JSONL, keys sorted (stable bytes)."""
    write_jsonl(pairs, path)


def read_prepared(folder: Path, split: str, sha256: str) -> list[Pair]:
    """The pairs of ``split`` in the prepare stage's ``folder``, checked against ``sha256``,
    the hash its manifest records (seqcore.artifacts.manifests.PreparedManifest).

    Raises:
        UnreadableFile: the file changed after prepare wrote it (emptied, cut, edited): one
            line naming it and what to do (issue 54).
    """
    path = Path(folder) / f"{split}.jsonl"
    got = sha256_file(path)
    if got != sha256:
        raise UnreadableFile(f"{path}: sha256 {got[:12]}, its manifest records {sha256[:12]}: "
                             "re-run prepare (dvc repro) or restore it (dvc checkout)")
    return read_pairs_jsonl(path)


def read_pairs_jsonl(path: Path) -> list[Pair]:
    """Pairs written by :func:`write_pairs`."""
    return read_jsonl(path, Pair)


def write_rejects(path: Path, rejects: list[Reject]) -> None:
    """TSV of every dropped or altered row: file, line, action, reason, text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("file\tline\taction\treason\ttext\n")
        for r in rejects:
            f.write(f"{r.file}\t{r.line}\t{r.action}\t{r.reason}\t{escape_text(r.text)}\n")


def escape_text(text: str) -> str:
    """A row as one printable TSV cell: backslash, TAB, CR and every other control character
    (Unicode category Cc, e.g. BEL) are written as escapes (issue 13: no raw control bytes)."""
    out = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\r", "\\r")
    return CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", out)
