"""The decode stage against every broken file it reads first (issue 54; the matrix and its
rules: tests/stages/test_broken_inputs.py, tests/pipeline_helpers.run_broken). A file of its own so the two halves of the
matrix run on both pytest workers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.pipeline_helpers import run_broken


@pytest.fixture
def repo(audit_result: tuple[Path, str], tmp_path: Path) -> Path:
    """A copy of the tiny result per stage: a stage that stops may leave its outputs half
    cleared, as under `dvc repro`, which removes them before it runs a stage."""
    return shutil.copytree(audit_result[0], tmp_path / "repo", symlinks=True)


@pytest.mark.slow
def test_a_broken_decode_input_stops_decode_in_one_line_naming_it(
        repo: Path, tmp_path: Path) -> None:
    assert run_broken(repo, "decode", tmp_path) >= 27  # model, sidecar, tokenizer, baseline
