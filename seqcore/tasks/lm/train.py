"""The lm task's piece of the train stage: the stateful RNN LM on the documents."""

from __future__ import annotations

import torch

from seqcore.config import Config
from seqcore.tasks import TaskError
from seqcore.tasks.base import StageIO
from seqcore.tasks.lm.corpus import lm_corpus
from seqcore.tasks.lm.setup import lm_setup
from seqcore.training.distributed import World
from seqcore.training.setups import Setup


def training_setup(cfg: Config, io: StageIO, device: torch.device, world: World) -> Setup:
    """Read the documents (saying how many lines data.bad_rows: skip dropped); build the setup.

    Raises:
        TaskError: more streams (train.batch_size) than documents.
    """
    corpus = lm_corpus(cfg)
    if corpus.rejects:
        first = corpus.rejects[0]
        io.note(f"{len(corpus.rejects)} lines dropped (data.bad_rows: skip), the first "
                f"{first.where()}: {first.reason}")
    try:
        return lm_setup(cfg, corpus.documents, device, world)
    except ValueError as err:  # more streams (train.batch_size) than documents
        raise TaskError(str(err)) from None
