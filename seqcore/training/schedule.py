"""Learning-rate schedules as pure functions of the step (1-based)."""

from __future__ import annotations

import math
from typing import Literal

Schedule = Literal["noam", "constant", "cosine"]


def learning_rate(
    step: int, schedule: Schedule, lr: float, warmup: int, total: int, d_model: int
) -> float:
    """The learning rate at optimisation step ``step`` (>= 1).

    - noam (Vaswani et al. 2017, eq. 3): ``lr * d_model^-0.5 * min(step^-0.5,
      step * warmup^-1.5)``; here ``lr`` is the scale factor.
    - constant: linear warmup to ``lr``, then ``lr``.
    - cosine: linear warmup to ``lr``, then cosine decay to 0 at ``total``.
    """
    step = max(step, 1)
    if schedule == "noam":
        return lr * d_model**-0.5 * min(step**-0.5, step * max(warmup, 1) ** -1.5)
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if schedule == "constant":
        return lr
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def scheduled_sampling_probability(
    step: int, schedule: Literal["off", "linear", "exponential", "inverse_sigmoid"], k: float,
    cap: float,
) -> float:
    """Probability of feeding the model's own previous token at ``step`` (Bengio et al. 2015).

    The paper decays the teacher-forcing probability eps_i; we return ``1 - eps_i`` capped at
    ``cap``: linear ``step / k``; exponential ``1 - k**step`` (0 < k < 1); inverse sigmoid
    ``1 - k / (k + exp(step / k))``.
    """
    if schedule == "off":
        return 0.0
    if schedule == "linear":
        p = step / max(k, 1e-9)
    elif schedule == "exponential":
        p = 1.0 - k**step
    else:
        p = 1.0 - k / (k + math.exp(min(step / k, 700.0)))
    return min(max(p, 0.0), cap)
