"""What every stage shares: argument parsing, config loading, JSON output, the contract check."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.timing import record_stage
from seqcore.config import Config, ConfigError, load_config
from seqcore.config_rules import host_problem, workspace_problem
from seqcore.errors import OneLineError, UnreadableFile
from seqcore.kernels import KernelProfileError, check_portable, describe, relaunch_env
from seqcore.signature_format import inherited_diff
from seqcore.tasks import task_checked

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
        return load_params(args.params)
    except ConfigError as err:
        print(err, file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_STATUS) from None


def stage_main(name: str, description: str, body: Callable[[Config], object]) -> None:
    """What ``python -m pipeline.<name>`` runs: the params loaded (a bad file stops here, in
    one line), ``body`` run on them, then the stage's time recorded (pipeline/timing.py)."""
    body(load(description))
    record_stage(name)


def load_params(path: str) -> Config:
    """The params of every stage and user command: the loader's types, ranges and rules
    between keys, then the task's own rules (seqcore.tasks.task_checked).

    Raises:
        ConfigError: one line naming the file, the key, the value and what is allowed.
    """
    return task_checked(load_config(path), str(path))


def cpu_kernels(profile: str, kind: str, key: str, stage: str, announce: bool = False) -> None:
    """Run ``python -m pipeline.<stage>`` under its CPU kernel profile (seqcore.kernels).

    On the CPU (``kind``: the device kind the stage computes on), a ``portable`` stage whose
    environment lacks the profile's variables starts itself again with them (they act only
    before torch's first kernel), then proves they took effect: a CPU without AVX2, or a
    torch that ignored the pin, stops the stage here with one line naming what it found and
    ``KEY: native`` (exit status 1; validate stops on a CPU without AVX2 before any stage
    runs, :func:`check_host`). On CUDA the profile does not apply (docs/reproducibility.md).
    ``announce``: say which kernels run (the training log records what trained the model).
    """
    if kind != "cpu":
        return
    env = relaunch_env(profile, dict(os.environ))
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", f"pipeline.{stage}", *sys.argv[1:]],
                  env)
    if profile == "portable":
        try:
            check_portable(key)
        except KernelProfileError as err:  # one line (the excepthook), exit status 1
            raise KernelProfileError(f"[{stage}] {err}") from None
    if announce:
        print(f"[{stage}] cpu kernels: {describe(profile)}", file=sys.stderr)


def check_host(cfg: Config) -> None:
    """Stop with one line and exit status 2 when the params ask the portable CPU kernel
    profile of a CPU that cannot give it (no AVX2): validate, before any stage has run, on
    the CPU's flags alone (no torch); the stage itself proves the profile when it runs."""
    problem = host_problem(cfg)
    if problem:
        print(f"params.yaml: {problem}", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_STATUS)


def check_workspace(cfg: Config) -> None:
    """Stop with one line and exit status 2 when the workspace lacks what the params name
    (seqcore.config_rules.workspace_problem)."""
    problem = workspace_problem(cfg)
    if problem:
        print(f"params.yaml: {problem}", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR_STATUS)


def _one_line_excepthook(kind: type[BaseException], err: BaseException, tb: Any) -> None:
    """Expected failures (seqcore.errors.OneLineError: e.g. an unusable checkpoint) print
    their one line (exit status 1); an input file that is not what its writer writes
    (seqcore.errors.UnreadableFile: not UTF-8, not JSON, cut off) its one line, exit status 2;
    an input file that is not there (issue 54: a deleted
    ``tokenizer/contract.json``) is named in one line with what to do, exit status 2;
    anything else is a bug and keeps its traceback."""
    if isinstance(err, UnreadableFile):  # a broken input file, like a missing one: status 2
        _input_error(str(err))
    elif isinstance(err, OneLineError):
        print(err, file=sys.stderr)
    elif isinstance(err, FileNotFoundError) and err.filename:
        _input_error(f"{err.filename}: missing; run the stages before this one (`dvc repro`) "
                     "or `dvc pull` it")
    else:
        sys.__excepthook__(kind, err, tb)


def _input_error(line: str) -> None:
    """Print ``line`` and end the process with exit status 2 (an excepthook cannot choose the
    exit status)."""
    print(line, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(CONFIG_ERROR_STATUS)


def tokenizer_contract(cfg: Config) -> TokenizerContract:
    """The tokenizer stage's contract (read once per stage and passed on)."""
    # imported here: the class pulls in torch, which fetch, prepare and validate never need
    from seqcore.artifacts.tokenizer_contract import TokenizerContract  # noqa: PLC0415 (see above)

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
