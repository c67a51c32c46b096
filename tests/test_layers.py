"""Layers (issues 11, 50): a lower module never imports a higher one, a stage never imports the
code of a later one, no import runs in a circle. Imports are read from the source with ``ast``,
so a lazy import inside a function counts too."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

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


#: stage -> code its import closure must not reach (issue 11): the data stages stay fresh in
#: `dvc status` when training, model, decoding or metrics code changes, train does not re-run
#: for a decoding edit, nor decode for a metrics edit. The lm task's model is model code
#: (seqcore/models/rnnlm.py), its feed and setup training code, so the stages before them
#: never load them either (issue 26).
LM_TRAINING = ("seqcore/tasks/lm/feed.py", "seqcore/tasks/lm/setup.py")
DATA_STAGES_NEVER_LOAD = ("seqcore/training", "seqcore/models", "seqcore/decoding",
                          "seqcore/metrics", *LM_TRAINING)
NOT_IN_CLOSURE = {
    "prepare": DATA_STAGES_NEVER_LOAD,
    "tokenizer": DATA_STAGES_NEVER_LOAD,
    # train decodes while training (issue 52: the dev sample, seqcore.training.dev_decode;
    # minimum risk training's candidates, seqcore.training.mrt) with the searches and the edit
    # distance only: never the decode stage's factory, rescoring or the evaluation
    "train": ("seqcore/decoding/factory.py", "seqcore/decoding/predictions.py",
              "seqcore/decoding/rescore.py",
              *(f"seqcore/metrics/{m}.py" for m in (
                  "bootstrap", "comparison", "evaluation", "failures", "model_output", "plots",
                  "recompute", "report", "scores", "teacher"))),
    "decode": ("seqcore/metrics", "seqcore/training", *LM_TRAINING),
}


@pytest.mark.parametrize("stage", sorted(NOT_IN_CLOSURE))
def test_a_stage_imports_no_code_of_the_later_stages(stage: str) -> None:
    later = NOT_IN_CLOSURE[stage]  # a folder covers its modules, a file itself
    bad = sorted(p for p in import_closure(f"pipeline.{stage}")
                 if any(p == f or p.startswith(f + "/") for f in later))
    assert not bad, f"pipeline.{stage} imports {bad}"


def test_no_shared_code_imports_the_lm_tasks_code() -> None:
    # the lm task's documents, streams, feed and setup live in seqcore/tasks/lm/ (issue 26): the
    # shared floors (data, models, training, decoding, metrics) know nothing of it. seqcore.tasks
    # registers the package by name; the RNN LM is model code (seqcore/models/rnnlm.py, issue 50)
    wing = REPO / "seqcore" / "tasks" / "lm"
    imports = {str(path.relative_to(REPO)): {".".join(n.split(".")[:4])  # the module
                                             for n in imported_names(path)
                                             if n.split(".")[:3] == ["seqcore", "tasks", "lm"]}
               for path in MODULES.values() if wing not in path.parents}
    assert {path: names for path, names in imports.items() if names} == {}


def test_the_lm_wings_library_imports_no_stage_piece() -> None:
    # documents, streams, feed and setup sit on the floors below the stage pieces
    pieces = {f"seqcore.tasks.lm.{stage}" for stage in
              ("prepare", "tokenizer", "baseline", "train", "decode", "evaluate", "audit")}
    bad = sorted(f"{name}.py imports {n}" for name in ("documents", "streams", "feed", "setup")
                 for n in imported_names(REPO / "seqcore" / "tasks" / "lm" / f"{name}.py")
                 if ".".join(n.split(".")[:4]) in pieces)
    assert not bad, bad


def test_importing_the_prepare_stage_does_not_import_torch() -> None:
    code = "import sys, pipeline.prepare; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


# -- floors without circles (issue 50) ---------------------------------------------------------

def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: Every module of the library and the stages, by dotted name.
MODULES = {_module(p): p for root in ("seqcore", "pipeline")
           for p in sorted((REPO / root).rglob("*.py"))}


def _runtime_imports(path: Path) -> set[str]:
    """The repository modules ``path`` imports when it runs: function-level imports
    included, annotation-only ones (``if TYPE_CHECKING:``) left out, since they never run."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for n in ast.walk(node)}
    me, out = _module(path), set()
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: from the package of this module
                pkg = me.split(".")[: len(me.split(".")) - (path.name != "__init__.py")]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        for name in names:  # the longest prefix that is one of ours
            parts = name.split(".")
            found = next((".".join(parts[:i]) for i in range(len(parts), 0, -1)
                          if ".".join(parts[:i]) in MODULES), None)
            if found and found != me:
                out.add(found)
    return out


GRAPH = {name: _runtime_imports(path) for name, path in MODULES.items()}


def _reach(start: str) -> set[str]:
    """Every module that importing ``start`` runs, through any chain of imports."""
    seen, todo = set(), list(GRAPH[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(GRAPH[name])
    return seen


def test_no_module_imports_itself_back_through_others() -> None:
    # issue 50 removed config -> config_rules -> tasks -> config and audit <-> audit_run;
    # a circle is each module that reaches itself, with every module on its way back
    reach = {m: _reach(m) for m in GRAPH}
    circles = {tuple(sorted(m for m in reach[v] if v in reach[m])) for v in GRAPH if v in reach[v]}
    assert sorted(circles) == []


#: The library's floors, lowest first: a module imports its own floor and those below,
#: never one above (a prefix covers a package). Same-floor circles are the test above's.
FLOORS = (
    # ground: no seqcore import but each other's (signature_format: the text of a signature)
    ("seqcore", "seqcore.errors", "seqcore.nulls", "seqcore.hashing", "seqcore.jsonl",
     "seqcore.text", "seqcore.blobs", "seqcore.credentials", "seqcore.contract",
     "seqcore.determinism", "seqcore.kernels", "seqcore.environment", "seqcore.compare",
     "seqcore.g2p", "seqcore.signature_format", "seqcore.config_ranges", "seqcore.progress"),
    ("seqcore.config", "seqcore.config_rules"),
    ("seqcore.models",),  # every model family, the lm task's RNN LM among them
    ("seqcore.artifacts", "seqcore.signature", "seqcore.tokenizer"),
    ("seqcore.data", "seqcore.losses", "seqcore.sequences", "seqcore.baselines"),
    ("seqcore.training", "seqcore.decoding", "seqcore.metrics", "seqcore.ledger", "seqcore.audit"),
    ("seqcore.tasks", "seqcore.predictor"),
    ("pipeline",),
)


def _floor(module: str) -> int:
    best = max(((len(prefix), i) for i, floor in enumerate(FLOORS) for prefix in floor
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} is on no floor of FLOORS: add it"
    return best[1]


def test_no_import_runs_back_up_a_floor() -> None:
    # e.g. the model file once imported the lm task (its RNN LM now lives in seqcore.models)
    # and the baseline the config-reading signature module (it needs only signature_format)
    up = sorted(f"{a} imports {b}" for a, names in GRAPH.items() for b in names
                if _floor(b) > _floor(a))
    assert up == []


def test_the_params_loader_imports_no_task() -> None:
    # the task's own rules are applied by the stage entry and validate (seqcore.tasks.task_checked)
    closure = {"seqcore.config"} | _reach("seqcore.config")
    assert not {m for m in closure if m.startswith("seqcore.tasks")}, sorted(closure)


def test_no_code_swaps_the_tracking_uri_in_the_environment() -> None:
    # issue 50: the MLflow store is an argument (pipeline.audit.options.AuditOptions, the
    # copy's source and target); a swapped os.environ leaks into whatever runs meanwhile
    swaps = [f"{path.relative_to(REPO)}:{i}" for path in MODULES.values()
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"environ\[\s*[\"']MLFLOW_TRACKING_URI[\"']\s*\]\s*=", line)]
    assert swaps == []


#: A lint pragma and the reason it must carry beside it (issue 50, item 5): ``# noqa: CODE
#: (why)`` or ``# type: ignore[code] (why)``.
PRAGMA = re.compile(r"#\s*(noqa|type:\s*ignore|pragma)\b")
REASONED = re.compile(r"#\s*(noqa: [A-Z0-9, ]+|type: ignore\[[a-z, -]+\]) \(.+\)")


def test_every_lint_pragma_in_the_code_says_why() -> None:
    bare = [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for path in MODULES.values()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if PRAGMA.search(line) and not REASONED.search(line)]
    assert bare == []
