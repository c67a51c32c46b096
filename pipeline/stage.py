"""What every stage shares: argument parsing, config loading, JSON output, the contract check."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from seqcore.config import Config, ConfigError, load_config
from seqcore.errors import OneLineError
from seqcore.signature import contract_signature, signature_diff


#: Exit status of a stage stopped by a configuration error (argparse uses 2 for bad usage too).
CONFIG_ERROR_STATUS = 2


def load(description: str) -> Config:
    """Parse ``--params`` and load the validated config.

    A configuration error stops the stage here, before any work, with one line on stderr
    (file, key, value, the valid choices or range) and exit status 2: no traceback (issue 13).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="params file (default %(default)s)")
    args = parser.parse_args()
    sys.excepthook = _one_line_excepthook
    try:
        return load_config(args.params)
    except ConfigError as err:
        print(err, file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_STATUS) from None


def _one_line_excepthook(kind: type[BaseException], err: BaseException, tb: Any) -> None:
    """Expected failures (seqcore.errors.OneLineError: e.g. an unusable checkpoint) print
    their one line; anything else is a bug and keeps its traceback. Exit status stays 1."""
    if isinstance(err, OneLineError):
        print(err, file=sys.stderr)
    else:
        sys.__excepthook__(kind, err, tb)


def write_json(path: str | Path, obj: Any) -> None:
    """Pretty, key-sorted, strict JSON with a trailing newline (stable bytes).

    ``allow_nan=False``: a NaN or infinity raises here instead of writing a bare ``NaN`` that
    most JSON readers reject; producers turn undefined values into ``null`` with a reason
    first (seqcore.metrics.nulls, issue 13).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False,
                               allow_nan=False) + "\n", encoding="utf-8")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def tokenizer_contract(cfg: Config) -> dict[str, Any]:
    return read_json(Path(cfg.paths.tokenizer) / "contract.json")


def signature(cfg: Config, stage: str, stored: str | None = None, where: str = "",
              upstream: bool = True) -> str:
    """Compute, print and (if ``stored`` is given) compare the contract signature.

    ``upstream=False`` is for the stages before the tokenizer (fetch, prepare): their
    signature has the tokenizer fields ``pending`` instead of reading a stale contract.
    A mismatch with ``stored`` stops the stage with a field-by-field diff.
    """
    sig = contract_signature(cfg, tokenizer_contract(cfg) if upstream else None)
    print(f"[{stage}] contract: {sig}", file=sys.stderr)
    if stored is not None and stored != sig:
        diff = "\n  ".join(signature_diff(stored, sig))
        sys.exit(f"[{stage}] contract mismatch with {where} (stored != current):\n  {diff}\n"
                 "re-run the upstream stages (dvc repro) so they agree")
    return sig
