"""Learning-rate schedules (seqcore/training/schedule.py) at their edges."""

from __future__ import annotations

import pytest

from seqcore.training.schedule import learning_rate


def test_cosine_decay_of_one_step_ends_at_zero_and_stays_there() -> None:
    # warmup 4, total 5: step 5 is the whole decay (progress 1): lr 0; and past the end too
    assert learning_rate(4, "cosine", 1.0, 4, 5, 64) == 1.0
    assert learning_rate(5, "cosine", 1.0, 4, 5, 64) == pytest.approx(0.0, abs=1e-15)
    assert learning_rate(9, "cosine", 1.0, 4, 5, 64) == pytest.approx(0.0, abs=1e-15)
    # half-way through a 4-step decay: 0.5 * (1 + cos(pi / 2)) = 0.5
    assert learning_rate(6, "cosine", 1.0, 4, 8, 64) == pytest.approx(0.5)
