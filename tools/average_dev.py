"""Does averaging the last training states help? The model file's weights against the average
of its ledger states, on dev only (issue 52: a way to the model-alone target, checked).

    python tools/average_dev.py --ledger checkpoints/<folder>/ledger --first 11000 10000 8000

For each ``--first`` step, averages the ledger states from it to the model file's step (every
state the ledger holds in between, in float64) and decodes dev with the params' decode
settings, for the model alone and for the rescored system (``decode.rescore_weight`` on the
baseline's dev n-best), beside the model file's own weights: WER and PER with the paired
bootstrap difference (average - model file; groups resampled together) and its p-value. The
test split is never read. Run it alone on the CPU: it decodes dev twice per row.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pipeline.stage import load_params  # noqa: E402
from seqcore.artifacts.model_file import ModelFile  # noqa: E402
from seqcore.artifacts.predictions import Predictions  # noqa: E402
from seqcore.data.examples import read_examples  # noqa: E402
from seqcore.decoding.tuning import own_and_rescored  # noqa: E402
from seqcore.determinism import set_determinism  # noqa: E402
from seqcore.metrics.bootstrap import Resampling  # noqa: E402
from seqcore.metrics.comparison import rate_changes  # noqa: E402
from seqcore.tokenizer import load_tokenizers  # noqa: E402
from seqcore.training.checkpoint import Checkpoint  # noqa: E402


def average(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The mean of each float tensor (in float64, stored in its own dtype); others: the last."""
    last = states[-1]
    return {k: torch.stack([s[k].double() for s in states]).mean(0).to(last[k].dtype)
            if last[k].is_floating_point() else last[k] for k in last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--ledger", required=True, help="the run's ledger folder")
    parser.add_argument("--first", type=int, nargs="+", required=True,
                        help="first step of each average")
    args = parser.parse_args()
    cfg = load_params(args.params)
    saved = ModelFile.load(cfg.paths.model)
    model, meta = saved.build(), saved.meta
    toks = load_tokenizers(cfg.paths.tokenizer_contract, meta.tokenizer_sha256())
    set_determinism(cfg.decode.seed, meta.threads)
    examples = read_examples(Path(cfg.paths.encoded) / "dev.jsonl")
    base = {r.id: r for r in Predictions.load(Path(cfg.paths.baseline) / "dev.jsonl").rows}
    decode = dataclasses.replace(cfg.decode, split="dev")

    def system(weights: dict[str, torch.Tensor]) -> tuple[list, list]:
        model.load_state_dict(weights)
        model.eval()
        return own_and_rescored(model, examples, decode, toks, base)

    t0 = time.perf_counter()
    ref = system(dict(saved.weights))
    print(f"dev decoded in {time.perf_counter() - t0:.0f} s; against the model file's weights "
          f"(step {meta.selected_step}):\n")
    r = Resampling(1000, 12345, 0.95)
    print("| average | alone WER | alone PER | rescored WER | rescored PER |\n"
          "|---|---|---|---|---|")
    for first in args.first:
        paths = [p for p in sorted(Path(args.ledger).glob("ckpt-*.pt"))
                 if first <= int(p.stem.split("-")[1]) <= meta.selected_step]
        out = system(average([Checkpoint.load(p).weights for p in paths]))
        cells = [f"{len(paths)} states, {first}-{meta.selected_step}",
                 *rate_changes(ref[0], out[0], r), *rate_changes(ref[1], out[1], r)]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
