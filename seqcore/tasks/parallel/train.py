"""The pair tasks' piece of the train stage: an encoder-decoder on the encoded pairs."""

from __future__ import annotations

from pathlib import Path

import torch

from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config
from seqcore.data.examples import read_examples
from seqcore.tasks.base import StageIO
from seqcore.training.distributed import World
from seqcore.training.setups import Setup, seq2seq_setup


def training_setup(cfg: Config, io: StageIO, device: torch.device, world: World) -> Setup:
    """Read the encoded train/dev splits and the tokenizer contract; build the setup."""
    enc = Path(cfg.paths.encoded)
    data = (read_examples(enc / "train.jsonl"), read_examples(enc / "dev.jsonl"))
    tc = TokenizerContract.load(cfg.paths.tokenizer_contract)
    sig = io.contract(tc.signature, f"{cfg.paths.tokenizer}/contract.json", tc)
    return seq2seq_setup(cfg, tc, sig, data, device, world)
