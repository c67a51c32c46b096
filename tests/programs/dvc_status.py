"""`dvc status` after each change of params.yaml, in one process (test_staleness.py).

    python -m tests.programs.dvc_status PARAMS CASES_JSON   # CASES_JSON: {dotted key: value}

DVC is imported once; each case writes PARAMS with that one key changed and asks DVC which
stages are stale; PARAMS is written back at the end. The last line printed is {key: [stale
stages]} as JSON, "" for the file as it was.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from dvc.repo import Repo


def stale_stages() -> list[str]:
    with Repo(".") as repo:
        return sorted({name.rsplit(":", 1)[-1] for name in repo.status()})


def main(params: Path, cases: dict[str, Any]) -> None:
    original = params.read_text(encoding="utf-8")
    tree = yaml.safe_load(original)
    out = {"": stale_stages()}
    for key, value in cases.items():
        changed = json.loads(json.dumps(tree))
        *parents, leaf = key.split(".")
        node = functools.reduce(lambda node, part: node.setdefault(part, {}), parents, changed)
        node[leaf] = value
        params.write_text(yaml.safe_dump(changed, sort_keys=False), encoding="utf-8")
        out[key] = stale_stages()
    params.write_text(original, encoding="utf-8")
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]))
