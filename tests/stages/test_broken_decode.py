"""The decode stage against every broken file it reads first (issue 54; the matrix and its
rules: test_broken_inputs.py), in a file of its own so that the matrix runs on both workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipeline_helpers import run_broken


@pytest.mark.slow
def test_a_broken_decode_input_stops_decode_in_one_line_naming_it(
        result_files: Path, tmp_path: Path) -> None:
    assert run_broken(result_files, "decode", tmp_path) >= 27  # model, sidecar, tokenizer, baseline
