"""What every stage shares: argument parsing, config loading, JSON output, the contract check."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from seqcore.config import Config, load_config
from seqcore.signature import contract_signature, signature_diff


def load(description: str) -> Config:
    """Parse ``--params`` and load the validated config."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="params file (default %(default)s)")
    args = parser.parse_args()
    return load_config(args.params)


def write_json(path: str | Path, obj: Any) -> None:
    """Pretty, key-sorted JSON with a trailing newline (stable bytes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                    encoding="utf-8")


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
