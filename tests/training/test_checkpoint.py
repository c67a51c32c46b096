"""Checkpoints and their folder: a bad best.pt falls back with a warning; a pickle that is not
weights-only is refused with one line that never suggests lifting the check (issue 13)."""
from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
from pathlib import Path

import pytest
import torch

from seqcore.blobs import UnusableCheckpoint, atomic_write, load_blob, save_blob
from seqcore.errors import OneLineError
from seqcore.training.checkpoint import (
    SCHEMA_VERSION, Checkpoint, CheckpointDir, ContractMismatch, check_contract, is_ledger_step,
    ledger_steps, step_of)
from tests.factories import whole_checkpoint, written


def checkpoint_at(step: int) -> Checkpoint:
    """A loadable checkpoint of ``step`` whose weight holds the step number."""
    return whole_checkpoint(model={"w": torch.full((2,), float(step))}, state={"step": step})


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


class _NotAllowed:
    """An arbitrary class: a weights-only load must refuse to rebuild it."""


def test_corrupt_best_falls_back_to_the_numbered_checkpoint_of_the_best_step(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=3)
    for step in (3, 6):
        ckpt.save(step, checkpoint_at(step))
    best = ckpt.save_best(checkpoint_at(3))
    assert ckpt.best_weights(3).path == best
    best.write_bytes(best.read_bytes()[:100])  # truncated
    found = ckpt.best_weights(3)
    assert found.path.name == "ckpt-00000003.pt" and found.checkpoint.weights["w"][0] == 3.0
    err = capsys.readouterr().err
    assert err.startswith(f"warning: skipping unusable checkpoint {best}: sha256 ")
    assert err.endswith("(truncated or corrupted)\n") and err.count("\n") == 1


def test_unusable_best_without_a_numbered_copy_gives_none_and_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=1)
    best = ckpt.save_best(Checkpoint({**checkpoint_at(3).payload, "schema": SCHEMA_VERSION - 1}))
    assert ckpt.best_weights(3) is None
    assert capsys.readouterr().err == (f"warning: skipping unusable checkpoint {best}: "
                                       f"schema {SCHEMA_VERSION - 1} != {SCHEMA_VERSION}\n")
    best.with_name("best.pt.sha256").unlink()
    assert ckpt.best_weights(3) is None
    assert capsys.readouterr().err == (f"warning: skipping unusable checkpoint {best}: "
                                       "missing best.pt.sha256\n")


def test_checkpoint_loading_never_unpickles_arbitrary_objects(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    save_blob(path, {"x": torch.zeros(1), "obj": _NotAllowed()})
    with pytest.raises(UnusableCheckpoint, match="(?i)weights.only|unpickl") as err:
        load_blob(path)
    assert str(err.value) == (f"{path}: not a weights-only checkpoint (it asks to rebuild the "
                              f"Python object {__name__}._NotAllowed); refused, nothing was "
                              "loaded")  # in one line
    save_blob(tmp_path / "ok.pt", {"x": torch.ones(2), "n": 3, "t": (1, "a")})
    assert load_blob(tmp_path / "ok.pt")["n"] == 3


def test_a_plain_pickle_is_refused_in_one_line_without_suggesting_to_lift_the_check(
        tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    path = written(tmp_path / "plain.pt", pickle.dumps({"w": [1.0, 2.0]}))
    written(path.with_name("plain.pt.sha256"), hashlib.sha256(path.read_bytes()).hexdigest() + "\n")
    with pytest.raises(UnusableCheckpoint) as err:
        load_blob(path)
    message = str(err.value)
    assert message == (f"{path}: not a weights-only checkpoint (it is a plain pickle or not a "
                       "torch.save archive); refused, nothing was loaded")
    assert "weights_only=False" not in message and "\n" not in message
    assert not recwarn.list  # torch's protocol warning is not passed on


def test_a_temp_file_of_a_killed_writer_is_removed_by_the_next_write(tmp_path: Path) -> None:
    # a writer killed between its temp file and the rename leaves .NAME.tmp-PID beside a DVC
    # output; the next write of that file removes it (a live writer's temp file is kept)
    dead_pid = subprocess.Popen(["true"])  # noqa: S607
    dead_pid.wait()
    stale = tmp_path / f".model.pt.tmp-{dead_pid.pid}"
    live = tmp_path / f".model.pt.tmp-{os.getppid()}"
    other = tmp_path / f".other.pt.tmp-{dead_pid.pid}"
    for f in (stale, live, other):
        f.write_bytes(b"half")
    atomic_write(tmp_path / "model.pt", b"weights")
    assert (tmp_path / "model.pt").read_bytes() == b"weights"
    assert not stale.exists() and live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model.pt", live.name, other.name])


def test_a_checkpoint_of_nothing_but_a_schema_falls_back_to_the_one_before_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # issue 54: it passed the schema check, then failed the contract check with a
    # 3,602-character diff advising train.resume: fresh, which would delete the good one
    ckpt = CheckpointDir(tmp_path, keep_last=3)
    ckpt.save(3, checkpoint_at(3))
    bare = ckpt.save(6, Checkpoint({"schema": SCHEMA_VERSION}))
    found = ckpt.latest_good()
    assert found is not None and found.path.name == "ckpt-00000003.pt"
    err = capsys.readouterr().err
    assert err == (f"warning: skipping unusable checkpoint {bare}: not a whole training "
                   "checkpoint (it lacks world, model, optimizer, scaler, schedule, data, "
                   "generator, rng, state, history, contract)\n")


def test_a_checkpoint_that_is_not_a_mapping_is_unusable_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-00000001.pt"
    save_blob(path, [torch.zeros(1)])  # type: ignore[arg-type]
    with pytest.raises(UnusableCheckpoint) as refused:
        Checkpoint.load(path)
    assert str(refused.value) == f"{path}: not a training checkpoint (a list, not a mapping)"


def test_contract_mismatch_lists_every_differing_key_of_either_side_in_one_line() -> None:
    with pytest.raises(ContractMismatch) as refused:
        check_contract({"task": "g2p", "lr": 1.0, "seed": 1}, {"task": "lm", "lr": 1.0}, "x")
    assert str(refused.value) == (  # one line: the train stage prints it without a traceback
        "x was trained under a different contract (seed: checkpoint=1 now=None; task: "
        "checkpoint='g2p' now='lm'): set these back in params.yaml to resume it, or "
        "train.resume: fresh to start over")
    assert isinstance(refused.value, OneLineError)
    check_contract({"a": 1}, {"a": 1}, "x")  # equal contracts pass


def test_a_name_that_is_not_a_numbered_checkpoint_is_refused_with_the_pattern() -> None:
    assert step_of(Path("d/ckpt-00000042.pt")) == 42
    with pytest.raises(ValueError) as refused:
        step_of(Path("d/best.pt"))
    assert str(refused.value) == "d/best.pt: not a numbered checkpoint (ckpt-XXXXXXXX.pt)"


def test_each_rank_reads_its_own_entry_of_a_multi_process_checkpoint() -> None:
    own = [{"data": {"cursor": r}, "generator": torch.tensor([r]), "rng": {}} for r in (0, 1)]
    two = Checkpoint({"world": {"size": 2, "backend": "gloo", "device_kind": "cpu"},
                      "ranks": own, "data": {"cursor": 9}})
    assert two.rank_state(1) is own[1] and two.rank_state(0) is own[0]
    one = Checkpoint({"world": {"size": 1, "backend": "none", "device_kind": "cpu"},
                      "data": {"cursor": 9}})
    assert one.rank_state(0) is one.payload


# -- the checkpoint folder ---------------------------------------------------------------------
def test_pruning_keeps_the_last_k_with_their_sidecars_and_survives_a_missing_sidecar(
        tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=2)
    for step in (1, 2):
        ckpt.save(step, checkpoint_at(step))
    (tmp_path / "ckpt-00000001.pt.sha256").unlink()  # a write killed before its sidecar
    for step in (3, 4):
        ckpt.save(step, checkpoint_at(step))
    assert files_under(tmp_path) == ["ckpt-00000003.pt", "ckpt-00000003.pt.sha256",
                                     "ckpt-00000004.pt", "ckpt-00000004.pt.sha256"]


def test_clear_removes_numbered_best_and_ledger_files_with_their_sidecars(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=2)
    ckpt.save(1, checkpoint_at(1))
    ckpt.save_best(checkpoint_at(1))
    ckpt.save_ledger(0, checkpoint_at(0))
    assert len(files_under(tmp_path)) == 6
    ckpt.clear()
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(("last", "every", "kept"), [
    (10, 4, [0, 4, 8, 10]),  # before the first step, every 4th, and the last
    (8, 4, [0, 4, 8]),  # a last step on the period is kept once
    (5, 0, [0, 5]),  # ledger_every 0: the first and the last state only
    (3, 5, [0, 3]),  # a period longer than the run
    (0, 2, [0]),  # no step taken: the state before it
])
def test_the_ledger_keeps_the_state_before_the_first_step_every_nth_and_the_last(
        last: int, every: int, kept: list[int]) -> None:
    assert ledger_steps(last, every) == kept


def test_a_step_past_the_last_is_no_ledger_step_even_on_the_period() -> None:
    assert not is_ledger_step(12, 10, 4)


def test_copy_ledger_copies_the_kept_states_with_sidecars_and_names_each_left_out(
        tmp_path: Path) -> None:
    # issue 54: the train stage's ledger output never carries a state loading would refuse
    ckpt = CheckpointDir(tmp_path / "ck", keep_last=2)
    for step in range(7):  # more states than a ledger_every of 2 keeps
        ckpt.save_ledger(step, checkpoint_at(step))
    ckpt.save_best(checkpoint_at(5))
    bad = ckpt.ledger / "ckpt-00000004.pt"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(UnusableCheckpoint) as err:
        Checkpoint.load(bad)
    reason = str(err.value).removeprefix(f"{bad}: ")
    out = tmp_path / "out"
    out.mkdir()
    written(out / "stale.txt", "an earlier copy")  # the copy replaces the folder
    assert ckpt.copy_ledger(out, 6, 2, with_best=True) == (
        [4], [f"{bad} is not copied into {out}: {reason}"])
    names = [f"{name}{side}" for name in ("best.pt", "ckpt-00000000.pt", "ckpt-00000002.pt",
                                          "ckpt-00000006.pt") for side in ("", ".sha256")]
    assert files_under(out) == names
    for name in names:
        source = ckpt.root if name.startswith("best") else ckpt.ledger
        assert (out / name).read_bytes() == (source / name).read_bytes()
    # a ledger of another period or a longer run, into a folder not made yet: the steps the
    # folder lacks are listed
    fresh = tmp_path / "fresh" / "ledger"
    assert ckpt.copy_ledger(fresh, 9, 3, with_best=False) == ([9], [])
    assert files_under(fresh) == [f"ckpt-0000000{s}.pt{side}" for s in (0, 3, 6)
                                  for side in ("", ".sha256")]


def test_best_weights_fall_back_to_the_best_steps_checkpoint_when_best_pt_is_absent(
        tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=3)
    ckpt.save(3, checkpoint_at(3))
    found = ckpt.best_weights(3)
    assert found is not None and found.path.name == "ckpt-00000003.pt" and found.skipped == []
    ckpt.save_best(checkpoint_at(3))
    found = ckpt.best_weights(3)
    assert found is not None and found.path.name == "best.pt" and found.skipped == []


def test_latest_good_lists_and_reports_each_newer_unusable_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ckpt = CheckpointDir(tmp_path, keep_last=3)
    for step in (1, 2):
        ckpt.save(step, checkpoint_at(step))
    found = ckpt.latest_good()
    assert found is not None and found.path.name == "ckpt-00000002.pt" and found.skipped == []
    bad = tmp_path / "ckpt-00000002.pt"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(UnusableCheckpoint) as err:
        Checkpoint.load(bad)
    assert str(err.value).startswith(f"{bad}: ")
    reason = str(err.value)[len(f"{bad}: "):]  # the loader's reason without the path
    assert "truncated or corrupted" in reason
    capsys.readouterr()
    found = ckpt.latest_good()
    assert found is not None and found.path.name == "ckpt-00000001.pt"
    assert found.skipped == [f"ckpt-00000002.pt: {reason}"]
    assert capsys.readouterr().err == f"warning: skipping unusable checkpoint {bad}: {reason}\n"
