"""The pair tasks' piece of the train stage: an encoder-decoder on the encoded pairs."""

from __future__ import annotations

from pathlib import Path

import torch

from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config
from seqcore.data.examples import read_encoded
from seqcore.signature import contract_signature
from seqcore.tasks.base import StageIO
from seqcore.training.distributed import World
from seqcore.training.setups import Setup, seq2seq_setup


def training_setup(cfg: Config, io: StageIO, device: torch.device, world: World) -> Setup:
    """Read the encoded train/dev splits and the tokenizer contract; build the setup."""
    enc = Path(cfg.paths.encoded)
    data = (read_encoded(enc, "train"), read_encoded(enc, "dev"))
    tc = TokenizerContract.load(cfg.paths.tokenizer_contract)
    # the tokenizer's fields as params.yaml states them, then the loss: params that disagree
    # with the tokenizer contract (an upstream stage not re-run) stop here
    sig = io.contract(contract_signature(cfg, tc), "params.yaml", tc)
    return seq2seq_setup(cfg, tc, sig, data, device, world)
