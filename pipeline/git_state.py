"""The checkout a result was made in: its commit, and whether code or params differ from it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pipeline.dvc_files import pipeline_outputs
from seqcore.config import Config


def git_changes() -> list[str]:
    """Paths (files, untracked ones included) that differ from the checked-out commit."""
    res = subprocess.run(["git", "status", "--porcelain", "-z", "--untracked-files=all"],
                         capture_output=True, text=True, check=False)
    fields, paths = res.stdout.split("\0"), []
    while fields:
        entry = fields.pop(0)
        if len(entry) > 3:
            paths.append(entry[3:])
            if entry[0] in "RC":  # a rename or copy is followed by its source path
                paths.append(fields.pop(0))
    return paths


def git_state(cfg: Config) -> dict[str, str]:
    """The commit of the working tree, and whether its code or params differ from it.

    Files the pipeline writes itself (dvc.lock, reports/, every output in dvc.yaml) do not
    count: `dvc repro` rewrites them before this runs, which marked every run dirty (issue 12).
    """
    written = {"dvc.lock", "reports"} | pipeline_outputs(cfg)
    dirty = [p for p in git_changes()
             if not any(p == w or p.startswith(w + "/") for w in written)]
    return {"git.commit": head_commit(), "git.dirty": str(bool(dirty))}


def head_commit(root: Path | None = None) -> str:
    """The commit checked out in ``root`` (default: the working directory); "none" outside a
    repository or before the first commit."""
    res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                         text=True, check=False)
    return res.stdout.strip() or "none"


def source_files(root: Path = Path()) -> list[str]:
    """The repository's files as a clone would hold them plus the work not yet committed: the
    tracked files and the untracked ones git does not ignore (relative paths; a path whose
    file is gone is left out). The audit's rebuild and the tests copy a repository by it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=root, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (root / name).is_file()]


def copy_checkout(dest: Path, root: Path = Path(), leave_out: tuple[str, ...] = ("dvc.lock",),
                  extra: tuple[Path, ...] = ()) -> None:
    """Copy ``root``'s :func:`source_files` into ``dest`` (those equal to or under a
    ``leave_out`` path excepted), then the ``extra`` files and folders (the raw input, which
    DVC keeps out of git): the one repository copy of the audit's rebuild and the tests.
    :func:`commit_copy` makes it a repository of its own."""
    names = [n for n in source_files(root)
             if not any(n == w or n.startswith(w.rstrip("/") + "/") for w in leave_out)]
    for name in [*names, *(str(p) for p in extra if (root / p).exists())]:
        src, out = root / name, dest / name
        if src.is_dir():
            shutil.copytree(src, out, dirs_exist_ok=True, symlinks=True)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)


def commit_copy(dest: Path, message: str, author: str) -> None:
    """``git init`` in ``dest`` and commit everything git does not ignore, as ``author``."""
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", f"user.name={author}", "-c", f"user.email={author}@localhost",
                 "commit", "-qm", message]):
        subprocess.run(cmd, cwd=dest, check=True, capture_output=True)
