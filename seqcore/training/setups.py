"""What a task needs to train: model, feed, training contract, final-model writer and report.

The train stage builds one ``Setup`` per task and runs the same loop on it: ``seq2seq_setup``
for g2p/parallel (encoded pairs and the tokenizer contract); the lm task's ``lm_setup`` is in
its wing (seqcore.tasks.lm.setup).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqcore.artifacts.model_file import ModelFile, ModelInfo, ModelMeta
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, SequenceConfig
from seqcore.data.examples import Example
from seqcore.models import build_model
from seqcore.signature import training_contract
from seqcore.training.dev_decode import DevScores
from seqcore.training.distributed import World
from seqcore.training.feeds import Feed, Seq2SeqFeed


@dataclass(frozen=True)
class Setup:
    """One task's training ingredients.

    Attributes:
        save: writes the final model file for the given metadata; returns its sha256.
        report: extra metrics computed on the final model (e.g. lm perplexities).
        held_out: the NLL behind each of those perplexities, in total and per document, by
            metrics key (the lm task's seqcore.tasks.lm.feed.StreamNLL; ``lm_report`` of it is
            ``report()``; none for the pair tasks).
        show_dev: a few dev words with their output in the last dev decoding (issue 52), as
            lines for the progress log: ``show_dev(scores, count)`` (none where nothing
            decodes).
    """

    model: nn.Module
    feed: Feed
    contract: dict[str, Any]
    d_model: int
    signature: str
    save: Callable[[Path, ModelMeta], str]
    report: Callable[[], dict[str, Any]]
    held_out: Callable[[], dict[str, Any]] = dict
    show_dev: Callable[[DevScores, int], list[str]] = lambda scores, count: []


CPU = torch.device("cpu")


def position_range(seq: SequenceConfig) -> int:
    """Positions the model embeds: the longest source or decoder input (BOS + target, EOS
    counted by max_tgt_len), plus one spare. It comes from the sequence contract alone, so a
    decode parameter never changes the trained model (issue 12); decoding caps generation at
    ``decode.max_len``, which the decode stage checks against this range."""
    return max(seq.max_src_len, seq.max_tgt_len) + 1


def seq2seq_setup(
    cfg: Config, tc: TokenizerContract, sig: str, data: tuple[list[Example], list[Example]],
    device: torch.device = CPU, world: World = World(),
) -> Setup:
    """Encoder-decoder training on encoded pairs under the tokenizer contract ``tc``.

    The model is built on the CPU (the same initial weights on every device) and moved to
    ``device``; the feed draws this rank's shard of the batches.
    """
    ids = tc.special_ids
    max_len = position_range(cfg.sequence)
    info = ModelInfo(cfg.model, tc.src.vocab_size, tc.tgt.vocab_size, ids.pad, max_len)
    model = build_model(info.model, info.src_vocab, info.tgt_vocab, info.pad_id,
                        info.max_len).to(device)
    d_model = cfg.model.transformer.d_model if cfg.model.family == "transformer" else \
        cfg.model.rnn.hidden
    return Setup(model, Seq2SeqFeed(data, ids, cfg.sequence, cfg.train, device, world),
                 training_contract(cfg, tc), d_model, sig,
                 lambda path, meta: ModelFile(model.state_dict(), meta, info).save(path), dict)
