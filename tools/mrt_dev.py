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
from seqcore.decoding.rescore import pick  # noqa: E402
from seqcore.decoding.tuning import decode_and_score  # noqa: E402
from seqcore.determinism import set_determinism  # noqa: E402
from seqcore.metrics.bootstrap import Resampling  # noqa: E402
from seqcore.metrics.comparison import paired_headline  # noqa: E402
from seqcore.metrics.evaluation import row_stats  # noqa: E402
from seqcore.metrics.scores import ErrorStats  # noqa: E402
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


def system(model, examples, cfg, toks, base):  # noqa: ANN001, ANN201
    """(the model's own dev rows, the rescored system's rows)."""
    model.eval()
    rows, scored = decode_and_score(model, examples, cfg.decode, toks, base)
    rescored = [pick(r, cs, cfg.decode.rescore_weight, toks.tgt)
                for r, cs in zip(rows, scored, strict=True)]
    return rows, rescored


def figures(rows: list) -> tuple[float, float]:
    s = sum(row_stats(rows), ErrorStats()).scores()
    return 100 * s["word_error_rate"], 100 * s["token_error_rate"]


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
        before = system(setup.model, data[1], cfg, toks, base)
        print(f"MLE decoded ({time.perf_counter() - t0:.0f} s); MRT for {args.mrt_steps} steps",
              file=sys.stderr)
        setup.model.train()
        t1 = time.perf_counter()
        state = loop.run(lambda e, tps: print(f"  step {e.step} risk {e.loss:.4f}",
                                              file=sys.stderr) if e.step % 50 == 0 else None)
        mrt_s = time.perf_counter() - t1
    after = system(setup.model, data[1], cfg, toks, base)
    r = Resampling(1000, 12345, 0.95)
    tr = cfg.train
    print(f"dev, {len(before[0])} rows; MRT {args.mrt_steps} steps in {mrt_s:.0f} s (N "
          f"{tr.mrt_candidates} {tr.mrt_search}, reference {tr.mrt_reference}, risk "
          f"{tr.mrt_risk}, alpha {tr.mrt_alpha:g}, lr {tr.mrt_lr:g}); last dev-sample WER "
          f"{100 * state.history[-1].dev_wer:.1f} %\n")
    print("| system | WER MLE | WER MLE+MRT | difference [95 %], p | PER MLE | PER MLE+MRT "
          "| difference [95 %], p |\n|---|---|---|---|---|---|---|")
    for label, a, b in (("model alone", before[0], after[0]),
                        ("rescored", before[1], after[1])):
        d = paired_headline(a, b, r, ("word_error_rate", "token_error_rate"))
        cells = []
        for key, (fa, fb) in zip(("word_error_rate", "token_error_rate"),
                                 zip(figures(a), figures(b), strict=True)):
            x = d[key]
            cells.append(f"{fa:.2f} | {fb:.2f} | {100 * x.delta:+.2f} [{100 * x.low:+.2f}, "
                         f"{100 * x.high:+.2f}], {x.p_bootstrap:.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
