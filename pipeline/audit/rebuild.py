"""``python -m pipeline.audit --rebuild``: the whole pipeline again, in a temporary copy.

The copy holds the repository's git-tracked and untracked-but-not-ignored files, plus the
locked raw input (checked against dvc.lock first) and ``paths.external``; ``dvc repro``
runs every stage there (tokenizer and training included) with MLflow pointed at a store
inside the copy, and each out hash of the new dvc.lock is compared with the workspace's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.dvc_files import pipeline_stages, read_yaml12
from pipeline.audit.lock import md5_file
from pipeline.git_state import commit_copy, copy_checkout
from seqcore.audit import stage_out_diffs
from seqcore.config import Config


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).with_name(name))


def rebuild_diffs(cfg: Config, lock: dict[str, Any]) -> list[str]:
    """Re-run the pipeline in a temporary copy; name the first stage whose outs diverge."""
    raw = Path(cfg.paths.raw)
    fetched = {o["path"]: o["md5"] for o in lock["stages"]["fetch"]["outs"]}
    if raw.as_posix() in fetched and md5_file(raw) != fetched[raw.as_posix()]:
        return [f"{raw}: workspace md5 {md5_file(raw)}, dvc.lock records "
                f"{fetched[raw.as_posix()]}: not the locked raw input"]
    with tempfile.TemporaryDirectory(prefix="audit-rebuild-") as tmp:
        repo = Path(tmp) / "repo"
        copy_checkout(repo, extra=(Path(cfg.paths.raw), Path(cfg.paths.external)))
        env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp}/mlflow.db",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        commit_copy(repo, "rebuild", "audit")
        start = time.perf_counter()
        res = subprocess.run([_tool("dvc"), "repro"], cwd=repo, env=env, capture_output=True,
                             text=True, check=False)
        took = time.perf_counter() - start
        print(f"[audit] rebuild: dvc repro took {took:.0f} s in {repo}", file=sys.stderr)
        if res.returncode != 0:
            return [f"dvc repro failed in the rebuild copy ({res.returncode}):\n"
                    + (res.stdout + res.stderr).strip()[-2000:]]
        rebuilt = read_yaml12(repo / "dvc.lock")
    order = pipeline_stages()
    return stage_out_diffs(order, lock, rebuilt)
