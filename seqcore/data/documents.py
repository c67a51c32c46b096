"""Plain-text documents for the ``lm`` task, and a character vocabulary for them.

A document is one text whose end resets the language model's state. Documents come from a
folder (one per file), from a text file (separated by blank lines) or, by default, from
CMUdict: its entries as a character stream in dictionary order, one document per initial
letter.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from seqcore.contract import SpecialIds


@dataclass(frozen=True)
class Document:
    """One document: a name (file, paragraph number or initial letter) and its text."""

    name: str
    text: str


def read_documents(path: Path) -> list[Document]:
    """Folder: one document per file (sorted by name); file: documents separated by blank lines."""
    path = Path(path)
    if path.is_dir():
        return [Document(p.name, p.read_text(encoding="utf-8"))
                for p in sorted(path.iterdir()) if p.is_file()]
    docs: list[Document] = []
    lines: list[str] = []
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        if line.strip():
            lines.append(line)
        elif lines:
            docs.append(Document(f"{path.name}#{len(docs)}", "\n".join(lines)))
            lines = []
    return docs


def cmudict_documents(path: Path) -> list[Document]:
    """CMUdict entries (``word PH1 PH2 ...``, comments dropped) grouped by initial letter.

    Dictionary order is kept inside a document and across documents (first appearance).
    """
    groups: dict[str, list[str]] = {}
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        entry = line.split("#", 1)[0].strip()
        if not entry or entry.startswith(";;;"):
            continue
        groups.setdefault(entry[0].lower(), []).append(entry)
    return [Document(letter, "\n".join(entries)) for letter, entries in groups.items()]


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
