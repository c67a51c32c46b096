"""DVC's own hashes: the md5 it records for files and folders, and dvc.lock digests.

These follow DVC's conventions (md5 content addresses, the ``.dir`` tree hash, the stage
order of dvc.lock), so they live in pipeline/ next to the stages that call DVC; the generic
file hashing is seqcore/hashing.py.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from seqcore.hashing import file_hash


def md5_file(path: Path) -> str:
    """md5 of a file's bytes (DVC 3 ``hash: md5``; a content address, not a security hash)."""
    return file_hash(path, "md5")


def dvcignore_patterns(root: Path) -> tuple[list[str], list[str]]:
    """Directory-name and file-name patterns of ``root/.dvcignore``.

    Only the simple forms are understood: ``name/`` (a directory of that name anywhere) and a
    glob without a slash (``*.pyc``), which is what this project's .dvcignore uses.
    """
    path = root / ".dvcignore"
    lines = path.read_text().splitlines() if path.exists() else []
    rules = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    return [r.rstrip("/") for r in rules if r.endswith("/")], [r for r in rules
                                                               if not r.endswith("/")]


def dvc_md5(path: Path, ignore: tuple[list[str], list[str]] = ([], [])) -> str:
    """The md5 DVC records for a file, or for a directory its ``<md5>.dir`` tree hash.

    The tree hash is the md5 of the JSON list ``[{"md5": ..., "relpath": ...}]`` sorted by
    relpath (dvc_data ``Tree.as_bytes``), leaving out what ``.dvcignore`` ignores
    (``ignore`` = dvcignore_patterns); tests compare it with a real ``dvc.lock``.
    """
    if path.is_file():
        return md5_file(path)
    dirs, globs = ignore
    entries = []
    for dirpath, subdirs, files in os.walk(path):
        subdirs[:] = [d for d in subdirs if not any(fnmatch.fnmatch(d, p) for p in dirs)]
        for name in files:
            if any(fnmatch.fnmatch(name, p) for p in globs):
                continue
            full = Path(dirpath) / name
            entries.append({"md5": md5_file(full), "relpath": full.relative_to(path).as_posix()})
    entries.sort(key=lambda e: e["relpath"])
    listing = json.dumps(entries, sort_keys=True).encode("utf-8")
    return hashlib.md5(listing).hexdigest() + ".dir"  # noqa: S324 (DVC's folder hash; not security)


def lock_hash_diffs(root: Path, lock: dict[str, Any]) -> list[str]:
    """Every dependency and output md5 in a parsed dvc.lock against the files under ``root``.

    A path appears in several records (an out of one stage, a dep of the next): each record
    is compared, so a stale record in any stage is found.
    """
    records: dict[str, list[tuple[str, str]]] = {}
    for stage, entry in lock.get("stages", {}).items():
        for kind in ("deps", "outs"):
            for item in entry.get(kind, []):
                if "md5" in item:
                    records.setdefault(item["path"], []).append((f"{stage}.{kind}", item["md5"]))
    diffs, ignore = [], dvcignore_patterns(root)
    for rel, recs in sorted(records.items()):
        path = root / rel
        got = dvc_md5(path, ignore) if path.exists() else "missing"
        diffs += [f"{rel}: workspace has md5 {got}, dvc.lock {where} records {recorded}"
                  for where, recorded in recs if got != recorded]
    return diffs
