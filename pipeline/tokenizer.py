"""Stage tokenizer: train SentencePiece on the train split, write the contract, encode splits."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from pipeline.stage import load, read_json, signature, write_json
from seqcore.config import Config
from seqcore.contract import SpecialIds
from seqcore.data.examples import encode_pairs, write_examples
from seqcore.data.records import count_rejects, read_pairs_jsonl, write_rejects
from seqcore.data.splits import SPLITS
from seqcore.signature import contract_signature
from seqcore.tokenizer import (
    BOS_PIECE, CONTRACT_FORMAT, EOS_PIECE, PAD_PIECE, UNK_PIECE, Tokenizer, TokenizerSettings,
    check_special_ids, load_tokenizers, round_trip, side_contract, train_sentencepiece,
)


def run(cfg: Config) -> None:
    """Tokenizer models and contract, encoded splits and length rejects from prepared data."""
    t, seq = cfg.tokenizer, cfg.sequence
    ids = SpecialIds(pad=t.pad_id, unk=t.unk_id, bos=t.bos_id, eos=t.eos_id)
    prepared = Path(cfg.paths.prepared)
    raw = read_json(prepared / "manifest.json")["raw"]
    splits = {s: read_pairs_jsonl(prepared / f"{s}.jsonl") for s in SPLITS}
    train = splits["train"]
    where = [f"{raw['label']}:{p.line}" for p in train]
    texts = {"src": [p.source for p in train], "tgt": [p.target for p in train]}
    out = Path(cfg.paths.tokenizer)
    contract: dict = {"format": CONTRACT_FORMAT, "special_ids": asdict(ids),
                      "special_pieces": [PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE],
                      "normalization": {"form": cfg.data.normalization,
                                        "casefold": cfg.data.casefold},
                      "data_sha256": raw["sha256"], "round_trip": {}}
    for side, model_type, vocab in (("src", t.src_model_type, t.src_vocab_size),
                                    ("tgt", t.tgt_model_type, t.tgt_vocab_size)):
        settings = TokenizerSettings(model_type, vocab, t.character_coverage)
        tok = Tokenizer(train_sentencepiece(texts[side], settings, ids, out / f"{side}.model"))
        check_special_ids(tok, ids)
        contract[side] = side_contract(tok, settings, f"{side}.model")
        contract["round_trip"][side] = asdict(round_trip(tok, texts[side], where))
    contract["signature"] = contract_signature(cfg, contract)
    write_json(out / "contract.json", contract)
    signature(cfg, "tokenizer", contract["signature"], str(out / "contract.json"))
    toks = load_tokenizers(out / "contract.json")  # what every later stage does

    encoded, rejects, counts = Path(cfg.paths.encoded), [], {}
    for split, pairs in splits.items():
        examples, rej = encode_pairs(pairs, toks.src, toks.tgt, seq.max_src_len,
                                     seq.max_tgt_len, seq.overlong, raw["label"])
        write_examples(examples, encoded / f"{split}.jsonl")
        rejects += rej
        counts[split] = {"read": len(pairs), "kept": len(examples),
                         "truncated_targets": sum(not e.has_eos for e in examples),
                         "rejects": count_rejects(rej)}
    write_rejects(Path(cfg.paths.length_rejects), rejects)
    write_json(encoded / "manifest.json", {
        "counts": counts, "rejects": count_rejects(rejects), "rejects_file":
        cfg.paths.length_rejects, "max_src_len": seq.max_src_len,
        "max_tgt_len": seq.max_tgt_len, "overlong": seq.overlong})
    failed = {s: contract["round_trip"][s]["failed"] for s in ("src", "tgt")}
    print(f"[tokenizer] src={toks.src.signature()} tgt={toks.tgt.signature()} "
          f"round-trip failures={failed} {count_rejects(rejects)}", file=sys.stderr)


def main() -> None:
    run(load(__doc__))


if __name__ == "__main__":
    main()
