"""``python -m pipeline.audit --run RUN_ID`` (issue 33, item 4): a run id that cannot be
audited is one line. The whole flow is tests/mlflow/test_team.py's; that the verdict tags
never fail a later audit, tests/audit/test_comparators.py's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.pipeline_helpers import result_runs, run_python

pytestmark = pytest.mark.e2e


def audit_run(repo: Path, run_id: str) -> subprocess.CompletedProcess:
    return run_python(repo, "-m", "pipeline.audit", "--run", run_id, timeout=600)


def test_a_run_whose_result_no_commit_holds_and_an_unknown_run_are_one_line_each(
        result_copy: Path) -> None:
    repo = result_copy
    client, (run,) = result_runs(repo)
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
