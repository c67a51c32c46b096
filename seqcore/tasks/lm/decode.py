"""The lm task's piece of the decode stage: nothing to decode."""

from __future__ import annotations

from pathlib import Path

from seqcore.artifacts.predictions import Predictions, PredictionsHeader
from seqcore.config import Config
from seqcore.hashing import sha256_file
from seqcore.tasks.base import StageIO


def decode(cfg: Config, io: StageIO) -> None:
    """The (empty) predictions and a header naming the model and the reason."""
    out = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    Predictions([]).save(out)
    PredictionsHeader(cfg.decode, sha256_file(Path(cfg.paths.model)), 0,
                      task="lm",
                      note="task lm: nothing to decode; evaluate reports perplexity"
                      ).save(out)
    io.note("task lm: nothing to decode")
