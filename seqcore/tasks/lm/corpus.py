"""The lm task's documents, read under the data policy (train and evaluate read them)."""

from __future__ import annotations

from pathlib import Path

from seqcore.config import Config
from seqcore.data.records import BadRowError
from seqcore.tasks import TaskError
from seqcore.tasks.lm.documents import Corpus, Document, read_corpus


def lm_corpus(cfg: Config) -> Corpus:
    """The lm task's documents: CMUdict by initial letter, or the user's text (``data.path``).

    Raises:
        TaskError: under ``data.bad_rows: strict``, at the first bad line (file:line).
    """
    d = cfg.data
    path, source = (Path(cfg.paths.raw), "cmudict") if d.source == "cmudict" else \
        (Path(d.path), "text")
    try:
        return read_corpus(path, source, d.bad_rows, d.max_pairs, d.path or None)
    except BadRowError as err:
        raise TaskError(f"bad row (data.bad_rows: strict): {err}; fix the line, or set "
                        "data.bad_rows: skip to drop such lines") from None


def lm_documents(cfg: Config) -> list[Document]:
    return lm_corpus(cfg).documents
