"""The pair tasks' piece of the train stage: an encoder-decoder on the encoded pairs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config
from seqcore.data.examples import read_encoded
from seqcore.signature import contract_signature
from seqcore.tasks.base import StageIO
from seqcore.tokenizer import load_tokenizers
from seqcore.training.dev_decode import shown_lines
from seqcore.training.distributed import World
from seqcore.training.feeds import Seq2SeqFeed
from seqcore.training.setups import Setup, seq2seq_setup


def training_setup(cfg: Config, io: StageIO, device: torch.device, world: World) -> Setup:
    """Read the encoded train/dev splits and the tokenizer contract; build the setup."""
    enc = Path(cfg.paths.encoded)
    data = (read_encoded(enc, "train"), read_encoded(enc, "dev"))
    tc = TokenizerContract.load(cfg.paths.tokenizer_contract)
    # the tokenizer's fields as params.yaml states them, then the loss: params that disagree
    # with the tokenizer contract (an upstream stage not re-run) stop here
    sig = io.contract(contract_signature(cfg, tc), "params.yaml", tc)
    setup = seq2seq_setup(cfg, tc, sig, data, device, world)
    if not cfg.train.dev_decode_words:
        return setup
    # the dev words the progress lines show, as text (the model files the contract names)
    render = load_tokenizers(Path(cfg.paths.tokenizer_contract), None, tc).tgt.decode
    assert isinstance(setup.feed, Seq2SeqFeed)
    sample = setup.feed.sample
    return replace(setup, show_dev=lambda scores, count: shown_lines(sample, scores, count,
                                                                     render))
