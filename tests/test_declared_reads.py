"""Declared reads are actual reads (STYLE rule 14, issue 12).

Each stage's ``deps`` in dvc.yaml cover exactly the repository modules its entry module
imports (the closure, computed from the source with ``ast``), and its ``params`` are exactly
the config keys it reads while it runs (recorded by a wrapper this test installs on the
frozen config dataclasses). Both comparisons go both ways: an undeclared read lets
``dvc repro`` skip a stage whose output changed; a declared dependency nobody reads re-runs
a stage for nothing.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, TINY_PARAMS, copy_repo, merge

STAGES = ("fetch", "prepare", "tokenizer", "train", "decode", "evaluate")
CODE_ROOTS = ("pipeline", "seqcore")


def dvc_stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def module_file(name: str) -> Path | None:
    """The repository file of a dotted module name (package -> its __init__.py), or None."""
    if name.split(".")[0] not in CODE_ROOTS:
        return None
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_names(path: Path) -> set[str]:
    """Every module an import statement in ``path`` may load (function-level ones too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from pkg import sub` loads pkg/sub.py when sub is a module
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_closure(entry: str) -> set[str]:
    """Repository files (relative paths) loaded by importing module ``entry``."""
    todo, seen = [entry], set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        for i in range(1, len(parts) + 1):
            path = module_file(".".join(parts[:i]))
            if path is None or path in seen:
                continue
            seen.add(path)
            todo.extend(imported_names(path))
    return {str(p.relative_to(REPO)) for p in seen}


def declared_code(stage: dict) -> set[str]:
    """The stage's code deps (templated data paths are not code)."""
    deps = (d if isinstance(d, str) else next(iter(d)) for d in stage.get("deps", []))
    return {d.rstrip("/") for d in deps if d.split("/")[0] in CODE_ROOTS}


def covered(path: str, deps: set[str]) -> bool:
    return any(path == d or path.startswith(d + "/") for d in deps)


@pytest.mark.parametrize("stage", STAGES)
def test_stage_deps_are_exactly_the_import_closure_of_its_entry_module(stage: str) -> None:
    closure = import_closure(f"pipeline.{stage}")
    deps = declared_code(dvc_stages()[stage])
    undeclared = sorted(p for p in closure if not covered(p, deps))
    assert not undeclared, f"{stage}: imported but not in dvc.yaml deps: {undeclared}"
    for dep in sorted(deps):
        files = {str(p.relative_to(REPO)) for p in (REPO / dep).rglob("*.py")} \
            if (REPO / dep).is_dir() else {dep}
        unused = sorted(files - closure)
        assert not unused, f"{stage}: dvc.yaml dep {dep} holds modules it never imports: {unused}"
