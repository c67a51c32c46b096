"""Stage decode: decode one split with the trained model; write predictions and a header."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pipeline.lm import decode_lm
from pipeline.stage import load, signature, write_json
from seqcore.config import as_dict
from seqcore.data.examples import read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples, write_predictions
from seqcore.determinism import DeviceUnavailable, resolve_device, set_determinism
from seqcore.hashing import sha256_file
from seqcore.tokenizer import load_tokenizers
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
    try:
        device = resolve_device(cfg.decode.device)
    except DeviceUnavailable as err:
        sys.exit(f"[decode] {err}")
    set_determinism(cfg.decode.seed, cfg.train.threads, device)
    model.to(device)  # the model file loads on the CPU whatever device trained it
    examples = read_examples(Path(cfg.paths.encoded) / f"{cfg.decode.split}.jsonl")
    with torch.inference_mode():
        rows = decode_examples(model, examples, make_decoder(cfg.decode, ids), ids, tgt_tok,
                               cfg.decode.batch_size)
    out = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    write_predictions(rows, out)
    write_json(out.with_suffix(".header.json"), {
        "signature": sig, "decode": as_dict(cfg.decode), "model_sha256":
        sha256_file(Path(cfg.paths.model)), "trained_on": {
            k: trained.get(f"train.{k}") for k in ("device_kind", "nproc", "backend")},
        "tokenizer_sha256": {
            "src": tc["src"]["sha256"], "tgt": tc["tgt"]["sha256"]}, "rows": len(rows)})
    print(f"[decode] {len(rows)} {cfg.decode.split} examples -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
