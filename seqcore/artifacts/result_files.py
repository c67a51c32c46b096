"""The files of one pipeline result, as the audit and a task's audit checks read them.

No stage imports this module: each stage loads its own inputs through their classes.
"""

from __future__ import annotations

import functools
from pathlib import Path

from seqcore.artifacts.model_file import ModelFile, ModelMeta
from seqcore.artifacts.predictions import PredictionsHeader
from seqcore.artifacts.reports import Metrics, Results
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config


class ResultFiles:
    """The result under ``cfg.paths``, each file loaded when a check first asks for it.

    A file that loads is kept; one that is missing or unreadable raises from its property
    every time it is asked for (a failure is not kept), so exactly the checks that read it
    fail and the rest still run.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    @property
    def predictions_path(self) -> Path:
        """``predictions/<decode.split>.jsonl``."""
        return Path(self.cfg.paths.predictions) / f"{self.cfg.decode.split}.jsonl"

    @functools.cached_property
    def tokenizer_contract(self) -> TokenizerContract:
        return TokenizerContract.load(self.cfg.paths.tokenizer_contract)

    @functools.cached_property
    def header(self) -> PredictionsHeader:
        return PredictionsHeader.load(self.predictions_path)

    @functools.cached_property
    def metrics(self) -> Metrics:
        """The numbers (``reports/metrics.json``)."""
        return Metrics.load(self.cfg.paths.metrics)

    @functools.cached_property
    def results(self) -> Results:
        """The text results: signatures, hashes (``reports/results.json``)."""
        return Results.load(self.cfg.paths.results)

    @functools.cached_property
    def meta(self) -> ModelMeta:
        return ModelFile.load(self.cfg.paths.model).meta
