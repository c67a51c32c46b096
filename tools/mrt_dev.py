"""Does minimum risk training pay? MLE alone against MLE + MRT, on dev only (issue 52).

    python tools/mrt_dev.py --mrt-steps 300 [--params params.yaml] [--checkpoints FOLDER]
                            [-S train.mrt_alpha=0.5 ...]

Continues the current result's likelihood training (the last checkpoint of the folder that
``reports/results.json`` names, or of ``--checkpoints``: a train stage run without decode and
evaluate, e.g. the ``full`` profile's) with ``--mrt-steps`` minimum-risk steps under the params'
``train.mrt_*`` settings (``-S key=value`` overrides them), exactly as the train stage would
run them after ``train.max_steps`` (the same ``TrainLoop``, its RNG states and data cursor
resumed from the checkpoint). Then decodes dev with the params' decode settings, for the
model alone and for the rescored system (``decode.rescore_weight`` on the baseline's dev
n-best), before and after, and prints WER and PER with the paired bootstrap difference
(after - before; groups resampled together) and its p-value. The test split is never read.
Run it alone on the CPU: it trains.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqcore.artifacts.predictions import Predictions  # noqa: E402
from seqcore.artifacts.reports import Results  # noqa: E402
from seqcore.artifacts.tokenizer_contract import TokenizerContract  # noqa: E402
from seqcore.config import load_config  # noqa: E402
from seqcore.data.examples import read_encoded  # noqa: E402
from seqcore.decoding.tuning import own_and_rescored  # noqa: E402
from seqcore.determinism import set_determinism  # noqa: E402
from seqcore.metrics.bootstrap import Resampling  # noqa: E402
from seqcore.metrics.comparison import rate_changes  # noqa: E402
from seqcore.tokenizer import load_tokenizers  # noqa: E402
from seqcore.training.checkpoint import CheckpointDir  # noqa: E402
from seqcore.training.loop import TrainLoop  # noqa: E402
from seqcore.training.setups import seq2seq_setup  # noqa: E402


def overridden(cfg, pairs: list[str], mrt_steps: int):  # noqa: ANN001, ANN201 (Config)
    """``cfg`` with ``train.mrt_steps`` and each ``train.KEY=VALUE`` of ``pairs``."""
    train = dataclasses.replace(cfg.train, mrt_steps=mrt_steps)
    for pair in pairs:
        key, value = pair.split("=", 1)
        name = key.removeprefix("train.")
        kind = type(getattr(train, name))
        train = dataclasses.replace(train, **{name: (value.lower() == "true") if kind is bool
                                              else kind(value)})
    return dataclasses.replace(cfg, train=train)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--mrt-steps", type=int, required=True)
    parser.add_argument("--checkpoints", default=None, metavar="FOLDER",
                        help="the checkpoint folder (default: the one reports/results.json names)")
    parser.add_argument("-S", dest="set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    cfg = overridden(load_config(args.params), args.set, args.mrt_steps)
    folder = Path(args.checkpoints or Results.load(cfg.paths.results).checkpoints)
    found = CheckpointDir(folder, cfg.train.keep_last).latest_good()
    if found is None or found.checkpoint.step != cfg.train.max_steps:
        sys.exit(f"{folder}: no checkpoint of step {cfg.train.max_steps}; run `dvc repro`")
    tc = TokenizerContract.load(cfg.paths.tokenizer_contract)
    toks = load_tokenizers(cfg.paths.tokenizer_contract, None, tc)
    enc = Path(cfg.paths.encoded)
    data = (read_encoded(enc, "train"), read_encoded(enc, "dev"))
    base = {r.id: r for r in Predictions.load(Path(cfg.paths.baseline) / "dev.jsonl").rows}
    set_determinism(cfg.train.seed, cfg.train.threads)
    setup = seq2seq_setup(cfg, tc, "mrt-dev", data)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(found.path, Path(tmp) / found.path.name)
        shutil.copy(f"{found.path}.sha256", Path(tmp) / f"{found.path.name}.sha256")
        # the checkpoint's own contract: its state continues under the MRT settings
        loop = TrainLoop(setup.model, cfg.train, setup.feed, CheckpointDir(Path(tmp), 2),
                         found.checkpoint.contract, setup.d_model)
        loop.resume()
        setup.model.eval()
        before = own_and_rescored(setup.model, data[1], cfg.decode, toks, base)
        print(f"MLE decoded ({time.perf_counter() - t0:.0f} s); MRT for {args.mrt_steps} steps",
              file=sys.stderr)
        setup.model.train()
        t1 = time.perf_counter()
        state = loop.run(lambda e, tps: print(f"  step {e.step} risk {e.loss:.4f}",
                                              file=sys.stderr) if e.step % 50 == 0 else None)
        mrt_s = time.perf_counter() - t1
    setup.model.eval()
    after = own_and_rescored(setup.model, data[1], cfg.decode, toks, base)
    r = Resampling(1000, 12345, 0.95)
    tr = cfg.train
    print(f"dev, {len(before[0])} rows; MRT {args.mrt_steps} steps in {mrt_s:.0f} s (N "
          f"{tr.mrt_candidates} {tr.mrt_search}, reference {tr.mrt_reference}, risk "
          f"{tr.mrt_risk}, alpha {tr.mrt_alpha:g}, lr {tr.mrt_lr:g}); last dev-sample WER "
          f"{100 * state.history[-1].dev_wer:.1f} %\n")
    print("| system | WER MLE → MLE+MRT (difference [95 %], p) | PER MLE → MLE+MRT |\n"
          "|---|---|---|")
    for label, a, b in (("model alone", before[0], after[0]),
                        ("rescored", before[1], after[1])):
        print(f"| {label} | " + " | ".join(rate_changes(a, b, r)) + " |")


if __name__ == "__main__":
    main()
