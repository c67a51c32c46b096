"""Choose ``decode.rescore_weight`` on dev: WER and PER of the model rescoring the baseline's
n-best list, for each weight, from one decode and one scoring pass.

    python tools/tune_rescore.py [--params params.yaml] [--weights 0 0.1 ... 1]

Reads the trained model, the tokenizers, ``data/encoded/dev.jsonl`` and the baseline's
``dev.jsonl`` (run `dvc repro baseline train` first). Decodes dev with the configured
decode settings, scores every candidate once with the model, then prints one row per weight
(the same combination ``seqcore.decoding.rescore`` computes in the decode stage). The test
split is never read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqcore.artifacts.model_file import ModelFile  # noqa: E402
from seqcore.artifacts.predictions import Predictions  # noqa: E402
from seqcore.config import load_config  # noqa: E402
from seqcore.data.examples import read_examples  # noqa: E402
from seqcore.decoding.factory import make_decoder  # noqa: E402
from seqcore.decoding.predictions import decode_examples  # noqa: E402
from seqcore.decoding.rescore import pick, scored_candidates  # noqa: E402
from seqcore.determinism import set_determinism  # noqa: E402
from seqcore.metrics.evaluation import row_stats  # noqa: E402
from seqcore.metrics.scores import ErrorStats  # noqa: E402
from seqcore.tokenizer import load_tokenizers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--weights", nargs="+", type=float,
                        default=[round(0.1 * i, 1) for i in range(11)])
    args = parser.parse_args()
    cfg = load_config(args.params)
    start = time.perf_counter()
    saved = ModelFile.load(cfg.paths.model)
    model, meta = saved.build(), saved.meta
    toks = load_tokenizers(cfg.paths.tokenizer_contract, meta.tokenizer_sha256())
    set_determinism(cfg.decode.seed, meta.threads)
    examples = read_examples(Path(cfg.paths.encoded) / "dev.jsonl")
    base = {r.id: r for r in Predictions.load(Path(cfg.paths.baseline) / "dev.jsonl").rows}
    with torch.inference_mode():
        rows = decode_examples(model, examples, make_decoder(cfg.decode, toks.ids), toks.ids,
                               toks.tgt, cfg.decode.batch_size)
        scored = scored_candidates(model, examples, rows, base, toks.tgt, toks.ids,
                                   cfg.decode.batch_size)
    print(f"dev: {len(rows)} rows, {sum(map(len, scored))} candidates, "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    print("| rescore_weight | WER | WER any ref. | PER | PER closest |\n|---|---|---|---|---|")
    for label, chosen in [("model alone", rows), ("baseline alone", [base[r.id] for r in rows])]:
        print(table_row(label, chosen))
    for w in args.weights:
        print(table_row(f"{w:g}", [pick(r, cs, w, toks.tgt)
                                   for r, cs in zip(rows, scored, strict=True)]))


def table_row(label: str, rows: list) -> str:
    s = sum(row_stats(rows), ErrorStats()).scores()
    return (f"| {label} | {100 * s['word_error_rate']:.2f} | "
            f"{100 * (1 - s['exact_match_multi_ref']):.2f} | {100 * s['token_error_rate']:.2f} "
            f"| {100 * s['token_error_rate_multi_ref']:.2f} |")


if __name__ == "__main__":
    main()
