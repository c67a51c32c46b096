"""The evaluate stage's records: ``reports/metrics.json`` (numbers), ``reports/results.json``
(texts: signatures, hashes, the checkpoint folder) and ``reports/headline.json`` (the three
figures the README quotes).

metrics.json and results.json are open tables (their keys depend on the task and the
evaluation settings), so they are typed as one mapping each with named accessors for the keys
other stages read; none carries a version field (bytes kept), a missing one reads as 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from seqcore.artifacts.base import (
    UNVERSIONED, read_versioned, write_json, write_versioned)


@dataclass(frozen=True)
class Metrics:
    """``reports/metrics.json``: numbers only, so `dvc metrics diff` lists numbers (nested
    tables such as UNK rates by side are numbers too)."""

    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    values: dict[str, Any]

    def count(self, key: str) -> Any:
        """A count such as ``examples`` or ``<split>_sequences`` (None when absent)."""
        return self.values.get(key)

    def save(self, path: str | Path) -> None:
        write_json(path, self.values)

    @classmethod
    def load(cls, path: str | Path) -> Metrics:
        return cls(read_versioned(path, "metrics", cls.SCHEMA_VERSION))


@dataclass(frozen=True)
class Results:
    """``reports/results.json``: the text results (result and contract signatures, hashes, the split,
    the checkpoint folder, the metric signatures and null reasons)."""

    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    texts: dict[str, str]

    @property
    def signature(self) -> str | None:
        """The result signature of the figures (seqcore.signature.result_fields)."""
        return self.texts.get("signature")

    @property
    def contract_signature(self) -> str | None:
        """The contract signature the results were made under."""
        return self.texts.get("contract_signature")

    @property
    def checkpoints(self) -> str:
        """The checkpoint folder the model came from (KeyError for a task without one)."""
        return self.texts["checkpoints"]

    def save(self, path: str | Path) -> None:
        write_versioned(path, self.SCHEMA_VERSION, self.texts)

    @classmethod
    def load(cls, path: str | Path) -> Results:
        return cls(read_versioned(path, "results", cls.SCHEMA_VERSION))


@dataclass(frozen=True)
class Headline:
    """``reports/headline.json``: word and token error rates and perplexity.

    ``task: lm`` decodes nothing: its headline has the perplexity alone (``error_rates``
    False, and ``wer``/``per`` are not written). With a baseline (issue 28), ``base_wer`` and
    ``base_per`` are its WER and PER on the same rows, so `dvc exp show` sets them side by side.
    """

    SCHEMA_VERSION: ClassVar[int] = UNVERSIONED

    ppl: float | None
    wer: float | None = None
    per: float | None = None
    error_rates: bool = True
    base_wer: float | None = None
    base_per: float | None = None

    def save(self, path: str | Path) -> None:
        rates = {"wer": self.wer, "per": self.per} if self.error_rates else {}
        base = {"base_wer": self.base_wer, "base_per": self.base_per} \
            if self.base_wer is not None else {}
        write_json(path, rates | base | {"ppl": self.ppl})

    @classmethod
    def load(cls, path: str | Path) -> Headline:
        data = read_versioned(path, "headline", cls.SCHEMA_VERSION)
        return cls(data.get("ppl"), data.get("wer"), data.get("per"), "wer" in data,
                   data.get("base_wer"), data.get("base_per"))
