"""Stage decode: decode one split with the trained model; write predictions and a header."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pipeline.lm import decode_lm
from pipeline.progress import in_chunks
from pipeline.stage import load, signature, write_json
from seqcore.config import as_dict
from seqcore.data.examples import read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples, write_predictions
from seqcore.hashing import sha256_file
from seqcore.tokenizer import load_tokenizers
from seqcore.training.loop import set_determinism
from seqcore.training.model_file import load_model


def main() -> None:
    cfg = load(__doc__)
    if cfg.task == "lm":
        return decode_lm(cfg, Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl")
    model, meta = load_model(Path(cfg.paths.model))
    sig = signature(cfg, "decode", meta["signature"], cfg.paths.model)
    trained = meta["training_contract"]
    toks = load_tokenizers(Path(cfg.paths.tokenizer) / "contract.json", expected_sha256={
        side: trained[f"tokenizer.{side}.sha256"] for side in ("src", "tgt")})
    tc, ids, tgt_tok = toks.contract, toks.ids, toks.tgt
    set_determinism(cfg.decode.seed, cfg.train.threads)
    examples = read_examples(Path(cfg.paths.encoded) / f"{cfg.decode.split}.jsonl")
    decoder, bs = make_decoder(cfg.decode, ids), cfg.decode.batch_size
    with torch.inference_mode():
        rows = [row for chunk in in_chunks(examples, bs, "decode")
                for row in decode_examples(model, list(chunk), decoder, ids, tgt_tok, bs)]
    out = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    write_predictions(rows, out)
    write_json(out.with_suffix(".header.json"), {
        "signature": sig, "decode": as_dict(cfg.decode), "model_sha256":
        sha256_file(Path(cfg.paths.model)), "tokenizer_sha256": {
            "src": tc["src"]["sha256"], "tgt": tc["tgt"]["sha256"]}, "rows": len(rows)})
    print(f"[decode] {len(rows)} {cfg.decode.split} examples -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
