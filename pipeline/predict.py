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
import sys
from pathlib import Path

import torch

from pipeline.stage import signature, tokenizer_contract
from seqcore.artifacts.model_file import ModelFile
from seqcore.config import ConfigError, load_config
from seqcore.data.examples import Example
from seqcore.data.inputs import SourceInput, check_source
from seqcore.errors import OneLineError
from seqcore.decoding.factory import make_decoder
from seqcore.decoding.predictions import decode_examples
from seqcore.tokenizer import load_tokenizers
from seqcore.determinism import set_determinism


def output_problem(tokens: list[int], eos: bool, unk: int, max_len: int) -> str:
    """Why a decoded output is not an answer ("" when it is)."""
    if unk in tokens:
        return "the model produced an unknown token"
    if not eos:
        return f"no end of sequence within decode.max_len {max_len}"
    return ""


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
        cfg = load_config(args.params)
    except ConfigError as err:
        print(f"[predict] {err}", file=sys.stderr)
        return 2
    if args.file is not None and args.inputs:
        print("[predict] give inputs as arguments or with --file, not both", file=sys.stderr)
        return 2
    try:
        lines = args.inputs or (split_lines(Path(args.file).read_bytes()) if args.file
                                else split_lines(sys.stdin.buffer.read()))
    except OSError as err:
        print(f"[predict] --file {args.file}: {err.strerror}", file=sys.stderr)
        return 2
    if not lines:
        print("[predict] no input: give inputs as arguments, with --file, or one per line on "
              "stdin", file=sys.stderr)
        return 2
    try:  # a missing, corrupt or refused model or tokenizer: one line, exit 1
        saved = ModelFile.load(cfg.paths.model)
        model, meta = saved.build(), saved.meta
        tc = tokenizer_contract(cfg)
        signature(cfg, "predict", meta.signature, cfg.paths.model, contract=tc,
                  quiet=not args.verbose)
        toks = load_tokenizers(cfg.paths.tokenizer_contract, meta.tokenizer_sha256(), tc)
    except OneLineError as err:
        print(f"[predict] {err}", file=sys.stderr)
        return 1
    except FileNotFoundError as err:
        print(f"[predict] {err.filename}: missing; run `dvc repro` (or `dvc pull`) first",
              file=sys.stderr)
        return 1
    checked = [SourceInput(line.decode("utf-8", "backslashreplace"), "", [], "not valid UTF-8")
               if isinstance(line, bytes) else
               check_source(line, toks.text, toks.src, meta.max_src_len) for line in lines]
    good = [i for i, c in enumerate(checked) if not c.problem]
    examples = [Example(str(i), str(i), checked[i].text, "", checked[i].ids, [], True)
                for i in good]
    set_determinism(cfg.decode.seed, cfg.train.threads)
    with torch.inference_mode():
        rows = decode_examples(model, examples, make_decoder(cfg.decode, toks.ids), toks.ids,
                               toks.tgt, cfg.decode.batch_size)
    answers = {int(r.id): (r.hypothesis, output_problem(r.tokens, r.eos, toks.ids.unk,
                                                        cfg.decode.max_len)) for r in rows}
    return report(checked, answers)


def split_lines(data: bytes) -> list[str | bytes]:
    """Standard input or a file, one entry per line: the text, or the raw bytes of a line
    that is not valid UTF-8 (answered with its own error line; the other lines still get
    answers)."""
    out: list[str | bytes] = []
    for raw in data.splitlines():
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(raw)
    return out


def report(checked: list[SourceInput], answers: dict[int, tuple[str, str]]) -> int:
    """Print answers to stdout and problems to stderr, in input order; 1 if any line failed."""
    failed = 0
    for i, c in enumerate(checked):
        output, problem = answers.get(i, ("", c.problem))
        if problem:
            failed += 1
            print(f"[predict] line {i + 1} {c.raw!r}: {problem}", file=sys.stderr)
        else:
            print(f"{c.raw}\t{output}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
