"""``python -m pipeline.audit --run RUN_ID`` (issue 33, item 4): a run id that cannot be
audited is one line. The whole flow is tests/mlflow/test_team.py's; that the verdict tags
never fail a later audit, tests/audit/test_comparators.py's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import mlflow
import pytest

from tests.pipeline_helpers import copy_result, stage_python, tool_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def audit_run(repo: Path, run_id: str) -> subprocess.CompletedProcess:
    return subprocess.run([stage_python(), "-m", "pipeline.audit", "--run", run_id], cwd=repo,
                          env=tool_env(), capture_output=True, text=True, timeout=600)


def test_a_run_whose_result_no_commit_holds_and_an_unknown_run_are_one_line_each(
        audit_result: tuple[Path, str], tmp_path: Path) -> None:
    repo = copy_result(audit_result[0], tmp_path / "copy")
    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("seqcore-g2p").experiment_id])
    # the run was made from the copy's first commit; its result is not committed yet
    out = audit_run(repo, run.info.run_id)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"audit: no commit of {repo} holds the result of this run (dvc.lock.upstream.sha256 ")
    assert "audit.status" not in client.get_run(run.info.run_id).data.tags  # no verdict
    out = audit_run(repo, "0123456789abcdef0123456789abcdef")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("audit: run 0123456789abcdef0123456789abcdef cannot "
                                         "be read from sqlite:///"), out.stderr
