"""The training ledger (seqcore/ledger.py): segments, escape probability, differences."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from seqcore.blobs import save_blob
from seqcore.ledger import escape_probability, first_difference, ledger_segments, state_difference


def test_a_ledger_of_the_first_and_last_states_is_one_segment(tmp_path: Path) -> None:
    for step in (0, 40):
        save_blob(tmp_path / f"ckpt-{step:08d}.pt", {"step": step})
    assert [s.label() for s in ledger_segments(tmp_path)] == ["segment 1 (steps 0->40)"]
    (tmp_path / "ckpt-00000040.pt").unlink()
    with pytest.raises(ValueError, match="one state only: no segment to replay"):
        ledger_segments(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no ledger states \(ckpt-XXXXXXXX.pt\); train "
                       r"the result again with this version \(`dvc repro`\)$"):
        ledger_segments(tmp_path / "none")
    (tmp_path / "ckpt-00000000.pt").rename(tmp_path / "ckpt-00000005.pt")
    with pytest.raises(ValueError, match=r"starts at step 5, not at the state before the first "
                       r"step: the training before it cannot be checked$"):
        ledger_segments(tmp_path)


def test_replaying_only_the_last_segment_misses_every_other_faked_one() -> None:
    assert escape_probability(30, 29, 1) == 1.0 == escape_probability(30, 3, 1)
    assert escape_probability(30, 30, 3) == 0.0  # the last faked as well: always caught


def test_values_of_different_kinds_and_one_sided_nan_are_differences() -> None:
    assert first_difference({"w": 1}, [1]) == ": ledger {'w': 1}, replay [1]"
    assert first_difference([1], torch.ones(1)) == ": ledger [1], replay tensor([1.])"
    assert first_difference({"x": [math.nan]}, {"x": [1.0]}) == "['x'][0]: ledger nan, replay 1.0"
    assert first_difference({"a": 1}, {"a": 1, "b": 2}) == "['b']: only in the replay"
    # below the top level keys are compared in sorted order, whatever order they were put in
    assert first_difference({"s": {"b": 1, "a": 1}}, {"s": {"b": 2, "a": 2}}).startswith(
        "['s']['a']")
    assert first_difference(torch.tensor([1, 2, 3]), torch.tensor([1, 5, 3])) == (
        ": 1 of 3 elements differ (first at flat index 1: ledger 2, replay 5)")
    nan_vs_number = first_difference(torch.tensor([1.0, math.nan]), torch.tensor([2.0, 3.0]))
    assert nan_vs_number.startswith(": 2 of 2 elements differ")
    assert first_difference(torch.tensor([math.nan]), torch.tensor([1.0])) is not None


def test_a_state_equal_to_a_ledger_file_is_no_difference_and_a_changed_one_is_named(
        tmp_path: Path) -> None:
    state = {"model": {"w": torch.tensor([1.0, 2.0])}, "history": [[1, 0.5]], "rng": (3, 4)}
    path = tmp_path / "ckpt-00000010.pt"
    save_blob(path, state)
    assert state_difference(path, state) is None
    changed = {**state, "model": {"w": torch.tensor([1.0, 2.5])}}
    assert state_difference(path, changed) == (
        "['model']['w']: 1 of 2 elements differ (first at flat index 1: ledger 2.0, replay 2.5)")
    # equal values written another way (a list where the file has a tuple): the bytes differ
    assert state_difference(path, {**state, "rng": [3, 4]}).startswith("the bytes")
