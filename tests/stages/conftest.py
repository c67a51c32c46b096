"""Copies of the session's tiny `dvc repro` result (tests/conftest.py ``audit_result``) for
the tests that change one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.pipeline_helpers import copy_result


@pytest.fixture(scope="module")
def result(audit_result: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy per test module (its MLflow store points into the copy): tests restore what
    they change."""
    return copy_result(audit_result[0], tmp_path_factory.mktemp("result") / "repo")


@pytest.fixture
def result_copy(audit_result: tuple[Path, str], tmp_path: Path) -> Path:
    """A copy of the result for one test (its MLflow store points into the copy)."""
    return copy_result(audit_result[0], tmp_path / "result")


@pytest.fixture
def result_files(audit_result: tuple[Path, str], tmp_path: Path) -> Path:
    """The result's files for one test: a stage that stops may leave its outputs half
    cleared, as under `dvc repro`, which removes them before it runs a stage."""
    return shutil.copytree(audit_result[0], tmp_path / "repo", symlinks=True)
