"""What every stage shares: argument parsing, config loading, JSON output, the contract check."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from seqcore.config import Config, ConfigError, load_config
from seqcore.config_rules import workspace_problem
from seqcore.errors import OneLineError
from seqcore.signature import inherited_diff

if TYPE_CHECKING:
    from seqcore.artifacts.tokenizer_contract import TokenizerContract

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


def check_workspace(cfg: Config) -> None:
    """Stop with one line and exit status 2 when the workspace lacks what the params name
    (seqcore.config_rules.workspace_problem)."""
    problem = workspace_problem(cfg)
    if problem:
        print(f"params.yaml: {problem}", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_STATUS)


def _one_line_excepthook(kind: type[BaseException], err: BaseException, tb: Any) -> None:
    """Expected failures (seqcore.errors.OneLineError: e.g. an unusable checkpoint) print
    their one line; anything else is a bug and keeps its traceback. Exit status stays 1."""
    if isinstance(err, OneLineError):
        print(err, file=sys.stderr)
    else:
        sys.__excepthook__(kind, err, tb)


def tokenizer_contract(cfg: Config) -> TokenizerContract:
    """The tokenizer stage's contract (read once per stage and passed on)."""
    # imported here: the class pulls in torch, which fetch, prepare and validate never need
    from seqcore.artifacts.tokenizer_contract import TokenizerContract  # noqa: PLC0415

    return TokenizerContract.load(cfg.paths.tokenizer_contract)


def signature(cfg: Config, stage: str, stored: str, where: str,
              contract: TokenizerContract | None = None, quiet: bool = False) -> str:
    """Print the contract signature ``stored`` (read from ``where``) that this stage works
    under and stop unless it carries every field of the tokenizer contract's signature.

    ``contract``: the tokenizer contract the stage already read (else it is read here).
    A mismatch stops the stage with a field-by-field diff.
    """
    if contract is None:
        contract = tokenizer_contract(cfg)
    if not quiet:
        print(f"[{stage}] contract: {stored}", file=sys.stderr)
    diff = inherited_diff(stored, contract.signature)
    if diff:
        lines = "\n  ".join(diff)
        sys.exit(f"[{stage}] contract mismatch: {where} against {cfg.paths.tokenizer_contract} "
                 f"({where} != tokenizer contract):\n  {lines}\n"
                 "re-run the upstream stages (dvc repro) so they agree")
    return stored
