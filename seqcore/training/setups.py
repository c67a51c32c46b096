"""What a task needs to train: model, feed, training contract, final-model writer and report.

The train stage builds one ``Setup`` per task and runs the same loop on it: ``seq2seq_setup``
for g2p/parallel (encoded pairs and the tokenizer contract), ``lm_setup`` for the stateful
language model (plain-text documents and a character vocabulary built from the training part).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqcore import __version__
from seqcore.artifacts.model_file import LMInfo, ModelFile, ModelInfo, ModelMeta
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, SequenceConfig
from seqcore.contract import SpecialIds
from seqcore.data.documents import CharVocab, Document, split_documents
from seqcore.data.examples import Example
from seqcore.hashing import digest
from seqcore.models import build_model
from seqcore.models.rnn_lm import RNNLM, RNNLMShape
from seqcore.signature import (
    SIGNATURE_FORMAT, config_contract, format_signature, training_contract)
from seqcore.training.distributed import World
from seqcore.training.feeds import Feed, Seq2SeqFeed
from seqcore.training.lm import LMFeed, StreamNLL, stream_nll


@dataclass(frozen=True)
class Setup:
    """One task's training ingredients.

    Attributes:
        save: writes the final model file for the given metadata; returns its sha256.
        report: extra metrics computed on the final model (e.g. lm perplexities).
        held_out: the NLL behind each of those perplexities, in total and per document, by
            metrics key (``lm_report`` of it is ``report()``; none for the pair tasks).
    """

    model: nn.Module
    feed: Feed
    contract: dict[str, Any]
    d_model: int
    signature: str
    save: Callable[[Path, ModelMeta], str]
    report: Callable[[], dict[str, Any]]
    held_out: Callable[[], dict[str, StreamNLL]] = dict


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


def lm_signature_fields(cfg: Config, docs: list[Document], vocab: CharVocab,
                        norm: str) -> dict[str, str]:
    """The lm contract signature: the parallel tasks' fields (seqcore.signature), in their
    order, with what the lm task does in each.

    Source and target are the one character vocabulary; documents are never cut by length,
    only into truncated-BPTT segments (``trunc``); the text is read as it is (no
    normalisation or case folding; no ``stress`` field: nothing is stripped); ``norm`` is the feed's loss
    normalisation (sequence-mean falls back to token-mean in a stream).
    """
    chars = f"char-v{vocab.size}-{vocab.sha256()[:8]}"
    ids = vocab.ids
    return {"task": cfg.task, "data": digest([asdict(d) for d in docs])[:12],
            "src": chars, "tgt": chars, "pad": str(ids.pad), "unk": str(ids.unk),
            "bos": str(ids.bos), "eos": str(ids.eos), "maxsrc": "none", "maxtgt": "none",
            "trunc": f"bptt-{cfg.train.bptt_len}", "norm": "none", "case": "keep",
            "loss": norm, "ls": f"{cfg.sequence.label_smoothing:g}",
            "fmt": str(SIGNATURE_FORMAT), "version": __version__}


def lm_setup(cfg: Config, docs: list[Document], device: torch.device = CPU,
             world: World = World()) -> Setup:
    """Stateful RNN LM over documents: train/dev/test are the tails cut by split_documents.

    The model is moved to ``device``; rank r of ``world`` trains stream slots r, r+W, ...
    """
    tok = cfg.tokenizer
    ids = SpecialIds(tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id)
    parts = split_documents(docs, cfg.data.dev_fraction, cfg.data.test_fraction)
    if cfg.train.batch_size > len(parts[0]):
        raise ValueError(f"train.batch_size ({cfg.train.batch_size}) is the number of parallel "
                         f"streams for task lm and must be <= the {len(parts[0])} documents")
    vocab = CharVocab.build(parts[0], ids)
    train, dev, test = ([vocab.encode(d.text) for d in p] for p in parts)
    r = cfg.model.rnn
    cell = "lstm" if cfg.model.family == "lstm" else "gru"  # config: lm is never a transformer
    shape = RNNLMShape(cell, vocab.size, r.embed_dim, r.hidden, r.dec_layers, r.dropout, ids.pad)
    model = RNNLM(shape).to(device)
    feed = LMFeed((train, dev), ids, cfg.sequence.loss_norm, cfg.sequence.label_smoothing,
                  cfg.train.batch_size, cfg.train.bptt_len, cfg.train.seed, world, device)
    fields = lm_signature_fields(cfg, docs, vocab, feed.norm)
    contract = config_contract(cfg, ("data", "tokenizer", "model", "train"))
    contract.update({"task": "lm", "signature": format_signature(fields),
                     "vocab_sha256": vocab.sha256(), "sequence.loss_norm": cfg.sequence.loss_norm,
                     "sequence.label_smoothing": cfg.sequence.label_smoothing})

    def save(path: Path, meta: ModelMeta) -> str:
        return ModelFile(model.state_dict(), meta, lm=LMInfo(shape, vocab.chars)).save(path)

    def held_out() -> dict[str, StreamNLL]:
        return {f"{name}_ppl_{mode}": stream_nll(
                    model, split, ids, min(cfg.train.batch_size, len(split)),
                    cfg.train.bptt_len, carry)
                for name, split in (("dev", dev), ("test", test))
                for mode, carry in (("carried", True), ("reset_every_segment", False))}

    return Setup(model, feed, contract, r.hidden, format_signature(fields), save,
                 lambda: lm_report(held_out()), held_out)


def lm_report(held_out: dict[str, StreamNLL]) -> dict[str, Any]:
    """``{"lm": {"<split>_ppl_<mode>": exp(NLL / tokens) or None, "<split>_tokens": ..}}``
    from :func:`lm_setup`'s ``held_out()`` (the token count is the same in both modes)."""
    out: dict[str, Any] = {k: math.exp(s.total / s.tokens) if s.tokens else None
                           for k, s in held_out.items()}
    out |= {f"{split}_tokens": held_out[f"{split}_ppl_carried"].tokens
            for split in ("dev", "test")}
    return {"lm": out}
