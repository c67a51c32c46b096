"""The stage tests' copy of the session's tiny `dvc repro` result (tests/conftest.py
``audit_result``; its per-test copies are there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipeline_helpers import copy_result


@pytest.fixture(scope="module")
def result(audit_result: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy per test module (its MLflow store points into the copy): tests restore what
    they change."""
    return copy_result(audit_result[0], tmp_path_factory.mktemp("result") / "repo")

