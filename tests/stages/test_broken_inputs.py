"""Every stage against every broken file it reads (issue 54), generated from dvc.lock: each
file a stage reads (a folder dependency's files too), at the first stage that reads it, gone,
empty, cut in half, not UTF-8 (text) or a hostile pickle (checkpoints and models). The stage
stops with one line naming the file (exit 1 or 2) or falls back (exit 0); never a traceback,
never the pickle's code run. The decode stage's inputs: tests/stages/test_broken_decode.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.pipeline_helpers import broken_input_cases, run_broken

STAGES = ("prepare", "tokenizer", "baseline", "train", "evaluate")


@pytest.fixture(scope="module")
def repo(audit_result: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shutil.copytree(audit_result[0], tmp_path_factory.mktemp("broken") / "repo",
                           symlinks=True)


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "rel"), broken_input_cases(STAGES))
def test_a_broken_input_stops_the_stage_in_one_line_naming_it(
        repo: Path, stage: str, rel: str, tmp_path: Path) -> None:
    run_broken(repo, stage, rel, tmp_path)
