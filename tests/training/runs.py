"""What the loop and resume tests share: a run to its end, two runs compared, the batches drawn."""
from __future__ import annotations

import torch

from seqcore.training.loop import TrainLoop


def finish(loop: TrainLoop) -> TrainLoop:
    loop.run(lambda entry, tokens_per_s: None)
    return loop


def trained(loop: TrainLoop) -> TrainLoop:
    """``loop`` resumed from its folder (a fresh start if it is empty) and run to the end."""
    loop.resume()
    return finish(loop)


def log_text(run: TrainLoop) -> list[tuple[str, ...]]:
    """The history as the log's text (NaN dev losses and inf norms compare equal as text)."""
    return [tuple(map(repr, e.row())) for e in run.state.history]


def same_state(sa: dict[str, torch.Tensor], sb: dict[str, torch.Tensor]) -> bool:
    """The same tensor names, each bitwise equal."""
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return same_state(a.state_dict(), b.state_dict())


def assert_same_run(a: TrainLoop, b: TrainLoop) -> None:
    """The same log, as text, and bitwise the same weights."""
    assert log_text(a) == log_text(b)
    assert same_weights(a.model, b.model)


def record_batches(loop: TrainLoop) -> list[list[int]]:
    """The example indices of every batch the loop's sampler hands out from now on."""
    drawn: list[list[int]] = []
    sampler = loop.feed.sampler  # type: ignore[attr-defined]
    draw_next = sampler.next

    def recording() -> list[int]:
        drawn.append(draw_next())
        return drawn[-1]
    sampler.next = recording
    return drawn
