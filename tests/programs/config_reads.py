"""Every stage run in one process, recording the params each reads (test_declared_reads.py).

    python -m tests.programs.config_reads STAGE...   # in a repository copy

Records the leaf fields read on the tree ``load_config`` returns (indexed by object id ->
dotted prefix), not on config objects built elsewhere (the model file's own ModelConfig) nor
in the params checks. The stages run unchanged; the last line printed is {stage: [keys]}.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
import sys
from pathlib import Path
from typing import Any

import seqcore.config as C

FIELDS = {cls: {f.name for f in dataclasses.fields(cls)} for cls in vars(C).values()
          if isinstance(cls, type) and dataclasses.is_dataclass(cls)}
prefixes: dict[int, str] = {}
reads: set[str] = set()
alive: list[object] = []  # an id is unique only while its object lives: keep each one alive


def index(obj: object, prefix: str) -> None:
    """Remember ``obj`` and the config objects below it by id, with their dotted prefixes."""
    alive.append(obj)
    prefixes[id(obj)] = prefix
    for name in FIELDS[type(obj)]:
        value = object.__getattribute__(obj, name)
        if type(value) in FIELDS:
            index(value, f"{prefix}{name}.")


def recording_getattribute(self: object, name: str) -> Any:
    value = object.__getattribute__(self, name)
    prefix = prefixes.get(id(self))
    if prefix is not None and name in FIELDS[type(self)] and type(value) not in FIELDS:
        reads.add(prefix + name)
    return value


def main(stages: list[str]) -> None:
    for cls in FIELDS:
        cls.__getattribute__ = recording_getattribute  # type: ignore[method-assign]
    real_load = C.load_config

    def load_config(path: str | Path) -> C.Config:
        cfg = real_load(path)
        index(cfg, "")
        return cfg

    C.load_config = load_config
    # The params checks make no output: the loader's run before indexing; the task's own
    # (seqcore.tasks.task_checked, issue 50) are not recorded either. Imported once the
    # loader is patched, as the stages are.
    import seqcore.tasks as T  # noqa: PLC0415 (after the patch above)

    real_checked = T.task_checked

    def task_checked(cfg: C.Config, source: str) -> Any:
        before = set(reads)
        checked = real_checked(cfg, source)
        reads.intersection_update(before)
        return checked

    T.task_checked = task_checked
    out = {}
    for stage in stages:
        reads.clear()
        sys.argv = [f"pipeline/{stage}.py"]
        runpy.run_module(f"pipeline.{stage}", run_name="__main__", alter_sys=True)
        out[stage] = sorted(reads)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
