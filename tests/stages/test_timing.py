"""Issue 29: each stage's wall and CPU time, summed into the MLflow run (pipeline/timing.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.timing import PIPELINE_WALL, StageTime, pipeline_metrics, stage_file
from tests.factories import REPO


def test_the_pipeline_total_sums_every_stage_and_is_left_out_when_one_is_untimed(
        tmp_path: Path) -> None:
    with contextlib.chdir(tmp_path):
        StageTime(10.0, 19.5).write(stage_file("fetch"))
        StageTime(100.0, 190.25).write(stage_file("train"))
        got = pipeline_metrics(["fetch", "train", "evaluate"], "evaluate")
        assert got["time/fetch_s"] == 10.0 and got["time/train_s"] == 100.0
        assert got[PIPELINE_WALL] == pytest.approx(110.0 + got["time/evaluate_s"], abs=1e-3)
        assert got["time/pipeline_cpu_s"] >= 209.75
        # a stage with no timing here (its outputs pulled, not run): no total is claimed
        partial = pipeline_metrics(["fetch", "prepare", "train", "evaluate"], "evaluate")
        assert "time/prepare_s" not in partial
        assert {PIPELINE_WALL, "time/pipeline_cpu_s"}.isdisjoint(partial)
        stage_file("prepare").write_text("{not json")  # unreadable counts as untimed
        assert PIPELINE_WALL not in pipeline_metrics(["prepare"], "evaluate")


def test_a_stage_is_timed_from_its_process_start_with_its_childrens_cpu() -> None:
    # The module is imported after a 0.4 s sleep and a child's busy loop: both count.
    program = ("import subprocess, sys, time\n"
               "time.sleep(0.4)\n"
               "subprocess.run([sys.executable, '-c', "
               "'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.5: pass'])\n"
               "from pipeline.timing import elapsed\n"
               "t = elapsed()\n"
               "print(t.wall_s, t.cpu_s)\n")
    out = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
    wall, cpu = map(float, out)
    assert wall >= 0.9
    assert cpu >= 0.5
