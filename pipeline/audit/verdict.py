"""Who audited what, and where the verdict goes: the line naming the code that audits a
result (issue 33: audit with code you trust), the verdict stamped on the registered model
versions of the audited run (issue 29), and the verdict tags an audit from a run id writes on
the run (``python -m pipeline.audit --run``; the run comparison ignores these ``audit.`` tags:
mlflow_run.AUDIT_TAG)."""

from __future__ import annotations

import datetime
from pathlib import Path

from pipeline.git_state import head_commit
from seqcore.audit import WARNING, AuditReport
from seqcore.hashing import sha256_file


def stamp_versions(uri: str, report: AuditReport) -> str:
    """The verdict as tags of the registered versions the audited run logged (issue 29):
    ``audit.status`` (the verdict line) and ``audit.commit`` (the audited checkout), shown on
    the version's page in the Model Registry. A partial audit (``--only``) stamps
    ``audit.partial`` and ``audit.partial.commit`` instead (issue 55): what it checked never
    replaces a whole audit's verdict. The audit compares only the version tags the pipeline
    writes, so a stamp never fails a later audit. Returns what was stamped."""
    import mlflow  # noqa: PLC0415 (slow import)

    client = mlflow.MlflowClient(tracking_uri=uri)
    head = head_commit()
    status, commit = (("audit.partial", "audit.partial.commit") if report.only
                      else ("audit.status", "audit.commit"))
    versions = list(client.search_model_versions(f"run_id = '{report.run_id}'"))
    for v in versions:
        client.set_model_version_tag(v.name, v.version, status, report.verdict())
        client.set_model_version_tag(v.name, v.version, commit, head)
    return ", ".join(f"{v.name} version {v.version}" for v in versions)


#: The code that computes a result (and that the audit runs): compared file by file between
#: the auditing checkout and the audited one.
CODE_FOLDERS = ("pipeline", "seqcore")


def code_files(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every module under CODE_FOLDERS of ``root``."""
    return {p.relative_to(root).as_posix(): sha256_file(p)
            for folder in CODE_FOLDERS for p in sorted((root / folder).rglob("*.py"))}


def code_line(auditor: Path, result: Path) -> str:
    """One line saying which code audits which result: the auditing checkout and its commit,
    and whether the result's code is the same (issue 33: audit with code you trust, e.g. your
    own checkout with ``--root`` on a colleague's result)."""
    mine, theirs = code_files(auditor), code_files(result)
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    commit = head_commit(auditor)
    where = "this checkout" if auditor.resolve() == result.resolve() else str(result)
    same = ("the same code" if not differ else
            f"its code differs in {len(differ)} file(s): {', '.join(differ[:3])}"
            + (", ..." if len(differ) > 3 else ""))
    return f"[audit] code at {auditor} (commit {commit[:12]}) audits the result in {where}: " \
           f"{same}"


def verdict_tags(report: AuditReport, auditor_commit: str) -> dict[str, str]:
    """``audit.status`` (passed, failed or warnings), ``audit.at`` (UTC, ISO 8601),
    ``audit.by`` (the auditing code's commit) and ``audit.checks`` (each check's status)."""
    status = "failed" if not report.ok else \
        "warnings" if WARNING in report.status.values() else "passed"
    at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    checks = "; ".join(f"{name}: {state}" for name, state in report.status.items())
    return {"audit.status": status, "audit.at": at, "audit.by": auditor_commit,
            "audit.checks": checks}
