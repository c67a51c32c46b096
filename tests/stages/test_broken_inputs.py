"""Every stage against every broken file it reads (issue 54), generated from dvc.lock: each
file a stage reads (a folder dependency's files too), at the first stage that reads it, gone,
empty, cut in half, not UTF-8 (text) or a hostile pickle (checkpoints and models). The stage
stops with one line naming the file (exit 1 or 2) or falls back (exit 0); never a traceback,
never the pickle's code run. The decode stage's inputs: tests/stages/test_broken_decode.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.pipeline_helpers import run_broken

STAGES = ("prepare", "tokenizer", "baseline", "train", "evaluate")


@pytest.fixture
def repo(audit_result: tuple[Path, str], tmp_path: Path) -> Path:
    """A copy of the tiny result per stage: a stage that stops may leave its outputs half
    cleared, as under `dvc repro`, which removes them before it runs a stage."""
    return shutil.copytree(audit_result[0], tmp_path / "repo", symlinks=True)


#: Runs at least, as counted on the tiny result (a file gives 3 to 5 broken variants): a
#: stage whose files went missing from the matrix fails here.
AT_LEAST = {"prepare": 4, "tokenizer": 16, "baseline": 16, "train": 10, "evaluate": 24}


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
def test_a_broken_input_stops_the_stage_in_one_line_naming_it(
        repo: Path, stage: str, tmp_path: Path) -> None:
    assert run_broken(repo, stage, tmp_path) >= AT_LEAST[stage]
