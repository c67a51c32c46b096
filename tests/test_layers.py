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
#: The lm task's wing (issue 26) keeps the floors: its model is model code, its feed and setup
#: training code, so the stages before them never load them either.
LM_MODEL = ("seqcore/tasks/lm/model.py",)
LM_TRAINING = ("seqcore/tasks/lm/feed.py", "seqcore/tasks/lm/setup.py")
NOT_IN_CLOSURE = {
    "prepare": ("seqcore/training", "seqcore/models", "seqcore/decoding", "seqcore/metrics",
                *LM_MODEL, *LM_TRAINING),
    "tokenizer": ("seqcore/training", "seqcore/models", "seqcore/decoding", "seqcore/metrics",
                  *LM_MODEL, *LM_TRAINING),
    "train": ("seqcore/decoding", "seqcore/metrics"),
    "decode": ("seqcore/metrics", "seqcore/training", *LM_TRAINING),
}


@pytest.mark.parametrize("stage", sorted(NOT_IN_CLOSURE))
def test_a_stage_imports_no_code_of_the_later_stages(stage: str) -> None:
    later = NOT_IN_CLOSURE[stage]  # a folder covers its modules, a file itself
    bad = sorted(p for p in import_closure(f"pipeline.{stage}")
                 if any(p == f or p.startswith(f + "/") for f in later))
    assert not bad, f"pipeline.{stage} imports {bad}"


# -- the lm task's wing (issue 26) -------------------------------------------------------------

#: The one module outside the wing that imports it, and why: the model file records the RNN
#: LM's shape as the wing's typed RNNLMShape (seqcore.tasks only registers the package by name).
INTO_THE_LM_WING = {"seqcore/artifacts/model_file.py": {"seqcore.tasks.lm.model"}}


def test_no_shared_code_imports_the_lm_tasks_code() -> None:
    # the lm task's documents, streams, model, feed and setup live in seqcore/tasks/lm/: the
    # shared floors (data, models, training, decoding, metrics) know nothing of it
    wing = REPO / "seqcore" / "tasks" / "lm"
    imports = {str(path.relative_to(REPO)): {".".join(n.split(".")[:4])  # the module
                                             for n in imported_names(path)
                                             if n == "seqcore.tasks.lm" or
                                             n.startswith("seqcore.tasks.lm.")}
               for root in ("seqcore", "pipeline") for path in sorted((REPO / root).rglob("*.py"))
               if wing not in path.parents}
    assert {path: names for path, names in imports.items() if names} == INTO_THE_LM_WING


def test_the_lm_wings_library_imports_no_stage_piece() -> None:
    # documents, streams, model, feed and setup sit on the floors below the stage pieces
    pieces = {f"seqcore.tasks.lm.{stage}" for stage in
              ("prepare", "tokenizer", "baseline", "train", "decode", "evaluate", "audit")}
    library = ("documents", "streams", "model", "feed", "setup")
    bad = sorted(f"{name}.py imports {n}" for name in library
                 for n in imported_names(REPO / "seqcore" / "tasks" / "lm" / f"{name}.py")
                 if ".".join(n.split(".")[:4]) in pieces)
    assert not bad, bad


def test_importing_the_prepare_stage_does_not_import_torch() -> None:
    code = "import sys, pipeline.prepare; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
