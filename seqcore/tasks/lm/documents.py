"""Plain-text documents for the ``lm`` task, and a character vocabulary for them.

A document is one text whose end resets the language model's state. Documents come from a
folder (one per file), from a text file (separated by blank lines) or, by default, from
CMUdict: its entries as a character stream in dictionary order, one document per initial
letter. :func:`read_corpus` reads them under the data policy of the parallel tasks: a line
that is not UTF-8 is a bad row (``data.bad_rows``), and ``data.max_pairs`` keeps the first N
rows (text lines; CMUdict entries).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from seqcore.contract import SpecialIds
from seqcore.data.readers import read_lines
from seqcore.data.records import BadRowError, Reject


@dataclass(frozen=True)
class Document:
    """One document: a name (file, paragraph number or initial letter) and its text."""

    name: str
    text: str


def read_documents(path: Path) -> list[Document]:
    """Folder: one document per file (sorted by name); file: documents separated by blank lines."""
    return read_corpus(path, "text", "skip").documents


def cmudict_documents(path: Path) -> list[Document]:
    """CMUdict entries (``word PH1 PH2 ...``, comments dropped) grouped by initial letter.

    Dictionary order is kept inside a document and across documents (first appearance).
    """
    return read_corpus(path, "cmudict", "skip").documents


@dataclass(frozen=True)
class Corpus:
    """Documents read under the data policy.

    Attributes:
        documents: in file order (CMUdict: by first appearance of the initial letter).
        rejects: every dropped line (file:line and reason), in file order.
        rows: the rows kept (text lines; CMUdict entries), at most ``max_pairs``.
    """

    documents: list[Document]
    rejects: list[Reject]
    rows: int


@dataclass(frozen=True)
class _Line:
    """One decoded line: the document it belongs to (a folder's file) and where it is."""

    file: str
    line: int
    text: str


def _decoded_lines(path: Path, name: str, policy: Literal["strict", "skip"],
                   rejects: list[Reject]) -> Iterator[_Line]:
    """Each line of a file as the pair readers read it (seqcore.data.readers.read_lines: no
    line end, no BOM); a line that is not UTF-8 is a bad row (strict: BadRowError naming
    file:line; skip: recorded in ``rejects`` and dropped)."""
    for lineno, text, _, utf8 in read_lines(Path(path)):
        if utf8:
            yield _Line(name, lineno, text)
            continue
        reject = Reject(name, lineno, "invalid-utf8", text)
        if policy == "strict":
            raise BadRowError(reject)
        rejects.append(reject)


def _is_row(text: str, cmudict: bool) -> bool:
    """A line that counts against ``max_pairs``: a CMUdict entry, or a non-blank text line."""
    if cmudict:
        entry = text.split("#", 1)[0].strip()
        return bool(entry) and not entry.startswith(";;;")
    return bool(text.strip())


def read_corpus(path: Path, source: Literal["cmudict", "text"],
                policy: Literal["strict", "skip"], max_rows: int = 0,
                label: str | None = None) -> Corpus:
    """The lm task's documents under the bad-row policy, capped at ``max_rows`` rows (0 = all).

    ``source`` cmudict: entries grouped by initial letter (:func:`cmudict_documents`); text: a
    folder (one document per file, sorted by name) or a file (documents separated by blank
    lines). ``label`` names the file in rejects and errors (default ``path``).

    Raises:
        BadRowError: under the strict policy, at the first line that is not UTF-8.
    """
    path, rejects = Path(path), []
    name = label or str(path)
    files = [(p, f"{name}/{p.name}") for p in sorted(path.iterdir()) if p.is_file()] \
        if path.is_dir() else [(path, name)]
    kept: list[_Line] = []
    rows = 0
    for file, file_name in files:
        # Past the cap lines are still decoded: the policy covers the whole file, as in
        # prepare (seqcore.data.prepare.prepare_pairs reads every row, then keeps N).
        for line in _decoded_lines(file, file_name, policy, rejects):
            if not max_rows or rows < max_rows:
                rows += _is_row(line.text, source == "cmudict")
                kept.append(line)
    return Corpus(_documents(kept, source, path), rejects, rows)


def _documents(lines: list[_Line], source: str, path: Path) -> list[Document]:
    """Group kept lines into documents (see :func:`read_corpus`)."""
    if source == "cmudict":
        return _cmudict_groups(line.text for line in lines)
    if path.is_dir():
        by_file: dict[str, list[str]] = {}
        for line in lines:
            by_file.setdefault(line.file, []).append(line.text)
        return [Document(Path(f).name, "\n".join(texts)) for f, texts in by_file.items()]
    return _paragraphs((line.text for line in lines), path.name)


def _cmudict_groups(lines: Iterator[str] | list[str]) -> list[Document]:
    groups: dict[str, list[str]] = {}
    for line in lines:
        entry = line.split("#", 1)[0].strip()
        if not entry or entry.startswith(";;;"):
            continue
        groups.setdefault(entry[0].lower(), []).append(entry)
    return [Document(letter, "\n".join(entries)) for letter, entries in groups.items()]


def _paragraphs(lines: Iterator[str] | list[str], name: str) -> list[Document]:
    docs: list[Document] = []
    block: list[str] = []
    for line in [*lines, ""]:
        if line.strip():
            block.append(line)
        elif block:
            docs.append(Document(f"{name}#{len(docs)}", "\n".join(block)))
            block = []
    return docs


def split_documents(
    docs: list[Document], dev_fraction: float, test_fraction: float
) -> tuple[list[Document], list[Document], list[Document]]:
    """Cut each document into train | dev | test by character position (the tail is held out).

    Holding out the tail of every document (rather than whole documents) keeps all initial
    letters in training while dev/test text is never seen.
    """
    out: tuple[list[Document], list[Document], list[Document]] = ([], [], [])
    for d in docs:
        n = len(d.text)
        a = n - round(n * (dev_fraction + test_fraction))
        b = n - round(n * test_fraction)
        for part, (lo, hi) in zip(out, ((0, a), (a, b), (b, n))):
            if hi > lo:
                part.append(Document(d.name, d.text[lo:hi]))
    return out


class CharVocab:
    """Character vocabulary with the pinned special ids first; unseen characters map to UNK."""

    def __init__(self, chars: list[str], ids: SpecialIds) -> None:
        self.ids = ids
        self.chars = sorted(set(chars))
        n_special = 4
        if sorted((ids.pad, ids.unk, ids.bos, ids.eos)) != list(range(n_special)):
            raise ValueError(f"special ids must be 0..3 for a char vocabulary, got {ids}")
        self.index = {c: i + n_special for i, c in enumerate(self.chars)}

    @classmethod
    def build(cls, docs: list[Document], ids: SpecialIds) -> CharVocab:
        return cls([c for d in docs for c in d.text], ids)

    @property
    def size(self) -> int:
        return len(self.chars) + 4

    def encode(self, text: str) -> list[int]:
        return [self.index.get(c, self.ids.unk) for c in text]

    def sha256(self) -> str:
        """Hash of the vocabulary (its characters in id order and the special ids)."""
        blob = json.dumps({"chars": self.chars, "ids": [self.ids.pad, self.ids.unk, self.ids.bos,
                                                        self.ids.eos]}, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()
