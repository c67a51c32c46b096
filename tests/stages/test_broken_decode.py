"""The decode stage against every broken file it reads first (issue 54; the matrix and its
rules: tests/stages/test_broken_inputs.py, tests/pipeline_helpers.run_broken). A file of its own so the two halves of the
matrix run on both pytest workers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.pipeline_helpers import broken_input_cases, run_broken


@pytest.fixture(scope="module")
def repo(audit_result: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shutil.copytree(audit_result[0], tmp_path_factory.mktemp("broken") / "repo",
                           symlinks=True)


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "rel"), broken_input_cases(("decode",)))
def test_a_broken_decode_input_stops_decode_in_one_line_naming_it(
        repo: Path, stage: str, rel: str, tmp_path: Path) -> None:
    run_broken(repo, stage, rel, tmp_path)
