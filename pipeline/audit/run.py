"""``python -m pipeline.audit --run RUN_ID``: audit the result an MLflow run claims, from the
run alone (issue 33, item 4).

The run names its result by the digest of the dvc.lock stages the evaluate stage saw (tag
``dvc.lock.upstream.sha256``) and the commit it was made from (``git.commit``). The result is
the commit of this repository whose dvc.lock has that digest: the run's own commit when the
result was committed with it, else the first later one (the documented order commits the
result after the run). It is checked out
in a temporary git worktree; DVC brings its outputs from this repository's cache, or the
configured remote; the audit runs there on the auditor's code, and the verdict is written
back to the run as tags (``verdict.verdict_tags``), so the MLflow run table shows which runs are
audited. A run, commit or output that cannot be found stops with one line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.audit.core import audit
from pipeline.audit.mlflow_run import RESULT_TAG
from pipeline.audit.options import AuditOptions
from pipeline.audit.verdict import code_line, verdict_tags
from pipeline.dvc_files import parse_yaml12, upstream_lock_digest
from pipeline.git_state import head_commit
from pipeline.stage import load_params
from seqcore.audit import AuditReport
from seqcore.credentials import redact_text
from seqcore.errors import OneLineError



class RunNotAuditable(OneLineError, RuntimeError):
    """The run, its result's commit or the result's outputs cannot be found (one line)."""


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)
    if check and res.returncode != 0:
        last = res.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise RunNotAuditable(f"git {' '.join(args)} in {root}: {' '.join(last)}")
    return res


def result_digest(root: Path, commit: str) -> str | None:
    """The result digest of ``commit``'s dvc.lock (pipeline/dvc_files.upstream_lock_digest:
    its stages before evaluate, what a run logged for it records); None without a lock."""
    res = _git(root, "show", f"{commit}:dvc.lock", check=False)
    if res.returncode != 0:
        return None
    return upstream_lock_digest(parse_yaml12(res.stdout.decode("utf-8")) or {})


def result_commit(root: Path, made_from: str | None, digest: str) -> str:
    """The commit holding the result a run names by ``digest``: ``made_from`` if its dvc.lock
    is that result's, else the oldest commit after it (then any commit) whose dvc.lock is."""
    known = made_from and made_from != "none" and _git(
        root, "cat-file", "-e", f"{made_from}^{{commit}}", check=False).returncode == 0
    if known and result_digest(root, made_from) == digest:
        return made_from
    history = _git(root, "log", "--all", "--reverse", "--format=%H", "--", "dvc.lock")
    commits = history.stdout.decode().split()
    later = set(_git(root, "rev-list", "--all", f"^{made_from}").stdout.decode().split()) \
        if known else set(commits)
    ordered = [c for c in commits if c in later] + [c for c in commits if c not in later]
    found = next((c for c in ordered if result_digest(root, c) == digest), None)
    if found:
        return found
    raise RunNotAuditable(
        f"no commit of {root} holds the result of this run ({RESULT_TAG} {digest[:12]}, made "
        f"from commit {(made_from or 'none')[:12]}): commit params.yaml, dvc.lock and reports/ "
        "after the run (docs/experiments.md), or fetch the branch that has them")


def run_result(run: Any) -> tuple[str | None, str]:
    """The commit a run was made from and the digest of its result (RunNotAuditable without
    one: a run the evaluate stage did not log)."""
    tags = run.data.tags
    digest = tags.get(RESULT_TAG)
    if not digest or digest == "none":
        raise RunNotAuditable(f"run {run.info.run_id} has no {RESULT_TAG} tag: it was not "
                              "logged by the evaluate stage")
    return tags.get("git.commit"), digest


def _dvc(folder: Path, *args: str) -> subprocess.CompletedProcess:
    dvc = shutil.which("dvc") or "dvc"
    return subprocess.run([dvc, *args], cwd=folder, capture_output=True, text=True,
                          check=False)


def bring_outputs(root: Path, folder: Path) -> str:
    """The result's outputs into the worktree ``folder``: from ``root``'s DVC cache, else
    pulled from the configured remote. Returns how (RunNotAuditable when neither can)."""
    local = root / ".dvc" / "config.local"
    if local.exists():  # the remote's address and keys live there, never in git
        shutil.copyfile(local, folder / ".dvc" / "config.local")
    cache = _dvc(root, "cache", "dir")
    where = cache.stdout.strip() if cache.returncode == 0 and cache.stdout.strip() else \
        str(root / ".dvc" / "cache")
    _dvc(folder, "cache", "dir", "--local", str(Path(root, where).resolve()))
    external = root / "data" / "external"
    if external.is_dir() and not (folder / "data" / "external").exists():
        (folder / "data").mkdir(exist_ok=True)
        os.symlink(external.resolve(), folder / "data" / "external")  # the user's own data
    if _dvc(folder, "checkout").returncode == 0:
        return f"from the DVC cache of {root}"
    pulled = _dvc(folder, "pull")
    if pulled.returncode != 0:
        last = [ln for ln in (pulled.stdout + pulled.stderr).splitlines() if ln.strip()][-1:]
        raise RunNotAuditable(f"the result's outputs are neither in the DVC cache of {root} nor "
                              f"pulled from its remote: {' '.join(last) or 'dvc pull failed'}")
    return "pulled from the DVC remote"


@contextlib.contextmanager
def worktree(root: Path, commit: str) -> Iterator[Path]:
    """``commit`` checked out in a temporary git worktree of ``root``; removed after."""
    folder = Path(tempfile.mkdtemp(prefix="seqcore-audit-run-")) / "result"
    _git(root, "worktree", "add", "--detach", "--quiet", str(folder), commit)
    try:
        yield folder
    finally:
        _git(root, "worktree", "remove", "--force", str(folder), check=False)
        shutil.rmtree(folder.parent, ignore_errors=True)
        _git(root, "worktree", "prune", check=False)


def audit_run_id(opts: AuditOptions, run_id: str, root: Path) -> AuditReport:
    """``--run RUN_ID``: the result the run claims, checked out from the repository ``root``
    into a temporary worktree with its outputs, audited there by this code against the store
    the run was read from; the verdict is written to the run as tags. RunNotAuditable: one
    line."""
    import mlflow  # noqa: PLC0415 (slow import)

    root, here = root.resolve(), Path(__file__).resolve().parents[2]
    with contextlib.chdir(root):
        uri = opts.store(load_params(opts.params))
    try:  # a store that cannot be opened (a cut sqlite file) fails in the client itself
        client = mlflow.MlflowClient(tracking_uri=uri)
        run = client.get_run(run_id)
    except Exception as err:  # noqa: BLE001 (not found, unreachable: the same line)
        raise RunNotAuditable(redact_text(
            f"run {run_id} cannot be read from {uri}: {type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}", (uri,))) from None
    made_from, digest = run_result(run)
    commit = result_commit(root, made_from, digest)
    print(f"[audit] run {run_id} claims the result of commit {commit[:12]} ({RESULT_TAG} "
          f"{digest[:12]}; made from {(made_from or 'none')[:12]})", file=sys.stderr)
    with worktree(root, commit) as folder:
        print(f"[audit] outputs {bring_outputs(root, folder)}", file=sys.stderr)
        print(code_line(here, folder), file=sys.stderr)
        with contextlib.chdir(folder):
            # the store the run lives in, not the one the copy's params name (inside the copy)
            report = audit(replace(opts, run_id=run_id, use_mlflow=True, tracking_uri=uri))
    print(report.render())
    tags = verdict_tags(report, head_commit(here))
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    print(f"audit verdict written to run {run_id}: audit.status {tags['audit.status']}")
    return report
