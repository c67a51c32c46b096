"""Layers (issue 11): a lower module never imports a higher one, and a stage never imports
the code of a later one.

The import of each module is read from its source with ``ast`` (function-level imports
included), so a lazy import inside a function counts too.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.factories import REPO
from tests.pipeline_helpers import import_closure, imported_names


#: package -> modules it must not import (a prefix covers a whole package).
FORBIDDEN = {
    "seqcore/metrics": ("seqcore.training", "seqcore.decoding", "seqcore.tokenizer"),
    # the artifact layer sits under every stage's code: its blob I/O (seqcore.blobs) and
    # strict-JSON nulls (seqcore.nulls) are ground-floor modules (issue 26)
    "seqcore/artifacts": ("seqcore.training", "seqcore.metrics", "seqcore.decoding"),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_lower_package_imports_no_higher_one(package: str) -> None:
    bad = sorted(f"{path.relative_to(REPO)} imports {name}"
                 for path in sorted((REPO / package).rglob("*.py"))
                 for name in imported_names(path)
                 if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[package]))
    assert not bad, bad


# -- stages: each imports only the pieces it uses (issue 11) ------------------------------------

#: stage -> code its import closure must not reach: the data stages stay fresh in `dvc status`
#: when training, model, decoding or metrics code changes, and train does not re-run for a
#: decoding edit, nor decode for a metrics edit (a task's pieces live in one module per
#: stage: seqcore/tasks/__init__.py).
NOT_IN_CLOSURE = {
    "prepare": ("seqcore/training", "seqcore/models", "seqcore/decoding", "seqcore/metrics"),
    "tokenizer": ("seqcore/training", "seqcore/models", "seqcore/decoding", "seqcore/metrics"),
    "train": ("seqcore/decoding", "seqcore/metrics"),
    "decode": ("seqcore/metrics", "seqcore/training"),
}


@pytest.mark.parametrize("stage", sorted(NOT_IN_CLOSURE))
def test_a_stage_imports_no_code_of_the_later_stages(stage: str) -> None:
    later = tuple(f"{folder}/" for folder in NOT_IN_CLOSURE[stage])
    bad = sorted(p for p in import_closure(f"pipeline.{stage}") if p.startswith(later))
    assert not bad, f"pipeline.{stage} imports {bad}"


def test_importing_the_prepare_stage_does_not_import_torch() -> None:
    code = "import sys, pipeline.prepare; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
