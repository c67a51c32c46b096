"""Pronounce new words (or map any new source) with the trained model under its contract.

    python -m pipeline.predict cat dog        # or: echo cat | python -m pipeline.predict
    python -m pipeline.predict --file words.txt > pronunciations.tsv

Prints ``input<TAB>output`` per decodable line on stdout. A line that is empty, holds text the
source tokenizer does not know, or is longer than the model was trained for, and an output
with a UNK or without an end of sequence, is reported on stderr instead (one line each), and
the exit status is 1: no answer is given that the model cannot stand behind (issue 13).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.stage import load_params, signature
from seqcore.config import ConfigError
from seqcore.errors import OneLineError
from seqcore.predictor import Answer, Predictor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("inputs", nargs="*", help="inputs (default: one per line of stdin)")
    parser.add_argument("-f", "--file", default=None,
                        help="read the inputs from this file, one per line (UTF-8)")
    parser.add_argument("--params", default="params.yaml", help="params file (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also print the contract signature the model was trained under")
    args = parser.parse_args(argv)
    try:
        cfg = load_params(args.params)
    except ConfigError as err:
        print(f"[predict] {err}", file=sys.stderr)
        return 2
    if args.file is not None and args.inputs:
        print("[predict] give inputs as arguments or with --file, not both", file=sys.stderr)
        return 2
    try:
        # arguments as the bytes the shell passed (Python decoded them with surrogateescape):
        # every source of inputs takes the one decoding path below (issue 54)
        lines = [as_text(os.fsencode(a)) for a in args.inputs] or (
            split_lines(Path(args.file).read_bytes()) if args.file
            else split_lines(sys.stdin.buffer.read()))
    except OSError as err:
        print(f"[predict] --file {args.file}: {err.strerror}", file=sys.stderr)
        return 2
    if not lines:
        print("[predict] no input: give inputs as arguments, with --file, or one per line on "
              "stdin", file=sys.stderr)
        return 2
    try:  # a missing, corrupt or refused model or tokenizer: one line, exit 1
        # the system the decode stage scored: under decode.rescore: baseline, the baseline's
        # WFST proposes and the model rescores (issue 51)
        predictor = Predictor.of_result(cfg)
        signature(cfg, "predict", predictor.saved.meta.signature, cfg.paths.model,
                  contract=predictor.toks.contract, quiet=not args.verbose)
    except OneLineError as err:
        print(f"[predict] {err}", file=sys.stderr)
        return 1
    except FileNotFoundError as err:
        print(f"[predict] {err.filename}: missing; run `dvc repro` (or `dvc pull`) first",
              file=sys.stderr)
        return 1
    return report(predictor.answer(lines))


def as_text(raw: bytes) -> str | bytes:
    """One input as text, or its raw bytes when they are not valid UTF-8 (the predictor
    answers those with their own one-line problem; the other inputs still get answers)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def split_lines(data: bytes) -> list[str | bytes]:
    """Standard input or a file, one entry per line (:func:`as_text`)."""
    return [as_text(raw) for raw in data.splitlines()]


def report(answers: list[Answer]) -> int:
    """Print answers to stdout and problems to stderr, in input order; 1 if any line failed."""
    for i, a in enumerate(answers):
        if a.problem:
            print(f"[predict] line {i + 1} {a.source!r}: {a.problem}", file=sys.stderr)
        else:
            print(f"{a.source}\t{a.output}", flush=True)
    return 1 if any(a.problem for a in answers) else 0


if __name__ == "__main__":
    sys.exit(main())
