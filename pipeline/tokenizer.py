"""Stage tokenizer: train SentencePiece on the train split, write the contract, encode splits."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.stage import load, read_json, signature, write_json
from seqcore.contract import SpecialIds
from seqcore.data.examples import encode_pairs, write_examples
from seqcore.data.records import read_pairs_jsonl, write_rejects
from seqcore.data.splits import SPLITS
from seqcore.signature import contract_signature
from seqcore.tokenizer import Tokenizer, TokenizerSettings, check_special_ids, train_sentencepiece


def main() -> None:
    cfg = load(__doc__)
    t, seq = cfg.tokenizer, cfg.sequence
    ids = SpecialIds(pad=t.pad_id, unk=t.unk_id, bos=t.bos_id, eos=t.eos_id)
    prepared = Path(cfg.paths.prepared)
    splits = {s: read_pairs_jsonl(prepared / f"{s}.jsonl") for s in SPLITS}
    out = Path(cfg.paths.tokenizer)
    sides = {"src": (t.src_model_type, t.src_vocab_size, [p.source for p in splits["train"]]),
             "tgt": (t.tgt_model_type, t.tgt_vocab_size, [p.target for p in splits["train"]])}
    toks, contract = {}, {"special_ids": vars(ids) | {}, "sides": {}}
    for side, (model_type, vocab, text) in sides.items():
        settings = TokenizerSettings(model_type, vocab, t.character_coverage)
        toks[side] = Tokenizer(train_sentencepiece(text, settings, ids, out / f"{side}.model"))
        check_special_ids(toks[side], ids)
        contract[side] = {"model_type": model_type, "vocab_size": toks[side].vocab_size,
                          "requested_vocab_size": vocab, "sha256": toks[side].sha256,
                          "file": f"{side}.model", "character_coverage": t.character_coverage}
    contract.pop("sides")
    contract["normalization"] = {"form": cfg.data.normalization, "casefold": cfg.data.casefold}
    contract["data_sha256"] = read_json(prepared / "manifest.json")["raw"]["sha256"]
    contract["signature"] = contract_signature(cfg, contract)
    write_json(out / "contract.json", contract)
    signature(cfg, "tokenizer", contract["signature"], str(out / "contract.json"))

    encoded, rejects, counts = Path(cfg.paths.encoded), [], {}
    for split, pairs in splits.items():
        examples, rej = encode_pairs(pairs, toks["src"], toks["tgt"], seq.max_src_len,
                                     seq.max_tgt_len, seq.overlong, f"{prepared}/{split}.jsonl")
        write_examples(examples, encoded / f"{split}.jsonl")
        rejects += rej
        counts[split] = {"kept": len(examples), "dropped": sum(r.action == "dropped" for r in rej),
                         "truncated": sum(r.action == "altered" for r in rej)}
    write_rejects(Path(cfg.paths.length_rejects), rejects)
    write_json(encoded / "manifest.json", {"counts": counts, "max_src_len": seq.max_src_len,
                                           "max_tgt_len": seq.max_tgt_len,
                                           "overlong": seq.overlong})
    print(f"[tokenizer] src={toks['src'].signature()} tgt={toks['tgt'].signature()} {counts}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
