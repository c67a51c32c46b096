"""tools/relock.py (issue 50): a re-lock names every out whose bytes moved."""

from __future__ import annotations

import sys

from tests.factories import REPO

sys.path.insert(0, str(REPO / "tools"))
from relock import changed, outs  # noqa: E402 (tools/ is no package)

LOCK = {"stages": {"decode": {"outs": [{"path": "predictions", "md5": "a.dir"}]},
                   "evaluate": {"deps": [{"path": "predictions", "md5": "a.dir"}],
                                "outs": [{"path": "reports/metrics.json", "md5": "m1"}]},
                   "validate": {"cmd": "python -m pipeline.validate"}}}


def test_a_relock_finds_each_out_that_moved_appeared_or_went() -> None:
    assert outs(LOCK) == {"decode:predictions": "a.dir", "evaluate:reports/metrics.json": "m1"}
    same = outs(LOCK)
    assert changed(same, dict(same)) == []
    moved = same | {"evaluate:reports/metrics.json": "m2"}
    assert changed(same, moved) == ["evaluate:reports/metrics.json"]
    grown = same | {"decode:predictions/test.model.jsonl": "x"}
    assert changed(same, grown) == ["decode:predictions/test.model.jsonl"]
    assert changed(grown, same) == ["decode:predictions/test.model.jsonl"]
