"""The training ledger and its replay (issue 33, item 1): what the loop keeps, which segments
the audit picks, the chance a forger escapes, and how two states are compared. The replay of a
real result is tests/stages/test_resume_stage.py's and tests/audit/test_forgery.py's."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pipeline.audit import checks, replay
from seqcore import environment
from seqcore.audit import AuditReport
from seqcore.blobs import save_blob
from seqcore.config import config_from_dict
from seqcore.ledger import Segment, choose, escape_probability, first_difference, ledger_segments
from seqcore.training.checkpoint import ledger_files, step_of
from tests.factories import kill_after, s2s_loop


def steps(folder: Path) -> list[int]:
    return [step_of(p) for p in ledger_files(folder)]


def ledger_of_run(work: Path, max_steps: int, **train: object) -> Path:
    """The ledger folder of an ``s2s_loop`` started (or resumed) and run to its end."""
    loop = s2s_loop(work, max_steps, **train)
    loop.resume()
    loop.run(lambda entry, tokens_per_s: None)
    return loop.ckpt.ledger


def test_the_loop_keeps_the_state_before_the_first_step_every_ledger_every_and_the_last(
        tmp_path: Path) -> None:
    loop = s2s_loop(tmp_path, 7, ledger_every=3, checkpoint_every=2, keep_last=1)
    assert loop.resume() is None
    loop.run(lambda entry, tokens_per_s: None)
    assert steps(loop.ckpt.ledger) == [0, 3, 6, 7]
    # never pruned: keep_last 1 left one numbered checkpoint, the ledger keeps every state
    assert [p.name for p in loop.ckpt.numbered()] == ["ckpt-00000007.pt"]
    # a ledger state is the checkpoint of its step, byte for byte
    assert (loop.ckpt.ledger / "ckpt-00000007.pt").read_bytes() == \
        loop.ckpt.numbered()[-1].read_bytes()


def test_ledger_every_0_keeps_the_first_and_the_last_state_only(tmp_path: Path) -> None:
    assert steps(ledger_of_run(tmp_path, 5, ledger_every=0)) == [0, 5]


def test_a_resumed_run_writes_the_ledger_of_the_uninterrupted_run(tmp_path: Path) -> None:
    whole = ledger_of_run(tmp_path / "whole", 7, ledger_every=3, checkpoint_every=2)
    killed = s2s_loop(tmp_path / "run", 7, ledger_every=3, checkpoint_every=2)
    killed.resume()
    kill_after(killed, 4)
    resumed = s2s_loop(tmp_path / "run", 7, ledger_every=3, checkpoint_every=2)
    assert resumed.resume() == "ckpt-00000004.pt"
    resumed.run(lambda entry, tokens_per_s: None)
    assert [p.read_bytes() for p in ledger_files(resumed.ckpt.ledger)] == \
        [p.read_bytes() for p in ledger_files(whole)]


def test_a_fresh_start_clears_the_ledger_of_an_earlier_run(tmp_path: Path) -> None:
    ledger_of_run(tmp_path, 6, ledger_every=2)
    fresh = s2s_loop(tmp_path, 6, ledger_every=2, resume="fresh")
    fresh.resume()
    assert steps(fresh.ckpt.ledger) == [0]


def test_the_last_segment_is_always_chosen_and_the_seed_fixes_the_others() -> None:
    picks = {tuple(choose(30, 3, seed)) for seed in range(40)}
    assert all(p[-1] == 30 and len(p) == 3 and len(set(p)) == 3 for p in picks)
    assert len(picks) > 20  # the seed decides
    assert choose(30, 3, 7) == choose(30, 3, 7)


def test_choosing_more_segments_than_there_are_replays_each_once() -> None:
    assert choose(4, 10, 1) == [1, 2, 3, 4]
    assert choose(4, 0, 1) == []
    assert choose(1, 3, 1) == [1]


def test_the_escape_probability_of_a_forger_is_the_hypergeometric_miss() -> None:
    # 30 segments, 1 faked (not the last), 3 replayed: 2 drawn from the 29 others miss it
    # with probability C(28, 2) / C(29, 2) = 378 / 406
    assert escape_probability(30, 1, 3) == pytest.approx(378 / 406)
    assert escape_probability(30, 0, 3) == 1.0  # nothing faked: nothing to catch
    assert escape_probability(30, 29, 2) == 0.0  # every segment but the last faked
    assert escape_probability(30, 5, 30) == 0.0  # all replayed
    # by simulation: the drawn segments miss m = 3 faked ones as often as the formula says
    faked = {4, 11, 20}
    missed = sum(not faked & set(choose(30, 5, seed)) for seed in range(4000)) / 4000
    assert missed == pytest.approx(escape_probability(30, 3, 5), abs=0.02)


# --- the comparison of two states, bit for bit ----------------------------------------------
def state(**over: object) -> dict:
    base = {"model": {"w": torch.tensor([1.0, 2.0, float("nan")])},
            "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}},
            "history": [[1, 0, 0.5, float("nan")]], "data": {"cursor": 4}, "rng": (1, 2)}
    return {**base, **over}


def test_equal_states_with_nan_in_weights_and_log_are_equal() -> None:
    assert first_difference(state(), state()) is None


def test_one_ulp_in_one_weight_is_named_with_its_tensor_index_and_both_values() -> None:
    w = torch.tensor([1.0, 2.0, float("nan")])
    w[1] = torch.nextafter(w[1], torch.tensor(3.0))
    assert first_difference(state(), state(model={"w": w})) == (
        "['model']['w']: 1 of 3 elements differ (first at flat index 1: ledger 2.0, replay "
        "2.000000238418579)")


def test_the_weights_are_named_before_the_data_cursor_that_also_differs() -> None:
    found = first_difference(state(), state(model={"w": torch.zeros(3)}, data={"cursor": 5}))
    assert found.startswith("['model']['w']")


def test_a_dtype_a_missing_key_and_a_log_cell_are_differences() -> None:
    assert "ledger torch.float32 (3,), replay torch.float64 (3,)" in first_difference(
        state(), state(model={"w": torch.tensor([1.0, 2.0, math.nan], dtype=torch.float64)}))
    assert first_difference(state(), {k: v for k, v in state().items() if k != "rng"}) == \
        "['rng']: only in the ledger"
    assert first_difference(state(), state(history=[[1, 0, 0.25, math.nan]])) == \
        "['history'][0][2]: ledger 0.5, replay 0.25"
    assert first_difference({"n": 1}, {"n": 1.0}) == "['n']: ledger 1, replay 1.0"


def test_segments_run_between_consecutive_states_and_need_the_first(tmp_path: Path) -> None:
    for step in (0, 250, 500, 612):
        save_blob(tmp_path / f"ckpt-{step:08d}.pt", {"step": step})
    found = ledger_segments(tmp_path)
    assert [s.label() for s in found] == ["segment 1 (steps 0->250)", "segment 2 (steps 250->500)",
                                          "segment 3 (steps 500->612)"]
    assert found[1] == Segment(2, tmp_path / "ckpt-00000250.pt", tmp_path / "ckpt-00000500.pt")
    (tmp_path / "ckpt-00000000.pt").unlink()
    with pytest.raises(ValueError, match="starts at step 250, not at the state before the "):
        ledger_segments(tmp_path)
    with pytest.raises(FileNotFoundError, match="no ledger states"):
        ledger_segments(tmp_path / "absent")


@pytest.mark.parametrize(("here", "recorded", "env"), [
    ("AVX512", "AVX2", {"ATEN_CPU_CAPABILITY": "avx2"}),  # a lower level: taken
    ("AVX512", "DEFAULT", {"ATEN_CPU_CAPABILITY": "default"}),
    ("AVX512", "AVX512", {}),  # the host's own
    ("AVX2", "AVX512", {}),  # a higher level cannot be taken: the replay may differ
    ("AVX512", None, {}),  # no run, or a run from before env.cpu_capability
    ("AVX512", "NEON", {}),  # not an x86 level
])
def test_the_replay_takes_the_cpu_level_the_run_records_when_this_host_has_it(
        here: str, recorded: str | None, env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline.audit.replay.host_capability", lambda: here)
    assert replay.capability_env(recorded) == env


@pytest.mark.parametrize(("trained_on", "strict", "status", "kernels"), [
    ("Same CPU", False, "MISMATCH", "native"),  # the CPU model the run records: it fails
    (None, False, "MISMATCH", "native"),  # a run from before env.cpu: as before
    ("Another CPU", False, "WARNING", "native"),  # no proof of another training: said
    ("Another CPU", True, "MISMATCH", "native"),  # --strict-env fails on it
    # issue 49: the portable profile gives every AVX2 CPU the same bytes: no excuse
    ("Another CPU", False, "MISMATCH", "portable"),
])
def test_a_replay_difference_on_another_cpu_model_warns_unless_strict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trained_on: str | None, strict: bool,
        status: str, kernels: str) -> None:
    cfg = config_from_dict({"paths": {"ledger": str(ledger_of_run(tmp_path, 4, ledger_every=2))},
                            "train": {"cpu_kernels": kernels}})
    here = environment.producing_environment()
    monkeypatch.setattr(environment, "producing_environment",
                        lambda: SimpleNamespace(**{**here.as_dict(), "cpu": "Same CPU"}))
    # the replay itself is tests/stages/test_resume_stage.py's; here only its verdict
    monkeypatch.setattr(replay, "run_replay", lambda *args: ["segment 2-4: differs at model.w"])
    tags = {"env.cpu": trained_on} if trained_on else {}
    report = AuditReport()
    checks.replay_check(report, cfg, "params.yaml", 1, 0,
                        SimpleNamespace(data=SimpleNamespace(tags=tags)), strict)
    assert report.status["training replay"] == status
    lines = report.checks["training replay"]
    assert lines[-1] == "segment 2-4: differs at model.w"
    if trained_on == "Another CPU" and kernels == "native":
        assert lines[0].startswith("trained on 'Another CPU', replayed on 'Same CPU': float "
                                   "kernels differ by CPU model")
    else:
        assert len(lines) == 1
    notes = report.notes["training replay"]
    # a native result is marked reproducible on its CPU kind only, naming the recorded kernels
    assert any(n.startswith("warning: trained with train.cpu_kernels: native (CPU kernels "
                            "unrecorded on ") and n.endswith("reproducible on this CPU kind "
                                                             "only") for n in notes) \
        == (kernels == "native")
