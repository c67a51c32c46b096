"""Stage validate: load and check the whole params.yaml (keys, types, ranges, cross-field rules).

dvc.yaml makes the whole file this stage's parameter dependency, so any edit of params.yaml
(an added key such as a typo'd ``train.lrr`` included) re-runs it even when no other stage
reads the edited key, and a bad file stops ``dvc repro`` with one line and exit status 2.
"""

from __future__ import annotations

import sys

from pipeline.stage import load


def main() -> None:
    load(__doc__)
    print("[validate] params ok", file=sys.stderr)


if __name__ == "__main__":
    main()
