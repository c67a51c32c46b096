"""Every stage against every broken file it reads (issue 54), from dvc.lock: each file (a
folder dependency's files too), at the first stage that reads it, gone, empty, cut in half, not
UTF-8 or a hostile pickle. The stage stops with one line naming the file (exit 1 or 2) or falls
back (exit 0); never a traceback, never the pickle's code run. Decode: test_broken_decode.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqcore.blobs import load_blob, save_blob
from tests.pipeline_helpers import (
    assert_one_line_or_fallback, each_broken, restored, run_broken, run_python)

#: Runs at least, as counted on the tiny result (a file gives 3 to 5 broken variants): a
#: stage whose files went missing from the matrix fails here.
AT_LEAST = {"prepare": 4, "tokenizer": 16, "baseline": 16, "train": 10, "evaluate": 24}


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(AT_LEAST))
def test_a_broken_input_stops_the_stage_in_one_line_naming_it(
        result_files: Path, stage: str, tmp_path: Path) -> None:
    assert run_broken(result_files, stage, tmp_path) >= AT_LEAST[stage]


@pytest.mark.slow
def test_a_broken_checkpoint_is_passed_over_and_never_enters_the_ledger(
        result_files: Path, tmp_path: Path) -> None:
    """best.pt and the newest checkpoint (not in dvc.lock) and their sidecars, broken as above
    or holding only the schema field (sidecar matching): train passes over them with one
    warning or stops in one line, and every file of the ledger (a DVC out) then loads (issue
    54: the ledger shipped a refused best.pt; a lone schema field got a 3,602-char line)."""
    repo = result_files
    (folder,) = (repo / "checkpoints").iterdir()
    states = (folder / "best.pt", max(folder.glob("ckpt-*.pt")))
    files = [f"{p.relative_to(repo)}{end}" for p in states for end in ("", ".sha256")]

    def train_on_it(rel: str, how: str) -> None:
        res = run_python(repo, "-m", "pipeline.train")
        assert_one_line_or_fallback(res, rel, how)
        assert all(len(line) < 400 for line in res.stderr.splitlines()), (rel, how)
        for kept in (repo / "models/ledger").glob("*.pt"):
            load_blob(kept)  # UnusableCheckpoint here: the ledger took a refused file

    runs = 0
    for rel, how in each_broken(repo, files, tmp_path / "hostile-ran"):
        train_on_it(rel, how)
        runs += 1
    for state in states:  # a whole file whose sidecar agrees, holding only the schema field
        with restored(state, state.with_name(state.name + ".sha256")):
            save_blob(state, {"schema": 2})
            train_on_it(str(state.relative_to(repo)), "schema-only")
    assert runs >= 18
