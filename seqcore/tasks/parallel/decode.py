"""The pair tasks' piece of the decode stage: predictions for the encoded split."""

from __future__ import annotations

from pathlib import Path

import torch

from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.predictions import Predictions, PredictionsHeader
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, as_dict
from seqcore.data.examples import read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.determinism import resolve_device, set_determinism
from seqcore.environment import producing_environment
from seqcore.hashing import sha256_file
from seqcore.tasks import TaskError
from seqcore.tasks.base import StageIO
from seqcore.tokenizer import load_tokenizers


def decode(cfg: Config, io: StageIO) -> None:
    """Write ``predictions/<decode.split>.jsonl`` and its header.

    Raises:
        TaskError: decode.max_len beyond the model's position range.
    """
    saved = ModelFile.load(cfg.paths.model)
    model, meta = saved.build(), saved.meta
    tc = TokenizerContract.load(cfg.paths.tokenizer_contract)
    sig = io.contract(meta.signature, cfg.paths.model, tc)
    toks = load_tokenizers(cfg.paths.tokenizer_contract, meta.tokenizer_sha256(), tc)
    ids, tgt_tok = toks.ids, toks.tgt
    if any(t >= tgt_tok.vocab_size for t in cfg.decode.banned_tokens):
        raise TaskError(f"decode.banned_tokens = {list(cfg.decode.banned_tokens)}: ids must be < "
                        f"the target vocabulary size ({tgt_tok.vocab_size}, "
                        f"{cfg.paths.tokenizer_contract})")
    if model.max_positions is not None and cfg.decode.max_len > model.max_positions:
        raise TaskError(
            f"decode.max_len ({cfg.decode.max_len}) is longer than the model's position "
            f"range ({model.max_positions} = max(sequence.max_src_len, "
            "sequence.max_tgt_len) + 1); lower decode.max_len or retrain with a larger "
            "sequence.max_tgt_len")
    device = resolve_device(cfg.decode.device)
    # The thread count the model was trained with (float sums depend on the split); read
    # from the model file, so decode declares no train param.
    set_determinism(cfg.decode.seed, meta.threads, device)
    model.to(device)  # the model file loads on the CPU whatever device trained it
    examples = read_examples(Path(cfg.paths.encoded) / f"{cfg.decode.split}.jsonl")
    decoder, bs = make_decoder(cfg.decode, ids), cfg.decode.batch_size
    with torch.inference_mode():
        rows = [row for chunk in io.chunks(examples, bs, "decode")
                for row in decode_examples(model, list(chunk), decoder, ids, tgt_tok, bs)]
    out = Path(cfg.paths.predictions) / f"{cfg.decode.split}.jsonl"
    Predictions(rows).save(out)
    PredictionsHeader(
        as_dict(cfg.decode), sha256_file(Path(cfg.paths.model)), len(rows), sig,
        trained_on=meta.trained_on(), tokenizer_sha256=tc.sha256(),
        environment=producing_environment().as_dict()).save(out)
    io.note(f"{len(rows)} {cfg.decode.split} examples -> {out}")
