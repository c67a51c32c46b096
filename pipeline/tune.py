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
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from pipeline.stage import load_params
from seqcore.artifacts.model_file import ModelFile
from seqcore.artifacts.predictions import Predictions
from seqcore.config import Config, ConfigError
from seqcore.data.examples import read_examples
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.decoding.rescore import pick, scored_candidates
from seqcore.decoding.tuning import (
    Scored, Setting, choose, table_csv, table_markdown, wider_beam_checks)
from seqcore.determinism import set_determinism
from seqcore.errors import OneLineError
from seqcore.metrics.evaluation import row_stats
from seqcore.metrics.scores import ErrorStats
from seqcore.tokenizer import load_tokenizers

#: The default grid: the beam widths and alphas around the default's, every tenth of weight.
BEAMS, ALPHAS = (1, 3, 5, 8), (0.0, 0.6, 1.0)
WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))


def tune(cfg: Config, beams: list[int], alphas: list[float],
         weights: list[float]) -> tuple[list[Scored], int]:
    """Every setting of the grid scored on dev, in grid order, and the dev row count."""
    saved = ModelFile.load(cfg.paths.model)
    model, meta = saved.build(), saved.meta
    toks = load_tokenizers(cfg.paths.tokenizer_contract, meta.tokenizer_sha256())
    set_determinism(cfg.decode.seed, meta.threads)
    examples = read_examples(Path(cfg.paths.encoded) / "dev.jsonl")
    rescored = cfg.decode.rescore == "baseline"
    base = ({r.id: r for r in Predictions.load(Path(cfg.paths.baseline) / "dev.jsonl").rows}
            if rescored else {})

    def figures(setting: Setting, rows: list) -> Scored:
        s = sum(row_stats(rows), ErrorStats()).scores()
        return Scored(setting, s["word_error_rate"], s["token_error_rate"],
                      1 - s["exact_match_multi_ref"])

    out = []
    for beam in beams:
        for alpha in alphas:
            start = time.perf_counter()
            decode = replace(cfg.decode, split="dev", strategy="beam", beam_size=beam,
                             alpha=alpha)
            with torch.inference_mode():
                rows = decode_examples(model, examples, make_decoder(decode, toks.ids),
                                       toks.ids, toks.tgt, decode.batch_size)
                scored = scored_candidates(model, examples, rows, base, toks.tgt, toks.ids,
                                           decode.batch_size) if rescored else []
            out.append(figures(Setting(beam, alpha, None), rows))
            out += [figures(Setting(beam, alpha, w), [
                pick(r, cs, w, toks.tgt) for r, cs in zip(rows, scored, strict=True)])
                for w in (weights if rescored else [])]
            print(f"[tune] beam {beam}, alpha {alpha:g}: {len(rows):,} dev rows in "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return out, len(examples)


def write_params(path: Path, chosen: Scored) -> None:
    """Set the chosen decode settings and ``tuned_on: dev`` in params.yaml, in place: each
    key's line in the decode section, comments and order kept."""
    s = chosen.setting
    values = {"beam_size": str(s.beam), "alpha": f"{s.alpha!r}", "tuned_on": "dev"}
    # the model alone won: no rescoring; else the weight that won
    values |= {"rescore": "none"} if s.weight is None else {"rescore_weight": f"{s.weight!r}"}
    text = path.read_text(encoding="utf-8")
    section = re.search(r"(?ms)^decode:\n(.*?)(?=^\S|\Z)", text)
    if section is None:
        raise ConfigError(f"{path}: no decode section to write the chosen settings into")
    body = section.group(1)
    for key, value in values.items():
        body, n = re.subn(rf"(?m)^(  {key}:)[^\n#]*", rf"\g<1> {value}", body, count=1)
        if n != 1:
            raise ConfigError(f"{path}: decode.{key} is not set in its decode section; add "
                              f"the line `  {key}: ...` there")
    path.write_text(text[:section.start(1)] + body + text[section.end(1):], encoding="utf-8")


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
