"""Rewrite the code deps of each stage in dvc.yaml to the import closure of its entry module.

``tests/stages/test_declared_reads.py`` fails when a stage's declared code differs from what it
imports; this tool makes them agree (run from the repository root, review the diff):

    python tools/sync_deps.py

A folder is written as one dep when the stage imports every module in it, else its files are
listed one by one. Data deps (``${paths...}``) and the order of stages are kept.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.pipeline_helpers import CODE_ROOTS, import_closure  # noqa: E402 (after sys.path)


def compact(files: set[str]) -> list[str]:
    """Files, with every folder whose modules are all in ``files`` folded into the folder."""
    out: set[str] = set(files)
    for folder in sorted({str(Path(f).parent) for f in files}, key=len, reverse=True):
        if folder in CODE_ROOTS:
            continue
        members = {str(p.relative_to(REPO)) for p in (REPO / folder).rglob("*.py")
                   if "__pycache__" not in p.parts}
        if members and members <= out | {m for m in out if m.startswith(folder + "/")}:
            out = {f for f in out if not f.startswith(folder + "/")} | {folder}
    return sorted(out)


def main() -> None:
    text = (REPO / "dvc.yaml").read_text(encoding="utf-8")
    lines = text.split("\n")
    out, stage, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^  ([A-Za-z_]+):\s*$", line)
        if m:
            stage = m.group(1)
        cmd = re.match(r"^    cmd: python -m pipeline\.(\w+)", line)
        if cmd:
            entry = cmd.group(1)
        if line.strip() == "deps:" and stage:
            out.append(line)
            i += 1
            kept = []
            while i < len(lines) and lines[i].startswith("      - "):
                item = lines[i][8:]
                if item.split("/")[0] not in CODE_ROOTS:
                    kept.append(lines[i])
                i += 1
            code = compact(import_closure(f"pipeline.{entry}"))
            out.extend(f"      - {c}" for c in code)
            out.extend(kept)
            continue
        out.append(line)
        i += 1
    (REPO / "dvc.yaml").write_text("\n".join(out), encoding="utf-8")


if __name__ == "__main__":
    main()
