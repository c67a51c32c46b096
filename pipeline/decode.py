"""Stage decode: decode one split with the trained model; write predictions and a header."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pipeline.progress import in_chunks
from pipeline.stage import contract_path, load, signature, tokenizer_contract
from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.predictions import Predictions, PredictionsHeader
from seqcore.config import Config, as_dict
from seqcore.data.examples import read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.environment import producing_environment
from seqcore.determinism import DeviceUnavailable, resolve_device, set_determinism
from seqcore.hashing import sha256_file
from seqcore.tokenizer import load_tokenizers


def decode_lm(cfg: Config, out: Path) -> None:
    """Write the (empty) predictions and a header naming the model and the reason."""
    Predictions([]).save(out)
    PredictionsHeader(as_dict(cfg.decode), sha256_file(Path(cfg.paths.model)), 0, task="lm",
                      note="task lm: nothing to decode; evaluate reports perplexity").save(out)
    print("[decode] task lm: nothing to decode", file=sys.stderr)


def run(cfg: Config) -> None:
    """Decode the configured split into predictions/<split>.jsonl and its header."""
    if cfg.task == "lm":
        return decode_lm(cfg, Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl")
    saved = ModelFile.load(cfg.paths.model)
    model, meta = saved.build(), saved.meta
    tc = tokenizer_contract(cfg)
    sig = signature(cfg, "decode", meta.signature, cfg.paths.model, contract=tc)
    toks = load_tokenizers(contract_path(cfg), meta.tokenizer_sha256(), tc)
    ids, tgt_tok = toks.ids, toks.tgt
    if model.max_positions is not None and cfg.decode.max_len > model.max_positions:
        sys.exit(f"[decode] decode.max_len ({cfg.decode.max_len}) is longer than the model's "
                 f"position range ({model.max_positions} = max(sequence.max_src_len, "
                 "sequence.max_tgt_len) + 1); lower decode.max_len or retrain with a larger "
                 "sequence.max_tgt_len")
    try:
        device = resolve_device(cfg.decode.device)
    except DeviceUnavailable as err:
        sys.exit(f"[decode] {err}")
    # The thread count the model was trained with (float sums depend on the split); read from
    # the model file, so decode declares no train param.
    set_determinism(cfg.decode.seed, meta.threads, device)
    model.to(device)  # the model file loads on the CPU whatever device trained it
    examples = read_examples(Path(cfg.paths.encoded) / f"{cfg.decode.split}.jsonl")
    decoder, bs = make_decoder(cfg.decode, ids), cfg.decode.batch_size
    with torch.inference_mode():
        rows = [row for chunk in in_chunks(examples, bs, "decode")
                for row in decode_examples(model, list(chunk), decoder, ids, tgt_tok, bs)]
    out = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    Predictions(rows).save(out)
    PredictionsHeader(
        as_dict(cfg.decode), sha256_file(Path(cfg.paths.model)), len(rows), sig,
        trained_on=meta.trained_on(),
        tokenizer_sha256=tc.sha256(), environment=producing_environment().as_dict()).save(out)
    print(f"[decode] {len(rows)} {cfg.decode.split} examples -> {out}", file=sys.stderr)


def main() -> None:
    run(load(__doc__))


if __name__ == "__main__":
    main()
