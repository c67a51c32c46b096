"""Stage validate: load and check the whole params.yaml (keys, types, ranges, cross-field rules).

dvc.yaml makes the whole file this stage's parameter dependency, so any edit of params.yaml
(an added key such as a typo'd ``train.lrr`` included) re-runs it even when no other stage
reads the edited key, and a bad file stops ``dvc repro`` with one line and exit status 2.
It also checks what the workspace must hold (the user's data file) and what the CPU must
give (AVX2 for the portable CPU kernel profile), and warns, one line each,
about decode settings the chosen strategy ignores and settings known to work badly together
(label smoothing beside scheduled sampling above a small cap).
"""

from __future__ import annotations

import sys

from pipeline.stage import check_host, check_workspace, stage_main
from seqcore.config import Config
from seqcore.config_rules import risky_settings
from seqcore.tasks import ignored_settings


def main(cfg: Config) -> None:
    """The stage on the loaded params: the workspace and host checks, then the warnings."""
    check_workspace(cfg)
    check_host(cfg)
    for warning in ignored_settings(cfg) + risky_settings(cfg):
        print(f"[validate] warning: {warning}", file=sys.stderr)
    print("[validate] params ok", file=sys.stderr)


if __name__ == "__main__":
    stage_main("validate", __doc__, main)
