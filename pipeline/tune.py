"""``python -m pipeline.tune``: choose the decode settings on dev, by a command (issue 52).

    python -m pipeline.tune                                  # the default grid, print it
    python -m pipeline.tune --beam 1 5 --alpha 0.6 --weight 0.4 0.6 0.8 --write

Decodes the dev split with the trained model under each beam width and length-penalty
alpha, and (under ``decode.rescore: baseline``) picks among the baseline's dev n-best for
each rescoring weight, from one scoring pass per decode. Writes ``OUT/tuning.md`` (the table,
the chosen row, the checks: a wider beam that scores worse than a narrower one) and
``OUT/tuning.csv``. The test split is never read. ``--write`` sets ``decode.beam_size``,
``decode.alpha`` and ``decode.rescore_weight`` (or ``decode.rescore: none`` when the model
alone wins) in params.yaml to the chosen row and ``decode.tuned_on: dev``, which the result signature then carries (``tuned:dev``); `dvc
repro` re-decodes the test split with them, once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.stage import load_params
from seqcore.config import ConfigError
from seqcore.decoding.tuning import (
    ALPHAS, BEAMS, WEIGHTS, choose, table_csv, table_markdown, tune, wider_beam_checks,
    write_params)
from seqcore.errors import OneLineError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--beam", nargs="+", type=int, default=list(BEAMS))
    parser.add_argument("--alpha", nargs="+", type=float, default=list(ALPHAS))
    parser.add_argument("--weight", nargs="+", type=float, default=list(WEIGHTS),
                        help="rescoring weights (under decode.rescore: baseline)")
    parser.add_argument("--out", default="reports/tuning", help="folder for the table")
    parser.add_argument("--write", action="store_true",
                        help="set the chosen settings and decode.tuned_on: dev in --params")
    args = parser.parse_args(argv)
    bad = [f"--beam {b}" for b in args.beam if b < 1] + [
        f"--alpha {a:g}" for a in args.alpha if a < 0] + [
        f"--weight {w:g}" for w in args.weight if not 0 <= w <= 1]
    if bad:
        print(f"[tune] {bad[0]}: beams are at least 1, alphas at least 0, weights in [0, 1]",
              file=sys.stderr)
        return 2
    try:
        cfg = load_params(args.params)
        rows, n = tune(cfg, args.beam, args.alpha, args.weight)
        chosen = choose(rows)
    except (ConfigError, OneLineError, ValueError) as err:
        print(f"[tune] {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"[tune] {err.filename}: missing; run `dvc repro decode` (or `dvc pull`) first",
              file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = table_markdown(rows, chosen, wider_beam_checks(rows), n)
    (out / "tuning.md").write_text(text, encoding="utf-8")
    (out / "tuning.csv").write_text(table_csv(rows), encoding="utf-8")
    print(text, end="")
    if args.write:
        write_params(Path(args.params), chosen)
        print(f"[tune] {args.params}: decode set to the chosen row, tuned_on: dev; "
              "`dvc repro` decodes the test split with it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
