"""Re-lock after a code change that must not change any output: ``make relock``.

Runs ``dvc repro`` (every stage whose declared code changed runs again; train resumes from
its last checkpoint when ``checkpoints/`` holds it), then compares every out of the new
dvc.lock with the one before, by DVC's md5. Exit status 0 when all are identical (the new
dvc.lock is then the one to commit: only its dependency hashes moved), 1 when some out
changed (each named; the old dvc.lock is kept as dvc.lock.before for review), so a re-lock
commit can say "every out identical" because this command proved it (issue 50).

    python tools/relock.py            # or: make relock
    python tools/relock.py --expect-change predictions reports/metrics.json
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def outs(lock: dict) -> dict[str, str]:
    """Every out of a parsed dvc.lock: ``stage:path`` -> md5."""
    return {f"{stage}:{o['path']}": o.get("md5", "") for stage, entry in
            (lock.get("stages") or {}).items() for o in entry.get("outs", [])}


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The outs whose md5 differs, or that one of the two locks lacks, in order."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect-change", nargs="*", default=[], metavar="PATH",
                        help="outs that are meant to change (their stage re-ran on purpose)")
    args = parser.parse_args()
    lock = REPO / "dvc.lock"
    before = outs(yaml.safe_load(lock.read_text()))
    shutil.copyfile(lock, REPO / "dvc.lock.before")
    start = time.monotonic()
    res = subprocess.run(["dvc", "repro"], cwd=REPO, check=False)
    if res.returncode != 0:
        sys.exit(f"relock: dvc repro failed (exit {res.returncode}); dvc.lock.before kept")
    moved = changed(before, outs(yaml.safe_load(lock.read_text())))
    unexpected = [k for k in moved if k.split(":", 1)[1] not in args.expect_change]
    took = time.monotonic() - start
    if unexpected:
        print(f"relock: {len(unexpected)} of {len(before)} outs changed: "
              f"{', '.join(unexpected)} (dvc.lock.before kept)", file=sys.stderr)
        sys.exit(1)
    (REPO / "dvc.lock.before").unlink()
    print(f"relock: dvc repro in {took:.0f} s; {len(before) - len(moved)} of {len(before)} outs "
          f"identical{', expected changes: ' + ', '.join(moved) if moved else ''}")


if __name__ == "__main__":
    main()
