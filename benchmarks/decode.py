"""Decoding speed: sentences/s and tokens/s for greedy, beam 5 and sampling, with and without
the incremental cache, batched and one sentence at a time, on the encoded test split.

    python -m benchmarks.decode --params params.yaml --limit 100
    python -m benchmarks.decode --limit 50 --random-init --max-len-ratio 1.0  # speed only

A second table forces long outputs (``--forced-len``, default 30: EOS masked until then) to
show where the cache pays for itself. Tokens are those of the returned (best) outputs, EOS
included; beam search does more work per returned token than that. With ``--random-init``
the model is freshly initialised from params.yaml, so the figures measure speed only.
A benchmark, not a test: it asserts nothing and its figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.tokenizer_contract import TokenizerContract
from seqcore.config import Config, DecodeConfig, load_config
from seqcore.contract import SpecialIds, pad_batch
from seqcore.data.examples import Example, read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.models import build_model
from seqcore.models.base import EncoderDecoder

STRATEGIES = {"greedy": {"strategy": "greedy"}, "beam5": {"strategy": "beam", "beam_size": 5},
              "sample": {"strategy": "sample", "top_k": 10, "top_p": 0.9}}


def get_model(cfg: Config, random_init: bool) -> EncoderDecoder:
    """The trained model from paths.model, or a fresh one shaped by params.yaml."""
    if not random_init:
        return ModelFile.load(cfg.paths.model).build()
    contract = TokenizerContract.load(Path(cfg.paths.tokenizer) / "contract.json")
    max_len = max(cfg.sequence.max_src_len, cfg.sequence.max_tgt_len, cfg.decode.max_len) + 1
    torch.manual_seed(cfg.train.seed)
    return build_model(cfg.model, contract.src.vocab_size, contract.tgt.vocab_size,
                       cfg.tokenizer.pad_id, max_len).eval()


def measure(model: EncoderDecoder, examples: list[Example], dec: DecodeConfig, ids: SpecialIds,
            batch_size: int, use_cache: bool) -> tuple[float, float]:
    """(sentences/s, output tokens/s) of decoding ``examples`` in batches of ``batch_size``."""
    decoder = make_decoder(dec, ids, use_cache)
    tokens = 0
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            src, mask = pad_batch([ex.src for ex in chunk], ids.pad)
            for nbest in decoder(model, src, mask, chunk):
                tokens += len(nbest[0].tokens) + nbest[0].eos
    seconds = time.perf_counter() - start
    return len(examples) / seconds, tokens / seconds


def table(model: EncoderDecoder, examples: list[Example], base: DecodeConfig, ids: SpecialIds,
          title: str) -> str:
    lines = [f"#### {title}", "",
             "| strategy | cache | batch | sentences/s | tokens/s | cache speed-up |",
             "|---|---|---|---:|---:|---:|"]
    for name, overrides in STRATEGIES.items():
        dec = dataclasses.replace(base, **overrides)  # type: ignore[arg-type]
        for bs in (base.batch_size, 1):
            on = measure(model, examples, dec, ids, bs, True)
            off = measure(model, examples, dec, ids, bs, False)
            for flag, (sps, tps) in (("on", on), ("off", off)):
                gain = f"{on[1] / off[1]:.2f}x" if flag == "on" else ""
                lines.append(f"| {name} | {flag} | {bs} | {sps:.1f} | {tps:.0f} | {gain} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--limit", type=int, default=100, help="test examples to decode")
    parser.add_argument("--random-init", action="store_true", help="no trained model needed")
    parser.add_argument("--forced-len", type=int, default=30, help="min_len of the long run")
    parser.add_argument("--max-len-ratio", type=float, default=None,
                        help="override decode.max_len_ratio for the first table (with "
                        "--random-init, 1.0 gives G2P-like output lengths)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    cfg = load_config(args.params)
    torch.set_num_threads(args.threads)
    ids = SpecialIds(cfg.tokenizer.pad_id, cfg.tokenizer.unk_id, cfg.tokenizer.bos_id,
                     cfg.tokenizer.eos_id)
    model = get_model(cfg, args.random_init)
    examples = read_examples(Path(cfg.paths.encoded) / "test.jsonl")[: args.limit]
    ratio = cfg.decode.max_len_ratio if args.max_len_ratio is None else args.max_len_ratio
    base = dataclasses.replace(cfg.decode, max_len_ratio=ratio, n_best=1)
    origin = "random-init (speed only)" if args.random_init else cfg.paths.model
    print(f"model: {origin}; {len(examples)} test examples; threads {args.threads}; "
          f"batched = {base.batch_size}\n")
    print(table(model, examples, base, ids, f"test-split lengths (max_len {base.max_len}, "
                f"max_len_ratio {ratio})"), "\n")
    forced = dataclasses.replace(base, min_len=args.forced_len, max_len_ratio=0.0,
                                 max_len=max(base.max_len, args.forced_len + 2))
    print(table(model, examples, forced, ids, f"forced lengths (min_len {args.forced_len}, "
                f"max_len {forced.max_len})"))


if __name__ == "__main__":
    main()
