"""What the ``lm`` task trains: a stateful RNN LM over plain-text documents, with a character
vocabulary built from the training part (a seqcore.training.setups.Setup, so the train stage
runs the same loop on it as on the pair tasks).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from seqcore import __version__
from seqcore.artifacts.model_file import LMInfo, ModelFile, ModelMeta
from seqcore.config import Config
from seqcore.contract import SpecialIds
from seqcore.hashing import digest
from seqcore.signature import SIGNATURE_FORMAT, config_contract

#: Train keys of the pair tasks' dev decoding (issue 52): a language model decodes nothing,
#: so they are no part of its training contract.
DECODES_NOTHING = ("train.dev_decode_words", "train.dev_decode_beam")
from seqcore.signature_format import format_signature
from seqcore.tasks.lm.documents import CharVocab, Document, split_documents
from seqcore.tasks.lm.feed import LMFeed, StreamNLL, stream_nll
from seqcore.models.rnnlm import RNNLM, RNNLMShape
from seqcore.training.distributed import World
from seqcore.training.setups import CPU, Setup


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
    contract = {k: v for k, v in config_contract(cfg, ("data", "tokenizer", "model", "train"))
                .items() if k not in DECODES_NOTHING}
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
