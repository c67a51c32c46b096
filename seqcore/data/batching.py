"""Batch order for the pair tasks: length-bucketed batches (the lm task's parallel streams are
seqcore.tasks.lm.streams).

BucketSampler: length-bucketed batches with a seeded shuffle whose whole state is
(epoch, cursor).

Each epoch's order is a pure function of (seed, epoch), so the sampler's checkpointed state
is two integers plus the seed, and a resumed run replays exactly the same batches.

Multi-process training shards the one global stream of batches (epoch after epoch): of every
``world`` consecutive batches rank r takes the r-th. Every rank keeps the same global state,
so the union of the shards is the single-process stream, every example is seen once per epoch
across ranks, and W ranks with ``accum_steps`` a draw the batches that one process with
``accum_steps`` W*a draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplerState:
    """Where the sampler is: the epoch and the index of the next batch in it."""

    epoch: int = 0
    cursor: int = 0


def epoch_batches(
    lengths: list[int], batch_size: int, bucket_width: int, seed: int, epoch: int
) -> list[list[int]]:
    """The batches of one epoch, as lists of example indices.

    Examples are shuffled with a generator seeded from (seed, epoch), stably grouped by length
    bucket (``length // bucket_width``) so each batch holds similar lengths, cut into batches,
    and the batch order is shuffled again.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(len(lengths), generator=g).tolist()
    perm.sort(key=lambda i: lengths[i] // max(bucket_width, 1))  # stable: random within bucket
    batches = [perm[i : i + batch_size] for i in range(0, len(perm), batch_size)]
    order = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in order]


class BucketSampler:
    """Infinite stream of batches; ``state`` is checkpointed, ``load`` restores it.

    With ``world`` > 1, ``next`` returns rank ``rank``'s shard: the rank-th of the next
    ``world`` batches of the global stream (``state`` is the global position).
    """

    def __init__(self, lengths: list[int], batch_size: int, bucket_width: int, seed: int,
                 rank: int = 0, world: int = 1) -> None:
        if not lengths:
            raise ValueError("no training examples")
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world of {world}")
        self.lengths, self.batch_size, self.bucket_width, self.seed = (
            lengths, batch_size, bucket_width, seed)
        self.rank, self.world = rank, world
        self.state = SamplerState()
        self._batches = self._epoch(0)

    def _epoch(self, epoch: int) -> list[list[int]]:
        return epoch_batches(self.lengths, self.batch_size, self.bucket_width, self.seed, epoch)

    def load(self, state: SamplerState) -> None:
        self.state = state
        self._batches = self._epoch(state.epoch)

    def next(self) -> list[int]:
        """This rank's next batch of indices, advancing the global state by ``world`` batches."""
        mine: list[int] = []
        for r in range(self.world):
            batch = self._next_global()
            if r == self.rank:
                mine = batch
        return mine

    def _next_global(self) -> list[int]:
        if self.state.cursor >= len(self._batches):
            self.load(SamplerState(self.state.epoch + 1, 0))
        batch = self._batches[self.state.cursor]
        self.state = SamplerState(self.state.epoch, self.state.cursor + 1)
        return batch
