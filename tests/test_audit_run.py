"""``python -m pipeline.audit --run RUN_ID`` (issue 33, item 4): the result a run claims is
found in the repository's history, checked out in a worktree with its outputs, audited there,
and the verdict is written back to the run as tags. The team flow (outputs pulled from the
S3 remote, the run on the MLflow server) is in tests/test_team.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from tests.pipeline_helpers import copy_result, run_audit, tool_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def audit_run(repo: Path, run_id: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.audit", "--run", run_id,
                           "--replay-seed", "1", *args], cwd=repo, env=tool_env(),
                          capture_output=True, text=True, timeout=600)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True)


def test_a_run_id_is_audited_in_a_worktree_of_its_result_and_gets_the_verdict_as_tags(
        audit_result: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_result(audit_result[0], tmp_path / "copy")
    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("seqcore-g2p").experiment_id])
    rid = run.info.run_id
    # the run was made from the copy's first commit; the result is not committed yet
    before = audit_run(repo, rid)
    assert before.returncode == 2, before.stderr
    assert before.stderr.strip().splitlines()[-1].startswith(
        f"audit: no commit of {repo} holds the result of this run (dvc.lock.upstream.sha256 "), \
        before.stderr
    assert "Traceback" not in before.stderr
    # committed in the documented order, after the run: the later commit is the result
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "result")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()
    # the working copy then changes (a param): the audit of the run reads the commit's files
    (repo / "params.yaml").write_text((repo / "params.yaml").read_text().replace(
        "beam_size: 5", "beam_size: 7"))
    out = audit_run(repo, rid)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"claims the result of commit {head[:12]}" in out.stderr
    assert "outputs from the DVC cache of" in out.stderr
    assert "audit: PASSED" in out.stdout and "ok       training replay" in out.stdout, out.stdout
    (repo / "params.yaml").write_text((repo / "params.yaml").read_text().replace(
        "beam_size: 7", "beam_size: 5"))
    tags = client.get_run(rid).data.tags
    assert tags["audit.status"] == "passed"
    assert tags["audit.by"] == subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert "training replay: ok" in tags["audit.checks"]
    assert tags["audit.at"].endswith("+00:00")
    # the worktree is gone, and the verdict tags do not fail the next audit of the run (the
    # working copy's params.yaml is set back: the run was made with the committed one)
    assert subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True,
                          text=True).stdout.count("\n") == 1
    again = run_audit(repo, monkeypatch, only=("mlflow run",))
    assert again.ok and again.run_id == rid, again.render()


def test_a_run_that_is_not_in_the_store_is_one_line(audit_result: tuple[Path, str],
                                                     tmp_path: Path) -> None:
    repo = copy_result(audit_result[0], tmp_path / "copy")
    out = audit_run(repo, "0123456789abcdef0123456789abcdef")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("audit: run 0123456789abcdef0123456789abcdef cannot "
                                         "be read from sqlite:///"), out.stderr
    assert "Traceback" not in out.stderr
