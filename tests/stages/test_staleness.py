"""What an edit re-runs (issue 34): :func:`expected` states which stages a change to each
params.yaml leaf makes stale (its section's rule or a listed exception), checked both ways
against dvc.yaml for every key and against real `dvc status`; and the same bytes elsewhere."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import mlflow
import pytest
import yaml

from seqcore.config import Config, as_dict, flatten
from tests.factories import REPO
from tests.pipeline_helpers import declares, dvc, dvc_process, run_python, tool_env

#: validate checks the whole file: every key makes it stale (it writes nothing).
ALWAYS = frozenset({"validate"})

#: The stages a key of each params.yaml section makes stale.
SECTION: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    # a user's task reads another format, tokenizes, trains and scores otherwise
    "task": {"prepare", "tokenizer", "baseline", "train", "decode", "evaluate"},
    # rows and splits: prepare makes them; the training contract and the run name them
    "data": {"prepare", "train", "evaluate"},
    # the tokenizer signature, then the training contract
    "tokenizer": {"tokenizer", "train", "evaluate"},
    "sequence": {"tokenizer", "train", "evaluate"},
    "model": {"train", "evaluate"}, "train": {"train", "evaluate"},
    "decode": {"decode", "evaluate"}, "evaluate": {"evaluate"},
    "baseline": {"baseline", "evaluate"},
    "mlflow": {"evaluate"},  # where the run is logged; no DVC-tracked byte
}.items()}

#: Keys whose stages are not their section's, and why.
EXCEPTIONS: dict[str, tuple[frozenset[str], str]] = {k: (frozenset(v), why) for k, (v, why) in {
    "data.source": ({"fetch", "prepare", "tokenizer", "train", "evaluate"},
                    "fetch copies the snapshot from it; the tokenizer signature has a stress "
                    "field for the CMUdict source only"),
    "data.path": ({"fetch", "prepare", "train", "evaluate"}, "fetch copies the snapshot from it"),
    "data.sha256": ({"fetch"}, "the snapshot's pin: a guard fetch checks"),
    **{f"data.{k}": ({"prepare", "tokenizer", "train", "evaluate"},
                     "a field of the tokenizer signature as well")
       for k in ("normalization", "casefold", "casefold_target", "keep_stress")},
    "data.min_split_rows": ({"prepare", "tokenizer"}, "a guard prepare and tokenizer check"),
    "data.max_target_share": ({"prepare"}, "a guard prepare checks"),
    "data.max_copy_share": ({"prepare"}, "a guard prepare checks"),
    "data.max_reject_rate": ({"prepare", "baseline"}, "a guard prepare and baseline check"),
    "tokenizer.max_unk_rate": ({"tokenizer"}, "a guard the tokenizer checks"),
    "sequence.max_drop_rate": ({"tokenizer"}, "a guard the tokenizer checks"),
    "sequence.loss_norm": ({"train", "evaluate"}, "the loss: not the tokenizer's business"),
    "sequence.label_smoothing": ({"train", "evaluate"}, "the loss: not the tokenizer's business"),
    "train.max_consecutive_skips": ({"train"}, "a guard training checks"),
    **{f"train.{k}": ({"train"}, "bookkeeping: the same weights, log and metrics")
       for k in ("log_every", "keep_last", "resume", "checkpoint_every")},
    "train.ledger_every": ({"train"}, "which training states the ledger keeps (issue 33)"),
    "train.dev_decode_show": ({"train"}, "console only: the dev words the progress lines show"),
}.items()}

#: Keys templated into dvc.yaml's paths: another value moves a dep or an out (DVC sees a
#: changed stage definition, not a changed param), so the matrix leaves them out.
TEMPLATED = ("paths.", "evaluate.details_dir")


def leaves() -> list[str]:
    return [k for k in flatten(as_dict(Config())) if not k.startswith(TEMPLATED)]


def locked_outs(repo: Path) -> dict[str, str]:
    """path -> md5 of every out in ``repo``'s dvc.lock."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {o["path"]: o["md5"] for stage in lock["stages"].values() for o in stage.get("outs", [])}


def expected(key: str) -> frozenset[str]:
    """The stages `dvc status` lists after ``key`` changes."""
    return ALWAYS | (EXCEPTIONS[key][0] if key in EXCEPTIONS else SECTION[key.split(".")[0]])


@functools.cache
def dvc_stages() -> dict[str, Any]:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def declaring(key: str) -> frozenset[str]:
    """The stages whose params in dvc.yaml include ``key``."""
    return frozenset(name for name, stage in dvc_stages().items()
                     if declares(stage.get("params", []), key))


def test_every_exception_names_a_key_and_differs_from_its_sections_rule() -> None:
    keys = set(leaves())
    assert set(EXCEPTIONS) <= keys, set(EXCEPTIONS) - keys
    same = [k for k, (stages, _) in EXCEPTIONS.items() if stages == SECTION[k.split(".")[0]]]
    assert not same, f"{same}: listed as exceptions but their section's rule says the same"


@pytest.mark.parametrize("key", leaves())
def test_dvc_yaml_declares_each_key_in_exactly_the_stages_of_the_matrix(key: str) -> None:
    got, want = declaring(key), expected(key)
    assert got == want, (f"{key}: dvc.yaml declares it in {sorted(got)}, the staleness matrix "
                         f"says {sorted(want)} (missing {sorted(want - got)}, extra "
                         f"{sorted(got - want)})")


# -- real `dvc status` on a tiny committed result -----------------------------------------------

def proven_keys() -> list[str]:
    """One key per group of keys with the same stages, and every exception."""
    firsts: dict[frozenset[str], str] = {}
    for key in leaves():
        firsts.setdefault(expected(key), key)
    return sorted(set(firsts.values()) | set(EXCEPTIONS))


def other_value(value: Any) -> Any:
    """Another value of the same kind (`dvc status` compares values; it validates nothing)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list):
        return [*value, 1]
    return f"{value}x"




@pytest.mark.slow
def test_dvc_status_after_each_change_lists_exactly_the_stages_of_the_matrix(
        result_copy: Path) -> None:
    repo = result_copy
    current = flatten(yaml.safe_load((repo / "params.yaml").read_text()))
    defaults = flatten(as_dict(Config()))
    cases = {k: other_value(current.get(k, defaults[k])) for k in proven_keys()}
    res = run_python(repo, "-m", "tests.programs.dvc_status", "params.yaml", json.dumps(cases),
                     python=sys.executable, env=dict(tool_env(), PYTHONPATH=str(REPO)),
                     timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    stale = json.loads(res.stdout.strip().splitlines()[-1])
    assert stale.pop("") == [], "the committed tiny result is not up to date"
    wrong = {k: {"dvc status": got, "matrix": sorted(expected(k))}
             for k, got in stale.items() if set(got) != expected(k)}
    assert not wrong, json.dumps(wrong, indent=1)


@pytest.mark.slow
def test_a_raised_guard_reruns_only_the_stage_that_checks_it(result_copy: Path) -> None:
    """`dvc repro` after raising tokenizer.max_unk_rate: the tokenizer checks again and
    writes the same bytes, so DVC stops there; the checkpoint folder is the same one."""
    repo = result_copy
    lock_before = locked_outs(repo)
    folders = sorted(p.name for p in (repo / "checkpoints").iterdir())
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params.setdefault("tokenizer", {})["max_unk_rate"] = 0.05
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    output = dvc(repo, "repro")
    ran = set(re.findall(r"Running stage '(\w+)'", output))
    assert ran == {"validate", "tokenizer"}, output
    assert locked_outs(repo) == lock_before
    assert sorted(p.name for p in (repo / "checkpoints").iterdir()) == folders


# -- the same bytes from another machine --------------------------------------------------------

#: Started in every stage's interpreter (PYTHONPATH): another platform string, and (beside it)
#: an installed package the first run did not have.
SITECUSTOMIZE = '''
import platform
platform.platform = lambda *args, **kwargs: "Linux-0.0.0-elsewhere-x86_64-with-glibc9.99"
'''


@pytest.mark.slow
def test_another_platform_and_package_set_reproduce_every_locked_out(
        result_copy: Path, tmp_path: Path) -> None:
    """Nothing that says where a result was made (platform, kernel, installed packages) enters
    a DVC-tracked file, so `dvc repro -f` elsewhere writes the lock's bytes; the MLflow run
    records the other environment."""
    repo = result_copy
    before = locked_outs(repo)
    site = tmp_path / "elsewhere"
    (site / "seqcore_probe-1.0.dist-info").mkdir(parents=True)
    (site / "seqcore_probe-1.0.dist-info/METADATA").write_text(
        "Metadata-Version: 2.1\nName: seqcore-probe\nVersion: 1.0\n")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = tool_env()
    # fresh interpreters (not the session's stage worker), each with the other environment
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if "seqcore-stage-worker" not in p)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(site), env.get("PYTHONPATH"))))
    res = dvc_process(repo, "repro", "-f", env=env, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    after = locked_outs(repo)
    assert after == before, {p: (before.get(p), m) for p, m in after.items() if before.get(p) != m}
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    first, again = sorted(client.search_runs([e.experiment_id for e in client.search_experiments()]),
                          key=lambda r: r.info.start_time)[-2:]
    assert again.data.tags["env.platform"].startswith("Linux-0.0.0-elsewhere")
    assert first.data.tags["env.packages_sha256"] != again.data.tags["env.packages_sha256"]
