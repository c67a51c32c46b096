"""The tokenizer stage's training: SentencePiece on each side of the train split, and the
tokenizer contract written beside the models (the contract every later stage checks)."""

from __future__ import annotations

import sys
from pathlib import Path

from seqcore.artifacts.manifests import RawSource
from seqcore.artifacts.tokenizer_contract import TextNormalization, TokenizerContract
from seqcore.config import Config
from seqcore.contract import SpecialIds
from seqcore.data.records import Pair
from seqcore.signature import tokenizer_signature
from seqcore.tokenizer import (
    BOS_PIECE, EOS_PIECE, PAD_PIECE, UNK_PIECE, Tokenizer, check_special_ids,
    choose_settings, round_trip, side_contract, train_sentencepiece,
)


def train_tokenizers(cfg: Config, train: list[Pair], raw: RawSource) -> TokenizerContract:
    """Train both sides (resolving ``auto`` settings) and write tokenizer/contract.json."""
    t = cfg.tokenizer
    ids = SpecialIds(pad=t.pad_id, unk=t.unk_id, bos=t.bos_id, eos=t.eos_id)
    where = [f"{raw.label}:{p.line}" for p in train]
    texts = {"src": [p.source for p in train], "tgt": [p.target for p in train]}
    out = Path(cfg.paths.tokenizer)
    sides, checks = {}, {}
    for side, model_type, vocab in (("src", t.src_model_type, t.src_vocab_size),
                                    ("tgt", t.tgt_model_type, t.tgt_vocab_size)):
        settings, chosen = choose_settings(texts[side], model_type, vocab, t.character_coverage)
        if chosen:
            print(f"[tokenizer] {side}: auto chose {chosen}", file=sys.stderr)
        tok = Tokenizer(train_sentencepiece(texts[side], settings, ids, out / f"{side}.model"))
        check_special_ids(tok, ids)
        sides[side] = side_contract(tok, settings, f"{side}.model", chosen)
        checks[side] = round_trip(tok, texts[side], where)
    contract = TokenizerContract(
        ids, (PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE),
        TextNormalization(cfg.data.normalization, cfg.data.casefold, cfg.data.casefold_target),
        raw.sha256, sides["src"], sides["tgt"], checks)
    contract = contract.with_signature(tokenizer_signature(cfg, contract))
    contract.save(cfg.paths.tokenizer_contract)
    return contract
