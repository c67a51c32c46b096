"""``python -m pipeline.tune`` on the tiny result (issue 52, item 4): scored on dev only;
``--write`` sets the chosen settings and ``decode.tuned_on: dev``; a bad grid is one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.stage import load_params
from pipeline.tune import main
from seqcore.signature import decode_fields
from tests.pipeline_helpers import traced_reads

pytestmark = pytest.mark.slow  # the shared tiny result

GRID = ["--beam", "1", "2", "--alpha", "0.6", "1.0", "--weight", "0.5", "1"]


@pytest.fixture
def repo(result_copy: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(result_copy)
    return Path.cwd()


def test_the_grid_is_scored_on_dev_and_the_test_split_is_never_opened(
        repo: Path, capsys: pytest.CaptureFixture) -> None:
    codes: list[int] = []
    reads = traced_reads(repo, repo, lambda: codes.append(main([*GRID, "--out", "tuned"])))
    assert codes == [0]
    assert {"data/encoded/dev.jsonl", "baseline/dev.jsonl", "models/model.pt"} <= set(reads)
    assert not [r for r in reads if "test" in Path(r).name], reads
    table = (repo / "tuned/tuning.md").read_text()
    # 2 beams x 2 alphas, each the model alone and 2 rescoring weights; one chosen
    assert table.count("\n| ") == 1 + 12 and table.count("**chosen**") == 1
    assert len((repo / "tuned/tuning.csv").read_text().splitlines()) == 1 + 12
    assert capsys.readouterr().out == table


def test_write_sets_the_chosen_row_and_the_signature_says_chosen_on_dev(
        repo: Path, capsys: pytest.CaptureFixture) -> None:
    params = repo / "params.yaml"
    params.write_text(params.read_text().replace("  tuned_on: dev\n", "  tuned_on: none\n"))
    before = params.read_text().splitlines()
    assert load_params("params.yaml").decode.tuned_on == "none"
    assert main([*GRID, "--out", "tuned", "--write"]) == 0
    after = params.read_text().splitlines()
    # only the chosen keys' lines of the decode section change; comments and order stay
    changed = {a.split(":")[0].strip() for a, b in zip(before, after, strict=True) if a != b}
    assert changed <= {"beam_size", "alpha", "rescore", "rescore_weight", "tuned_on"}
    assert "tuned_on" in changed
    beam, alpha, weight = next(line for line in (repo / "tuned/tuning.md").read_text()
                               .splitlines() if "**chosen**" in line).strip("| ").split(" | ")[:3]
    dec = load_params("params.yaml").decode
    assert (str(dec.beam_size), f"{dec.alpha:g}", dec.tuned_on) == (beam, alpha, "dev")
    # the model alone chosen: rescoring off; else the weight chosen
    assert dec.rescore == ("none" if weight == "none" else "baseline")
    assert weight == "none" or f"{dec.rescore_weight:g}" == weight
    assert decode_fields(dec)["tuned"] == "dev"
    untuned = load_params("params.yaml").decode.__class__(tuned_on="none")
    assert "tuned" not in decode_fields(untuned)


@pytest.mark.parametrize("bad", [["--weight", "2"], ["--beam", "0"], ["--alpha", "-1"]])
def test_a_bad_grid_is_one_line_with_status_2(
        repo: Path, capsys: pytest.CaptureFixture, bad: list[str]) -> None:
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"[tune] {bad[0]} ")
