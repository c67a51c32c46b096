"""How long the stages of a result took: wall and CPU seconds, kept beside the workspace.

Clock time changes from run to run, so it is no DVC out (every tracked file keeps its bytes
for the same inputs). Each stage that finishes writes ``.seqcore/timings/<stage>.json``; the
evaluate stage puts them into its MLflow run (``time/*`` metrics, and the run's Duration is
the summed wall time of the stages). CPU seconds count the stage's process and every child
it waited for (torchrun's ranks, the phonetisaurus processes).

Training adds up over resumes: the train stage keeps a running total per checkpoint folder
(``.seqcore/timings/training/<folder>.json``), so a killed run and its resumption both count.
A stage DVC skipped keeps the file of its last run here; a stage never run in this workspace
(its outputs pulled from a remote) has none, and the run then states no pipeline total.
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

#: Where each stage's last finished run is timed (gitignored; no DVC out).
TIMINGS = Path(".seqcore/timings")
#: The MLflow metrics of clock time (the audit never compares them).
TIME_PREFIX = "time/"
#: The pipeline's summed wall time: the MLflow run's Duration.
PIPELINE_WALL = f"{TIME_PREFIX}pipeline_s"
_STARTED = time.monotonic()


@dataclass(frozen=True)
class StageTime:
    """Seconds one stage took: wall clock and CPU (user + system, children included)."""

    wall_s: float
    cpu_s: float

    def __add__(self, other: StageTime) -> StageTime:
        return StageTime(self.wall_s + other.wall_s, self.cpu_s + other.cpu_s)

    def as_json(self) -> dict[str, float]:
        return {"wall_s": round(self.wall_s, 3), "cpu_s": round(self.cpu_s, 3)}

    @classmethod
    def read(cls, path: Path) -> StageTime | None:
        """The timing in ``path``; None when it is missing or unreadable (timing is never
        worth stopping a stage for)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(float(data["wall_s"]), float(data["cpu_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self.as_json(), sort_keys=True) + "\n", encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass


def process_age() -> float:
    """Seconds since this process started (Linux: /proc, so interpreter start-up counts and
    a forked child counts from its fork); elsewhere since this module was imported."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
        # fields after the command name (which may hold spaces): starttime is the 20th
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _STARTED


def elapsed() -> StageTime:
    """This process so far: its wall time, and the CPU time of the process and of every
    child it waited for."""
    own, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                      resource.RUSAGE_CHILDREN))
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return StageTime(process_age(), cpu)


def stage_file(stage: str, root: Path = Path()) -> Path:
    return root / TIMINGS / f"{stage}.json"


def training_clock(folder: str, root: Path = Path()) -> Path:
    """The running time of the training in checkpoint folder ``folder`` (kept beside the
    stage timings, not in the folder: a resumed run's checkpoints keep their bytes)."""
    return root / TIMINGS / "training" / f"{folder}.json"


def record_stage(stage: str, spent: StageTime | None = None) -> None:
    """Write the stage's timing (``spent``, else this process so far)."""
    (spent or elapsed()).write(stage_file(stage))


def pipeline_metrics(stages: list[str], current: str) -> dict[str, float]:
    """``time/<stage>_s`` for each timed stage (``current``: this process so far), with
    ``time/pipeline_s`` and ``time/pipeline_cpu_s`` when every stage in ``stages`` is
    timed."""
    times = {s: elapsed() if s == current else StageTime.read(stage_file(s)) for s in stages}
    out = {f"{TIME_PREFIX}{s}_s": round(t.wall_s, 3) for s, t in times.items() if t is not None}
    if all(t is not None for t in times.values()):
        total = sum((t for t in times.values() if t is not None), StageTime(0.0, 0.0))
        out |= {PIPELINE_WALL: round(total.wall_s, 3),
                f"{TIME_PREFIX}pipeline_cpu_s": round(total.cpu_s, 3)}
    return out
